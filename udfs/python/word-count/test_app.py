"""Unit tests of the Python word-count, natively: `python3 -m unittest` here.

Needs sdk/python on the import path: the test adds it itself.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../sdk/python"))

from app import WordCount  # noqa: E402
from weir_sdk import MAX_TIMESTAMP, Record  # noqa: E402
from weir_sdk.testing import Harness, OperatorFailed  # noqa: E402


def words(*ws):
    return [Record(w.encode(), w.encode(), i) for i, w in enumerate(ws)]


class WordCountTest(unittest.TestCase):
    def test_final_counts_come_with_the_final_watermark(self):
        h = Harness(WordCount)
        self.assertTrue(h.process(words("a", "b", "a")).is_empty())
        self.assertTrue(h.process(words("a")).is_empty())
        self.assertEqual(len(h.timers), 2, "one timer per key")
        out = h.finish()
        self.assertEqual(out.values(), ["a\t3", "b\t1"])
        self.assertEqual(out.main[0].key, b"a")
        self.assertEqual(out.main[0].timestamp, MAX_TIMESTAMP)

    def test_updates_emit_on_every_record(self):
        h = Harness(WordCount, config={"emit": "updates"})
        out = h.process(words("a", "b", "a"))
        self.assertEqual(out.values(), ["a\t1", "b\t1", "a\t2"])
        self.assertEqual(out.main[2].timestamp, 2)
        self.assertEqual(h.timers, [])
        self.assertTrue(h.finish().is_empty())

    def test_bad_emit_mode_fails_open(self):
        with self.assertRaises(OperatorFailed) as failed:
            Harness(WordCount, config={"emit": "sometimes"})
        self.assertEqual(
            failed.exception.message,
            "config `emit`: expected `final` or `updates`, got `sometimes`",
        )

    def test_reads_the_count_the_rust_counter_wrote(self):
        # udfs/word-count (Rust) stores `count` as a u64, little-endian.
        h = Harness(WordCount, config={"emit": "updates"})
        h.set_state_bytes("count", "amen", (41).to_bytes(8, "little"))
        out = h.process(words("amen"))
        self.assertEqual(out.values(), ["amen\t42"])
        self.assertEqual(h.state_bytes("count", "amen"), b"\x2a\0\0\0\0\0\0\0")

    def test_an_upgrade_keeps_the_stored_counts(self):
        # `count` declares no migration: `weir upgrade` keeps its bytes as they are.
        h = Harness(WordCount)
        old = (41).to_bytes(8, "little")
        self.assertEqual(h.migrate_state("count", "0.0.1", old), old)

    def test_non_ascii_words_round_trip(self):
        h = Harness(WordCount, config={"emit": "updates"})
        out = h.process(words("οδυσσευς"))
        self.assertEqual(out.values(), ["οδυσσευς\t1"])
        self.assertEqual(out.main[0].key, "οδυσσευς".encode())


if __name__ == "__main__":
    unittest.main()
