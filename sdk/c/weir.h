/*
 * weir.h: the C SDK for Weir stream operators.
 *
 * A C operator is one `const weir_operator_t weir_operator` definition: its
 * name, its declared keyed states and a few callbacks. weir.c implements the
 * WIT `operator` interface (wit/operator.wit) on top of it: it walks each
 * input batch record by record, hands every record to `process_element`
 * with a context that carries the record's key, gathers what the callbacks
 * emit into growable columnar output batches, and turns a failed callback
 * into the call's `err(message)`. bindings/ is generated for the world
 * `window-operator` (see REGENERATE.md), so every C component also exports:
 *   - `migration` (`migrate-state`, called by `weir upgrade`), with each
 *     state's optional `migrate` function (weir_migrate_fn below);
 *   - `two-input` (`process-input`): input 0 is `process_element`, input 1
 *     `process_element2` (a keyed co-process function; without it input 1
 *     is an error);
 *   - `processing-time` (`on-processing-timer`): `on_processing_timer`
 *     (an error if it is not defined);
 *   - `window-function`: kind `none`, unless `weir_operator` is a window
 *     function (`aggregate` or `process_window`, see "Window functions").
 *
 * What this header owns:
 *   - weir_bytes_t, weir_record_t: borrowed views of records;
 *   - weir_batch_view_t + weir_batch_next(): iterate a columnar batch;
 *   - weir_batch_builder_t: build an output batch in bulk;
 *   - state, timer, log and metric helpers scoped by the context's key;
 *   - window functions: weir_aggregate_t, weir_process_window_fn;
 *   - weir_builder_append_json_string(), weir_builder_append_utf8_lossy(),
 *     weir_parse_i64(): small text helpers;
 *   - weir_migrate_fn: how a state's stored bytes change on an upgrade;
 *   - the state value encoding shared by every SDK (wit/README.md, "State
 *     value encoding"): fixed-width little-endian integers and floats, one
 *     byte for bool, strings and bytes as they are.
 *
 * Invariants: a component holds one operator instance and the host calls it
 * sequentially, so the SDK keeps its per-call state (the error message, the
 * output builders) in statics. Every weir_bytes_t handed to a callback is
 * borrowed and valid only during that callback.
 *
 * The generated bindings (bindings/operator.h) are an implementation detail
 * of weir.c: an operator needs only this header.
 */
#ifndef WEIR_H
#define WEIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- bytes */

/* A borrowed run of bytes (not NUL-terminated). */
typedef struct {
    const uint8_t *ptr;
    size_t len;
} weir_bytes_t;

/* The bytes of a NUL-terminated string, without the NUL. */
static inline weir_bytes_t weir_cstr(const char *s) {
    weir_bytes_t b = {(const uint8_t *)s, strlen(s)};
    return b;
}

/* True if `a` and `b` hold the same bytes. */
static inline bool weir_bytes_eq(weir_bytes_t a, weir_bytes_t b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* True if `a` holds exactly the bytes of the C string `s`. */
static inline bool weir_bytes_eq_cstr(weir_bytes_t a, const char *s) {
    return weir_bytes_eq(a, weir_cstr(s));
}

/* Bytes the caller owns (from a state read): free with weir_buf_free. */
typedef struct {
    uint8_t *ptr;
    size_t len;
} weir_buf_t;

void weir_buf_free(weir_buf_t *buf);
/* `len` uninitialised bytes ({NULL, 0} for none); out of memory traps. */
weir_buf_t weir_buf_alloc(size_t len);
/* A copy of `bytes`. */
weir_buf_t weir_buf_copy(weir_bytes_t bytes);

static inline weir_bytes_t weir_buf_bytes(const weir_buf_t *buf) {
    weir_bytes_t b = {buf->ptr, buf->len};
    return b;
}

/* ------------------------------------------------------ records, batches */

/* One record; key and value point into the batch's buffer. */
typedef struct {
    /* Event time: milliseconds since the Unix epoch. */
    int64_t timestamp;
    /* False for a record without a key (key-len -1); `key` is then empty. */
    bool has_key;
    weir_bytes_t key;
    weir_bytes_t value;
} weir_record_t;

/* A columnar batch as the host passes it (wit/README.md, "Records and
 * batches"): `len` records; record i's key starts where record i-1's value
 * ended, and is key_lens[i] bytes long (-1: no key); its value follows. */
typedef struct {
    size_t len;
    const int64_t *timestamps;
    const int32_t *key_lens;
    const uint32_t *value_lens;
    const uint8_t *data;
    size_t data_len;
} weir_batch_view_t;

/* A cursor over a batch's records. */
typedef struct {
    const weir_batch_view_t *batch;
    size_t index;
    size_t offset;
} weir_batch_iter_t;

static inline weir_batch_iter_t weir_batch_iter(const weir_batch_view_t *batch) {
    weir_batch_iter_t it = {batch, 0, 0};
    return it;
}

/* Reads the next record into `*record`: 1 if there was one, 0 at the end,
 * -1 if the batch is malformed there (a key length below -1, or lengths
 * running past the data). */
static inline int weir_batch_next(weir_batch_iter_t *it, weir_record_t *record) {
    const weir_batch_view_t *b = it->batch;
    if (it->index >= b->len) {
        return 0;
    }
    int32_t key_len = b->key_lens[it->index];
    size_t value_len = b->value_lens[it->index];
    size_t key_bytes = key_len < 0 ? 0 : (size_t)key_len;
    size_t left = b->data_len - it->offset;
    if (key_len < -1 || key_bytes > left || value_len > left - key_bytes) {
        return -1;
    }
    record->timestamp = b->timestamps[it->index];
    record->has_key = key_len >= 0;
    record->key.ptr = b->data + it->offset;
    record->key.len = key_bytes;
    record->value.ptr = b->data + it->offset + key_bytes;
    record->value.len = value_len;
    it->offset += key_bytes + value_len;
    it->index++;
    return 1;
}

/* An output batch under construction: growable columns and data. Records
 * are appended whole (weir_builder_push) or value piece by value piece
 * (weir_builder_begin, weir_builder_append*, weir_builder_end), so a value
 * is written straight into the output buffer without a scratch copy.
 * Out of memory traps (abort). */
typedef struct {
    int64_t *timestamps;
    int32_t *key_lens;
    uint32_t *value_lens;
    size_t len, cap;
    uint8_t *data;
    size_t data_len, data_cap;
    /* Where the open record's value starts in `data`; SIZE_MAX if none is open. */
    size_t value_start;
} weir_batch_builder_t;

#define WEIR_BATCH_BUILDER_INIT {NULL, NULL, NULL, 0, 0, NULL, 0, 0, SIZE_MAX}

/* Makes room for `records` more records and `bytes` more data bytes. */
void weir_builder_reserve(weir_batch_builder_t *b, size_t records, size_t bytes);
/* Appends a record; `key` NULL means no key. */
void weir_builder_push(weir_batch_builder_t *b, int64_t timestamp, const weir_bytes_t *key,
                       weir_bytes_t value);
/* Starts a record whose value the next appends write; `key` NULL means no key. */
void weir_builder_begin(weir_batch_builder_t *b, int64_t timestamp, const weir_bytes_t *key);
void weir_builder_append(weir_batch_builder_t *b, weir_bytes_t bytes);
void weir_builder_append_byte(weir_batch_builder_t *b, uint8_t byte);
/* Appends `n` in decimal ASCII, as printf's PRIu64 / PRId64 would. */
void weir_builder_append_u64(weir_batch_builder_t *b, uint64_t n);
void weir_builder_append_i64(weir_batch_builder_t *b, int64_t n);
/* Returns `n` bytes at the end of the open value to write into directly. */
uint8_t *weir_builder_extend(weir_batch_builder_t *b, size_t n);
/* Appends `s` as a JSON string, quotes included: `"` and `\` escaped,
 * control characters as \b \f \n \r \t or \u00XX, other characters as
 * they are; invalid UTF-8 is replaced by U+FFFD, one per maximal invalid
 * subsequence (as Rust's String::from_utf8_lossy, then serde_json). */
void weir_builder_append_json_string(weir_batch_builder_t *b, weir_bytes_t s);
/* Appends `s` as text, as Rust's String::from_utf8_lossy makes it: valid
 * UTF-8 as it is, each maximal invalid subsequence replaced by U+FFFD. */
void weir_builder_append_utf8_lossy(weir_batch_builder_t *b, weir_bytes_t s);
/* Ends the open record. */
void weir_builder_end(weir_batch_builder_t *b);
/* Frees the builder's buffers and resets it. */
void weir_builder_free(weir_batch_builder_t *b);

/* ---------------------------------------------------------- the operator */

typedef uint32_t weir_state_id_t;

typedef enum {
    WEIR_STATE_VALUE = 0,
    WEIR_STATE_LIST = 1,
    WEIR_STATE_MAP = 2,
} weir_state_kind_t;

/* A state's migration, run when `weir upgrade` replaces the operator in
 * place with a version whose `version` differs: the new bytes of one stored
 * value (a value, a list element, a map value; never a map's user key)
 * written by operator version `from_version`. `old` is borrowed, as the old
 * version encoded it. Set `*migrated` to the bytes this version reads, from
 * weir_buf_alloc or weir_buf_copy (the SDK hands them to the host and frees
 * them; to keep the bytes, `*migrated = weir_buf_copy(old)`), and return
 * true; or return false after weir_fail() to abort the upgrade (the job
 * goes back to its old modules). It runs before `open`: no config, no state
 * access, no context. */
typedef bool (*weir_migrate_fn)(weir_bytes_t from_version, weir_bytes_t old, weir_buf_t *migrated);

/* A declared keyed state; its weir_state_id_t is its index in
 * weir_operator_t.states. */
typedef struct {
    const char *name;
    weir_state_kind_t kind;
    /* Time to live in milliseconds of processing time; 0 = forever. */
    uint64_t ttl_ms;
    /* How values an older version stored become this version's; NULL keeps
     * them as they are. */
    weir_migrate_fn migrate;
} weir_state_descriptor_t;

#define WEIR_VALUE_STATE(name) {(name), WEIR_STATE_VALUE, 0, NULL}
#define WEIR_LIST_STATE(name) {(name), WEIR_STATE_LIST, 0, NULL}
#define WEIR_MAP_STATE(name) {(name), WEIR_STATE_MAP, 0, NULL}
/* The same, with a migration (weir_migrate_fn). */
#define WEIR_VALUE_STATE_MIGRATED(name, migrate) {(name), WEIR_STATE_VALUE, 0, (migrate)}
#define WEIR_LIST_STATE_MIGRATED(name, migrate) {(name), WEIR_STATE_LIST, 0, (migrate)}
#define WEIR_MAP_STATE_MIGRATED(name, migrate) {(name), WEIR_STATE_MAP, 0, (migrate)}

/* What `open` is told: see weir_open_* below. Valid during `open` only. */
typedef struct weir_open_context weir_open_context_t;

/* The operator's uid from the job spec. */
weir_bytes_t weir_open_operator_id(const weir_open_context_t *ctx);
uint32_t weir_open_subtask_index(const weir_open_context_t *ctx);
uint32_t weir_open_parallelism(const weir_open_context_t *ctx);
uint32_t weir_open_max_parallelism(const weir_open_context_t *ctx);
/* The config entry `name` (strings as they are, other scalars in TOML
 * syntax, tables and arrays as JSON): true and `*value` set if present. */
bool weir_config_get(const weir_open_context_t *ctx, const char *name, weir_bytes_t *value);

/* The context of a callback: its key (keyed operators), its timestamp, and
 * where it emits. Valid during the callback only. */
typedef struct weir_ctx weir_ctx_t;

/* The current key: the record's key in process_element, the timer's key in
 * on_timer; empty elsewhere. */
weir_bytes_t weir_ctx_key(const weir_ctx_t *ctx);
/* The current record's timestamp, or the timer's time, or the watermark. */
int64_t weir_ctx_timestamp(const weir_ctx_t *ctx);
/* Scopes the state and timer calls that follow to `key` (process_batch). */
void weir_ctx_set_key(weir_ctx_t *ctx, weir_bytes_t key);

/* The main output, for building records in bulk or piece by piece. */
weir_batch_builder_t *weir_ctx_out(weir_ctx_t *ctx);
/* The side output `tag` (created on first use). */
weir_batch_builder_t *weir_ctx_side(weir_ctx_t *ctx, const char *tag);

/* Emits a record on the main output at the context's timestamp; `key` NULL
 * means no key. */
void weir_emit(weir_ctx_t *ctx, const weir_bytes_t *key, weir_bytes_t value);
/* Emits a record on the side output `tag` at the context's timestamp. */
void weir_emit_side(weir_ctx_t *ctx, const char *tag, const weir_bytes_t *key, weir_bytes_t value);

/* ------------------------------------------------------ window functions */

/* A window `[start, end)` in ms of event time. A count window (`type =
 * "global"`) is the whole time line: start INT64_MIN, end INT64_MAX. */
typedef struct {
    int64_t start;
    int64_t end;
} weir_window_t;

/* What the component's window function is (WIT `window-function-kind`). */
typedef enum {
    WEIR_WINDOW_NONE = 0,
    WEIR_WINDOW_AGGREGATE = 1,
    WEIR_WINDOW_PROCESS_WINDOW = 2,
} weir_window_kind_t;

/* An aggregate function (Flink's AggregateFunction) for the host's window
 * operator: one accumulator per key and window, updated record by record.
 * The accumulator is your own C type of `acc_size` bytes; the SDK keeps it
 * in memory it allocates (aligned for any type) and, between calls, as
 * bytes the host stores (`encode`/`decode`). It does all the batch
 * bookkeeping of the WIT calls: `add` with many windows at once, `merge`,
 * `get-result`. Every callback returns true, or false after weir_fail(). */
typedef struct {
    /* sizeof your accumulator type. */
    size_t acc_size;
    /* A new window's accumulator, in `acc` (acc_size zeroed bytes on entry).
     * NULL: the zeroed bytes are the new accumulator. */
    bool (*create)(void *acc);
    /* Adds one record (key, value, timestamp: borrowed) to `acc`. */
    bool (*add)(void *acc, const weir_record_t *record);
    /* Merges `other` into `acc` (session windows that a record joined).
     * NULL: merging fails (a session window needs it). */
    bool (*merge)(void *acc, const void *other);
    /* The window's result: append its bytes to `out`, whose record is open
     * (weir_builder_append*, _extend; not _begin/_push). The host emits it
     * with the window's key and the timestamp end - 1. */
    bool (*get_result)(weir_bytes_t key, weir_window_t window, const void *acc, weir_batch_builder_t *out);
    /* The accumulator as the bytes the host stores: append them to `out`,
     * as get_result does; use a fixed layout such as the state value
     * encoding (weir_encode_i64, ...). NULL: the acc_size bytes of the
     * struct as they are (a plain struct without pointers only). */
    bool (*encode)(const void *acc, weir_batch_builder_t *out);
    /* The inverse: `acc` from `bytes` (acc_size zeroed bytes on entry).
     * NULL: `bytes` must be exactly acc_size bytes and are copied. */
    bool (*decode)(weir_bytes_t bytes, void *acc);
    /* Frees what an accumulator owns (NULL: nothing); called once on every
     * accumulator that `create` or `decode` made (or the SDK's defaults),
     * also after a failure; not after a failed `create`/`decode`. */
    void (*drop)(void *acc);
} weir_aggregate_t;

/* A process-window function (Flink's ProcessWindowFunction): the window
 * `window` of `key` fired with `records`, all of them in arrival order
 * (borrowed: valid during the call). Emit through `ctx` as in
 * process_element (weir_emit, weir_emit_side, weir_ctx_out): the context's
 * key is `key` and its timestamp end - 1, which the host gives every
 * record emitted anyway. */
typedef bool (*weir_process_window_fn)(weir_bytes_t key, weir_window_t window, const weir_record_t *records,
                                       size_t len, weir_ctx_t *ctx);

/* The operator. Every callback but `process_element`/`process_batch` is
 * optional (NULL); each returns false after weir_fail() to fail the task.
 * A window function sets `aggregate` or `process_window` instead (and may
 * set `open`): see WEIR_AGGREGATE below. */
typedef struct {
    /* Shown by `weir inspect`. */
    const char *name;
    const char *version;
    /* True if the operator must run on a keyed stream (uses state or timers). */
    bool keyed;
    const weir_state_descriptor_t *states;
    size_t num_states;

    /* Once, before any record. */
    bool (*open)(const weir_open_context_t *ctx);
    /* One record; on a keyed operator the record must have a key, and the
     * context is scoped to it. */
    bool (*process_element)(const weir_record_t *record, weir_ctx_t *ctx);
    /* Instead of process_element: a whole batch at once. */
    bool (*process_batch)(const weir_batch_view_t *batch, weir_ctx_t *ctx);
    /* A timer registered for weir_ctx_key(ctx) fired at `time`. */
    bool (*on_timer)(int64_t time, weir_ctx_t *ctx);
    /* The watermark advanced (after due timers fired). */
    bool (*on_watermark)(int64_t watermark, weir_ctx_t *ctx);
    /* Once, after the last record; may emit. */
    bool (*close)(weir_ctx_t *ctx);

    /* A keyed co-process function (two inputs, Flink's
     * KeyedCoProcessFunction): process_element (or process_batch) gets the
     * records of input 0 (`input = "left"` in the job spec, or an edge
     * without `input`), process_element2 (or process_batch2) those of
     * input 1 (`input = "right"`). Keyed state and timers are shared. */
    bool (*process_element2)(const weir_record_t *record, weir_ctx_t *ctx);
    bool (*process_batch2)(const weir_batch_view_t *batch, weir_ctx_t *ctx);
    /* A processing-time timer registered for weir_ctx_key(ctx) fired at
     * `time` (the subtask's wall clock reached it; after a restore,
     * possibly later). Needed to register processing-time timers. */
    bool (*on_processing_timer)(int64_t time, weir_ctx_t *ctx);

    /* A window function instead of an operator (set one): the user
     * function of an `[[operator]]` with a `window` table. Its `describe`
     * says keyed = false and no states (`keyed`/`states` are ignored);
     * `open` calls `.open` as for an operator; `process`, `on-timer`,
     * `process-input` and `on-processing-timer` fail; `on-watermark` and
     * `close` emit nothing. */
    const weir_aggregate_t *aggregate;
    weir_process_window_fn process_window;
} weir_operator_t;

/* Every C operator defines exactly one of these. */
extern const weir_operator_t weir_operator;

/* A window function as a component:
 *   const weir_operator_t weir_operator = WEIR_AGGREGATE("stats", "0.1.0", &STATS);
 *   const weir_operator_t weir_operator = WEIR_PROCESS_WINDOW("top", "0.1.0", top_window);
 * (to read config, write the initializer out and add `.open`). */
#define WEIR_AGGREGATE(name_, version_, aggregate_)                                              \
    {.name = (name_), .version = (version_), .aggregate = (aggregate_)}
#define WEIR_PROCESS_WINDOW(name_, version_, process_window_)                                    \
    {.name = (name_), .version = (version_), .process_window = (process_window_)}

/* #define WEIR_NUM_STATES(array) for weir_operator_t.num_states. */
#define WEIR_COUNT(array) (sizeof(array) / sizeof((array)[0]))

/* ---------------------------------------------------------------- errors */

/* Records `message` as the current call's error and returns false, so a
 * callback can `return weir_fail("...")`. */
bool weir_fail(const char *message);
/* The same, printf-style (pulls in vsnprintf: ~30 KB more component). */
bool weir_failf(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* ---------------------------------------------------- keyed state, timers */

/* Each state call works on the context's key. Reads return 1 if the value
 * is there, 0 if not, and -1 on error (weir_fail already called: return
 * false). Writes return true, or false on error.
 *
 * In `process` of a keyed operator, value state of the batch's keys is read
 * for the whole batch on its first read and written back when the batch
 * ends (one value-get-many and one value-set-many per state, contract
 * 0.1.3), with the same results as a host call per access: a record sees
 * the writes of the records before it. Other keys, list and map state, and
 * the other callbacks go to the host on every call (README, "Keyed state"). */

int weir_value_get(weir_ctx_t *ctx, weir_state_id_t state, weir_buf_t *value);
bool weir_value_set(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t value);
/* Typed values in the shared encoding; a stored value of the wrong width
 * is an error. */
int weir_value_get_u64(weir_ctx_t *ctx, weir_state_id_t state, uint64_t *value);
bool weir_value_set_u64(weir_ctx_t *ctx, weir_state_id_t state, uint64_t value);
int weir_value_get_i64(weir_ctx_t *ctx, weir_state_id_t state, int64_t *value);
bool weir_value_set_i64(weir_ctx_t *ctx, weir_state_id_t state, int64_t value);
int weir_value_get_f64(weir_ctx_t *ctx, weir_state_id_t state, double *value);
bool weir_value_set_f64(weir_ctx_t *ctx, weir_state_id_t state, double value);

/* The elements of a list state, oldest first. */
typedef struct {
    weir_buf_t *items;
    size_t len;
} weir_buf_list_t;

void weir_buf_list_free(weir_buf_list_t *list);

/* All elements for the key (empty if none): true, or false on error. */
bool weir_list_get(weir_ctx_t *ctx, weir_state_id_t state, weir_buf_list_t *elements);
bool weir_list_add(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t element);

int weir_map_get(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t user_key, weir_buf_t *value);
bool weir_map_put(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t user_key, weir_bytes_t value);
bool weir_map_remove(weir_ctx_t *ctx, weir_state_id_t state, weir_bytes_t user_key);
/* All entries for the key, ordered by user key bytes: keys[i] -> values[i]. */
bool weir_map_entries(weir_ctx_t *ctx, weir_state_id_t state, weir_buf_list_t *keys,
                      weir_buf_list_t *values);

/* Removes whatever the state holds for the key. */
bool weir_state_clear(weir_ctx_t *ctx, weir_state_id_t state);

/* Event-time timers for the context's key; registering twice is a no-op. */
bool weir_register_event_timer(weir_ctx_t *ctx, int64_t time);
bool weir_delete_event_timer(weir_ctx_t *ctx, int64_t time);
int64_t weir_current_watermark(void);

/* Processing-time timers for the context's key (contract 0.1.2): fire
 * through `on_processing_timer` once the subtask's wall clock reaches
 * `time` (ms since the epoch); registering twice is a no-op. */
bool weir_register_processing_timer(weir_ctx_t *ctx, int64_t time);
bool weir_delete_processing_timer(weir_ctx_t *ctx, int64_t time);
/* The subtask's wall clock: ms since the epoch. */
int64_t weir_current_processing_time(void);

/* ------------------------------------------------------- log and metrics */

typedef enum {
    WEIR_LOG_TRACE = 0,
    WEIR_LOG_DEBUG = 1,
    WEIR_LOG_INFO = 2,
    WEIR_LOG_WARN = 3,
    WEIR_LOG_ERROR = 4,
} weir_log_level_t;

void weir_log(weir_log_level_t level, const char *message);
void weir_counter_add(const char *name, uint64_t delta);
void weir_gauge_set(const char *name, double value);

/* ----------------------------------------------------------------- text */

/* Parses a decimal integer (optional sign, ASCII digits) with optional
 * surrounding ASCII whitespace: false if `text` is anything else or out of
 * the range of int64_t. */
bool weir_parse_i64(weir_bytes_t text, int64_t *value);

/* ------------------------------------------- state value encoding (codec) */

static inline void weir_encode_u64(uint64_t v, uint8_t out[8]) {
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(v >> (8 * i));
    }
}

static inline uint64_t weir_load_u64(const uint8_t in[8]) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) {
        v |= (uint64_t)in[i] << (8 * i);
    }
    return v;
}

/* Decoders return false when `bytes` has the wrong length. */
static inline bool weir_decode_u64(weir_bytes_t bytes, uint64_t *v) {
    if (bytes.len != 8) {
        return false;
    }
    *v = weir_load_u64(bytes.ptr);
    return true;
}

static inline void weir_encode_i64(int64_t v, uint8_t out[8]) { weir_encode_u64((uint64_t)v, out); }

static inline bool weir_decode_i64(weir_bytes_t bytes, int64_t *v) {
    uint64_t u;
    if (!weir_decode_u64(bytes, &u)) {
        return false;
    }
    *v = (int64_t)u;
    return true;
}

static inline void weir_encode_u32(uint32_t v, uint8_t out[4]) {
    for (int i = 0; i < 4; i++) {
        out[i] = (uint8_t)(v >> (8 * i));
    }
}

static inline bool weir_decode_u32(weir_bytes_t bytes, uint32_t *v) {
    if (bytes.len != 4) {
        return false;
    }
    *v = (uint32_t)bytes.ptr[0] | (uint32_t)bytes.ptr[1] << 8 | (uint32_t)bytes.ptr[2] << 16 |
         (uint32_t)bytes.ptr[3] << 24;
    return true;
}

static inline void weir_encode_i32(int32_t v, uint8_t out[4]) { weir_encode_u32((uint32_t)v, out); }

static inline bool weir_decode_i32(weir_bytes_t bytes, int32_t *v) {
    uint32_t u;
    if (!weir_decode_u32(bytes, &u)) {
        return false;
    }
    *v = (int32_t)u;
    return true;
}

static inline void weir_encode_f64(double v, uint8_t out[8]) {
    uint64_t u;
    memcpy(&u, &v, 8);
    weir_encode_u64(u, out);
}

static inline bool weir_decode_f64(weir_bytes_t bytes, double *v) {
    uint64_t u;
    if (!weir_decode_u64(bytes, &u)) {
        return false;
    }
    memcpy(v, &u, 8);
    return true;
}

static inline void weir_encode_bool(bool v, uint8_t out[1]) { out[0] = v ? 1 : 0; }

/* Only 0 and 1 are valid. */
static inline bool weir_decode_bool(weir_bytes_t bytes, bool *v) {
    if (bytes.len != 1 || bytes.ptr[0] > 1) {
        return false;
    }
    *v = bytes.ptr[0] == 1;
    return true;
}

#ifdef __cplusplus
}
#endif

#endif /* WEIR_H */
