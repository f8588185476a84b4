/* Native tests of the SDK's batch cache of value states (contract 0.1.3):
 * one value-get-many and one value-set-many per state and batch instead of
 * a call per record, with Flink's per-record semantics; the cases of the
 * Rust SDK's value_state_is_read_and_written_once_per_batch_with_per_record_semantics
 * and the Python SDK's ValueStateBatchTest. */
#include <stdlib.h>
#include <string.h>

#include "weir_test.h"

enum { COUNT, LAST, SEEN };

/* The main output's values, in order, equal `expected` (NULL-terminated). */
static bool values_are(const weir_test_output_t *out, const char *const *expected) {
    size_t n = 0;
    while (expected[n] != NULL) {
        n++;
    }
    if (out->len != n) {
        fprintf(stderr, "  %zu records, expected %zu\n", out->len, n);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (out->records[i].tag != NULL || !weir_test_value_is(&out->records[i], expected[i])) {
            fprintf(stderr, "  record %zu is `%.*s`, expected `%s`\n", i, (int)out->records[i].value.len,
                    (const char *)out->records[i].value.ptr, expected[i]);
            return false;
        }
    }
    return true;
}

/* `count` stored for `key`: its value, or -1 if there is none. */
static int64_t stored_count(const char *key) {
    weir_bytes_t v;
    uint64_t n;
    if (!weir_test_state_value(COUNT, weir_cstr(key), &v)) {
        return -1;
    }
    return weir_decode_u64(v, &n) ? (int64_t)n : -2;
}

static bool stored_last_is(const char *key, const char *expected) {
    weir_bytes_t v;
    bool found = weir_test_state_value(LAST, weir_cstr(key), &v);
    return expected == NULL ? !found : found && weir_bytes_eq_cstr(v, expected);
}

static void set_count(const char *key, uint64_t n) {
    uint8_t bytes[8];
    weir_encode_u64(n, bytes);
    weir_test_set_state_value(COUNT, weir_cstr(key), (weir_bytes_t){bytes, 8});
}

#define R(key, value, ts) weir_test_record((key), (value), (ts))
#define PROCESS(out, ...)                                                                                    \
    weir_test_process((const weir_record_t[]){__VA_ARGS__},                                                  \
                      sizeof((const weir_record_t[]){__VA_ARGS__}) / sizeof(weir_record_t), (out))
#define EXPECT(...) ((const char *const[]){__VA_ARGS__, NULL})

static void records_of_one_key_see_each_others_updates(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(PROCESS(&out, R("a", "x", 1), R("b", "y", 2), R("a", "z", 3), R("a", "reset", 4), R("a", "w", 5)));
    WEIR_CHECK(values_are(&out, EXPECT("1|x", "1|y", "2|z", "-|z", "1|w")));
    weir_test_output_free(&out);
    /* `count`: one read and one write for the batch; `last` is written
     * before it is read for every key, so it is only written. The list
     * goes to the host (4 single calls). */
    WEIR_CHECK(weir_test_batched_state_calls() == 3);
    WEIR_CHECK(weir_test_state_calls() == 4);
    WEIR_CHECK(stored_count("a") == 1 && stored_count("b") == 1);
    WEIR_CHECK(stored_last_is("a", "w") && stored_last_is("b", "y"));

    /* Timers are later host calls: they see what the batch wrote, and their
     * own accesses are single calls. */
    WEIR_CHECK(weir_test_watermark(100, &out));
    WEIR_CHECK(values_are(&out, EXPECT("t:1|w|3", "t:1|y|1", "t:2|w|3", "t:4|w|3")));
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_batched_state_calls() == 3);
    WEIR_CHECK(stored_count("a") == 8 && stored_count("b") == 2);
}

static void a_batch_costs_one_get_many_and_one_set_many_per_state(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    set_count("c", 10); /* e.g. restored from a checkpoint */
    weir_test_set_state_value(LAST, weir_cstr("c"), weir_cstr("old"));
    weir_record_t records[100];
    records[0] = R("c", "peek", 0); /* reads both states before any write */
    for (int i = 1; i < 100; i++) {
        static const char *const keys[] = {"a", "b", "c"};
        records[i] = R(keys[(i - 1) % 3], "x", i);
    }
    WEIR_CHECK(weir_test_process(records, 100, &out));
    WEIR_CHECK(out.len == 101);
    if (out.len == 101) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "peek:-"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "10|old"));
        WEIR_CHECK(weir_test_value_is(&out.records[98], "33|x"));  /* a's last */
        WEIR_CHECK(weir_test_value_is(&out.records[100], "43|x")); /* c's last */
    }
    weir_test_output_free(&out);
    /* Instead of 2 x 99 reads and 2 x 99 writes: a get-many and a set-many
     * for each of the two value states. The single calls: peek's read of
     * a key outside the batch, and the 99 list appends. */
    WEIR_CHECK(weir_test_batched_state_calls() == 4);
    WEIR_CHECK(weir_test_state_calls() == 100);
    WEIR_CHECK(stored_count("a") == 33 && stored_count("b") == 33 && stored_count("c") == 43);
    /* Every batch reads the host afresh. */
    set_count("a", 41);
    WEIR_CHECK(PROCESS(&out, R("a", "x", 200)));
    WEIR_CHECK(values_are(&out, EXPECT("42|x")));
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_batched_state_calls() == 7); /* count: get + set; last: set */
}

static void a_write_only_batch_reads_nothing(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(PROCESS(&out, R("a", "raw", 1), R("b", "raw", 2), R("a", "raw", 3)));
    WEIR_CHECK(out.len == 0);
    WEIR_CHECK(weir_test_batched_state_calls() == 1);
    WEIR_CHECK(weir_test_state_calls() == 0);
    WEIR_CHECK(stored_last_is("a", "raw") && stored_last_is("b", "raw"));
}

static void explicit_keys_and_a_clear_before_any_read(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    set_count("outside", 7);
    set_count("a", 5);
    WEIR_CHECK(PROCESS(&out, R("a", "reset", 1), R("c", "peek", 2), R("d", "outside", 3), R("b", "k0", 4),
                       R("k0", "x", 5), R("a", "x", 6)));
    /* a's clear comes before any read of `count` and is cached (C knows
     * the state's kind): the later read sees it. "outside" is no key of the
     * batch: peek reads the host (7), and the "outside" record's read and
     * write go there directly. "k0" is a key of the batch: b's explicit
     * write to it is cached, and k0's own record sees it. */
    WEIR_CHECK(values_are(&out, EXPECT("-|-", "peek:7", "-|-", "-|-", "1|k0", "101|x", "1|x")));
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_batched_state_calls() == 4);
    WEIR_CHECK(weir_test_state_calls() == 6); /* peek: 1, outside: 2, list: 3 */
    WEIR_CHECK(stored_count("a") == 1 && stored_count("outside") == 8 && stored_count("k0") == 101);
    WEIR_CHECK(stored_count("b") == 1 && stored_count("c") == -1 && stored_count("d") == -1);

    WEIR_CHECK(weir_test_watermark(100, &out));
    WEIR_CHECK(values_are(&out, EXPECT("t:1|k0|1", "t:101|x|1", "t:1|x|1")));
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_batched_state_calls() == 4);
    WEIR_CHECK(stored_count("b") == 2 && stored_count("k0") == 202 && stored_count("a") == 2);

    /* A batch that only clears: one set-many with an absent value. */
    WEIR_CHECK(PROCESS(&out, R("a", "reset", 200), R("b", "clear-last", 201)));
    WEIR_CHECK(values_are(&out, EXPECT("-|x", "2|-")));
    weir_test_output_free(&out);
    WEIR_CHECK(stored_count("a") == -1 && stored_last_is("a", "x"));
    WEIR_CHECK(stored_count("b") == 2 && stored_last_is("b", NULL));
}

static void a_key_buffer_rewritten_in_place_is_another_key(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(PROCESS(&out, R("k1", "x", 1), R("k2", "x", 2), R("k3", "swap", 3), R("k1", "x", 4)));
    WEIR_CHECK(values_are(&out, EXPECT("1|x", "1|x", "-|-", "3|x")));
    weir_test_output_free(&out);
    WEIR_CHECK(stored_count("k1") == 3 && stored_count("k2") == 2 && stored_count("k3") == -1);
}

static void a_failing_callback_flushes_then_fails(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(!PROCESS(&out, R("a", "x", 1), R("a", "x", 2), R("b", "boom", 3), R("b", "x", 4)));
    WEIR_CHECK(strcmp(weir_test_error(), "boom") == 0);
    WEIR_CHECK(out.len == 0);
    /* What the records before the failure wrote reached the host, as single
     * calls would have. */
    WEIR_CHECK(stored_count("a") == 2 && stored_count("b") == -1);
    WEIR_CHECK(weir_test_batched_state_calls() == 3);
    /* The next batch starts with a fresh cache. */
    WEIR_CHECK(PROCESS(&out, R("a", "x", 5)));
    WEIR_CHECK(values_are(&out, EXPECT("3|x")));
    weir_test_output_free(&out);

    /* A record without a key fails the batch the same way, after the flush. */
    WEIR_CHECK(!PROCESS(&out, R("c", "x", 6), R(NULL, "x", 7)));
    WEIR_CHECK(strcmp(weir_test_error(),
                      "record 1 of the batch has no key, but this operator runs on a keyed stream") == 0);
    WEIR_CHECK(stored_count("c") == 1);
    weir_test_output_free(&out);
}

static void host_errors_of_the_batched_calls_name_the_state(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_fail_batched_state_calls("disk full");
    /* The read (value-get-many) fails. */
    WEIR_CHECK(!PROCESS(&out, R("a", "x", 1)));
    WEIR_CHECK(strcmp(weir_test_error(), "state `count`: disk full") == 0);
    /* The write-back (value-set-many) fails: the call fails. */
    WEIR_CHECK(!PROCESS(&out, R("a", "raw", 2)));
    WEIR_CHECK(strcmp(weir_test_error(), "state `last`: disk full") == 0);
    /* Both fail: the callback's own error is the one reported. */
    WEIR_CHECK(!PROCESS(&out, R("a", "raw", 3), R("a", "boom", 4)));
    WEIR_CHECK(strcmp(weir_test_error(), "boom") == 0);
    WEIR_CHECK(out.len == 0);
    weir_test_fail_batched_state_calls(NULL);
    WEIR_CHECK(stored_count("a") == -1 && stored_last_is("a", NULL));
    WEIR_CHECK(PROCESS(&out, R("a", "x", 5)));
    WEIR_CHECK(values_are(&out, EXPECT("1|x")));
    weir_test_output_free(&out);
}

static void input_1_walks_the_batch_with_explicit_keys(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    const weir_record_t right[] = {R("a", "x", 1), R("b", "x", 2), R("a", "y", 3), R("b", "outside", 4)};
    WEIR_CHECK(weir_test_process_input(1, right, 4, &out));
    WEIR_CHECK(values_are(&out, EXPECT("1|x", "1|x", "2|y", "1|x")));
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_batched_state_calls() == 3);
    WEIR_CHECK(weir_test_state_calls() == 5); /* 3 list appends; outside's read and write */
    WEIR_CHECK(stored_count("a") == 2 && stored_count("outside") == 1);
    /* Input 0 sees what input 1 wrote (keyed state is shared). */
    WEIR_CHECK(PROCESS(&out, R("a", "x", 5)));
    WEIR_CHECK(values_are(&out, EXPECT("3|x")));
    weir_test_output_free(&out);
}

static void many_keys_in_one_batch(void) {
    enum { KEYS = 1000, RECORDS = 5000 };
    static char names[KEYS][16];
    static weir_record_t records[RECORDS];
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    for (int k = 0; k < KEYS; k++) {
        snprintf(names[k], sizeof(names[k]), "k%d", k);
    }
    for (int i = 0; i < RECORDS; i++) {
        records[i] = R(names[(i * 7) % KEYS], "x", i);
    }
    WEIR_CHECK(weir_test_process(records, RECORDS, &out));
    WEIR_CHECK(out.len == RECORDS);
    bool counts_ok = out.len == RECORDS;
    for (int i = 0; counts_ok && i < RECORDS; i++) {
        char want[16];
        snprintf(want, sizeof(want), "%d|x", i / KEYS + 1);
        counts_ok = weir_test_value_is(&out.records[i], want);
    }
    WEIR_CHECK(counts_ok);
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_batched_state_calls() == 3);
    WEIR_CHECK(stored_count("k0") == 5 && stored_count("k999") == 5);
}

/* ------------------------------------------- the same as the per-call path */

typedef struct {
    char *text;
    size_t len, cap;
} log_t;

static void log_append(log_t *log, const void *bytes, size_t n) {
    if (log->len + n + 1 > log->cap) {
        log->cap = (log->len + n + 1) * 2;
        log->text = realloc(log->text, log->cap);
        if (log->text == NULL) {
            abort();
        }
    }
    if (n != 0) {
        memcpy(log->text + log->len, bytes, n);
    }
    log->len += n;
    log->text[log->len] = '\0';
}

static void log_str(log_t *log, const char *s) { log_append(log, s, strlen(s)); }

static void log_output(log_t *log, weir_test_output_t *out) {
    char ts[32];
    for (size_t i = 0; i < out->len; i++) {
        const weir_test_record_t *r = &out->records[i];
        log_append(log, r->key.ptr, r->key.len);
        log_str(log, "\t");
        log_append(log, r->value.ptr, r->value.len);
        snprintf(ts, sizeof(ts), "\t%lld\n", (long long)r->timestamp);
        log_str(log, ts);
    }
    weir_test_output_free(out);
}

static uint64_t next_random(uint64_t *state) {
    /* xorshift64: the same sequence on every platform */
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static const char *const KEYS[] = {"k0", "k1", "k2", "k3", "", "outside"};
/* The keys the random batches use: all but "outside". */
#define BATCH_KEYS 5
static const char *const OPS[] = {"x", "y", "k0", "reset", "clear-last", "peek", "outside", "raw", "swap"};

/* Runs random batches on both inputs with watermarks in between, and logs
 * what came out and what is stored at the end. */
static void run(uint64_t seed, bool cached, log_t *log, uint64_t *batched, uint64_t *single) {
    uint64_t rng = seed * 0x9E3779B97F4A7C15u + 1;
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_set_batch_cache(cached);
    int64_t ts = 0;
    for (int b = 0; b < 20; b++) {
        weir_record_t records[14];
        size_t n = 1 + next_random(&rng) % 14;
        for (size_t i = 0; i < n; i++) {
            ts++;
            const char *key = KEYS[next_random(&rng) % BATCH_KEYS];
            records[i] = R(key, OPS[next_random(&rng) % (sizeof(OPS) / sizeof(OPS[0]))], ts);
        }
        bool ok = next_random(&rng) % 3 == 0 ? weir_test_process_input(1, records, n, &out)
                                             : weir_test_process(records, n, &out);
        WEIR_CHECK(ok);
        log_output(log, &out);
        WEIR_CHECK(weir_test_watermark(ts - (int64_t)(next_random(&rng) % 8), &out));
        log_output(log, &out);
    }
    WEIR_CHECK(weir_test_finish(&out));
    log_output(log, &out);
    for (size_t k = 0; k < sizeof(KEYS) / sizeof(KEYS[0]); k++) {
        weir_bytes_t v;
        char line[64];
        size_t seen = 0;
        while (weir_test_list_element(SEEN, weir_cstr(KEYS[k]), seen, &v)) {
            seen++;
        }
        snprintf(line, sizeof(line), "state %s: count %lld, seen %zu, last ", KEYS[k],
                 (long long)stored_count(KEYS[k]), seen);
        log_str(log, line);
        if (weir_test_state_value(LAST, weir_cstr(KEYS[k]), &v)) {
            log_append(log, v.ptr, v.len);
        } else {
            log_str(log, "none");
        }
        log_str(log, "\n");
    }
    *batched = weir_test_batched_state_calls();
    *single = weir_test_state_calls();
}

static void output_and_state_match_the_per_call_path(void) {
    for (uint64_t seed = 1; seed <= 30; seed++) {
        log_t with = {0}, without = {0};
        uint64_t batched_with, single_with, batched_without, single_without;
        run(seed, true, &with, &batched_with, &single_with);
        run(seed, false, &without, &batched_without, &single_without);
        bool same = with.len == without.len && memcmp(with.text, without.text, with.len) == 0;
        if (!same) {
            fprintf(stderr, "seed %llu: with the cache:\n%s\nwithout:\n%s\n", (unsigned long long)seed, with.text,
                    without.text);
        }
        WEIR_CHECK(same);
        WEIR_CHECK(batched_with > 0 && batched_without == 0);
        WEIR_CHECK(single_with < single_without);
        free(with.text);
        free(without.text);
    }
}

int main(void) {
    records_of_one_key_see_each_others_updates();
    a_batch_costs_one_get_many_and_one_set_many_per_state();
    a_write_only_batch_reads_nothing();
    explicit_keys_and_a_clear_before_any_read();
    a_key_buffer_rewritten_in_place_is_another_key();
    a_failing_callback_flushes_then_fails();
    host_errors_of_the_batched_calls_name_the_state();
    input_1_walks_the_batch_with_explicit_keys();
    many_keys_in_one_batch();
    output_and_state_match_the_per_call_path();
    return weir_test_summary();
}
