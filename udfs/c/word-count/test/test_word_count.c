/* Native unit tests of the C word-count (sdk/c/test.sh udfs/c/word-count):
 * the same cases as udfs/word-count's Rust tests, among them the batch
 * cache against the per-call path over random words with a failure and a
 * restore. */
#include <string.h>

#include "weir_test.h"

static void process_words(const char *const *words, size_t n, weir_test_output_t *out) {
    weir_record_t records[16];
    for (size_t i = 0; i < n; i++) {
        records[i] = weir_test_record(words[i], words[i], (int64_t)i);
    }
    WEIR_CHECK(weir_test_process(records, n, out));
}

static void final_counts_come_with_the_final_watermark(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    process_words((const char *const[]){"a", "b", "a"}, 3, &out);
    process_words((const char *const[]){"a"}, 1, &out);
    WEIR_CHECK(out.len == 0);
    WEIR_CHECK(weir_test_timer_count() == 2); /* one timer per key */
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 2);
    if (out.len == 2) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "a\t3"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "b\t1"));
        WEIR_CHECK(out.records[0].has_key && weir_bytes_eq_cstr(weir_buf_bytes(&out.records[0].key), "a"));
        WEIR_CHECK(out.records[0].timestamp == INT64_MAX);
    }
    weir_test_output_free(&out);
}

static void updates_emit_on_every_record(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open((const char *const[]){"emit", "updates", NULL}));
    process_words((const char *const[]){"a", "b", "a"}, 3, &out);
    WEIR_CHECK(out.len == 3);
    if (out.len == 3) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "a\t1"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "b\t1"));
        WEIR_CHECK(weir_test_value_is(&out.records[2], "a\t2"));
        WEIR_CHECK(out.records[2].timestamp == 2);
    }
    WEIR_CHECK(weir_test_timer_count() == 0);
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

static void bad_emit_mode_fails_open(void) {
    WEIR_CHECK(!weir_test_open((const char *const[]){"emit", "sometimes", NULL}));
    WEIR_CHECK(strcmp(weir_test_error(), "config `emit`: expected `final` or `updates`, got `sometimes`") == 0);
}

static void unkeyed_record_is_an_error(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r = weir_test_record(NULL, "x", 0);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "has no key") != NULL);
    weir_test_output_free(&out);
}

/* The count is stored in the shared encoding (u64 little-endian), so state
 * written by the Rust counter (or Python, or JS) reads the same here. */
static void count_state_uses_the_shared_encoding(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    /* 41 for "a", as the Rust SDK's ValueState<u64> writes it: 29 00 00 00 00 00 00 00. */
    static const uint8_t rust_41[8] = {41, 0, 0, 0, 0, 0, 0, 0};
    weir_test_set_state_value(0, weir_cstr("a"), (weir_bytes_t){rust_41, 8});
    process_words((const char *const[]){"a", "b"}, 2, &out);
    weir_bytes_t stored;
    WEIR_CHECK(weir_test_state_value(0, weir_cstr("a"), &stored));
    static const uint8_t le_42[8] = {42, 0, 0, 0, 0, 0, 0, 0};
    WEIR_CHECK(weir_bytes_eq(stored, (weir_bytes_t){le_42, 8}));
    /* "a" had state, so no new timer: only "b" registers one, as in Rust. */
    WEIR_CHECK(weir_test_timer_count() == 1);
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 1 && weir_test_value_is(&out.records[0], "b\t1"));
    weir_test_output_free(&out);
}

/* A stored value of the wrong width is an error naming the state, not a misread. */
static void a_corrupt_count_fails_the_call(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_set_state_value(0, weir_cstr("a"), weir_cstr("abc"));
    weir_record_t r = weir_test_record("a", "a", 0);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "state `count`: cannot decode u64: expected 8 bytes, got 3") == 0);
    weir_test_output_free(&out);
}

static void an_upgrade_keeps_the_stored_counts(void) {
    /* `count` declares no migration: `weir upgrade` keeps its bytes as they are. */
    uint8_t bytes[8];
    weir_encode_u64(41, bytes);
    weir_bytes_t old = {bytes, sizeof(bytes)};
    weir_buf_t migrated = {NULL, 0};
    WEIR_CHECK(weir_test_migrate_state("count", "0.0.1", old, &migrated));
    WEIR_CHECK(weir_bytes_eq(weir_buf_bytes(&migrated), old));
    weir_buf_free(&migrated);
}

/* -------------------------------- the batch cache against the per-call path */

/* The words of the random input: few, so that a batch holds several
 * records of one word; the empty word is a key too. */
static const char *const WORDS[] = {"the", "and", "of", "weir", "\xc3\xa9t\xc3\xa9", "a b", ""};
#define NUM_WORDS (sizeof(WORDS) / sizeof(WORDS[0]))

enum { STEPS = 30, MAX_BATCH = 20, CHECKPOINT = 12, FAILURE = 14 };

typedef struct {
    weir_test_step_t steps[STEPS];
    weir_record_t records[STEPS][MAX_BATCH];
    size_t word[STEPS][MAX_BATCH];
} input_t;

/* xorshift64: the same sequence on every platform; a number below `n`. */
static uint64_t below(uint64_t *seed, uint64_t n) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    return *seed % n;
}

/* 30 steps: batches of 0 to 20 words (timestamps rising, the word as key
 * and value), half of them followed by a watermark. */
static void random_input(uint64_t seed, input_t *in) {
    int64_t ts = 0, watermark = INT64_MIN;
    for (size_t s = 0; s < STEPS; s++) {
        size_t n = below(&seed, MAX_BATCH + 1);
        for (size_t i = 0; i < n; i++) {
            ts += (int64_t)below(&seed, 3);
            size_t w = below(&seed, NUM_WORDS);
            in->records[s][i] = weir_test_record(WORDS[w], WORDS[w], ts);
            in->word[s][i] = w;
        }
        bool advance = below(&seed, 2) == 0;
        if (advance) {
            int64_t w = ts - (int64_t)below(&seed, 5);
            watermark = w > watermark ? w : watermark;
        }
        in->steps[s] = (weir_test_step_t){in->records[s], n, advance, watermark};
    }
}

/* Appends "{word}\t{count}" keyed by the word at `ts` to `t`. */
static void count_line(weir_test_text_t *t, size_t word, uint64_t count, int64_t ts) {
    char value[64];
    snprintf(value, sizeof(value), "%s\t%llu", WORDS[word], (unsigned long long)count);
    weir_bytes_t key = weir_cstr(WORDS[word]);
    weir_test_text_record(t, NULL, &key, weir_cstr(value), ts);
}

/* What the counter should emit, from a plain array of counts: with
 * `updates`, a count per record (the lost steps' also into `lost`); else
 * each word's total at the end, in the order the words were first seen
 * (the order their timers were registered, all at INT64_MAX). The counts
 * in `counts`; returns how many words were seen. */
static size_t expected_counts(const input_t *in, bool updates, weir_test_text_t *committed, weir_test_text_t *lost,
                              uint64_t counts[NUM_WORDS]) {
    size_t first_seen[NUM_WORDS], seen = 0;
    for (size_t w = 0; w < NUM_WORDS; w++) {
        counts[w] = 0;
    }
    for (size_t s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < in->steps[s].len; i++) {
            size_t w = in->word[s][i];
            if (counts[w]++ == 0) {
                first_seen[seen++] = w;
            }
            if (updates) {
                count_line(committed, w, counts[w], in->records[s][i].timestamp);
                if (s >= CHECKPOINT && s < FAILURE) {
                    count_line(lost, w, counts[w], in->records[s][i].timestamp);
                }
            }
        }
    }
    for (size_t i = 0; !updates && i < seen; i++) {
        count_line(committed, first_seen[i], counts[first_seen[i]], INT64_MAX);
    }
    return seen;
}

/* How many lines of `t` start with `prefix`. */
static size_t lines_starting(const weir_test_text_t *t, const char *prefix) {
    size_t n = 0;
    for (const char *line = t->ptr; line != NULL && *line != '\0'; line = strchr(line, '\n') + 1) {
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    }
    return n;
}

/* Both emit modes, over seeded random words with a checkpoint, two lost
 * steps and a restore: the batch cache (one value-get-many and one
 * value-set-many per batch) gives byte for byte what a host call per
 * access gives — output, counts, timers — and both give the counts of a
 * plain array. */
static void the_batch_cache_gives_what_single_calls_give(void) {
    static input_t in;
    static const uint64_t seeds[] = {0x2545f4914f6cdd1d, 7, (uint64_t)1 << 40};
    static const char *const modes[][3] = {{"emit", "final", NULL}, {"emit", "updates", NULL}};
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        random_input(seeds[i], &in);
        WEIR_CHECK(weir_test_steps_repeat_a_key(in.steps, STEPS));
        for (size_t m = 0; m < 2; m++) {
            bool updates = m == 1;
            weir_test_failure_run_t per_call, batched;
            WEIR_CHECK(weir_test_run_with_failure(modes[m], false, in.steps, STEPS, CHECKPOINT, FAILURE, &per_call));
            /* The batched run last: the host keeps its state for the checks below. */
            WEIR_CHECK(weir_test_run_with_failure(modes[m], true, in.steps, STEPS, CHECKPOINT, FAILURE, &batched));
            WEIR_CHECK(weir_test_same_runs(&batched, &per_call));

            weir_test_text_t committed = WEIR_TEST_TEXT_INIT, lost = WEIR_TEST_TEXT_INIT;
            uint64_t counts[NUM_WORDS];
            size_t words = expected_counts(&in, updates, &committed, &lost, counts);
            WEIR_CHECK(weir_test_text_same("committed, as expected", &batched.committed, &committed));
            WEIR_CHECK(weir_test_text_same("lost, as expected", &batched.lost, &lost));
            /* One timer per word with `final`, none with `updates`. */
            WEIR_CHECK(lines_starting(&batched.before_end, "timer @9223372036854775807 ") == (updates ? 0 : words));
            for (size_t w = 0; w < NUM_WORDS; w++) {
                weir_bytes_t stored;
                uint64_t n = 0;
                bool found = weir_test_state_value(0, weir_cstr(WORDS[w]), &stored);
                WEIR_CHECK(found == (counts[w] != 0) && (!found || (weir_decode_u64(stored, &n) && n == counts[w])));
            }
            weir_test_text_free(&committed);
            weir_test_text_free(&lost);
            weir_test_failure_run_free(&per_call);
            weir_test_failure_run_free(&batched);
        }
    }
}

int main(void) {
    final_counts_come_with_the_final_watermark();
    updates_emit_on_every_record();
    bad_emit_mode_fails_open();
    unkeyed_record_is_an_error();
    count_state_uses_the_shared_encoding();
    a_corrupt_count_fails_the_call();
    an_upgrade_keeps_the_stored_counts();
    the_batch_cache_gives_what_single_calls_give();
    return weir_test_summary();
}
