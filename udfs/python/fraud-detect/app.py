"""`fraud-detect` in Python: Flink's fraud-detection walkthrough.

The same operator as udfs/fraud-detect (Rust), with the same output byte for
byte. Input: keyed by account, value `{"account":"acct-17","amount":12.34}`,
timestamp = event time in ms. Per account, in stream order: if a previous
*small* transaction (amount < 1.00) at `t0` set the flag, this transaction's
amount is above 500.00 and `ts - t0 <= 60_000`, emit an alert. Then clear the
flag. Then, if this transaction is small, set the flag to `ts`. The flag is
the value state `small-ts` (i64, little-endian, as in Rust).

Alert: key = account, timestamp = ts, value
`{"account":"…","small_ts":…,"large_ts":…,"amount":…}` with the amount
printed as Rust prints an f64 (`rust_f64`).
"""

import json

from weir_sdk import I64, Error, KeyedProcessFunction, ValueState, export

#: Below this a transaction is small.
SMALL_AMOUNT = 1.00
#: Above this a transaction is large.
LARGE_AMOUNT = 500.00
#: How long after a small transaction a large one raises an alert.
WINDOW_MS = 60_000


def rust_f64(x):
    """`x` as Rust's `Display` for f64 prints it: the shortest digits that
    round-trip (as Python's repr), never in exponent form, no `.0` on whole
    numbers."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    text = repr(x)
    if "e" in text or "E" in text:
        from decimal import Decimal  # rare: imported here, not into every component

        text = format(Decimal(text), "f")
    if text.endswith(".0"):
        text = text[:-2]
    return text


class FraudDetect(KeyedProcessFunction):
    small_ts = ValueState("small-ts", I64)

    def process_element(self, record, ctx):
        try:
            amount = float(json.loads(record.value)["amount"])
        except (ValueError, KeyError, TypeError) as e:
            raise Error(f"bad transaction {record.value_str()!r}: {e}") from None
        ts = record.timestamp
        small_ts = self.small_ts.get(ctx)
        if small_ts is not None:
            if amount > LARGE_AMOUNT and ts - small_ts <= WINDOW_MS:
                account = json.dumps(ctx.key.decode("utf-8", "replace"), ensure_ascii=False)
                alert = (
                    f'{{"account":{account},"small_ts":{small_ts},'
                    f'"large_ts":{ts},"amount":{rust_f64(amount)}}}'
                )
                ctx.emit(ctx.key, alert, ts)
            self.small_ts.clear(ctx)
        if amount < SMALL_AMOUNT:
            self.small_ts.set(ctx, ts)


Operator = export(FraudDetect)
