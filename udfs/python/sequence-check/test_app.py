"""Unit tests of the Python sequence-check, natively: `python3 -m unittest` here.

Needs sdk/python on the import path: the test adds it itself.
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../sdk/python"))

from app import SequenceCheck, number, rust_debug  # noqa: E402
from weir_sdk import Record  # noqa: E402
from weir_sdk.testing import Harness, OperatorFailed  # noqa: E402


def sequence(ns, keys):
    """The generator's records `n` (key `n % keys`, value `n`, timestamp `n`)."""
    return [Record(b"%d" % (n % keys), b"%d" % n, n) for n in ns]


def alerts(out):
    return [(r.key, r.value_str(), r.timestamp) for r in out.side_output("alerts")]


class SequenceCheckTest(unittest.TestCase):
    def test_an_unbroken_sequence_passes_through_without_alerts(self):
        h = Harness(SequenceCheck, config={"step": "3"})
        records = sequence(range(10), 3)
        out = h.process(records[:4])
        out.extend(h.process(records[4:]))
        self.assertEqual(out.main, records, "every record, unchanged")
        self.assertEqual(out.side, [])
        self.assertEqual([h.value_state("last", k) for k in "012"], [9, 7, 8])

    def test_lost_and_repeated_records_raise_alerts(self):
        h = Harness(SequenceCheck, config={"step": 2})  # an integer, as TOML may give it
        out = h.process(sequence([0, 1, 2, 5, 4, 4, 7, 9], 2))
        self.assertEqual(
            alerts(out),
            [
                (b"1", "key 1: expected 3, got 5", 5),  # 3 lost
                (b"0", "key 0: expected 6, got 4", 4),  # 4 repeated
            ],
        )
        self.assertEqual(len(out.main), 8, "alerted records pass through too")
        # The checker follows the sequence from the record it was given.
        self.assertEqual((h.value_state("last", "0"), h.value_state("last", "1")), (4, 9))

    def test_padded_values_and_keys_that_are_no_number(self):
        h = Harness(SequenceCheck, config={"step": "5"})
        out = h.process([Record(b"3", b"3....", 1), Record(b"3", b"8.", 2), Record(b"x", b"0", 3)])
        self.assertEqual(alerts(out), [(b"x", "key x: expected 18446744073709551615, got 0", 3)])
        self.assertEqual(out.main[0].value, b"3....")

    def test_last_is_a_u64_like_the_rust_one_and_wraps_as_its_release_build(self):
        h = Harness(SequenceCheck, config={"step": "2"})
        h.process(sequence([1], 2))
        self.assertEqual(h.state_bytes("last", "1"), (1).to_bytes(8, "little"))
        h.set_state_bytes("last", "1", ((1 << 64) - 1).to_bytes(8, "little"))
        self.assertEqual(alerts(h.process([Record(b"1", b"1", 7)])), [])  # u64::MAX + 2 wraps to 1

    def test_bad_config_and_bad_values_are_errors(self):
        for step in ("0", "-3", "x", "1_000"):
            with self.assertRaises(OperatorFailed) as failed:
                Harness(SequenceCheck, config={"step": step})
            self.assertEqual(failed.exception.message, "config `step`: expected a positive integer")
        with self.assertRaises(OperatorFailed) as failed:
            Harness(SequenceCheck)
        self.assertEqual(failed.exception.message, "config `step` is required but missing")
        h = Harness(SequenceCheck, config={"step": "1"})
        with self.assertRaises(OperatorFailed) as failed:
            h.process([Record(b"0", b'n\t"7"', 1)])
        self.assertEqual(failed.exception.message, 'not a sequence number: "n\\t\\"7\\""')

    def test_numbers_parse_as_rusts_u64(self):
        self.assertEqual(number(b"42"), 42)
        self.assertEqual(number(b"+42.."), 42)
        self.assertEqual(number(b"18446744073709551615"), (1 << 64) - 1)
        for bad in (b"", b".", b"+", b"-1", b" 1", b"1_0", b"18446744073709551616", "٣".encode()):
            self.assertIsNone(number(bad), bad)
        self.assertEqual(rust_debug("a\0\x1b\x7fé"), '"a\\0\\u{1b}\\u{7f}é"')


if __name__ == "__main__":
    unittest.main()
