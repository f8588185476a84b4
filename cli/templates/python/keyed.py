"""`{{name}}`: a keyed operator that counts records per key in value state
and emits "{key}\\t{count}" for every record.

`weir build` builds this module (`app`, which binds `Operator`) into a
component with componentize-py; `python3 -m unittest` runs test_app.py
natively.
"""

from weir_sdk import U64, KeyedProcessFunction, ValueState, export


class Counter(KeyedProcessFunction):
    NAME = "{{id}}"
    # Declared up front so the host creates the storage; a u64 is stored as
    # 8 bytes little-endian, as every Weir SDK stores it.
    count = ValueState("count", U64)

    def process_element(self, record, ctx):
        count = (self.count.get(ctx) or 0) + 1  # scoped to ctx.key
        self.count.set(ctx, count)
        ctx.emit(ctx.key, b"%s\t%d" % (ctx.key, count), record.timestamp)


Operator = export(Counter)
