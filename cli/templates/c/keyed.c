/*
 * {{name}}: a keyed operator that counts records per key in value state
 * and emits "{key}\t{count}" for every record.
 *
 * `weir build` compiles src/ (*.c) with clang to wasm32-wasi and wraps it
 * into a component; `make test` runs test/ natively.
 */
#include <stdint.h>

#include "weir.h"

enum { COUNT };

/* Declared up front so the host creates the storage. */
static const weir_state_descriptor_t STATES[] = {
    [COUNT] = WEIR_VALUE_STATE("count"),
};

static bool count(const weir_record_t *record, weir_ctx_t *ctx) {
    uint64_t n = 0;
    /* Scoped to the record's key; a u64 is stored as 8 bytes little-endian,
     * as every Weir SDK stores it. */
    if (weir_value_get_u64(ctx, COUNT, &n) < 0) {
        return false;
    }
    n++;
    if (!weir_value_set_u64(ctx, COUNT, n)) {
        return false;
    }
    weir_bytes_t key = weir_ctx_key(ctx);
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, record->timestamp, &key);
    weir_builder_append(out, key);
    weir_builder_append_byte(out, '\t');
    weir_builder_append_u64(out, n);
    weir_builder_end(out);
    return true;
}

const weir_operator_t weir_operator = {
    .name = "{{id}}",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .process_element = count,
};
