/*
 * weir_test.h: unit-test a C operator natively, without Wasm.
 *
 * weir_test.c stands in for the host: it implements the imported WIT
 * functions (keyed state in memory, event-time and processing-time timers
 * with a clock of its own, log to stderr, metrics dropped) and drives the
 * operator through weir.c's exports, the same path the component takes
 * (also `migrate-state`, the export `weir upgrade` calls; `process-input`
 * of two-input operators; `on-processing-timer`; the `window-function`
 * calls of the host's window operator). Build the test with the host compiler,
 * without bindings/operator.c (which is Wasm-only glue):
 *
 *   cc -std=c11 -I sdk/c -I sdk/c/bindings -I PROJECT/src -o test \
 *      PROJECT/src/(all .c) PROJECT/test/(all .c) sdk/c/weir.c sdk/c/weir_test.c
 *
 * (sdk/c/test.sh PROJECT_DIR does exactly that.) Like the Rust SDK's
 * testing harness it does not emulate key-group ownership or state TTL.
 * One operator per test binary; weir_test_open() starts afresh, and
 * weir_test_restore() afresh from a weir_test_snapshot(), as after a
 * failure. Transcripts (weir_test_text_t) and weir_test_run_with_failure()
 * compare whole runs byte for byte, e.g. with the batch cache on and off.
 */
#ifndef WEIR_TEST_H
#define WEIR_TEST_H

#include <stdio.h>

#include "weir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An emitted record: owned copies. `tag` is NULL for the main output. */
typedef struct {
    int64_t timestamp;
    bool has_key;
    weir_buf_t key;
    weir_buf_t value;
    char *tag;
} weir_test_record_t;

/* What one or more calls emitted, main and side outputs in call order. */
typedef struct {
    weir_test_record_t *records;
    size_t len;
} weir_test_output_t;

void weir_test_output_free(weir_test_output_t *out);

/* Opens the operator afresh (empty state, no timers) with `config`: name,
 * value, name, value, ..., NULL. False if `open` failed (see weir_test_error). */
bool weir_test_open(const char *const *config);

/* A keyed record from C strings (key NULL: no key). */
weir_record_t weir_test_record(const char *key, const char *value, int64_t timestamp);

/* Processes `records` as one batch; appends what it emitted to `out`. */
bool weir_test_process(const weir_record_t *records, size_t len, weir_test_output_t *out);

/* Advances the watermark: fires every timer at or before it, in time order,
 * then calls on_watermark; appends what they emitted to `out`. */
bool weir_test_watermark(int64_t watermark, weir_test_output_t *out);

/* The end of bounded input: the watermark to INT64_MAX, then close. */
bool weir_test_finish(weir_test_output_t *out);

/* The message of the last failed call. */
const char *weir_test_error(void);

/* The bytes a value state holds for `key`, as the host stores them: true
 * and `*value` set (valid until the next call) if there is a value. */
bool weir_test_state_value(weir_state_id_t state, weir_bytes_t key, weir_bytes_t *value);

/* Stores `value` for `key` in a value state, as if restored from a
 * checkpoint written by this or another SDK. Call after weir_test_open. */
void weir_test_set_state_value(weir_state_id_t state, weir_bytes_t key, weir_bytes_t value);

/* Element `index` of a list state's list for `key` (oldest first): true and
 * `*element` set (valid until the next call) if there is one. */
bool weir_test_list_element(weir_state_id_t state, weir_bytes_t key, size_t index, weir_bytes_t *element);

/* The value under `user_key` in a map state's map for `key`: true and
 * `*value` set (valid until the next call) if there is one. */
bool weir_test_map_value(weir_state_id_t state, weir_bytes_t key, weir_bytes_t user_key, weir_bytes_t *value);

/* What the component's `migrate-state` export returns for `old`, one stored
 * value of state `state` written by operator version `from_version`: the
 * state's `migrate` result, or `old` as it is without one. True and
 * `*migrated` set (free with weir_buf_free), or false with the message in
 * weir_test_error(). Needs no weir_test_open (the host calls it before
 * `open`). */
bool weir_test_migrate_state(const char *state, const char *from_version, weir_bytes_t old,
                             weir_buf_t *migrated);

/* Migrates everything stored, as `weir upgrade` does when the old operator
 * was at `from_version`: every value, list element and map value (not map
 * user keys) of every declared state; nothing when `from_version` is
 * weir_operator.version. Atomic: false (see weir_test_error) leaves the
 * stored state as it was. */
bool weir_test_migrate_stored_state(const char *from_version);

/* How many timers are registered and not yet fired. */
size_t weir_test_timer_count(void);

/* ------------------------------------------------ batched value state */

/* Host calls the operator made since weir_test_open: single-key state calls
 * (value-get, value-set, list-*, map-*, clear), and batched value-state
 * calls (value-get-many, value-set-many, contract 0.1.3): what a keyed
 * operator with value state makes instead, one of each per state and batch
 * (the SDK's batch cache, README "Keyed state"). */
uint64_t weir_test_state_calls(void);
uint64_t weir_test_batched_state_calls(void);

/* While `message` is not NULL, value-get-many and value-set-many fail with
 * the state error backend(message), to test the error paths. */
void weir_test_fail_batched_state_calls(const char *message);

/* false: every value-state access is a single host call (the SDK's path
 * without the batch cache), to check that the cache changes nothing but
 * the number of calls. weir_test_open restores both switches (cache on, no
 * failure). */
void weir_test_set_batch_cache(bool enabled);

/* ------------------------------------------------ checkpoint and restore */

/* What a checkpoint of the operator instance holds: every value, list
 * element and map entry of every key of every state, the registered
 * event-time and processing-time timers (in registration order, which is
 * their firing order among equal times), the watermark and the harness's
 * processing-time clock. Not in it: the counts of host calls. */
typedef struct weir_test_snapshot weir_test_snapshot_t;

/* A copy of what the host holds now; free it with weir_test_snapshot_free. */
weir_test_snapshot_t *weir_test_snapshot(void);
void weir_test_snapshot_free(weir_test_snapshot_t *snapshot);

/* Opens the operator afresh on what `snapshot` holds, as the host restores
 * a checkpoint into a new instance after a failure: weir_test_open (the
 * counts start at 0, the switches are reset: set the batch cache again
 * after it), but with the snapshot's state, timers, watermark and clock.
 * The process is the same, so statics of the SDK and the operator are
 * not reset: what `open` does not set survives, which a component
 * instance (fresh memory) would not let it. */
bool weir_test_restore(const weir_test_snapshot_t *snapshot, const char *const *config);

/* ------------------------------------------------------------ transcripts */

/* A growable text (NUL-terminated), to compare runs byte for byte and to
 * print where they differ. */
typedef struct {
    char *ptr;
    size_t len, cap;
} weir_test_text_t;

#define WEIR_TEST_TEXT_INIT {NULL, 0, 0}

void weir_test_text_append(weir_test_text_t *t, const char *s);

/* Appends one record as one line: `main` or `side "TAG"`, the key in
 * double quotes (`-` for none), the value in double quotes, `@` and the
 * timestamp. In quotes, printable ASCII stands as it is but for `"` and
 * `\`; every other byte is \xNN. */
void weir_test_text_record(weir_test_text_t *t, const char *tag, const weir_bytes_t *key, weir_bytes_t value,
                           int64_t timestamp);

/* Appends every record of `out`, in order (weir_test_text_record). */
void weir_test_text_output(weir_test_text_t *t, const weir_test_output_t *out);

/* Appends everything `snapshot` holds, one line per entry, in an order
 * that depends only on what it holds (cells by state, key and user key,
 * list elements in their order; timers in firing order), so two snapshots
 * holding the same print the same: `value NAME "KEY" = "VALUE"`,
 * `list NAME "KEY" = "ELEMENT"`, `map NAME "KEY" "USER KEY" = "VALUE"`,
 * `timer @TIME "KEY"`, `processing-time timer @TIME "KEY"`, then the
 * watermark and the clock. */
void weir_test_text_snapshot(weir_test_text_t *t, const weir_test_snapshot_t *snapshot);

/* True if `a` and `b` are the same text; if not, prints `what` and the
 * first line where they differ (one from each, the end of a text as an
 * empty line) to stderr. */
bool weir_test_text_same(const char *what, const weir_test_text_t *a, const weir_test_text_t *b);
void weir_test_text_free(weir_test_text_t *t);

/* ------------------------------------------------------ scripted recovery */

/* One step of a scripted run: a batch (`len` records, may be 0), then, if
 * `advance`, the watermark to `watermark` (weir_test_watermark). */
typedef struct {
    const weir_record_t *records;
    size_t len;
    bool advance;
    int64_t watermark;
} weir_test_step_t;

/* What weir_test_run_with_failure saw, as transcripts (free with
 * weir_test_failure_run_free). */
typedef struct {
    /* What an exactly-once sink commits: what the first instance emitted
     * up to the checkpoint, then everything the restored instance emitted
     * (the replay, the steps after it, and the end: weir_test_finish). */
    weir_test_text_t committed;
    /* What the first instance emitted after the checkpoint, before it
     * failed: discarded by the sink, emitted again by the replay. */
    weir_test_text_t lost;
    /* The restored instance's state (weir_test_text_snapshot) after the
     * last step, and after the end of input. */
    weir_test_text_t before_end, at_end;
    /* value-get-many and value-set-many calls of both instances. */
    uint64_t batched_state_calls;
} weir_test_failure_run_t;

/* Runs `steps` (n of them) as a job that checkpoints after `checkpoint`
 * steps and fails after `failure` (checkpoint <= failure <= n), with the
 * batch cache on or off (`batched`, weir_test_set_batch_cache): one
 * instance opened with `config` runs the steps up to the failure, taking a
 * snapshot at the checkpoint; a new one restored from it replays the steps
 * from the checkpoint on, then ends the input. The host's recovery, for
 * tests that an operator or the SDK survives one: compare two runs (cache
 * on and off) with weir_test_text_same, or `committed` with a transcript of
 * what the input should give. Afterwards the host holds the restored
 * instance's state (weir_test_state_value and friends). False (see
 * weir_test_error) if a call failed; `*run` holds what came before. */
bool weir_test_run_with_failure(const char *const *config, bool batched, const weir_test_step_t *steps, size_t n,
                                size_t checkpoint, size_t failure, weir_test_failure_run_t *run);
void weir_test_failure_run_free(weir_test_failure_run_t *run);

/* True if two weir_test_run_with_failure runs of the same steps, one with
 * the batch cache (`batched`) and one without (`per_call`), saw the same:
 * the first made batched calls, the second none, and both committed, lost
 * and held the same before and after the end (what differs is printed, as
 * weir_test_text_same does). For tests that the cache changes nothing but
 * the number of host calls. */
bool weir_test_same_runs(const weir_test_failure_run_t *batched, const weir_test_failure_run_t *per_call);

/* True if one of the `n` steps holds two records with the same key: the
 * case a batch cache must get right, which a random input should show. */
bool weir_test_steps_repeat_a_key(const weir_test_step_t *steps, size_t n);

/* ------------------------------------------------------------ two inputs */

/* Processes `records` as one batch on input `input` (0: left, 1: right)
 * through `two-input.process-input`; appends what it emitted to `out`. */
bool weir_test_process_input(uint32_t input, const weir_record_t *records, size_t len, weir_test_output_t *out);

/* ------------------------------------------------ processing-time timers */

/* Moves the harness's processing-time clock (0 after weir_test_open)
 * forward by `ms` and fires the processing-time timers now due, in time
 * order (registration order among equal times), through
 * `on-processing-timer`; appends what they emitted to `out`. */
bool weir_test_advance_processing_time(int64_t ms, weir_test_output_t *out);

/* The harness's processing-time clock (weir_current_processing_time()). */
int64_t weir_test_processing_time(void);

/* How many processing-time timers are registered and not yet fired. */
size_t weir_test_processing_timer_count(void);

/* ------------------------------------------------------ window functions */

/* Window functions run through the `window-function` exports, as the
 * host's window operator calls them (after weir_test_open: the host opens a
 * window function too). Results are the caller's: weir_buf_free /
 * weir_buf_list_free. On failure, the message is in weir_test_error(). */

/* What `kind` answers. */
weir_window_kind_t weir_test_window_kind(void);

/* An accumulator as the host passes it to `add`: none (a new window) or bytes. */
typedef struct {
    bool is_some;
    weir_bytes_t bytes;
} weir_test_accumulator_t;

/* A fired window as the host passes it to `get-result`. */
typedef struct {
    weir_bytes_t key;
    weir_window_t window;
    weir_bytes_t accumulator;
} weir_test_accumulated_t;

/* The wire-level calls: `add` (record i into accumulators[targets[i]]),
 * `merge` (a[i] with b[i]) and `get-result`; `*out` gets what the export
 * returned, one value per accumulator, pair or window. */
bool weir_test_window_add(const weir_test_accumulator_t *accumulators, size_t n, const uint32_t *targets,
                          const weir_record_t *records, size_t len, weir_buf_list_t *out);
bool weir_test_window_merge(const weir_bytes_t *a, const weir_bytes_t *b, size_t n, weir_buf_list_t *out);
bool weir_test_window_get_result(const weir_test_accumulated_t *windows, size_t n, weir_buf_list_t *out);

/* An aggregate's result for one window of `key` with `records`: `add`
 * with `chunk` records per call (0: all at once), the accumulator
 * round-tripped as bytes between calls (the first call creates it), then
 * `get-result`. */
bool weir_test_aggregate(weir_bytes_t key, weir_window_t window, const weir_record_t *records, size_t len,
                         size_t chunk, weir_buf_t *result);

/* The same over two halves merged, as a session window that a record
 * joined: one `add` with two new accumulators (`a` into the first, `b`
 * into the second), `merge` of the two, then `get-result`. */
bool weir_test_merged_aggregate(weir_bytes_t key, weir_window_t window, const weir_record_t *a, size_t a_len,
                                const weir_record_t *b, size_t b_len, weir_buf_t *result);

/* What a process-window function emits for the window `window` of `key`
 * with `records` (`process-window`), appended to `out` with every
 * timestamp set to end - 1, as the host does. */
bool weir_test_process_window(weir_bytes_t key, weir_window_t window, const weir_record_t *records, size_t len,
                              weir_test_output_t *out);

/* True if the record's value is exactly the C string `s`. */
bool weir_test_value_is(const weir_test_record_t *record, const char *s);

/* Minimal checks: count and report failures, and end with the plain
 * "N passed, N failed" line test runners recognise. */
extern int weir_test_passed, weir_test_failed;

#define WEIR_CHECK(cond)                                                                       \
    do {                                                                                       \
        if (cond) {                                                                            \
            weir_test_passed++;                                                                \
        } else {                                                                               \
            weir_test_failed++;                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
        }                                                                                      \
    } while (0)

/* Prints the summary line; returns the process exit status. */
int weir_test_summary(void);

#ifdef __cplusplus
}
#endif

#endif /* WEIR_TEST_H */
