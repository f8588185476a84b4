/* A process-window function's context: side outputs, the key, the
 * timestamp end - 1, and a failed call that emits nothing. */
#include <string.h>

#include "weir_test.h"

static void side_outputs_key_and_timestamp(void) {
    WEIR_CHECK(weir_test_open(NULL));
    WEIR_CHECK(weir_test_window_kind() == WEIR_WINDOW_PROCESS_WINDOW);
    weir_record_t r[2] = {weir_test_record("k", "v1", 5), weir_test_record("k", "v2", 7)};
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_process_window(weir_cstr("k"), (weir_window_t){0, 10}, r, 2, &out));
    WEIR_CHECK(out.len == 3);
    if (out.len == 3) {
        /* The main output first, then each side output. */
        WEIR_CHECK(out.records[0].tag == NULL && weir_test_value_is(&out.records[0], "k 0..10: 2 records at 9"));
        WEIR_CHECK(out.records[1].tag != NULL && strcmp(out.records[1].tag, "each") == 0);
        WEIR_CHECK(weir_test_value_is(&out.records[1], "v1") && weir_test_value_is(&out.records[2], "v2"));
        for (size_t i = 0; i < 3; i++) {
            WEIR_CHECK(out.records[i].timestamp == 9);
            WEIR_CHECK(out.records[i].has_key && weir_bytes_eq_cstr(weir_buf_bytes(&out.records[i].key), "k"));
        }
    }
    weir_test_output_free(&out);
    /* A count window: the whole time line; its last millisecond. */
    WEIR_CHECK(weir_test_process_window(weir_cstr("g"), (weir_window_t){INT64_MIN, INT64_MAX}, r, 1, &out));
    WEIR_CHECK(out.len == 2 && weir_test_value_is(&out.records[0],
                                                  "g -9223372036854775808..9223372036854775807: 1 records at "
                                                  "9223372036854775806"));
    weir_test_output_free(&out);
}

static void a_failed_call_emits_nothing(void) {
    WEIR_CHECK(weir_test_open((const char *const[]){"fail", "yes", NULL}));
    weir_record_t r = weir_test_record("k", "v", 5);
    weir_test_output_t out = {0};
    WEIR_CHECK(!weir_test_process_window(weir_cstr("k"), (weir_window_t){0, 10}, &r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "echo-window: asked to fail") == 0);
    WEIR_CHECK(out.len == 0);
    /* Not an aggregate. */
    weir_bytes_t a = weir_cstr("x");
    weir_buf_list_t values;
    WEIR_CHECK(!weir_test_window_merge(&a, &a, 1, &values));
    WEIR_CHECK(strcmp(weir_test_error(), "this module's window function is a process-window function, not an aggregate") ==
               0);
    weir_test_output_free(&out);
}

int main(void) {
    side_outputs_key_and_timestamp();
    a_failed_call_emits_nothing();
    return weir_test_summary();
}
