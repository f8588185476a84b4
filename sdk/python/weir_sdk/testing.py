"""A native test harness: run an operator without Wasm, in plain unittest.

Owns :class:`Harness`, which drives a function class through the very
export a component uses (``weir_sdk.export``): ``open``, ``process`` with
packed batches, ``on-timer``, ``on-watermark``, ``close``,
``migrate-state`` (``migrate_state`` for one value, ``migrate_stored_state``
for everything stored, as ``weir upgrade`` does), and the window-function
calls (``add``, ``merge``, ``get_result``, ``process_window``, and the
host's whole round trips ``aggregate`` and ``merged_aggregate``), against an
in-memory host (keyed state, timers, log, metrics); :class:`Output`, what
each call emitted; :class:`Snapshot`, a checkpoint of that host
(:meth:`Harness.snapshot`) that a fresh instance starts from
(``Harness(fn, restore=snapshot)``); and :class:`OperatorFailed`, what a
failed call raises, carrying the message the host would report. The
module-level :func:`aggregate`, :func:`merged_aggregate` and
:func:`process_window` open a harness and make one such round trip.

Semantics kept from the host: state is scoped by the key passed with each
access; undeclared state ids and wrong kinds are errors; a timer fires once,
when the watermark reaches its time, in time order (then key order), with
the watermark already advanced; ``on_watermark`` follows the timers it made
due; emitted batches are checked like the host checks them (columns of one
length, lengths adding up to the data). Not emulated: key-group ownership
(``key-out-of-range``), state TTL, and resource limits.

Example::

    h = Harness(WordCount, config={"emit": "updates"})
    out = h.process([Record(b"a", b"a", 1), Record(b"b", b"b", 2)])
    assert out.values() == ["a\\t1", "b\\t1"]
    assert h.value_state("count", "a") == 1
    new_bytes = h.migrate_state("count", "1.0.0", old_bytes)  # as `weir upgrade` would

    # A checkpoint, then a failure: a new instance restored from it.
    checkpoint = h.snapshot()
    h = Harness(WordCount, config={"emit": "updates"}, restore=checkpoint)

    # Every state access its own host call (no value-get-many), to compare.
    per_call = Harness(WordCount, config={"emit": "updates"}, batched_state=False)

    # Window functions: the host's calls for one window of key "a", [0, 10).
    assert aggregate(WindowStats, "a", (0, 10), ["3", "4"], chunk=2) == b'{"key":"a",...}'
    out = process_window(WindowTop, "a", (0, 10), [("a", "3", 1), ("a", "4", 2)])
    assert out.main[0].timestamp == 9  # end - 1, as the host sets it
"""

import copy
import json

from . import _host
from . import operator as _runtime
from .operator import MAX_TIMESTAMP, MIN_TIMESTAMP, Record, Window, _Buffer, export


class OperatorFailed(Exception):
    """A call of the operator failed; ``message`` is what the host reports."""

    def __init__(self, call, message):
        super().__init__(f"{call} failed: {message}")
        self.call = call
        self.message = message


class Output:
    """What one or more calls emitted: ``main`` (a list of :class:`Record`)
    and ``side`` (a list of ``(tag, Record)`` in the order sent)."""

    def __init__(self):
        self.main = []
        self.side = []

    def values(self):
        """The main output's values as UTF-8 (invalid bytes replaced)."""
        return [r.value.decode("utf-8", "replace") for r in self.main]

    def side_output(self, tag):
        """The records of the side output ``tag``."""
        return [r for t, r in self.side if t == tag]

    def is_empty(self):
        """True if nothing was emitted."""
        return not self.main and not self.side

    def extend(self, other):
        """Appends ``other`` to this output."""
        self.main.extend(other.main)
        self.side.extend(other.side)

    def __repr__(self):
        return f"Output(main={self.main!r}, side={self.side!r})"


class Snapshot:
    """A checkpoint of the in-memory host, as :meth:`Harness.snapshot` takes
    it between two calls: ``states``, every declared state's stored entries
    by state name (``name -> (kind, store)``; a value store maps key bytes to
    value bytes, a list store to a list of elements, a map store to a dict
    of user key bytes to value bytes); the registered event-time and
    processing-time ``timers`` and ``processing_timers`` (sorted ``(time,
    key)`` pairs); the ``processing_time`` clock; and the ``watermark``.

    A deep copy: what the harness does afterwards changes nothing here.
    Snapshots compare equal when they hold the same bytes, so a test can
    compare two runs' whole state and timers at once."""

    __slots__ = ("states", "timers", "processing_timers", "processing_time", "watermark")

    def __init__(self, states, timers, processing_timers, processing_time, watermark):
        self.states = states
        self.timers = timers
        self.processing_timers = processing_timers
        self.processing_time = processing_time
        self.watermark = watermark

    def __eq__(self, other):
        return isinstance(other, Snapshot) and all(
            getattr(self, a) == getattr(other, a) for a in self.__slots__
        )

    __hash__ = None

    def __repr__(self):
        fields = ", ".join(f"{a}={getattr(self, a)!r}" for a in self.__slots__)
        return f"Snapshot({fields})"


def _no_batch_cache(states, batch):
    """``weir_sdk.operator.open_batch`` for ``batched_state=False``: never
    opens the batch cache, so every state access is its own host call."""
    return False


def _decode_batch(batch, what):
    """The records of an emitted ``batch``, checked as the host checks them."""
    ts, kls, vls, data = batch.timestamps, batch.key_lens, batch.value_lens, batch.data
    if not isinstance(data, bytes):
        raise AssertionError(f"{what}: data must be bytes, not {type(data).__name__}")
    if not len(ts) == len(kls) == len(vls):
        raise AssertionError(
            f"{what}: columns differ in length ({len(ts)}, {len(kls)}, {len(vls)})"
        )
    records, pos = [], 0
    for i, (t, kl, vl) in enumerate(zip(ts, kls, vls)):
        if kl < -1 or vl < 0:
            raise AssertionError(f"{what}: record {i} has an invalid length")
        key = None
        if kl >= 0:
            key = data[pos : pos + kl]
            pos += kl
        records.append(Record(key, data[pos : pos + vl], t))
        pos += vl
        if pos > len(data):
            raise AssertionError(f"{what}: record {i} runs past the end of data")
    if pos != len(data):
        raise AssertionError(f"{what}: lengths add up to {pos} bytes, data has {len(data)}")
    return records


def _flatten(value):
    """A config value as the host passes it: strings as they are, other
    scalars in TOML syntax, tables and arrays as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, separators=(",", ":"))


def _key(key):
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def _unpack(packed):
    """The entries of a WIT ``packed`` (None: absent), checked as the host
    checks them."""
    lens, data = packed.lens, packed.data
    if not isinstance(data, bytes):
        # componentize-py lowers `list<u8>` from `bytes` only.
        raise AssertionError(f"packed: data must be bytes, not {type(data).__name__}")
    entries, pos = [], 0
    for i, n in enumerate(lens):
        if n == -1:
            entries.append(None)
            continue
        if n < 0 or pos + n > len(data):
            raise _host.HostError(
                _host.StateError_Backend(
                    f"malformed packed list: entry {i} has length {n}, "
                    f"past the {len(data)} bytes of data"
                )
            )
        entries.append(data[pos : pos + n])
        pos += n
    if pos != len(data):
        raise _host.HostError(
            _host.StateError_Backend(
                f"malformed packed list: the lengths add up to {pos} bytes "
                f"but data holds {len(data)}"
            )
        )
    return entries


def _present(keys):
    """``keys`` (unpacked), none of them absent, as the host requires."""
    if None in keys:
        raise _host.HostError(_host.StateError_Backend("malformed packed list: an absent key"))
    return keys


#: The state functions that take one key (counted in ``_FakeHost.calls``).
_SINGLE_STATE_CALLS = (
    "value_get",
    "value_set",
    "list_get",
    "list_add",
    "map_get",
    "map_put",
    "map_remove",
    "map_entries",
    "clear",
)
#: The batched state functions (contract 0.1.3).
_BATCHED_STATE_CALLS = ("value_get_many", "value_set_many")


class _FakeHost:
    """The in-memory host: keyed state per declared state, timers, log, metrics.

    ``calls`` counts the state calls by function name (``value_get``,
    ``value_get_many``, ...)."""

    def __init__(self, kinds):
        self.kinds = kinds  # state id -> "value" | "list" | "map"
        self.stores = [{} for _ in kinds]
        self.calls = dict.fromkeys(_SINGLE_STATE_CALLS + _BATCHED_STATE_CALLS, 0)
        self.timers = set()  # (time, key)
        self.processing_timers = set()  # (time, key)
        self.processing_time = 0
        self.watermark = MIN_TIMESTAMP
        self.logs = []
        self.counters = {}
        self.gauges = {}

    def _store(self, state, kind):
        if not 0 <= state < len(self.kinds):
            raise _host.HostError(_host.StateError_UnknownState(state))
        if self.kinds[state] != kind:
            raise _host.HostError(_host.StateError_WrongKind(state))
        return self.stores[state]

    def value_get(self, state, key):
        self.calls["value_get"] += 1
        return self._store(state, "value").get(bytes(key))

    def value_set(self, state, key, value):
        self.calls["value_set"] += 1
        self._store(state, "value")[bytes(key)] = bytes(value)

    def value_get_many(self, state, keys):
        # As the host does it: a value-get per key, in order.
        self.calls["value_get_many"] += 1
        store = self._store(state, "value")
        lens, values = [], []
        for key in _present(_unpack(keys)):
            value = store.get(key)
            if value is None:
                lens.append(-1)
            else:
                lens.append(len(value))
                values.append(value)
        return _host.Packed(lens, b"".join(values))

    def value_set_many(self, state, keys, values):
        # As the host does it: a value-set (or, absent value, a clear) per key, in order.
        self.calls["value_set_many"] += 1
        keys, values = _present(_unpack(keys)), _unpack(values)
        if len(keys) != len(values):
            raise _host.HostError(
                _host.StateError_Backend(
                    f"malformed packed list: {len(keys)} keys but {len(values)} values"
                )
            )
        store = self._store(state, "value")
        for key, value in zip(keys, values):
            if value is None:
                store.pop(key, None)
            else:
                store[key] = value

    def list_get(self, state, key):
        self.calls["list_get"] += 1
        return list(self._store(state, "list").get(bytes(key), ()))

    def list_add(self, state, key, element):
        self.calls["list_add"] += 1
        self._store(state, "list").setdefault(bytes(key), []).append(bytes(element))

    def map_get(self, state, key, user_key):
        self.calls["map_get"] += 1
        return self._store(state, "map").get(bytes(key), {}).get(bytes(user_key))

    def map_put(self, state, key, user_key, value):
        self.calls["map_put"] += 1
        self._store(state, "map").setdefault(bytes(key), {})[bytes(user_key)] = bytes(value)

    def map_remove(self, state, key, user_key):
        self.calls["map_remove"] += 1
        self._store(state, "map").get(bytes(key), {}).pop(bytes(user_key), None)

    def map_entries(self, state, key):
        self.calls["map_entries"] += 1
        return sorted(self._store(state, "map").get(bytes(key), {}).items())

    def clear(self, state, key):
        self.calls["clear"] += 1
        if not 0 <= state < len(self.kinds):
            raise _host.HostError(_host.StateError_UnknownState(state))
        self.stores[state].pop(bytes(key), None)

    def register_event_timer(self, key, time):
        self.timers.add((time, bytes(key)))

    def delete_event_timer(self, key, time):
        self.timers.discard((time, bytes(key)))

    def register_processing_timer(self, key, time):
        self.processing_timers.add((time, bytes(key)))

    def delete_processing_timer(self, key, time):
        self.processing_timers.discard((time, bytes(key)))

    def current_processing_time(self):
        return self.processing_time

    def current_watermark(self):
        return self.watermark

    def log(self, level, message):
        self.logs.append((level, message))

    def counter_add(self, name, delta):
        if not isinstance(delta, int) or delta < 0:
            raise TypeError(f"counter `{name}`: delta must be a non-negative int (WIT u64)")
        self.counters[name] = self.counters.get(name, 0) + delta

    def gauge_set(self, name, value):
        self.gauges[name] = float(value)


class Harness:
    """Runs ``function`` (a function class, or a decorated function) as the
    host would, opened with ``config`` (a dict; values flattened like the
    host does) and the given ``operator_id``, ``subtask_index``,
    ``parallelism`` and ``max_parallelism``.

    ``restore``: a :class:`Snapshot` (:meth:`snapshot`) the host holds
    before ``open``, as when a task restarts from a checkpoint: the stored
    state (matched by state name; a state the snapshot lacks starts empty),
    the timers, the processing-time clock and the watermark. The operator
    is a new instance: nothing of the snapshotted harness's guest survives
    but what the host kept.

    ``batched_state=False``: the runtime never opens the batch cache of
    value states, so every state access is its own host call (``value-get``,
    ``value-set``, ``clear``), as before contract 0.1.3; to compare both
    paths (:attr:`batched_state_calls` stays 0).

    Raises :class:`OperatorFailed` if ``open`` fails."""

    def __init__(
        self,
        function,
        config=None,
        operator_id="op",
        subtask_index=0,
        parallelism=1,
        max_parallelism=128,
        restore=None,
        batched_state=True,
    ):
        self._function = function
        self._batched_state = batched_state
        self._operator = export(function)()
        runtime = type(self._operator).runtime_
        self.info = self._operator.describe()
        self._states = {s.name: s for s in runtime.states}
        self.host = _FakeHost([s.kind for s in runtime.states])
        if restore is not None:
            self._restore(restore)
        ctx = _OpenContextRecord(
            operator_id,
            subtask_index,
            parallelism,
            max_parallelism,
            [(k, _flatten(v)) for k, v in (config or {}).items()],
        )
        self._call("open", ctx)

    # -- driving the operator ------------------------------------------------

    def process(self, records):
        """Processes ``records`` (``Record``s or ``(key, value, timestamp)``
        tuples; str is encoded as UTF-8) as one batch."""
        buffer = _Buffer()
        for r in records:
            if isinstance(r, Record):
                buffer.emit(r.key, r.value, r.timestamp)
            else:
                buffer.emit(*r)
        return self._emitted("process", self._call("process", buffer.batch()))

    def advance_watermark(self, watermark):
        """Advances the watermark: fires the due timers in time order (then
        key order), then calls ``on_watermark``."""
        out = Output()
        self.host.watermark = max(self.host.watermark, watermark)
        while True:
            due = sorted(t for t in self.host.timers if t[0] <= self.host.watermark)
            if not due:
                break
            time, key = due[0]
            self.host.timers.discard(due[0])
            out.extend(self._emitted("on-timer", self._call("on_timer", key, time)))
        out.extend(self._emitted("on-watermark", self._call("on_watermark", self.host.watermark)))
        return out

    def process_input(self, input, records):
        """Processes ``records`` as one batch on input ``input`` (0 left, 1
        right) of a two-input operator."""
        buffer = _Buffer()
        for r in records:
            if isinstance(r, Record):
                buffer.emit(r.key, r.value, r.timestamp)
            else:
                buffer.emit(*r)
        return self._emitted(
            "process-input", self._call("process_input", input, buffer.batch())
        )

    def advance_processing_time(self, ms):
        """Moves the harness's processing-time clock (it starts at 0) forward
        by ``ms`` and fires the processing-time timers now due, in time order."""
        out = Output()
        self.host.processing_time += ms
        while True:
            due = sorted(t for t in self.host.processing_timers if t[0] <= self.host.processing_time)
            if not due:
                break
            time, key = due[0]
            self.host.processing_timers.discard(due[0])
            out.extend(
                self._emitted("on-processing-timer", self._call("on_processing_timer", key, time))
            )
        return out

    def close(self):
        """Calls ``close``."""
        return self._emitted("close", self._call("close"))

    def finish(self):
        """The end of bounded input, as the host does it: the final watermark
        (``MAX_TIMESTAMP``, firing every timer), then ``close``."""
        out = self.advance_watermark(MAX_TIMESTAMP)
        out.extend(self.close())
        return out

    # -- checkpoints -----------------------------------------------------------

    def snapshot(self):
        """A checkpoint of what the host keeps for this operator: every
        state's entries, the timers, the processing-time clock and the
        watermark (a :class:`Snapshot`, deep-copied). Taken between calls, as
        the host takes one at a barrier between batches: the SDK has written
        every batch's state back by then. Continue from it on a fresh
        instance with ``Harness(function, restore=snapshot)``."""
        host = self.host
        return Snapshot(
            {s.name: (s.kind, copy.deepcopy(host.stores[s.id])) for s in self._states.values()},
            sorted(host.timers),
            sorted(host.processing_timers),
            host.processing_time,
            host.watermark,
        )

    def _restore(self, snapshot):
        """Makes the host hold what ``snapshot`` holds (before ``open``)."""
        if not isinstance(snapshot, Snapshot):
            raise TypeError(f"restore takes a Snapshot (Harness.snapshot()), not {snapshot!r}")
        host = self.host
        for name, (kind, store) in snapshot.states.items():
            state = self._states.get(name)
            if state is None or state.kind != kind:
                raise ValueError(
                    f"restore: the snapshot's {kind} state `{name}` is not declared by "
                    f"{self.info.name} (declared: "
                    f"{[(s.name, s.kind) for s in self._states.values()]})"
                )
            host.stores[state.id] = copy.deepcopy(store)
        host.timers = set(snapshot.timers)
        host.processing_timers = set(snapshot.processing_timers)
        host.processing_time = snapshot.processing_time
        host.watermark = snapshot.watermark

    # -- migrating state (weir upgrade) ---------------------------------------

    def migrate_state(self, name, from_version, old):
        """What the component's ``migrate-state`` export returns for ``old``
        (bytes or str), one stored value of state ``name`` written by
        operator version ``from_version``: the state's ``migrate`` result,
        or ``old`` unchanged without one. Runs on a fresh, unopened instance,
        as the host does. A failed migration raises :class:`OperatorFailed`
        (call ``migrate-state``) with the message the upgrade would show."""
        fresh = export(self._function)()
        return self._call_on(fresh, "migrate_state", name, from_version, _key(old))

    def migrate_stored_state(self, from_version):
        """Migrates everything this harness stores, as ``weir upgrade`` does
        when the old operator was at ``from_version``: every value, list
        element and map value (not map user keys) of every declared state,
        on a fresh instance; nothing when ``from_version`` is this
        operator's version. Atomic: on a failure (:class:`OperatorFailed`)
        the stored state is left as it was."""
        if from_version == self.info.version:
            return
        migration = export(self._function)()

        def migrate(name, old):
            return self._call_on(migration, "migrate_state", name, from_version, old)

        stores = list(self.host.stores)
        for state in self._states.values():
            store = stores[state.id]
            if state.kind == "value":
                store = {k: migrate(state.name, v) for k, v in store.items()}
            elif state.kind == "list":
                store = {k: [migrate(state.name, e) for e in es] for k, es in store.items()}
            else:
                store = {
                    k: {uk: migrate(state.name, v) for uk, v in m.items()} for k, m in store.items()
                }
            stores[state.id] = store
        self.host.stores = stores

    # -- window functions (contract 0.1.3) -----------------------------------

    def window_kind(self):
        """What the component's ``kind`` says: ``"none"``, ``"aggregate"`` or
        ``"process-window"``."""
        return self._operator.kind().name.lower().replace("_", "-")

    def add(self, accumulators, targets, records):
        """The WIT ``add`` as the host calls it: record i of ``records``
        (``Record``s or ``(key, value, timestamp)`` tuples) into
        ``accumulators[targets[i]]`` (bytes, or None for a new window).
        Returns every accumulator's bytes, checked as the host checks them."""
        accumulators = [None if a is None else _key(a) for a in accumulators]
        out = self._call("add", accumulators, list(targets), _batch(records))
        _check_byte_list(out, "add", len(accumulators))
        return out

    def merge(self, pairs):
        """The WIT ``merge``: one merged accumulator per ``(a, b)`` pair of bytes."""
        pairs = [(_key(a), _key(b)) for a, b in pairs]
        out = self._call("merge", pairs)
        _check_byte_list(out, "merge", len(pairs))
        return out

    def get_result(self, windows):
        """The WIT ``get-result``: ``windows`` are ``(key, window,
        accumulator)`` (window a :class:`~weir_sdk.Window` or ``(start,
        end)``); one result value (bytes) per window."""
        accumulated = [
            _host.Accumulated(_key(k), _wit_window(w), _key(acc)) for k, w, acc in windows
        ]
        out = self._call("get_result", accumulated)
        _check_byte_list(out, "get-result", len(accumulated))
        return out

    def aggregate(self, key, window, records, chunk=1):
        """The result value (bytes) of an aggregate over ``records`` for the
        window ``window`` of ``key``, as the host computes it: ``add`` calls
        of ``chunk`` records each, the accumulator's bytes from one call
        passed to the next (``None`` to the first), then ``get-result``.

        A record is a ``Record``, a ``(key, value, timestamp)`` tuple, or a
        value alone (bytes or str: the key ``key``, the timestamp ``window``'s
        start)."""
        window = _window(window)
        acc = self._accumulate(_window_records(key, window, records), chunk)
        return self.get_result([(key, window, acc)])[0]

    def merged_aggregate(self, key, window, records_a, records_b):
        """The result value of an aggregate whose records came in two windows
        that then merged (session windows): one ``add`` call with the
        records of both, interleaved, ``records_a`` into one new accumulator
        and ``records_b`` into another; ``merge`` of the two; then
        ``get-result`` for ``window``."""
        window = _window(window)
        a = _window_records(key, window, records_a)
        b = _window_records(key, window, records_b)
        records, targets = [], []
        for i in range(max(len(a), len(b))):
            for target, half in ((0, a), (1, b)):
                if i < len(half):
                    records.append(half[i])
                    targets.append(target)
        acc_a, acc_b = self.add([None, None], targets, records)
        [merged] = self.merge([(acc_a, acc_b)])
        return self.get_result([(key, window, merged)])[0]

    def process_window(self, key, window, records):
        """What a process-window function emits when the window ``window``
        of ``key`` fires with ``records`` (as for :meth:`aggregate`): an
        :class:`Output` whose records have the timestamp ``end - 1``, as the
        host gives them."""
        window = _window(window)
        batch = _batch(_window_records(key, window, records))
        emitted = self._call("process_window", _key(key), _wit_window(window), batch)
        out = self._emitted("process-window", emitted)
        for record in out.main + [r for _, r in out.side]:
            record.timestamp = window.end - 1
        return out

    def _accumulate(self, records, chunk):
        """One accumulator's bytes after ``records``, ``chunk`` per ``add``."""
        if not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f"chunk must be a positive int, got {chunk!r}")
        acc = None
        for start in range(0, max(len(records), 1), chunk):
            part = records[start : start + chunk]
            [acc] = self.add([acc], [0] * len(part), part)
        return acc

    # -- inspecting and seeding state ----------------------------------------

    def _state(self, name, kind):
        state = self._states.get(name)
        if state is None:
            raise KeyError(f"state `{name}` is not declared (declared: {list(self._states)})")
        if state.kind != kind:
            raise KeyError(f"state `{name}` is a {state.kind} state, not a {kind} state")
        return state, self.host.stores[state.id]

    def value_state(self, name, key):
        """The value of ``name`` for ``key``, decoded with its codec (None if unset)."""
        state, store = self._state(name, "value")
        data = store.get(_key(key))
        return None if data is None else state.codec.decode(data)

    def set_value_state(self, name, key, value):
        """Sets the value of ``name`` for ``key`` (encoded with its codec)."""
        state, store = self._state(name, "value")
        store[_key(key)] = state.codec.encode(value)

    def list_state(self, name, key):
        """The list ``name`` for ``key``, decoded."""
        state, store = self._state(name, "list")
        return [state.codec.decode(e) for e in store.get(_key(key), ())]

    def map_state(self, name, key):
        """The map ``name`` for ``key`` as a dict, decoded."""
        state, store = self._state(name, "map")
        return {
            state.key_codec.decode(k): state.value_codec.decode(v)
            for k, v in store.get(_key(key), {}).items()
        }

    def state_bytes(self, name, key):
        """The raw stored bytes of a value state (what the host would store)."""
        return self._state(name, "value")[1].get(_key(key))

    def set_state_bytes(self, name, key, data):
        """Stores raw bytes in a value state, e.g. bytes another SDK wrote."""
        self._state(name, "value")[1][_key(key)] = bytes(data)

    @property
    def state_calls(self):
        """How many single-key state calls (``value-get``, ``value-set``,
        ``list-add``, ``clear``, ...) the operator has made so far."""
        return sum(self.host.calls[name] for name in _SINGLE_STATE_CALLS)

    @property
    def batched_state_calls(self):
        """How many batched state calls (``value-get-many``,
        ``value-set-many``; contract 0.1.3) the operator has made so far: a
        keyed batch costs at most one of each per value state it uses."""
        return sum(self.host.calls[name] for name in _BATCHED_STATE_CALLS)

    @property
    def state_call_counts(self):
        """The state calls made so far by function name (``"value_get"``,
        ``"value_get_many"``, ``"list_add"``, ...), a copy."""
        return dict(self.host.calls)

    @property
    def timers(self):
        """The registered timers as sorted ``(time, key)`` pairs."""
        return sorted(self.host.timers)

    @property
    def watermark(self):
        """The current watermark."""
        return self.host.watermark

    @property
    def logs(self):
        """``(level, message)`` pairs the operator logged."""
        return self.host.logs

    @property
    def counters(self):
        """Counter totals by name."""
        return self.host.counters

    @property
    def gauges(self):
        """Gauge values by name."""
        return self.host.gauges

    # -- plumbing -------------------------------------------------------------

    def _call(self, method, *args):
        return self._call_on(self._operator, method, *args)

    def _call_on(self, operator, method, *args):
        _host.install(self.host)
        per_call = not self._batched_state
        if per_call:
            batch_cache, _runtime.open_batch = _runtime.open_batch, _no_batch_cache
        try:
            return getattr(operator, method)(*args)
        except _host.HostError as e:
            raise OperatorFailed(method.replace("_", "-"), e.value) from None
        finally:
            if per_call:
                _runtime.open_batch = batch_cache

    def _emitted(self, call, emitted):
        out = Output()
        out.main = _decode_batch(emitted.main, f"{call}: main output")
        for side in emitted.side:
            for record in _decode_batch(side.records, f"{call}: side output `{side.tag}`"):
                out.side.append((side.tag, record))
        return out


def aggregate(function, key, window, records, chunk=1, config=None):
    """:meth:`Harness.aggregate` on a new harness of ``function`` opened with ``config``."""
    return Harness(function, config).aggregate(key, window, records, chunk)


def merged_aggregate(function, key, window, records_a, records_b, config=None):
    """:meth:`Harness.merged_aggregate` on a new harness of ``function``."""
    return Harness(function, config).merged_aggregate(key, window, records_a, records_b)


def process_window(function, key, window, records, config=None):
    """:meth:`Harness.process_window` on a new harness of ``function``."""
    return Harness(function, config).process_window(key, window, records)


def _window(window):
    """``window`` (a :class:`~weir_sdk.Window` or ``(start, end)``) as a Window."""
    if isinstance(window, Window):
        return window
    start, end = window
    return Window(start, end)


def _wit_window(window):
    window = _window(window)
    return _host.Window(window.start, window.end)


def _window_records(key, window, records):
    """``records`` as ``Record``s; a value alone gets ``key`` and the window's start."""
    out = []
    for r in records:
        if isinstance(r, Record):
            out.append(r)
        elif isinstance(r, (str, bytes, bytearray)):
            out.append(Record(_key(key), _key(r), window.start))
        else:
            k, v, t = r
            out.append(Record(None if k is None else _key(k), _key(v), t))
    return out


def _batch(records):
    """``records`` (``Record``s or ``(key, value, timestamp)`` tuples) as one WIT batch."""
    buffer = _Buffer()
    for r in records:
        if isinstance(r, Record):
            buffer.emit(r.key, r.value, r.timestamp)
        else:
            buffer.emit(*r)
    return buffer.batch()


def _check_byte_list(values, call, expected):
    """What the host checks of a ``list<list<u8>>`` result: its length, and
    (natively) that each entry is ``bytes``, the only type componentize-py lowers."""
    if len(values) != expected:
        raise AssertionError(f"{call}: returned {len(values)} values, expected {expected}")
    for i, v in enumerate(values):
        if type(v) is not bytes:
            raise AssertionError(f"{call}: value {i} is {type(v).__name__}, not bytes")


class _OpenContextRecord:
    """The WIT ``open-context`` record, as the host passes it."""

    def __init__(self, operator_id, subtask_index, parallelism, max_parallelism, config):
        self.operator_id = operator_id
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.config = config
