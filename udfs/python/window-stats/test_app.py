"""`python3 -m unittest` in this folder: the window stats through the harness,
which makes the host's wire calls (add, merge, get-result)."""

import json
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../sdk/python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from app import WindowStats  # noqa: E402
from weir_sdk import MAX_TIMESTAMP, MIN_TIMESTAMP, Window  # noqa: E402
from weir_sdk.testing import (  # noqa: E402
    Harness,
    OperatorFailed,
    aggregate,
    merged_aggregate,
)


def expected(key, window, values):
    """The result, computed independently of the function."""
    numbers = [int(v) for v in values]
    return json.dumps(
        {
            "key": key,
            "start": window[0],
            "end": window[1],
            "count": len(numbers),
            "sum": sum(numbers),
            "min": min(numbers),
            "max": max(numbers),
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


class WindowStatsTest(unittest.TestCase):
    def test_is_an_aggregate(self):
        h = Harness(WindowStats)
        self.assertEqual(h.window_kind(), "aggregate")
        self.assertEqual(h.info.name, "window-stats")
        self.assertFalse(h.info.keyed)

    def test_one_record_per_add(self):
        values = ["3", " 4 ", "-2\n", "+10"]
        records = [("a", v, i) for i, v in enumerate(values)]
        self.assertEqual(
            aggregate(WindowStats, "a", (0, 10), records),
            b'{"key":"a","start":0,"end":10,"count":4,"sum":15,"min":-2,"max":10}',
        )
        self.assertEqual(aggregate(WindowStats, "a", (0, 10), records), expected("a", (0, 10), values))

    def test_chunks_of_several_records_per_add(self):
        rng = random.Random(7)
        values = [str(rng.randint(-1000, 1000)) for _ in range(50)]
        for chunk in (2, 7, 50, 64):
            self.assertEqual(
                aggregate(WindowStats, "k", Window(100, 200), values, chunk=chunk),
                expected("k", (100, 200), values),
                f"chunk={chunk}",
            )

    def test_merged_session_windows(self):
        a, b = ["5", "1", "9"], ["-3", "7"]
        self.assertEqual(
            merged_aggregate(WindowStats, "user 1", (0, 30), a, b),
            expected("user 1", (0, 30), a + b),
        )
        self.assertEqual(
            merged_aggregate(WindowStats, "user 1", (0, 30), a, ["4"]),
            expected("user 1", (0, 30), a + ["4"]),
        )

    def test_key_is_json_escaped_and_global_window_bounds(self):
        key = 'quo"te\\ é\n'
        self.assertEqual(
            aggregate(WindowStats, key, (MIN_TIMESTAMP, MAX_TIMESTAMP), ["1"]),
            expected(key, (MIN_TIMESTAMP, MAX_TIMESTAMP), ["1"]),
        )

    def test_64_bit_extremes(self):
        values = [str(MAX_TIMESTAMP), str(MIN_TIMESTAMP)]
        self.assertEqual(aggregate(WindowStats, "x", (0, 1), values), expected("x", (0, 1), values))

    def test_many_windows_in_one_add(self):
        # As the host calls it: one batch, records for several windows.
        h = Harness(WindowStats)
        old = h.add([None], [0], [("b", "100", 1)])[0]
        accs = h.add([None, old, None], [2, 0, 2, 0], [("a", v, 1) for v in "1234"])
        self.assertEqual(accs[1], old)  # no record went to it: as given
        results = h.get_result(
            [("a", (0, 10), accs[0]), ("b", (0, 10), accs[1]), ("c", (0, 10), accs[2])]
        )
        self.assertEqual(
            results,
            [
                expected("a", (0, 10), ["2", "4"]),
                expected("b", (0, 10), ["100"]),
                expected("c", (0, 10), ["1", "3"]),
            ],
        )

    def test_a_bad_value_is_an_error_naming_it(self):
        for bad in ["12x", "", "1.5", "1_000", "99999999999999999999"]:
            with self.assertRaises(OperatorFailed) as e:
                aggregate(WindowStats, "a", (0, 10), ["1", bad])
            self.assertEqual(e.exception.call, "add")
            self.assertIn(f"`{bad}`", e.exception.message)

    def test_a_target_out_of_range_is_an_error(self):
        with self.assertRaises(OperatorFailed) as e:
            Harness(WindowStats).add([None], [1], [("a", "1", 1)])
        self.assertIn("targets accumulator 1", e.exception.message)


if __name__ == "__main__":
    unittest.main()
