"""weir_sdk: write Weir stream operators in Python.

A Weir operator is a WebAssembly component implementing ``wit/operator.wit``
(``weir:operator@0.1.3``, world ``window-operator``). This package hides the contract behind Flink's
function classes, typed keyed state and one ``export`` call, the same shape
as the Rust SDK (``sdk/src``); componentize-py builds the module into a
component (see ``sdk/python/README.md``), and ``weir_sdk.testing`` runs the
same operator natively in plain ``python3 -m unittest``.

Writing an operator
-------------------

Subclass one function class (or decorate a plain function), then bind the
export to ``Operator`` at the top level of the module you build:

=========================  ========================================  ======================
class                      per call                                  decorator
=========================  ========================================  ======================
``MapFunction``            ``map(record) -> Record``                 ``@weir_sdk.map``
``FlatMapFunction``        ``flat_map(record, out)``                 ``@weir_sdk.flat_map``
``FilterFunction``         ``filter(record) -> bool``                ``@weir_sdk.filter``
``KeyedProcessFunction``   ``process_element(record, ctx)``,
                           ``on_timer(time, ctx)``, state, timers
=========================  ========================================  ======================

Each may define ``open(self, ctx)``: read the config there
(``ctx.config.get_bool("lowercase", True)``). A complete keyed operator::

    from weir_sdk import KeyedProcessFunction, ValueState, U64, MAX_TIMESTAMP, export

    class CountPerKey(KeyedProcessFunction):
        count = ValueState("count", U64)        # declared: describe() lists it

        def process_element(self, record, ctx):
            count = self.count.get(ctx)         # scoped to ctx.key
            if count is None:
                ctx.register_event_time_timer(MAX_TIMESTAMP)
            self.count.set(ctx, (count or 0) + 1)

        def on_timer(self, time, ctx):
            ctx.emit(ctx.key, b"%s=%d" % (ctx.key, self.count.get(ctx)), time)

    Operator = export(CountPerKey)

Records are :class:`Record` (``key`` bytes or None, ``value`` bytes,
``timestamp`` ms). Outputs go to a :class:`Collector` (``ctx`` is one):
``collect(record)``, ``emit(key, value, timestamp)``, and side outputs with
``output(tag, record)`` / ``emit_to(tag, key, value, timestamp)``.

An exception fails the call: the host fails the task with kind
``operator error`` and the message (``Type: message (at file:line in fn)``;
an :class:`Error`'s message as it is).

Window functions
----------------

The ``module`` of a window operator (an ``[[operator]]`` with a ``window``
table; the host assigns records to windows, keeps their state and fires
them) is an :class:`AggregateFunction` (``create_accumulator()``,
``add(acc, record) -> acc``, ``merge(a, b) -> acc``, ``get_result(key,
window, acc) -> bytes | str``; the accumulator crosses to the host as bytes
through the ``ACCUMULATOR`` codec, default ``JSON``) or a
:class:`ProcessWindowFunction` (``process_window(key, window, records,
out)``, or ``@weir_sdk.process_window``), exported with the same
``export``. ``window`` is a :class:`Window` (``start``, ``end``); the host
gives the results the timestamp ``end - 1``. ``weir_sdk.testing.aggregate``,
``merged_aggregate`` and ``process_window`` run one window through the
component's own export::

    class Total(AggregateFunction):
        ACCUMULATOR = I64

        def create_accumulator(self):
            return 0

        def add(self, acc, record):
            return acc + int(record.value)

        def merge(self, a, b):
            return a + b

        def get_result(self, key, window, acc):
            return str(acc)

    Operator = export(Total)

Every other function's ``window-function`` export says kind ``none``.

Migrating state on upgrade
--------------------------

When ``weir upgrade`` replaces an operator in place with one whose
``VERSION`` differs, the host rewrites every stored value (value, list
element, map value) of each state both versions declare through the WIT
``migration`` export, before ``open``. Give a state a function that gets
the old bytes and the old version and returns the new bytes::

    def widen_count(from_version, old):         # 1.x stored the count as a u32
        return U64.encode(U32.decode(old)) if from_version.startswith("1.") else old

    class CountPerKey(KeyedProcessFunction):
        VERSION = "2.0.0"
        count = ValueState("count", U64, migrate=widen_count)

A state without ``migrate`` keeps its bytes; an exception aborts the
upgrade (the job goes back to its old modules) with ``migrating state
`count` from version 1.0.0: ...``. ``Harness.migrate_state`` tests it.

Layout
------

- ``operator``: records, collectors, contexts, config, the function classes
  (window functions too), the decorators, and ``export`` with the runtime
  behind it (every WIT export of the world ``window-operator``).
- ``state``: ``ValueState``, ``ListState``, ``MapState`` (declaration,
  handle and migration; value states cached per batch), ``ExplicitKey``.
- ``codec``: the byte encoding of state values, shared by every Weir SDK
  (and ``JSON``, for accumulators).
- ``log`` and ``metrics``: the host's log and metrics.
- ``testing``: ``Harness``, the native test harness.
- ``_host``: the only caller of the host imports (fakes natively).
"""

from . import log, metrics
from .codec import (
    BOOL,
    BYTES,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    JSON,
    STR,
    U8,
    U16,
    U32,
    U64,
    UNIT,
    DecodeError,
    EncodeError,
)
from .operator import (
    MAX_TIMESTAMP,
    MIN_TIMESTAMP,
    AggregateFunction,
    Collector,
    Config,
    Error,
    FilterFunction,
    FlatMapFunction,
    KeyedContext,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    OpenContext,
    ProcessWindowFunction,
    Record,
    Window,
    current_watermark,
    export,
    filter,  # noqa: A004 (weir_sdk.filter, as in the Rust SDK)
    flat_map,
    map,  # noqa: A004
    process_window,
)
from .state import ExplicitKey, ListState, MapState, StateError, ValueState

__all__ = [
    "BOOL", "BYTES", "F32", "F64", "I8", "I16", "I32", "I64", "JSON", "STR", "U8", "U16",
    "U32", "U64", "UNIT", "DecodeError", "EncodeError", "MAX_TIMESTAMP", "MIN_TIMESTAMP",
    "AggregateFunction", "Collector", "Config", "Error", "FilterFunction", "FlatMapFunction",
    "KeyedContext", "KeyedCoProcessFunction", "KeyedProcessFunction", "MapFunction",
    "OpenContext", "ProcessWindowFunction", "Record", "Window", "current_watermark",
    "export", "filter", "flat_map", "map", "process_window", "ExplicitKey", "ListState",
    "MapState", "StateError", "ValueState", "log", "metrics",
]  # fmt: skip
