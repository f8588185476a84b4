"""`word-count` in Python: counts records per key (the word).

The same operator as udfs/word-count (Rust), byte for byte. Value state
`count` (u64, little-endian: the encoding every Weir SDK shares, so state
the Rust counter wrote reads here). Config `emit`: "final" (default)
registers an event-time timer at MAX_TIMESTAMP the first time a key is seen
and emits the count when it fires (the host's final watermark at the end of
bounded input); "updates" emits the new count on every record. Output:
key = the word, value = "{word}\\t{count}".
"""

from weir_sdk import MAX_TIMESTAMP, U64, Error, KeyedProcessFunction, ValueState, export


class WordCount(KeyedProcessFunction):
    count = ValueState("count", U64)

    def open(self, ctx):
        emit = ctx.config.get_str("emit", "final")
        if emit not in ("final", "updates"):
            raise Error(f"config `emit`: expected `final` or `updates`, got `{emit}`")
        self.emit_updates = emit == "updates"

    def process_element(self, record, ctx):
        previous = self.count.get(ctx)
        count = 1 if previous is None else previous + 1
        self.count.set(ctx, count)
        if self.emit_updates:
            ctx.emit(ctx.key, b"%s\t%d" % (ctx.key, count), record.timestamp)
        elif previous is None:
            ctx.register_event_time_timer(MAX_TIMESTAMP)

    def on_timer(self, time, ctx):
        count = self.count.get(ctx)
        if count is not None:
            ctx.emit(ctx.key, b"%s\t%d" % (ctx.key, count), time)


Operator = export(WordCount)
