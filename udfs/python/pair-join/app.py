"""`pair-join` in Python: a keyed co-process function (two inputs).

The twin of udfs/pair-join (Rust): every left record with every right
record of its key, each pair emitted once when its later record arrives,
value ``{"key":…,"left":…,"right":…}`` with the values embedded as they are
(the inputs are JSON). Each side waits in a list state.
"""

import json

from weir_sdk import BYTES, KeyedCoProcessFunction, ListState, export


class PairJoin(KeyedCoProcessFunction):
    left = ListState("left", BYTES)
    right = ListState("right", BYTES)

    def _arrive(self, record, ctx, mine, other, is_left):
        key = json.dumps(ctx.key.decode("utf-8", "replace")).encode()
        for o in other.get(ctx):
            l, r = (record.value, o) if is_left else (o, record.value)
            ctx.emit(ctx.key, b'{"key":%s,"left":%s,"right":%s}' % (key, l, r), record.timestamp)
        mine.add(ctx, record.value)

    def process_element1(self, record, ctx):
        self._arrive(record, ctx, self.left, self.right, True)

    def process_element2(self, record, ctx):
        self._arrive(record, ctx, self.right, self.left, False)


Operator = export(PairJoin)
