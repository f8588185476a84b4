/*
 * weir.c: the C SDK's runtime. Implements the WIT `operator` exports (see
 * bindings/operator.h, generated) and the `migration` export on top of the
 * author's `weir_operator`, and the helpers declared in weir.h.
 *
 * Ownership at the boundary (wit-bindgen's C conventions): arguments of an
 * exported function are owned by the callee, so every input (batch, timer
 * key, open context) is freed here after the callback; returned lists and
 * strings are freed by the generated post-return functions, which free a
 * pointer only when its length is non-zero, so an empty output column must
 * be passed as NULL (builder_take). Arguments of an imported function
 * are borrowed; what an import returns is owned by the caller.
 */
#include "weir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "operator.h"

/* ------------------------------------------------------------- helpers */

static void *xrealloc(void *ptr, size_t size) {
    void *p = realloc(ptr, size);
    if (p == NULL && size != 0) {
        abort(); /* out of linear memory: the host reports `out of memory` */
    }
    return p;
}

static operator_list_u8_t as_list(weir_bytes_t b) {
    operator_list_u8_t list = {(uint8_t *)b.ptr, b.len};
    return list;
}

static bool cstr_eq(const operator_string_t *s, const char *c) {
    size_t n = strlen(c);
    return s->len == n && memcmp(s->ptr, c, n) == 0;
}

/* Own helpers rather than the generated free and dup helpers, so that the
 * native test host (weir_test.c) need only implement the WIT imports. */

static operator_string_t borrow_str(const char *s) {
    operator_string_t str = {(uint8_t *)s, strlen(s)};
    return str;
}

/* A malloc'd copy; empty strings stay unallocated (post-return frees only len > 0). */
static operator_string_t dup_str(const char *s) {
    operator_string_t str = {NULL, strlen(s)};
    if (str.len != 0) {
        str.ptr = xrealloc(NULL, str.len);
        memcpy(str.ptr, s, str.len);
    }
    return str;
}

/* Frees what the generated glue allocated for a list or string (only when non-empty). */
static void free_owned(void *ptr, size_t len) {
    if (len != 0) {
        free(ptr);
    }
}

/* Bytes from the host are allocated only when non-empty: an empty list's
 * pointer is the canonical ABI's dangling `align`, which must not be freed. */
void weir_buf_free(weir_buf_t *buf) {
    free_owned(buf->ptr, buf->len);
    buf->ptr = NULL;
    buf->len = 0;
}

weir_buf_t weir_buf_alloc(size_t len) {
    weir_buf_t buf = {NULL, len};
    if (len != 0) {
        buf.ptr = xrealloc(NULL, len);
    }
    return buf;
}

weir_buf_t weir_buf_copy(weir_bytes_t bytes) {
    weir_buf_t buf = weir_buf_alloc(bytes.len);
    if (bytes.len != 0) {
        memcpy(buf.ptr, bytes.ptr, bytes.len);
    }
    return buf;
}

void weir_buf_list_free(weir_buf_list_t *list) {
    for (size_t i = 0; i < list->len; i++) {
        free_owned(list->items[i].ptr, list->items[i].len);
    }
    free_owned(list->items, list->len);
    list->items = NULL;
    list->len = 0;
}

static void free_state_error(weir_operator_state_state_error_t *e) {
    if (e->tag == WEIR_OPERATOR_STATE_STATE_ERROR_BACKEND) {
        free_owned(e->val.backend.ptr, e->val.backend.len);
    }
}

static void free_batch(weir_operator_types_batch_t *b) {
    free_owned(b->timestamps.ptr, b->timestamps.len);
    free_owned(b->key_lens.ptr, b->key_lens.len);
    free_owned(b->value_lens.ptr, b->value_lens.len);
    free_owned(b->data.ptr, b->data.len);
}

static void free_open_context(weir_operator_types_open_context_t *ctx) {
    free_owned(ctx->operator_id.ptr, ctx->operator_id.len);
    for (size_t i = 0; i < ctx->config.len; i++) {
        free_owned(ctx->config.ptr[i].f0.ptr, ctx->config.ptr[i].f0.len);
        free_owned(ctx->config.ptr[i].f1.ptr, ctx->config.ptr[i].f1.len);
    }
    free_owned(ctx->config.ptr, ctx->config.len);
}

/* -------------------------------------------------------------- errors */

/* The current call's error message (malloc'd), handed to the host as `err`. */
static char *error_message;
static size_t error_len;

static void set_error(char *message, size_t len) {
    free(error_message);
    error_message = message;
    error_len = len;
}

bool weir_fail(const char *message) {
    size_t len = strlen(message);
    char *copy = xrealloc(NULL, len + 1);
    memcpy(copy, message, len + 1);
    set_error(copy, len);
    return false;
}

bool weir_failf(const char *format, ...) {
    char small[256];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(small, sizeof(small), format, args);
    va_end(args);
    if (n < 0) {
        return weir_fail(format);
    }
    char *message = xrealloc(NULL, (size_t)n + 1);
    if ((size_t)n < sizeof(small)) {
        memcpy(message, small, (size_t)n + 1);
    } else {
        va_start(args, format);
        vsnprintf(message, (size_t)n + 1, format, args);
        va_end(args);
    }
    set_error(message, (size_t)n);
    return false;
}

/* Moves the error message into `err`; a callback that returned false
 * without weir_fail gets a generic one. */
static void take_error(operator_string_t *err, const char *callback) {
    if (error_message == NULL) {
        weir_failf("%s failed without a message (call weir_fail)", callback);
    }
    err->ptr = (uint8_t *)error_message;
    err->len = error_len;
    /* A zero-length message would leak (post-return frees only len > 0). */
    if (error_len == 0) {
        free(error_message);
        *err = borrow_str("");
    }
    error_message = NULL;
    error_len = 0;
}

/* Fails with `state `<name>`: <what the host said>`, as the Rust SDK does. */
static bool state_fail(weir_state_id_t state, weir_operator_state_state_error_t *e) {
    const char *name = state < weir_operator.num_states ? weir_operator.states[state].name : "?";
    switch (e->tag) {
    case WEIR_OPERATOR_STATE_STATE_ERROR_UNKNOWN_STATE:
        weir_failf("state `%s`: the host knows no state with id %u", name, (unsigned)e->val.unknown_state);
        break;
    case WEIR_OPERATOR_STATE_STATE_ERROR_WRONG_KIND:
        weir_failf("state `%s`: state id %u is of another kind on the host", name, (unsigned)e->val.wrong_kind);
        break;
    case WEIR_OPERATOR_STATE_STATE_ERROR_KEY_OUT_OF_RANGE:
        weir_failf("state `%s`: the key belongs to a key group this subtask does not own", name);
        break;
    default:
        weir_failf("state `%s`: %.*s", name, (int)e->val.backend.len, (const char *)e->val.backend.ptr);
        break;
    }
    free_state_error(e);
    return false;
}

static bool timer_fail(weir_operator_timers_state_error_t *e) {
    switch (e->tag) {
    case WEIR_OPERATOR_STATE_STATE_ERROR_KEY_OUT_OF_RANGE:
        weir_fail("timer: the key belongs to a key group this subtask does not own");
        break;
    case WEIR_OPERATOR_STATE_STATE_ERROR_BACKEND:
        weir_failf("timer: %.*s", (int)e->val.backend.len, (const char *)e->val.backend.ptr);
        break;
    default:
        weir_fail("timer: the host refused the timer");
        break;
    }
    free_state_error(e);
    return false;
}

/* ------------------------------------------------------- batch builder */

void weir_builder_reserve(weir_batch_builder_t *b, size_t records, size_t bytes) {
    if (b->cap - b->len < records) {
        size_t cap = b->cap * 2;
        if (cap < b->len + records) {
            cap = b->len + records;
        }
        if (cap < 16) {
            cap = 16;
        }
        b->timestamps = xrealloc(b->timestamps, cap * sizeof(int64_t));
        b->key_lens = xrealloc(b->key_lens, cap * sizeof(int32_t));
        b->value_lens = xrealloc(b->value_lens, cap * sizeof(uint32_t));
        b->cap = cap;
    }
    if (b->data_cap - b->data_len < bytes) {
        size_t cap = b->data_cap * 2;
        if (cap < b->data_len + bytes) {
            cap = b->data_len + bytes;
        }
        if (cap < 256) {
            cap = 256;
        }
        b->data = xrealloc(b->data, cap);
        b->data_cap = cap;
    }
}

static void append_raw(weir_batch_builder_t *b, const uint8_t *p, size_t n) {
    weir_builder_reserve(b, 0, n);
    if (n != 0) {
        memcpy(b->data + b->data_len, p, n);
    }
    b->data_len += n;
}

void weir_builder_begin(weir_batch_builder_t *b, int64_t timestamp, const weir_bytes_t *key) {
    if (b->value_start != SIZE_MAX) {
        weir_builder_end(b); /* forgiving: an unended record is ended here */
    }
    weir_builder_reserve(b, 1, key != NULL ? key->len : 0);
    b->timestamps[b->len] = timestamp;
    if (key != NULL) {
        b->key_lens[b->len] = (int32_t)key->len;
        append_raw(b, key->ptr, key->len);
    } else {
        b->key_lens[b->len] = -1;
    }
    b->value_start = b->data_len;
}

void weir_builder_append(weir_batch_builder_t *b, weir_bytes_t bytes) {
    append_raw(b, bytes.ptr, bytes.len);
}

void weir_builder_append_byte(weir_batch_builder_t *b, uint8_t byte) {
    weir_builder_reserve(b, 0, 1);
    b->data[b->data_len++] = byte;
}

void weir_builder_append_u64(weir_batch_builder_t *b, uint64_t n) {
    uint8_t digits[20];
    size_t i = sizeof(digits);
    do {
        digits[--i] = (uint8_t)('0' + n % 10);
        n /= 10;
    } while (n != 0);
    append_raw(b, digits + i, sizeof(digits) - i);
}

void weir_builder_append_i64(weir_batch_builder_t *b, int64_t n) {
    if (n < 0) {
        weir_builder_append_byte(b, '-');
        weir_builder_append_u64(b, (uint64_t)0 - (uint64_t)n);
    } else {
        weir_builder_append_u64(b, (uint64_t)n);
    }
}

uint8_t *weir_builder_extend(weir_batch_builder_t *b, size_t n) {
    weir_builder_reserve(b, 0, n);
    uint8_t *p = b->data + b->data_len;
    b->data_len += n;
    return p;
}

void weir_builder_end(weir_batch_builder_t *b) {
    if (b->value_start == SIZE_MAX) {
        return;
    }
    b->value_lens[b->len] = (uint32_t)(b->data_len - b->value_start);
    b->len++;
    b->value_start = SIZE_MAX;
}

void weir_builder_push(weir_batch_builder_t *b, int64_t timestamp, const weir_bytes_t *key,
                       weir_bytes_t value) {
    weir_builder_reserve(b, 1, (key != NULL ? key->len : 0) + value.len);
    weir_builder_begin(b, timestamp, key);
    append_raw(b, value.ptr, value.len);
    weir_builder_end(b);
}

void weir_builder_free(weir_batch_builder_t *b) {
    free(b->timestamps);
    free(b->key_lens);
    free(b->value_lens);
    free(b->data);
    weir_batch_builder_t empty = WEIR_BATCH_BUILDER_INIT;
    *b = empty;
}

/* Moves the builder's columns into a WIT batch (empty columns as NULL:
 * post-return frees only non-empty lists) and resets the builder. */
static void builder_take(weir_batch_builder_t *b, weir_operator_types_batch_t *out) {
    weir_builder_end(b);
    if (b->len == 0) {
        free(b->timestamps);
        free(b->key_lens);
        free(b->value_lens);
        b->timestamps = NULL;
        b->key_lens = NULL;
        b->value_lens = NULL;
    }
    if (b->data_len == 0) {
        free(b->data);
        b->data = NULL;
    }
    out->timestamps.ptr = b->timestamps;
    out->timestamps.len = b->len;
    out->key_lens.ptr = b->key_lens;
    out->key_lens.len = b->len;
    out->value_lens.ptr = b->value_lens;
    out->value_lens.len = b->len;
    out->data.ptr = b->data;
    out->data.len = b->data_len;
    weir_batch_builder_t empty = WEIR_BATCH_BUILDER_INIT;
    *b = empty;
}

/* ---------------------------------------------------- contexts, output */

struct weir_open_context {
    const weir_operator_types_open_context_t *wit;
};

weir_bytes_t weir_open_operator_id(const weir_open_context_t *ctx) {
    weir_bytes_t b = {ctx->wit->operator_id.ptr, ctx->wit->operator_id.len};
    return b;
}

uint32_t weir_open_subtask_index(const weir_open_context_t *ctx) { return ctx->wit->subtask_index; }
uint32_t weir_open_parallelism(const weir_open_context_t *ctx) { return ctx->wit->parallelism; }
uint32_t weir_open_max_parallelism(const weir_open_context_t *ctx) { return ctx->wit->max_parallelism; }

bool weir_config_get(const weir_open_context_t *ctx, const char *name, weir_bytes_t *value) {
    const operator_list_tuple2_string_string_t *config = &ctx->wit->config;
    for (size_t i = 0; i < config->len; i++) {
        if (cstr_eq(&config->ptr[i].f0, name)) {
            value->ptr = config->ptr[i].f1.ptr;
            value->len = config->ptr[i].f1.len;
            return true;
        }
    }
    return false;
}

typedef struct {
    char *tag; /* malloc'd, NUL-terminated */
    weir_batch_builder_t records;
} side_builder_t;

struct weir_ctx {
    weir_bytes_t key;
    int64_t timestamp;
    weir_batch_builder_t main;
    side_builder_t *side;
    size_t side_len, side_cap;
};

/* One context, reused by every call: the instance is called sequentially. */
static weir_ctx_t the_ctx = {{NULL, 0}, 0, WEIR_BATCH_BUILDER_INIT, NULL, 0, 0};

/* Output sizes of the previous `process`: the next one reserves as much up front. */
static size_t last_records, last_bytes;

static weir_ctx_t *begin_call(weir_bytes_t key, int64_t timestamp) {
    set_error(NULL, 0); /* a message set by a callback that then succeeded is stale */
    weir_ctx_t *ctx = &the_ctx;
    ctx->key = key;
    ctx->timestamp = timestamp;
    return ctx;
}

static void end_call(weir_ctx_t *ctx, weir_operator_types_emitted_t *ret) {
    builder_take(&ctx->main, &ret->main);
    ret->side.ptr = NULL;
    ret->side.len = 0;
    if (ctx->side_len != 0) {
        weir_operator_types_side_output_t *side =
            xrealloc(NULL, ctx->side_len * sizeof(weir_operator_types_side_output_t));
        for (size_t i = 0; i < ctx->side_len; i++) {
            side[i].tag.ptr = (uint8_t *)ctx->side[i].tag;
            side[i].tag.len = strlen(ctx->side[i].tag);
            if (side[i].tag.len == 0) { /* post-return frees only non-empty strings */
                free(side[i].tag.ptr);
                side[i].tag.ptr = NULL;
            }
            builder_take(&ctx->side[i].records, &side[i].records);
        }
        ret->side.ptr = side;
        ret->side.len = ctx->side_len;
        free(ctx->side);
        ctx->side = NULL;
        ctx->side_len = ctx->side_cap = 0;
    }
    ctx->key.ptr = NULL;
    ctx->key.len = 0;
}

/* Drops whatever a failed call emitted. */
static void abort_call(weir_ctx_t *ctx) {
    weir_builder_free(&ctx->main);
    for (size_t i = 0; i < ctx->side_len; i++) {
        free(ctx->side[i].tag);
        weir_builder_free(&ctx->side[i].records);
    }
    free(ctx->side);
    ctx->side = NULL;
    ctx->side_len = ctx->side_cap = 0;
    ctx->key.ptr = NULL;
    ctx->key.len = 0;
}

weir_bytes_t weir_ctx_key(const weir_ctx_t *ctx) { return ctx->key; }
int64_t weir_ctx_timestamp(const weir_ctx_t *ctx) { return ctx->timestamp; }
void weir_ctx_set_key(weir_ctx_t *ctx, weir_bytes_t key) { ctx->key = key; }
weir_batch_builder_t *weir_ctx_out(weir_ctx_t *ctx) { return &ctx->main; }

weir_batch_builder_t *weir_ctx_side(weir_ctx_t *ctx, const char *tag) {
    for (size_t i = 0; i < ctx->side_len; i++) {
        if (strcmp(ctx->side[i].tag, tag) == 0) {
            return &ctx->side[i].records;
        }
    }
    if (ctx->side_len == ctx->side_cap) {
        ctx->side_cap = ctx->side_cap == 0 ? 4 : ctx->side_cap * 2;
        ctx->side = xrealloc(ctx->side, ctx->side_cap * sizeof(side_builder_t));
    }
    side_builder_t *s = &ctx->side[ctx->side_len++];
    size_t n = strlen(tag);
    s->tag = xrealloc(NULL, n + 1);
    memcpy(s->tag, tag, n + 1);
    weir_batch_builder_t empty = WEIR_BATCH_BUILDER_INIT;
    s->records = empty;
    return &s->records;
}

void weir_emit(weir_ctx_t *ctx, const weir_bytes_t *key, weir_bytes_t value) {
    weir_builder_push(&ctx->main, ctx->timestamp, key, value);
}

void weir_emit_side(weir_ctx_t *ctx, const char *tag, const weir_bytes_t *key, weir_bytes_t value) {
    weir_builder_push(weir_ctx_side(ctx, tag), ctx->timestamp, key, value);
}

/* ------------------------------------------------------- state, timers */

int weir_value_get(weir_ctx_t *ctx, weir_state_id_t state, weir_buf_t *value) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_option_list_u8_t ret;
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_value_get(state, &key, &ret, &err)) {
        state_fail(state, &err);
        return -1;
    }
    if (!ret.is_some) {
        return 0;
    }
    value->ptr = ret.val.ptr;
    value->len = ret.val.len;
    return 1;
}

bool weir_value_set(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t value) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_list_u8_t v = as_list(value);
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_value_set(state, &key, &v, &err)) {
        return state_fail(state, &err);
    }
    return true;
}

/* Reads a fixed-width value of `width` bytes into `out`. */
static int value_get_fixed(weir_ctx_t *ctx, weir_state_id_t state, const char *type, size_t width,
                           uint8_t *out) {
    weir_buf_t buf;
    int found = weir_value_get(ctx, state, &buf);
    if (found != 1) {
        return found;
    }
    if (buf.len != width) {
        const char *name = state < weir_operator.num_states ? weir_operator.states[state].name : "?";
        weir_failf("state `%s`: cannot decode %s: expected %zu bytes, got %zu", name, type, width,
                   buf.len);
        weir_buf_free(&buf);
        return -1;
    }
    memcpy(out, buf.ptr, width);
    weir_buf_free(&buf);
    return 1;
}

int weir_value_get_u64(weir_ctx_t *ctx, weir_state_id_t state, uint64_t *value) {
    uint8_t bytes[8];
    int found = value_get_fixed(ctx, state, "u64", 8, bytes);
    if (found == 1) {
        *value = weir_load_u64(bytes);
    }
    return found;
}

bool weir_value_set_u64(weir_ctx_t *ctx, weir_state_id_t state, uint64_t value) {
    uint8_t bytes[8];
    weir_encode_u64(value, bytes);
    weir_bytes_t b = {bytes, 8};
    return weir_value_set(ctx, state, b);
}

int weir_value_get_i64(weir_ctx_t *ctx, weir_state_id_t state, int64_t *value) {
    uint8_t bytes[8];
    int found = value_get_fixed(ctx, state, "i64", 8, bytes);
    if (found == 1) {
        *value = (int64_t)weir_load_u64(bytes);
    }
    return found;
}

bool weir_value_set_i64(weir_ctx_t *ctx, weir_state_id_t state, int64_t value) {
    return weir_value_set_u64(ctx, state, (uint64_t)value);
}

int weir_value_get_f64(weir_ctx_t *ctx, weir_state_id_t state, double *value) {
    uint8_t bytes[8];
    int found = value_get_fixed(ctx, state, "f64", 8, bytes);
    if (found == 1) {
        weir_bytes_t b = {bytes, 8};
        weir_decode_f64(b, value);
    }
    return found;
}

bool weir_value_set_f64(weir_ctx_t *ctx, weir_state_id_t state, double value) {
    uint8_t bytes[8];
    weir_encode_f64(value, bytes);
    weir_bytes_t b = {bytes, 8};
    return weir_value_set(ctx, state, b);
}

bool weir_list_get(weir_ctx_t *ctx, weir_state_id_t state, weir_buf_list_t *elements) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_list_list_u8_t ret;
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_list_get(state, &key, &ret, &err)) {
        return state_fail(state, &err);
    }
    /* operator_list_u8_t and weir_buf_t have the same layout, but say so. */
    _Static_assert(sizeof(operator_list_u8_t) == sizeof(weir_buf_t), "weir_buf_t layout");
    elements->items = (weir_buf_t *)ret.ptr;
    elements->len = ret.len;
    return true;
}

bool weir_list_add(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t element) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_list_u8_t e = as_list(element);
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_list_add(state, &key, &e, &err)) {
        return state_fail(state, &err);
    }
    return true;
}

int weir_map_get(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t user_key, weir_buf_t *value) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_list_u8_t uk = as_list(user_key);
    operator_option_list_u8_t ret;
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_map_get(state, &key, &uk, &ret, &err)) {
        state_fail(state, &err);
        return -1;
    }
    if (!ret.is_some) {
        return 0;
    }
    value->ptr = ret.val.ptr;
    value->len = ret.val.len;
    return 1;
}

bool weir_map_put(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t user_key, weir_bytes_t value) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_list_u8_t uk = as_list(user_key);
    operator_list_u8_t v = as_list(value);
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_map_put(state, &key, &uk, &v, &err)) {
        return state_fail(state, &err);
    }
    return true;
}

bool weir_map_remove(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t user_key) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_list_u8_t uk = as_list(user_key);
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_map_remove(state, &key, &uk, &err)) {
        return state_fail(state, &err);
    }
    return true;
}

bool weir_map_entries(weir_ctx_t *ctx, weir_state_id_t state, weir_buf_list_t *keys,
                      weir_buf_list_t *values) {
    operator_list_u8_t key = as_list(ctx->key);
    operator_list_tuple2_list_u8_list_u8_t ret;
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_map_entries(state, &key, &ret, &err)) {
        return state_fail(state, &err);
    }
    keys->len = values->len = ret.len;
    keys->items = ret.len != 0 ? xrealloc(NULL, ret.len * sizeof(weir_buf_t)) : NULL;
    values->items = ret.len != 0 ? xrealloc(NULL, ret.len * sizeof(weir_buf_t)) : NULL;
    for (size_t i = 0; i < ret.len; i++) {
        keys->items[i].ptr = ret.ptr[i].f0.ptr;
        keys->items[i].len = ret.ptr[i].f0.len;
        values->items[i].ptr = ret.ptr[i].f1.ptr;
        values->items[i].len = ret.ptr[i].f1.len;
    }
    free_owned(ret.ptr, ret.len);
    return true;
}

bool weir_state_clear(weir_ctx_t *ctx, weir_state_id_t state) {
    operator_list_u8_t key = as_list(ctx->key);
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_clear(state, &key, &err)) {
        return state_fail(state, &err);
    }
    return true;
}

bool weir_register_event_timer(weir_ctx_t *ctx, int64_t time) {
    operator_list_u8_t key = as_list(ctx->key);
    weir_operator_timers_state_error_t err;
    if (!weir_operator_timers_register_event_timer(&key, time, &err)) {
        return timer_fail(&err);
    }
    return true;
}

bool weir_delete_event_timer(weir_ctx_t *ctx, int64_t time) {
    operator_list_u8_t key = as_list(ctx->key);
    weir_operator_timers_state_error_t err;
    if (!weir_operator_timers_delete_event_timer(&key, time, &err)) {
        return timer_fail(&err);
    }
    return true;
}

int64_t weir_current_watermark(void) { return weir_operator_timers_current_watermark(); }

/* ------------------------------------------------------- log, metrics */

void weir_log(weir_log_level_t level, const char *message) {
    operator_string_t s = borrow_str(message);
    weir_operator_log_log((weir_operator_log_level_t)level, &s);
}

void weir_counter_add(const char *name, uint64_t delta) {
    operator_string_t s = borrow_str(name);
    weir_operator_metrics_counter_add(&s, delta);
}

void weir_gauge_set(const char *name, double value) {
    operator_string_t s = borrow_str(name);
    weir_operator_metrics_gauge_set(&s, value);
}

/* ---------------------------------------------------- the WIT exports */

/* Set by a successful `open`: every other call before it is an error. */
static bool opened;

void exports_weir_operator_operator_describe(exports_weir_operator_operator_operator_info_t *ret) {
    const weir_operator_t *op = &weir_operator;
    /* Post-return frees every string and list: hand over copies. */
    ret->name = dup_str(op->name != NULL ? op->name : "");
    ret->version = dup_str(op->version != NULL ? op->version : "");
    ret->keyed = op->keyed;
    ret->states.len = op->num_states;
    ret->states.ptr = NULL;
    if (op->num_states != 0) {
        ret->states.ptr = xrealloc(NULL, op->num_states * sizeof(weir_operator_types_state_descriptor_t));
        for (size_t i = 0; i < op->num_states; i++) {
            weir_operator_types_state_descriptor_t *d = &ret->states.ptr[i];
            d->name = dup_str(op->states[i].name);
            d->kind = (weir_operator_types_state_kind_t)op->states[i].kind;
            d->ttl_ms.is_some = op->states[i].ttl_ms != 0;
            d->ttl_ms.val = op->states[i].ttl_ms;
        }
    }
}

bool exports_weir_operator_operator_open(exports_weir_operator_operator_open_context_t *wit_ctx,
                                         operator_string_t *err) {
    bool ok = true;
    set_error(NULL, 0);
    if (weir_operator.process_element == NULL && weir_operator.process_batch == NULL) {
        ok = weir_fail("weir_operator defines neither process_element nor process_batch");
    } else if (weir_operator.open != NULL) {
        weir_open_context_t ctx = {wit_ctx};
        ok = weir_operator.open(&ctx);
    }
    free_open_context(wit_ctx);
    if (!ok) {
        take_error(err, "open");
        return false;
    }
    opened = true;
    return true;
}

static bool not_opened(operator_string_t *err) {
    weir_fail("operator called before a successful `open`");
    take_error(err, "open");
    return false;
}

/* Ends a call: hands the output over on success, the error on failure. */
static bool finish_call(weir_ctx_t *ctx, bool ok, const char *callback,
                        exports_weir_operator_operator_emitted_t *ret, operator_string_t *err) {
    if (!ok) {
        abort_call(ctx);
        take_error(err, callback);
        return false;
    }
    end_call(ctx, ret);
    return true;
}

bool exports_weir_operator_operator_process(exports_weir_operator_operator_batch_t *input,
                                            exports_weir_operator_operator_emitted_t *ret,
                                            operator_string_t *err) {
    if (!opened) {
        free_batch(input);
        return not_opened(err);
    }
    weir_batch_view_t view = {
        input->timestamps.len, input->timestamps.ptr, input->key_lens.ptr,
        input->value_lens.ptr, input->data.ptr,       input->data.len,
    };
    weir_ctx_t *ctx = begin_call((weir_bytes_t){NULL, 0}, 0);
    if (last_records != 0) {
        weir_builder_reserve(&ctx->main, last_records, last_bytes);
    }
    bool ok = true;
    if (input->key_lens.len != view.len || input->value_lens.len != view.len) {
        ok = weir_fail("malformed batch: the columns differ in length");
    } else if (weir_operator.process_batch != NULL) {
        ok = weir_operator.process_batch(&view, ctx);
    } else {
        weir_batch_iter_t it = weir_batch_iter(&view);
        weir_record_t record;
        int more = 0;
        while (ok && (more = weir_batch_next(&it, &record)) == 1) {
            if (weir_operator.keyed && !record.has_key) {
                ok = weir_failf("record %zu of the batch has no key, but this operator runs on a "
                                "keyed stream",
                                it.index - 1);
                break;
            }
            ctx->key = record.key;
            ctx->timestamp = record.timestamp;
            ok = weir_operator.process_element(&record, ctx);
        }
        if (ok && more < 0) {
            ok = weir_failf("malformed batch at record %zu", it.index);
        }
    }
    last_records = ctx->main.len;
    last_bytes = ctx->main.data_len;
    bool done = finish_call(ctx, ok, "process", ret, err);
    free_batch(input);
    return done;
}

bool exports_weir_operator_operator_on_timer(operator_list_u8_t *key,
                                             exports_weir_operator_operator_timestamp_t time,
                                             exports_weir_operator_operator_emitted_t *ret,
                                             operator_string_t *err) {
    if (!opened) {
        free_owned(key->ptr, key->len);
        return not_opened(err);
    }
    weir_ctx_t *ctx = begin_call((weir_bytes_t){key->ptr, key->len}, time);
    bool ok = weir_operator.on_timer != NULL ? weir_operator.on_timer(time, ctx) : true;
    bool done = finish_call(ctx, ok, "on_timer", ret, err);
    free_owned(key->ptr, key->len);
    return done;
}

bool exports_weir_operator_operator_on_watermark(exports_weir_operator_operator_timestamp_t watermark,
                                                 exports_weir_operator_operator_emitted_t *ret,
                                                 operator_string_t *err) {
    if (!opened) {
        return not_opened(err);
    }
    weir_ctx_t *ctx = begin_call((weir_bytes_t){NULL, 0}, watermark);
    bool ok = weir_operator.on_watermark != NULL ? weir_operator.on_watermark(watermark, ctx) : true;
    return finish_call(ctx, ok, "on_watermark", ret, err);
}

bool exports_weir_operator_operator_close(exports_weir_operator_operator_emitted_t *ret,
                                          operator_string_t *err) {
    if (!opened) {
        return not_opened(err);
    }
    weir_ctx_t *ctx = begin_call((weir_bytes_t){NULL, 0}, INT64_MAX);
    bool ok = weir_operator.close != NULL ? weir_operator.close(ctx) : true;
    return finish_call(ctx, ok, "close", ret, err);
}

/* ------------------------------------------------- the migration export */

/*
 * The WIT `migration` interface of the world `stream-operator-with-migration`.
 *
 * Declared in bindings/operator.h (wit-bindgen 0.60, the conventions of
 * the `operator` exports above).
 */

/* The state's migration, or the bytes as they are: for a state without a
 * `migrate` function, or one this operator does not declare. Needs no
 * `open`: the host calls it on a fresh instance, before `open`. */
bool exports_weir_operator_migration_migrate_state(operator_string_t *state, operator_string_t *from_version,
                                                   operator_list_u8_t *old, operator_list_u8_t *ret,
                                                   operator_string_t *err) {
    weir_migrate_fn migrate = NULL;
    for (size_t i = 0; i < weir_operator.num_states; i++) {
        if (cstr_eq(state, weir_operator.states[i].name)) {
            migrate = weir_operator.states[i].migrate;
            break;
        }
    }
    bool ok = true;
    if (migrate == NULL) {
        *ret = *old; /* handed back as it is; post-return frees it */
    } else {
        set_error(NULL, 0);
        weir_bytes_t version = {from_version->ptr, from_version->len};
        weir_bytes_t bytes = {old->ptr, old->len};
        weir_buf_t migrated = {NULL, 0};
        ok = migrate(version, bytes, &migrated);
        if (ok) {
            if (migrated.len == 0) { /* post-return frees only non-empty lists */
                if (migrated.ptr != old->ptr) {
                    free(migrated.ptr);
                }
                migrated.ptr = NULL;
            }
            ret->ptr = migrated.ptr;
            ret->len = migrated.len;
        } else {
            if (migrated.ptr != old->ptr) {
                free(migrated.ptr);
            }
            /* The callback's message, prefixed as the Rust SDK does. */
            char *why = error_message;
            size_t why_len = error_len;
            error_message = NULL;
            error_len = 0;
            static const char silent[] = "failed without a message (call weir_fail)";
            weir_failf("migrating state `%.*s` from version %.*s: %.*s", (int)state->len,
                       (const char *)state->ptr, (int)from_version->len, (const char *)from_version->ptr,
                       why != NULL ? (int)why_len : (int)(sizeof(silent) - 1), why != NULL ? why : silent);
            free(why);
            take_error(err, "migrate");
        }
        /* A migration that returned `old` itself (not a copy) hands it over. */
        if (!ok || ret->ptr != old->ptr) {
            free_owned(old->ptr, old->len);
        }
    }
    free_owned(state->ptr, state->len);
    free_owned(from_version->ptr, from_version->len);
    return ok;
}
