/*
 * migration: version 2.0.0 of an operator whose states were written by 1.x,
 * with every kind of state migration, so the native test checks the
 * `migrate-state` export (weir.c) against weir_test.c.
 *
 * Keyed by the whole record. Per record it adds one to value state `total`
 * (u64; 1.x stored a u32), appends the value to list state `tags`, puts
 * value -> value into map state `per-tag`, and sets value state `untouched`
 * to the value. Migrations: `total` widens a 1.x u32 to a u64 (and keeps
 * newer bytes); `tags` upper-cases an element and appends "@{from_version}";
 * `per-tag` appends "@{from_version}" to a value; `untouched` has none;
 * `broken` always fails with a message, `silent` without one.
 */
#include <ctype.h>

#include "weir.h"

enum { TOTAL, TAGS, PER_TAG, UNTOUCHED, BROKEN, SILENT };

static bool widen_total(weir_bytes_t from_version, weir_bytes_t old, weir_buf_t *migrated) {
    if (from_version.len < 2 || memcmp(from_version.ptr, "1.", 2) != 0) {
        *migrated = weir_buf_copy(old); /* already a u64 */
        return true;
    }
    uint32_t total;
    if (!weir_decode_u32(old, &total)) {
        return weir_failf("cannot decode u32: expected 4 bytes, got %zu", old.len);
    }
    *migrated = weir_buf_alloc(8);
    weir_encode_u64(total, migrated->ptr);
    return true;
}

/* `old`, transformed by `upper`, then "@" and the version. */
static weir_buf_t tagged(weir_bytes_t old, bool upper, weir_bytes_t from_version) {
    weir_buf_t out = weir_buf_alloc(old.len + 1 + from_version.len);
    for (size_t i = 0; i < old.len; i++) {
        out.ptr[i] = upper ? (uint8_t)toupper(old.ptr[i]) : old.ptr[i];
    }
    out.ptr[old.len] = '@';
    if (from_version.len != 0) {
        memcpy(out.ptr + old.len + 1, from_version.ptr, from_version.len);
    }
    return out;
}

static bool migrate_tag(weir_bytes_t from_version, weir_bytes_t old, weir_buf_t *migrated) {
    *migrated = tagged(old, true, from_version);
    return true;
}

static bool migrate_per_tag(weir_bytes_t from_version, weir_bytes_t old, weir_buf_t *migrated) {
    *migrated = tagged(old, false, from_version);
    return true;
}

static bool refuse(weir_bytes_t from_version, weir_bytes_t old, weir_buf_t *migrated) {
    (void)from_version;
    *migrated = weir_buf_copy(old); /* allocated before failing: the SDK frees it */
    return weir_failf("cannot read %zu bytes", old.len);
}

static bool fail_silently(weir_bytes_t from_version, weir_bytes_t old, weir_buf_t *migrated) {
    (void)from_version;
    (void)old;
    (void)migrated;
    return false;
}

static const weir_state_descriptor_t STATES[] = {
    [TOTAL] = WEIR_VALUE_STATE_MIGRATED("total", widen_total),
    [TAGS] = WEIR_LIST_STATE_MIGRATED("tags", migrate_tag),
    [PER_TAG] = WEIR_MAP_STATE_MIGRATED("per-tag", migrate_per_tag),
    [UNTOUCHED] = WEIR_VALUE_STATE("untouched"),
    [BROKEN] = WEIR_VALUE_STATE_MIGRATED("broken", refuse),
    [SILENT] = {.name = "silent", .kind = WEIR_STATE_VALUE, .ttl_ms = 60000, .migrate = fail_silently},
};

static bool migration_element(const weir_record_t *record, weir_ctx_t *ctx) {
    uint64_t total = 0;
    int found = weir_value_get_u64(ctx, TOTAL, &total);
    return found >= 0 && weir_value_set_u64(ctx, TOTAL, total + 1) && weir_list_add(ctx, TAGS, record->value) &&
           weir_map_put(ctx, PER_TAG, record->value, record->value) &&
           weir_value_set(ctx, UNTOUCHED, record->value);
}

const weir_operator_t weir_operator = {
    .name = "migration",
    .version = "2.0.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .process_element = migration_element,
};
