"""`sequence-check` in Python: the exactly-once checker of Weir's failure
tests, as Flink's ``SemanticsCheckMapper``.

The same operator as udfs/sequence-check (Rust), byte for byte. Input: a
keyed sequence generator's records (``kind = "sequence"``, ``keys = K``):
record ``n`` has key ``n % K`` and value ``n`` (possibly padded with ``.``).
Each key's values must advance by exactly ``step`` (config, = K) starting at
the key itself. The last value per key is the value state ``last`` (u64,
little-endian, as in Rust). A record that does not follow it (lost,
duplicated or reordered by a failure) goes to the side output ``alerts`` as
``"key <k>: expected <e>, got <n>"``, keyed by the key, with the record's
timestamp. Every record also passes through to the main output unchanged.
"""

from weir_sdk import U64, Error, KeyedProcessFunction, ValueState, export

#: The largest u64: what a key that is no number expects first (Rust's
#: ``unwrap_or(u64::MAX)``), and where ``last + step`` wraps, as in the Rust
#: operator's release build.
U64_MAX = (1 << 64) - 1


def parse_u64(data):
    """``data`` (bytes or str) as Rust's ``str::parse::<u64>`` reads it: ASCII
    digits after an optional ``+``, at most ``u64::MAX``; else None."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    digits = data[1:] if data[:1] == b"+" else data
    if not digits.isdigit():  # bytes.isdigit: ASCII digits only; False when empty
        return None
    n = int(digits)
    return n if n <= U64_MAX else None


def number(value):
    """The sequence number of a record's value: the digits before the first ``.``."""
    end = value.find(b".")
    return parse_u64(value if end < 0 else value[:end])


def rust_debug(text):
    """``text`` quoted as Rust's ``{:?}`` prints a str (its escapes of
    quotes, backslashes and control characters)."""
    escapes = {"\0": "\\0", "\t": "\\t", "\r": "\\r", "\n": "\\n", "\\": "\\\\", '"': '\\"'}
    out = []
    for c in text:
        if c in escapes:
            out.append(escapes[c])
        elif ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0:
            out.append("\\u{%x}" % ord(c))
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


class SequenceCheck(KeyedProcessFunction):
    last = ValueState("last", U64)

    def open(self, ctx):
        step = parse_u64(ctx.config.require_str("step"))
        if not step:  # None, or 0
            raise Error("config `step`: expected a positive integer")
        self.step = step

    def process_element(self, record, ctx):
        key = ctx.key
        n = number(record.value)
        if n is None:
            raise Error(f"not a sequence number: {rust_debug(record.value_str())}")
        last = self.last.get(ctx)
        if last is not None:
            expected = (last + self.step) & U64_MAX
        else:
            # The first value of key k is k itself.
            first = parse_u64(key)
            expected = U64_MAX if first is None else first
        if n != expected:
            alert = f"key {key.decode('utf-8', 'replace')}: expected {expected}, got {n}"
            ctx.emit_to("alerts", key, alert, record.timestamp)
        self.last.set(ctx, n)
        ctx.collect(record)


Operator = export(SequenceCheck)
