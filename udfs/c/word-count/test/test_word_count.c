/* Native unit tests of the C word-count (sdk/c/test.sh udfs/c/word-count):
 * the same cases as udfs/word-count's Rust tests. */
#include <string.h>

#include "weir_test.h"

static void process_words(const char *const *words, size_t n, weir_test_output_t *out) {
    weir_record_t records[16];
    for (size_t i = 0; i < n; i++) {
        records[i] = weir_test_record(words[i], words[i], (int64_t)i);
    }
    WEIR_CHECK(weir_test_process(records, n, out));
}

static void final_counts_come_with_the_final_watermark(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    process_words((const char *const[]){"a", "b", "a"}, 3, &out);
    process_words((const char *const[]){"a"}, 1, &out);
    WEIR_CHECK(out.len == 0);
    WEIR_CHECK(weir_test_timer_count() == 2); /* one timer per key */
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 2);
    if (out.len == 2) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "a\t3"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "b\t1"));
        WEIR_CHECK(out.records[0].has_key && weir_bytes_eq_cstr(weir_buf_bytes(&out.records[0].key), "a"));
        WEIR_CHECK(out.records[0].timestamp == INT64_MAX);
    }
    weir_test_output_free(&out);
}

static void updates_emit_on_every_record(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open((const char *const[]){"emit", "updates", NULL}));
    process_words((const char *const[]){"a", "b", "a"}, 3, &out);
    WEIR_CHECK(out.len == 3);
    if (out.len == 3) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "a\t1"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "b\t1"));
        WEIR_CHECK(weir_test_value_is(&out.records[2], "a\t2"));
        WEIR_CHECK(out.records[2].timestamp == 2);
    }
    WEIR_CHECK(weir_test_timer_count() == 0);
    weir_test_output_free(&out);
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 0);
    weir_test_output_free(&out);
}

static void bad_emit_mode_fails_open(void) {
    WEIR_CHECK(!weir_test_open((const char *const[]){"emit", "sometimes", NULL}));
    WEIR_CHECK(strcmp(weir_test_error(), "config `emit`: expected `final` or `updates`, got `sometimes`") == 0);
}

static void unkeyed_record_is_an_error(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t r = weir_test_record(NULL, "x", 0);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strstr(weir_test_error(), "has no key") != NULL);
    weir_test_output_free(&out);
}

/* The count is stored in the shared encoding (u64 little-endian), so state
 * written by the Rust counter (or Python, or JS) reads the same here. */
static void count_state_uses_the_shared_encoding(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    /* 41 for "a", as the Rust SDK's ValueState<u64> writes it: 29 00 00 00 00 00 00 00. */
    static const uint8_t rust_41[8] = {41, 0, 0, 0, 0, 0, 0, 0};
    weir_test_set_state_value(0, weir_cstr("a"), (weir_bytes_t){rust_41, 8});
    process_words((const char *const[]){"a", "b"}, 2, &out);
    weir_bytes_t stored;
    WEIR_CHECK(weir_test_state_value(0, weir_cstr("a"), &stored));
    static const uint8_t le_42[8] = {42, 0, 0, 0, 0, 0, 0, 0};
    WEIR_CHECK(weir_bytes_eq(stored, (weir_bytes_t){le_42, 8}));
    /* "a" had state, so no new timer: only "b" registers one, as in Rust. */
    WEIR_CHECK(weir_test_timer_count() == 1);
    WEIR_CHECK(weir_test_finish(&out));
    WEIR_CHECK(out.len == 1 && weir_test_value_is(&out.records[0], "b\t1"));
    weir_test_output_free(&out);
}

/* A stored value of the wrong width is an error naming the state, not a misread. */
static void a_corrupt_count_fails_the_call(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_test_set_state_value(0, weir_cstr("a"), weir_cstr("abc"));
    weir_record_t r = weir_test_record("a", "a", 0);
    WEIR_CHECK(!weir_test_process(&r, 1, &out));
    WEIR_CHECK(strcmp(weir_test_error(), "state `count`: cannot decode u64: expected 8 bytes, got 3") == 0);
    weir_test_output_free(&out);
}

static void an_upgrade_keeps_the_stored_counts(void) {
    /* `count` declares no migration: `weir upgrade` keeps its bytes as they are. */
    uint8_t bytes[8];
    weir_encode_u64(41, bytes);
    weir_bytes_t old = {bytes, sizeof(bytes)};
    weir_buf_t migrated = {NULL, 0};
    WEIR_CHECK(weir_test_migrate_state("count", "0.0.1", old, &migrated));
    WEIR_CHECK(weir_bytes_eq(weir_buf_bytes(&migrated), old));
    weir_buf_free(&migrated);
}

int main(void) {
    final_counts_come_with_the_final_watermark();
    updates_emit_on_every_record();
    bad_emit_mode_fails_open();
    unkeyed_record_is_an_error();
    count_state_uses_the_shared_encoding();
    a_corrupt_count_fails_the_call();
    an_upgrade_keeps_the_stored_counts();
    return weir_test_summary();
}
