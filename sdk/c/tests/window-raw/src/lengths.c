/*
 * lengths: the smallest aggregate window function, on the SDK's defaults:
 * no `create` (a new accumulator is zeroed), no `encode`/`decode` (the
 * accumulator, a plain struct, is stored as its bytes), a `merge`. It sums
 * the records' value lengths and counts them; the result is "{count}
 * records, {bytes} bytes". Written with WEIR_AGGREGATE.
 */
#include "weir.h"

typedef struct {
    uint64_t records;
    uint64_t bytes;
} lengths_t;

static bool lengths_add(void *acc, const weir_record_t *record) {
    lengths_t *l = acc;
    l->records++;
    l->bytes += record->value.len;
    return true;
}

static bool lengths_merge(void *acc, const void *other) {
    lengths_t *l = acc;
    const lengths_t *o = other;
    l->records += o->records;
    l->bytes += o->bytes;
    return true;
}

static bool lengths_result(weir_bytes_t key, weir_window_t window, const void *acc, weir_batch_builder_t *out) {
    (void)key;
    (void)window;
    const lengths_t *l = acc;
    weir_builder_append_u64(out, l->records);
    weir_builder_append(out, weir_cstr(" records, "));
    weir_builder_append_u64(out, l->bytes);
    weir_builder_append(out, weir_cstr(" bytes"));
    return true;
}

static const weir_aggregate_t LENGTHS = {
    .acc_size = sizeof(lengths_t),
    .add = lengths_add,
    .merge = lengths_merge,
    .get_result = lengths_result,
};

const weir_operator_t weir_operator = WEIR_AGGREGATE("lengths", "1.0.0", &LENGTHS);
