/*
 * echo-window: a process-window function that uses the whole context: it
 * emits every record of the window on side output `each` (key and value as
 * they came) and then one summary on the main output, key = the window's
 * key, value "{key} {start}..{end}: {n} records at {timestamp}" where
 * timestamp is the context's (end - 1). Config `fail` = "yes" makes it fail
 * after emitting, to check that a failed call emits nothing.
 */
#include "weir.h"

static bool fail;

static bool echo_open(const weir_open_context_t *ctx) {
    weir_bytes_t value;
    fail = weir_config_get(ctx, "fail", &value) && weir_bytes_eq_cstr(value, "yes");
    return true;
}

static bool echo_window(weir_bytes_t key, weir_window_t window, const weir_record_t *records, size_t len,
                        weir_ctx_t *ctx) {
    for (size_t i = 0; i < len; i++) {
        weir_emit_side(ctx, "each", records[i].has_key ? &records[i].key : NULL, records[i].value);
    }
    if (!weir_bytes_eq(weir_ctx_key(ctx), key)) {
        return weir_fail("echo-window: the context's key is not the window's");
    }
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, weir_ctx_timestamp(ctx), &key);
    weir_builder_append(out, key);
    weir_builder_append_byte(out, ' ');
    weir_builder_append_i64(out, window.start);
    weir_builder_append(out, weir_cstr(".."));
    weir_builder_append_i64(out, window.end);
    weir_builder_append(out, weir_cstr(": "));
    weir_builder_append_u64(out, len);
    weir_builder_append(out, weir_cstr(" records at "));
    weir_builder_append_i64(out, weir_ctx_timestamp(ctx));
    weir_builder_end(out);
    if (fail) {
        return weir_fail("echo-window: asked to fail");
    }
    return true;
}

const weir_operator_t weir_operator = {
    .name = "echo-window",
    .version = "0.1.0",
    .open = echo_open,
    .process_window = echo_window,
};
