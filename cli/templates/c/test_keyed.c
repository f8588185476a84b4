/* Unit test of {{name}}, natively, without Wasm: `make test`. */
#include "weir_test.h"

static void counts_per_key(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t records[] = {
        weir_test_record("apple", "apple", 1),
        weir_test_record("pear", "pear", 2),
        weir_test_record("apple", "apple", 3),
    };
    WEIR_CHECK(weir_test_process(records, 3, &out));
    WEIR_CHECK(out.len == 3);
    if (out.len == 3) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "apple\t1"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "pear\t1"));
        WEIR_CHECK(weir_test_value_is(&out.records[2], "apple\t2"));
    }
    weir_test_output_free(&out);
}

int main(void) {
    counts_per_key();
    return weir_test_summary();
}
