/*
 * weir_test.h: unit-test a C operator natively, without Wasm.
 *
 * weir_test.c stands in for the host: it implements the imported WIT
 * functions (keyed state in memory, event-time timers, log to stderr,
 * metrics dropped) and drives the operator through weir.c's exports, the
 * same path the component takes (also `migrate-state`, the export
 * `weir upgrade` calls). Build the test with the host compiler,
 * without bindings/operator.c (which is Wasm-only glue):
 *
 *   cc -std=c11 -I sdk/c -I sdk/c/bindings -I PROJECT/src -o test \
 *      PROJECT/src/(all .c) PROJECT/test/(all .c) sdk/c/weir.c sdk/c/weir_test.c
 *
 * (sdk/c/test.sh PROJECT_DIR does exactly that.) Like the Rust SDK's
 * testing harness it does not emulate key-group ownership or state TTL.
 * One operator per test binary; weir_test_open() starts afresh.
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
