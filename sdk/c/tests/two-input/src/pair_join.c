/*
 * pair-join in C: a keyed co-process function (two inputs, contract
 * 0.1.1), the twin of udfs/pair-join (Rust) and udfs/python/pair-join.
 * Every left record with every right record of its key, each pair emitted
 * once when its later record arrives (timestamp: that record's), value
 * {"key":…,"left":…,"right":…} with the values embedded as they are (the
 * inputs are JSON). Each side waits in a list state; both inputs share
 * them. On the final watermark (an event-time timer per key, registered by
 * either input) it emits "{key}: {n} left, {m} right" on side output
 * `counts`. With config `processing_timer = "register"` a left record also
 * registers a processing-time timer at 0, which it has no callback for (to
 * test the SDK's answer).
 */
#include "weir.h"

enum { LEFT, RIGHT };

static const weir_state_descriptor_t STATES[] = {
    [LEFT] = WEIR_LIST_STATE("left"),
    [RIGHT] = WEIR_LIST_STATE("right"),
};

static bool register_processing_timer;

static bool join_open(const weir_open_context_t *ctx) {
    weir_bytes_t value;
    register_processing_timer =
        weir_config_get(ctx, "processing_timer", &value) && weir_bytes_eq_cstr(value, "register");
    return true;
}

static bool arrive(const weir_record_t *record, weir_ctx_t *ctx, weir_state_id_t mine, weir_state_id_t other) {
    weir_buf_list_t others;
    if (!weir_list_get(ctx, other, &others)) {
        return false;
    }
    weir_bytes_t key = weir_ctx_key(ctx);
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    for (size_t i = 0; i < others.len; i++) {
        weir_bytes_t o = weir_buf_bytes(&others.items[i]);
        weir_builder_begin(out, record->timestamp, &key);
        weir_builder_append(out, weir_cstr("{\"key\":"));
        weir_builder_append_json_string(out, key);
        weir_builder_append(out, weir_cstr(",\"left\":"));
        weir_builder_append(out, mine == LEFT ? record->value : o);
        weir_builder_append(out, weir_cstr(",\"right\":"));
        weir_builder_append(out, mine == LEFT ? o : record->value);
        weir_builder_append_byte(out, '}');
        weir_builder_end(out);
    }
    weir_buf_list_free(&others);
    return weir_list_add(ctx, mine, record->value) && weir_register_event_timer(ctx, INT64_MAX);
}

static bool left_element(const weir_record_t *record, weir_ctx_t *ctx) {
    return arrive(record, ctx, LEFT, RIGHT) && (!register_processing_timer || weir_register_processing_timer(ctx, 0));
}

static bool right_element(const weir_record_t *record, weir_ctx_t *ctx) { return arrive(record, ctx, RIGHT, LEFT); }

static bool join_on_timer(int64_t time, weir_ctx_t *ctx) {
    weir_buf_list_t left, right;
    if (!weir_list_get(ctx, LEFT, &left)) {
        return false;
    }
    if (!weir_list_get(ctx, RIGHT, &right)) {
        weir_buf_list_free(&left);
        return false;
    }
    weir_bytes_t key = weir_ctx_key(ctx);
    weir_batch_builder_t *side = weir_ctx_side(ctx, "counts");
    weir_builder_begin(side, time, &key);
    weir_builder_append(side, key);
    weir_builder_append(side, weir_cstr(": "));
    weir_builder_append_u64(side, left.len);
    weir_builder_append(side, weir_cstr(" left, "));
    weir_builder_append_u64(side, right.len);
    weir_builder_append(side, weir_cstr(" right"));
    weir_builder_end(side);
    weir_buf_list_free(&left);
    weir_buf_list_free(&right);
    return true;
}

const weir_operator_t weir_operator = {
    .name = "pair-join",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .open = join_open,
    .process_element = left_element,
    .process_element2 = right_element,
    .on_timer = join_on_timer,
};
