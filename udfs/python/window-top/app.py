"""`window-top` in Python: a process-window function.

The module of a window operator (an ``[[operator]]`` with a ``window`` table
and ``module``): when a window fires, it gets all the window's records at
once and emits one record, key = the window's key, value compact JSON with
the record count and the (up to) three largest values, largest first,
duplicates kept:
``{"key":"a","start":0,"end":10,"count":4,"top":[5,5,3]}``.
Values are decimal integers as text (surrounding whitespace allowed); the
host gives the record the timestamp ``end - 1``.
"""

import json

from weir_sdk import Error, ProcessWindowFunction, export

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def parse_value(value):
    """The record's value as an i64: a decimal integer, whitespace around it allowed."""
    text = value.decode("utf-8", "replace").strip()
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not (digits.isascii() and digits.isdigit()):  # also refuses "", "1_000", "٣"
        raise Error(f"window-top: the value `{text}` is not a decimal integer")
    n = int(text)
    if not _I64_MIN <= n <= _I64_MAX:
        raise Error(f"window-top: the value `{text}` is out of the 64-bit range")
    return n


class WindowTop(ProcessWindowFunction):
    def process_window(self, key, window, records, out):
        top = sorted((parse_value(r.value) for r in records), reverse=True)[:3]
        value = (
            f'{{"key":{json.dumps(key.decode("utf-8", "replace"), ensure_ascii=False)},'
            f'"start":{window.start},"end":{window.end},"count":{len(records)},'
            f'"top":[{",".join(map(str, top))}]}}'
        )
        out.emit(key, value, window.max_timestamp())


Operator = export(WindowTop)
