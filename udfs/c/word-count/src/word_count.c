/*
 * word-count, in C: counts records per key (the word).
 *
 * Value state `count` (u64, little-endian: the shared encoding, so the Rust
 * counter's state reads the same). Config `emit`: "final" (default)
 * registers an event-time timer at INT64_MAX the first time a key is seen
 * and emits the count when it fires (the host's final watermark at the end
 * of bounded input); "updates" emits the new count on every record.
 * Output: key = the word, value = "{word}\t{count}", byte for byte what
 * udfs/word-count (Rust) emits.
 */
#include <stdint.h>

#include "weir.h"

enum { COUNT };

static const weir_state_descriptor_t STATES[] = {
    [COUNT] = WEIR_VALUE_STATE("count"),
};

static bool emit_updates;

static bool count_open(const weir_open_context_t *ctx) {
    weir_bytes_t emit;
    if (!weir_config_get(ctx, "emit", &emit) || weir_bytes_eq_cstr(emit, "final")) {
        emit_updates = false;
    } else if (weir_bytes_eq_cstr(emit, "updates")) {
        emit_updates = true;
    } else {
        return weir_failf("config `emit`: expected `final` or `updates`, got `%.*s`",
                          (int)emit.len, (const char *)emit.ptr);
    }
    return true;
}

/* Emits "{word}\t{count}" keyed by the word, written straight into the output buffer. */
static void emit(weir_ctx_t *ctx, uint64_t count, int64_t timestamp) {
    weir_bytes_t word = weir_ctx_key(ctx);
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, timestamp, &word);
    weir_builder_append(out, word);
    weir_builder_append_byte(out, '\t');
    weir_builder_append_u64(out, count);
    weir_builder_end(out);
}

static bool count_element(const weir_record_t *record, weir_ctx_t *ctx) {
    uint64_t count = 0;
    int found = weir_value_get_u64(ctx, COUNT, &count);
    if (found < 0) {
        return false;
    }
    count++;
    if (!weir_value_set_u64(ctx, COUNT, count)) {
        return false;
    }
    if (emit_updates) {
        emit(ctx, count, record->timestamp);
    } else if (!found) {
        return weir_register_event_timer(ctx, INT64_MAX);
    }
    return true;
}

static bool count_on_timer(int64_t time, weir_ctx_t *ctx) {
    uint64_t count;
    int found = weir_value_get_u64(ctx, COUNT, &count);
    if (found < 0) {
        return false;
    }
    if (found) {
        emit(ctx, count, time);
    }
    return true;
}

const weir_operator_t weir_operator = {
    .name = "word-count",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .open = count_open,
    .process_element = count_element,
    .on_timer = count_on_timer,
};
