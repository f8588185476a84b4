/* Native tests of the C SDK's `migrate-state` export (what `weir upgrade`
 * calls once per stored value), through weir_test.c. */
#include <string.h>

#include "weir_test.h"

enum { TOTAL, TAGS, PER_TAG, UNTOUCHED, BROKEN };

static weir_bytes_t u32_bytes(uint32_t v, uint8_t out[4]) {
    weir_encode_u32(v, out);
    return (weir_bytes_t){out, 4};
}

static weir_bytes_t u64_bytes(uint64_t v, uint8_t out[8]) {
    weir_encode_u64(v, out);
    return (weir_bytes_t){out, 8};
}

/* Migrates `old` and checks the result is `expected`. */
static bool migrates_to(const char *state, const char *from_version, weir_bytes_t old, weir_bytes_t expected) {
    weir_buf_t migrated = {NULL, 0};
    bool ok = weir_test_migrate_state(state, from_version, old, &migrated);
    ok = ok && weir_bytes_eq(weir_buf_bytes(&migrated), expected);
    weir_buf_free(&migrated);
    return ok;
}

/* Migrating `old` fails with exactly `message`. */
static bool fails_with(const char *state, const char *from_version, weir_bytes_t old, const char *message) {
    weir_buf_t migrated = {NULL, 0};
    if (weir_test_migrate_state(state, from_version, old, &migrated)) {
        weir_buf_free(&migrated);
        return false;
    }
    return strcmp(weir_test_error(), message) == 0;
}

static void a_state_with_a_migration_gets_its_result(void) {
    uint8_t a[8], b[8];
    WEIR_CHECK(migrates_to("total", "1.4.0", u32_bytes(41, a), u64_bytes(41, b)));
    WEIR_CHECK(migrates_to("tags", "1.0.0", weir_cstr("red"), weir_cstr("RED@1.0.0")));
    WEIR_CHECK(migrates_to("per-tag", "1.0.0", weir_cstr("v"), weir_cstr("v@1.0.0")));
    WEIR_CHECK(migrates_to("tags", "1.0.0", weir_cstr(""), weir_cstr("@1.0.0")));
    /* The function sees the version: one already in the new encoding stays. */
    WEIR_CHECK(migrates_to("total", "2.0.0-rc1", u64_bytes(7, a), u64_bytes(7, b)));
}

static void states_without_a_migration_and_unknown_states_keep_their_bytes(void) {
    weir_bytes_t old = {(const uint8_t *)"\xff\0as is", 7};
    WEIR_CHECK(migrates_to("untouched", "1.0.0", old, old));
    WEIR_CHECK(migrates_to("no-such-state", "1.0.0", old, old));
    WEIR_CHECK(migrates_to("untouched", "1.0.0", weir_cstr(""), weir_cstr("")));
}

static void a_failing_migration_is_an_error_naming_the_state_and_version(void) {
    uint8_t a[2] = {1, 2};
    weir_bytes_t two = {a, 2};
    WEIR_CHECK(fails_with("broken", "1.2.3", two,
                          "migrating state `broken` from version 1.2.3: cannot read 2 bytes"));
    WEIR_CHECK(fails_with("total", "1.0.0", two,
                          "migrating state `total` from version 1.0.0: "
                          "cannot decode u32: expected 4 bytes, got 2"));
    WEIR_CHECK(fails_with("silent", "1.0.0", two,
                          "migrating state `silent` from version 1.0.0: "
                          "failed without a message (call weir_fail)"));
    /* A failure does not stick to the next call. */
    WEIR_CHECK(migrates_to("tags", "1.0.0", weir_cstr("x"), weir_cstr("X@1.0.0")));
}

/* A store as an operator 1.x left it: `total` still a u32. */
static void seed(void) {
    weir_test_output_t out = {0};
    WEIR_CHECK(weir_test_open(NULL));
    weir_record_t records[] = {weir_test_record("k", "red", 1), weir_test_record("k", "blue", 2)};
    WEIR_CHECK(weir_test_process(records, 2, &out));
    weir_test_output_free(&out);
    uint8_t a[4];
    weir_test_set_state_value(TOTAL, weir_cstr("k"), u32_bytes(5, a));
}

static bool stored(int state, const char *key, const char *user_key, size_t index, weir_bytes_t expected) {
    weir_bytes_t v;
    bool found = user_key != NULL ? weir_test_map_value(state, weir_cstr(key), weir_cstr(user_key), &v)
                 : state == TAGS  ? weir_test_list_element(state, weir_cstr(key), index, &v)
                                  : weir_test_state_value(state, weir_cstr(key), &v);
    return found && weir_bytes_eq(v, expected);
}

static void migrating_stored_state_rewrites_values_list_elements_and_map_values(void) {
    seed();
    WEIR_CHECK(weir_test_migrate_stored_state("1.0.0"));
    uint8_t a[8];
    WEIR_CHECK(stored(TOTAL, "k", NULL, 0, u64_bytes(5, a)));
    WEIR_CHECK(stored(TAGS, "k", NULL, 0, weir_cstr("RED@1.0.0")));
    WEIR_CHECK(stored(TAGS, "k", NULL, 1, weir_cstr("BLUE@1.0.0")));
    /* Map values are migrated, their user keys are not. */
    WEIR_CHECK(stored(PER_TAG, "k", "red", 0, weir_cstr("red@1.0.0")));
    WEIR_CHECK(stored(PER_TAG, "k", "blue", 0, weir_cstr("blue@1.0.0")));
    WEIR_CHECK(stored(UNTOUCHED, "k", NULL, 0, weir_cstr("blue")));
}

static void a_failed_migration_leaves_stored_state_as_it_was(void) {
    seed();
    weir_test_set_state_value(BROKEN, weir_cstr("k"), weir_cstr("x"));
    WEIR_CHECK(!weir_test_migrate_stored_state("1.0.0"));
    WEIR_CHECK(strcmp(weir_test_error(), "migrating state `broken` from version 1.0.0: cannot read 1 bytes") == 0);
    uint8_t a[4];
    WEIR_CHECK(stored(TOTAL, "k", NULL, 0, u32_bytes(5, a)));
    WEIR_CHECK(stored(TAGS, "k", NULL, 0, weir_cstr("red")));
}

static void the_same_version_migrates_nothing(void) {
    seed();
    WEIR_CHECK(weir_test_migrate_stored_state("2.0.0"));
    uint8_t a[4];
    WEIR_CHECK(stored(TOTAL, "k", NULL, 0, u32_bytes(5, a)));
    WEIR_CHECK(stored(TAGS, "k", NULL, 1, weir_cstr("blue")));
}

int main(void) {
    /* migrate-state needs no open: the host calls it before `open`. */
    a_state_with_a_migration_gets_its_result();
    states_without_a_migration_and_unknown_states_keep_their_bytes();
    a_failing_migration_is_an_error_naming_the_state_and_version();
    migrating_stored_state_rewrites_values_list_elements_and_map_values();
    a_failed_migration_leaves_stored_state_as_it_was();
    the_same_version_migrates_nothing();
    return weir_test_summary();
}
