/*
 * weir_test.c: a native stand-in for the Weir host, for unit tests (see
 * weir_test.h). Implements the WIT imports that bindings/operator.h
 * declares, in memory, and drives weir.c's exports (`operator`,
 * `migration`'s migrate-state, `two-input`, `processing-time` and
 * `window-function`).
 *
 * State is a flat array of cells, searched linearly: tests hold a handful
 * of keys. A value is one cell; a list is one cell per element in insertion
 * order; a map is one cell per user key. Declared kinds come from
 * weir_operator.states, so a wrong kind or an unknown id fails as it would
 * on the host. The batched value-state calls (value-get-many,
 * value-set-many, contract 0.1.3) check their `packed` arguments as the
 * host does and are counted apart from the single-key calls, so a test can
 * say how many host calls a batch cost.
 */
#include "weir_test.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "operator.h"

int weir_test_passed, weir_test_failed;

static void *xmalloc(size_t n) {
    void *p = malloc(n == 0 ? 1 : n);
    if (p == NULL) {
        abort();
    }
    return p;
}

/* A copy the SDK may free: empty copies are NULL, as the host's are unallocated. */
static operator_list_u8_t copy_bytes(const uint8_t *ptr, size_t len) {
    operator_list_u8_t out = {NULL, len};
    if (len != 0) {
        out.ptr = xmalloc(len);
        memcpy(out.ptr, ptr, len);
    }
    return out;
}

static bool same(const operator_list_u8_t *a, const uint8_t *ptr, size_t len) {
    return a->len == len && (len == 0 || memcmp(a->ptr, ptr, len) == 0);
}

/* ---------------------------------------------------------------- state */

typedef struct {
    uint32_t state;
    operator_list_u8_t key;
    operator_list_u8_t user_key; /* maps only */
    operator_list_u8_t value;
} cell_t;

static cell_t *cells;
static size_t num_cells, cap_cells;

/* Host calls since weir_test_open: single-key state calls, and the batched ones. */
static uint64_t state_calls, batched_state_calls;
/* While set, value-get-many and value-set-many answer backend(this). */
static char *batched_failure;

static void cell_free(cell_t *c) {
    free(c->key.ptr);
    free(c->user_key.ptr);
    free(c->value.ptr);
}

static void state_reset(void) {
    for (size_t i = 0; i < num_cells; i++) {
        cell_free(&cells[i]);
    }
    num_cells = 0;
}

static void cell_push(uint32_t state, const operator_list_u8_t *key, const operator_list_u8_t *user_key,
                      const operator_list_u8_t *value) {
    if (num_cells == cap_cells) {
        cap_cells = cap_cells == 0 ? 64 : cap_cells * 2;
        cells = realloc(cells, cap_cells * sizeof(cell_t));
        if (cells == NULL) {
            abort();
        }
    }
    cell_t *c = &cells[num_cells++];
    c->state = state;
    c->key = copy_bytes(key->ptr, key->len);
    c->user_key = user_key != NULL ? copy_bytes(user_key->ptr, user_key->len) : copy_bytes(NULL, 0);
    c->value = copy_bytes(value->ptr, value->len);
}

static void cell_remove(size_t i) {
    cell_free(&cells[i]);
    memmove(&cells[i], &cells[i + 1], (num_cells - i - 1) * sizeof(cell_t));
    num_cells--;
}

/* The first cell of (state, key[, user_key]) at or after `from`; num_cells if none. */
static size_t cell_find(size_t from, uint32_t state, const operator_list_u8_t *key,
                        const operator_list_u8_t *user_key) {
    for (size_t i = from; i < num_cells; i++) {
        if (cells[i].state == state && same(&cells[i].key, key->ptr, key->len) &&
            (user_key == NULL || same(&cells[i].user_key, user_key->ptr, user_key->len))) {
            return i;
        }
    }
    return num_cells;
}

static bool check_kind(uint32_t state, weir_state_kind_t kind, weir_operator_state_state_error_t *err) {
    if (state >= weir_operator.num_states) {
        err->tag = WEIR_OPERATOR_STATE_STATE_ERROR_UNKNOWN_STATE;
        err->val.unknown_state = state;
        return false;
    }
    if (weir_operator.states[state].kind != kind) {
        err->tag = WEIR_OPERATOR_STATE_STATE_ERROR_WRONG_KIND;
        err->val.wrong_kind = state;
        return false;
    }
    return true;
}

bool weir_operator_state_value_get(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                   operator_option_list_u8_t *ret, weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_VALUE, err)) {
        return false;
    }
    size_t i = cell_find(0, state, key, NULL);
    ret->is_some = i < num_cells;
    if (ret->is_some) {
        ret->val = copy_bytes(cells[i].value.ptr, cells[i].value.len);
    }
    return true;
}

/* Stores `value` for `key` in a value state (its kind already checked). */
static void value_store(uint32_t state, const operator_list_u8_t *key, const operator_list_u8_t *value) {
    size_t i = cell_find(0, state, key, NULL);
    if (i < num_cells) {
        free(cells[i].value.ptr);
        cells[i].value = copy_bytes(value->ptr, value->len);
    } else {
        cell_push(state, key, NULL, value);
    }
}

bool weir_operator_state_value_set(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                   operator_list_u8_t *value, weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_VALUE, err)) {
        return false;
    }
    value_store(state, key, value);
    return true;
}

bool weir_operator_state_list_get(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                  operator_list_list_u8_t *ret, weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_LIST, err)) {
        return false;
    }
    ret->len = 0;
    ret->ptr = NULL;
    for (size_t i = cell_find(0, state, key, NULL); i < num_cells; i = cell_find(i + 1, state, key, NULL)) {
        ret->ptr = realloc(ret->ptr, (ret->len + 1) * sizeof(operator_list_u8_t));
        if (ret->ptr == NULL) {
            abort();
        }
        ret->ptr[ret->len++] = copy_bytes(cells[i].value.ptr, cells[i].value.len);
    }
    return true;
}

bool weir_operator_state_list_add(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                  operator_list_u8_t *element, weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_LIST, err)) {
        return false;
    }
    cell_push(state, key, NULL, element);
    return true;
}

bool weir_operator_state_map_get(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                 operator_list_u8_t *user_key, operator_option_list_u8_t *ret,
                                 weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_MAP, err)) {
        return false;
    }
    size_t i = cell_find(0, state, key, user_key);
    ret->is_some = i < num_cells;
    if (ret->is_some) {
        ret->val = copy_bytes(cells[i].value.ptr, cells[i].value.len);
    }
    return true;
}

bool weir_operator_state_map_put(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                 operator_list_u8_t *user_key, operator_list_u8_t *value,
                                 weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_MAP, err)) {
        return false;
    }
    size_t i = cell_find(0, state, key, user_key);
    if (i < num_cells) {
        free(cells[i].value.ptr);
        cells[i].value = copy_bytes(value->ptr, value->len);
    } else {
        cell_push(state, key, user_key, value);
    }
    return true;
}

bool weir_operator_state_map_remove(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                    operator_list_u8_t *user_key, weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_MAP, err)) {
        return false;
    }
    size_t i = cell_find(0, state, key, user_key);
    if (i < num_cells) {
        cell_remove(i);
    }
    return true;
}

static int compare_user_keys(const void *a, const void *b) {
    const operator_tuple2_list_u8_list_u8_t *x = a, *y = b;
    size_t n = x->f0.len < y->f0.len ? x->f0.len : y->f0.len;
    int c = n == 0 ? 0 : memcmp(x->f0.ptr, y->f0.ptr, n);
    if (c != 0) {
        return c;
    }
    return (x->f0.len > y->f0.len) - (x->f0.len < y->f0.len);
}

bool weir_operator_state_map_entries(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                                     operator_list_tuple2_list_u8_list_u8_t *ret,
                                     weir_operator_state_state_error_t *err) {
    state_calls++;
    if (!check_kind(state, WEIR_STATE_MAP, err)) {
        return false;
    }
    ret->len = 0;
    ret->ptr = NULL;
    for (size_t i = cell_find(0, state, key, NULL); i < num_cells; i = cell_find(i + 1, state, key, NULL)) {
        ret->ptr = realloc(ret->ptr, (ret->len + 1) * sizeof(*ret->ptr));
        if (ret->ptr == NULL) {
            abort();
        }
        ret->ptr[ret->len].f0 = copy_bytes(cells[i].user_key.ptr, cells[i].user_key.len);
        ret->ptr[ret->len].f1 = copy_bytes(cells[i].value.ptr, cells[i].value.len);
        ret->len++;
    }
    if (ret->len > 1) {
        qsort(ret->ptr, ret->len, sizeof(*ret->ptr), compare_user_keys);
    }
    return true;
}

bool weir_operator_state_clear(weir_operator_state_state_id_t state, operator_list_u8_t *key,
                               weir_operator_state_state_error_t *err) {
    state_calls++;
    if (state >= weir_operator.num_states) {
        err->tag = WEIR_OPERATOR_STATE_STATE_ERROR_UNKNOWN_STATE;
        err->val.unknown_state = state;
        return false;
    }
    for (size_t i = cell_find(0, state, key, NULL); i < num_cells; i = cell_find(i, state, key, NULL)) {
        cell_remove(i);
    }
    return true;
}

bool weir_test_state_value(weir_state_id_t state, weir_bytes_t key, weir_bytes_t *value) {
    operator_list_u8_t k = {(uint8_t *)key.ptr, key.len};
    size_t i = cell_find(0, state, &k, NULL);
    if (i == num_cells) {
        return false;
    }
    value->ptr = cells[i].value.ptr;
    value->len = cells[i].value.len;
    return true;
}

bool weir_test_list_element(weir_state_id_t state, weir_bytes_t key, size_t index, weir_bytes_t *element) {
    operator_list_u8_t k = {(uint8_t *)key.ptr, key.len};
    size_t i = cell_find(0, state, &k, NULL);
    for (size_t n = 0; n < index && i < num_cells; n++) {
        i = cell_find(i + 1, state, &k, NULL);
    }
    if (i == num_cells) {
        return false;
    }
    element->ptr = cells[i].value.ptr;
    element->len = cells[i].value.len;
    return true;
}

bool weir_test_map_value(weir_state_id_t state, weir_bytes_t key, weir_bytes_t user_key, weir_bytes_t *value) {
    operator_list_u8_t k = {(uint8_t *)key.ptr, key.len};
    operator_list_u8_t uk = {(uint8_t *)user_key.ptr, user_key.len};
    size_t i = cell_find(0, state, &k, &uk);
    if (i == num_cells) {
        return false;
    }
    value->ptr = cells[i].value.ptr;
    value->len = cells[i].value.len;
    return true;
}

void weir_test_set_state_value(weir_state_id_t state, weir_bytes_t key, weir_bytes_t value) {
    operator_list_u8_t k = {(uint8_t *)key.ptr, key.len};
    operator_list_u8_t v = {(uint8_t *)value.ptr, value.len};
    weir_operator_state_state_error_t err;
    if (!check_kind(state, WEIR_STATE_VALUE, &err)) {
        fprintf(stderr, "weir_test_set_state_value: state %u is not a declared value state\n", (unsigned)state);
        abort();
    }
    value_store(state, &k, &v); /* the test's doing, not the operator's: not counted */
}

/* ------------------------------------------- batched value state (0.1.3) */

/* The state error backend(message), with a copy the SDK frees. */
static bool backend_error(weir_operator_state_state_error_t *err, const char *message) {
    operator_list_u8_t m = copy_bytes((const uint8_t *)message, strlen(message));
    err->tag = WEIR_OPERATOR_STATE_STATE_ERROR_BACKEND;
    err->val.backend.ptr = m.ptr;
    err->val.backend.len = m.len;
    return false;
}

/* The entries of a `packed` as (pointer, length) pairs, length -1 for an
 * absent one, checked as the host checks them (its messages); NULL after
 * setting `err` if it is malformed. The caller frees the array. */
static operator_list_u8_t *unpack(const weir_operator_state_packed_t *packed, weir_operator_state_state_error_t *err) {
    operator_list_u8_t *entries = xmalloc(packed->lens.len * sizeof(operator_list_u8_t));
    size_t at = 0;
    char message[160];
    for (size_t i = 0; i < packed->lens.len; i++) {
        int32_t len = packed->lens.ptr[i];
        if (len == -1) {
            entries[i].ptr = NULL;
            entries[i].len = SIZE_MAX; /* absent */
            continue;
        }
        if (len < 0 || (size_t)len > packed->data.len - at) {
            snprintf(message, sizeof(message),
                     "malformed packed list: entry %zu has length %d, past the %zu bytes of data", i, (int)len,
                     packed->data.len);
            free(entries);
            backend_error(err, message);
            return NULL;
        }
        entries[i].ptr = packed->data.ptr + at;
        entries[i].len = (size_t)len;
        at += (size_t)len;
    }
    if (at != packed->data.len) {
        snprintf(message, sizeof(message),
                 "malformed packed list: the lengths add up to %zu bytes but data holds %zu", at, packed->data.len);
        free(entries);
        backend_error(err, message);
        return NULL;
    }
    return entries;
}

/* False (with the host's error) if an entry of `keys` is absent. */
static bool all_present(const operator_list_u8_t *keys, size_t n, weir_operator_state_state_error_t *err) {
    for (size_t i = 0; i < n; i++) {
        if (keys[i].len == SIZE_MAX) {
            return backend_error(err, "malformed packed list: an absent key");
        }
    }
    return true;
}

/* As the host: a value-get per key, in order. */
bool weir_operator_state_value_get_many(weir_operator_state_state_id_t state, weir_operator_state_packed_t *keys,
                                        weir_operator_state_packed_t *ret, weir_operator_state_state_error_t *err) {
    batched_state_calls++;
    if (batched_failure != NULL) {
        return backend_error(err, batched_failure);
    }
    operator_list_u8_t *k = unpack(keys, err);
    if (k == NULL) {
        return false;
    }
    if (!check_kind(state, WEIR_STATE_VALUE, err) || !all_present(k, keys->lens.len, err)) {
        free(k);
        return false;
    }
    size_t n = keys->lens.len, total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t c = cell_find(0, state, &k[i], NULL);
        total += c < num_cells ? cells[c].value.len : 0;
    }
    /* Owned by the SDK, which frees non-empty lists (as post-return would). */
    ret->lens.len = n;
    ret->lens.ptr = n != 0 ? xmalloc(n * sizeof(int32_t)) : NULL;
    ret->data.len = total;
    ret->data.ptr = total != 0 ? xmalloc(total) : NULL;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t c = cell_find(0, state, &k[i], NULL);
        if (c == num_cells) {
            ret->lens.ptr[i] = -1;
            continue;
        }
        ret->lens.ptr[i] = (int32_t)cells[c].value.len;
        if (cells[c].value.len != 0) {
            memcpy(ret->data.ptr + at, cells[c].value.ptr, cells[c].value.len);
        }
        at += cells[c].value.len;
    }
    free(k);
    return true;
}

/* As the host: every key checked first (a refused call changes nothing),
 * then a value-set (or, for an absent value, a clear) per key, in order. */
bool weir_operator_state_value_set_many(weir_operator_state_state_id_t state, weir_operator_state_packed_t *keys,
                                        weir_operator_state_packed_t *values,
                                        weir_operator_state_state_error_t *err) {
    batched_state_calls++;
    if (batched_failure != NULL) {
        return backend_error(err, batched_failure);
    }
    operator_list_u8_t *k = unpack(keys, err);
    if (k == NULL) {
        return false;
    }
    operator_list_u8_t *v = unpack(values, err);
    if (v == NULL) {
        free(k);
        return false;
    }
    bool ok = true;
    if (keys->lens.len != values->lens.len) {
        char message[96];
        snprintf(message, sizeof(message), "malformed packed list: %zu keys but %zu values", keys->lens.len,
                 values->lens.len);
        ok = backend_error(err, message);
    } else {
        ok = all_present(k, keys->lens.len, err) && check_kind(state, WEIR_STATE_VALUE, err);
    }
    for (size_t i = 0; ok && i < keys->lens.len; i++) {
        if (v[i].len == SIZE_MAX) {
            size_t c = cell_find(0, state, &k[i], NULL);
            if (c < num_cells) {
                cell_remove(c);
            }
        } else {
            value_store(state, &k[i], &v[i]);
        }
    }
    free(k);
    free(v);
    return ok;
}

uint64_t weir_test_state_calls(void) { return state_calls; }

uint64_t weir_test_batched_state_calls(void) { return batched_state_calls; }

void weir_test_fail_batched_state_calls(const char *message) {
    free(batched_failure);
    batched_failure = NULL;
    if (message != NULL) {
        batched_failure = xmalloc(strlen(message) + 1);
        strcpy(batched_failure, message);
    }
}

/* Defined in weir.c: the test-only switch of the batch cache. */
extern bool weir_batch_cache_off;

void weir_test_set_batch_cache(bool enabled) { weir_batch_cache_off = !enabled; }

/* --------------------------------------------------------------- timers */

typedef struct {
    operator_list_u8_t key;
    int64_t time;
} timer_t_;

static timer_t_ *timers;
static size_t num_timers, cap_timers;
static int64_t watermark = INT64_MIN;

static size_t timer_find(const operator_list_u8_t *key, int64_t time) {
    for (size_t i = 0; i < num_timers; i++) {
        if (timers[i].time == time && same(&timers[i].key, key->ptr, key->len)) {
            return i;
        }
    }
    return num_timers;
}

static void timer_remove(size_t i) {
    free(timers[i].key.ptr);
    memmove(&timers[i], &timers[i + 1], (num_timers - i - 1) * sizeof(timer_t_));
    num_timers--;
}

bool weir_operator_timers_register_event_timer(operator_list_u8_t *key, weir_operator_timers_timestamp_t time,
                                               weir_operator_timers_state_error_t *err) {
    (void)err;
    if (timer_find(key, time) < num_timers) {
        return true;
    }
    if (num_timers == cap_timers) {
        cap_timers = cap_timers == 0 ? 64 : cap_timers * 2;
        timers = realloc(timers, cap_timers * sizeof(timer_t_));
        if (timers == NULL) {
            abort();
        }
    }
    timers[num_timers].key = copy_bytes(key->ptr, key->len);
    timers[num_timers].time = time;
    num_timers++;
    return true;
}

bool weir_operator_timers_delete_event_timer(operator_list_u8_t *key, weir_operator_timers_timestamp_t time,
                                             weir_operator_timers_state_error_t *err) {
    (void)err;
    size_t i = timer_find(key, time);
    if (i < num_timers) {
        timer_remove(i);
    }
    return true;
}

weir_operator_timers_timestamp_t weir_operator_timers_current_watermark(void) { return watermark; }

size_t weir_test_timer_count(void) { return num_timers; }

/* Processing-time timers: the same, against the harness's own clock. */
static timer_t_ *ptimers;
static size_t num_ptimers, cap_ptimers;
static int64_t processing_time;

static size_t ptimer_find(const operator_list_u8_t *key, int64_t time) {
    for (size_t i = 0; i < num_ptimers; i++) {
        if (ptimers[i].time == time && same(&ptimers[i].key, key->ptr, key->len)) {
            return i;
        }
    }
    return num_ptimers;
}

static void ptimer_remove(size_t i) {
    free(ptimers[i].key.ptr);
    memmove(&ptimers[i], &ptimers[i + 1], (num_ptimers - i - 1) * sizeof(timer_t_));
    num_ptimers--;
}

bool weir_operator_timers_register_processing_timer(operator_list_u8_t *key, weir_operator_timers_timestamp_t time,
                                                    weir_operator_timers_state_error_t *err) {
    (void)err;
    if (ptimer_find(key, time) < num_ptimers) {
        return true;
    }
    if (num_ptimers == cap_ptimers) {
        cap_ptimers = cap_ptimers == 0 ? 64 : cap_ptimers * 2;
        ptimers = realloc(ptimers, cap_ptimers * sizeof(timer_t_));
        if (ptimers == NULL) {
            abort();
        }
    }
    ptimers[num_ptimers].key = copy_bytes(key->ptr, key->len);
    ptimers[num_ptimers].time = time;
    num_ptimers++;
    return true;
}

bool weir_operator_timers_delete_processing_timer(operator_list_u8_t *key, weir_operator_timers_timestamp_t time,
                                                  weir_operator_timers_state_error_t *err) {
    (void)err;
    size_t i = ptimer_find(key, time);
    if (i < num_ptimers) {
        ptimer_remove(i);
    }
    return true;
}

weir_operator_timers_timestamp_t weir_operator_timers_current_processing_time(void) { return processing_time; }

int64_t weir_test_processing_time(void) { return processing_time; }

size_t weir_test_processing_timer_count(void) { return num_ptimers; }

/* ---------------------------------------------------------- log, metrics */

void weir_operator_log_log(weir_operator_log_level_t level, operator_string_t *message) {
    static const char *const names[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR"};
    fprintf(stderr, "[%s] %.*s\n", level < 5 ? names[level] : "?", (int)message->len,
            (const char *)message->ptr);
}

void weir_operator_metrics_counter_add(operator_string_t *name, uint64_t delta) {
    (void)name;
    (void)delta;
}

void weir_operator_metrics_gauge_set(operator_string_t *name, double value) {
    (void)name;
    (void)value;
}

/* --------------------------------------------------------------- driving */

static char *last_error;

const char *weir_test_error(void) { return last_error != NULL ? last_error : ""; }

static bool harness_failed(const char *message);

static bool failed(operator_string_t *err) {
    free(last_error);
    last_error = xmalloc(err->len + 1);
    if (err->len != 0) {
        memcpy(last_error, err->ptr, err->len);
        free(err->ptr);
    }
    last_error[err->len] = '\0';
    return false;
}

static void push_record(weir_test_output_t *out, int64_t timestamp, int32_t key_len, const uint8_t *key,
                        const uint8_t *value, size_t value_len, const operator_string_t *tag) {
    out->records = realloc(out->records, (out->len + 1) * sizeof(weir_test_record_t));
    if (out->records == NULL) {
        abort();
    }
    weir_test_record_t *r = &out->records[out->len++];
    r->timestamp = timestamp;
    r->has_key = key_len >= 0;
    operator_list_u8_t k = copy_bytes(key, key_len >= 0 ? (size_t)key_len : 0);
    operator_list_u8_t v = copy_bytes(value, value_len);
    r->key.ptr = k.ptr;
    r->key.len = k.len;
    r->value.ptr = v.ptr;
    r->value.len = v.len;
    r->tag = NULL;
    if (tag != NULL) {
        r->tag = xmalloc(tag->len + 1);
        memcpy(r->tag, tag->ptr, tag->len);
        r->tag[tag->len] = '\0';
    }
}

/* Copies a returned batch into `out` and frees it, as post-return would. */
static void take_batch(weir_operator_types_batch_t *b, const operator_string_t *tag, weir_test_output_t *out) {
    size_t offset = 0;
    for (size_t i = 0; i < b->timestamps.len; i++) {
        int32_t key_len = b->key_lens.ptr[i];
        size_t key_bytes = key_len < 0 ? 0 : (size_t)key_len;
        push_record(out, b->timestamps.ptr[i], key_len, b->data.ptr + offset, b->data.ptr + offset + key_bytes,
                    b->value_lens.ptr[i], tag);
        offset += key_bytes + b->value_lens.ptr[i];
    }
    if (offset != b->data.len) {
        fprintf(stderr, "weir_test: bad output batch: lengths add up to %zu, data is %zu bytes\n", offset,
                b->data.len);
        abort();
    }
    if (b->timestamps.len != 0) {
        free(b->timestamps.ptr);
        free(b->key_lens.ptr);
        free(b->value_lens.ptr);
    }
    if (b->data.len != 0) {
        free(b->data.ptr);
    }
}

static void take_emitted(weir_operator_types_emitted_t *e, weir_test_output_t *out) {
    take_batch(&e->main, NULL, out);
    for (size_t i = 0; i < e->side.len; i++) {
        take_batch(&e->side.ptr[i].records, &e->side.ptr[i].tag, out);
        if (e->side.ptr[i].tag.len != 0) {
            free(e->side.ptr[i].tag.ptr);
        }
    }
    if (e->side.len != 0) {
        free(e->side.ptr);
    }
}

/* Empties the host: no state, no timers, the clocks at their start, the
 * counts at 0 and both switches reset (cache on, no failure). */
static void host_reset(void) {
    state_reset();
    state_calls = batched_state_calls = 0;
    weir_test_fail_batched_state_calls(NULL);
    weir_test_set_batch_cache(true);
    while (num_timers > 0) {
        timer_remove(num_timers - 1);
    }
    while (num_ptimers > 0) {
        ptimer_remove(num_ptimers - 1);
    }
    watermark = INT64_MIN;
    processing_time = 0;
}

/* `describe`, then `open` with `config`, as the host starts an instance. */
static bool open_operator(const char *const *config) {
    /* describe, as the host calls it first; its result is freed as post-return would. */
    weir_operator_types_operator_info_t info;
    exports_weir_operator_operator_describe(&info);
    free(info.name.len ? info.name.ptr : NULL);
    free(info.version.len ? info.version.ptr : NULL);
    for (size_t i = 0; i < info.states.len; i++) {
        free(info.states.ptr[i].name.len ? info.states.ptr[i].name.ptr : NULL);
    }
    free(info.states.len ? info.states.ptr : NULL);

    /* The open context, owned by the callee as the host would pass it. */
    size_t n = 0;
    while (config != NULL && config[2 * n] != NULL) {
        n++;
    }
    weir_operator_types_open_context_t ctx;
    operator_list_u8_t id = copy_bytes((const uint8_t *)"test", 4);
    ctx.operator_id.ptr = id.ptr;
    ctx.operator_id.len = id.len;
    ctx.subtask_index = 0;
    ctx.parallelism = 1;
    ctx.max_parallelism = 128;
    ctx.config.len = n;
    ctx.config.ptr = n != 0 ? xmalloc(n * sizeof(*ctx.config.ptr)) : NULL;
    for (size_t i = 0; i < n; i++) {
        operator_list_u8_t k = copy_bytes((const uint8_t *)config[2 * i], strlen(config[2 * i]));
        operator_list_u8_t v = copy_bytes((const uint8_t *)config[2 * i + 1], strlen(config[2 * i + 1]));
        ctx.config.ptr[i].f0.ptr = k.ptr;
        ctx.config.ptr[i].f0.len = k.len;
        ctx.config.ptr[i].f1.ptr = v.ptr;
        ctx.config.ptr[i].f1.len = v.len;
    }
    operator_string_t err;
    if (!exports_weir_operator_operator_open(&ctx, &err)) {
        return failed(&err);
    }
    return true;
}

bool weir_test_open(const char *const *config) {
    host_reset();
    return open_operator(config);
}

/* ------------------------------------------------ checkpoint and restore */

struct weir_test_snapshot {
    cell_t *cells;
    size_t num_cells;
    timer_t_ *timers, *ptimers;
    size_t num_timers, num_ptimers;
    int64_t watermark, processing_time;
};

static timer_t_ *copy_timers(const timer_t_ *from, size_t n) {
    timer_t_ *to = xmalloc(n * sizeof(timer_t_));
    for (size_t i = 0; i < n; i++) {
        to[i].key = copy_bytes(from[i].key.ptr, from[i].key.len);
        to[i].time = from[i].time;
    }
    return to;
}

weir_test_snapshot_t *weir_test_snapshot(void) {
    weir_test_snapshot_t *s = xmalloc(sizeof(weir_test_snapshot_t));
    s->cells = xmalloc(num_cells * sizeof(cell_t));
    for (size_t i = 0; i < num_cells; i++) {
        s->cells[i].state = cells[i].state;
        s->cells[i].key = copy_bytes(cells[i].key.ptr, cells[i].key.len);
        s->cells[i].user_key = copy_bytes(cells[i].user_key.ptr, cells[i].user_key.len);
        s->cells[i].value = copy_bytes(cells[i].value.ptr, cells[i].value.len);
    }
    s->num_cells = num_cells;
    s->timers = copy_timers(timers, num_timers);
    s->num_timers = num_timers;
    s->ptimers = copy_timers(ptimers, num_ptimers);
    s->num_ptimers = num_ptimers;
    s->watermark = watermark;
    s->processing_time = processing_time;
    return s;
}

void weir_test_snapshot_free(weir_test_snapshot_t *s) {
    if (s == NULL) {
        return;
    }
    for (size_t i = 0; i < s->num_cells; i++) {
        cell_free(&s->cells[i]);
    }
    for (size_t i = 0; i < s->num_timers; i++) {
        free(s->timers[i].key.ptr);
    }
    for (size_t i = 0; i < s->num_ptimers; i++) {
        free(s->ptimers[i].key.ptr);
    }
    free(s->cells);
    free(s->timers);
    free(s->ptimers);
    free(s);
}

bool weir_test_restore(const weir_test_snapshot_t *s, const char *const *config) {
    host_reset();
    /* In the snapshot's order: a list's elements, and timers of one time
     * (which fire in registration order), stay in theirs. */
    for (size_t i = 0; i < s->num_cells; i++) {
        const cell_t *c = &s->cells[i];
        cell_push(c->state, &c->key, &c->user_key, &c->value);
    }
    for (size_t i = 0; i < s->num_timers; i++) {
        weir_operator_timers_state_error_t err;
        operator_list_u8_t key = s->timers[i].key;
        weir_operator_timers_register_event_timer(&key, s->timers[i].time, &err);
    }
    for (size_t i = 0; i < s->num_ptimers; i++) {
        weir_operator_timers_state_error_t err;
        operator_list_u8_t key = s->ptimers[i].key;
        weir_operator_timers_register_processing_timer(&key, s->ptimers[i].time, &err);
    }
    watermark = s->watermark;
    processing_time = s->processing_time;
    return open_operator(config);
}

/* ------------------------------------------------------------ transcripts */

void weir_test_text_append(weir_test_text_t *t, const char *s) {
    size_t n = strlen(s);
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->ptr = realloc(t->ptr, t->cap);
        if (t->ptr == NULL) {
            abort();
        }
    }
    memcpy(t->ptr + t->len, s, n + 1);
    t->len += n;
}

/* `bytes` in double quotes, printable ASCII as it is but for `"` and `\`,
 * every other byte as \xNN. */
static void text_bytes(weir_test_text_t *t, const uint8_t *bytes, size_t len) {
    char piece[5];
    weir_test_text_append(t, "\"");
    for (size_t i = 0; i < len; i++) {
        uint8_t c = bytes[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            piece[0] = (char)c;
            piece[1] = '\0';
        } else {
            snprintf(piece, sizeof(piece), "\\x%02x", c);
        }
        weir_test_text_append(t, piece);
    }
    weir_test_text_append(t, "\"");
}

static void text_i64(weir_test_text_t *t, const char *before, int64_t n) {
    char number[48];
    snprintf(number, sizeof(number), "%s%lld", before, (long long)n);
    weir_test_text_append(t, number);
}

void weir_test_text_record(weir_test_text_t *t, const char *tag, const weir_bytes_t *key, weir_bytes_t value,
                           int64_t timestamp) {
    if (tag == NULL) {
        weir_test_text_append(t, "main ");
    } else {
        weir_test_text_append(t, "side ");
        text_bytes(t, (const uint8_t *)tag, strlen(tag));
        weir_test_text_append(t, " ");
    }
    if (key != NULL) {
        text_bytes(t, key->ptr, key->len);
    } else {
        weir_test_text_append(t, "-");
    }
    weir_test_text_append(t, " ");
    text_bytes(t, value.ptr, value.len);
    text_i64(t, " @", timestamp);
    weir_test_text_append(t, "\n");
}

void weir_test_text_output(weir_test_text_t *t, const weir_test_output_t *out) {
    for (size_t i = 0; i < out->len; i++) {
        const weir_test_record_t *r = &out->records[i];
        weir_bytes_t key = weir_buf_bytes(&r->key);
        weir_test_text_record(t, r->tag, r->has_key ? &key : NULL, weir_buf_bytes(&r->value), r->timestamp);
    }
}

static int compare_bytes(const operator_list_u8_t *a, const operator_list_u8_t *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n == 0 ? 0 : memcmp(a->ptr, b->ptr, n);
    return c != 0 ? c : (a->len > b->len) - (a->len < b->len);
}

/* The cells of the snapshot being printed, for compare_cells. */
static const cell_t *sorting;

/* By state, key and (maps) user key; list elements stay in their order. */
static int compare_cells(const void *a, const void *b) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const cell_t *x = &sorting[i], *y = &sorting[j];
    int c = (x->state > y->state) - (x->state < y->state);
    c = c != 0 ? c : compare_bytes(&x->key, &y->key);
    c = c != 0 ? c : compare_bytes(&x->user_key, &y->user_key);
    return c != 0 ? c : (i > j) - (i < j);
}

/* The timers of the snapshot being printed, for compare_timers. */
static const timer_t_ *sorting_timers;

/* In firing order: by time, then in registration order. */
static int compare_timers(const void *a, const void *b) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int64_t x = sorting_timers[i].time, y = sorting_timers[j].time;
    int c = (x > y) - (x < y);
    return c != 0 ? c : (i > j) - (i < j);
}

static void text_timers(weir_test_text_t *t, const char *kind, const timer_t_ *list, size_t n) {
    size_t *order = xmalloc(n * sizeof(size_t));
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
    }
    sorting_timers = list;
    qsort(order, n, sizeof(size_t), compare_timers);
    for (size_t i = 0; i < n; i++) {
        weir_test_text_append(t, kind);
        text_i64(t, " @", list[order[i]].time);
        weir_test_text_append(t, " ");
        text_bytes(t, list[order[i]].key.ptr, list[order[i]].key.len);
        weir_test_text_append(t, "\n");
    }
    free(order);
}

void weir_test_text_snapshot(weir_test_text_t *t, const weir_test_snapshot_t *s) {
    static const char *const kinds[] = {"value", "list", "map"};
    size_t *order = xmalloc(s->num_cells * sizeof(size_t));
    for (size_t i = 0; i < s->num_cells; i++) {
        order[i] = i;
    }
    sorting = s->cells;
    qsort(order, s->num_cells, sizeof(size_t), compare_cells);
    for (size_t i = 0; i < s->num_cells; i++) {
        const cell_t *c = &s->cells[order[i]];
        const weir_state_descriptor_t *state = &weir_operator.states[c->state];
        weir_test_text_append(t, kinds[state->kind]);
        weir_test_text_append(t, " ");
        weir_test_text_append(t, state->name);
        weir_test_text_append(t, " ");
        text_bytes(t, c->key.ptr, c->key.len);
        if (state->kind == WEIR_STATE_MAP) {
            weir_test_text_append(t, " ");
            text_bytes(t, c->user_key.ptr, c->user_key.len);
        }
        weir_test_text_append(t, " = ");
        text_bytes(t, c->value.ptr, c->value.len);
        weir_test_text_append(t, "\n");
    }
    free(order);
    text_timers(t, "timer", s->timers, s->num_timers);
    text_timers(t, "processing-time timer", s->ptimers, s->num_ptimers);
    text_i64(t, "watermark ", s->watermark);
    text_i64(t, "\nprocessing time ", s->processing_time);
    weir_test_text_append(t, "\n");
}

bool weir_test_text_same(const char *what, const weir_test_text_t *a, const weir_test_text_t *b) {
    if (a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0)) {
        return true;
    }
    const char *x = a->ptr != NULL ? a->ptr : "", *y = b->ptr != NULL ? b->ptr : "";
    size_t line = 1, at = 0;
    for (size_t i = 0; x[i] == y[i]; i++) {
        if (x[i] == '\n') {
            line++;
            at = i + 1;
        }
    }
    int n = (int)(strchr(x + at, '\n') != NULL ? strchr(x + at, '\n') - (x + at) : (ptrdiff_t)strlen(x + at));
    int m = (int)(strchr(y + at, '\n') != NULL ? strchr(y + at, '\n') - (y + at) : (ptrdiff_t)strlen(y + at));
    fprintf(stderr, "  %s: line %zu differs:\n    %.*s\n    %.*s\n", what, line, n, x + at, m, y + at);
    return false;
}

void weir_test_text_free(weir_test_text_t *t) {
    free(t->ptr);
    t->ptr = NULL;
    t->len = t->cap = 0;
}

/* ------------------------------------------------------ scripted recovery */

/* Opens (snapshot NULL) or restores the instance and sets the batch cache. */
static bool start_instance(const weir_test_snapshot_t *snapshot, const char *const *config, bool batched) {
    bool ok = snapshot == NULL ? weir_test_open(config) : weir_test_restore(snapshot, config);
    weir_test_set_batch_cache(batched);
    return ok;
}

/* Runs `steps` on the open instance, appending what they emitted to `t`. */
static bool run_steps(const weir_test_step_t *steps, size_t n, weir_test_text_t *t) {
    for (size_t i = 0; i < n; i++) {
        weir_test_output_t out = {0};
        bool ok = weir_test_process(steps[i].records, steps[i].len, &out);
        if (ok && steps[i].advance) {
            ok = weir_test_watermark(steps[i].watermark, &out);
        }
        weir_test_text_output(t, &out);
        weir_test_output_free(&out);
        if (!ok) {
            return false;
        }
    }
    return true;
}

/* Appends the host's state now to `t`. */
static void text_now(weir_test_text_t *t) {
    weir_test_snapshot_t *now = weir_test_snapshot();
    weir_test_text_snapshot(t, now);
    weir_test_snapshot_free(now);
}

bool weir_test_run_with_failure(const char *const *config, bool batched, const weir_test_step_t *steps, size_t n,
                                size_t checkpoint, size_t failure, weir_test_failure_run_t *run) {
    weir_test_failure_run_t empty = {WEIR_TEST_TEXT_INIT, WEIR_TEST_TEXT_INIT, WEIR_TEST_TEXT_INIT,
                                     WEIR_TEST_TEXT_INIT, 0};
    *run = empty;
    if (checkpoint > failure || failure > n) {
        return harness_failed("weir_test_run_with_failure: the checkpoint, the failure and the steps are out of order");
    }
    if (!start_instance(NULL, config, batched) || !run_steps(steps, checkpoint, &run->committed)) {
        return false;
    }
    weir_test_snapshot_t *snapshot = weir_test_snapshot();
    bool ok = run_steps(steps + checkpoint, failure - checkpoint, &run->lost);
    run->batched_state_calls = weir_test_batched_state_calls();
    ok = ok && start_instance(snapshot, config, batched);
    weir_test_snapshot_free(snapshot);
    ok = ok && run_steps(steps + checkpoint, n - checkpoint, &run->committed);
    if (!ok) {
        return false;
    }
    text_now(&run->before_end);
    weir_test_output_t out = {0};
    ok = weir_test_finish(&out);
    weir_test_text_output(&run->committed, &out);
    weir_test_output_free(&out);
    text_now(&run->at_end);
    run->batched_state_calls += weir_test_batched_state_calls();
    return ok;
}

void weir_test_failure_run_free(weir_test_failure_run_t *run) {
    weir_test_text_free(&run->committed);
    weir_test_text_free(&run->lost);
    weir_test_text_free(&run->before_end);
    weir_test_text_free(&run->at_end);
}

bool weir_test_same_runs(const weir_test_failure_run_t *batched, const weir_test_failure_run_t *per_call) {
    if (batched->batched_state_calls == 0 || per_call->batched_state_calls != 0) {
        fprintf(stderr, "  batched calls: %" PRIu64 " with the cache (want some), %" PRIu64 " without (want none)\n",
                batched->batched_state_calls, per_call->batched_state_calls);
        return false;
    }
    /* Each comparison runs, so every difference is printed. */
    bool same = weir_test_text_same("committed", &batched->committed, &per_call->committed);
    same &= weir_test_text_same("lost", &batched->lost, &per_call->lost);
    same &= weir_test_text_same("before the end", &batched->before_end, &per_call->before_end);
    same &= weir_test_text_same("at the end", &batched->at_end, &per_call->at_end);
    return same;
}

bool weir_test_steps_repeat_a_key(const weir_test_step_t *steps, size_t n) {
    for (size_t s = 0; s < n; s++) {
        const weir_record_t *r = steps[s].records;
        for (size_t i = 0; i < steps[s].len; i++) {
            for (size_t j = 0; j < i; j++) {
                if (r[i].has_key && r[j].has_key && weir_bytes_eq(r[i].key, r[j].key)) {
                    return true;
                }
            }
        }
    }
    return false;
}

weir_record_t weir_test_record(const char *key, const char *value, int64_t timestamp) {
    weir_record_t r;
    r.timestamp = timestamp;
    r.has_key = key != NULL;
    r.key = key != NULL ? weir_cstr(key) : weir_cstr("");
    r.value = weir_cstr(value);
    return r;
}

/* Packs `records` into one columnar batch the callee owns, as the host passes it. */
static weir_operator_types_batch_t pack(const weir_record_t *records, size_t len) {
    size_t data_len = 0;
    for (size_t i = 0; i < len; i++) {
        data_len += (records[i].has_key ? records[i].key.len : 0) + records[i].value.len;
    }
    weir_operator_types_batch_t batch;
    batch.timestamps.len = batch.key_lens.len = batch.value_lens.len = len;
    batch.timestamps.ptr = len != 0 ? xmalloc(len * sizeof(int64_t)) : NULL;
    batch.key_lens.ptr = len != 0 ? xmalloc(len * sizeof(int32_t)) : NULL;
    batch.value_lens.ptr = len != 0 ? xmalloc(len * sizeof(uint32_t)) : NULL;
    batch.data.len = data_len;
    batch.data.ptr = data_len != 0 ? xmalloc(data_len) : NULL;
    size_t offset = 0;
    for (size_t i = 0; i < len; i++) {
        const weir_record_t *r = &records[i];
        batch.timestamps.ptr[i] = r->timestamp;
        batch.key_lens.ptr[i] = r->has_key ? (int32_t)r->key.len : -1;
        batch.value_lens.ptr[i] = (uint32_t)r->value.len;
        if (r->has_key && r->key.len != 0) {
            memcpy(batch.data.ptr + offset, r->key.ptr, r->key.len);
        }
        offset += r->has_key ? r->key.len : 0;
        if (r->value.len != 0) {
            memcpy(batch.data.ptr + offset, r->value.ptr, r->value.len);
        }
        offset += r->value.len;
    }
    return batch;
}

bool weir_test_process(const weir_record_t *records, size_t len, weir_test_output_t *out) {
    weir_operator_types_batch_t batch = pack(records, len);
    weir_operator_types_emitted_t emitted;
    operator_string_t err;
    if (!exports_weir_operator_operator_process(&batch, &emitted, &err)) {
        return failed(&err);
    }
    take_emitted(&emitted, out);
    return true;
}

bool weir_test_process_input(uint32_t input, const weir_record_t *records, size_t len, weir_test_output_t *out) {
    weir_operator_types_batch_t batch = pack(records, len);
    weir_operator_types_emitted_t emitted;
    operator_string_t err;
    if (!exports_weir_operator_two_input_process_input(input, &batch, &emitted, &err)) {
        return failed(&err);
    }
    take_emitted(&emitted, out);
    return true;
}

bool weir_test_advance_processing_time(int64_t ms, weir_test_output_t *out) {
    processing_time += ms;
    for (;;) {
        /* The earliest due timer (registration order among equal times). */
        size_t next = num_ptimers;
        for (size_t i = 0; i < num_ptimers; i++) {
            if (ptimers[i].time <= processing_time &&
                (next == num_ptimers || ptimers[i].time < ptimers[next].time)) {
                next = i;
            }
        }
        if (next == num_ptimers) {
            return true;
        }
        operator_list_u8_t key = ptimers[next].key; /* handed over: the callee frees it */
        int64_t time = ptimers[next].time;
        memmove(&ptimers[next], &ptimers[next + 1], (num_ptimers - next - 1) * sizeof(timer_t_));
        num_ptimers--;
        if (key.len == 0) {
            key.ptr = NULL;
        }
        weir_operator_types_emitted_t emitted;
        operator_string_t err;
        if (!exports_weir_operator_processing_time_on_processing_timer(&key, time, &emitted, &err)) {
            return failed(&err);
        }
        take_emitted(&emitted, out);
    }
}

bool weir_test_watermark(int64_t to, weir_test_output_t *out) {
    if (to > watermark) {
        watermark = to;
    }
    for (;;) {
        /* The earliest due timer (registration order among equal times). */
        size_t next = num_timers;
        for (size_t i = 0; i < num_timers; i++) {
            if (timers[i].time <= watermark && (next == num_timers || timers[i].time < timers[next].time)) {
                next = i;
            }
        }
        if (next == num_timers) {
            break;
        }
        operator_list_u8_t key = timers[next].key; /* handed over: the callee frees it */
        int64_t time = timers[next].time;
        memmove(&timers[next], &timers[next + 1], (num_timers - next - 1) * sizeof(timer_t_));
        num_timers--;
        if (key.len == 0) {
            key.ptr = NULL;
        }
        weir_operator_types_emitted_t emitted;
        operator_string_t err;
        if (!exports_weir_operator_operator_on_timer(&key, time, &emitted, &err)) {
            return failed(&err);
        }
        take_emitted(&emitted, out);
    }
    weir_operator_types_emitted_t emitted;
    operator_string_t err;
    if (!exports_weir_operator_operator_on_watermark(watermark, &emitted, &err)) {
        return failed(&err);
    }
    take_emitted(&emitted, out);
    return true;
}

bool weir_test_finish(weir_test_output_t *out) {
    if (!weir_test_watermark(INT64_MAX, out)) {
        return false;
    }
    weir_operator_types_emitted_t emitted;
    operator_string_t err;
    if (!exports_weir_operator_operator_close(&emitted, &err)) {
        return failed(&err);
    }
    take_emitted(&emitted, out);
    return true;
}

/* Calls the migrate-state export with arguments the callee owns, as the host passes them. */
static bool migrate_state(const char *state, const char *from_version, const uint8_t *old, size_t old_len,
                          operator_list_u8_t *migrated) {
    operator_list_u8_t name = copy_bytes((const uint8_t *)state, strlen(state));
    operator_list_u8_t version = copy_bytes((const uint8_t *)from_version, strlen(from_version));
    operator_string_t name_str = {name.ptr, name.len};
    operator_string_t version_str = {version.ptr, version.len};
    operator_list_u8_t bytes = copy_bytes(old, old_len);
    operator_string_t err;
    if (!exports_weir_operator_migration_migrate_state(&name_str, &version_str, &bytes, migrated, &err)) {
        return failed(&err);
    }
    return true;
}

bool weir_test_migrate_state(const char *state, const char *from_version, weir_bytes_t old,
                             weir_buf_t *migrated) {
    operator_list_u8_t ret;
    if (!migrate_state(state, from_version, old.ptr, old.len, &ret)) {
        return false;
    }
    /* What post-return would free is the caller's now (weir_buf_free frees only len > 0). */
    migrated->ptr = ret.ptr;
    migrated->len = ret.len;
    return true;
}

bool weir_test_migrate_stored_state(const char *from_version) {
    if (weir_operator.version != NULL && strcmp(from_version, weir_operator.version) == 0) {
        return true;
    }
    /* Every cell's new value first, so that a failure changes nothing. */
    operator_list_u8_t *migrated = xmalloc(num_cells * sizeof(operator_list_u8_t));
    size_t done = 0;
    bool ok = true;
    for (; done < num_cells; done++) {
        const cell_t *c = &cells[done];
        if (!migrate_state(weir_operator.states[c->state].name, from_version, c->value.ptr, c->value.len,
                           &migrated[done])) {
            ok = false;
            break;
        }
    }
    for (size_t i = 0; i < done; i++) {
        if (ok) {
            free(cells[i].value.ptr);
            cells[i].value = migrated[i];
        } else if (migrated[i].len != 0) {
            free(migrated[i].ptr);
        }
    }
    free(migrated);
    return ok;
}

/* ------------------------------------------------------ window functions */

weir_window_kind_t weir_test_window_kind(void) {
    return (weir_window_kind_t)exports_weir_operator_window_function_kind();
}

/* What a window call returned, as the caller's weir_buf_list_t (same layout;
 * weir_buf_list_free frees what post-return would). */
static void take_values(operator_list_list_u8_t *ret, weir_buf_list_t *out) {
    _Static_assert(sizeof(operator_list_u8_t) == sizeof(weir_buf_t), "weir_buf_t layout");
    out->items = (weir_buf_t *)ret->ptr;
    out->len = ret->len;
}

bool weir_test_window_add(const weir_test_accumulator_t *accumulators, size_t n, const uint32_t *targets,
                          const weir_record_t *records, size_t len, weir_buf_list_t *out) {
    operator_list_option_list_u8_t accs = {n != 0 ? xmalloc(n * sizeof(operator_option_list_u8_t)) : NULL, n};
    for (size_t i = 0; i < n; i++) {
        accs.ptr[i].is_some = accumulators[i].is_some;
        if (accumulators[i].is_some) {
            accs.ptr[i].val = copy_bytes(accumulators[i].bytes.ptr, accumulators[i].bytes.len);
        }
    }
    operator_list_u32_t t = {len != 0 ? xmalloc(len * sizeof(uint32_t)) : NULL, len};
    if (len != 0) {
        memcpy(t.ptr, targets, len * sizeof(uint32_t));
    }
    weir_operator_types_batch_t batch = pack(records, len);
    operator_list_list_u8_t ret;
    operator_string_t err;
    if (!exports_weir_operator_window_function_add(&accs, &t, &batch, &ret, &err)) {
        return failed(&err);
    }
    take_values(&ret, out);
    return true;
}

bool weir_test_window_merge(const weir_bytes_t *a, const weir_bytes_t *b, size_t n, weir_buf_list_t *out) {
    operator_list_tuple2_list_u8_list_u8_t pairs = {n != 0 ? xmalloc(n * sizeof(*pairs.ptr)) : NULL, n};
    for (size_t i = 0; i < n; i++) {
        pairs.ptr[i].f0 = copy_bytes(a[i].ptr, a[i].len);
        pairs.ptr[i].f1 = copy_bytes(b[i].ptr, b[i].len);
    }
    operator_list_list_u8_t ret;
    operator_string_t err;
    if (!exports_weir_operator_window_function_merge(&pairs, &ret, &err)) {
        return failed(&err);
    }
    take_values(&ret, out);
    return true;
}

bool weir_test_window_get_result(const weir_test_accumulated_t *windows, size_t n, weir_buf_list_t *out) {
    exports_weir_operator_window_function_list_accumulated_t list = {
        n != 0 ? xmalloc(n * sizeof(*list.ptr)) : NULL, n};
    for (size_t i = 0; i < n; i++) {
        list.ptr[i].key = copy_bytes(windows[i].key.ptr, windows[i].key.len);
        list.ptr[i].window.start = windows[i].window.start;
        list.ptr[i].window.end = windows[i].window.end;
        list.ptr[i].accumulator = copy_bytes(windows[i].accumulator.ptr, windows[i].accumulator.len);
    }
    operator_list_list_u8_t ret;
    operator_string_t err;
    if (!exports_weir_operator_window_function_get_result(&list, &ret, &err)) {
        return failed(&err);
    }
    take_values(&ret, out);
    return true;
}

/* A failure of the harness's own checks (what the host checks of a result). */
static bool harness_failed(const char *message) {
    operator_string_t err = {NULL, strlen(message)};
    err.ptr = xmalloc(err.len);
    memcpy(err.ptr, message, err.len);
    return failed(&err);
}

/* The one value of a call that returns one per input, moved to `*value`;
 * false if there is not exactly one (as the host, which fails the task). */
static bool only_value(weir_buf_list_t *values, weir_buf_t *value) {
    if (values->len != 1) {
        weir_buf_list_free(values);
        return harness_failed("the window call returned a number of values other than its number of windows");
    }
    *value = values->items[0];
    free(values->items);
    values->items = NULL;
    values->len = 0;
    return true;
}

static bool get_result(weir_bytes_t key, weir_window_t window, weir_buf_t *acc, weir_buf_t *result) {
    weir_test_accumulated_t w = {key, window, weir_buf_bytes(acc)};
    weir_buf_list_t values;
    bool ok = weir_test_window_get_result(&w, 1, &values);
    weir_buf_free(acc);
    return ok && only_value(&values, result);
}

bool weir_test_aggregate(weir_bytes_t key, weir_window_t window, const weir_record_t *records, size_t len,
                         size_t chunk, weir_buf_t *result) {
    if (chunk == 0 || chunk > len) {
        chunk = len;
    }
    weir_buf_t acc = {NULL, 0};
    bool have = false;
    size_t done = 0;
    do {
        size_t k = len - done < chunk ? len - done : chunk;
        uint32_t *targets = xmalloc(k * sizeof(uint32_t));
        for (size_t i = 0; i < k; i++) {
            targets[i] = 0;
        }
        weir_test_accumulator_t in = {have, weir_buf_bytes(&acc)};
        weir_buf_list_t values;
        bool ok = weir_test_window_add(&in, 1, targets, records + done, k, &values);
        free(targets);
        weir_buf_free(&acc);
        if (!ok) {
            return false;
        }
        if (!only_value(&values, &acc)) {
            return false;
        }
        have = true;
        done += k;
    } while (done < len);
    return get_result(key, window, &acc, result);
}

bool weir_test_merged_aggregate(weir_bytes_t key, weir_window_t window, const weir_record_t *a, size_t a_len,
                                const weir_record_t *b, size_t b_len, weir_buf_t *result) {
    size_t len = a_len + b_len;
    weir_record_t *records = xmalloc(len * sizeof(weir_record_t));
    uint32_t *targets = xmalloc(len * sizeof(uint32_t));
    for (size_t i = 0; i < len; i++) {
        records[i] = i < a_len ? a[i] : b[i - a_len];
        targets[i] = i < a_len ? 0 : 1;
    }
    weir_test_accumulator_t fresh[2] = {{false, {NULL, 0}}, {false, {NULL, 0}}};
    weir_buf_list_t halves;
    bool ok = weir_test_window_add(fresh, 2, targets, records, len, &halves);
    free(records);
    free(targets);
    if (!ok) {
        return false;
    }
    if (halves.len != 2) {
        weir_buf_list_free(&halves);
        return harness_failed("the window call returned a number of values other than its number of windows");
    }
    weir_bytes_t first = weir_buf_bytes(&halves.items[0]);
    weir_bytes_t second = weir_buf_bytes(&halves.items[1]);
    weir_buf_list_t merged;
    ok = weir_test_window_merge(&first, &second, 1, &merged);
    weir_buf_list_free(&halves);
    weir_buf_t acc;
    if (!ok || !only_value(&merged, &acc)) {
        return false;
    }
    return get_result(key, window, &acc, result);
}

bool weir_test_process_window(weir_bytes_t key, weir_window_t window, const weir_record_t *records, size_t len,
                              weir_test_output_t *out) {
    operator_list_u8_t k = copy_bytes(key.ptr, key.len);
    exports_weir_operator_window_function_window_t w = {window.start, window.end};
    weir_operator_types_batch_t batch = pack(records, len);
    weir_operator_types_emitted_t emitted;
    operator_string_t err;
    if (!exports_weir_operator_window_function_process_window(&k, &w, &batch, &emitted, &err)) {
        return failed(&err);
    }
    size_t from = out->len;
    take_emitted(&emitted, out);
    /* The host gives every record the window's last millisecond. */
    for (size_t i = from; i < out->len; i++) {
        out->records[i].timestamp = window.end != INT64_MIN ? window.end - 1 : window.end;
    }
    return true;
}

void weir_test_output_free(weir_test_output_t *out) {
    for (size_t i = 0; i < out->len; i++) {
        free(out->records[i].key.ptr);
        free(out->records[i].value.ptr);
        free(out->records[i].tag);
    }
    free(out->records);
    out->records = NULL;
    out->len = 0;
}

bool weir_test_value_is(const weir_test_record_t *record, const char *s) {
    return weir_bytes_eq(weir_buf_bytes(&record->value), weir_cstr(s));
}

int weir_test_summary(void) {
    printf("%d passed, %d failed\n", weir_test_passed, weir_test_failed);
    return weir_test_failed == 0 ? 0 : 1;
}
