/*
 * window-stats: an aggregate window function (Flink's AggregateFunction) in
 * C, for an `[[operator]]` with a `window` table and this module.
 *
 * Per key and window it keeps count, sum, min and max of the records'
 * values (decimal integers as text, surrounding whitespace allowed) and
 * emits, when the window fires,
 *
 *   {"key":"<key>","start":S,"end":E,"count":C,"sum":X,"min":M,"max":N}
 *
 * (the key as a JSON string, invalid UTF-8 replaced), the same bytes as
 * every other SDK's window-stats. A value that is not an integer fails the
 * task with a message naming it (`value "12x" is not a decimal integer`,
 * as in Rust); the sum wraps around at 64 bits, as the Rust one's does.
 */
#include "weir.h"

typedef struct {
    int64_t count, sum, min, max;
} stats_t;

/* The stored accumulator: the four fields as i64, little-endian (weir.h's
 * state value encoding), in that order. */
enum { STATS_BYTES = 32 };

static bool stats_create(void *acc) {
    stats_t *s = acc;
    s->count = 0;
    s->sum = 0;
    s->min = INT64_MAX;
    s->max = INT64_MIN;
    return true;
}

/* sum + x, wrapping around at 64 bits (two's complement). */
static int64_t wrapping_add(int64_t sum, int64_t x) { return (int64_t)((uint64_t)sum + (uint64_t)x); }

static bool stats_add(void *acc, const weir_record_t *record) {
    stats_t *s = acc;
    int64_t x;
    if (!weir_parse_i64(record->value, &x)) {
        return weir_failf("value \"%.*s\" is not a decimal integer", (int)record->value.len,
                          (const char *)record->value.ptr);
    }
    s->count++;
    if (x < s->min) {
        s->min = x;
    }
    if (x > s->max) {
        s->max = x;
    }
    s->sum = wrapping_add(s->sum, x);
    return true;
}

static bool stats_merge(void *acc, const void *other) {
    stats_t *s = acc;
    const stats_t *o = other;
    s->count += o->count;
    if (o->min < s->min) {
        s->min = o->min;
    }
    if (o->max > s->max) {
        s->max = o->max;
    }
    s->sum = wrapping_add(s->sum, o->sum);
    return true;
}

static void field(weir_batch_builder_t *out, const char *name, int64_t value) {
    weir_builder_append(out, weir_cstr(name));
    weir_builder_append_i64(out, value);
}

static bool stats_result(weir_bytes_t key, weir_window_t window, const void *acc, weir_batch_builder_t *out) {
    const stats_t *s = acc;
    weir_builder_append(out, weir_cstr("{\"key\":"));
    weir_builder_append_json_string(out, key);
    field(out, ",\"start\":", window.start);
    field(out, ",\"end\":", window.end);
    field(out, ",\"count\":", s->count);
    field(out, ",\"sum\":", s->sum);
    field(out, ",\"min\":", s->min);
    field(out, ",\"max\":", s->max);
    weir_builder_append_byte(out, '}');
    return true;
}

static bool stats_encode(const void *acc, weir_batch_builder_t *out) {
    const stats_t *s = acc;
    uint8_t *p = weir_builder_extend(out, STATS_BYTES);
    weir_encode_i64(s->count, p);
    weir_encode_i64(s->sum, p + 8);
    weir_encode_i64(s->min, p + 16);
    weir_encode_i64(s->max, p + 24);
    return true;
}

static bool stats_decode(weir_bytes_t bytes, void *acc) {
    stats_t *s = acc;
    if (bytes.len != STATS_BYTES) {
        return weir_failf("cannot decode Stats: expected %d bytes, got %zu", STATS_BYTES, bytes.len);
    }
    s->count = (int64_t)weir_load_u64(bytes.ptr);
    s->sum = (int64_t)weir_load_u64(bytes.ptr + 8);
    s->min = (int64_t)weir_load_u64(bytes.ptr + 16);
    s->max = (int64_t)weir_load_u64(bytes.ptr + 24);
    return true;
}

static const weir_aggregate_t STATS = {
    .acc_size = sizeof(stats_t),
    .create = stats_create,
    .add = stats_add,
    .merge = stats_merge,
    .get_result = stats_result,
    .encode = stats_encode,
    .decode = stats_decode,
};

const weir_operator_t weir_operator = WEIR_AGGREGATE("window-stats", "0.1.0", &STATS);
