/*
 * concat: an aggregate window function whose accumulator owns heap memory,
 * to test the SDK's accumulator bookkeeping: custom encode/decode, `drop`
 * on every accumulator (also after a failure), no `merge`, and `open`.
 *
 * The accumulator is the values joined by the config's `separator`
 * (default ","), and how many records were added; the result is
 * "{key}[{start},{end}): {text} ({adds})". A value equal to config `fail_on`
 * fails `add`. concat_live() says how many accumulators exist (created or
 * decoded and not yet dropped).
 */
#include <stdlib.h>

#include "weir.h"

typedef struct {
    char *text; /* malloc'd, or NULL when empty */
    size_t len;
    uint64_t adds;
} concat_t;

static weir_buf_t separator;
static weir_buf_t fail_on;
static bool fails;
static long live;

long concat_live(void);
long concat_live(void) { return live; }

static bool concat_open(const weir_open_context_t *ctx) {
    weir_bytes_t value;
    weir_buf_free(&separator);
    weir_buf_free(&fail_on);
    separator = weir_buf_copy(weir_config_get(ctx, "separator", &value) ? value : weir_cstr(","));
    fails = weir_config_get(ctx, "fail_on", &value);
    if (fails) {
        fail_on = weir_buf_copy(value);
    }
    return true;
}

static bool concat_create(void *acc) {
    (void)acc; /* zeroed: empty */
    live++;
    return true;
}

static void append(concat_t *c, weir_bytes_t b) {
    if (b.len == 0) {
        return;
    }
    c->text = realloc(c->text, c->len + b.len);
    if (c->text == NULL) {
        abort();
    }
    memcpy(c->text + c->len, b.ptr, b.len);
    c->len += b.len;
}

static bool concat_add(void *acc, const weir_record_t *record) {
    concat_t *c = acc;
    if (fails && weir_bytes_eq(record->value, weir_buf_bytes(&fail_on))) {
        return weir_failf("concat: asked to fail at `%.*s`", (int)record->value.len, (const char *)record->value.ptr);
    }
    if (c->adds > 0) {
        append(c, weir_buf_bytes(&separator));
    }
    append(c, record->value);
    c->adds++;
    return true;
}

static bool concat_result(weir_bytes_t key, weir_window_t window, const void *acc, weir_batch_builder_t *out) {
    const concat_t *c = acc;
    weir_builder_append(out, key);
    weir_builder_append_byte(out, '[');
    weir_builder_append_i64(out, window.start);
    weir_builder_append_byte(out, ',');
    weir_builder_append_i64(out, window.end);
    weir_builder_append(out, weir_cstr("): "));
    weir_builder_append(out, (weir_bytes_t){(const uint8_t *)c->text, c->len});
    weir_builder_append(out, weir_cstr(" ("));
    weir_builder_append_u64(out, c->adds);
    weir_builder_append_byte(out, ')');
    return true;
}

/* Stored: adds as u64, then the text. */
static bool concat_encode(const void *acc, weir_batch_builder_t *out) {
    const concat_t *c = acc;
    weir_encode_u64(c->adds, weir_builder_extend(out, 8));
    weir_builder_append(out, (weir_bytes_t){(const uint8_t *)c->text, c->len});
    return true;
}

static bool concat_decode(weir_bytes_t bytes, void *acc) {
    concat_t *c = acc;
    if (bytes.len < 8) {
        return weir_failf("concat: a stored accumulator has at least 8 bytes, got %zu", bytes.len);
    }
    c->adds = weir_load_u64(bytes.ptr);
    append(c, (weir_bytes_t){bytes.ptr + 8, bytes.len - 8});
    live++;
    return true;
}

static void concat_drop(void *acc) {
    concat_t *c = acc;
    free(c->text);
    live--;
}

static const weir_aggregate_t CONCAT = {
    .acc_size = sizeof(concat_t),
    .create = concat_create,
    .add = concat_add,
    .get_result = concat_result,
    .encode = concat_encode,
    .decode = concat_decode,
    .drop = concat_drop,
};

const weir_operator_t weir_operator = {
    .name = "concat",
    .version = "0.1.0",
    .keyed = true, /* ignored: a window function is not keyed itself */
    .open = concat_open,
    .aggregate = &CONCAT,
};
