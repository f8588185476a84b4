"""Unit test of {{name}}, natively: `python3 -m unittest` in this folder."""

import sys
import unittest

# The Python SDK, written out of the `weir` binary by `weir new`.
sys.path.insert(0, "{{sdk}}/sdk/python")

from app import Counter  # noqa: E402
from weir_sdk import Record  # noqa: E402
from weir_sdk.testing import Harness  # noqa: E402


class CounterTest(unittest.TestCase):
    def test_counts_per_key(self):
        h = Harness(Counter)
        out = h.process([Record(b"apple", b"apple", 1), Record(b"pear", b"pear", 2), Record(b"apple", b"apple", 3)])
        self.assertEqual(out.values(), ["apple\t1", "pear\t1", "apple\t2"])


if __name__ == "__main__":
    unittest.main()
