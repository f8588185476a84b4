/* Native run of the features operator: the same output the host gives for
 * features.toml (features.expected). */
#include <string.h>

#include "weir_test.h"

static const char *const INPUT[] = {"x", "y", "x", "x", "z", "y"};

static void every_state_kind_and_output(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t records[6];
    for (int i = 0; i < 6; i++) {
        records[i] = weir_test_record(INPUT[i], INPUT[i], i);
    }
    WEIR_CHECK(weir_test_process(records, 6, &out));
    /* Main output first (empty here), then each side output's batch in
     * the order of the tags' first use: 6 on `seen`, 6 on `unconsumed`. */
    WEIR_CHECK(out.len == 12);
    for (size_t i = 0; i < out.len && i < 12; i++) {
        const weir_test_record_t *r = &out.records[i];
        if (i < 6) {
            WEIR_CHECK(r->tag != NULL && strcmp(r->tag, "seen") == 0);
            WEIR_CHECK(r->has_key && weir_test_value_is(r, INPUT[i]) && r->timestamp == (int64_t)i);
        } else {
            WEIR_CHECK(r->tag != NULL && strcmp(r->tag, "unconsumed") == 0);
            WEIR_CHECK(!r->has_key && r->value.len == 0);
        }
    }
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_timer_count() == 3);

    WEIR_CHECK(weir_test_finish(&out));
    static const char *const expected[] = {
        "x list: x x x map: x=3 i64:-1234567890123",
        "y list: y y map: y=2 i64:-1234567890123",
        "z list: z map: z=1 i64:-1234567890123",
        "close watermarks>0:1",
    };
    WEIR_CHECK(out.len == 4);
    for (size_t i = 0; i < out.len && i < 4; i++) {
        WEIR_CHECK(out.records[i].tag == NULL && weir_test_value_is(&out.records[i], expected[i]));
    }
    weir_test_output_free(&out);
}

static void a_failing_callback_returns_its_message(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open((const char *const[]){"fail", "process", NULL}));
    weir_record_t r = weir_test_record("k", "boom", 0);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "asked to fail at `boom`") == 0);
    WEIR_CHECK(out.len == 0);
}

int main(void) {
    every_state_kind_and_output();
    a_failing_callback_returns_its_message();
    return weir_test_summary();
}
