"""Functions, records, outputs, and the runtime that exports them.

Owns :class:`Record`, :class:`Collector` (one output buffer: the packed
batch columns built in bulk), :class:`KeyedContext`, :class:`Config`,
:class:`OpenContext`, the function base classes (:class:`MapFunction`,
:class:`FlatMapFunction`, :class:`FilterFunction`,
:class:`KeyedProcessFunction`, and the window functions
:class:`AggregateFunction` and :class:`ProcessWindowFunction` with their
:class:`Window`), the decorators ``map`` / ``flat_map`` / ``filter`` /
``process_window`` for plain functions, :class:`Error`, :func:`export`,
which turns a function into the class componentize-py exports as the WIT
``operator``, ``migration``, ``two-input``, ``processing-time`` and
``window-function`` interfaces, and :func:`component_exports_window`, which
the module built by ``build.sh`` uses to bind them all.

Invariants (the batch design of wit/operator.wit):

- one WIT call carries a whole batch; the runtime walks its flat ``data``
  buffer by the length columns and calls the function once per record,
  with no host call per record (only the state and timer calls the
  function itself makes);
- a keyed ``process`` (and ``process-input``) of a function with value
  states opens the batch cache of ``weir_sdk.state`` with the batch's keys
  and closes it, writing every change back, before the call returns, also
  when the function raised (then the function's exception is the call's
  failure); the other calls (timers, watermarks, ``close``) reach the host
  directly, so they see every batch's writes;
- outputs are appended to three lists and one ``bytearray`` per call and
  leave as one packed batch (plus one per side-output tag);
- an exception fails the call: it becomes the WIT ``err`` with the
  exception's message and a traceback summary, so the host fails the task
  with kind ``operator error`` (never a trap);
- a keyed function always runs with a key: a record without one is an error;
- ``migrate-state`` needs no ``open`` (the host calls it on a fresh
  instance): it runs the state's ``migrate`` function, or returns the old
  bytes as they are when the state has none or is not declared;
- every component exports ``window-function``: kind ``none`` (and an error
  for its other calls) unless the function is a window function, which in
  turn refuses the ``operator`` calls that carry records (``process``,
  ``process-input``, the timers); an aggregate's accumulators cross the
  boundary as bytes (``ACCUMULATOR`` codec) on every call, decoded once per
  call and window, encoded once when the call returns.

Must not touch: the host imports (``_host`` is their only caller).
"""

import os

from . import _host
from .codec import JSON, DecodeError, EncodeError
from .state import close_batch, declared_states, open_batch, wit_descriptors

#: The largest timestamp: the host's final watermark at the end of bounded
#: input, so a timer here fires once every record has been seen.
MAX_TIMESTAMP = (1 << 63) - 1
#: The smallest timestamp: the watermark before the first one arrives.
MIN_TIMESTAMP = -(1 << 63)


class Error(Exception):
    """An operator error whose message the host reports as it is (no
    traceback): raise it for conditions you explain yourself, such as a bad
    config value. Any other exception is reported with its type, message and
    a traceback summary."""


# ---------------------------------------------------------------------------
# Records and outputs


class Record:
    """One record: ``key`` (bytes, or None for no key), ``value`` (bytes) and
    ``timestamp`` (event time, ms since the Unix epoch).

    Input records hold copies of their bytes, so a function may keep them."""

    __slots__ = ("key", "value", "timestamp")

    def __init__(self, key, value, timestamp=0):
        self.key = key
        self.value = value
        self.timestamp = timestamp

    def value_str(self):
        """The value as UTF-8 (invalid bytes replaced)."""
        return self.value.decode("utf-8", "replace")

    def key_str(self):
        """The key as UTF-8 (invalid bytes replaced), or None."""
        return None if self.key is None else self.key.decode("utf-8", "replace")

    def with_value(self, value):
        """This record with another value (same key and timestamp)."""
        return Record(self.key, value, self.timestamp)

    def with_key(self, key):
        """This record with another key (same value and timestamp)."""
        return Record(key, self.value, self.timestamp)

    def __eq__(self, other):
        return (
            isinstance(other, Record)
            and self.key == other.key
            and self.value == other.value
            and self.timestamp == other.timestamp
        )

    def __repr__(self):
        return f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp})"


def _bytes(x, what):
    """``x`` as bytes-like: str is encoded as UTF-8."""
    if type(x) is str:
        return x.encode("utf-8")
    if isinstance(x, (bytes, bytearray, memoryview)):
        return x
    raise TypeError(f"a record {what} must be bytes or str, not {type(x).__name__}")


class _Buffer:
    """The columns of one output batch under construction."""

    __slots__ = ("timestamps", "key_lens", "value_lens", "data")

    def __init__(self):
        self.timestamps = []
        self.key_lens = []
        self.value_lens = []
        self.data = bytearray()

    def emit(self, key, value, timestamp):
        if key is None:
            self.key_lens.append(-1)
        else:
            if type(key) is not bytes:
                key = _bytes(key, "key")
            self.key_lens.append(len(key))
            self.data += key
        if type(value) is not bytes:
            value = _bytes(value, "value")
        self.value_lens.append(len(value))
        self.data += value
        self.timestamps.append(timestamp)

    def batch(self):
        # componentize-py lowers `list<u8>` from `bytes` only.
        return _host.Batch(self.timestamps, self.key_lens, self.value_lens, bytes(self.data))


class Collector:
    """Where a function's output goes: the main output (:meth:`collect`,
    :meth:`emit`) and side outputs by tag (:meth:`output`, :meth:`emit_to`).

    Keys and values may be ``bytes`` or ``str`` (encoded as UTF-8)."""

    __slots__ = ("_main", "_side")

    def __init__(self):
        self._main = _Buffer()
        self._side = {}

    def emit(self, key, value, timestamp):
        """Emits one record on the main output; ``key`` may be None."""
        self._main.emit(key, value, timestamp)

    def collect(self, record):
        """Emits ``record`` on the main output."""
        self._main.emit(record.key, record.value, record.timestamp)

    def emit_to(self, tag, key, value, timestamp):
        """Emits one record on the side output ``tag``."""
        buffer = self._side.get(tag)
        if buffer is None:
            buffer = self._side[tag] = _Buffer()
        buffer.emit(key, value, timestamp)

    def output(self, tag, record):
        """Emits ``record`` on the side output ``tag`` (Flink's ``ctx.output``)."""
        self.emit_to(tag, record.key, record.value, record.timestamp)

    def _take(self):
        """Everything emitted since the last take, as a WIT ``emitted``."""
        main, side = self._main, self._side
        self._main, self._side = _Buffer(), {}
        return _host.Emitted(
            main.batch(), [_host.SideOutput(tag, b.batch()) for tag, b in side.items()]
        )


class KeyedContext(Collector):
    """The current key, time, timers and outputs of a keyed call (Flink's
    ``Context`` / ``OnTimerContext``).

    ``key`` is the current key (the record's, or the firing timer's; bytes)
    and ``timestamp`` the record's timestamp or the timer's time. State
    handles take the context to scope their access to ``key``."""

    __slots__ = ("key", "timestamp")

    def __init__(self):
        super().__init__()
        self.key = b""
        self.timestamp = 0

    def register_event_time_timer(self, time):
        """Registers an event-time timer for the current key; it fires through
        ``on_timer`` once the watermark reaches ``time``. Registering the same
        timer twice is a no-op."""
        try:
            _host.register_event_timer(self.key, time)
        except _host.HostError as e:
            raise Error(f"register timer at {time}: {_host.explain(e)}") from None

    def delete_event_time_timer(self, time):
        """Deletes the current key's timer at ``time``, if registered."""
        try:
            _host.delete_event_timer(self.key, time)
        except _host.HostError as e:
            raise Error(f"delete timer at {time}: {_host.explain(e)}") from None

    def current_watermark(self):
        """The current event-time watermark of this subtask."""
        return _host.current_watermark()

    def register_processing_time_timer(self, time):
        """Registers a processing-time timer for the current key; it fires
        through ``on_processing_timer`` once the subtask's wall clock reaches
        ``time`` (ms since the epoch). Checkpointed with the state."""
        try:
            _host.register_processing_timer(self.key, time)
        except _host.HostError as e:
            raise Error(f"register processing-time timer at {time}: {_host.explain(e)}") from None

    def delete_processing_time_timer(self, time):
        """Deletes the current key's processing-time timer at ``time``, if registered."""
        try:
            _host.delete_processing_timer(self.key, time)
        except _host.HostError as e:
            raise Error(f"delete processing-time timer at {time}: {_host.explain(e)}") from None

    def current_processing_time(self):
        """The subtask's wall clock, ms since the epoch (the harness's clock in tests)."""
        return _host.current_processing_time()


def current_watermark():
    """The current event-time watermark of this subtask (``MIN_TIMESTAMP`` before the first)."""
    return _host.current_watermark()


# ---------------------------------------------------------------------------
# Open context and config

# Standard modules that only config parsing, `describe` and failures need are
# imported there, not here: what a module imports at build time is part of the
# component's snapshot (its size and its start-up).
_INT = r"[+-]?(0x[0-9a-fA-F_]+|0o[0-7_]+|0b[01_]+|[0-9_]+)"


class Config:
    """The operator's ``config`` table from the job spec, as the host
    flattened it: strings as they are, other scalars in TOML syntax, tables
    and arrays as JSON.

    Getters return ``default`` when the key is absent and raise
    :class:`Error` naming the key when the value has another type."""

    def __init__(self, entries=()):
        self._entries = dict(entries)

    def get_str(self, key, default=None):
        """The raw string value of ``key``."""
        return self._entries.get(key, default)

    def require_str(self, key):
        """The value of ``key``, which must be present."""
        if key not in self._entries:
            raise Error(f"config `{key}` is required but missing")
        return self._entries[key]

    def get_bool(self, key, default=None):
        """``key`` as a bool: ``true`` or ``false``."""
        return self._parse(
            key, default, "a bool (true or false)", {"true": True, "false": False}.get
        )

    def get_int(self, key, default=None):
        """``key`` as an integer (TOML syntax: ``1_000``, ``0x10``, ``0o7``, ``0b1``)."""

        import re

        def parse(v):
            if not re.fullmatch(_INT, v) or "__" in v or v.endswith("_"):
                return None
            sign, digits = (-1, v[1:]) if v[0] == "-" else (1, v.lstrip("+"))
            return sign * int(digits, 0) if digits[:1] != "_" else None

        return self._parse(key, default, "an integer", parse)

    def get_float(self, key, default=None):
        """``key`` as a float (TOML syntax: ``1.5``, ``1e3``, ``inf``, ``nan``;
        integers accepted)."""

        def parse(v):
            try:
                return float(v.replace("_", ""))
            except ValueError:
                return None

        return self._parse(key, default, "a number", parse)

    def get_json(self, key, default=None):
        """``key`` parsed as JSON (how the host passes tables and arrays)."""

        import json

        def parse(v):
            try:
                return json.loads(v)
            except ValueError:
                return None

        return self._parse(key, default, "JSON", parse)

    def items(self):
        """All ``(key, value)`` pairs."""
        return self._entries.items()

    def __contains__(self, key):
        return key in self._entries

    def __getitem__(self, key):
        return self.require_str(key)

    def __repr__(self):
        return f"Config({self._entries!r})"

    def _parse(self, key, default, expected, parse):
        raw = self._entries.get(key)
        if raw is None:
            return default
        value = parse(raw.strip())
        if value is None:
            raise Error(f"config `{key}`: expected {expected}, got `{raw}`")
        return value


class OpenContext:
    """What the host tells an operator instance when it opens: its uid
    (``operator_id``), ``subtask_index``, ``parallelism``,
    ``max_parallelism`` (the number of key groups) and ``config``."""

    __slots__ = ("operator_id", "subtask_index", "parallelism", "max_parallelism", "config")

    def __init__(
        self, operator_id="op", subtask_index=0, parallelism=1, max_parallelism=128, config=None
    ):
        self.operator_id = operator_id
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.config = config if isinstance(config, Config) else Config(config or ())

    def __repr__(self):
        return (
            f"OpenContext(operator_id={self.operator_id!r}, subtask_index={self.subtask_index}, "
            f"parallelism={self.parallelism}, config={self.config!r})"
        )


# ---------------------------------------------------------------------------
# The functions an author writes


class _Function:
    """What every function has: ``NAME`` and ``VERSION`` for ``weir inspect``
    (``NAME`` empty: the class name in kebab case, ``WordCount`` →
    ``word-count``) and ``open(ctx)``, called once before any record."""

    NAME = ""
    VERSION = "0.1.0"

    def open(self, ctx):
        """Called once before any record, with the :class:`OpenContext`."""


class MapFunction(_Function):
    """One record in, one record out (Flink's ``MapFunction``)."""

    def map(self, record):
        """Returns the record that replaces ``record``."""
        raise NotImplementedError


class FlatMapFunction(_Function):
    """One record in, zero or more out (Flink's ``FlatMapFunction``)."""

    def flat_map(self, record, out):
        """Emits any number of records for ``record`` into ``out`` (a :class:`Collector`)."""
        raise NotImplementedError


class FilterFunction(_Function):
    """Keeps the records for which ``filter`` returns true (Flink's ``FilterFunction``)."""

    def filter(self, record):
        """True to keep ``record``."""
        raise NotImplementedError


class KeyedProcessFunction(_Function):
    """Per-key logic with keyed state and event-time timers (Flink's
    ``KeyedProcessFunction``). Runs on a keyed stream only.

    Declare states as class attributes (``count = ValueState("count", U64)``);
    their methods take the :class:`KeyedContext`, whose ``key`` scopes the
    access."""

    def process_element(self, record, ctx):
        """Processes one record; ``ctx.key`` is its key."""
        raise NotImplementedError

    def on_timer(self, time, ctx):
        """A timer fired: ``ctx.key`` is the key it was registered for and
        ``time`` (also ``ctx.timestamp``) its time."""

    def on_processing_timer(self, time, ctx):
        """A processing-time timer fired: ``ctx.key`` is its key, ``time`` its time."""

    def on_watermark(self, watermark, out):
        """The watermark advanced (after due timers fired). No key is current here."""

    def close(self, out):
        """Called once after the last record. No key is current here."""


class KeyedCoProcessFunction(KeyedProcessFunction):
    """Per-key logic over two keyed inputs with shared state and timers
    (Flink's ``KeyedCoProcessFunction``): ``process_element1`` gets the
    records of the edges with ``input = "left"``, ``process_element2`` those
    with ``input = "right"``."""

    def process_element1(self, record, ctx):
        """Processes one record of the left input."""
        raise NotImplementedError

    def process_element2(self, record, ctx):
        """Processes one record of the right input."""
        raise NotImplementedError


# ---------------------------------------------------------------------------
# Window functions (contract 0.1.3): the user's function of a window operator


class Window:
    """A window ``[start, end)`` in ms of event time, as the host fired it.

    A count window's (``type = "global"``) spans the whole time line:
    ``start`` is ``MIN_TIMESTAMP``, ``end`` is ``MAX_TIMESTAMP``."""

    __slots__ = ("start", "end")

    def __init__(self, start, end):
        self.start = start
        self.end = end

    def max_timestamp(self):
        """``end - 1``: the last millisecond in the window, the timestamp the
        host gives the window's results."""
        return self.end - 1

    def __eq__(self, other):
        return isinstance(other, Window) and (self.start, self.end) == (other.start, other.end)

    def __hash__(self):
        return hash((self.start, self.end))

    def __repr__(self):
        return f"Window(start={self.start}, end={self.end})"


class AggregateFunction(_Function):
    """Incremental aggregation of a window's records (Flink's
    ``AggregateFunction``): the ``module`` of an ``[[operator]]`` with a
    ``window`` table. The host assigns records to windows and keeps one
    accumulator per key and window in its keyed backend; the function only
    computes:

    - ``create_accumulator()``: a new window's accumulator;
    - ``add(accumulator, record)``: returns the accumulator with ``record``
      (a :class:`Record`) added (may be the same object, changed);
    - ``merge(a, b)``: one accumulator of two (session windows that a
      record joined);
    - ``get_result(key, window, accumulator)``: the window's result value,
      ``bytes`` or ``str``; the host emits it with the key ``key`` (bytes)
      and the timestamp ``window.end - 1``.

    Between calls the accumulator is bytes on the host: ``ACCUMULATOR`` is
    the codec that makes it bytes and back (default :data:`~weir_sdk.codec.JSON`:
    numbers, strings, lists, dicts; tuples come back as lists)."""

    #: The accumulator's codec (any object with ``encode`` / ``decode``).
    ACCUMULATOR = JSON

    def create_accumulator(self):
        """A new, empty accumulator."""
        raise NotImplementedError

    def add(self, accumulator, record):
        """Returns ``accumulator`` with ``record`` added."""
        raise NotImplementedError

    def merge(self, a, b):
        """Returns one accumulator holding what ``a`` and ``b`` hold."""
        raise NotImplementedError

    def get_result(self, key, window, accumulator):
        """The result value (``bytes`` or ``str``) of the fired ``window``
        (a :class:`Window`) of ``key``."""
        raise NotImplementedError


class ProcessWindowFunction(_Function):
    """All records of a window at once, when it fires (Flink's
    ``ProcessWindowFunction``): the ``module`` of an ``[[operator]]`` with a
    ``window`` table. The host buffers the window's records in its keyed
    backend and calls ``process_window`` once per fired window."""

    def process_window(self, key, window, records, out):
        """The window ``window`` (a :class:`Window`) of ``key`` (bytes) fired:
        ``records`` are all its :class:`Record` s in arrival order. Emits any
        records into ``out`` (a :class:`Collector`; side outputs too); the
        host gives each the timestamp ``window.end - 1``
        (``window.max_timestamp()``)."""
        raise NotImplementedError


def _decorator(base, method):
    def decorate(fn):
        cls = type(
            fn.__name__,
            (base,),
            {
                method: staticmethod(fn),
                "NAME": fn.__name__.replace("_", "-"),
                "__doc__": fn.__doc__,
                "__module__": fn.__module__,
            },
        )
        return cls

    return decorate


#: ``@weir_sdk.map`` turns ``def f(record) -> Record`` into a :class:`MapFunction`.
map = _decorator(MapFunction, "map")  # noqa: A001 (the SDK's name for it)
#: ``@weir_sdk.flat_map`` turns ``def f(record, out)`` into a :class:`FlatMapFunction`.
flat_map = _decorator(FlatMapFunction, "flat_map")
#: ``@weir_sdk.filter`` turns ``def f(record) -> bool`` into a :class:`FilterFunction`.
filter = _decorator(FilterFunction, "filter")  # noqa: A001
#: ``@weir_sdk.process_window`` turns ``def f(key, window, records, out)`` into
#: a :class:`ProcessWindowFunction`.
process_window = _decorator(ProcessWindowFunction, "process_window")


# ---------------------------------------------------------------------------
# The runtime: WIT calls → function calls


def _kebab(name):
    import re

    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "-", name).lower().replace("_", "-")


def _records(batch):
    """Yields ``(key, value, timestamp)`` for every record of ``batch``,
    slicing the flat buffer by the length columns."""
    timestamps, key_lens, value_lens, data = (
        batch.timestamps,
        batch.key_lens,
        batch.value_lens,
        batch.data,
    )
    _check_columns(batch)
    pos = 0
    for ts, kl, vl in zip(timestamps, key_lens, value_lens):
        if kl < 0:
            key = None
        else:
            end = pos + kl
            key = data[pos:end]
            pos = end
        end = pos + vl
        yield key, data[pos:end], ts
        pos = end


def _check_columns(batch):
    """Checks what the host guarantees of an input batch, cheaply: the
    columns have one length and the lengths add up to the data."""
    n = len(batch.timestamps)
    if not n == len(batch.key_lens) == len(batch.value_lens):
        raise Error("bad input batch: its columns differ in length")
    # A key length of -1 (no key) adds -1 to the sum: count(-1) cancels it.
    total = sum(batch.value_lens) + sum(batch.key_lens) + batch.key_lens.count(-1)
    if total != len(batch.data):
        raise Error(f"bad input batch: lengths add up to {total} bytes, data has {len(batch.data)}")


class Runtime:
    """One operator instance driven by WIT calls: what :func:`export` and
    ``weir_sdk.testing.Harness`` call. Methods raise on failure; :func:`export`
    turns the exception into the WIT ``err``."""

    def __init__(self, function_class):
        for base in _FUNCTION_KINDS:
            if isinstance(function_class, type) and issubclass(function_class, base):
                self.kind = base
                break
        else:
            raise TypeError(
                f"{getattr(function_class, '__name__', function_class)} is not a MapFunction, "
                "FlatMapFunction, FilterFunction, KeyedProcessFunction, AggregateFunction "
                "or ProcessWindowFunction"
            )
        self.cls = function_class
        self.two_inputs = issubclass(function_class, KeyedCoProcessFunction)
        self.window = self.kind in (AggregateFunction, ProcessWindowFunction)
        if self.window and declared_states(function_class):
            raise TypeError(
                f"{function_class.__name__} declares keyed state, but a window function has "
                "none: the host keeps the window's state (the accumulator, or the records)"
            )
        self.states = declared_states(function_class) if self.kind is KeyedProcessFunction else []
        self.fn = None
        self.out = None

    def describe(self):
        cls = self.cls
        return _host.OperatorInfo(
            cls.NAME or _kebab(cls.__name__),
            cls.VERSION,
            self.kind is KeyedProcessFunction,
            wit_descriptors(self.states),
        )

    def open(self, ctx):
        fn = self.cls()
        fn.open(
            OpenContext(
                ctx.operator_id,
                ctx.subtask_index,
                ctx.parallelism,
                ctx.max_parallelism,
                Config(ctx.config),
            )
        )
        self.fn = fn
        self.out = KeyedContext() if self.kind is KeyedProcessFunction else Collector()

    def _opened(self):
        if self.fn is None:
            raise Error("operator called before a successful `open`")
        return self.fn

    def _begin(self):
        """Starts a call: drops what a failed call may have left behind."""
        fn = self._opened()
        self.out._take()
        return fn, self.out

    def _end(self):
        """Ends a successful call: outputs out."""
        return self.out._take()

    def _not_an_operator(self, call):
        """Refuses an ``operator`` call on a window function."""
        if self.window:
            raise Error(
                f"`{call}` called, but `{self.describe().name}` is a window function "
                f"({self.kind.__name__}): use it as the `module` of an [[operator]] "
                "with a `window` table"
            )

    def process_input(self, input, batch):
        """The WIT ``two-input.process-input``: input 0 is ``process``; input
        1 needs a :class:`KeyedCoProcessFunction`."""
        self._not_an_operator("process-input")
        if input == 0:
            return self.process(batch)
        if not self.two_inputs or input != 1:
            raise Error(
                f"this operator has one input, but a batch arrived on input {input} "
                '(`input = "right"` in the job spec needs a KeyedCoProcessFunction)'
            )
        return self.process(batch, self._opened().process_element2)

    def process(self, batch, element=None):
        if self.window:
            self._not_an_operator("process")
        fn, out = self._begin()
        kind = self.kind
        if kind is KeyedProcessFunction:
            process_element = element or (
                fn.process_element1 if self.two_inputs else fn.process_element
            )
            _check_columns(batch)
            # Value states are cached for the batch's keys (one
            # value-get-many and one value-set-many per state, see
            # weir_sdk.state); what changed is written back when the records
            # are done, also when one failed, as single calls would have.
            if open_batch(self.states, batch):
                try:
                    self._keyed_records(batch, process_element, out)
                except BaseException:
                    try:
                        close_batch(self.states)
                    except Exception:  # noqa: BLE001 (the function's failure is the one to report)
                        pass
                    raise
                close_batch(self.states)
            else:
                self._keyed_records(batch, process_element, out)
        elif kind is FlatMapFunction:
            flat_map = fn.flat_map
            for key, value, ts in _records(batch):
                flat_map(Record(key, value, ts), out)
        elif kind is MapFunction:
            map_ = fn.map
            emit = out._main.emit
            for key, value, ts in _records(batch):
                r = map_(Record(key, value, ts))
                emit(r.key, r.value, r.timestamp)
        else:
            filter_ = fn.filter
            keep = [bool(filter_(Record(k, v, t))) for k, v, t in _records(batch)]
            if all(keep):
                return _host.Emitted(batch, [])  # the input as it came
            emit = out._main.emit
            for (key, value, ts), kept in zip(_records(batch), keep):
                if kept:
                    emit(key, value, ts)
        return self._end()

    @staticmethod
    def _keyed_records(batch, process_element, out):
        """The hot loop of keyed operators: ``process_element`` per record of
        ``batch`` (columns checked), ``out`` scoped to its key."""
        new_record = object.__new__
        data = batch.data
        pos = 0
        for ts, kl, vl in zip(batch.timestamps, batch.key_lens, batch.value_lens):
            if kl < 0:
                raise Error(
                    f"record {batch.key_lens.index(kl)} of the batch has no key, "
                    "but this operator runs on a keyed stream"
                )
            end = pos + kl
            key = data[pos:end]
            pos = end + vl
            out.key = key
            out.timestamp = ts
            # Record(key, value, ts) without the Python frame of __init__.
            record = new_record(Record)
            record.key = key
            record.value = data[end:pos]
            record.timestamp = ts
            process_element(record, out)

    def on_timer(self, key, time):
        self._not_an_operator("on-timer")
        fn, out = self._begin()
        if self.kind is KeyedProcessFunction:
            out.key = key
            out.timestamp = time
            fn.on_timer(time, out)
        return self._end()

    def on_processing_timer(self, key, time):
        self._not_an_operator("on-processing-timer")
        fn, out = self._begin()
        if self.kind is KeyedProcessFunction:
            out.key = key
            out.timestamp = time
            fn.on_processing_timer(time, out)
        return self._end()

    def on_watermark(self, watermark):
        fn, out = self._begin()
        if self.kind is KeyedProcessFunction:
            out.key = None
            fn.on_watermark(watermark, out)
        return self._end()

    def close(self):
        fn, out = self._begin()
        if self.kind is KeyedProcessFunction:
            out.key = None
            fn.close(out)
        return self._end()

    # -- the WIT `window-function` export ------------------------------------

    def window_kind(self):
        """The WIT ``kind``: ``none`` unless this is a window function."""
        if self.kind is AggregateFunction:
            return _host.WindowFunctionKind.AGGREGATE
        if self.kind is ProcessWindowFunction:
            return _host.WindowFunctionKind.PROCESS_WINDOW
        return _host.WindowFunctionKind.NONE

    def _window_function(self, call, kind):
        """The opened function, if it is of ``kind``; else the error that says what it is."""
        if self.kind is not kind:
            name = self.describe().name
            if self.window:
                raise Error(
                    f"`{call}` called, but the window function `{name}` is "
                    f"{_a(self.kind.__name__)}, not {_a(kind.__name__)}"
                )
            raise Error(
                f"`{call}` called, but `{name}` is not a window function (it is "
                f"{_a(self.kind.__name__)}): the `module` of a window operator must be an "
                "AggregateFunction or a ProcessWindowFunction"
            )
        return self._opened()

    def _accumulator(self, data, what):
        """An accumulator's bytes, decoded with the function's codec."""
        try:
            return self.cls.ACCUMULATOR.decode(data)
        except DecodeError as e:
            raise Error(f"{what}: {e}") from None

    def _accumulator_bytes(self, accumulator, what):
        """An accumulator, encoded with the function's codec."""
        try:
            data = self.cls.ACCUMULATOR.encode(accumulator)
        except EncodeError as e:
            raise Error(f"{what}: {e}") from None
        # componentize-py lowers `list<u8>` from `bytes` only.
        return data if type(data) is bytes else bytes(data)

    def add(self, accumulators, targets, batch):
        """The WIT ``add``: record i into ``accumulators[targets[i]]`` (a
        ``None`` one created first), every accumulator back, in order."""
        fn = self._window_function("add", AggregateFunction)
        _check_columns(batch)
        n = len(accumulators)
        if len(targets) != len(batch.timestamps):
            raise Error(
                f"add: {len(targets)} targets for {len(batch.timestamps)} records "
                "(one target per record)"
            )
        add = fn.add
        live = {}  # index -> the decoded accumulator, once a record went to it
        new_record = object.__new__
        data = batch.data
        pos = 0
        for i, (target, ts, kl, vl) in enumerate(
            zip(targets, batch.timestamps, batch.key_lens, batch.value_lens)
        ):
            if kl < 0:
                key = None
            else:
                end = pos + kl
                key = data[pos:end]
                pos = end
            end = pos + vl
            record = new_record(Record)
            record.key = key
            record.value = data[pos:end]
            record.timestamp = ts
            pos = end
            acc = live.get(target, _NONE)
            if acc is _NONE:
                if not 0 <= target < n:
                    raise Error(
                        f"add: record {i} targets accumulator {target}, "
                        f"but {n} accumulator(s) were given"
                    )
                given = accumulators[target]
                if given is None:
                    acc = fn.create_accumulator()
                else:
                    acc = self._accumulator(given, f"add: accumulator {target}")
            acc = add(acc, record)
            if acc is None:
                raise Error(
                    f"{self.cls.__name__}.add returned None: it must return the "
                    "accumulator (add(accumulator, record) -> accumulator)"
                )
            live[target] = acc
        out = []
        for i, given in enumerate(accumulators):
            acc = live.get(i, _NONE)
            if acc is not _NONE:
                out.append(self._accumulator_bytes(acc, f"add: accumulator {i}"))
            elif given is None:
                out.append(self._accumulator_bytes(fn.create_accumulator(), f"add: accumulator {i}"))
            else:
                out.append(given if type(given) is bytes else bytes(given))
        return out

    def merge(self, pairs):
        """The WIT ``merge``: one merged accumulator per pair, in order."""
        fn = self._window_function("merge", AggregateFunction)
        out = []
        for i, (a, b) in enumerate(pairs):
            merged = fn.merge(
                self._accumulator(a, f"merge: pair {i}, first accumulator"),
                self._accumulator(b, f"merge: pair {i}, second accumulator"),
            )
            if merged is None:
                raise Error(f"{self.cls.__name__}.merge returned None: it must return the accumulator")
            out.append(self._accumulator_bytes(merged, f"merge: pair {i}"))
        return out

    def get_result(self, windows):
        """The WIT ``get-result``: one result value per fired window, in order."""
        fn = self._window_function("get-result", AggregateFunction)
        out = []
        for i, w in enumerate(windows):
            acc = self._accumulator(w.accumulator, f"get-result: window {i}")
            result = fn.get_result(bytes(w.key), Window(w.window.start, w.window.end), acc)
            if type(result) is str:
                result = result.encode("utf-8")
            elif isinstance(result, (bytearray, memoryview)):
                result = bytes(result)
            elif type(result) is not bytes:
                raise Error(
                    f"{self.cls.__name__}.get_result returned {type(result).__name__}, "
                    "not bytes or str"
                )
            out.append(result)
        return out

    def process_window(self, key, window, batch):
        """The WIT ``process-window``: every record of the fired window at once."""
        self._window_function("process-window", ProcessWindowFunction)
        fn, out = self._begin()
        records = [Record(k, v, t) for k, v, t in _records(batch)]
        fn.process_window(bytes(key), Window(window.start, window.end), records, out)
        return self._end()

    def migrate_state(self, name, from_version, old):
        """The WIT ``migrate-state``: the new bytes of one stored value of
        state ``name`` written by operator version ``from_version``. ``old``
        as it is when the state declares no ``migrate`` (or is unknown); a
        failing migration raises :class:`Error` naming the state."""
        state = next((s for s in self.states if s.name == name), None)
        if state is None or state.migrate is None:
            return old
        try:
            new = state.migrate(from_version, bytes(old))
        except BaseException as e:  # noqa: BLE001 (any failure aborts the upgrade, named)
            # A codec's message says all (`cannot decode u32: ...`), as in the Rust SDK.
            why = str(e) if isinstance(e, (DecodeError, EncodeError)) else failure_message(e)
            raise Error(f"migrating state `{name}` from version {from_version}: {why}") from None
        if isinstance(new, (bytearray, memoryview)):
            new = bytes(new)
        elif type(new) is not bytes:
            raise Error(
                f"migrating state `{name}` from version {from_version}: the migration returned "
                f"{type(new).__name__}, not bytes"
            )
        return new


#: The function classes an operator or window function may be, in the order checked.
_FUNCTION_KINDS = (
    KeyedProcessFunction,
    MapFunction,
    FlatMapFunction,
    FilterFunction,
    AggregateFunction,
    ProcessWindowFunction,
)

def _a(noun):
    """``noun`` with its indefinite article."""
    return ("an " if noun[0] in "AEIOU" else "a ") + noun


#: "No accumulator yet": unlike None, no value an accumulator can be.
_NONE = object()

_SDK_DIR = os.path.dirname(__file__)

#: How many innermost frames a failure message shows.
TRACEBACK_FRAMES = 4


def failure_message(exc):
    """The message the host reports for ``exc``: an :class:`Error`'s message
    as it is; for anything else ``Type: message`` and the innermost frames,
    e.g. ``ValueError: boom (at app.py:12 in process_element)``."""
    if isinstance(exc, Error):
        return str(exc)
    if isinstance(exc, _host.HostError):  # a host call's `err` nobody caught
        head = f"host error: {_host.explain(exc)}"
    else:
        text = str(exc)
        head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    # Walk the traceback by hand: the `traceback` module is not part of the
    # component (componentize-py bundles only what the module imports at
    # build time), and importing it here would fail inside the guest.
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((code.co_filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    # The SDK's own frames (the runtime, the export glue) say nothing to the
    # author; keep them only when the exception arose in the SDK itself.
    own = [f for f in frames if os.path.dirname(f[0]) != _SDK_DIR]
    frames = (own or frames)[-TRACEBACK_FRAMES:]
    where = " <- ".join(
        f"{_short_path(path)}:{line} in {name}" for path, line, name in reversed(frames)
    )
    return f"{head} (at {where})" if where else head


def _short_path(path):
    """The last two parts of ``path``, without componentize-py's numbered
    mount points (``/0/app.py`` → ``app.py``)."""
    parts = [p for p in path.split("/")[-2:] if p and not p.isdigit()]
    return "/".join(parts) or path


def export(function_class):
    """The class componentize-py exports as the WIT ``operator``,
    ``migration``, ``two-input``, ``processing-time`` and ``window-function``
    interfaces for ``function_class`` (a function class, or a function
    decorated with ``@map``/``@flat_map``/``@filter``/``@process_window``).
    Bind it to ``Operator`` at the top level of the module you build::

        Operator = weir_sdk.export(WordCount)

    (``build.sh`` binds the other exports to the same class, see
    :func:`component_exports_window`.) An operator's ``window-function``
    says kind ``none``; a window function (:class:`AggregateFunction`,
    :class:`ProcessWindowFunction`) answers ``describe`` and ``open`` and
    refuses the ``operator`` calls that carry records. componentize-py
    creates an ``Operator`` per call, so the operator instance lives in this
    closure: one per component, as the contract says.
    """
    runtime = Runtime(function_class)

    def guarded(name):
        def call(self, *args):
            try:
                return getattr(runtime, name)(*args)
            except BaseException as e:  # noqa: BLE001 (every failure becomes the WIT err)
                raise _host.HostError(failure_message(e)) from None

        call.__name__ = name
        return call

    class Operator:
        """The WIT ``operator``, ``migration``, ``two-input``,
        ``processing-time`` and ``window-function`` exports of ``function_class``."""

        runtime_ = runtime

        def describe(self):
            return runtime.describe()

        open = guarded("open")
        process = guarded("process")
        on_timer = guarded("on_timer")
        on_processing_timer = guarded("on_processing_timer")
        process_input = guarded("process_input")
        on_watermark = guarded("on_watermark")
        close = guarded("close")
        migrate_state = guarded("migrate_state")

        def kind(self):
            return runtime.window_kind()

        add = guarded("add")
        merge = guarded("merge")
        get_result = guarded("get_result")
        process_window = guarded("process_window")

    Operator.__qualname__ = Operator.__name__ = "Operator"
    return Operator


class _KeepState:
    """A ``migration`` export that keeps every stored value as it is: for an
    ``Operator`` written by hand, without ``migrate_state``."""

    def migrate_state(self, state, from_version, old):
        return old


class _OneInput:
    """A ``two-input`` export for an ``Operator`` written by hand: input 0 only."""

    def process_input(self, input, records):
        if input == 0:
            return _OPERATOR_OF_MODULE[0]().process(records)
        raise _host.HostError(f"this operator has one input, but a batch arrived on input {input}")


class _NoProcessingTimers:
    """A ``processing-time`` export for an ``Operator`` written by hand (it
    cannot have registered processing-time timers without one)."""

    def on_processing_timer(self, key, time):
        return _host.Emitted(_host.Batch([], [], [], b""), [])


class _NoWindowFunction:
    """A ``window-function`` export for an ``Operator`` written by hand: kind
    ``none``, and every other call an error."""

    def kind(self):
        return _host.WindowFunctionKind.NONE

    def _refuse(self, *_args):
        raise _host.HostError(
            "this module is not a window function: the `module` of a window operator must "
            "be an AggregateFunction or a ProcessWindowFunction"
        )

    add = merge = get_result = process_window = _refuse


#: The module's ``Operator`` class, for :class:`_OneInput`.
_OPERATOR_OF_MODULE = [None]


def component_exports_window(module):
    """``(Operator, Migration, TwoInput, ProcessingTime, WindowFunction)``:
    the classes componentize-py exports for the operator module ``module``
    (world ``window-operator``, what ``build.sh`` builds): an :func:`export`
    class implements all five; for a hand-written ``Operator``, the module's
    own bindings or stand-ins (a ``WindowFunction`` of kind ``none``)."""
    operator, migration, two_input, processing = component_exports_full(module)
    window = getattr(module, "WindowFunction", None) or (
        operator if hasattr(operator, "process_window") else _NoWindowFunction
    )
    return operator, migration, two_input, processing, window


def component_exports_full(module):
    """``(Operator, Migration, TwoInput, ProcessingTime)``: the classes
    componentize-py exports for the operator module ``module`` (world
    ``full-operator``): an :func:`export` class implements all four; for a
    hand-written ``Operator``, the module's own bindings or stand-ins."""
    operator, migration = component_exports(module)
    _OPERATOR_OF_MODULE[0] = operator
    two_input = getattr(module, "TwoInput", None) or (
        operator if hasattr(operator, "process_input") else _OneInput
    )
    processing = getattr(module, "ProcessingTime", None) or (
        operator if hasattr(operator, "on_processing_timer") else _NoProcessingTimers
    )
    return operator, migration, two_input, processing


def component_exports(module):
    """``(Operator, Migration)``: the classes componentize-py exports for the
    operator module ``module`` (world ``stream-operator-with-migration``).

    ``Operator`` is what the module binds; ``Migration`` is what it binds
    too, if it does, else that same ``Operator`` (an :func:`export` class
    implements both interfaces), else a class keeping every stored value as
    it is. ``build.sh`` builds a module that does only this, so an operator
    module binds ``Operator`` alone, as it always did.
    """
    operator = getattr(module, "Operator", None)
    if operator is None:
        raise Error(
            f"{module.__name__} binds no `Operator`: add `Operator = weir_sdk.export(YourFunction)`"
        )
    migration = getattr(module, "Migration", None)
    if migration is None:
        migration = operator if hasattr(operator, "migrate_state") else _KeepState
    return operator, migration
