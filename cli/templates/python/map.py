"""`{{name}}`: a map operator that uppercases each record's value.

`weir build` builds this module (`app`, which binds `Operator`) into a
component with componentize-py; `python3 -m unittest` runs test_app.py
natively.
"""

from weir_sdk import MapFunction, export


class Uppercase(MapFunction):
    NAME = "{{id}}"

    def map(self, record):
        return record.with_value(record.value_str().upper())


Operator = export(Uppercase)
