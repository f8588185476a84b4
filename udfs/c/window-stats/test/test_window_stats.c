/* Native unit tests of the C window-stats (sdk/c/test.sh udfs/c/window-stats):
 * the aggregate through the same `window-function` exports the host calls,
 * compared with an expectation computed here independently. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir_test.h"

static const weir_window_t W = {60000, 120000};

/* The expected result, computed the plain way (strtoll, snprintf). */
static void expect(const char *key_json, weir_window_t w, const char *const *values, size_t n, char *buf,
                   size_t size) {
    int64_t sum = 0, min = INT64_MAX, max = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        int64_t x = strtoll(values[i], NULL, 10);
        sum += x;
        min = x < min ? x : min;
        max = x > max ? x : max;
    }
    snprintf(buf, size,
             "{\"key\":%s,\"start\":%" PRId64 ",\"end\":%" PRId64 ",\"count\":%zu,\"sum\":%" PRId64
             ",\"min\":%" PRId64 ",\"max\":%" PRId64 "}",
             key_json, w.start, w.end, n, sum, min, max);
}

static size_t records_of(const char *key, const char *const *values, size_t n, weir_record_t *records) {
    for (size_t i = 0; i < n; i++) {
        records[i] = weir_test_record(key, values[i], 60000 + (int64_t)i);
    }
    return n;
}

static bool result_is(const weir_buf_t *result, const char *expected) {
    bool same = weir_bytes_eq_cstr(weir_buf_bytes(result), expected);
    if (!same) {
        fprintf(stderr, "got      %.*s\nexpected %s\n", (int)result->len, (const char *)result->ptr, expected);
    }
    return same;
}

static const char *const VALUES[] = {"5", " 17 ", "-3", "42\n", "0", "+8", "-3", "1000000000000"};
enum { N = sizeof(VALUES) / sizeof(VALUES[0]) };

static void kind_is_aggregate(void) {
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(weir_test_window_kind() == WEIR_WINDOW_AGGREGATE);
}

static void every_chunk_size_gives_the_same_result(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t records[N];
    records_of("sensor-1", VALUES, N, records);
    char expected[512];
    expect("\"sensor-1\"", W, VALUES, N, expected, sizeof(expected));
    for (size_t chunk = 0; chunk <= N + 1; chunk++) { /* 0: all at once */
        weir_buf_t result = {NULL, 0};
        WEIR_CHECK(weir_test_aggregate(weir_cstr("sensor-1"), W, records, N, chunk, &result));
        WEIR_CHECK(result_is(&result, expected));
        weir_buf_free(&result);
    }
}

static void one_record(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r = weir_test_record("k", "-7", 1);
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(weir_test_aggregate(weir_cstr("k"), W, &r, 1, 1, &result));
    WEIR_CHECK(result_is(&result, "{\"key\":\"k\",\"start\":60000,\"end\":120000,\"count\":1,\"sum\":-7,"
                                  "\"min\":-7,\"max\":-7}"));
    weir_buf_free(&result);
}

static void merged_halves_equal_the_whole(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t records[N];
    records_of("s", VALUES, N, records);
    char expected[512];
    expect("\"s\"", W, VALUES, N, expected, sizeof(expected));
    for (size_t split = 1; split < N; split++) {
        weir_buf_t result = {NULL, 0};
        WEIR_CHECK(weir_test_merged_aggregate(weir_cstr("s"), W, records, split, records + split, N - split, &result));
        WEIR_CHECK(result_is(&result, expected));
        weir_buf_free(&result);
    }
}

static void many_windows_in_one_add(void) {
    /* As the host calls it: one stored accumulator, one new, records
     * interleaved between them; every accumulator comes back. */
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t first[2] = {weir_test_record("a", "1", 1), weir_test_record("a", "2", 2)};
    uint32_t zeros[2] = {0, 0};
    weir_test_accumulator_t none = {false, {NULL, 0}};
    weir_buf_list_t stored;
    WEIR_CHECK(weir_test_window_add(&none, 1, zeros, first, 2, &stored));
    WEIR_CHECK(stored.len == 1 && stored.items[0].len == 32);

    weir_test_accumulator_t accs[3] = {{true, weir_buf_bytes(&stored.items[0])}, {false, {NULL, 0}},
                                       {false, {NULL, 0}}};
    weir_record_t more[3] = {weir_test_record("a", "10", 3), weir_test_record("b", "20", 4),
                             weir_test_record("a", "30", 5)};
    uint32_t targets[3] = {0, 1, 0};
    weir_buf_list_t after;
    WEIR_CHECK(weir_test_window_add(accs, 3, targets, more, 3, &after));
    WEIR_CHECK(after.len == 3);
    if (after.len == 3) {
        weir_test_accumulated_t windows[3] = {
            {weir_cstr("a"), W, weir_buf_bytes(&after.items[0])},
            {weir_cstr("b"), W, weir_buf_bytes(&after.items[1])},
            {weir_cstr("c"), {0, 10}, weir_buf_bytes(&after.items[2])}, /* no record: a new, empty one */
        };
        weir_buf_list_t results;
        WEIR_CHECK(weir_test_window_get_result(windows, 3, &results));
        WEIR_CHECK(results.len == 3);
        if (results.len == 3) {
            WEIR_CHECK(result_is(&results.items[0], "{\"key\":\"a\",\"start\":60000,\"end\":120000,\"count\":4,"
                                                    "\"sum\":43,\"min\":1,\"max\":30}"));
            WEIR_CHECK(result_is(&results.items[1], "{\"key\":\"b\",\"start\":60000,\"end\":120000,\"count\":1,"
                                                    "\"sum\":20,\"min\":20,\"max\":20}"));
            /* (The host never fires a window without records.) */
            WEIR_CHECK(result_is(&results.items[2], "{\"key\":\"c\",\"start\":0,\"end\":10,\"count\":0,\"sum\":0,"
                                                    "\"min\":9223372036854775807,\"max\":-9223372036854775808}"));
        }
        weir_buf_list_free(&results);
    }
    weir_buf_list_free(&after);
    weir_buf_list_free(&stored);
}

static void keys_are_json_strings(void) {
    WEIR_CHECK(weir_test_open(NULL));
    /* A quote, a backslash, a newline, a control character, non-ASCII, and
     * an invalid UTF-8 byte (replaced by U+FFFD). */
    static const char key[] = "q\"b\\n\n\x01\xc3\xa9\xff!";
    weir_record_t r = weir_test_record(key, "1", 1);
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(weir_test_aggregate(weir_cstr(key), W, &r, 1, 1, &result));
    WEIR_CHECK(result_is(&result, "{\"key\":\"q\\\"b\\\\n\\n\\u0001\xc3\xa9\xef\xbf\xbd!\",\"start\":60000,"
                                  "\"end\":120000,\"count\":1,\"sum\":1,\"min\":1,\"max\":1}"));
    weir_buf_free(&result);
}

static void a_global_window_spans_the_time_line(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_window_t global = {INT64_MIN, INT64_MAX};
    weir_record_t r[2] = {weir_test_record("g", "3", 1), weir_test_record("g", "4", 2)};
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(weir_test_aggregate(weir_cstr("g"), global, r, 2, 1, &result));
    WEIR_CHECK(result_is(&result, "{\"key\":\"g\",\"start\":-9223372036854775808,\"end\":9223372036854775807,"
                                  "\"count\":2,\"sum\":7,\"min\":3,\"max\":4}"));
    weir_buf_free(&result);
}

static void a_bad_value_is_an_error_naming_it(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r[3] = {weir_test_record("k", "1", 1), weir_test_record("k", "12abc", 2),
                          weir_test_record("k", "2", 3)};
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(!weir_test_aggregate(weir_cstr("k"), W, r, 3, 0, &result));
    WEIR_CHECK(strcmp(weir_test_error(), "value \"12abc\" is not a decimal integer") == 0);
    static const char *const bad[] = {"", " ", "1.5", "- 1", "9223372036854775808", "0x10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        weir_record_t b = weir_test_record("k", bad[i], 1);
        WEIR_CHECK(!weir_test_aggregate(weir_cstr("k"), W, &b, 1, 1, &result));
        WEIR_CHECK(strstr(weir_test_error(), "is not a decimal integer") != NULL);
    }
    weir_record_t edge[2] = {weir_test_record("k", "9223372036854775807", 1),
                             weir_test_record("k", "-9223372036854775808", 2)};
    WEIR_CHECK(weir_test_aggregate(weir_cstr("k"), W, edge, 2, 1, &result));
    WEIR_CHECK(result_is(&result, "{\"key\":\"k\",\"start\":60000,\"end\":120000,\"count\":2,\"sum\":-1,"
                                  "\"min\":-9223372036854775808,\"max\":9223372036854775807}"));
    weir_buf_free(&result);
}

static void a_sum_beyond_64_bits_wraps_around(void) {
    /* As the Rust window-stats (wrapping_add), in add and in merge. */
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r[2] = {weir_test_record("k", "9223372036854775807", 1), weir_test_record("k", "1", 2)};
    static const char expected[] = "{\"key\":\"k\",\"start\":60000,\"end\":120000,\"count\":2,"
                                   "\"sum\":-9223372036854775808,\"min\":1,\"max\":9223372036854775807}";
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(weir_test_aggregate(weir_cstr("k"), W, r, 2, 1, &result));
    WEIR_CHECK(result_is(&result, expected));
    weir_buf_free(&result);
    WEIR_CHECK(weir_test_merged_aggregate(weir_cstr("k"), W, r, 1, r + 1, 1, &result));
    WEIR_CHECK(result_is(&result, expected));
    weir_buf_free(&result);
}

static void a_corrupt_accumulator_is_an_error(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_accumulated_t w = {weir_cstr("k"), W, weir_cstr("short")};
    weir_buf_list_t results;
    WEIR_CHECK(!weir_test_window_get_result(&w, 1, &results));
    WEIR_CHECK(strcmp(weir_test_error(), "cannot decode Stats: expected 32 bytes, got 5") == 0);
}

static void not_an_operator(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_output_t out = {0};
    weir_record_t r = weir_test_record("k", "1", 1);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "window function") != NULL &&
               strstr(weir_test_error(), "`window`") != NULL);
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

int main(void) {
    kind_is_aggregate();
    every_chunk_size_gives_the_same_result();
    one_record();
    merged_halves_equal_the_whole();
    many_windows_in_one_add();
    keys_are_json_strings();
    a_global_window_spans_the_time_line();
    a_bad_value_is_an_error_naming_it();
    a_sum_beyond_64_bits_wraps_around();
    a_corrupt_accumulator_is_an_error();
    not_an_operator();
    return weir_test_summary();
}
