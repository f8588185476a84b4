"""Unit test of {{name}}, natively: `python3 -m unittest` in this folder."""

import sys
import unittest

# The Python SDK, written out of the `weir` binary by `weir new`.
sys.path.insert(0, "{{sdk}}/sdk/python")

from app import Uppercase  # noqa: E402
from weir_sdk import Record  # noqa: E402
from weir_sdk.testing import Harness  # noqa: E402


class UppercaseTest(unittest.TestCase):
    def test_uppercases_values(self):
        h = Harness(Uppercase)
        out = h.process([Record(None, b"hello weir", 1), Record(b"k", "straße".encode(), 2)])
        self.assertEqual(out.values(), ["HELLO WEIR", "STRASSE"])


if __name__ == "__main__":
    unittest.main()
