/*
 * sequence-check, in C: the exactly-once checker of Weir's failure tests
 * (Flink's SemanticsCheckMapper); the port of udfs/sequence-check (Rust),
 * whose output it emits byte for byte.
 *
 * Input: a keyed sequence generator's records (`kind = "sequence"`,
 * `keys = K`): record n has key n % K and value n (possibly padded with
 * `.`). Each key's values must advance by exactly `step` (config, = K)
 * starting at the key itself. The operator keeps the last value per key in
 * the value state `last` (u64, little-endian: the shared encoding, so a
 * checkpoint of the Rust checker restores here). Each key's records must
 * come from one source subtask (make `keys` a multiple of the source's
 * parallelism), or they have no order to check. A record that does not
 * follow — lost, duplicated or reordered by a failure — goes to the side
 * output `alerts` as "key <k>: expected <e>, got <n>" (the key as text,
 * invalid UTF-8 as U+FFFD; keyed by the key, at the record's timestamp).
 * Every record also passes through to the main output unchanged.
 *
 * Numbers are read as Rust's u64 parses them: an optional `+`, then only
 * decimal digits, at most u64::MAX. The value's number ends at its first
 * `.`; a value without one fails the call ("not a sequence number: …").
 * A key that is no number expects u64::MAX first; `last + step` wraps
 * around, as in Rust's release build.
 */
#include <stdint.h>

#include "weir.h"

enum { LAST };

static const weir_state_descriptor_t STATES[] = {
    [LAST] = WEIR_VALUE_STATE("last"),
};

static uint64_t step;

/* `text` as Rust's `str::parse::<u64>` reads it: true and `*n` if it is one. */
static bool parse_u64(weir_bytes_t text, uint64_t *n) {
    size_t i = text.len != 0 && text.ptr[0] == '+' ? 1 : 0;
    if (i == text.len) {
        return false;
    }
    uint64_t value = 0;
    for (; i < text.len; i++) {
        uint8_t c = text.ptr[i];
        if (c < '0' || c > '9' || value > (UINT64_MAX - (uint64_t)(c - '0')) / 10) {
            return false;
        }
        value = value * 10 + (uint64_t)(c - '0');
    }
    *n = value;
    return true;
}

static bool check_open(const weir_open_context_t *ctx) {
    weir_bytes_t text;
    if (!weir_config_get(ctx, "step", &text)) {
        return weir_fail("config `step` is required but missing");
    }
    if (!parse_u64(text, &step) || step == 0) {
        return weir_fail("config `step`: expected a positive integer");
    }
    return true;
}

/* The sequence number of `value`: what comes before its first '.'. */
static bool number(weir_bytes_t value, uint64_t *n) {
    size_t end = 0;
    while (end < value.len && value.ptr[end] != '.') {
        end++;
    }
    return parse_u64((weir_bytes_t){value.ptr, end}, n);
}

static bool check(const weir_record_t *record, weir_ctx_t *ctx) {
    weir_bytes_t key = weir_ctx_key(ctx);
    uint64_t n;
    if (!number(record->value, &n)) {
        /* Rust's `{:?}` of the text; exact for the usual (printable) values. */
        weir_batch_builder_t text = WEIR_BATCH_BUILDER_INIT;
        weir_builder_begin(&text, 0, NULL);
        weir_builder_append_json_string(&text, record->value);
        weir_builder_append_byte(&text, '\0');
        weir_builder_end(&text);
        bool ok = weir_failf("not a sequence number: %s", (const char *)text.data);
        weir_builder_free(&text);
        return ok;
    }
    uint64_t last, expected;
    int found = weir_value_get_u64(ctx, LAST, &last);
    if (found < 0) {
        return false;
    }
    if (found) {
        expected = last + step;
    } else if (!parse_u64(key, &expected)) {
        expected = UINT64_MAX; /* the first value of key k is k itself */
    }
    if (n != expected) {
        weir_batch_builder_t *alerts = weir_ctx_side(ctx, "alerts");
        weir_builder_begin(alerts, record->timestamp, &key);
        weir_builder_append(alerts, weir_cstr("key "));
        weir_builder_append_utf8_lossy(alerts, key);
        weir_builder_append(alerts, weir_cstr(": expected "));
        weir_builder_append_u64(alerts, expected);
        weir_builder_append(alerts, weir_cstr(", got "));
        weir_builder_append_u64(alerts, n);
        weir_builder_end(alerts);
    }
    if (!weir_value_set_u64(ctx, LAST, n)) {
        return false;
    }
    weir_builder_push(weir_ctx_out(ctx), record->timestamp, &record->key, record->value);
    return true;
}

const weir_operator_t weir_operator = {
    .name = "sequence-check",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .open = check_open,
    .process_element = check,
};
