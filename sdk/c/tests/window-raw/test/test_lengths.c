/* The SDK's default accumulator handling: zeroed new accumulators, the
 * struct's bytes as the stored form, merge. */
#include <string.h>

#include "weir_test.h"

static const weir_window_t W = {10, 20};

static void defaults(void) {
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(weir_test_window_kind() == WEIR_WINDOW_AGGREGATE);
    weir_record_t r[3] = {weir_test_record("k", "abc", 10), weir_test_record("k", "", 11),
                          weir_test_record(NULL, "hello", 12)};
    for (size_t chunk = 0; chunk <= 3; chunk++) {
        weir_buf_t result = {NULL, 0};
        WEIR_CHECK(weir_test_aggregate(weir_cstr("k"), W, r, 3, chunk, &result));
        WEIR_CHECK(weir_bytes_eq_cstr(weir_buf_bytes(&result), "3 records, 8 bytes"));
        weir_buf_free(&result);
    }
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(weir_test_merged_aggregate(weir_cstr("k"), W, r, 2, r + 2, 1, &result));
    WEIR_CHECK(weir_bytes_eq_cstr(weir_buf_bytes(&result), "3 records, 8 bytes"));
    weir_buf_free(&result);
    WEIR_CHECK(weir_test_merged_aggregate(weir_cstr("k"), W, NULL, 0, r, 3, &result));
    WEIR_CHECK(weir_bytes_eq_cstr(weir_buf_bytes(&result), "3 records, 8 bytes"));
    weir_buf_free(&result);
}

static void stored_as_the_struct_bytes(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_accumulator_t none = {false, {NULL, 0}};
    weir_buf_list_t out;
    WEIR_CHECK(weir_test_window_add(&none, 1, NULL, NULL, 0, &out));
    WEIR_CHECK(out.len == 1 && out.items[0].len == 16);
    if (out.len == 1 && out.items[0].len == 16) {
        static const uint8_t zeros[16] = {0};
        WEIR_CHECK(memcmp(out.items[0].ptr, zeros, 16) == 0);
    }
    weir_buf_list_free(&out);
    weir_test_accumulated_t w = {weir_cstr("k"), W, weir_cstr("abc")};
    WEIR_CHECK(!weir_test_window_get_result(&w, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "cannot decode the accumulator: expected 16 bytes, got 3") == 0);
    weir_bytes_t a = weir_cstr("abc");
    WEIR_CHECK(!weir_test_window_merge(&a, &a, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "cannot decode the accumulator: expected 16 bytes, got 3") == 0);
    /* Many pairs at once. */
    uint8_t one[16] = {1, 0, 0, 0, 0, 0, 0, 0, 5}, two[16] = {2, 0, 0, 0, 0, 0, 0, 0, 7};
    weir_bytes_t left[2] = {{one, 16}, {two, 16}}, right[2] = {{two, 16}, {two, 16}};
    WEIR_CHECK(weir_test_window_merge(left, right, 2, &out));
    WEIR_CHECK(out.len == 2);
    if (out.len == 2) {
        weir_test_accumulated_t ws[2] = {{weir_cstr("a"), W, weir_buf_bytes(&out.items[0])},
                                         {weir_cstr("b"), W, weir_buf_bytes(&out.items[1])}};
        weir_buf_list_t results;
        WEIR_CHECK(weir_test_window_get_result(ws, 2, &results));
        WEIR_CHECK(results.len == 2 && weir_bytes_eq_cstr(weir_buf_bytes(&results.items[0]), "3 records, 12 bytes") &&
                   weir_bytes_eq_cstr(weir_buf_bytes(&results.items[1]), "4 records, 14 bytes"));
        weir_buf_list_free(&results);
    }
    weir_buf_list_free(&out);
    /* No pairs, no windows: empty lists. */
    WEIR_CHECK(weir_test_window_merge(NULL, NULL, 0, &out) && out.len == 0);
    WEIR_CHECK(weir_test_window_get_result(NULL, 0, &out) && out.len == 0);
}

int main(void) {
    defaults();
    stored_as_the_struct_bytes();
    return weir_test_summary();
}
