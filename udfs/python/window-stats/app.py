"""`window-stats` in Python: an aggregate window function.

The module of a window operator (an ``[[operator]]`` with a ``window`` table
and ``module``): per key and window, the count, sum, min and max of the
records' values (decimal integers as text, surrounding whitespace allowed).
The result, emitted by the host with the window's key and timestamp
``end - 1``, is compact JSON:
``{"key":"a","start":0,"end":10,"count":2,"sum":7,"min":3,"max":4}``.

The accumulator crosses the boundary as 32 bytes (four little-endian i64),
through the ``ACCUMULATOR`` codec.
"""

import json
import struct

from weir_sdk import AggregateFunction, DecodeError, EncodeError, Error, export

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


class Stats:
    """The accumulator's codec: ``(count, sum, min, max)`` as four i64."""

    _layout = struct.Struct("<4q")

    def encode(self, acc):
        try:
            return self._layout.pack(*acc)
        except struct.error as e:  # a sum past the i64 range
            raise EncodeError(f"window-stats accumulator {acc}: {e}") from None

    def decode(self, data):
        if len(data) != self._layout.size:
            raise DecodeError("window-stats accumulator", f"expected 32 bytes, got {len(data)}")
        return self._layout.unpack(data)


def parse_value(value):
    """The record's value as an i64: a decimal integer, whitespace around it allowed."""
    text = value.decode("utf-8", "replace").strip()
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):  # also refuses "", "1_000", "٣"
        raise Error(f"window-stats: the value `{text}` is not a decimal integer")
    n = int(text)
    if not _I64_MIN <= n <= _I64_MAX:
        raise Error(f"window-stats: the value `{text}` is out of the 64-bit range")
    return n


class WindowStats(AggregateFunction):
    ACCUMULATOR = Stats()

    def create_accumulator(self):
        return (0, 0, _I64_MAX, _I64_MIN)

    def add(self, acc, record):
        n = parse_value(record.value)
        count, total, lo, hi = acc
        return (count + 1, total + n, min(lo, n), max(hi, n))

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1], min(a[2], b[2]), max(a[3], b[3]))

    def get_result(self, key, window, acc):
        count, total, lo, hi = acc
        key = json.dumps(key.decode("utf-8", "replace"), ensure_ascii=False)
        return (
            f'{{"key":{key},"start":{window.start},"end":{window.end},'
            f'"count":{count},"sum":{total},"min":{lo},"max":{hi}}}'
        )


Operator = export(WindowStats)
