/*
 * tally: an operator for the SDK's batch cache of value states (contract
 * 0.1.3, value-get-many / value-set-many): every value-state operation,
 * explicit keys inside and outside the batch, a list state beside them, and
 * timers that read what the batches wrote. Its test (test/test_tally.c)
 * checks the host calls a batch costs and that the output and the stored
 * state are those of the per-call path (the cache switched off).
 *
 * Input 0 runs through process_element (the SDK walks the batch); input 1
 * through process_batch2, which walks the batch itself and scopes each
 * record with weir_ctx_set_key (the cache then finds the key by lookup).
 * Both run `tally` per record, by the record's value:
 *   "reset"      clears `count`
 *   "clear-last" clears `last`
 *   "peek"       reads `count` of the key "outside" (never a batch key here)
 *   "outside"    adds one to `count` of "outside"
 *   "raw"        sets `last` to "raw" and emits nothing: a write-only record
 *   "swap"       adds one to `count` of "k1", then of "k2", through one key
 *                buffer rewritten in place (weir_ctx_set_key only once)
 *   "boom"       fails the call
 *   otherwise    adds one to `count`, sets `last` to the value, appends it
 *                to `seen` and registers a timer at timestamp + 5; "k0" also
 *                sets `count` of the key "k0" (explicitly) to 100
 * and then (but for "raw") emits "{count}|{last}" ("-" for none), at the
 * record's timestamp. On a timer it emits "t:{count}|{last}|{seen}" (seen:
 * the list's length) and doubles `count`.
 */
#include "weir.h"

enum { COUNT, LAST, SEEN };

static const weir_state_descriptor_t STATES[] = {
    [COUNT] = WEIR_VALUE_STATE("count"),
    [LAST] = WEIR_VALUE_STATE("last"),
    [SEEN] = WEIR_LIST_STATE("seen"),
};

/* Appends `count` (or "-") to the open record. */
static bool append_count(weir_ctx_t *ctx, weir_batch_builder_t *out) {
    uint64_t n;
    int found = weir_value_get_u64(ctx, COUNT, &n);
    if (found < 0) {
        return false;
    }
    if (found) {
        weir_builder_append_u64(out, n);
    } else {
        weir_builder_append_byte(out, '-');
    }
    return true;
}

/* Appends `last` (or "-") to the open record. */
static bool append_last(weir_ctx_t *ctx, weir_batch_builder_t *out) {
    weir_buf_t last;
    int found = weir_value_get(ctx, LAST, &last);
    if (found < 0) {
        return false;
    }
    if (found) {
        weir_builder_append(out, weir_buf_bytes(&last));
        weir_buf_free(&last);
    } else {
        weir_builder_append_byte(out, '-');
    }
    return true;
}

/* Adds `delta` to `count` of the context's key. */
static bool add(weir_ctx_t *ctx, uint64_t delta) {
    uint64_t n = 0;
    int found = weir_value_get_u64(ctx, COUNT, &n);
    return found >= 0 && weir_value_set_u64(ctx, COUNT, n + delta);
}

static bool tally(const weir_record_t *record, weir_ctx_t *ctx) {
    weir_bytes_t op = record->value;
    weir_bytes_t key = record->key;
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    if (weir_bytes_eq_cstr(op, "boom")) {
        return weir_fail("boom");
    } else if (weir_bytes_eq_cstr(op, "reset")) {
        if (!weir_state_clear(ctx, COUNT)) {
            return false;
        }
    } else if (weir_bytes_eq_cstr(op, "clear-last")) {
        if (!weir_state_clear(ctx, LAST)) {
            return false;
        }
    } else if (weir_bytes_eq_cstr(op, "raw")) {
        return weir_value_set(ctx, LAST, weir_cstr("raw"));
    } else if (weir_bytes_eq_cstr(op, "peek")) {
        weir_builder_begin(out, record->timestamp, &key);
        weir_builder_append(out, weir_cstr("peek:"));
        weir_ctx_set_key(ctx, weir_cstr("outside"));
        bool ok = append_count(ctx, out);
        weir_ctx_set_key(ctx, key);
        weir_builder_end(out);
        if (!ok) {
            return false;
        }
    } else if (weir_bytes_eq_cstr(op, "swap")) {
        /* The same pointer and length, other bytes: the state calls must
         * follow the bytes, as the host's would. */
        static uint8_t buffer[2] = {'k', '1'};
        buffer[1] = '1';
        weir_ctx_set_key(ctx, (weir_bytes_t){buffer, 2});
        bool ok = add(ctx, 1);
        buffer[1] = '2';
        ok = ok && add(ctx, 1);
        weir_ctx_set_key(ctx, key);
        if (!ok) {
            return false;
        }
    } else if (weir_bytes_eq_cstr(op, "outside")) {
        weir_ctx_set_key(ctx, weir_cstr("outside"));
        bool ok = add(ctx, 1);
        weir_ctx_set_key(ctx, key);
        if (!ok) {
            return false;
        }
    } else {
        if (!add(ctx, 1) || !weir_value_set(ctx, LAST, op) || !weir_list_add(ctx, SEEN, op) ||
            !weir_register_event_timer(ctx, record->timestamp + 5)) {
            return false;
        }
        if (weir_bytes_eq_cstr(op, "k0")) {
            weir_ctx_set_key(ctx, weir_cstr("k0"));
            bool ok = weir_value_set_u64(ctx, COUNT, 100);
            weir_ctx_set_key(ctx, key);
            if (!ok) {
                return false;
            }
        }
    }
    weir_builder_begin(out, record->timestamp, &key);
    bool ok = append_count(ctx, out);
    weir_builder_append_byte(out, '|');
    ok = ok && append_last(ctx, out);
    weir_builder_end(out);
    return ok;
}

/* Input 1: the batch walked here, each record's key set explicitly. */
static bool tally_batch(const weir_batch_view_t *batch, weir_ctx_t *ctx) {
    weir_batch_iter_t it = weir_batch_iter(batch);
    weir_record_t record;
    int more;
    while ((more = weir_batch_next(&it, &record)) == 1) {
        if (!record.has_key) {
            return weir_failf("record %zu of input 1 has no key", it.index - 1);
        }
        weir_ctx_set_key(ctx, record.key);
        if (!tally(&record, ctx)) {
            return false;
        }
    }
    return more == 0 || weir_fail("malformed batch on input 1");
}

static bool tally_on_timer(int64_t time, weir_ctx_t *ctx) {
    weir_bytes_t key = weir_ctx_key(ctx);
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_buf_list_t seen;
    if (!weir_list_get(ctx, SEEN, &seen)) {
        return false;
    }
    size_t len = seen.len;
    weir_buf_list_free(&seen);
    weir_builder_begin(out, time, &key);
    weir_builder_append(out, weir_cstr("t:"));
    bool ok = append_count(ctx, out);
    weir_builder_append_byte(out, '|');
    ok = ok && append_last(ctx, out);
    weir_builder_append_byte(out, '|');
    weir_builder_append_u64(out, len);
    weir_builder_end(out);
    uint64_t n;
    int found = ok ? weir_value_get_u64(ctx, COUNT, &n) : -1;
    return found == 0 || (found == 1 && weir_value_set_u64(ctx, COUNT, n * 2));
}

const weir_operator_t weir_operator = {
    .name = "tally",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .process_element = tally,
    .process_batch2 = tally_batch,
    .on_timer = tally_on_timer,
};
