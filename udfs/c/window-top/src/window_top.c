/*
 * window-top: a process-window function (Flink's ProcessWindowFunction) in
 * C, for an `[[operator]]` with a `window` table and this module.
 *
 * When a window fires it gets all the window's records (values: decimal
 * integers as text, surrounding whitespace allowed) and emits one record,
 * key = the window's key, value
 *
 *   {"key":"<key>","start":S,"end":E,"count":C,"top":[a,b,c]}
 *
 * with the up to 3 largest values in descending order (duplicates kept:
 * [5,5,3]); the host gives it the timestamp end - 1. The same bytes as
 * every other SDK's window-top. A value that is not an integer fails the
 * task with a message naming it (`value "one" is not a decimal integer`).
 */
#include "weir.h"

enum { TOP = 3 };

static void field(weir_batch_builder_t *out, const char *name, int64_t value) {
    weir_builder_append(out, weir_cstr(name));
    weir_builder_append_i64(out, value);
}

static bool top_window(weir_bytes_t key, weir_window_t window, const weir_record_t *records, size_t len,
                       weir_ctx_t *ctx) {
    int64_t top[TOP];
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        int64_t x;
        if (!weir_parse_i64(records[i].value, &x)) {
            return weir_failf("value \"%.*s\" is not a decimal integer", (int)records[i].value.len,
                              (const char *)records[i].value.ptr);
        }
        /* Insert x into the descending top list; after an equal value, so
         * duplicates stay. */
        size_t at = n;
        while (at > 0 && top[at - 1] < x) {
            at--;
        }
        if (at == TOP) {
            continue;
        }
        for (size_t j = (n < TOP ? n : TOP - 1); j > at; j--) {
            top[j] = top[j - 1];
        }
        top[at] = x;
        if (n < TOP) {
            n++;
        }
    }
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, weir_ctx_timestamp(ctx), &key);
    weir_builder_append(out, weir_cstr("{\"key\":"));
    weir_builder_append_json_string(out, key);
    field(out, ",\"start\":", window.start);
    field(out, ",\"end\":", window.end);
    field(out, ",\"count\":", (int64_t)len);
    weir_builder_append(out, weir_cstr(",\"top\":["));
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            weir_builder_append_byte(out, ',');
        }
        weir_builder_append_i64(out, top[i]);
    }
    weir_builder_append(out, weir_cstr("]}"));
    weir_builder_end(out);
    return true;
}

const weir_operator_t weir_operator = WEIR_PROCESS_WINDOW("window-top", "0.1.0", top_window);
