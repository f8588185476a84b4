/*
 * fraud-detect, in C: Flink's fraud-detection walkthrough; the port of
 * udfs/fraud-detect (Rust), whose alerts it emits byte for byte.
 *
 * Input: keyed by account (the host puts the account in the record key),
 * value {"account":"acct-17","amount":12.34}, timestamp = event time in ms.
 * Per account, in stream order: if a previous *small* transaction (amount <
 * 1.00) at t0 set the flag, this transaction's amount is above 500.00 and
 * ts - t0 <= 60 000, emit an alert. Then clear the flag. Then, if this
 * transaction is small, set the flag to ts. The flag is the value state
 * `small-ts` (i64, little-endian: the shared encoding, so a checkpoint of
 * the Rust detector restores here).
 *
 * Alert: key = account, timestamp = ts, value
 * {"account":"…","small_ts":…,"large_ts":…,"amount":…}: the account as
 * serde_json writes a string (invalid UTF-8 as U+FFFD), the amount as
 * Rust's `{}` prints an f64 (the shortest digits that read back to the same
 * double, never an exponent: 501.0 is "501", 1e21 is
 * "1000000000000000000000").
 *
 * The value is read as serde_json reads it into Rust's
 * `struct Transaction { amount: f64 }`: a JSON object whose `amount` is a
 * number (other members ignored, a duplicate `amount` an error), or an
 * array holding just the amount; anything else fails the call with
 * `bad transaction "…": …` (the reasons are worded here, not serde's).
 * The number is read with strtod, correctly rounded. serde_json's default
 * float parsing is exact up to 15 significant digits with a decimal
 * exponent of at most 22 either way (every amount of money); beyond that
 * the two may differ in the last bit.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weir.h"

/* Below this a transaction is small. */
#define SMALL_AMOUNT 1.00
/* Above this a transaction is large. */
#define LARGE_AMOUNT 500.00
/* How long after a small transaction a large one raises an alert. */
#define WINDOW_MS 60000

/* Deeper JSON than this is refused rather than walked (serde_json's limit). */
#define MAX_DEPTH 128
/* The longest number read: longer ones are refused (no amount needs it). */
#define MAX_NUMBER 400

enum { SMALL_TS };

static const weir_state_descriptor_t STATES[] = {
    [SMALL_TS] = WEIR_VALUE_STATE("small-ts"),
};

/* ------------------------------------------------------------ the amount */

/* A JSON text being read: where, and the first problem found. */
typedef struct {
    const uint8_t *p, *end;
    const char *problem;
} json_t;

static bool problem(json_t *j, const char *what) {
    if (j->problem == NULL) {
        j->problem = what;
    }
    return false;
}

static void skip_space(json_t *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) {
        j->p++;
    }
}

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* Reads a string (at its opening quote); `*is_amount` says whether its text,
 * escapes decoded, is "amount". */
static bool read_string(json_t *j, bool *is_amount) {
    static const char amount[] = "amount";
    size_t n = 0; /* decoded bytes so far, while they match `amount` */
    bool matches = true;
    j->p++;
    for (;;) {
        if (j->p == j->end) {
            return problem(j, "a string without its closing quote");
        }
        uint8_t c = *j->p++;
        if (c == '"') {
            *is_amount = matches && n == sizeof(amount) - 1;
            return true;
        }
        if (c < 0x20) {
            return problem(j, "a control character in a string");
        }
        if (c == '\\') {
            if (j->p == j->end) {
                return problem(j, "a string without its closing quote");
            }
            uint8_t e = *j->p++;
            if (e == 'u') {
                if (j->end - j->p < 4 || !is_hex(j->p[0]) || !is_hex(j->p[1]) || !is_hex(j->p[2]) ||
                    !is_hex(j->p[3])) {
                    return problem(j, "a bad \\u escape");
                }
                char hex[5] = {(char)j->p[0], (char)j->p[1], (char)j->p[2], (char)j->p[3], '\0'};
                unsigned long u = strtoul(hex, NULL, 16);
                c = u < 0x80 ? (uint8_t)u : 0xFF; /* 0xFF: no letter of "amount" */
                j->p += 4;
            } else if (e != '\0' && strchr("\"\\/bfnrt", e) != NULL) {
                c = e == '"' || e == '\\' || e == '/' ? e : 0xFF;
            } else {
                return problem(j, "a bad escape in a string");
            }
        }
        matches = matches && n < sizeof(amount) - 1 && c == (uint8_t)amount[n];
        n++;
    }
}

/* Reads a number: JSON's grammar, then strtod. */
static bool read_number(json_t *j, double *value) {
    const uint8_t *start = j->p;
    if (j->p < j->end && *j->p == '-') {
        j->p++;
    }
    if (j->p == j->end || !is_digit(*j->p)) {
        return problem(j, "a bad number");
    }
    if (*j->p == '0') {
        j->p++;
    } else {
        while (j->p < j->end && is_digit(*j->p)) {
            j->p++;
        }
    }
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (j->p == j->end || !is_digit(*j->p)) {
            return problem(j, "a bad number");
        }
        while (j->p < j->end && is_digit(*j->p)) {
            j->p++;
        }
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) {
            j->p++;
        }
        if (j->p == j->end || !is_digit(*j->p)) {
            return problem(j, "a bad number");
        }
        while (j->p < j->end && is_digit(*j->p)) {
            j->p++;
        }
    }
    size_t len = (size_t)(j->p - start);
    if (len > MAX_NUMBER) {
        return problem(j, "a number too long");
    }
    char text[MAX_NUMBER + 1];
    memcpy(text, start, len);
    text[len] = '\0';
    *value = strtod(text, NULL);
    if (isinf(*value)) {
        return problem(j, "a number out of range");
    }
    return true;
}

static bool read_literal(json_t *j, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) {
        return problem(j, "not JSON");
    }
    j->p += n;
    return true;
}

static bool skip_value(json_t *j, int depth);

/* Reads the members of an object or the elements of an array (at its
 * opening bracket), skipping their values. */
static bool skip_container(json_t *j, int depth) {
    uint8_t close = *j->p == '{' ? '}' : ']';
    j->p++;
    skip_space(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return true;
    }
    for (;;) {
        skip_space(j);
        if (close == '}') {
            bool ignored;
            if (j->p == j->end || *j->p != '"' || !read_string(j, &ignored)) {
                return problem(j, "an object member without a name");
            }
            skip_space(j);
            if (j->p == j->end || *j->p++ != ':') {
                return problem(j, "an object member without a colon");
            }
        }
        if (!skip_value(j, depth + 1)) {
            return false;
        }
        skip_space(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
        } else if (j->p < j->end && *j->p == close) {
            j->p++;
            return true;
        } else {
            return problem(j, "a list without its comma or closing bracket");
        }
    }
}

static bool skip_value(json_t *j, int depth) {
    skip_space(j);
    if (depth > MAX_DEPTH) {
        return problem(j, "nested too deep");
    }
    if (j->p == j->end) {
        return problem(j, "not JSON");
    }
    double number;
    bool ignored;
    switch (*j->p) {
    case '{':
    case '[': return skip_container(j, depth);
    case '"': return read_string(j, &ignored);
    case 't': return read_literal(j, "true");
    case 'f': return read_literal(j, "false");
    case 'n': return read_literal(j, "null");
    default: return read_number(j, &number);
    }
}

/* Reads the amount of a transaction, as serde_json reads `Transaction`. */
static bool read_amount(json_t *j, double *amount) {
    skip_space(j);
    if (j->p < j->end && *j->p == '[') {
        /* A struct as a sequence: its one field, the amount. */
        j->p++;
        skip_space(j);
        if (j->p == j->end || *j->p == ']') {
            return problem(j, "an array without the amount");
        }
        if (!(*j->p == '-' || is_digit(*j->p))) {
            return problem(j, "an amount that is not a number");
        }
        if (!read_number(j, amount)) {
            return false;
        }
        skip_space(j);
        if (j->p == j->end || *j->p++ != ']') {
            return problem(j, "an array with more than the amount");
        }
    } else if (j->p < j->end && *j->p == '{') {
        bool found = false;
        j->p++;
        skip_space(j);
        bool more = j->p < j->end && *j->p != '}';
        while (more) {
            skip_space(j);
            bool is_amount;
            if (j->p == j->end || *j->p != '"' || !read_string(j, &is_amount)) {
                return problem(j, "an object member without a name");
            }
            skip_space(j);
            if (j->p == j->end || *j->p++ != ':') {
                return problem(j, "an object member without a colon");
            }
            skip_space(j);
            if (is_amount) {
                if (found) {
                    return problem(j, "duplicate field `amount`");
                }
                if (j->p == j->end || !(*j->p == '-' || is_digit(*j->p))) {
                    return problem(j, "an amount that is not a number");
                }
                if (!read_number(j, amount)) {
                    return false;
                }
                found = true;
            } else if (!skip_value(j, 1)) {
                return false;
            }
            skip_space(j);
            more = j->p < j->end && *j->p == ',';
            j->p += more ? 1 : 0;
        }
        if (j->p == j->end || *j->p++ != '}') {
            return problem(j, "an object without its comma or closing brace");
        }
        if (!found) {
            return problem(j, "missing field `amount`");
        }
    } else {
        return problem(j, "not a JSON object");
    }
    skip_space(j);
    return j->p == j->end || problem(j, "trailing characters");
}

/* Fails the call with `bad transaction "VALUE": PROBLEM`, the value quoted
 * as Rust's `{:?}` quotes a string (the common escapes; other control
 * characters as \u{..}; invalid UTF-8 as U+FFFD). */
static bool bad_transaction(weir_bytes_t value, const char *why) {
    weir_batch_builder_t text = WEIR_BATCH_BUILDER_INIT;
    weir_batch_builder_t lossy = WEIR_BATCH_BUILDER_INIT;
    weir_builder_begin(&lossy, 0, NULL);
    weir_builder_append_utf8_lossy(&lossy, value);
    weir_builder_end(&lossy);
    weir_builder_begin(&text, 0, NULL);
    for (size_t i = 0; i < lossy.data_len; i++) {
        uint8_t c = lossy.data[i];
        char escaped[8] = {(char)c, '\0'};
        size_t len = 1;
        switch (c) {
        case '"': strcpy(escaped, "\\\""); break;
        case '\\': strcpy(escaped, "\\\\"); break;
        case '\n': strcpy(escaped, "\\n"); break;
        case '\r': strcpy(escaped, "\\r"); break;
        case '\t': strcpy(escaped, "\\t"); break;
        case '\0': strcpy(escaped, "\\0"); break;
        default:
            if (c < 0x20 || c == 0x7f) {
                snprintf(escaped, sizeof(escaped), "\\u{%x}", c);
            }
        }
        if (escaped[0] == '\\') {
            len = strlen(escaped);
        }
        weir_builder_append(&text, (weir_bytes_t){(const uint8_t *)escaped, len});
    }
    weir_builder_append_byte(&text, '\0');
    weir_builder_end(&text);
    bool ok = weir_failf("bad transaction \"%s\": %s", (const char *)text.data, why);
    weir_builder_free(&text);
    weir_builder_free(&lossy);
    return ok;
}

/* ------------------------------------------------------------ the alert */

/* Appends `x` as Rust's `{}` prints an f64: the shortest digits that read
 * back to `x` (the nearest of that many digits), in plain decimal. */
static void append_rust_f64(weir_batch_builder_t *out, double x) {
    if (isnan(x)) {
        weir_builder_append(out, weir_cstr("NaN"));
        return;
    }
    if (isinf(x)) {
        weir_builder_append(out, weir_cstr(x > 0 ? "inf" : "-inf"));
        return;
    }
    if (signbit(x)) {
        weir_builder_append_byte(out, '-');
        x = -x;
    }
    if (x == 0) {
        weir_builder_append_byte(out, '0');
        return;
    }
    char e[40];
    for (int precision = 0; precision < 17; precision++) {
        snprintf(e, sizeof(e), "%.*e", precision, x);
        if (strtod(e, NULL) == x) {
            break;
        }
    }
    /* e is "D[.DDD]e[+-]XX": the digits, and where the point goes in them. */
    char digits[24];
    size_t n = 0;
    const char *c = e;
    for (; *c != 'e'; c++) {
        if (*c != '.') {
            digits[n++] = *c;
        }
    }
    long point = strtol(c + 1, NULL, 10) + 1;
    if (point <= 0) {
        weir_builder_append(out, weir_cstr("0."));
        for (long i = 0; i < -point; i++) {
            weir_builder_append_byte(out, '0');
        }
        weir_builder_append(out, (weir_bytes_t){(const uint8_t *)digits, n});
    } else if ((size_t)point >= n) {
        weir_builder_append(out, (weir_bytes_t){(const uint8_t *)digits, n});
        for (size_t i = n; i < (size_t)point; i++) {
            weir_builder_append_byte(out, '0');
        }
    } else {
        weir_builder_append(out, (weir_bytes_t){(const uint8_t *)digits, (size_t)point});
        weir_builder_append_byte(out, '.');
        weir_builder_append(out, (weir_bytes_t){(const uint8_t *)digits + point, n - (size_t)point});
    }
}

static void emit_alert(weir_ctx_t *ctx, int64_t small_ts, int64_t ts, double amount) {
    weir_bytes_t account = weir_ctx_key(ctx);
    weir_batch_builder_t *out = weir_ctx_out(ctx);
    weir_builder_begin(out, ts, &account);
    weir_builder_append(out, weir_cstr("{\"account\":"));
    weir_builder_append_json_string(out, account);
    weir_builder_append(out, weir_cstr(",\"small_ts\":"));
    weir_builder_append_i64(out, small_ts);
    weir_builder_append(out, weir_cstr(",\"large_ts\":"));
    weir_builder_append_i64(out, ts);
    weir_builder_append(out, weir_cstr(",\"amount\":"));
    append_rust_f64(out, amount);
    weir_builder_append_byte(out, '}');
    weir_builder_end(out);
}

/* ---------------------------------------------------------- the detector */

static bool detect(const weir_record_t *record, weir_ctx_t *ctx) {
    json_t json = {record->value.ptr, record->value.ptr + record->value.len, NULL};
    double amount = 0;
    if (!read_amount(&json, &amount)) {
        return bad_transaction(record->value, json.problem);
    }
    int64_t ts = record->timestamp;
    int64_t small_ts;
    int found = weir_value_get_i64(ctx, SMALL_TS, &small_ts);
    if (found < 0) {
        return false;
    }
    if (found) {
        /* Wrapping, as Rust's release build subtracts. */
        int64_t since = (int64_t)((uint64_t)ts - (uint64_t)small_ts);
        if (amount > LARGE_AMOUNT && since <= WINDOW_MS) {
            emit_alert(ctx, small_ts, ts, amount);
        }
        if (!weir_state_clear(ctx, SMALL_TS)) {
            return false;
        }
    }
    if (amount < SMALL_AMOUNT) {
        return weir_value_set_i64(ctx, SMALL_TS, ts);
    }
    return true;
}

const weir_operator_t weir_operator = {
    .name = "fraud-detect",
    .version = "0.1.0",
    .keyed = true,
    .states = STATES,
    .num_states = WEIR_COUNT(STATES),
    .process_element = detect,
};
