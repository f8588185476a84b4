/*
 * features: an operator that touches every part of the C SDK, so one job
 * run (features.toml) and one native test check them all against the host
 * and against weir_test.c.
 *
 * Keyed by the whole line. Per record: appends the value to list state
 * `seen`, counts it in map state `by-value` (u64 values), sets value state
 * `last` (f64), and emits the record on side output `seen`. On the final
 * timer (INT64_MAX, registered per key) it emits
 * "{key} list: {seen...} map: {value}={count}... i64:{-1234567890123}",
 * clears `seen`, and checks it is empty. `close` emits how many watermarks
 * it saw (as "close watermarks>0:{0|1}"). Config `fail` = "process" makes
 * `process` fail, to check the error path.
 */
#include "weir.h"

enum { SEEN, BY_VALUE, LAST };

static const weir_state_descriptor_t STATES[] = {
    [SEEN] = WEIR_LIST_STATE("seen"),
    [BY_VALUE] = WEIR_MAP_STATE("by-value"),
    [LAST] = WEIR_VALUE_STATE("last"),
};

static uint64_t watermarks;
static bool fail_process;

static bool features_open(const weir_open_context_t *ctx) {
    weir_bytes_t fail;
    fail_process = weir_config_get(ctx, "fail", &fail) && weir_bytes_eq_cstr(fail, "process");
    return true;
}

static bool features_element(const weir_record_t *record, weir_ctx_t *ctx) {
    if (fail_process) {
        return weir_failf("asked to fail at `%.*s`", (int)record->value.len, (const char *)record->value.ptr);
    }
    if (!weir_list_add(ctx, SEEN, record->value)) {
        return false;
    }
    weir_buf_t old;
    uint64_t n = 0;
    int found = weir_map_get(ctx, BY_VALUE, record->value, &old);
    if (found < 0) {
        return false;
    }
    if (found) {
        bool ok = weir_decode_u64(weir_buf_bytes(&old), &n);
        weir_buf_free(&old);
        if (!ok) {
            return weir_fail("by-value: not a u64");
        }
    }
    uint8_t count[8];
    weir_encode_u64(n + 1, count);
    if (!weir_map_put(ctx, BY_VALUE, record->value, (weir_bytes_t){count, sizeof(count)}) ||
        !weir_value_set_f64(ctx, LAST, 1.5)) {
        return false;
    }
    weir_bytes_t key = weir_ctx_key(ctx);
    weir_emit_side(ctx, "seen", &key, record->value);
    weir_emit_side(ctx, "unconsumed", NULL, weir_cstr("")); /* no edge: the host drops it */
    return weir_register_event_timer(ctx, INT64_MAX);
}

static bool features_on_timer(int64_t time, weir_ctx_t *ctx) {
    (void)time;
    weir_buf_list_t seen, keys, values;
    if (!weir_list_get(ctx, SEEN, &seen)) {
        return false;
    }
    if (!weir_map_entries(ctx, BY_VALUE, &keys, &values)) {
        weir_buf_list_free(&seen);
        return false;
    }
    double last;
    if (weir_value_get_f64(ctx, LAST, &last) != 1 || last != 1.5) {
        return weir_fail("last: f64 did not round-trip");
    }

    weir_bytes_t key = weir_ctx_key(ctx);
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, weir_ctx_timestamp(ctx), &key);
    weir_builder_append(out, key);
    weir_builder_append(out, weir_cstr(" list:"));
    for (size_t i = 0; i < seen.len; i++) {
        weir_builder_append_byte(out, ' ');
        weir_builder_append(out, weir_buf_bytes(&seen.items[i]));
    }
    weir_builder_append(out, weir_cstr(" map:"));
    for (size_t i = 0; i < keys.len; i++) {
        uint64_t n = 0;
        weir_decode_u64(weir_buf_bytes(&values.items[i]), &n);
        weir_builder_append_byte(out, ' ');
        weir_builder_append(out, weir_buf_bytes(&keys.items[i]));
        weir_builder_append_byte(out, '=');
        weir_builder_append_u64(out, n);
    }
    weir_builder_append(out, weir_cstr(" i64:"));
    weir_builder_append_i64(out, -1234567890123LL);
    weir_builder_end(out);
    weir_buf_list_free(&seen);
    weir_buf_list_free(&keys);
    weir_buf_list_free(&values);

    if (!weir_state_clear(ctx, SEEN) || !weir_list_get(ctx, SEEN, &seen)) {
        return false;
    }
    size_t left = seen.len;
    weir_buf_list_free(&seen);
    if (left != 0) {
        return weir_fail("seen: clear left elements");
    }
    weir_log(WEIR_LOG_INFO, "timer fired");
    weir_counter_add("timers", 1);
    weir_gauge_set("last-watermark-seen", (double)weir_current_watermark());
    return true;
}

static bool features_on_watermark(int64_t watermark, weir_ctx_t *ctx) {
    (void)watermark;
    (void)ctx;
    watermarks++;
    return true;
}

static bool features_close(weir_ctx_t *ctx) {
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, 0, NULL);
    weir_builder_append(out, weir_cstr("close watermarks>0:"));
    weir_builder_append_u64(out, watermarks > 0);
    weir_builder_end(out);
    return true;
}

const weir_operator_t weir_operator = {
    .name = "features",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .open = features_open,
    .process_element = features_element,
    .on_timer = features_on_timer,
    .on_watermark = features_on_watermark,
    .close = features_close,
};
