/* A keyed co-process function through `two-input.process-input` (the same
 * case as udfs/python/pair-join's test, and more). */
#include <string.h>

#include "weir_test.h"

static void each_pair_once_by_its_later_record(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t l = weir_test_record("a", "{\"i\":1}", 1);
    WEIR_CHECK(weir_test_process_input(0, &l, 1, &out));
    WEIR_CHECK(out.len == 0);
    weir_record_t r[2] = {weir_test_record("a", "{\"i\":2}", 2), weir_test_record("b", "{\"i\":3}", 3)};
    WEIR_CHECK(weir_test_process_input(1, r, 2, &out));
    WEIR_CHECK(out.len == 1);
    if (out.len == 1) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "{\"key\":\"a\",\"left\":{\"i\":1},\"right\":{\"i\":2}}"));
        WEIR_CHECK(out.records[0].timestamp == 2);
        WEIR_CHECK(weir_bytes_eq_cstr(weir_buf_bytes(&out.records[0].key), "a"));
    }
    weir_test_output_free(&out);
    /* Input 0 also arrives through `operator.process`: the left side. */
    weir_record_t l2 = weir_test_record("b", "{\"i\":4}", 4);
    WEIR_CHECK(weir_test_process(&l2, 1, &out));
    WEIR_CHECK(out.len == 1 && weir_test_value_is(&out.records[0], "{\"key\":\"b\",\"left\":{\"i\":4},\"right\":{\"i\":3}}"));
    weir_test_output_free(&out);
    /* State and timers are shared: one timer per key, whichever input registered it. */
    WEIR_CHECK(weir_test_timer_count() == 2);
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 2);
    if (out.len == 2) {
        WEIR_CHECK(out.records[0].tag != NULL && strcmp(out.records[0].tag, "counts") == 0);
        WEIR_CHECK(weir_test_value_is(&out.records[0], "a: 1 left, 1 right"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "b: 1 left, 1 right"));
    }
    weir_test_output_free(&out);
}

static void many_of_each_side(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t left[2] = {weir_test_record("k", "1", 1), weir_test_record("k", "2", 2)};
    weir_record_t right[2] = {weir_test_record("k", "10", 3), weir_test_record("k", "20", 4)};
    WEIR_CHECK(weir_test_process_input(0, left, 2, &out));
    WEIR_CHECK(weir_test_process_input(1, right, 2, &out));
    static const char *const expected[] = {
        "{\"key\":\"k\",\"left\":1,\"right\":10}",
        "{\"key\":\"k\",\"left\":2,\"right\":10}",
        "{\"key\":\"k\",\"left\":1,\"right\":20}",
        "{\"key\":\"k\",\"left\":2,\"right\":20}",
    };
    WEIR_CHECK(out.len == 4);
    for (size_t i = 0; i < out.len && i < 4; i++) {
        WEIR_CHECK(weir_test_value_is(&out.records[i], expected[i]));
    }
    weir_test_output_free(&out);
    weir_bytes_t element;
    WEIR_CHECK(weir_test_list_element(1, weir_cstr("k"), 1, &element) && weir_bytes_eq_cstr(element, "20"));
}

static void bad_inputs_are_errors(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r = weir_test_record("k", "1", 1);
    WEIR_CHECK(!weir_test_process_input(2, &r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(),
                      "a batch arrived on input 2, but an operator has at most two inputs (0 and 1)") == 0);
    weir_record_t unkeyed = weir_test_record(NULL, "1", 1);
    WEIR_CHECK(!weir_test_process_input(1, &unkeyed, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "has no key") != NULL);
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

static void a_processing_timer_without_its_callback_is_an_error(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open((const char *const[]){"processing_timer", "register", NULL}));
    weir_record_t r = weir_test_record("k", "1", 1);
    WEIR_CHECK(weir_test_process_input(0, &r, 1, &out));
    WEIR_CHECK(weir_test_processing_timer_count() == 1);
    WEIR_CHECK(!weir_test_advance_processing_time(1, &out));
    WEIR_CHECK(strcmp(weir_test_error(),
                      "a processing-time timer fired at 0, but weir_operator defines no on_processing_timer") == 0);
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

int main(void) {
    each_pair_once_by_its_later_record();
    many_of_each_side();
    bad_inputs_are_errors();
    a_processing_timer_without_its_callback_is_an_error();
    return weir_test_summary();
}
