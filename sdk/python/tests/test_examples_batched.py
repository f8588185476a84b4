"""The example operators of udfs/python give byte-identical results with and
without the batch cache of value states (contract 0.1.3, issue 11):
`python3 -m unittest discover -s sdk/python/tests`.

Word count (both emit modes), fraud detection and the sequence checker each
run twice over the same seeded input: once batched (`value-get-many` /
`value-set-many`) and once with every state access its own host call
(`Harness(..., batched_state=False)`). Every run goes through the same
scenario (`drive`):

1. batches of random sizes (with several records of one key in a batch),
   the watermark advanced after each (none of the three registers a timer that
   fires before the final watermark: word count's fire at MAX_TIMESTAMP,
   the others use none);
2. a checkpoint (`Harness.snapshot`) after `CHECKPOINT_AFTER` batches;
3. `LOST` more batches, and for word count the end of input (its timers
   fire mid-run), which a failure then loses;
4. a new instance restored from the checkpoint replays from there; the
   final watermark and `close` end the run.

Both runs must agree on every output (the lost attempt's too), on every
snapshot (all states' bytes and the timers) at the checkpoint, at the
failure, before and after the end; the batched run must have made batched
state calls and the per-call run none. The committed output (the lost
attempt's left out, as a transactional sink does) and the final state must
also equal an expectation computed here, without Weir.
"""

import importlib.util
import os
import random
import struct
import sys
import unittest
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from weir_sdk import MAX_TIMESTAMP, Record  # noqa: E402
from weir_sdk.testing import Harness, Output  # noqa: E402

UDFS = os.path.join(HERE, "../../../udfs/python")
#: Batches per run, and how they split around the checkpoint and the failure.
BATCHES = 40
CHECKPOINT_AFTER = 15
LOST = 8
#: Seeds per example: each one a different input.
SEEDS = range(5)
U64_MAX = (1 << 64) - 1


def load(name):
    """udfs/python/<name>/app.py as a module of its own (every example's is `app`)."""
    spec = importlib.util.spec_from_file_location(
        name.replace("-", "_") + "_app", os.path.join(UDFS, name, "app.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def u64(n):
    return struct.pack("<Q", n)


def i64(n):
    return struct.pack("<q", n)


# -- the examples: input, and what they must emit and store ------------------


class WordCount:
    """udfs/python/word-count: `count` per word, emitted per record
    ("updates") or once at the end of input ("final")."""

    function = load("word-count").WordCount
    #: The lost attempt reaches the end of input: the timers ("final") fire mid-run.
    ends_in_lost_attempt = True
    words = [b"the", b"and", b"lord", b"unto", b"\xc3\xa9", b"", b"a"]

    def __init__(self, emit):
        self.config = {"emit": emit}
        self.updates = emit == "updates"

    def records(self, rng):
        ts = 0
        while True:
            ts += rng.randrange(3)
            word = rng.choice(self.words)
            yield Record(word, word, ts)

    def expect(self, records):
        """(main, side) emitted per record; `end` adds what the timers emit."""
        if not self.updates:
            return [], []
        counts, main = Counter(), []
        for r in records:
            counts[r.key] += 1
            main.append((r.key, b"%s\t%d" % (r.key, counts[r.key]), r.timestamp))
        return main, []

    def end(self, records):
        if self.updates:
            return []
        counts = Counter(r.key for r in records)
        return [(w, b"%s\t%d" % (w, c), MAX_TIMESTAMP) for w, c in sorted(counts.items())]

    def state(self, records):
        return {"count": ("value", {w: u64(c) for w, c in Counter(r.key for r in records).items()})}


class FraudDetect:
    """udfs/python/fraud-detect: a small transaction then a large one within
    a minute raises an alert; the flag `small-ts` per account."""

    function = load("fraud-detect").FraudDetect
    config = {}
    #: Accounts (the record keys) and each as a JSON string, as alerts print it.
    accounts = {
        b"acct-1": b'"acct-1"',
        b"acct-2": b'"acct-2"',
        b"acct-3": b'"acct-3"',
        b'acct "7"': b'"acct \\"7\\""',
        "compte-\u00e9".encode(): '"compte-\u00e9"'.encode(),
    }
    small = [b"0.5", b"0.99", b"0", b"-3.5"]
    medium = [b"12", b"100.0", b"500", b"1.00"]
    #: Large amounts as written in the input, and as Rust prints them.
    large = {
        b"600.25": b"600.25",
        b"501.0": b"501",
        b"500.01": b"500.01",
        b"7e2": b"700",
        b"2.5E+3": b"2500",
        b"1234.5678": b"1234.5678",
        b"1e21": b"1000000000000000000000",
    }
    ends_in_lost_attempt = False

    def records(self, rng):
        ts = 0
        amounts = self.small + self.medium + list(self.large)
        while True:
            ts += rng.randrange(15_000)
            account = rng.choice(list(self.accounts))
            amount = rng.choice(amounts)
            value = b'{"account":%s,"amount":%s}' % (self.accounts[account], amount)
            yield Record(account, value, ts)

    def _amount(self, r):
        return r.value.split(b'"amount":')[1][:-1]

    def expect(self, records):
        flags, main = {}, []
        for r in records:
            amount, ts = self._amount(r), r.timestamp
            if r.key in flags:
                if amount in self.large and ts - flags[r.key] <= 60_000:
                    alert = b'{"account":%s,"small_ts":%d,"large_ts":%d,"amount":%s}' % (
                        self.accounts[r.key],
                        flags[r.key],
                        ts,
                        self.large[amount],
                    )
                    main.append((r.key, alert, ts))
                del flags[r.key]
            if amount in self.small:
                flags[r.key] = ts
        return main, []

    def end(self, records):
        return []

    def state(self, records):
        flags = {}
        for r in records:
            flags.pop(r.key, None)
            if self._amount(r) in self.small:
                flags[r.key] = i64(r.timestamp)
        return {"small-ts": ("value", flags)}


class SequenceCheck:
    """udfs/python/sequence-check: per key, values advance by `step`; the
    others go to the side output `alerts`. The input has records lost,
    repeated and swapped, and a key that is no number."""

    function = load("sequence-check").SequenceCheck
    keys = 4
    config = {"step": str(keys)}
    ends_in_lost_attempt = False

    def records(self, rng):
        n, x = 0, 0
        pending = []
        while True:
            fault = rng.randrange(40)
            if fault == 0:
                n += 1  # lost
            record = Record(b"%d" % (n % self.keys), b"%d" % n + b"." * rng.randrange(3), n)
            if fault == 1:
                pending.append(record)  # repeated
            if fault == 2:
                x += self.keys  # a key that expects u64::MAX first, then follows its sequence
                pending.append(Record(b"x", b"%d" % (x - self.keys), n))
            pending.append(record)
            if fault == 3 and len(pending) >= 2:
                pending[-1], pending[-2] = pending[-2], pending[-1]  # swapped
            n += 1
            while pending:
                yield pending.pop(0)

    def expect(self, records):
        last, main, side = {}, [], []
        for r in records:
            got = int(r.value.split(b".")[0])
            if r.key in last:
                expected = (last[r.key] + self.keys) & U64_MAX
            else:
                expected = int(r.key) if r.key.isdigit() else U64_MAX
            if got != expected:
                alert = b"key %s: expected %d, got %d" % (r.key, expected, got)
                side.append(("alerts", r.key, alert, r.timestamp))
            last[r.key] = got
            main.append((r.key, r.value, r.timestamp))
        return main, side

    def end(self, records):
        return []

    def state(self, records):
        return {"last": ("value", {r.key: u64(int(r.value.split(b".")[0])) for r in records})}


# -- the scenario -------------------------------------------------------------


class Stream:
    """A seeded input: `batches` of records, and the watermark after each
    (never going back; behind the newest timestamp by a random lag)."""

    def __init__(self, example, seed):
        rng = random.Random(seed)
        records = example.records(rng)
        self.batches, self.watermarks = [], []
        watermark = -1
        for _ in range(BATCHES):
            batch = [next(records) for _ in range(rng.randrange(1, 30))]
            self.batches.append(batch)
            watermark = max(watermark, batch[-1].timestamp - rng.randrange(20_000))
            self.watermarks.append(watermark)

    def records(self, start, end):
        """The records of batches `start..end`, in order."""
        return [r for batch in self.batches[start:end] for r in batch]


class Run:
    """What one run showed: outputs, snapshots and the state calls made."""

    def __init__(self):
        self.committed = Output()  # what a transactional sink commits
        self.lost = Output()  # what the failed attempt emitted after the checkpoint
        self.snapshots = {}  # at the checkpoint, the failure, before and after the end
        self.batched_calls = 0
        self.single_calls = 0

    def count_calls(self, h):
        self.batched_calls += h.batched_state_calls
        self.single_calls += h.state_calls


def drive(example, stream, batched):
    """Runs `stream` through the scenario of the module docs."""
    run = Run()

    def step(h, i, out):
        out.extend(h.process(stream.batches[i]))
        out.extend(h.advance_watermark(stream.watermarks[i]))

    h = Harness(example.function, config=example.config, batched_state=batched)
    for i in range(CHECKPOINT_AFTER):
        step(h, i, run.committed)
    checkpoint = run.snapshots["checkpoint"] = h.snapshot()
    for i in range(CHECKPOINT_AFTER, CHECKPOINT_AFTER + LOST):
        step(h, i, run.lost)
    if example.ends_in_lost_attempt:
        run.lost.extend(h.advance_watermark(MAX_TIMESTAMP))
    run.snapshots["failure"] = h.snapshot()
    run.count_calls(h)

    h = Harness(example.function, config=example.config, restore=checkpoint, batched_state=batched)
    for i in range(CHECKPOINT_AFTER, BATCHES):
        step(h, i, run.committed)
    run.snapshots["before the end"] = h.snapshot()
    run.committed.extend(h.finish())
    run.snapshots["after the end"] = h.snapshot()
    run.count_calls(h)
    return run


def after(example, records, start):
    """What `example` emits for `records[start:]`, having seen `records[:start]`."""
    main, side = example.expect(records)
    main_before, side_before = example.expect(records[:start])
    return main[len(main_before) :], side[len(side_before) :]


def main(out):
    return [(r.key, r.value, r.timestamp) for r in out.main]


def side(out):
    return [(tag, r.key, r.value, r.timestamp) for tag, r in out.side]


class ExamplesMatchThePerCallPathTest(unittest.TestCase):
    def check(self, example):
        for seed in SEEDS:
            with self.subTest(seed=seed):
                stream = Stream(example, seed)
                self.assertTrue(
                    any(len({r.key for r in b}) < len(b) for b in stream.batches),
                    "some batch has several records of one key",
                )
                batched = drive(example, stream, batched=True)
                per_call = drive(example, stream, batched=False)

                # The two paths: the same bytes everywhere.
                for out in ("committed", "lost"):
                    self.assertEqual(main(getattr(batched, out)), main(getattr(per_call, out)), out)
                    self.assertEqual(side(getattr(batched, out)), side(getattr(per_call, out)), out)
                for at, snapshot in batched.snapshots.items():
                    self.assertEqual(snapshot, per_call.snapshots[at], f"state and timers {at}")
                self.assertGreater(batched.batched_calls, 0)
                self.assertEqual(per_call.batched_calls, 0)
                self.assertGreater(per_call.single_calls, batched.single_calls)
                # The failure lost work: the restore has something to undo.
                self.assertNotEqual(batched.snapshots["failure"], batched.snapshots["checkpoint"])

                # And what they agree on is right.
                everything = stream.records(0, BATCHES)
                expected_main, expected_side = example.expect(everything)
                expected_main += example.end(everything)
                self.assertEqual(main(batched.committed), expected_main)
                self.assertEqual(side(batched.committed), expected_side)
                self.assertTrue(expected_main or expected_side, "the run emits something")
                attempt = stream.records(0, CHECKPOINT_AFTER + LOST)
                checkpointed = len(stream.records(0, CHECKPOINT_AFTER))
                lost_main, lost_side = after(example, attempt, checkpointed)
                if example.ends_in_lost_attempt:
                    lost_main += example.end(attempt)
                self.assertEqual(main(batched.lost), lost_main)
                self.assertEqual(side(batched.lost), lost_side)
                final = batched.snapshots["after the end"]
                self.assertEqual(final.states, example.state(everything))
                self.assertEqual(final.timers, [], "the final watermark fired every timer")

    def test_word_count_emitting_updates(self):
        self.check(WordCount("updates"))

    def test_word_count_emitting_final_counts_on_timers(self):
        example = WordCount("final")
        self.check(example)
        # Its timers are state too: one per word at MAX_TIMESTAMP, restored.
        stream = Stream(example, 0)
        before_end = drive(example, stream, batched=True).snapshots["before the end"]
        words = sorted({r.key for r in stream.records(0, BATCHES)})
        self.assertEqual(before_end.timers, [(MAX_TIMESTAMP, w) for w in words])

    def test_fraud_detection(self):
        self.check(FraudDetect())

    def test_sequence_check(self):
        self.check(SequenceCheck())


if __name__ == "__main__":
    unittest.main()
