"""`python3 -m unittest` in this folder: the window top-3 through the harness,
which makes the host's `process-window` call."""

import json
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../sdk/python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from app import WindowTop  # noqa: E402
from weir_sdk import MAX_TIMESTAMP, MIN_TIMESTAMP, Record  # noqa: E402
from weir_sdk.testing import Harness, OperatorFailed, process_window  # noqa: E402


def expected(key, window, values):
    """The one record's value, computed independently of the function."""
    numbers = [int(v) for v in values]
    top = []
    rest = list(numbers)
    while rest and len(top) < 3:  # selection, not sorting
        top.append(rest.pop(rest.index(max(rest))))
    return json.dumps(
        {"key": key, "start": window[0], "end": window[1], "count": len(numbers), "top": top},
        separators=(",", ":"),
        ensure_ascii=False,
    )


class WindowTopTest(unittest.TestCase):
    def test_is_a_process_window_function(self):
        h = Harness(WindowTop)
        self.assertEqual(h.window_kind(), "process-window")
        self.assertEqual(h.info.name, "window-top")

    def test_top_three_descending_with_duplicates(self):
        values = ["3", " 5", "1", "5 ", "-7"]
        out = process_window(WindowTop, "a", (0, 10), [("a", v, i) for i, v in enumerate(values)])
        self.assertEqual(out.values(), ['{"key":"a","start":0,"end":10,"count":5,"top":[5,5,3]}'])
        self.assertEqual(out.values(), [expected("a", (0, 10), values)])
        self.assertEqual(out.main, [Record(b"a", out.main[0].value, 9)])  # key, end - 1
        self.assertEqual(out.side, [])

    def test_fewer_than_three_records(self):
        for values in (["4"], ["-1", "2"]):
            out = process_window(WindowTop, "k", (20, 40), values)
            self.assertEqual(out.values(), [expected("k", (20, 40), values)])

    def test_random_windows(self):
        rng = random.Random(3)
        for n in (3, 10, 200):
            values = [str(rng.randint(-20, 20)) for _ in range(n)]
            out = process_window(WindowTop, "r", (1000, 2000), values)
            self.assertEqual(out.values(), [expected("r", (1000, 2000), values)])
            self.assertEqual(out.main[0].timestamp, 1999)

    def test_key_escaping_and_the_global_window(self):
        key = 'a "b" \\ ü'
        out = process_window(WindowTop, key, (MIN_TIMESTAMP, MAX_TIMESTAMP), ["1", "2"])
        self.assertEqual(out.values(), [expected(key, (MIN_TIMESTAMP, MAX_TIMESTAMP), ["1", "2"])])
        self.assertEqual(out.main[0].key, key.encode())

    def test_a_bad_value_is_an_error_naming_it(self):
        with self.assertRaises(OperatorFailed) as e:
            process_window(WindowTop, "a", (0, 10), ["1", "seven"])
        self.assertEqual(e.exception.call, "process-window")
        self.assertIn("`seven`", e.exception.message)


if __name__ == "__main__":
    unittest.main()
