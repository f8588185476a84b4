"""`python3 -m unittest` in this folder: the pair join through the harness."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../sdk/python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from app import PairJoin  # noqa: E402
from weir_sdk.testing import Harness  # noqa: E402


class PairJoinTest(unittest.TestCase):
    def test_each_pair_once_by_its_later_record(self):
        h = Harness(PairJoin)
        self.assertTrue(h.process_input(0, [("a", '{"i":1}', 1)]).is_empty())
        out = h.process_input(1, [("a", '{"i":2}', 2), ("b", '{"i":3}', 3)])
        self.assertEqual(out.values(), ['{"key":"a","left":{"i":1},"right":{"i":2}}'])


if __name__ == "__main__":
    unittest.main()
