/* Native unit tests of the C window-top (sdk/c/test.sh udfs/c/window-top):
 * the process-window function through the same `window-function` export
 * the host calls, compared with an expectation computed here independently
 * (sorting every value). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir_test.h"

static const weir_window_t W = {1000, 2000};

static int descending(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The expected value: sort all values, take the first three. */
static void expect(const char *key_json, weir_window_t w, const char *const *values, size_t n, char *buf,
                   size_t size) {
    int64_t sorted[64];
    for (size_t i = 0; i < n; i++) {
        sorted[i] = strtoll(values[i], NULL, 10);
    }
    qsort(sorted, n, sizeof(int64_t), descending);
    int len = snprintf(buf, size, "{\"key\":%s,\"start\":%" PRId64 ",\"end\":%" PRId64 ",\"count\":%zu,\"top\":[",
                       key_json, w.start, w.end, n);
    for (size_t i = 0; i < n && i < 3; i++) {
        len += snprintf(buf + len, size - (size_t)len, "%s%" PRId64, i ? "," : "", sorted[i]);
    }
    snprintf(buf + len, size - (size_t)len, "]}");
}

static bool value_is(const weir_test_record_t *r, const char *expected) {
    bool same = weir_test_value_is(r, expected);
    if (!same) {
        fprintf(stderr, "got      %.*s\nexpected %s\n", (int)r->value.len, (const char *)r->value.ptr, expected);
    }
    return same;
}

/* Runs the window over `values` of `key` and checks the one record emitted. */
static void check_top(const char *key, const char *key_json, weir_window_t w, const char *const *values, size_t n) {
    weir_record_t records[64];
    for (size_t i = 0; i < n; i++) {
        records[i] = weir_test_record(key, values[i], w.start + (int64_t)i);
    }
    char expected[512];
    expect(key_json, w, values, n, expected, sizeof(expected));
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_process_window(weir_cstr(key), w, records, n, &out));
    WEIR_CHECK(out.len == 1);
    if (out.len == 1) {
        const weir_test_record_t *r = &out.records[0];
        WEIR_CHECK(value_is(r, expected));
        WEIR_CHECK(r->has_key && weir_bytes_eq_cstr(weir_buf_bytes(&r->key), key));
        WEIR_CHECK(r->timestamp == w.end - 1);
        WEIR_CHECK(r->tag == NULL);
    }
    weir_test_output_free(&out);
}

static void kind_is_process_window(void) {
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(weir_test_window_kind() == WEIR_WINDOW_PROCESS_WINDOW);
}

static void the_three_largest_descending(void) {
    WEIR_CHECK(weir_test_open(NULL));
    check_top("a", "\"a\"", W, (const char *const[]){"4", " 9", "-2", "17 ", "3", "9", "0"}, 7);
    check_top("a", "\"a\"", W, (const char *const[]){"1", "2", "3", "4", "5", "6", "7", "8"}, 8);
    check_top("a", "\"a\"", W, (const char *const[]){"8", "7", "6", "5", "4", "3", "2", "1"}, 8);
}

static void duplicates_are_kept(void) {
    WEIR_CHECK(weir_test_open(NULL));
    check_top("d", "\"d\"", W, (const char *const[]){"3", "5", "1", "5"}, 4);
    weir_record_t r[4] = {weir_test_record("d", "3", 1), weir_test_record("d", "5", 2), weir_test_record("d", "1", 3),
                          weir_test_record("d", "5", 4)};
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_process_window(weir_cstr("d"), W, r, 4, &out));
    WEIR_CHECK(out.len == 1 && value_is(&out.records[0], "{\"key\":\"d\",\"start\":1000,\"end\":2000,\"count\":4,"
                                                         "\"top\":[5,5,3]}"));
    weir_test_output_free(&out);
}

static void fewer_than_three(void) {
    WEIR_CHECK(weir_test_open(NULL));
    check_top("one", "\"one\"", W, (const char *const[]){"-5"}, 1);
    check_top("two", "\"two\"", W, (const char *const[]){"-5", "-6"}, 2);
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_process_window(weir_cstr("none"), W, NULL, 0, &out));
    WEIR_CHECK(out.len == 1 && value_is(&out.records[0], "{\"key\":\"none\",\"start\":1000,\"end\":2000,"
                                                         "\"count\":0,\"top\":[]}"));
    weir_test_output_free(&out);
}

static void keys_are_json_strings_and_global_windows_span_all(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_window_t global = {INT64_MIN, INT64_MAX};
    check_top("t\t\"\xe2\x82\xac\x80", "\"t\\t\\\"\xe2\x82\xac\xef\xbf\xbd\"", global,
              (const char *const[]){"2", "1"}, 2);
}

static void a_bad_value_is_an_error_naming_it(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r[2] = {weir_test_record("k", "1", 1), weir_test_record("k", "one", 2)};
    weir_test_output_t out = {0};
    WEIR_CHECK(!weir_test_process_window(weir_cstr("k"), W, r, 2, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "value \"one\" is not a decimal integer") == 0);
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

static void not_an_operator_nor_an_aggregate(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_output_t out = {0};
    weir_record_t r = weir_test_record("k", "1", 1);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "is a window function (a process-window function)") != NULL);
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(!weir_test_aggregate(weir_cstr("k"), W, &r, 1, 1, &result));
    WEIR_CHECK(strcmp(weir_test_error(),
                      "this module's window function is a process-window function, not an aggregate") == 0);
    weir_test_output_free(&out);
}

int main(void) {
    kind_is_process_window();
    the_three_largest_descending();
    duplicates_are_kept();
    fewer_than_three();
    keys_are_json_strings_and_global_windows_span_all();
    a_bad_value_is_an_error_naming_it();
    not_an_operator_nor_an_aggregate();
    return weir_test_summary();
}
