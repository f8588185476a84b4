"""Unit tests of the Python fraud-detect, natively: `python3 -m unittest` here."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../sdk/python"))

from app import FraudDetect, rust_f64  # noqa: E402
from weir_sdk import Record  # noqa: E402
from weir_sdk.testing import Harness, OperatorFailed  # noqa: E402


def txn(account, amount):
    return f'{{"account":"{account}","amount":{amount}}}'


class FraudDetectTest(unittest.TestCase):
    def test_small_then_large_within_a_minute_alerts(self):
        h = Harness(FraudDetect)
        small, large, medium = txn("a", 0.5), txn("a", 600.25), txn("a", 100.0)
        out = h.process(
            [
                Record(b"acct-1", small, 1_000),
                Record(b"acct-2", large, 1_500),  # other account: no flag
                Record(b"acct-1", large, 61_000),  # exactly 60 s later: alert
            ]
        )
        self.assertEqual(
            out.values(),
            ['{"account":"acct-1","small_ts":1000,"large_ts":61000,"amount":600.25}'],
        )
        self.assertEqual(out.main[0].key, b"acct-1")
        self.assertEqual(out.main[0].timestamp, 61_000)
        self.assertIsNone(h.value_state("small-ts", "acct-1"), "flag cleared")

        # Too late, or a medium transaction in between: no alert.
        out = h.process(
            [
                Record(b"acct-1", small, 100_000),
                Record(b"acct-1", large, 160_001),
                Record(b"acct-1", small, 200_000),
                Record(b"acct-1", medium, 200_001),
                Record(b"acct-1", large, 200_002),
            ]
        )
        self.assertTrue(out.is_empty())

        # A small transaction re-arms the flag; the amount prints shortest.
        out = h.process(
            [
                Record(b"acct-1", small, 300_000),
                Record(b"acct-1", small, 300_001),
                Record(b"acct-1", txn("a", 501.0), 300_002),
            ]
        )
        self.assertEqual(
            out.values(),
            ['{"account":"acct-1","small_ts":300001,"large_ts":300002,"amount":501}'],
        )

    def test_flag_is_an_i64_like_the_rust_one(self):
        h = Harness(FraudDetect)
        h.process([Record(b"acct-1", txn("a", 0.5), 1_000)])
        self.assertEqual(h.state_bytes("small-ts", "acct-1"), (1000).to_bytes(8, "little"))
        # A flag the Rust operator wrote is honoured.
        h.set_state_bytes("small-ts", "acct-9", (5_000).to_bytes(8, "little", signed=True))
        out = h.process([Record(b"acct-9", txn("a", 900), 6_000)])
        self.assertEqual(len(out.main), 1)

    def test_malformed_json_is_an_error(self):
        h = Harness(FraudDetect)
        with self.assertRaises(OperatorFailed) as failed:
            h.process([Record(b"a", b"not json", 1)])
        self.assertTrue(failed.exception.message.startswith("bad transaction 'not json'"))

    def test_amounts_print_like_rust(self):
        self.assertEqual(rust_f64(600.25), "600.25")
        self.assertEqual(rust_f64(501.0), "501")
        self.assertEqual(rust_f64(0.1 + 0.2), "0.30000000000000004")
        self.assertEqual(rust_f64(1e21), "1000000000000000000000")
        self.assertEqual(rust_f64(1e-7), "0.0000001")
        self.assertEqual(rust_f64(-0.0), "-0")


if __name__ == "__main__":
    unittest.main()
