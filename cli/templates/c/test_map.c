/* Unit test of {{name}}, natively, without Wasm: `make test`. */
#include "weir_test.h"

static void uppercases_values(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t records[] = {
        weir_test_record(NULL, "hello weir", 1),
        weir_test_record("k", "streams", 2),
    };
    WEIR_CHECK(weir_test_process(records, 2, &out));
    WEIR_CHECK(out.len == 2);
    if (out.len == 2) {
        WEIR_CHECK(weir_test_value_is(&out.records[0], "HELLO WEIR"));
        WEIR_CHECK(weir_test_value_is(&out.records[1], "STREAMS"));
        WEIR_CHECK(out.records[1].has_key && out.records[1].timestamp == 2);
    }
    weir_test_output_free(&out);
}

int main(void) {
    uppercases_values();
    return weir_test_summary();
}
