/* Processing-time timers through the harness (the same case as
 * udfs/idle-alert's Rust test), and what a one-input, non-window operator
 * answers to `two-input` and `window-function`. */
#include <string.h>

#include "weir_test.h"

static void a_key_quiet_for_the_timeout_alerts_once(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open((const char *const[]){"timeout_ms", "1000", NULL}));
    WEIR_CHECK(weir_test_processing_time() == 0);
    weir_record_t first[2] = {weir_test_record("a", "x", 1), weir_test_record("b", "x", 1)};
    WEIR_CHECK(weir_test_process(first, 2, &out));
    WEIR_CHECK(weir_test_advance_processing_time(500, &out));
    WEIR_CHECK(out.len == 0);
    /* a is active again: its deadline moves to 1500, the old timer goes. */
    weir_record_t again = weir_test_record("a", "x", 2);
    WEIR_CHECK(weir_test_process(&again, 1, &out));
    WEIR_CHECK(weir_test_processing_timer_count() == 2);
    WEIR_CHECK(weir_test_timer_count() == 0); /* no event-time timers */
    WEIR_CHECK(weir_test_advance_processing_time(600, &out));
    WEIR_CHECK(out.len == 1);
    if (out.len == 1) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "b\tidle"));
        WEIR_CHECK(out.records[0].timestamp == 1000);
        WEIR_CHECK(weir_bytes_eq_cstr(weir_buf_bytes(&out.records[0].key), "b"));
    }
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_advance_processing_time(400, &out));
    WEIR_CHECK(out.len == 1 && weir_test_value_is(&out.records[0], "a\tidle"));
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_advance_processing_time(10000, &out));
    WEIR_CHECK(out.len == 0); /* once */
    WEIR_CHECK(weir_test_processing_timer_count() == 0);
    weir_bytes_t value;
    WEIR_CHECK(!weir_test_state_value(0, weir_cstr("a"), &value));
    WEIR_CHECK(!weir_test_state_value(0, weir_cstr("b"), &value));
    /* The watermark fires no processing-time timer. */
    WEIR_CHECK(weir_test_process(&again, 1, &out));
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 0 && weir_test_processing_timer_count() == 1);
    weir_test_output_free(&out);
}

static void timers_fire_in_time_order(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open((const char *const[]){"timeout_ms", "10", NULL}));
    weir_record_t a = weir_test_record("a", "x", 1), b = weir_test_record("b", "x", 1);
    WEIR_CHECK(weir_test_process(&b, 1, &out));
    WEIR_CHECK(weir_test_advance_processing_time(5, &out));
    WEIR_CHECK(weir_test_process(&a, 1, &out));
    WEIR_CHECK(weir_test_advance_processing_time(100, &out)); /* b at 10, a at 15 */
    WEIR_CHECK(out.len == 2);
    if (out.len == 2) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "b\tidle") && out.records[0].timestamp == 10);
        WEIR_CHECK(weir_test_value_is(&out.records[1], "a\tidle") && out.records[1].timestamp == 15);
    }
    weir_test_output_free(&out);
}

static void bad_config_fails_open(void) {
    WEIR_CHECK(!weir_test_open(NULL));
    WEIR_CHECK(strcmp(weir_test_error(), "config `timeout_ms` is required and must be at least 1") == 0);
    WEIR_CHECK(!weir_test_open((const char *const[]){"timeout_ms", "0", NULL}));
}

static void one_input_only(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open((const char *const[]){"timeout_ms", "10", NULL}));
    weir_record_t r = weir_test_record("a", "x", 1);
    WEIR_CHECK(weir_test_process_input(0, &r, 1, &out)); /* input 0 is `process` */
    WEIR_CHECK(weir_test_processing_timer_count() == 1);
    WEIR_CHECK(!weir_test_process_input(1, &r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "not a two-input operator") != NULL);
    WEIR_CHECK(strstr(weir_test_error(), "process_element2") != NULL);
    WEIR_CHECK(!weir_test_process_input(2, &r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "input 2") != NULL);
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

static void not_a_window_function(void) {
    WEIR_CHECK(weir_test_open((const char *const[]){"timeout_ms", "10", NULL}));
    WEIR_CHECK(weir_test_window_kind() == WEIR_WINDOW_NONE);
    weir_record_t r = weir_test_record("a", "1", 1);
    weir_buf_t result = {NULL, 0};
    WEIR_CHECK(!weir_test_aggregate(weir_cstr("a"), (weir_window_t){0, 10}, &r, 1, 1, &result));
    WEIR_CHECK(strstr(weir_test_error(), "is not a window function") != NULL);
    weir_bytes_t acc = weir_cstr("x");
    weir_buf_list_t merged;
    WEIR_CHECK(!weir_test_window_merge(&acc, &acc, 1, &merged));
    WEIR_CHECK(strstr(weir_test_error(), "is not a window function") != NULL);
    weir_test_accumulated_t w = {weir_cstr("a"), {0, 10}, acc};
    WEIR_CHECK(!weir_test_window_get_result(&w, 1, &merged));
    WEIR_CHECK(strstr(weir_test_error(), "is not a window function") != NULL);
    weir_test_output_t out = {0};
    WEIR_CHECK(!weir_test_process_window(weir_cstr("a"), (weir_window_t){0, 10}, &r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "is not a window function") != NULL);
    WEIR_CHECK(out.len == 0);
}

int main(void) {
    a_key_quiet_for_the_timeout_alerts_once();
    timers_fire_in_time_order();
    bad_config_fails_open();
    one_input_only();
    not_a_window_function();
    return weir_test_summary();
}
