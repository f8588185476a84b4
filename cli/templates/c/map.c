/*
 * {{name}}: a map operator that uppercases each record's value (ASCII
 * letters; other bytes pass through).
 *
 * `weir build` compiles src/ (*.c) with clang to wasm32-wasi and wraps it
 * into a component; `make test` runs test/ natively.
 */
#include <stdint.h>

#include "weir.h"

static bool uppercase(const weir_record_t *record, weir_ctx_t *ctx) {
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, record->timestamp, record->has_key ? &record->key : NULL);
    uint8_t *value = weir_builder_extend(out, record->value.len);
    for (size_t i = 0; i < record->value.len; i++) {
        uint8_t c = record->value.ptr[i];
        value[i] = (c >= 'a' && c <= 'z') ? (uint8_t)(c - 'a' + 'A') : c;
    }
    weir_builder_end(out);
    return true;
}

const weir_operator_t weir_operator = {
    .name = "{{id}}",
    .version = "0.1.0",
    .keyed = false,
    .process_element = uppercase,
};
