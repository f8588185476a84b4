/*
 * weir.c: the C SDK's runtime. Implements the WIT exports of the world
 * `window-operator` (see bindings/operator.h, generated): `operator`,
 * `migration`, `two-input`, `processing-time` and `window-function`, on top
 * of the author's `weir_operator`, and the helpers declared in weir.h.
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

/* A state's declared name, for messages. */
static const char *state_name(weir_state_id_t state) {
    return state < weir_operator.num_states ? weir_operator.states[state].name : "?";
}

/* Fails with `state `<name>`: <what the host said>`, as the Rust SDK does. */
static bool state_fail(weir_state_id_t state, weir_operator_state_state_error_t *e) {
    const char *name = state_name(state);
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

/* The length of the valid UTF-8 sequence at s[0..n) (n > 0), or 0 if it is
 * not one; then *bad is how many bytes the maximal invalid subpart has (the
 * bytes one U+FFFD replaces, as Rust's from_utf8_lossy counts them). */
static size_t utf8_sequence(const uint8_t *s, size_t n, size_t *bad) {
    uint8_t c = s[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) {
            lo = 0xA0;
        } else if (c == 0xED) {
            hi = 0x9F;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) {
            lo = 0x90;
        } else if (c == 0xF4) {
            hi = 0x8F;
        }
    } else {
        *bad = 1;
        return 0;
    }
    for (size_t i = 1; i < len; i++) {
        if (i >= n || s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) {
            *bad = i;
            return 0;
        }
    }
    return len;
}

void weir_builder_append_utf8_lossy(weir_batch_builder_t *b, weir_bytes_t s) {
    weir_builder_reserve(b, 0, s.len);
    size_t i = 0;
    while (i < s.len) {
        size_t ascii = i;
        while (ascii < s.len && s.ptr[ascii] < 0x80) {
            ascii++;
        }
        append_raw(b, s.ptr + i, ascii - i);
        i = ascii;
        if (i == s.len) {
            break;
        }
        size_t bad = 0;
        size_t len = utf8_sequence(s.ptr + i, s.len - i, &bad);
        if (len != 0) {
            append_raw(b, s.ptr + i, len);
            i += len;
        } else {
            append_raw(b, (const uint8_t *)"\xEF\xBF\xBD", 3); /* U+FFFD */
            i += bad;
        }
    }
}

void weir_builder_append_json_string(weir_batch_builder_t *b, weir_bytes_t s) {
    static const char hex[] = "0123456789abcdef";
    weir_builder_reserve(b, 0, s.len + 2);
    weir_builder_append_byte(b, '"');
    size_t i = 0;
    while (i < s.len) {
        uint8_t c = s.ptr[i];
        if (c >= 0x80) {
            size_t bad = 0;
            size_t len = utf8_sequence(s.ptr + i, s.len - i, &bad);
            if (len != 0) {
                append_raw(b, s.ptr + i, len);
                i += len;
            } else {
                append_raw(b, (const uint8_t *)"\xEF\xBF\xBD", 3); /* U+FFFD */
                i += bad;
            }
            continue;
        }
        i++;
        if (c == '"' || c == '\\') {
            weir_builder_append_byte(b, '\\');
            weir_builder_append_byte(b, c);
        } else if (c >= 0x20) {
            weir_builder_append_byte(b, c);
        } else {
            weir_builder_append_byte(b, '\\');
            switch (c) {
            case '\b': weir_builder_append_byte(b, 'b'); break;
            case '\f': weir_builder_append_byte(b, 'f'); break;
            case '\n': weir_builder_append_byte(b, 'n'); break;
            case '\r': weir_builder_append_byte(b, 'r'); break;
            case '\t': weir_builder_append_byte(b, 't'); break;
            default: {
                uint8_t *p = weir_builder_extend(b, 5);
                p[0] = 'u';
                p[1] = '0';
                p[2] = '0';
                p[3] = (uint8_t)hex[c >> 4];
                p[4] = (uint8_t)hex[c & 15];
            }
            }
        }
    }
    weir_builder_append_byte(b, '"');
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

/* ctx->key_index when there is no hint (see "the batch cache"), and what a
 * lookup returns for a key that is none of the batch's. */
#define KEY_UNRESOLVED SIZE_MAX
#define NOT_BATCH_KEY SIZE_MAX

struct weir_ctx {
    weir_bytes_t key;
    int64_t timestamp;
    weir_batch_builder_t main;
    side_builder_t *side;
    size_t side_len, side_cap;
    /* A hint: `key`'s index among the open batch cache's keys (set by the
     * element loop, and by a lookup), or KEY_UNRESOLVED. Checked before
     * use, as the key's bytes may have changed under the same pointer. */
    size_t key_index;
};

/* One context, reused by every call: the instance is called sequentially. */
static weir_ctx_t the_ctx = {{NULL, 0}, 0, WEIR_BATCH_BUILDER_INIT, NULL, 0, 0, KEY_UNRESOLVED};

/* Output sizes of the previous `process`: the next one reserves as much up front. */
static size_t last_records, last_bytes;

static weir_ctx_t *begin_call(weir_bytes_t key, int64_t timestamp) {
    set_error(NULL, 0); /* a message set by a callback that then succeeded is stale */
    weir_ctx_t *ctx = &the_ctx;
    ctx->key = key;
    ctx->key_index = KEY_UNRESOLVED;
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
void weir_ctx_set_key(weir_ctx_t *ctx, weir_bytes_t key) {
    ctx->key = key;
    ctx->key_index = KEY_UNRESOLVED; /* a batch key or not: the next state call looks it up */
}
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

/* ----------------------------------------------------- the batch cache */

/*
 * The batch cache of value states (contract 0.1.3: state.value-get-many and
 * value-set-many); the design of the Rust SDK's sdk/src/cache.rs.
 *
 * A keyed operator that declares a value state runs every input batch with
 * the cache open for the batch's distinct keys (process_input). The first
 * read of a value state in the batch reads that state for every key of the
 * batch in one `value-get-many`; reads, writes and clears of the batch's
 * keys are then served from memory (a write or clear marks the entry
 * changed; the fetch never overwrites an entry the batch already wrote).
 * Before `process` returns, also when the callback failed (as single calls
 * would have written them), every changed entry is written back with one
 * `value-set-many` per state (an absent value clears), so timers,
 * watermarks, checkpoints and `close`, which come in later host calls, see
 * them. Semantics stay Flink's per record: a record sees the updates of the
 * records before it, also of its own key in the same batch. A key outside
 * the batch (weir_ctx_set_key to another key), list and map state, and
 * every call outside `process` (timers, watermark, close) go to the host
 * directly.
 *
 * C knows each state's kind from weir_operator.states (the Rust and JS
 * SDKs do not), so, as in the Python SDK, a clear of a value state is
 * cached even before the batch read the state, and a value call on an id
 * that is not a declared value state goes to the host, which answers the
 * error at once rather than at the end of the batch.
 *
 * Memory: the keys point into the input batch (freed only after the cache
 * is closed); the values the host returned stay in the `data` buffer of its
 * answer; the values the batch writes go to a per-state arena (a new value
 * no longer than the one the batch wrote before for the key takes its
 * place, so a counter does not grow it). Buffers are kept from batch to
 * batch, but arenas grown over CACHE_KEEP_BYTES are freed.
 */

/* An arena larger than this is freed at the end of a batch, not kept. */
#define CACHE_KEEP_BYTES ((size_t)1 << 20)
/* The longest value or key `packed` carries: its lengths are s32. */
#define PACKED_MAX_LEN ((size_t)INT32_MAX)
/* The smallest key table (slots; always a power of two, at least twice the keys). */
#define CACHE_MIN_TABLE 16

/* What is known of one key's value in one state. */
enum { SLOT_UNKNOWN = 0, SLOT_CLEAN, SLOT_DIRTY };

typedef struct {
    uint8_t status;
    /* The value is in the state's arena (written by the batch), else in
     * the host's answer (`fetched`). */
    bool in_arena;
    /* The value's length; -1: none. */
    int32_t len;
    /* Where it starts in the arena or the host's answer. */
    size_t at;
} cache_slot_t;

/* One value state's entries in the current batch, by key index. */
typedef struct {
    cache_slot_t *slots;
    size_t slots_cap;
    /* Touched in this batch: `slots` hold its entries. */
    bool used;
    /* The host's answer to value-get-many (owned; NULL when empty). */
    uint8_t *fetched;
    size_t fetched_len;
    /* The values the batch wrote, back to back. */
    uint8_t *arena;
    size_t arena_len, arena_cap;
} state_cache_t;

/* Test-only (weir_test_set_batch_cache, weir_test.h): true makes every
 * value-state access a single host call, the path before contract 0.1.3,
 * so that a test can check the cache changes nothing but the calls. */
bool weir_batch_cache_off = false;

static struct {
    bool open;
    /* The batch's distinct keys (views into the batch), in first-seen order. */
    weir_bytes_t *keys;
    size_t num_keys, keys_cap;
    /* Per record: its key's index, or NOT_BATCH_KEY for a record without one. */
    size_t *record_key;
    size_t record_cap;
    /* Open addressing over `keys`: key index + 1, 0 for an empty slot;
     * `table_size` (a power of two) of the `table_cap` allocated are used. */
    uint32_t *table;
    size_t table_size, table_cap;
    /* One per declared state (allocated on the first batch), and the ids
     * used in this batch in the order of first use (flushed in that order,
     * as the Rust SDK does). */
    state_cache_t *states;
    weir_state_id_t *used;
    size_t num_used;
    /* The keys as `packed`, built by the batch's first fetch. */
    bool packed;
    int32_t *key_lens;
    size_t key_lens_cap;
    uint8_t *key_data;
    size_t key_data_len, key_data_cap;
    /* Scratch for value-set-many: the changed keys and their values. */
    int32_t *set_key_lens, *set_value_lens;
    size_t set_key_lens_cap, set_value_lens_cap;
    uint8_t *set_key_data, *set_value_data;
    size_t set_key_cap, set_value_cap;
} cache;

/* `buf` (`*cap` elements of `size` bytes) grown to hold at least `need`. */
static void *grow(void *buf, size_t *cap, size_t need, size_t size) {
    if (*cap >= need) {
        return buf;
    }
    size_t n = *cap * 2 > need ? *cap * 2 : need;
    *cap = n;
    return xrealloc(buf, n * size);
}

static bool declares_value_state(void) {
    for (size_t i = 0; i < weir_operator.num_states; i++) {
        if (weir_operator.states[i].kind == WEIR_STATE_VALUE) {
            return true;
        }
    }
    return false;
}

static bool is_value_state(weir_state_id_t state) {
    return state < weir_operator.num_states && weir_operator.states[state].kind == WEIR_STATE_VALUE;
}

/* FNV-1a: keys are short and few per batch. */
static size_t key_hash(weir_bytes_t key) {
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < key.len; i++) {
        h = (h ^ key.ptr[i]) * 0x100000001b3u;
    }
    return (size_t)(h ^ (h >> 32));
}

/* `key`'s index among the batch's keys; a new key is added if `add`, else
 * NOT_BATCH_KEY. The table is at least twice the keys, so a probe ends. */
static size_t cache_key_index(weir_bytes_t key, bool add) {
    size_t mask = cache.table_size - 1;
    for (size_t i = key_hash(key) & mask;; i = (i + 1) & mask) {
        uint32_t entry = cache.table[i];
        if (entry == 0) {
            if (!add) {
                return NOT_BATCH_KEY;
            }
            cache.keys[cache.num_keys] = key;
            cache.table[i] = (uint32_t)(cache.num_keys + 1);
            return cache.num_keys++;
        }
        if (weir_bytes_eq(cache.keys[entry - 1], key)) {
            return entry - 1;
        }
    }
}

/* Opens the cache for `batch` if the operator is keyed and declares a
 * value state; false (and the per-call path) otherwise, also for a
 * malformed batch, which the element loop then reports as before. */
static bool cache_begin(const weir_batch_view_t *batch) {
    if (weir_batch_cache_off || !weir_operator.keyed || !declares_value_state() || batch->len >= UINT32_MAX / 2) {
        return false;
    }
    size_t n = batch->len;
    size_t table = CACHE_MIN_TABLE;
    while (table < 2 * n) {
        table *= 2;
    }
    cache.keys = grow(cache.keys, &cache.keys_cap, n, sizeof(weir_bytes_t));
    cache.record_key = grow(cache.record_key, &cache.record_cap, n, sizeof(size_t));
    cache.table = grow(cache.table, &cache.table_cap, table, sizeof(uint32_t));
    cache.table_size = table;
    memset(cache.table, 0, table * sizeof(uint32_t));
    cache.num_keys = 0;
    weir_batch_iter_t it = weir_batch_iter(batch);
    weir_record_t record;
    int more;
    while ((more = weir_batch_next(&it, &record)) == 1) {
        cache.record_key[it.index - 1] = record.has_key ? cache_key_index(record.key, true) : NOT_BATCH_KEY;
    }
    if (more < 0) {
        return false;
    }
    if (cache.states == NULL && weir_operator.num_states != 0) {
        cache.states = xrealloc(NULL, weir_operator.num_states * sizeof(state_cache_t));
        memset(cache.states, 0, weir_operator.num_states * sizeof(state_cache_t));
        cache.used = xrealloc(NULL, weir_operator.num_states * sizeof(weir_state_id_t));
    }
    cache.num_used = 0;
    cache.packed = false;
    cache.open = true;
    return true;
}

/* The cache entry of `state` for the context's key, with the state's cache
 * in `*out`; NULL when the call goes to the host: no batch open, not a
 * declared value state, or a key outside the batch. */
static cache_slot_t *cache_slot(weir_ctx_t *ctx, weir_state_id_t state, state_cache_t **out) {
    if (!cache.open || !is_value_state(state)) {
        return NULL;
    }
    /* The hint costs one comparison; a miss (a key set with
     * weir_ctx_set_key) one lookup. */
    size_t i = ctx->key_index;
    if (i >= cache.num_keys || !weir_bytes_eq(cache.keys[i], ctx->key)) {
        i = cache_key_index(ctx->key, false);
        ctx->key_index = i;
        if (i == NOT_BATCH_KEY) {
            return NULL;
        }
    }
    state_cache_t *s = &cache.states[state];
    if (!s->used) {
        s->slots = grow(s->slots, &s->slots_cap, cache.num_keys, sizeof(cache_slot_t));
        memset(s->slots, 0, cache.num_keys * sizeof(cache_slot_t)); /* every entry SLOT_UNKNOWN */
        s->used = true;
        s->arena_len = 0;
        cache.used[cache.num_used++] = state;
    }
    *out = s;
    return &s->slots[i];
}

/* Reads `state` for every key of the batch in one call; entries the batch
 * already wrote keep their new values. False after weir_fail. */
static bool cache_fetch(weir_state_id_t state, state_cache_t *s) {
    if (!cache.packed) {
        size_t total = 0;
        for (size_t i = 0; i < cache.num_keys; i++) {
            total += cache.keys[i].len;
        }
        cache.key_lens = grow(cache.key_lens, &cache.key_lens_cap, cache.num_keys, sizeof(int32_t));
        cache.key_data = grow(cache.key_data, &cache.key_data_cap, total, 1);
        size_t at = 0;
        for (size_t i = 0; i < cache.num_keys; i++) {
            cache.key_lens[i] = (int32_t)cache.keys[i].len; /* a batch's key lengths are s32 */
            if (cache.keys[i].len != 0) {
                memcpy(cache.key_data + at, cache.keys[i].ptr, cache.keys[i].len);
            }
            at += cache.keys[i].len;
        }
        cache.key_data_len = total;
        cache.packed = true;
    }
    weir_operator_state_packed_t keys = {{cache.key_lens, cache.num_keys}, {cache.key_data, cache.key_data_len}};
    weir_operator_state_packed_t got;
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_value_get_many(state, &keys, &got, &err)) {
        return state_fail(state, &err);
    }
    /* The answer is checked before it is used: one entry per key, -1 or a
     * length, adding up to its data (the Rust SDK's messages). */
    bool well_formed = got.lens.len == cache.num_keys;
    size_t at = 0;
    for (size_t i = 0; well_formed && i < got.lens.len; i++) {
        int32_t len = got.lens.ptr[i];
        if (len < -1 || (len >= 0 && (size_t)len > got.data.len - at)) {
            well_formed = false;
        } else if (len >= 0) {
            at += (size_t)len;
        }
    }
    well_formed = well_formed && at == got.data.len;
    if (!well_formed) {
        if (got.lens.len != cache.num_keys) {
            weir_failf("state `%s`: the host returned %zu values for %zu keys", state_name(state), got.lens.len,
                       cache.num_keys);
        } else {
            weir_failf("state `%s`: the host returned a malformed packed list", state_name(state));
        }
        free_owned(got.lens.ptr, got.lens.len);
        free_owned(got.data.ptr, got.data.len);
        return false;
    }
    at = 0;
    for (size_t i = 0; i < cache.num_keys; i++) {
        int32_t len = got.lens.ptr[i];
        if (s->slots[i].status == SLOT_UNKNOWN) {
            s->slots[i].status = SLOT_CLEAN;
            s->slots[i].in_arena = false;
            s->slots[i].len = len;
            s->slots[i].at = at;
        }
        if (len > 0) {
            at += (size_t)len;
        }
    }
    free_owned(got.lens.ptr, got.lens.len);
    /* Kept until the end of the batch: the clean entries point into it. */
    s->fetched = got.data.len != 0 ? got.data.ptr : NULL;
    s->fetched_len = got.data.len;
    return true;
}

/* The bytes of a known entry (valid until the state's next write). */
static weir_bytes_t slot_bytes(const state_cache_t *s, const cache_slot_t *slot) {
    weir_bytes_t b = {NULL, (size_t)slot->len};
    if (slot->len > 0) {
        b.ptr = (slot->in_arena ? s->arena : s->fetched) + slot->at;
    }
    return b;
}

/* Sets an entry to `value`, changed. False after weir_fail. */
static bool cache_write(weir_state_id_t state, state_cache_t *s, cache_slot_t *slot, weir_bytes_t value) {
    if (value.len > PACKED_MAX_LEN) {
        return weir_failf("state `%s`: a value of %zu bytes is longer than a state call carries (%zu)",
                          state_name(state), value.len, PACKED_MAX_LEN);
    }
    if (!(slot->status == SLOT_DIRTY && slot->in_arena && slot->len >= 0 && (size_t)slot->len >= value.len)) {
        s->arena = grow(s->arena, &s->arena_cap, s->arena_len + value.len, 1);
        slot->at = s->arena_len;
        s->arena_len += value.len;
    }
    if (value.len != 0) {
        memmove(s->arena + slot->at, value.ptr, value.len);
    }
    slot->status = SLOT_DIRTY;
    slot->in_arena = true;
    slot->len = (int32_t)value.len;
    return true;
}

/* Writes `state`'s changed entries back in one call. On a host error:
 * false, after weir_fail if `report` (else the callback's error stands). */
static bool cache_flush(weir_state_id_t state, const state_cache_t *s, bool report) {
    size_t changed = 0, key_bytes = 0, value_bytes = 0;
    for (size_t i = 0; i < cache.num_keys; i++) {
        if (s->slots[i].status == SLOT_DIRTY) {
            changed++;
            key_bytes += cache.keys[i].len;
            value_bytes += s->slots[i].len > 0 ? (size_t)s->slots[i].len : 0;
        }
    }
    if (changed == 0) {
        return true;
    }
    cache.set_key_lens = grow(cache.set_key_lens, &cache.set_key_lens_cap, changed, sizeof(int32_t));
    cache.set_value_lens = grow(cache.set_value_lens, &cache.set_value_lens_cap, changed, sizeof(int32_t));
    cache.set_key_data = grow(cache.set_key_data, &cache.set_key_cap, key_bytes, 1);
    cache.set_value_data = grow(cache.set_value_data, &cache.set_value_cap, value_bytes, 1);
    size_t n = 0, k = 0, v = 0;
    for (size_t i = 0; i < cache.num_keys; i++) {
        const cache_slot_t *slot = &s->slots[i];
        if (slot->status != SLOT_DIRTY) {
            continue;
        }
        cache.set_key_lens[n] = (int32_t)cache.keys[i].len;
        if (cache.keys[i].len != 0) {
            memcpy(cache.set_key_data + k, cache.keys[i].ptr, cache.keys[i].len);
        }
        k += cache.keys[i].len;
        cache.set_value_lens[n] = slot->len; /* -1: clears the key */
        if (slot->len > 0) {
            memcpy(cache.set_value_data + v, slot_bytes(s, slot).ptr, (size_t)slot->len);
            v += (size_t)slot->len;
        }
        n++;
    }
    weir_operator_state_packed_t keys = {{cache.set_key_lens, n}, {cache.set_key_data, k}};
    weir_operator_state_packed_t values = {{cache.set_value_lens, n}, {cache.set_value_data, v}};
    weir_operator_state_state_error_t err;
    if (!weir_operator_state_value_set_many(state, &keys, &values, &err)) {
        if (report) {
            return state_fail(state, &err);
        }
        free_state_error(&err);
        return false;
    }
    return true;
}

/* Writes every changed entry back (state by state, in the order of first
 * use; stopping at the first failure, as the Rust SDK does) and closes the
 * cache. False on a failure, reported through weir_fail if `report`. */
static bool cache_end(bool report) {
    bool ok = true;
    for (size_t u = 0; u < cache.num_used; u++) {
        state_cache_t *s = &cache.states[cache.used[u]];
        ok = ok && cache_flush(cache.used[u], s, report);
        free_owned(s->fetched, s->fetched_len);
        s->fetched = NULL;
        s->fetched_len = 0;
        s->used = false;
        if (s->arena_cap > CACHE_KEEP_BYTES) {
            free(s->arena);
            s->arena = NULL;
            s->arena_cap = 0;
        }
    }
    cache.num_used = 0;
    cache.num_keys = 0;
    cache.open = false;
    return ok;
}

/* ------------------------------------------------------- state, timers */

/* Reads `state` for the context's key: 1 with the bytes in `*value`, 0 if
 * there is none, -1 after weir_fail. `*owned` says whether the bytes are the
 * host's answer, for the caller to free (free_owned), or the cache's,
 * borrowed until the next state call. */
static int value_read(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t *value, bool *owned) {
    state_cache_t *s;
    cache_slot_t *slot = cache_slot(ctx, state, &s);
    if (slot != NULL) {
        if (slot->status == SLOT_UNKNOWN && !cache_fetch(state, s)) {
            return -1;
        }
        if (slot->len < 0) {
            return 0;
        }
        *value = slot_bytes(s, slot);
        *owned = false;
        return 1;
    }
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
    *owned = true;
    return 1;
}

int weir_value_get(weir_ctx_t *ctx, weir_state_id_t state, weir_buf_t *value) {
    weir_bytes_t bytes;
    bool owned;
    int found = value_read(ctx, state, &bytes, &owned);
    if (found == 1) {
        if (owned) {
            value->ptr = (uint8_t *)bytes.ptr;
            value->len = bytes.len;
        } else {
            *value = weir_buf_copy(bytes); /* the caller's to keep and free */
        }
    }
    return found;
}

bool weir_value_set(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t value) {
    state_cache_t *s;
    cache_slot_t *slot = cache_slot(ctx, state, &s);
    if (slot != NULL) {
        return cache_write(state, s, slot, value);
    }
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
    weir_bytes_t bytes;
    bool owned;
    int found = value_read(ctx, state, &bytes, &owned);
    if (found != 1) {
        return found;
    }
    if (bytes.len != width) {
        weir_failf("state `%s`: cannot decode %s: expected %zu bytes, got %zu", state_name(state), type, width,
                   bytes.len);
        found = -1;
    } else {
        memcpy(out, bytes.ptr, width);
    }
    if (owned) {
        free_owned((void *)bytes.ptr, bytes.len);
    }
    return found;
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
    state_cache_t *s;
    cache_slot_t *slot = cache_slot(ctx, state, &s);
    if (slot != NULL) {
        /* A value state's clear is a write of "no value": cached like one. */
        slot->status = SLOT_DIRTY;
        slot->in_arena = false;
        slot->len = -1;
        return true;
    }
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

bool weir_register_processing_timer(weir_ctx_t *ctx, int64_t time) {
    operator_list_u8_t key = as_list(ctx->key);
    weir_operator_timers_state_error_t err;
    if (!weir_operator_timers_register_processing_timer(&key, time, &err)) {
        return timer_fail(&err);
    }
    return true;
}

bool weir_delete_processing_timer(weir_ctx_t *ctx, int64_t time) {
    operator_list_u8_t key = as_list(ctx->key);
    weir_operator_timers_state_error_t err;
    if (!weir_operator_timers_delete_processing_timer(&key, time, &err)) {
        return timer_fail(&err);
    }
    return true;
}

int64_t weir_current_processing_time(void) { return weir_operator_timers_current_processing_time(); }

/* ----------------------------------------------------------------- text */

static bool is_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

bool weir_parse_i64(weir_bytes_t text, int64_t *value) {
    size_t i = 0, n = text.len;
    while (i < n && is_space(text.ptr[i])) {
        i++;
    }
    while (n > i && is_space(text.ptr[n - 1])) {
        n--;
    }
    bool negative = false;
    if (i < n && (text.ptr[i] == '-' || text.ptr[i] == '+')) {
        negative = text.ptr[i] == '-';
        i++;
    }
    if (i == n) {
        return false;
    }
    /* Accumulate the magnitude; the limit is 2^63 for a negative number. */
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (; i < n; i++) {
        uint8_t c = text.ptr[i];
        if (c < '0' || c > '9') {
            return false;
        }
        uint64_t d = (uint64_t)(c - '0');
        if (v > (limit - d) / 10) {
            return false;
        }
        v = v * 10 + d;
    }
    *value = negative ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

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

static bool is_window_function(void) {
    return weir_operator.aggregate != NULL || weir_operator.process_window != NULL;
}

static bool is_two_input(void) {
    return weir_operator.process_element2 != NULL || weir_operator.process_batch2 != NULL;
}

void exports_weir_operator_operator_describe(exports_weir_operator_operator_operator_info_t *ret) {
    const weir_operator_t *op = &weir_operator;
    /* A window function keeps no keyed state of its own: the host keeps
     * the windows' (contract: keyed = false, no states). */
    size_t num_states = is_window_function() ? 0 : op->num_states;
    /* Post-return frees every string and list: hand over copies. */
    ret->name = dup_str(op->name != NULL ? op->name : "");
    ret->version = dup_str(op->version != NULL ? op->version : "");
    ret->keyed = op->keyed && !is_window_function();
    ret->states.len = num_states;
    ret->states.ptr = NULL;
    if (num_states != 0) {
        ret->states.ptr = xrealloc(NULL, num_states * sizeof(weir_operator_types_state_descriptor_t));
        for (size_t i = 0; i < num_states; i++) {
            weir_operator_types_state_descriptor_t *d = &ret->states.ptr[i];
            d->name = dup_str(op->states[i].name);
            d->kind = (weir_operator_types_state_kind_t)op->states[i].kind;
            d->ttl_ms.is_some = op->states[i].ttl_ms != 0;
            d->ttl_ms.val = op->states[i].ttl_ms;
        }
    }
}

/* What is wrong with weir_operator, or NULL. */
static const char *operator_problem(void) {
    const weir_operator_t *op = &weir_operator;
    bool processes = op->process_element != NULL || op->process_batch != NULL;
    if (op->aggregate != NULL && op->process_window != NULL) {
        return "weir_operator sets both aggregate and process_window: a window function is one or the other";
    }
    if (is_window_function()) {
        if (processes || is_two_input()) {
            return "weir_operator is a window function (aggregate or process_window) and also processes records "
                   "(process_element/process_batch): a module is one or the other";
        }
        if (op->aggregate != NULL && (op->aggregate->add == NULL || op->aggregate->get_result == NULL)) {
            return "weir_operator.aggregate needs add and get_result";
        }
        return NULL;
    }
    if (!processes) {
        return "weir_operator defines neither process_element nor process_batch";
    }
    return NULL;
}

bool exports_weir_operator_operator_open(exports_weir_operator_operator_open_context_t *wit_ctx,
                                         operator_string_t *err) {
    bool ok = true;
    set_error(NULL, 0);
    const char *problem = operator_problem();
    if (problem != NULL) {
        ok = weir_fail(problem);
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

/* The answer of a window function to the calls of an ordinary operator. */
static bool window_not_operator(operator_string_t *err, const char *call) {
    weir_failf("this module is a window function (%s), not an operator: use it as the `module` of an "
               "`[[operator]]` with a `window` table (`%s` is not called on a window function)",
               weir_operator.aggregate != NULL ? "an aggregate" : "a process-window function", call);
    take_error(err, call);
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

static weir_batch_view_t batch_view(const weir_operator_types_batch_t *b) {
    weir_batch_view_t view = {
        b->timestamps.len, b->timestamps.ptr, b->key_lens.ptr, b->value_lens.ptr, b->data.ptr, b->data.len,
    };
    return view;
}

static bool columns_agree(const weir_operator_types_batch_t *b) {
    return b->key_lens.len == b->timestamps.len && b->value_lens.len == b->timestamps.len;
}

/* `process` of input `input` (0 or 1): the input is freed here. */
static bool process_input(uint32_t input, weir_operator_types_batch_t *batch,
                          exports_weir_operator_operator_emitted_t *ret, operator_string_t *err) {
    if (!opened) {
        free_batch(batch);
        return not_opened(err);
    }
    bool (*process_batch)(const weir_batch_view_t *, weir_ctx_t *) =
        input == 0 ? weir_operator.process_batch : weir_operator.process_batch2;
    bool (*process_element)(const weir_record_t *, weir_ctx_t *) =
        input == 0 ? weir_operator.process_element : weir_operator.process_element2;
    weir_batch_view_t view = batch_view(batch);
    weir_ctx_t *ctx = begin_call((weir_bytes_t){NULL, 0}, 0);
    if (last_records != 0) {
        weir_builder_reserve(&ctx->main, last_records, last_bytes);
    }
    bool ok = true;
    /* Value state is read and written once per batch (the batch cache). */
    bool cached = columns_agree(batch) && cache_begin(&view);
    if (!columns_agree(batch)) {
        ok = weir_fail("malformed batch: the columns differ in length");
    } else if (process_batch != NULL) {
        ok = process_batch(&view, ctx);
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
            ctx->key_index = cached ? cache.record_key[it.index - 1] : KEY_UNRESOLVED;
            ctx->timestamp = record.timestamp;
            ok = process_element(&record, ctx);
        }
        if (ok && more < 0) {
            ok = weir_failf("malformed batch at record %zu", it.index);
        }
    }
    /* The batch's writes reach the host before this call returns (timers,
     * checkpoints and close come later), also after a failure, as single
     * calls would have made them; the callback's error wins. */
    if (cached) {
        ok = cache_end(ok) && ok;
    }
    last_records = ctx->main.len;
    last_bytes = ctx->main.data_len;
    bool done = finish_call(ctx, ok, input == 0 ? "process" : "process_input", ret, err);
    free_batch(batch);
    return done;
}

bool exports_weir_operator_operator_process(exports_weir_operator_operator_batch_t *input,
                                            exports_weir_operator_operator_emitted_t *ret,
                                            operator_string_t *err) {
    if (is_window_function()) {
        free_batch(input);
        return window_not_operator(err, "process");
    }
    return process_input(0, input, ret, err);
}

/* A timer's call: `callback` NULL emits nothing. The key is freed here. */
static bool timer_call(operator_list_u8_t *key, int64_t time, bool (*callback)(int64_t, weir_ctx_t *),
                       const char *name, exports_weir_operator_operator_emitted_t *ret, operator_string_t *err) {
    if (!opened) {
        free_owned(key->ptr, key->len);
        return not_opened(err);
    }
    weir_ctx_t *ctx = begin_call((weir_bytes_t){key->ptr, key->len}, time);
    bool ok = callback != NULL ? callback(time, ctx) : true;
    bool done = finish_call(ctx, ok, name, ret, err);
    free_owned(key->ptr, key->len);
    return done;
}

bool exports_weir_operator_operator_on_timer(operator_list_u8_t *key,
                                             exports_weir_operator_operator_timestamp_t time,
                                             exports_weir_operator_operator_emitted_t *ret,
                                             operator_string_t *err) {
    if (is_window_function()) {
        free_owned(key->ptr, key->len);
        return window_not_operator(err, "on_timer");
    }
    return timer_call(key, time, weir_operator.on_timer, "on_timer", ret, err);
}

/* A window function emits nothing on the watermark and at the end: the
 * host's window operator fires its windows. */
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

/* ------------------------------------------------- the two-input export */

/* `two-input.process-input`: input 0 is `process` (process_element), input
 * 1 process_element2 / process_batch2 (a keyed co-process function). */
bool exports_weir_operator_two_input_process_input(uint32_t input, exports_weir_operator_two_input_batch_t *records,
                                                   exports_weir_operator_two_input_emitted_t *ret,
                                                   operator_string_t *err) {
    if (is_window_function()) {
        free_batch(records);
        return window_not_operator(err, "process_input");
    }
    if (input > 1 || (input == 1 && !is_two_input())) {
        free_batch(records);
        if (input > 1) {
            weir_failf("a batch arrived on input %u, but an operator has at most two inputs (0 and 1)",
                       (unsigned)input);
        } else {
            weir_fail("this operator has one input (not a two-input operator), but a batch arrived on input 1 "
                      "(`input = \"right\"` in the job spec needs process_element2 or process_batch2 in "
                      "weir_operator)");
        }
        take_error(err, "process_input");
        return false;
    }
    return process_input(input, records, ret, err);
}

/* ------------------------------------------- the processing-time export */

bool exports_weir_operator_processing_time_on_processing_timer(
    operator_list_u8_t *key, exports_weir_operator_processing_time_timestamp_t time,
    exports_weir_operator_processing_time_emitted_t *ret, operator_string_t *err) {
    if (is_window_function()) {
        free_owned(key->ptr, key->len);
        return window_not_operator(err, "on_processing_timer");
    }
    if (weir_operator.on_processing_timer == NULL) {
        free_owned(key->ptr, key->len);
        weir_failf("a processing-time timer fired at %lld, but weir_operator defines no on_processing_timer",
                   (long long)time);
        take_error(err, "on_processing_timer");
        return false;
    }
    return timer_call(key, time, weir_operator.on_processing_timer, "on_processing_timer", ret, err);
}

/* ------------------------------------------------- the migration export */

/*
 * The WIT `migration` interface (since contract 0.1.0; the world `window-operator` includes it).
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

/* -------------------------------------------- the window-function export */

/*
 * The WIT `window-function` interface (contract 0.1.3) on top of
 * weir_operator.aggregate / .process_window. Accumulators live, between
 * calls, as the bytes the host stores; during a call as the author's C type
 * in one aligned array (acc_at), decoded (or created) before and encoded
 * after. The encoded values of a call are built in one reused builder
 * (`values`, one record per value) and copied out into the list the host
 * takes (each element its own allocation: post-return frees them one by one).
 */

exports_weir_operator_window_function_window_function_kind_t exports_weir_operator_window_function_kind(void) {
    if (weir_operator.aggregate != NULL) {
        return EXPORTS_WEIR_OPERATOR_WINDOW_FUNCTION_WINDOW_FUNCTION_KIND_AGGREGATE;
    }
    if (weir_operator.process_window != NULL) {
        return EXPORTS_WEIR_OPERATOR_WINDOW_FUNCTION_WINDOW_FUNCTION_KIND_PROCESS_WINDOW;
    }
    return EXPORTS_WEIR_OPERATOR_WINDOW_FUNCTION_WINDOW_FUNCTION_KIND_NONE;
}

/* Starts a window call that needs a function of kind `kind`: false (error
 * set) if this module has none, another kind, or was not opened. */
static bool window_begin(weir_window_kind_t kind) {
    set_error(NULL, 0);
    if (!is_window_function()) {
        return weir_fail("this module is not a window function (weir_operator sets neither aggregate nor "
                         "process_window): it cannot be the `module` of an `[[operator]]` with a `window` table");
    }
    if (kind == WEIR_WINDOW_AGGREGATE && weir_operator.aggregate == NULL) {
        return weir_fail("this module's window function is a process-window function, not an aggregate");
    }
    if (kind == WEIR_WINDOW_PROCESS_WINDOW && weir_operator.process_window == NULL) {
        return weir_fail("this module's window function is an aggregate, not a process-window function");
    }
    if (!opened) {
        return weir_fail("operator called before a successful `open`");
    }
    return true;
}

/* Accumulators of one call: `n` slots of `stride` bytes; `live[i]` says
 * whether slot i holds a created or decoded accumulator (to drop). */
typedef struct {
    uint8_t *mem;
    bool *live;
    size_t n, stride;
} acc_array_t;

static void accs_init(acc_array_t *a, size_t n) {
    size_t align = _Alignof(max_align_t);
    size_t size = weir_operator.aggregate->acc_size != 0 ? weir_operator.aggregate->acc_size : 1;
    a->stride = (size + align - 1) / align * align;
    a->n = n;
    a->mem = n != 0 ? xrealloc(NULL, n * a->stride) : NULL;
    a->live = n != 0 ? xrealloc(NULL, n * sizeof(bool)) : NULL;
    for (size_t i = 0; i < n; i++) {
        a->live[i] = false;
    }
}

static void *acc_at(acc_array_t *a, size_t i) { return a->mem + i * a->stride; }

static void acc_drop(acc_array_t *a, size_t i) {
    if (a->live[i]) {
        if (weir_operator.aggregate->drop != NULL) {
            weir_operator.aggregate->drop(acc_at(a, i));
        }
        a->live[i] = false;
    }
}

static void accs_free(acc_array_t *a) {
    for (size_t i = 0; i < a->n; i++) {
        acc_drop(a, i);
    }
    free(a->mem);
    free(a->live);
    a->mem = NULL;
    a->live = NULL;
    a->n = 0;
}

/* Slot i as a new window's accumulator. */
static bool acc_create(acc_array_t *a, size_t i) {
    const weir_aggregate_t *agg = weir_operator.aggregate;
    memset(acc_at(a, i), 0, a->stride);
    if (agg->create != NULL && !agg->create(acc_at(a, i))) {
        return false;
    }
    a->live[i] = true;
    return true;
}

/* Slot i from the bytes the host stored. */
static bool acc_decode(acc_array_t *a, size_t i, weir_bytes_t bytes) {
    const weir_aggregate_t *agg = weir_operator.aggregate;
    memset(acc_at(a, i), 0, a->stride);
    if (agg->decode != NULL) {
        if (!agg->decode(bytes, acc_at(a, i))) {
            return false;
        }
    } else if (bytes.len != agg->acc_size) {
        return weir_failf("cannot decode the accumulator: expected %zu bytes, got %zu", agg->acc_size, bytes.len);
    } else if (bytes.len != 0) {
        memcpy(acc_at(a, i), bytes.ptr, bytes.len);
    }
    a->live[i] = true;
    return true;
}

/* The values one window call returns, one record (no key) per value. */
static weir_batch_builder_t values = WEIR_BATCH_BUILDER_INIT;

static void values_reset(void) {
    values.len = 0;
    values.data_len = 0;
    values.value_start = SIZE_MAX;
}

/* Appends slot i's encoding to `values`. */
static bool acc_encode(acc_array_t *a, size_t i) {
    const weir_aggregate_t *agg = weir_operator.aggregate;
    weir_builder_begin(&values, 0, NULL);
    if (agg->encode != NULL) {
        if (!agg->encode(acc_at(a, i), &values)) {
            return false;
        }
    } else {
        weir_builder_append(&values, (weir_bytes_t){acc_at(a, i), agg->acc_size});
    }
    weir_builder_end(&values);
    return true;
}

/* Moves `values` into `ret` (copies; empty values unallocated) and resets it. */
static void values_take(operator_list_list_u8_t *ret) {
    weir_builder_end(&values);
    ret->len = values.len;
    ret->ptr = values.len != 0 ? xrealloc(NULL, values.len * sizeof(operator_list_u8_t)) : NULL;
    size_t offset = 0;
    for (size_t i = 0; i < values.len; i++) {
        size_t n = values.value_lens[i];
        ret->ptr[i].len = n;
        ret->ptr[i].ptr = NULL;
        if (n != 0) {
            ret->ptr[i].ptr = xrealloc(NULL, n);
            memcpy(ret->ptr[i].ptr, values.data + offset, n);
        }
        offset += n;
    }
    values_reset();
}

/* Ends a window call that returns a list of values. */
static bool finish_values(bool ok, const char *call, operator_list_list_u8_t *ret, operator_string_t *err) {
    if (!ok) {
        values_reset();
        take_error(err, call);
        return false;
    }
    values_take(ret);
    return true;
}

static weir_bytes_t as_bytes(const operator_list_u8_t *l) {
    weir_bytes_t b = {l->ptr, l->len};
    return b;
}

bool exports_weir_operator_window_function_add(operator_list_option_list_u8_t *accumulators,
                                               operator_list_u32_t *targets,
                                               exports_weir_operator_window_function_batch_t *records,
                                               operator_list_list_u8_t *ret, operator_string_t *err) {
    bool ok = window_begin(WEIR_WINDOW_AGGREGATE);
    size_t n = accumulators->len;
    acc_array_t accs = {NULL, NULL, 0, 0};
    if (ok && !columns_agree(records)) {
        ok = weir_fail("malformed batch: the columns differ in length");
    }
    if (ok && targets->len != records->timestamps.len) {
        ok = weir_failf("add: %zu targets for %zu records", targets->len, records->timestamps.len);
    }
    if (ok) {
        accs_init(&accs, n);
        for (size_t i = 0; ok && i < n; i++) {
            ok = accumulators->ptr[i].is_some ? acc_decode(&accs, i, as_bytes(&accumulators->ptr[i].val))
                                              : acc_create(&accs, i);
        }
    }
    if (ok) {
        weir_batch_view_t view = batch_view(records);
        weir_batch_iter_t it = weir_batch_iter(&view);
        weir_record_t record;
        int more = 0;
        while (ok && (more = weir_batch_next(&it, &record)) == 1) {
            uint32_t target = targets->ptr[it.index - 1];
            if (target >= n) {
                ok = weir_failf("add: record %zu goes to accumulator %u, but there are %zu", it.index - 1,
                                (unsigned)target, n);
                break;
            }
            ok = weir_operator.aggregate->add(acc_at(&accs, target), &record);
        }
        if (ok && more < 0) {
            ok = weir_failf("malformed batch at record %zu", it.index);
        }
    }
    for (size_t i = 0; ok && i < n; i++) {
        ok = acc_encode(&accs, i);
    }
    accs_free(&accs);
    for (size_t i = 0; i < accumulators->len; i++) {
        if (accumulators->ptr[i].is_some) {
            free_owned(accumulators->ptr[i].val.ptr, accumulators->ptr[i].val.len);
        }
    }
    free_owned(accumulators->ptr, accumulators->len);
    free_owned(targets->ptr, targets->len);
    free_batch(records);
    return finish_values(ok, "add", ret, err);
}

bool exports_weir_operator_window_function_merge(operator_list_tuple2_list_u8_list_u8_t *pairs,
                                                 operator_list_list_u8_t *ret, operator_string_t *err) {
    bool ok = window_begin(WEIR_WINDOW_AGGREGATE);
    if (ok && weir_operator.aggregate->merge == NULL) {
        ok = weir_fail("merge: weir_operator.aggregate defines no merge (session windows need one)");
    }
    acc_array_t accs = {NULL, NULL, 0, 0};
    if (ok) {
        accs_init(&accs, 2);
    }
    for (size_t i = 0; ok && i < pairs->len; i++) {
        ok = acc_decode(&accs, 0, as_bytes(&pairs->ptr[i].f0)) && acc_decode(&accs, 1, as_bytes(&pairs->ptr[i].f1)) &&
             weir_operator.aggregate->merge(acc_at(&accs, 0), acc_at(&accs, 1)) && acc_encode(&accs, 0);
        acc_drop(&accs, 0);
        acc_drop(&accs, 1);
    }
    accs_free(&accs);
    for (size_t i = 0; i < pairs->len; i++) {
        free_owned(pairs->ptr[i].f0.ptr, pairs->ptr[i].f0.len);
        free_owned(pairs->ptr[i].f1.ptr, pairs->ptr[i].f1.len);
    }
    free_owned(pairs->ptr, pairs->len);
    return finish_values(ok, "merge", ret, err);
}

bool exports_weir_operator_window_function_get_result(exports_weir_operator_window_function_list_accumulated_t *windows,
                                                      operator_list_list_u8_t *ret, operator_string_t *err) {
    bool ok = window_begin(WEIR_WINDOW_AGGREGATE);
    acc_array_t accs = {NULL, NULL, 0, 0};
    if (ok) {
        accs_init(&accs, 1);
    }
    for (size_t i = 0; ok && i < windows->len; i++) {
        const exports_weir_operator_window_function_accumulated_t *w = &windows->ptr[i];
        weir_window_t window = {w->window.start, w->window.end};
        if (acc_decode(&accs, 0, as_bytes(&w->accumulator))) {
            weir_builder_begin(&values, 0, NULL);
            ok = weir_operator.aggregate->get_result(as_bytes(&w->key), window, acc_at(&accs, 0), &values);
            weir_builder_end(&values);
        } else {
            ok = false;
        }
        acc_drop(&accs, 0);
    }
    accs_free(&accs);
    for (size_t i = 0; i < windows->len; i++) {
        free_owned(windows->ptr[i].key.ptr, windows->ptr[i].key.len);
        free_owned(windows->ptr[i].accumulator.ptr, windows->ptr[i].accumulator.len);
    }
    free_owned(windows->ptr, windows->len);
    return finish_values(ok, "get_result", ret, err);
}

bool exports_weir_operator_window_function_process_window(operator_list_u8_t *key,
                                                          exports_weir_operator_window_function_window_t *window,
                                                          exports_weir_operator_window_function_batch_t *records,
                                                          exports_weir_operator_window_function_emitted_t *ret,
                                                          operator_string_t *err) {
    weir_bytes_t k = as_bytes(key);
    weir_window_t w = {window->start, window->end};
    weir_ctx_t *ctx = begin_call(k, w.end != INT64_MIN ? w.end - 1 : w.end);
    bool ok = window_begin(WEIR_WINDOW_PROCESS_WINDOW);
    if (ok && !columns_agree(records)) {
        ok = weir_fail("malformed batch: the columns differ in length");
    }
    weir_record_t *list = NULL;
    size_t len = records->timestamps.len;
    if (ok) {
        list = len != 0 ? xrealloc(NULL, len * sizeof(weir_record_t)) : NULL;
        weir_batch_view_t view = batch_view(records);
        weir_batch_iter_t it = weir_batch_iter(&view);
        weir_record_t record;
        int more;
        while ((more = weir_batch_next(&it, &record)) == 1) {
            list[it.index - 1] = record;
        }
        if (more < 0) {
            ok = weir_failf("malformed batch at record %zu", it.index);
        }
    }
    if (ok) {
        ok = weir_operator.process_window(k, w, list, len, ctx);
    }
    free(list);
    bool done = finish_call(ctx, ok, "process_window", ret, err);
    free_owned(key->ptr, key->len);
    free_batch(records);
    return done;
}
