/* Native unit tests of the C fraud detector (sdk/c/test.sh udfs/c/fraud-detect):
 * the cases of udfs/fraud-detect's Rust tests, how transactions are read
 * and amounts printed, and the batch cache against the per-call path over
 * random transactions with a failure and a restore. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir_test.h"

enum { SMALL_TS };

#define R(key, value, ts) weir_test_record((key), (value), (ts))
#define PROCESS(out, ...)                                                                                    \
    weir_test_process((const weir_record_t[]){__VA_ARGS__},                                                  \
                      sizeof((const weir_record_t[]){__VA_ARGS__}) / sizeof(weir_record_t), (out))

/* The one record of `out` is an alert with `value`, keyed by `key`, at `ts`. */
static bool one_alert(const weir_test_output_t *out, const char *key, const char *value, int64_t ts) {
    if (out->len != 1) {
        fprintf(stderr, "  %zu records, expected 1\n", out->len);
        return false;
    }
    const weir_test_record_t *r = &out->records[0];
    if (!weir_test_value_is(r, value)) {
        fprintf(stderr, "  `%.*s`, expected `%s`\n", (int)r->value.len, (const char *)r->value.ptr, value);
        return false;
    }
    return r->tag == NULL && r->has_key && weir_bytes_eq_cstr(weir_buf_bytes(&r->key), key) && r->timestamp == ts;
}

static bool has_flag(const char *account) {
    weir_bytes_t v;
    return weir_test_state_value(SMALL_TS, weir_cstr(account), &v);
}

static void small_then_large_within_a_minute_alerts(void) {
    const char *small = "{\"account\":\"a\",\"amount\":0.5}";
    const char *large = "{\"account\":\"a\",\"amount\":600.25}";
    const char *medium = "{\"account\":\"a\",\"amount\":100}";
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(PROCESS(&out, R("acct-1", small, 1000), R("acct-2", large, 1500), /* other account: no flag */
                       R("acct-1", large, 61000)));                               /* exactly 60 s later */
    WEIR_CHECK(one_alert(&out, "acct-1", "{\"account\":\"acct-1\",\"small_ts\":1000,\"large_ts\":61000,\"amount\":600.25}",
                         61000));
    weir_test_output_free(&out);
    WEIR_CHECK(!has_flag("acct-1")); /* flag cleared */

    /* Too late, or a medium transaction in between: no alert. */
    WEIR_CHECK(PROCESS(&out, R("acct-1", small, 100000), R("acct-1", large, 160001), R("acct-1", small, 200000),
                       R("acct-1", medium, 200001), R("acct-1", large, 200002)));
    WEIR_CHECK(out.len == 0);

    /* A small transaction re-arms the flag; the amount prints shortest. */
    WEIR_CHECK(PROCESS(&out, R("acct-1", small, 300000), R("acct-1", small, 300001),
                       R("acct-1", "{\"account\":\"a\",\"amount\":501.0}", 300002)));
    WEIR_CHECK(one_alert(&out, "acct-1", "{\"account\":\"acct-1\",\"small_ts\":300001,\"large_ts\":300002,\"amount\":501}",
                         300002));
    weir_test_output_free(&out);
}

static void malformed_json_is_an_error(void) {
    static const char *const bad[] = {
        "not json",
        "",
        "{\"account\":\"a\"}",                    /* no amount */
        "{\"amount\":\"12\"}",                    /* not a number */
        "{\"amount\":1,\"amount\":2}",            /* twice */
        "{\"amount\":01}",                        /* not JSON's number */
        "{\"amount\":1.}",
        "{\"amount\":1e999}",                     /* out of range */
        "{\"amount\":1} x",                       /* trailing characters */
        "{\"amount\":1,}",
        "{\"amount\":1,\"x\":[1,}",
        "{\"amount\":1,\"x\":\"a\tb\"}",          /* a raw control character */
        "{\"amount\":1,\"x\":\"\\q\"}",           /* a bad escape */
        "[]",
        "[1,2]",
        "12",
    };
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weir_record_t r = R("a", bad[i], 1);
        bool failed = !weir_test_process(&r, 1, &out);
        WEIR_CHECK(failed && strncmp(weir_test_error(), "bad transaction \"", 17) == 0);
        if (!failed) {
            fprintf(stderr, "  accepted %s\n", bad[i]);
        }
    }
    WEIR_CHECK(out.len == 0);
    weir_record_t r = R("a", "not json", 1);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "bad transaction \"not json\": not a JSON object") == 0);
}

/* What serde_json reads as a transaction, the detector reads too: any
 * member order and spacing, members it ignores (of any JSON), escapes in
 * names, or the struct as an array. */
static void transactions_are_read_as_serde_reads_them(void) {
    static const char *const smalls[] = {
        " { \"amount\" : 0.5 } ",
        "{\"account\":\"x\",\"currency\":\"EUR\",\"amount\":-3.5,\"tags\":[\"a\",{\"b\":null}],\"ok\":true}",
        "{\"n\":[[[]],{}],\"f\":false,\"s\":\"\\\"}\\\\\\u00e9\",\"\\u0061mount\":0}",
        "[0.99]",
        "{\"amount\":5e-1}",
        "{\"amount\":-0}",
    };
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    for (size_t i = 0; i < sizeof(smalls) / sizeof(smalls[0]); i++) {
        weir_record_t r[2] = {R("a", smalls[i], 10), R("a", "{\"amount\":1E3}", 20)};
        WEIR_CHECK(weir_test_process(r, 2, &out));
        WEIR_CHECK(one_alert(&out, "a", "{\"account\":\"a\",\"small_ts\":10,\"large_ts\":20,\"amount\":1000}", 20));
        weir_test_output_free(&out);
    }
}

/* Amounts print as Rust's `{}` prints an f64, and accounts as serde_json
 * writes a string. */
static void alerts_print_as_rust_prints_them(void) {
    /* As the input spells the amount; how Rust prints it: these digits,
     * then this many zeros. Checked against udfs/fraud-detect. */
    static const struct {
        const char *spelled, *digits;
        int zeros;
    } amounts[] = {
        {"600.25", "600.25", 0},
        {"501.0", "501", 0},
        {"500.01", "500.01", 0},
        {"2.5E+3", "25", 2},
        {"1e21", "1", 21},
        {"1e23", "1", 23},
        {"1.5e300", "15", 299},
        {"1.7976931348623157e308", "17976931348623157", 292},
        {"1234.5678", "1234.5678", 0},
        {"12345678.9", "12345678.9", 0},
        {"0.1e4", "1", 3},
        {"9007199254740993", "9007199254740992", 0},
        {"500.00000000000006", "500.00000000000006", 0},
        {"123456789.123456789", "123456789.12345679", 0},
    };
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    for (size_t i = 0; i < sizeof(amounts) / sizeof(amounts[0]); i++) {
        char large[64], alert[512];
        snprintf(large, sizeof(large), "{\"amount\":%s}", amounts[i].spelled);
        size_t n = (size_t)snprintf(alert, sizeof(alert),
                                    "{\"account\":\"a\",\"small_ts\":1,\"large_ts\":2,\"amount\":%s", amounts[i].digits);
        memset(alert + n, '0', (size_t)amounts[i].zeros);
        strcpy(alert + n + amounts[i].zeros, "}");
        weir_record_t r[2] = {R("a", "{\"amount\":0.5}", 1), R("a", large, 2)};
        WEIR_CHECK(weir_test_process(r, 2, &out));
        WEIR_CHECK(one_alert(&out, "a", alert, 2));
        weir_test_output_free(&out);
    }
    /* The account: quotes, backslashes and control characters escaped,
     * other text as it is, invalid UTF-8 as U+FFFD. */
    const char *account = "q\"\\\x01\t\xc3\xa9\xff";
    weir_record_t r[2] = {R(account, "{\"amount\":0.5}", 1), R(account, "{\"amount\":501}", 2)};
    WEIR_CHECK(weir_test_process(r, 2, &out));
    WEIR_CHECK(one_alert(&out, account,
                         "{\"account\":\"q\\\"\\\\\\u0001\\t\xc3\xa9\xef\xbf\xbd\",\"small_ts\":1,\"large_ts\":2,\"amount\":501}",
                         2));
    weir_test_output_free(&out);
}

/* The flag uses the shared encoding (i64 little-endian): a flag the Rust
 * detector wrote restores here. */
static void the_flag_uses_the_shared_encoding(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    static const uint8_t rust_1000[8] = {0xe8, 0x03, 0, 0, 0, 0, 0, 0};
    weir_test_set_state_value(SMALL_TS, weir_cstr("a"), (weir_bytes_t){rust_1000, 8});
    weir_record_t r = R("a", "{\"amount\":750.125}", 2000);
    WEIR_CHECK(weir_test_process(&r, 1, &out));
    WEIR_CHECK(one_alert(&out, "a", "{\"account\":\"a\",\"small_ts\":1000,\"large_ts\":2000,\"amount\":750.125}", 2000));
    weir_test_output_free(&out);
    r = R("a", "{\"amount\":0.25}", 3000);
    WEIR_CHECK(weir_test_process(&r, 1, &out));
    weir_bytes_t stored;
    static const uint8_t le_3000[8] = {0xb8, 0x0b, 0, 0, 0, 0, 0, 0};
    WEIR_CHECK(weir_test_state_value(SMALL_TS, weir_cstr("a"), &stored) &&
               weir_bytes_eq(stored, (weir_bytes_t){le_3000, 8}));
}

/* -------------------------------- the batch cache against the per-call path */

/* The accounts of the random input (the record keys), each as a JSON
 * string: few, so that a batch holds several transactions of one. */
static const char *const ACCOUNTS[][2] = {
    {"acct-1", "\"acct-1\""},
    {"acct-2", "\"acct-2\""},
    {"acct-3", "\"acct-3\""},
    {"acct \"7\"", "\"acct \\\"7\\\"\""},
    {"compte-\xc3\xa9", "\"compte-\xc3\xa9\""},
};
#define NUM_ACCOUNTS (sizeof(ACCOUNTS) / sizeof(ACCOUNTS[0]))

enum size { SMALL, MEDIUM, LARGE };

/* Amounts as the input spells them, with their size and, for the large
 * ones, how an alert prints them: udfs/fraud-detect's table. */
static const struct {
    const char *spelled;
    enum size size;
    const char *printed;
} AMOUNTS[] = {
    {"0.5", SMALL, ""},
    {"0.99", SMALL, ""},
    {"0", SMALL, ""},
    {"-3.5", SMALL, ""},
    {"1", MEDIUM, ""},
    {"1.00", MEDIUM, ""},
    {"500", MEDIUM, ""},
    {"500.0", MEDIUM, ""},
    {"600.25", LARGE, "600.25"},
    {"501", LARGE, "501"},
    {"501.0", LARGE, "501"},
    {"500.01", LARGE, "500.01"},
    {"1e3", LARGE, "1000"},
    {"2.5E+3", LARGE, "2500"},
    {"750.125", LARGE, "750.125"},
    {"12345678.9", LARGE, "12345678.9"},
    {"1234.5678", LARGE, "1234.5678"},
    {"1e21", LARGE, "1000000000000000000000"},
};
#define NUM_AMOUNTS (sizeof(AMOUNTS) / sizeof(AMOUNTS[0]))

enum { STEPS = 40, MAX_BATCH = 16, CHECKPOINT = 15, FAILURE = 17 };

/* Seeded random steps, and for each record which account and amount. */
typedef struct {
    weir_test_step_t steps[STEPS];
    weir_record_t records[STEPS][MAX_BATCH];
    char values[STEPS][MAX_BATCH][160];
    size_t account[STEPS][MAX_BATCH], amount[STEPS][MAX_BATCH];
} input_t;

/* xorshift64: the same sequence on every platform; a number below `n`. */
static uint64_t below(uint64_t *seed, uint64_t n) {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    return *seed % n;
}

/* 40 steps of 0 to 16 transactions, the time moving on by 0 to 2 s or
 * now and then by about a minute (around the 60 s window), in one of three
 * spellings; half the steps end with a watermark (the detector has no
 * timers: it must not mind). */
static void random_input(uint64_t seed, input_t *in) {
    int64_t ts = 0, watermark = INT64_MIN;
    for (size_t s = 0; s < STEPS; s++) {
        size_t n = below(&seed, MAX_BATCH + 1);
        for (size_t i = 0; i < n; i++) {
            ts += below(&seed, 10) == 0 ? 59990 + (int64_t)below(&seed, 20) : (int64_t)below(&seed, 2000);
            size_t a = below(&seed, NUM_ACCOUNTS), m = below(&seed, NUM_AMOUNTS);
            const char *json = ACCOUNTS[a][1], *amount = AMOUNTS[m].spelled;
            char *value = in->values[s][i];
            switch (below(&seed, 3)) {
            case 0: snprintf(value, 160, "{\"account\":%s,\"amount\":%s}", json, amount); break;
            case 1: snprintf(value, 160, "{ \"amount\" : %s , \"account\" : %s }", amount, json); break;
            default:
                snprintf(value, 160,
                         "{\"account\":%s,\"currency\":\"EUR\",\"amount\":%s,\"tags\":[\"a\",{\"b\":null}],\"ok\":true}",
                         json, amount);
            }
            in->records[s][i] = R(ACCOUNTS[a][0], value, ts);
            in->account[s][i] = a;
            in->amount[s][i] = m;
        }
        bool advance = below(&seed, 2) == 0;
        if (advance) {
            int64_t w = ts - (int64_t)below(&seed, 5000);
            watermark = w > watermark ? w : watermark;
        }
        in->steps[s] = (weir_test_step_t){in->records[s], n, advance, watermark};
    }
}

/* The alerts computed directly (the flags in a plain array, sizes and
 * printed amounts from the table, not from parsing): every step's into
 * `committed`, those of the lost steps also into `lost`; the flags left in
 * `flag`/`flagged`. Returns how many large amounts came too late. */
static int expected_alerts(const input_t *in, weir_test_text_t *committed, weir_test_text_t *lost,
                           int64_t flag[NUM_ACCOUNTS], bool flagged[NUM_ACCOUNTS]) {
    int late = 0;
    for (size_t a = 0; a < NUM_ACCOUNTS; a++) {
        flagged[a] = false;
    }
    for (size_t s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < in->steps[s].len; i++) {
            size_t a = in->account[s][i];
            enum size size = AMOUNTS[in->amount[s][i]].size;
            int64_t ts = in->records[s][i].timestamp;
            if (flagged[a] && size == LARGE && ts - flag[a] <= 60000) {
                char alert[200];
                snprintf(alert, sizeof(alert), "{\"account\":%s,\"small_ts\":%lld,\"large_ts\":%lld,\"amount\":%s}",
                         ACCOUNTS[a][1], (long long)flag[a], (long long)ts, AMOUNTS[in->amount[s][i]].printed);
                weir_bytes_t key = weir_cstr(ACCOUNTS[a][0]);
                weir_test_text_record(committed, NULL, &key, weir_cstr(alert), ts);
                if (s >= CHECKPOINT && s < FAILURE) {
                    weir_test_text_record(lost, NULL, &key, weir_cstr(alert), ts);
                }
            } else if (flagged[a] && size == LARGE) {
                late++;
            }
            flagged[a] = size == SMALL;
            flag[a] = ts;
        }
    }
    return late;
}

/* Seeded random transactions with a checkpoint, two lost steps and a
 * restore: the batch cache (one value-get-many and one value-set-many per
 * batch) gives byte for byte what a host call per access gives — alerts,
 * flags left — and both give the alerts computed directly. */
static void the_batch_cache_gives_what_single_calls_give(void) {
    static input_t in;
    static const uint64_t seeds[] = {0x2545f4914f6cdd1d, 11, (uint64_t)1 << 33};
    int alerts = 0, late = 0, flags_left = 0;
    for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
        random_input(seeds[k], &in);
        WEIR_CHECK(weir_test_steps_repeat_a_key(in.steps, STEPS));
        weir_test_failure_run_t per_call, batched;
        WEIR_CHECK(weir_test_run_with_failure(NULL, false, in.steps, STEPS, CHECKPOINT, FAILURE, &per_call));
        /* The batched run last: the host keeps its state for the checks below. */
        WEIR_CHECK(weir_test_run_with_failure(NULL, true, in.steps, STEPS, CHECKPOINT, FAILURE, &batched));
        WEIR_CHECK(weir_test_same_runs(&batched, &per_call));

        weir_test_text_t committed = WEIR_TEST_TEXT_INIT, lost = WEIR_TEST_TEXT_INIT;
        int64_t flag[NUM_ACCOUNTS];
        bool flagged[NUM_ACCOUNTS];
        late += expected_alerts(&in, &committed, &lost, flag, flagged);
        WEIR_CHECK(weir_test_text_same("committed, as expected", &batched.committed, &committed));
        WEIR_CHECK(weir_test_text_same("lost, as expected", &batched.lost, &lost));
        for (size_t i = 0; committed.ptr != NULL && committed.ptr[i] != '\0'; i++) {
            alerts += committed.ptr[i] == '\n';
        }
        for (size_t a = 0; a < NUM_ACCOUNTS; a++) {
            weir_bytes_t stored;
            int64_t ts = 0;
            bool found = weir_test_state_value(SMALL_TS, weir_cstr(ACCOUNTS[a][0]), &stored);
            WEIR_CHECK(found == flagged[a] && (!found || (weir_decode_i64(stored, &ts) && ts == flag[a])));
            flags_left += flagged[a];
        }
        weir_test_text_free(&committed);
        weir_test_text_free(&lost);
        weir_test_failure_run_free(&per_call);
        weir_test_failure_run_free(&batched);
    }
    /* Not vacuous: alerts, large amounts too late for one, flags left. */
    WEIR_CHECK(alerts > 30);
    WEIR_CHECK(late > 0 && flags_left > 0);
}

int main(void) {
    small_then_large_within_a_minute_alerts();
    malformed_json_is_an_error();
    transactions_are_read_as_serde_reads_them();
    alerts_print_as_rust_prints_them();
    the_flag_uses_the_shared_encoding();
    the_batch_cache_gives_what_single_calls_give();
    return weir_test_summary();
}
