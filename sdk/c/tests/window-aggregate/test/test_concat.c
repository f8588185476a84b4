/* The SDK's aggregate bookkeeping: accumulators that own memory (encode,
 * decode, drop), many windows per call, wire-level errors, no merge. */
#include <string.h>

#include "weir_test.h"

long concat_live(void);

static const weir_window_t W = {0, 100};

static bool result_is(const weir_buf_t *result, const char *expected) {
    bool same = weir_bytes_eq_cstr(weir_buf_bytes(result), expected);
    if (!same) {
        fprintf(stderr, "got      %.*s\nexpected %s\n", (int)result->len, (const char *)result->ptr, expected);
    }
    return same;
}

static void chunks_round_trip_through_bytes(void) {
    WEIR_CHECK(weir_test_open((const char *const[]){"separator", "+", NULL}));
    weir_record_t r[4] = {weir_test_record("k", "a", 1), weir_test_record("k", "bb", 2), weir_test_record("k", "", 3),
                          weir_test_record("k", "d", 4)};
    for (size_t chunk = 0; chunk <= 4; chunk++) {
        weir_buf_t result = {NULL, 0};
        WEIR_CHECK(weir_test_aggregate(weir_cstr("k"), W, r, 4, chunk, &result));
        WEIR_CHECK(result_is(&result, "k[0,100): a+bb++d (4)"));
        weir_buf_free(&result);
        WEIR_CHECK(concat_live() == 0);
    }
    /* No records: a new accumulator, returned as it is. */
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(weir_test_aggregate(weir_cstr(""), W, NULL, 0, 1, &result));
    WEIR_CHECK(result_is(&result, "[0,100):  (0)"));
    weir_buf_free(&result);
    WEIR_CHECK(concat_live() == 0);
}

static void every_accumulator_comes_back_in_order(void) {
    WEIR_CHECK(weir_test_open(NULL));
    uint8_t stored[9];
    weir_encode_u64(1, stored);
    stored[8] = 'x';
    weir_test_accumulator_t accs[4] = {
        {false, {NULL, 0}},
        {true, {stored, 9}},
        {false, {NULL, 0}}, /* no record goes here */
        {true, {stored, 9}},
    };
    weir_record_t r[4] = {weir_test_record("k", "1", 1), weir_test_record("k", "2", 2), weir_test_record("k", "3", 3),
                          weir_test_record("k", "4", 4)};
    uint32_t targets[4] = {1, 0, 1, 3};
    weir_buf_list_t out;
    WEIR_CHECK(weir_test_window_add(accs, 4, targets, r, 4, &out));
    WEIR_CHECK(out.len == 4);
    WEIR_CHECK(concat_live() == 0);
    if (out.len == 4) {
        weir_test_accumulated_t windows[4];
        for (size_t i = 0; i < 4; i++) {
            windows[i].key = weir_cstr("k");
            windows[i].window = (weir_window_t){(int64_t)i, (int64_t)i + 1};
            windows[i].accumulator = weir_buf_bytes(&out.items[i]);
        }
        WEIR_CHECK(out.items[2].len == 8); /* adds = 0, no text */
        weir_buf_list_t results;
        WEIR_CHECK(weir_test_window_get_result(windows, 4, &results));
        static const char *const expected[] = {"k[0,1): 2 (1)", "k[1,2): x,1,3 (3)", "k[2,3):  (0)", "k[3,4): x,4 (2)"};
        WEIR_CHECK(results.len == 4);
        for (size_t i = 0; i < results.len && i < 4; i++) {
            WEIR_CHECK(result_is(&results.items[i], expected[i]));
        }
        weir_buf_list_free(&results);
    }
    weir_buf_list_free(&out);
    /* Nothing at all: an empty list back. */
    WEIR_CHECK(weir_test_window_add(NULL, 0, NULL, NULL, 0, &out));
    WEIR_CHECK(out.len == 0);
    weir_buf_list_free(&out);
    WEIR_CHECK(concat_live() == 0);
}

static void a_target_out_of_range_is_an_error(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_accumulator_t accs[2] = {{false, {NULL, 0}}, {false, {NULL, 0}}};
    weir_record_t r[2] = {weir_test_record("k", "1", 1), weir_test_record("k", "2", 2)};
    uint32_t targets[2] = {1, 2};
    weir_buf_list_t out;
    WEIR_CHECK(!weir_test_window_add(accs, 2, targets, r, 2, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "add: record 1 goes to accumulator 2, but there are 2") == 0);
    WEIR_CHECK(concat_live() == 0); /* dropped after the failure too */
    WEIR_CHECK(!weir_test_window_add(NULL, 0, targets, r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "add: record 0 goes to accumulator 1, but there are 0") == 0);
}

static void a_failing_add_drops_everything(void) {
    WEIR_CHECK(weir_test_open((const char *const[]){"fail_on", "boom", NULL}));
    weir_record_t r[3] = {weir_test_record("k", "1", 1), weir_test_record("k", "boom", 2),
                          weir_test_record("k", "3", 3)};
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(!weir_test_aggregate(weir_cstr("k"), W, r, 3, 1, &result));
    WEIR_CHECK(strcmp(weir_test_error(), "concat: asked to fail at `boom`") == 0);
    WEIR_CHECK(concat_live() == 0);
    /* The instance goes on: the next call succeeds. */
    WEIR_CHECK(weir_test_aggregate(weir_cstr("k"), W, r, 1, 1, &result));
    WEIR_CHECK(result_is(&result, "k[0,100): 1 (1)"));
    weir_buf_free(&result);
}

static void a_bad_stored_accumulator_is_an_error(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_accumulator_t accs[2] = {{false, {NULL, 0}}, {true, {(const uint8_t *)"abc", 3}}};
    weir_record_t r = weir_test_record("k", "1", 1);
    uint32_t target = 0;
    weir_buf_list_t out;
    WEIR_CHECK(!weir_test_window_add(accs, 2, &target, &r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "concat: a stored accumulator has at least 8 bytes, got 3") == 0);
    WEIR_CHECK(concat_live() == 0);
}

static void without_merge_merging_fails(void) {
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r[2] = {weir_test_record("k", "1", 1), weir_test_record("k", "2", 2)};
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(!weir_test_merged_aggregate(weir_cstr("k"), W, r, 1, r + 1, 1, &result));
    WEIR_CHECK(strcmp(weir_test_error(), "merge: weir_operator.aggregate defines no merge (session windows need one)") ==
               0);
    WEIR_CHECK(concat_live() == 0);
}

static void not_an_operator_nor_a_process_window_function(void) {
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(weir_test_window_kind() == WEIR_WINDOW_AGGREGATE);
    weir_test_output_t out = {0};
    weir_record_t r = weir_test_record("k", "1", 1);
    WEIR_CHECK(!weir_test_process_window(weir_cstr("k"), W, &r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "this module's window function is an aggregate, not a process-window function") ==
               0);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "this module is a window function (an aggregate), not an operator") != NULL);
    WEIR_CHECK(!weir_test_process_input(1, &r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "window function") != NULL);
    /* The watermark and the end of input are quiet: the host fires windows. */
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

int main(void) {
    chunks_round_trip_through_bytes();
    every_accumulator_comes_back_in_order();
    a_target_out_of_range_is_an_error();
    a_failing_add_drops_everything();
    a_bad_stored_accumulator_is_an_error();
    without_merge_merging_fails();
    not_an_operator_nor_a_process_window_function();
    return weir_test_summary();
}
