"""Tests of weir_sdk, natively: `python3 -m unittest discover -s sdk/python/tests`.

They drive operators through the same export a component uses (via
weir_sdk.testing.Harness), so the batch packing, the state encoding and the
failure messages are what the host sees.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import weir_sdk  # noqa: E402
from weir_sdk import (  # noqa: E402
    BOOL,
    BYTES,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    MAX_TIMESTAMP,
    STR,
    U8,
    U16,
    U32,
    U64,
    UNIT,
    Config,
    DecodeError,
    Error,
    FilterFunction,
    KeyedProcessFunction,
    ListState,
    MapState,
    Record,
    ValueState,
)
from weir_sdk.testing import Harness, OperatorFailed  # noqa: E402


class CodecTest(unittest.TestCase):
    """The table of wit/README.md "State value encoding", as sdk/src/codec.rs tests it."""

    def round_trip(self, codec, value, data):
        self.assertEqual(codec.encode(value), data, f"encoding of {value!r}")
        self.assertEqual(codec.decode(data), value)

    def test_encodings_match_the_documented_table(self):
        self.round_trip(U8, 0x12, b"\x12")
        self.round_trip(U16, 0x1234, b"\x34\x12")
        self.round_trip(U32, 0x12345678, b"\x78\x56\x34\x12")
        self.round_trip(U64, 1, b"\x01\0\0\0\0\0\0\0")
        self.round_trip(I8, -1, b"\xff")
        self.round_trip(I16, -2, b"\xfe\xff")
        self.round_trip(I32, -1, b"\xff" * 4)
        self.round_trip(I64, -(1 << 63), b"\0\0\0\0\0\0\0\x80")
        self.round_trip(F32, 1.0, b"\0\0\x80\x3f")
        self.round_trip(F64, 1.0, b"\0\0\0\0\0\0\xf0\x3f")
        self.round_trip(BOOL, True, b"\x01")
        self.round_trip(BOOL, False, b"\x00")
        self.round_trip(STR, "héllo", "héllo".encode())
        self.round_trip(BYTES, b"\x00\xff", b"\x00\xff")
        self.round_trip(UNIT, None, b"")

    def test_bad_bytes_are_errors_with_the_rust_messages(self):
        with self.assertRaises(DecodeError) as e:
            U64.decode(b"\x01\x02\x03")
        self.assertEqual(str(e.exception), "cannot decode u64: expected 8 bytes, got 3")
        with self.assertRaises(DecodeError) as e:
            BOOL.decode(b"\x02")
        self.assertEqual(str(e.exception), "cannot decode bool: invalid byte 2")
        for codec, data in [(BOOL, b""), (STR, b"\xff\xfe"), (UNIT, b"\0"), (F64, b"\0" * 4)]:
            with self.assertRaises(DecodeError):
                codec.decode(data)

    def test_out_of_range_values_do_not_encode(self):
        with self.assertRaises(weir_sdk.EncodeError):
            U64.encode(-1)
        with self.assertRaises(weir_sdk.EncodeError):
            I8.encode(128)


class ConfigTest(unittest.TestCase):
    def test_typed_getters_parse_toml_scalars(self):
        c = Config(
            [("b", "true"), ("n", "1_000"), ("h", "0xff"), ("neg", "-5"), ("f", "2.5"),
             ("i", "3"), ("s", "hello"), ("t", '{"a":[1,2]}')]
        )  # fmt: skip
        self.assertIs(c.get_bool("b"), True)
        self.assertEqual(c.get_int("n"), 1000)
        self.assertEqual(c.get_int("h"), 255)
        self.assertEqual(c.get_int("neg"), -5)
        self.assertEqual(c.get_float("f"), 2.5)
        self.assertEqual(c.get_float("i"), 3.0)
        self.assertEqual(c.get_str("s"), "hello")
        self.assertEqual(c.get_json("t"), {"a": [1, 2]})
        self.assertIsNone(c.get_bool("missing"))
        self.assertEqual(c.get_int("missing", 7), 7)

    def test_wrong_types_and_missing_keys_are_clear_errors(self):
        c = Config([("b", "yes"), ("n", "1.5")])
        with self.assertRaises(Error) as e:
            c.get_bool("b")
        self.assertEqual(str(e.exception), "config `b`: expected a bool (true or false), got `yes`")
        with self.assertRaises(Error) as e:
            c.get_int("n")
        self.assertEqual(str(e.exception), "config `n`: expected an integer, got `1.5`")
        with self.assertRaises(Error) as e:
            c.require_str("contains")
        self.assertEqual(str(e.exception), "config `contains` is required but missing")


@weir_sdk.map
def shout(record):
    return record.with_value(record.value.upper())


@weir_sdk.flat_map
def split(record, out):
    for word in record.value.split():
        out.emit(word, word, record.timestamp)
        if word.isdigit():
            out.output("numbers", Record(None, word, record.timestamp))


class Contains(FilterFunction):
    def open(self, ctx):
        self.needle = ctx.config.require_str("contains").encode()

    def filter(self, record):
        return self.needle in record.value


class StatelessTest(unittest.TestCase):
    def test_map_keeps_keys_and_timestamps(self):
        h = Harness(shout)
        out = h.process([Record(b"k", b"hey", 7), Record(None, "", 8)])
        self.assertEqual(out.main, [Record(b"k", b"HEY", 7), Record(None, b"", 8)])
        self.assertEqual(h.info.name, "shout")
        self.assertFalse(h.info.keyed)

    def test_flat_map_emits_main_and_side_outputs(self):
        h = Harness(split)
        out = h.process([Record(None, b"in 1 beginning 2", 3)])
        self.assertEqual(out.values(), ["in", "1", "beginning", "2"])
        self.assertEqual([r.value for r in out.side_output("numbers")], [b"1", b"2"])
        self.assertEqual(out.side_output("numbers")[0].key, None)

    def test_filter_drops_records_and_passes_all_kept_batches_as_they_are(self):
        h = Harness(Contains, config={"contains": "lord"})
        out = h.process([(b"a", b"the lord", 1), (None, b"said", 2), (b"c", b"lord god", 3)])
        self.assertEqual(out.values(), ["the lord", "lord god"])
        self.assertEqual(out.main[1], Record(b"c", b"lord god", 3))
        self.assertEqual(h.process([(None, b"lord", 1)]).values(), ["lord"])

    def test_missing_config_fails_open_with_the_message(self):
        with self.assertRaises(OperatorFailed) as failed:
            Harness(Contains)
        self.assertEqual(failed.exception.call, "open")
        self.assertEqual(failed.exception.message, "config `contains` is required but missing")


class Sessions(KeyedProcessFunction):
    """Exercises list, map and value state, timers, side outputs, log and metrics."""

    NAME = "sessions"
    VERSION = "2.0.0"
    events = ListState("events", STR)
    per_kind = MapState("per-kind", STR, U32)
    seen = ValueState("seen", BOOL, ttl_ms=60_000)

    def process_element(self, record, ctx):
        kind = record.value.decode()
        if kind == "boom":
            raise RuntimeError("boom in " + record.key_str())
        self.events.add(ctx, kind)
        self.per_kind.put(ctx, kind, self.per_kind.get(ctx, kind, 0) + 1)
        if not self.seen.get(ctx, False):
            self.seen.set(ctx, True)
            ctx.register_event_time_timer(record.timestamp + 10)
            weir_sdk.log.info(f"new key {record.key_str()}")
        if kind == "cancel":
            ctx.delete_event_time_timer(record.timestamp + 10)
            ctx.output("cancelled", record)
        weir_sdk.metrics.counter_add("events")

    def on_timer(self, time, ctx):
        events = self.events.get(ctx)
        counts = dict(self.per_kind.entries(ctx))
        ctx.emit(ctx.key, f"{ctx.key.decode()}:{events}:{counts}", time)
        self.events.clear(ctx)
        self.per_kind.remove(ctx, "click")
        weir_sdk.metrics.gauge_set("watermark", ctx.current_watermark())


class KeyedTest(unittest.TestCase):
    def test_describe_lists_the_declared_states_in_order(self):
        h = Harness(Sessions)
        self.assertEqual((h.info.name, h.info.version, h.info.keyed), ("sessions", "2.0.0", True))
        self.assertEqual([s.name for s in h.info.states], ["events", "per-kind", "seen"])
        self.assertEqual([s.ttl_ms for s in h.info.states], [None, None, 60_000])

    def test_state_timers_side_outputs_log_and_metrics(self):
        h = Harness(Sessions)
        out = h.process([("u1", "click", 100), ("u2", "view", 101), ("u1", "click", 102)])
        self.assertTrue(out.is_empty())
        self.assertEqual(h.timers, [(110, b"u1"), (111, b"u2")])
        self.assertEqual(h.list_state("events", "u1"), ["click", "click"])
        self.assertEqual(h.map_state("per-kind", "u1"), {"click": 2})
        self.assertIs(h.value_state("seen", "u2"), True)
        self.assertEqual(h.logs, [("info", "new key u1"), ("info", "new key u2")])
        self.assertEqual(h.counters, {"events": 3})

        out = h.advance_watermark(110)
        self.assertEqual(out.values(), ["u1:['click', 'click']:{'click': 2}"])
        self.assertEqual(out.main[0].timestamp, 110)
        self.assertEqual(h.list_state("events", "u1"), [])
        self.assertEqual(h.map_state("per-kind", "u1"), {})
        self.assertEqual(h.gauges, {"watermark": 110.0})

        out = h.process([("u3", "cancel", 200)])
        self.assertEqual([r.key for r in out.side_output("cancelled")], [b"u3"])
        self.assertEqual(h.timers, [(111, b"u2")])
        self.assertEqual(h.finish().values(), ["u2:['view']:{'view': 1}"])

    def test_an_exception_fails_the_call_with_type_message_and_where(self):
        h = Harness(Sessions)
        with self.assertRaises(OperatorFailed) as failed:
            h.process([("u1", "click", 1), ("u9", "boom", 2)])
        message = failed.exception.message
        self.assertTrue(message.startswith("RuntimeError: boom in u9 (at "), message)
        self.assertIn("test_sdk.py:", message)
        self.assertIn("in process_element", message)
        self.assertNotIn("weir_sdk", message, "the SDK's own frames are left out")
        # The records before the failure wrote their state, as single calls
        # would have: the batch's value-state changes are flushed, then the
        # failure is reported.
        self.assertIs(h.value_state("seen", "u1"), True)
        self.assertEqual(h.list_state("events", "u1"), ["click"])
        self.assertIsNone(h.value_state("seen", "u9"))

    def test_a_record_without_a_key_is_an_error(self):
        h = Harness(Sessions)
        with self.assertRaises(OperatorFailed) as failed:
            h.process([("u1", "click", 1), (None, "click", 2)])
        self.assertEqual(
            failed.exception.message,
            "record 1 of the batch has no key, but this operator runs on a keyed stream",
        )

    def test_undecodable_state_names_the_state(self):
        h = Harness(Sessions)
        h.set_state_bytes("seen", "u1", b"\x07")
        with self.assertRaises(OperatorFailed) as failed:
            h.process([("u1", "click", 1)])
        self.assertIn("state `seen`: cannot decode bool: invalid byte 7", failed.exception.message)


class Counter(KeyedProcessFunction):
    count = ValueState("count", U64)

    def process_element(self, record, ctx):
        if record.value == b"reset":
            self.count.clear(ctx)
            return
        self.count.set(ctx, self.count.get(ctx, 0) + 1)
        ctx.emit(ctx.key, b"%d" % self.count.get(ctx), record.timestamp)


class ValueStateBatchTest(unittest.TestCase):
    """Value state is read and written per batch (value-get-many and
    value-set-many, contract 0.1.3): what a function sees must not change."""

    def test_records_of_one_key_in_a_batch_see_each_others_updates(self):
        h = Harness(Counter)
        out = h.process([("a", "", 1), ("b", "", 2), ("a", "", 3), ("a", "reset", 4), ("a", "", 5)])
        self.assertEqual(out.values(), ["1", "1", "2", "1"])
        self.assertEqual((h.value_state("count", "a"), h.value_state("count", "b")), (1, 1))
        h.process([("a", "reset", 6)])
        self.assertIsNone(h.state_bytes("count", "a"), "a clear reaches the host")
        self.assertEqual(h.value_state("count", "b"), 1)

    def test_every_batch_reads_the_host_afresh(self):
        h = Harness(Counter)
        h.process([("a", "", 1)])
        h.set_state_bytes("count", "a", U64.encode(41))  # e.g. restored from a savepoint
        self.assertEqual(h.process([("a", "", 2)]).values(), ["42"])

    def test_a_batch_costs_one_get_many_and_one_set_many(self):
        h = Harness(Counter)
        h.set_value_state("count", "c", 10)
        records = [(k, "", i) for i, k in enumerate("abcab" * 20)]  # 100 records, 3 keys
        out = h.process(records)
        self.assertEqual(out.values()[-5:], ["39", "39", "30", "40", "40"])
        self.assertEqual(h.batched_state_calls, 2, "instead of 2 x 100 single calls")
        self.assertEqual(h.state_calls, 0)
        self.assertEqual(h.state_call_counts["value_get_many"], 1)
        self.assertEqual(h.state_call_counts["value_set_many"], 1)
        self.assertEqual([h.value_state("count", k) for k in "abc"], [40, 40, 30])
        h.process([("a", "", 200)])
        self.assertEqual(h.batched_state_calls, 4, "two more for the next batch")

    def test_a_batch_that_only_writes_reads_nothing(self):
        class Last(KeyedProcessFunction):
            last = ValueState("last", STR)

            def process_element(self, record, ctx):
                self.last.set(ctx, record.value_str())

        h = Harness(Last)
        h.process([("a", "x", 1), ("a", "y", 2), ("b", "z", 3)])
        self.assertEqual(h.state_call_counts["value_get_many"], 0)
        self.assertEqual(h.state_call_counts["value_set_many"], 1)
        self.assertEqual((h.value_state("last", "a"), h.value_state("last", "b")), ("y", "z"))

    def test_a_fetch_keeps_what_the_batch_already_set(self):
        class SetThenGet(KeyedProcessFunction):
            v = ValueState("v", STR)

            def process_element(self, record, ctx):
                if record.value == b"set":
                    self.v.set(ctx, "new")
                elif record.value == b"clear":
                    self.v.clear(ctx)
                else:
                    ctx.emit(ctx.key, str(self.v.get(ctx)), record.timestamp)

        h = Harness(SetThenGet)
        for k in "abc":
            h.set_value_state("v", k, "old")
        out = h.process([("a", "set", 1), ("b", "clear", 2), ("a", "", 3), ("b", "", 4), ("c", "", 5)])
        self.assertEqual(out.values(), ["new", "None", "old"])
        self.assertEqual(h.batched_state_calls, 2)
        self.assertEqual(h.state_calls, 0, "a clear of a batch key is cached too")
        self.assertEqual([h.value_state("v", k) for k in "abc"], ["new", None, "old"])

    def test_clear_explicit_key_and_timers_after_the_batch(self):
        class Tracker(KeyedProcessFunction):
            """Counts per key, mirrors into key `total` explicitly, reports on a timer."""

            count = ValueState("count", U64)
            events = ListState("events", STR)

            def process_element(self, record, ctx):
                if record.value == b"clear":
                    self.count.clear(ctx)
                    ctx.emit(ctx.key, f"cleared:{self.count.get(ctx)}", record.timestamp)
                    return
                self.count.set(ctx, self.count.get(ctx, 0) + 1)
                total = weir_sdk.ExplicitKey("total")  # not a key of the batch
                self.count.set(total, self.count.get(total, 0) + 1)
                self.events.add(ctx, record.value_str())
                ctx.register_event_time_timer(100)

            def on_timer(self, time, ctx):
                count = self.count.get(ctx)
                total = self.count.get(weir_sdk.ExplicitKey(b"total"))
                ctx.emit(ctx.key, f"{count}/{total}:{self.events.get(ctx)}", time)
                self.count.set(ctx, 0)

        h = Harness(Tracker)
        out = h.process([("a", "x", 1), ("b", "y", 2), ("a", "z", 3), ("b", "clear", 4)])
        self.assertEqual(out.values(), ["cleared:None"])
        # One get-many and one set-many for `count`; the explicit key (2
        # reads, 2 writes per counted record) and the list go to the host.
        self.assertEqual(h.batched_state_calls, 2)
        self.assertEqual(h.state_call_counts["value_get"], 3)
        self.assertEqual(h.state_call_counts["value_set"], 3)
        self.assertEqual(h.state_call_counts["list_add"], 3)
        self.assertEqual(h.value_state("count", "total"), 3)
        self.assertEqual(h.value_state("count", "a"), 2)
        self.assertIsNone(h.value_state("count", "b"))
        # The timers run after the batch: they see its flushed values, and
        # their own accesses are single calls.
        calls = h.batched_state_calls
        out = h.advance_watermark(100)
        self.assertEqual(out.values(), ["2/3:['x', 'z']", "None/3:['y']"])
        self.assertEqual(h.batched_state_calls, calls)
        self.assertEqual((h.value_state("count", "a"), h.value_state("count", "b")), (0, 0))

    def test_a_failing_function_flushes_then_fails(self):
        class FailAt(KeyedProcessFunction):
            count = ValueState("count", U64)

            def process_element(self, record, ctx):
                if record.value == b"boom":
                    raise ValueError("boom")
                self.count.set(ctx, self.count.get(ctx, 0) + 1)

        h = Harness(FailAt)
        with self.assertRaises(OperatorFailed) as failed:
            h.process([("a", "", 1), ("a", "", 2), ("b", "boom", 3), ("b", "", 4)])
        self.assertTrue(failed.exception.message.startswith("ValueError: boom"))
        self.assertEqual(h.value_state("count", "a"), 2)
        self.assertIsNone(h.value_state("count", "b"))
        self.assertEqual(h.batched_state_calls, 2)
        # The next batch starts with a fresh cache.
        h.process([("a", "", 5)])
        self.assertEqual(h.value_state("count", "a"), 3)

    def test_co_process_batches_each_input(self):
        class Both(weir_sdk.KeyedCoProcessFunction):
            seen = ValueState("seen", STR)

            def process_element1(self, record, ctx):
                ctx.emit(ctx.key, f"L{self.seen.get(ctx)}", record.timestamp)
                self.seen.set(ctx, "left")

            def process_element2(self, record, ctx):
                ctx.emit(ctx.key, f"R{self.seen.get(ctx)}", record.timestamp)
                self.seen.set(ctx, "right")

        h = Harness(Both)
        self.assertEqual(h.process_input(0, [("a", "", 1), ("a", "", 2)]).values(), ["LNone", "Lleft"])
        self.assertEqual(h.process_input(1, [("a", "", 3), ("b", "", 4)]).values(), ["Rleft", "RNone"])
        self.assertEqual(h.batched_state_calls, 4)
        self.assertEqual((h.value_state("seen", "a"), h.value_state("seen", "b")), ("right", "right"))

    def test_outputs_and_state_match_the_per_call_path(self):
        import random

        from weir_sdk import operator as runtime_module

        class Mixed(KeyedProcessFunction):
            """Every value-state operation, an explicit key, a list and timers."""

            count = ValueState("count", U64)
            last = ValueState("last", STR)
            seen = ListState("seen", STR)

            def process_element(self, record, ctx):
                op = record.value_str()
                if op == "clear":
                    self.count.clear(ctx)
                elif op == "clear-last":
                    self.last.clear(ctx)
                elif op == "peek":
                    other = weir_sdk.ExplicitKey(b"k0")
                    ctx.emit(ctx.key, f"peek:{self.count.get(other)}", record.timestamp)
                else:
                    self.count.set(ctx, self.count.get(ctx, 0) + 1)
                    self.last.set(ctx, op)
                    self.seen.add(ctx, op)
                    if op == "k0":
                        self.count.set(weir_sdk.ExplicitKey("k0"), 100)
                ctx.emit(
                    ctx.key, f"{self.count.get(ctx)}|{self.last.get(ctx)}", record.timestamp
                )
                ctx.register_event_time_timer(record.timestamp + 5)

            def on_timer(self, time, ctx):
                ctx.emit(ctx.key, f"t:{self.count.get(ctx)}|{self.seen.get(ctx)}", time)
                self.count.set(ctx, self.count.get(ctx, 0) * 2)

        def run(seed, batched):
            rng = random.Random(seed)
            h = Harness(Mixed)
            out, ts = [], 0
            for _ in range(20):
                batch = []
                for _ in range(rng.randrange(1, 15)):
                    ts += 1
                    key = f"k{rng.randrange(4)}"
                    op = rng.choice(["x", "y", "k0", "clear", "clear-last", "peek"])
                    batch.append((key, op, ts))
                out.append(h.process(batch))
                out.append(h.advance_watermark(ts - rng.randrange(8)))
            out.append(h.finish())
            emitted = [(r.key, r.value, r.timestamp) for o in out for r in o.main]
            return emitted, h.host.stores, h.batched_state_calls

        for seed in range(20):
            batched = run(seed, True)
            original = runtime_module.open_batch
            runtime_module.open_batch = lambda states, batch: False  # every access a host call
            try:
                direct = run(seed, False)
            finally:
                runtime_module.open_batch = original
            self.assertEqual(batched[:2], direct[:2], f"seed {seed}")
            self.assertGreater(batched[2], 0)
            self.assertEqual(direct[2], 0)

    def test_a_host_error_in_the_batched_calls_names_the_state(self):
        h = Harness(Counter)

        def refuse(state, keys):
            raise weir_sdk._host.HostError(weir_sdk._host.StateError_Backend("disk full"))

        h.host.value_get_many = refuse
        with self.assertRaises(OperatorFailed) as failed:
            h.process([("a", "", 1)])
        self.assertEqual(
            failed.exception.message.split(" (at ")[0], "StateError: state `count`: disk full"
        )

    def test_the_fake_host_checks_packed_lists_as_the_host_does(self):
        from weir_sdk._host import HostError, Packed

        h = Harness(Counter)
        with self.assertRaises(HostError) as bad:
            h.host.value_get_many(0, Packed([2, -1], b"ab"))
        self.assertEqual(bad.exception.value.value, "malformed packed list: an absent key")
        with self.assertRaises(HostError) as bad:
            h.host.value_get_many(0, Packed([3], b"ab"))
        self.assertIn("past the 2 bytes of data", bad.exception.value.value)
        with self.assertRaises(HostError):
            h.host.value_set_many(0, Packed([1], b"a"), Packed([], b""))
        h.host.value_set_many(0, Packed([1, 1], b"ab"), Packed([1, -1], b"\x07"))
        got = h.host.value_get_many(0, Packed([1, 1, 1], b"abc"))
        self.assertEqual((got.lens, got.data), ([1, -1, -1], b"\x07"))


def widen_total(from_version, old):
    """1.x stored `total` as a u32; 2.0.0 stores a u64."""
    if from_version.startswith("1."):
        return U64.encode(U32.decode(old))
    return old


def refuse(from_version, old):
    raise ValueError(f"cannot read {old!r}")


class Upgraded(KeyedProcessFunction):
    """Version 2 of an operator: every state kind, with and without a migration."""

    VERSION = "2.0.0"
    total = ValueState("total", U64, migrate=widen_total)
    tags = ListState("tags", STR, migrate=lambda from_version, old: old.upper())
    per_tag = MapState(
        "per-tag", STR, STR, migrate=lambda from_version, old: old + b"@" + from_version.encode()
    )
    untouched = ValueState("untouched", STR)
    broken = ValueState("broken", BYTES, migrate=refuse)
    wrong = ValueState("wrong", BYTES, migrate=lambda from_version, old: "not bytes")

    def process_element(self, record, ctx):
        self.total.set(ctx, self.total.get(ctx, 0) + 1)
        tag = record.value_str()
        self.tags.add(ctx, tag)
        self.per_tag.put(ctx, tag, tag)
        self.untouched.set(ctx, tag)


class MigrationTest(unittest.TestCase):
    """The WIT `migrate-state` export: what `weir upgrade` calls once per stored value."""

    def test_a_state_with_a_migration_gets_its_result(self):
        h = Harness(Upgraded)
        self.assertEqual(h.migrate_state("total", "1.4.0", U32.encode(41)), U64.encode(41))
        self.assertEqual(h.migrate_state("tags", "1.0.0", b"red"), b"RED")
        self.assertEqual(h.migrate_state("per-tag", "1.0.0", b"v"), b"v@1.0.0")
        # The function sees the version: one already in the new encoding stays.
        self.assertEqual(h.migrate_state("total", "2.0.0-rc1", U64.encode(7)), U64.encode(7))

    def test_states_without_a_migration_and_unknown_states_keep_their_bytes(self):
        h = Harness(Upgraded)
        old = b"\xff\x00 as is"
        self.assertEqual(h.migrate_state("untouched", "1.0.0", old), old)
        self.assertEqual(h.migrate_state("no-such-state", "1.0.0", b"kept"), b"kept")
        self.assertEqual(Harness(Counter).migrate_state("count", "0.0.1", b"\x01"), b"\x01")
        self.assertEqual(Harness(shout).migrate_state("anything", "0.0.1", b"x"), b"x")

    def test_a_failing_migration_is_an_error_naming_the_state_and_version(self):
        h = Harness(Upgraded)
        with self.assertRaises(OperatorFailed) as failed:
            h.migrate_state("broken", "1.2.3", b"old")
        self.assertEqual(failed.exception.call, "migrate-state")
        message = failed.exception.message
        self.assertTrue(
            message.startswith(
                "migrating state `broken` from version 1.2.3: ValueError: cannot read b'old' (at "
            ),
            message,
        )
        self.assertIn("in refuse", message)
        with self.assertRaises(OperatorFailed) as failed:
            h.migrate_state("total", "1.0.0", b"\x01\x02")  # not a u32
        self.assertEqual(
            failed.exception.message,
            "migrating state `total` from version 1.0.0: "
            "cannot decode u32: expected 4 bytes, got 2",
        )
        with self.assertRaises(OperatorFailed) as failed:
            h.migrate_state("wrong", "1.0.0", b"")
        self.assertEqual(
            failed.exception.message,
            "migrating state `wrong` from version 1.0.0: the migration returned str, not bytes",
        )

    def test_migrate_state_needs_no_open(self):
        # The host calls migrate-state on a fresh instance, before `open`
        # (whose config may be missing): the export must not need it.
        class NeedsConfig(Upgraded):
            def open(self, ctx):
                raise Error("no config here")

        operator = weir_sdk.export(NeedsConfig)()
        self.assertEqual(operator.migrate_state("tags", "1.0.0", b"a"), b"A")

    def seeded(self):
        """A harness whose state an operator 1.x left: `total` still a u32."""
        h = Harness(Upgraded)
        h.process([("k", "red", 1), ("k", "blue", 2)])
        h.set_state_bytes("total", "k", U32.encode(5))
        return h

    def test_migrating_stored_state_rewrites_values_list_elements_and_map_values(self):
        h = self.seeded()
        h.migrate_stored_state("1.0.0")
        self.assertEqual(h.value_state("total", "k"), 5)
        self.assertEqual(h.list_state("tags", "k"), ["RED", "BLUE"])
        # Map values are migrated, their user keys are not.
        self.assertEqual(h.map_state("per-tag", "k"), {"red": "red@1.0.0", "blue": "blue@1.0.0"})
        self.assertEqual(h.value_state("untouched", "k"), "blue")

    def test_a_failed_migration_leaves_stored_state_as_it_was(self):
        h = self.seeded()
        h.set_state_bytes("broken", "k", b"x")
        with self.assertRaises(OperatorFailed) as failed:
            h.migrate_stored_state("1.0.0")
        self.assertIn(
            "migrating state `broken` from version 1.0.0: ValueError", failed.exception.message
        )
        self.assertEqual(h.state_bytes("total", "k"), U32.encode(5))
        self.assertEqual(h.list_state("tags", "k"), ["red", "blue"])

    def test_the_same_version_migrates_nothing(self):
        h = self.seeded()
        h.migrate_stored_state("2.0.0")
        self.assertEqual(h.state_bytes("total", "k"), U32.encode(5))
        self.assertEqual(h.list_state("tags", "k"), ["red", "blue"])


class ComponentExportsTest(unittest.TestCase):
    """What build.sh's generated module binds for componentize-py."""

    def module(self, **names):
        import types

        module = types.ModuleType("app")
        module.__dict__.update(names)
        return module

    def test_the_operator_class_is_also_the_migration_export(self):
        operator = weir_sdk.export(Upgraded)
        exports = weir_sdk.operator.component_exports(self.module(Operator=operator))
        self.assertEqual(exports, (operator, operator))
        self.assertEqual(operator().migrate_state("tags", "1.0.0", b"a"), b"A")

    def test_a_hand_written_operator_gets_a_migration_that_keeps_bytes(self):
        class Operator:
            pass

        exported, migration = weir_sdk.operator.component_exports(self.module(Operator=Operator))
        self.assertIs(exported, Operator)
        self.assertEqual(migration().migrate_state("s", "1.0.0", b"as is"), b"as is")

    def test_a_module_may_bind_its_own_migration(self):
        class Migration:
            pass

        module = self.module(Operator=weir_sdk.export(Counter), Migration=Migration)
        self.assertIs(weir_sdk.operator.component_exports(module)[1], Migration)

    def test_a_module_without_operator_is_a_clear_error(self):
        with self.assertRaises(Error) as e:
            weir_sdk.operator.component_exports(self.module())
        self.assertIn("binds no `Operator`", str(e.exception))


class ExportTest(unittest.TestCase):
    def test_export_needs_a_function_class(self):
        with self.assertRaises(TypeError):
            weir_sdk.export(object)

    def test_a_migration_must_be_a_function(self):
        with self.assertRaises(TypeError):
            ValueState("n", U64, migrate=b"not a function")

    def test_duplicate_state_names_are_refused(self):
        class Twice(KeyedProcessFunction):
            a = ValueState("n", U64)
            b = ValueState("n", U64)

        with self.assertRaises(TypeError):
            weir_sdk.export(Twice)

    def test_max_timestamp_is_i64_max(self):
        self.assertEqual(MAX_TIMESTAMP, 2**63 - 1)



class PairJoin(weir_sdk.KeyedCoProcessFunction):
    """Every left record with every right record of its key."""

    left = ListState("left", BYTES)
    right = ListState("right", BYTES)

    def _arrive(self, record, ctx, mine, other, is_left):
        for o in other.get(ctx):
            pair = (record.value, o) if is_left else (o, record.value)
            ctx.emit(ctx.key, pair[0] + b"|" + pair[1], record.timestamp)
        mine.add(ctx, record.value)

    def process_element1(self, record, ctx):
        self._arrive(record, ctx, self.left, self.right, True)

    def process_element2(self, record, ctx):
        self._arrive(record, ctx, self.right, self.left, False)


class IdleAlert(KeyedProcessFunction):
    deadline = ValueState("deadline", I64)

    def process_element(self, record, ctx):
        old = self.deadline.get(ctx)
        if old is not None:
            ctx.delete_processing_time_timer(old)
        at = ctx.current_processing_time() + 1000
        ctx.register_processing_time_timer(at)
        self.deadline.set(ctx, at)

    def on_processing_timer(self, time, ctx):
        if self.deadline.get(ctx) == time:
            self.deadline.clear(ctx)
            ctx.emit(ctx.key, ctx.key + b"\tidle", time)


class TwoInputsAndProcessingTimeTest(unittest.TestCase):
    def test_a_co_process_function_pairs_both_inputs(self):
        h = Harness(PairJoin)
        self.assertTrue(h.process_input(0, [("a", "l1", 1)]).is_empty())
        out = h.process_input(1, [("a", "r1", 2), ("b", "r2", 3)])
        self.assertEqual(out.values(), ["l1|r1"])
        # Input 0 through `process` is the left side too.
        self.assertEqual(h.process([("a", "l2", 4)]).values(), ["l2|r1"])

    def test_a_one_input_function_refuses_input_1(self):
        h = Harness(IdleAlert)
        with self.assertRaises(OperatorFailed) as failed:
            h.process_input(1, [("a", "x", 1)])
        self.assertIn("one input", str(failed.exception))

    def test_processing_time_timers_fire_on_the_harness_clock(self):
        h = Harness(IdleAlert)
        h.process([("a", "x", 1), ("b", "x", 1)])
        self.assertTrue(h.advance_processing_time(500).is_empty())
        h.process([("a", "x", 2)])
        self.assertEqual(h.advance_processing_time(600).values(), ["b\tidle"])
        self.assertEqual(h.advance_processing_time(400).values(), ["a\tidle"])
        self.assertTrue(h.advance_processing_time(10_000).is_empty())


class Everything(KeyedProcessFunction):
    """A value, a list and a map state, and both kinds of timers."""

    count = ValueState("count", U64)
    seen = ListState("seen", STR)
    by = MapState("by", STR, U64)

    def process_element(self, record, ctx):
        v = record.value_str()
        self.count.set(ctx, self.count.get(ctx, 0) + 1)
        self.seen.add(ctx, v)
        self.by.put(ctx, v, self.by.get(ctx, v, 0) + 1)
        ctx.register_event_time_timer(record.timestamp + 10)
        ctx.register_processing_time_timer(ctx.current_processing_time() + 100)

    def on_timer(self, time, ctx):
        ctx.emit(ctx.key, f"{time}:{self.count.get(ctx)}:{self.seen.get(ctx)}", time)

    def on_processing_timer(self, time, ctx):
        ctx.emit(ctx.key, f"p{time}:{self.by.entries(ctx)}", time)


class HarnessCheckpointTest(unittest.TestCase):
    """Harness.snapshot and Harness(restore=...), a checkpoint of the fake
    host; Harness(batched_state=False), the per-call path."""

    def test_a_restored_instance_goes_on_as_the_snapshotted_one_would(self):
        h = Harness(Everything)
        h.process([("a", "x", 1), ("b", "y", 2), ("a", "x", 3)])
        h.advance_watermark(11)  # fires a's timer at 11
        h.advance_processing_time(50)
        checkpoint = h.snapshot()
        self.assertEqual(checkpoint.watermark, 11)
        self.assertEqual(checkpoint.timers, [(12, b"b"), (13, b"a")])
        self.assertEqual(checkpoint.processing_timers, [(100, b"a"), (100, b"b")])
        self.assertEqual(checkpoint.states["count"], ("value", {b"a": U64.encode(2), b"b": U64.encode(1)}))

        def go_on(h):
            out = h.process([("a", "z", 20), ("c", "x", 21)])
            out.extend(h.advance_processing_time(60))
            out.extend(h.finish())
            return [(r.key, r.value, r.timestamp) for r in out.main], h.snapshot()

        restored = Harness(Everything, restore=checkpoint)
        self.assertEqual(restored.snapshot(), checkpoint)
        self.assertEqual(go_on(restored), go_on(h))
        self.assertEqual(h.snapshot(), restored.snapshot())
        self.assertEqual(restored.list_state("seen", "a"), ["x", "x", "z"])
        # A deep copy: going on changed nothing in it.
        self.assertEqual(checkpoint.states["seen"][1][b"a"], [b"x", b"x"])
        self.assertEqual(checkpoint.states["by"][1][b"a"], {b"x": U64.encode(2)})

    def test_a_snapshot_restores_only_where_its_states_are_declared(self):
        checkpoint = Harness(Counter).snapshot()
        with self.assertRaises(ValueError) as bad:
            Harness(Everything, restore=Harness(IdleAlert).snapshot())
        self.assertIn("value state `deadline` is not declared by everything", str(bad.exception))
        with self.assertRaises(TypeError):
            Harness(Counter, restore={"count": {}})
        # States the snapshot lacks start empty.
        h = Harness(Everything, restore=checkpoint)
        self.assertEqual(h.list_state("seen", "a"), [])

    def test_the_per_call_path_makes_no_batched_calls(self):
        batched, per_call = Harness(Counter), Harness(Counter, batched_state=False)
        records = [("a", "", 1), ("a", "", 2), ("b", "reset", 3), ("b", "", 4)]
        self.assertEqual(batched.process(records).values(), per_call.process(records).values())
        self.assertEqual(batched.snapshot(), per_call.snapshot())
        self.assertEqual((batched.batched_state_calls, batched.state_calls), (2, 0))
        self.assertEqual(per_call.batched_state_calls, 0)
        self.assertEqual(per_call.state_call_counts["value_get"], 6)
        # Only that harness's calls: the other still batches.
        batched.process(records)
        self.assertEqual(batched.batched_state_calls, 4)


# ---------------------------------------------------------------------------
# Window functions (contract 0.1.3)


class Mean(weir_sdk.AggregateFunction):
    """The mean of the values per window; the accumulator [count, sum] in JSON."""

    def open(self, ctx):
        self.label = ctx.config.get_str("label", "mean")

    def create_accumulator(self):
        return [0, 0]

    def add(self, acc, record):
        acc[0] += 1  # changed in place, then returned
        acc[1] += int(record.value)
        return acc

    def merge(self, a, b):
        return [a[0] + b[0], a[1] + b[1]]

    def get_result(self, key, window, acc):
        return b"%s %s [%d,%d) %g" % (
            self.label.encode(), key, window.start, window.end, acc[1] / acc[0]
        )


@weir_sdk.process_window
def concat(key, window, records, out):
    """All values joined, and the record count to a side output."""
    out.emit(key, b",".join(r.value for r in records), 0)
    out.emit_to("counts", None, str(len(records)), window.max_timestamp())


class WindowFunctionTest(unittest.TestCase):
    def test_kinds_and_describe(self):
        self.assertEqual(Harness(Mean).window_kind(), "aggregate")
        self.assertEqual(Harness(concat).window_kind(), "process-window")
        self.assertEqual(Harness(Counter).window_kind(), "none")
        self.assertEqual(Harness(Contains, config={"contains": "x"}).window_kind(), "none")
        info = Harness(Mean).info
        self.assertEqual((info.name, info.keyed, info.states), ("mean", False, []))
        self.assertEqual(Harness(concat).info.name, "concat")

    def test_aggregate_round_trips_the_accumulator_as_json_bytes(self):
        records = [("k", str(v), v) for v in (1, 2, 3, 6)]
        for chunk in (1, 3, 4):
            self.assertEqual(
                weir_sdk.testing.aggregate(Mean, "k", (0, 10), records, chunk, {"label": "m"}),
                b"m k [0,10) 3",
            )
        h = Harness(Mean)
        self.assertEqual(h.add([None], [0, 0], [("k", "1", 1), ("k", "2", 2)]), [b"[2,3]"])
        self.assertEqual(h.merge([(b"[2,3]", b"[1,5]")]), [b"[3,8]"])

    def test_merged_aggregate(self):
        result = weir_sdk.testing.merged_aggregate(Mean, "k", (0, 10), ["1", "2", "3"], ["10"])
        self.assertEqual(result, b"mean k [0,10) 4")

    def test_add_returns_every_accumulator_in_order(self):
        h = Harness(Mean)
        out = h.add(
            [b"[1,100]", None, None, b"[9,9]"],
            [2, 0, 2],
            [("a", "1", 1), (None, "2", 2), ("a", "3", 3)],
        )
        # Untouched: as given, or a new one; a record without a key is fine.
        self.assertEqual(out, [b"[2,102]", b"[0,0]", b"[2,4]", b"[9,9]"])
        self.assertEqual(h.add([], [], []), [])

    def test_add_errors(self):
        h = Harness(Mean)
        with self.assertRaises(OperatorFailed) as e:
            h.add([None, None], [0, 2], [("a", "1", 1), ("a", "2", 2)])
        self.assertEqual(
            e.exception.message, "add: record 1 targets accumulator 2, but 2 accumulator(s) were given"
        )
        with self.assertRaises(OperatorFailed) as e:
            h.add([None], [0], [("a", "1", 1), ("a", "2", 2)])
        self.assertIn("1 targets for 2 records", e.exception.message)
        with self.assertRaises(OperatorFailed) as e:
            h.add([b"not json"], [0], [("a", "1", 1)])
        self.assertTrue(e.exception.message.startswith("add: accumulator 0: cannot decode JSON"))
        with self.assertRaises(OperatorFailed) as e:
            h.add([None], [0], [("a", "x", 1)])
        self.assertIn("ValueError", e.exception.message)
        self.assertIn("in add", e.exception.message)

        class Forgetful(Mean):
            def add(self, acc, record):
                acc[0] += 1  # no return

        with self.assertRaises(OperatorFailed) as e:
            Harness(Forgetful).add([None], [0], [("a", "1", 1)])
        self.assertIn("Forgetful.add returned None", e.exception.message)

    def test_get_result_must_be_bytes_or_str(self):
        class Bad(Mean):
            def get_result(self, key, window, acc):
                return acc

        with self.assertRaises(OperatorFailed) as e:
            weir_sdk.testing.aggregate(Bad, "k", (0, 10), ["1"])
        self.assertEqual(e.exception.message, "Bad.get_result returned list, not bytes or str")

        class Text(Mean):
            def get_result(self, key, window, acc):
                return "é"

        self.assertEqual(weir_sdk.testing.aggregate(Text, "k", (0, 10), ["1"]), "é".encode())

    def test_a_custom_accumulator_codec(self):
        class Total(weir_sdk.AggregateFunction):
            ACCUMULATOR = I64

            def create_accumulator(self):
                return 0

            def add(self, acc, record):
                return acc + int(record.value)

            def merge(self, a, b):
                return a + b

            def get_result(self, key, window, acc):
                return str(acc)

        h = Harness(Total)
        self.assertEqual(h.add([None], [0], [("k", "-5", 1)]), [I64.encode(-5)])
        self.assertEqual(weir_sdk.testing.merged_aggregate(Total, "k", (0, 1), ["1"], ["2"]), b"3")
        with self.assertRaises(OperatorFailed) as e:
            h.add([b"\x01"], [0], [("k", "1", 1)])
        self.assertEqual(
            e.exception.message, "add: accumulator 0: cannot decode i64: expected 8 bytes, got 1"
        )

    def test_process_window_emits_with_end_minus_one(self):
        out = weir_sdk.testing.process_window(
            concat, "k", weir_sdk.Window(10, 20), [("k", "a", 11), "b", Record(b"k", b"c", 12)]
        )
        self.assertEqual(out.main, [Record(b"k", b"a,b,c", 19)])
        self.assertEqual(out.side, [("counts", Record(None, b"3", 19))])

    def test_the_window_calls_of_the_other_kind_are_errors(self):
        with self.assertRaises(OperatorFailed) as e:
            Harness(Mean).process_window("k", (0, 10), ["1"])
        self.assertEqual(
            e.exception.message,
            "`process-window` called, but the window function `mean` is an AggregateFunction, "
            "not a ProcessWindowFunction",
        )
        for call, args in (("merge", ([],)), ("get_result", ([],)), ("add", ([], [], []))):
            with self.assertRaises(OperatorFailed) as e:
                getattr(Harness(concat), call)(*args)
            self.assertIn("is a ProcessWindowFunction, not an AggregateFunction", e.exception.message)

    def test_an_operator_is_not_a_window_function(self):
        h = Harness(Counter)
        for call, args in (
            ("add", ([None], [], [])),
            ("merge", ([],)),
            ("get_result", ([],)),
            ("process_window", ("k", (0, 1), [])),
        ):
            with self.assertRaises(OperatorFailed) as e:
                getattr(h, call)(*args)
            self.assertIn("`counter` is not a window function", e.exception.message)

    def test_a_window_function_is_not_an_operator(self):
        h = Harness(Mean)
        with self.assertRaises(OperatorFailed) as e:
            h.process([("k", "1", 1)])
        self.assertEqual(
            e.exception.message,
            "`process` called, but `mean` is a window function (AggregateFunction): use it as "
            "the `module` of an [[operator]] with a `window` table",
        )
        for call, args in (
            ("on_timer", (b"k", 1)),
            ("on_processing_timer", (b"k", 1)),
            ("process_input", (0, weir_sdk.operator._Buffer().batch())),
        ):
            with self.assertRaises(OperatorFailed):
                h._call(call, *args)
        # The lifecycle calls that carry no records do nothing.
        self.assertTrue(h.finish().is_empty())

    def test_a_window_function_declares_no_state(self):
        class Stateful(Mean):
            seen = ValueState("seen", U64)

        with self.assertRaises(TypeError):
            weir_sdk.export(Stateful)

    def test_window_calls_need_open(self):
        operator = weir_sdk.export(Mean)()
        with self.assertRaises(weir_sdk.operator._host.HostError):
            operator.add([None], [], weir_sdk.operator._Buffer().batch())

    def test_component_exports_bind_the_window_function(self):
        import types

        operator = weir_sdk.export(Mean)
        module = types.ModuleType("app")
        module.Operator = operator
        exports = weir_sdk.operator.component_exports_window(module)
        self.assertEqual(exports, (operator,) * 5)

        class Operator:
            pass

        module.Operator = Operator
        window = weir_sdk.operator.component_exports_window(module)[4]
        self.assertEqual(window().kind(), weir_sdk.operator._host.WindowFunctionKind.NONE)
        with self.assertRaises(weir_sdk.operator._host.HostError):
            window().add([None], [], None)

    def test_json_codec(self):
        self.assertEqual(weir_sdk.JSON.encode({"a": [1, "é"]}), '{"a":[1,"é"]}'.encode())
        self.assertEqual(weir_sdk.JSON.decode(b'{"a":[1]}'), {"a": [1]})
        with self.assertRaises(DecodeError):
            weir_sdk.JSON.decode(b"\xff")
        with self.assertRaises(weir_sdk.EncodeError):
            weir_sdk.JSON.encode(b"bytes")



if __name__ == "__main__":
    unittest.main()
