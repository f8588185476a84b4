/* Native unit tests of the C sequence checker (sdk/c/test.sh
 * udfs/c/sequence-check): what it passes through and alerts on, its config,
 * and the batch cache against the per-call path over random sequences with
 * a failure and a restore (as udfs/sequence-check's Rust test). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir_test.h"

enum { LAST };

#define R(key, value, ts) weir_test_record((key), (value), (ts))
#define PROCESS(out, ...)                                                                                    \
    weir_test_process((const weir_record_t[]){__VA_ARGS__},                                                  \
                      sizeof((const weir_record_t[]){__VA_ARGS__}) / sizeof(weir_record_t), (out))

static const char *const STEP_4[] = {"step", "4", NULL};

/* `last` stored for `key`, or -1 if none. */
static int64_t stored_last(const char *key) {
    weir_bytes_t v;
    uint64_t n;
    if (!weir_test_state_value(LAST, weir_cstr(key), &v)) {
        return -1;
    }
    return weir_decode_u64(v, &n) ? (int64_t)n : -2;
}

static void records_pass_through_and_breaks_raise_alerts(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(STEP_4));
    WEIR_CHECK(PROCESS(&out, R("1", "1", 10), R("1", "5..", 11), R("2", "2", 12), R("1", "5", 13), /* again */
                       R("1", "13", 14),                                                            /* 9 lost */
                       R("3", "7", 15)));                                                           /* 3 first */
    weir_test_text_t got = WEIR_TEST_TEXT_INIT, want = WEIR_TEST_TEXT_INIT;
    weir_test_text_output(&got, &out);
    weir_test_output_free(&out);
    const char *const passed[][2] = {{"1", "1"}, {"1", "5.."}, {"2", "2"}, {"1", "5"}, {"1", "13"}, {"3", "7"}};
    for (int i = 0; i < 6; i++) {
        weir_bytes_t key = weir_cstr(passed[i][0]);
        weir_test_text_record(&want, NULL, &key, weir_cstr(passed[i][1]), 10 + i);
    }
    const char *const alerts[][3] = {
        {"1", "key 1: expected 9, got 5", "13"}, {"1", "key 1: expected 9, got 13", "14"},
        {"3", "key 3: expected 3, got 7", "15"}};
    for (int i = 0; i < 3; i++) {
        weir_bytes_t key = weir_cstr(alerts[i][0]);
        weir_test_text_record(&want, "alerts", &key, weir_cstr(alerts[i][1]), atoi(alerts[i][2]));
    }
    WEIR_CHECK(weir_test_text_same("output", &got, &want));
    WEIR_CHECK(stored_last("1") == 13 && stored_last("2") == 2 && stored_last("3") == 7);
    weir_test_text_free(&got);
    weir_test_text_free(&want);
}

/* A key that is no number expects u64::MAX first; `last + step` wraps;
 * numbers read as Rust's u64 reads them (a `+`, no spaces, no overflow). */
static void edge_cases_as_in_rust(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(STEP_4));
    WEIR_CHECK(PROCESS(&out, R("x", "18446744073709551615", 1), R("x", "3", 2), R("\xff", "+3.7", 3)));
    WEIR_CHECK(out.len == 4);
    if (out.len == 4) {
        WEIR_CHECK(weir_test_value_is(&out.records[3], "key \xef\xbf\xbd: expected 18446744073709551615, got 3"));
        WEIR_CHECK(out.records[3].tag != NULL && strcmp(out.records[3].tag, "alerts") == 0);
    }
    weir_test_output_free(&out);
    static const char *const not_numbers[] = {"", ".5", "-1", " 1", "1a", "18446744073709551616", "+"};
    for (size_t i = 0; i < sizeof(not_numbers) / sizeof(not_numbers[0]); i++) {
        weir_record_t r = R("1", not_numbers[i], 4);
        WEIR_CHECK(!weir_test_process(&r, 1, &out));
        WEIR_CHECK(strncmp(weir_test_error(), "not a sequence number: \"", 24) == 0);
    }
    weir_record_t r = R("1", "1a", 4);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "not a sequence number: \"1a\"") == 0);
}

static void step_is_a_required_positive_integer(void) {
    WEIR_CHECK(!weir_test_open(NULL));
    WEIR_CHECK(strcmp(weir_test_error(), "config `step` is required but missing") == 0);
    static const char *const bad[] = {"0", "-4", "four", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        WEIR_CHECK(!weir_test_open((const char *const[]){"step", bad[i], NULL}));
        WEIR_CHECK(strcmp(weir_test_error(), "config `step`: expected a positive integer") == 0);
    }
    WEIR_CHECK(weir_test_open((const char *const[]){"step", "+4", NULL}));
}

/* `last` uses the shared encoding (u64 little-endian): a checkpoint of the
 * Rust checker restores here. */
static void last_uses_the_shared_encoding(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(STEP_4));
    static const uint8_t rust_9[8] = {9, 0, 0, 0, 0, 0, 0, 0};
    weir_test_set_state_value(LAST, weir_cstr("1"), (weir_bytes_t){rust_9, 8});
    WEIR_CHECK(PROCESS(&out, R("1", "13", 1)));
    WEIR_CHECK(out.len == 1); /* no alert */
    weir_test_output_free(&out);
    WEIR_CHECK(stored_last("1") == 13);
}

/* -------------------------------- the batch cache against the per-call path */

/* The keys of the random input: the step is 4, so key k's sequence is k,
 * k + 4, k + 8, ...; "x" is no number (its first expected value is
 * u64::MAX). */
static const char *const KEYS[] = {"0", "1", "2", "3", "x"};
#define NUM_KEYS (sizeof(KEYS) / sizeof(KEYS[0]))
#define STEP 4

enum { STEPS = 40, MAX_BATCH = 16, CHECKPOINT = 15, FAILURE = 17 };

typedef struct {
    weir_test_step_t steps[STEPS];
    weir_record_t records[STEPS][MAX_BATCH];
    char values[STEPS][MAX_BATCH][32];
    size_t key[STEPS][MAX_BATCH];
    uint64_t number[STEPS][MAX_BATCH];
} input_t;

/* xorshift64: the same sequence on every platform; a number below `n`. */
static uint64_t below(uint64_t *seed, uint64_t n) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    return *seed % n;
}

/* 40 steps of 0 to 16 records: mostly each key's next number, now and then
 * a duplicate, a gap or a number from nowhere, some padded with dots; half
 * the steps end with a watermark (the checker has no timers: it must not
 * mind). */
static void random_input(uint64_t seed, input_t *in) {
    uint64_t next[NUM_KEYS] = {0, 1, 2, 3, 1000};
    int64_t ts = 0, watermark = INT64_MIN;
    for (size_t s = 0; s < STEPS; s++) {
        size_t n = below(&seed, MAX_BATCH + 1);
        for (size_t i = 0; i < n; i++) {
            ts += (int64_t)below(&seed, 3);
            size_t k = below(&seed, NUM_KEYS);
            uint64_t number;
            switch (below(&seed, 20)) {
            case 0: number = next[k] >= STEP ? next[k] - STEP : 0; break; /* a duplicate */
            case 1: number = next[k] + STEP; break;                       /* a gap */
            case 2: number = below(&seed, 10000); break;                  /* from nowhere */
            default: number = next[k];
            }
            next[k] = number + STEP;
            int dots = (int)below(&seed, 3);
            snprintf(in->values[s][i], sizeof(in->values[s][i]), "%llu%.*s", (unsigned long long)number, dots, "..");
            in->records[s][i] = R(KEYS[k], in->values[s][i], ts);
            in->key[s][i] = k;
            in->number[s][i] = number;
        }
        bool advance = below(&seed, 2) == 0;
        if (advance) {
            int64_t w = ts - (int64_t)below(&seed, 5);
            watermark = w > watermark ? w : watermark;
        }
        in->steps[s] = (weir_test_step_t){in->records[s], n, advance, watermark};
    }
}

/* What the checker should emit, computed directly (the last number per key
 * in a plain array): each step's records passed through, then its alerts,
 * into `committed`, and those of the lost steps also into `lost`; the last
 * numbers in `last`/`seen`. Returns how many alerts. */
static int expected_output(const input_t *in, weir_test_text_t *committed, weir_test_text_t *lost,
                           uint64_t last[NUM_KEYS], bool seen[NUM_KEYS]) {
    int alerts = 0;
    for (size_t k = 0; k < NUM_KEYS; k++) {
        seen[k] = false;
    }
    for (size_t s = 0; s < STEPS; s++) {
        weir_test_text_t step = WEIR_TEST_TEXT_INIT;
        for (size_t i = 0; i < in->steps[s].len; i++) {
            weir_test_text_record(&step, NULL, &in->records[s][i].key, in->records[s][i].value,
                                  in->records[s][i].timestamp);
        }
        for (size_t i = 0; i < in->steps[s].len; i++) {
            size_t k = in->key[s][i];
            uint64_t n = in->number[s][i];
            uint64_t expected = seen[k] ? last[k] + STEP : k < 4 ? k : UINT64_MAX;
            if (n != expected) {
                char alert[96];
                snprintf(alert, sizeof(alert), "key %s: expected %llu, got %llu", KEYS[k],
                         (unsigned long long)expected, (unsigned long long)n);
                weir_test_text_record(&step, "alerts", &in->records[s][i].key, weir_cstr(alert),
                                      in->records[s][i].timestamp);
                alerts++;
            }
            last[k] = n;
            seen[k] = true;
        }
        weir_test_text_append(committed, step.ptr != NULL ? step.ptr : "");
        if (s >= CHECKPOINT && s < FAILURE) {
            weir_test_text_append(lost, step.ptr != NULL ? step.ptr : "");
        }
        weir_test_text_free(&step);
    }
    return alerts;
}

/* Seeded random sequences with a checkpoint, two lost steps and a restore:
 * the batch cache (one value-get-many and one value-set-many per batch)
 * gives byte for byte what a host call per access gives — records passed
 * through, alerts, last numbers — and both give what a plain array gives. */
static void the_batch_cache_gives_what_single_calls_give(void) {
    static input_t in;
    static const uint64_t seeds[] = {0x2545f4914f6cdd1d, 5, (uint64_t)1 << 50};
    int alerts = 0;
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        random_input(seeds[i], &in);
        WEIR_CHECK(weir_test_steps_repeat_a_key(in.steps, STEPS));
        weir_test_failure_run_t per_call, batched;
        WEIR_CHECK(weir_test_run_with_failure(STEP_4, false, in.steps, STEPS, CHECKPOINT, FAILURE, &per_call));
        /* The batched run last: the host keeps its state for the checks below. */
        WEIR_CHECK(weir_test_run_with_failure(STEP_4, true, in.steps, STEPS, CHECKPOINT, FAILURE, &batched));
        WEIR_CHECK(weir_test_same_runs(&batched, &per_call));

        weir_test_text_t committed = WEIR_TEST_TEXT_INIT, lost = WEIR_TEST_TEXT_INIT;
        uint64_t last[NUM_KEYS];
        bool seen[NUM_KEYS];
        alerts += expected_output(&in, &committed, &lost, last, seen);
        WEIR_CHECK(weir_test_text_same("committed, as expected", &batched.committed, &committed));
        WEIR_CHECK(weir_test_text_same("lost, as expected", &batched.lost, &lost));
        for (size_t k = 0; k < NUM_KEYS; k++) {
            WEIR_CHECK(stored_last(KEYS[k]) == (seen[k] ? (int64_t)last[k] : -1));
        }
        weir_test_text_free(&committed);
        weir_test_text_free(&lost);
        weir_test_failure_run_free(&per_call);
        weir_test_failure_run_free(&batched);
    }
    WEIR_CHECK(alerts > 30); /* not vacuous */
}

int main(void) {
    records_pass_through_and_breaks_raise_alerts();
    edge_cases_as_in_rust();
    step_is_a_required_positive_integer();
    last_uses_the_shared_encoding();
    the_batch_cache_gives_what_single_calls_give();
    return weir_test_summary();
}
