/*
 * idle-alert in C: processing-time timers (contract 0.1.2), the twin of
 * udfs/idle-alert (Rust). Config `timeout_ms` (required, at least 1).
 * Every record of a key pushes the key's deadline to `now + timeout_ms` of
 * wall-clock time (the previous deadline's timer is deleted); when a
 * deadline passes without a newer record, the operator emits one record
 * "{key}\tidle" (key = the key, timestamp = the deadline) and forgets the
 * key. The deadline lives in value state `deadline`.
 *
 * It has one input: the SDK tests also check here what a one-input,
 * non-window operator answers to `process-input` and to `window-function`.
 */
#include "weir.h"

enum { DEADLINE };

static const weir_state_descriptor_t STATES[] = {
    [DEADLINE] = WEIR_VALUE_STATE("deadline"),
};

static int64_t timeout;

static bool idle_open(const weir_open_context_t *ctx) {
    weir_bytes_t value;
    if (!weir_config_get(ctx, "timeout_ms", &value) || !weir_parse_i64(value, &timeout) || timeout < 1) {
        return weir_fail("config `timeout_ms` is required and must be at least 1");
    }
    return true;
}

static bool idle_element(const weir_record_t *record, weir_ctx_t *ctx) {
    (void)record;
    int64_t previous;
    int found = weir_value_get_i64(ctx, DEADLINE, &previous);
    if (found < 0 || (found && !weir_delete_processing_timer(ctx, previous))) {
        return false;
    }
    int64_t deadline = weir_current_processing_time() + timeout;
    return weir_register_processing_timer(ctx, deadline) && weir_value_set_i64(ctx, DEADLINE, deadline);
}

static bool idle_on_processing_timer(int64_t time, weir_ctx_t *ctx) {
    int64_t deadline;
    int found = weir_value_get_i64(ctx, DEADLINE, &deadline);
    if (found < 0) {
        return false;
    }
    if (!found || deadline != time) {
        return true;
    }
    if (!weir_state_clear(ctx, DEADLINE)) {
        return false;
    }
    weir_bytes_t key = weir_ctx_key(ctx);
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, time, &key);
    weir_builder_append(out, key);
    weir_builder_append(out, weir_cstr("\tidle"));
    weir_builder_end(out);
    return true;
}

const weir_operator_t weir_operator = {
    .name = "idle-alert",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .open = idle_open,
    .process_element = idle_element,
    .on_processing_timer = idle_on_processing_timer,
};
