"""Keyed state: typed handles that are also the declaration.

Owns :class:`ValueState`, :class:`ListState` and :class:`MapState`,
:class:`ExplicitKey`, :class:`StateError`, and the batch cache of value
states (:func:`open_batch`, :func:`close_batch`). A keyed function declares its states as class
attributes::

    class WordCount(KeyedProcessFunction):
        count = ValueState("count", U64)

The declarations, in definition order, are the operator's
``describe().states`` (a state's id is its index there) and the attributes
are the handles. Flink's semantics: every access is scoped to the *current
key*, taken from the context passed in (``self.count.get(ctx)``): the
record's key in ``process_element``, the timer's in ``on_timer``. Values go
through the state's codec (``weir_sdk.codec``: the byte encoding every Weir
SDK shares).

A state may carry a **migration** (``migrate=``): a function
``migrate(from_version, old) -> bytes`` that rewrites one stored value (a
value state's value, a list element, a map value; never a map's user key)
written by an older version of the operator, when ``weir upgrade`` replaces
it in place. It gets and returns the *encoded* bytes, so it can read an old
encoding the state's codec no longer does (``U64.encode(U32.decode(old))``);
the runtime (``weir_sdk.operator``) calls it for the WIT ``migrate-state``.

Value states are read and written per *batch* (contract 0.1.3): while the
runtime has a batch open (:func:`open_batch`, a keyed ``process`` call), the
first ``get`` of a value state reads it for every key of the batch with one
``value-get-many``, later ``get``/``set``/``clear`` of the batch's keys stay
in memory, and :func:`close_batch` writes what changed back with one
``value-set-many`` per state. A record still sees the updates of the records
before it (Flink's per-record semantics). A key outside the batch (an
:class:`ExplicitKey`), calls without a batch (timers, watermarks, ``close``)
and list and map states make one host call per access.

Invariants: list and map states make one host call per access
(``ListState.update`` is a clear plus one add per element, as in the Rust
SDK); within a batch a value state makes at most one ``value-get-many`` and
one ``value-set-many``, and every change is written before the call returns
(also when it fails); a host error or a bad stored value raises
:class:`StateError` naming the state.

Must not touch: records and outputs (``weir_sdk.operator``).
"""

import struct

from . import _host
from .codec import BYTES, DecodeError, FixedWidth

_VALUE, _LIST, _MAP = "value", "list", "map"
_MISSING = object()


class StateError(Exception):
    """A state access failed: the host refused it, or the stored bytes do not
    decode. The message names the state, as the Rust SDK's does."""


class _State:
    """What every handle has: a name, a kind, a TTL, an optional migration
    and, once its class is defined, an id (its index among the class's
    declared states)."""

    __slots__ = ("name", "ttl_ms", "migrate", "id")
    kind = None

    def __init__(self, name, ttl_ms=None, migrate=None):
        if not isinstance(name, str) or not name:
            raise TypeError("a state needs a non-empty name (it addresses the state in savepoints)")
        if migrate is not None and not callable(migrate):
            raise TypeError(
                f"state `{name}`: migrate must be a function "
                "(from_version: str, old: bytes) -> bytes"
            )
        self.name = name
        self.ttl_ms = ttl_ms
        #: ``migrate(from_version, old) -> bytes`` or None (see the module docs).
        self.migrate = migrate
        self.id = None

    def clear(self, ctx):
        """Removes everything this state holds for the current key."""
        try:
            _host.clear(self.id, ctx.key)
        except _host.HostError as e:
            raise self._error(e) from None

    def _error(self, e):
        return StateError(f"state `{self.name}`: {_host.explain(e)}")

    def _decode(self, codec, data):
        try:
            return codec.decode(data)
        except DecodeError as e:
            raise StateError(f"state `{self.name}`: {e}") from None

    def __repr__(self):
        return f"{type(self).__name__}({self.name!r}, id={self.id})"


class ExplicitKey:
    """A key given explicitly, where a state method takes the context:
    ``self.count.get(ExplicitKey(b"other"))`` reads another key's value
    (``str`` is encoded as UTF-8). An escape hatch, as in the Rust SDK; the
    key must belong to this subtask's key groups."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key.encode("utf-8") if isinstance(key, str) else bytes(key)

    def __repr__(self):
        return f"ExplicitKey({self.key!r})"


class _Batch:
    """The keys of the batch being processed: ``keys`` (distinct, in order
    of first appearance, as a dict used as an ordered set) and, once a value
    state needs them, ``packed`` (their wire form for ``value-get-many``)."""

    __slots__ = ("keys", "packed")

    def __init__(self, keys):
        self.keys = keys
        self.packed = None

    def packed_keys(self):
        packed = self.packed
        if packed is None:
            keys = self.keys
            packed = self.packed = _host.Packed([len(k) for k in keys], b"".join(keys))
        return packed


class ValueState(_State):
    """One value per key (Flink's ``ValueState``).

    Within a batch (a keyed ``process`` call) the value state is cached for
    the batch's keys: the first ``get`` reads the state for all of them in
    one host call (``value-get-many``), later ``get``/``set``/``clear`` of
    those keys are served from memory, and the changes reach the host in one
    call (``value-set-many``) when the batch ends, also when it failed. Each
    host call costs microseconds from Python (measured in
    sdk/python/README.md), so a batch of N records costs two calls instead
    of 2N. Any other key (an :class:`ExplicitKey` outside the batch) and any
    call without a batch (timers, watermarks, ``close``) go to the host
    directly.
    """

    __slots__ = ("codec", "_batch", "_cache", "_dirty", "_fetched", "_pack", "_unpack")
    kind = _VALUE

    def __init__(self, name, codec=BYTES, ttl_ms=None, migrate=None):
        super().__init__(name, ttl_ms, migrate)
        self.codec = codec
        fixed = getattr(codec, "struct", None) if isinstance(codec, FixedWidth) else None
        self._pack = fixed.pack if fixed else None
        self._unpack = fixed.unpack if fixed else None
        self._reset(None)

    def _reset(self, batch):
        """Starts (``batch``) or ends (None) caching for a batch."""
        self._batch = batch
        self._cache = {}  # batch key -> encoded bytes, or None for "no value"
        self._dirty = {}  # batch key -> what to write back (None: clear)
        self._fetched = False

    def get(self, ctx, default=None):
        """The current key's value, or ``default`` if it has none."""
        key = ctx.key
        data = self._cache.get(key, _MISSING)
        if data is _MISSING:
            batch = self._batch
            if batch is not None and not self._fetched and key in batch.keys:
                self._fetch(batch)
                data = self._cache[key]
            else:  # no batch, or a key outside it
                try:
                    data = _host.value_get(self.id, key)
                except _host.HostError as e:
                    raise self._error(e) from None
        if data is None:
            return default
        unpack = self._unpack
        if unpack is not None:  # a fixed-width number: no Python frame to decode
            try:
                return unpack(data)[0]
            except struct.error:
                pass  # wrong length: let the codec say so
        try:
            return self.codec.decode(data)
        except DecodeError as e:
            raise StateError(f"state `{self.name}`: {e}") from None

    def set(self, ctx, value):
        """Sets the current key's value."""
        pack = self._pack
        if pack is not None:  # a fixed-width number: no Python frame to encode
            try:
                data = pack(value)
            except struct.error:
                data = self.codec.encode(value)  # raises EncodeError, naming the codec
        else:
            data = self.codec.encode(value)
        key = ctx.key
        batch = self._batch
        if batch is not None and key in batch.keys:
            self._cache[key] = self._dirty[key] = data
            return
        try:
            _host.value_set(self.id, key, data)
        except _host.HostError as e:
            raise self._error(e) from None

    def clear(self, ctx):
        """Removes the current key's value."""
        key = ctx.key
        batch = self._batch
        if batch is not None and key in batch.keys:
            # A value state's clear is a set to "no value": cached like one.
            self._cache[key] = self._dirty[key] = None
            return
        super().clear(ctx)

    def _fetch(self, batch):
        """Reads this state for every key of the batch in one host call;
        entries already set in this batch keep their new values."""
        try:
            got = _host.value_get_many(self.id, batch.packed_keys())
        except _host.HostError as e:
            raise self._error(e) from None
        keys, lens, data = batch.keys, got.lens, got.data
        if len(lens) != len(keys):
            raise StateError(
                f"state `{self.name}`: the host returned {len(lens)} values for {len(keys)} keys"
            )
        cache = self._cache
        pos = 0
        for key, n in zip(keys, lens):
            if n >= 0:
                end = pos + n
                cache.setdefault(key, data[pos:end])
                pos = end
            elif n == -1:
                cache.setdefault(key, None)
            else:
                pos = -1
                break
        if pos != len(data):
            raise StateError(f"state `{self.name}`: the host returned a malformed packed list")
        self._fetched = True

    def _flush(self):
        """Writes the batch's changes to the host in one call."""
        dirty = self._dirty
        if not dirty:
            return
        key_lens, value_lens, values = [], [], []
        for key, data in dirty.items():
            key_lens.append(len(key))
            if data is None:
                value_lens.append(-1)
            else:
                value_lens.append(len(data))
                values.append(data)
        keys = _host.Packed(key_lens, b"".join(dirty))
        try:
            _host.value_set_many(self.id, keys, _host.Packed(value_lens, b"".join(values)))
        except _host.HostError as e:
            raise self._error(e) from None


class ListState(_State):
    """A list of values per key (Flink's ``ListState``)."""

    __slots__ = ("codec",)
    kind = _LIST

    def __init__(self, name, codec=BYTES, ttl_ms=None, migrate=None):
        super().__init__(name, ttl_ms, migrate)
        self.codec = codec

    def get(self, ctx):
        """The current key's list, oldest first (empty if none)."""
        try:
            elements = _host.list_get(self.id, ctx.key)
        except _host.HostError as e:
            raise self._error(e) from None
        return [self._decode(self.codec, e) for e in elements]

    def add(self, ctx, element):
        """Appends ``element`` to the current key's list."""
        try:
            _host.list_add(self.id, ctx.key, self.codec.encode(element))
        except _host.HostError as e:
            raise self._error(e) from None

    def update(self, ctx, elements):
        """Replaces the current key's list with ``elements``."""
        self.clear(ctx)
        for element in elements:
            self.add(ctx, element)


class MapState(_State):
    """A map from user keys to values per key (Flink's ``MapState``)."""

    __slots__ = ("key_codec", "value_codec")
    kind = _MAP

    def __init__(self, name, key_codec=BYTES, value_codec=BYTES, ttl_ms=None, migrate=None):
        super().__init__(name, ttl_ms, migrate)
        self.key_codec = key_codec
        self.value_codec = value_codec

    def get(self, ctx, user_key, default=None):
        """The value under ``user_key`` in the current key's map, or ``default``."""
        try:
            data = _host.map_get(self.id, ctx.key, self.key_codec.encode(user_key))
        except _host.HostError as e:
            raise self._error(e) from None
        return default if data is None else self._decode(self.value_codec, data)

    def contains(self, ctx, user_key):
        """True if the current key's map has ``user_key``."""
        try:
            data = _host.map_get(self.id, ctx.key, self.key_codec.encode(user_key))
        except _host.HostError as e:
            raise self._error(e) from None
        return data is not None

    def put(self, ctx, user_key, value):
        """Puts ``value`` under ``user_key`` in the current key's map."""
        try:
            _host.map_put(
                self.id, ctx.key, self.key_codec.encode(user_key), self.value_codec.encode(value)
            )
        except _host.HostError as e:
            raise self._error(e) from None

    def remove(self, ctx, user_key):
        """Removes ``user_key`` from the current key's map."""
        try:
            _host.map_remove(self.id, ctx.key, self.key_codec.encode(user_key))
        except _host.HostError as e:
            raise self._error(e) from None

    def entries(self, ctx):
        """All ``(user_key, value)`` pairs of the current key's map, ordered by
        the user keys' encoded bytes."""
        try:
            entries = _host.map_entries(self.id, ctx.key)
        except _host.HostError as e:
            raise self._error(e) from None
        kc, vc = self.key_codec, self.value_codec
        return [(self._decode(kc, k), self._decode(vc, v)) for k, v in entries]

    def is_empty(self, ctx):
        """True if the current key's map has no entries."""
        return not self.entries(ctx)


def declared_states(cls):
    """The states declared as class attributes of ``cls`` and its bases, in
    definition order (bases first); assigns each its id. Names must be unique."""
    states = []
    for klass in reversed(cls.__mro__):
        for value in vars(klass).values():
            if isinstance(value, _State) and value not in states:
                states.append(value)
    seen = set()
    for index, state in enumerate(states):
        if state.name in seen:
            raise TypeError(f"state `{state.name}` is declared twice in {cls.__name__}")
        seen.add(state.name)
        state.id = index
    return states


def wit_descriptors(states):
    """The WIT ``state-descriptor`` list for ``describe``."""
    kinds = {
        _VALUE: _host.StateKind.VALUE,
        _LIST: _host.StateKind.LIST,
        _MAP: _host.StateKind.MAP,
    }
    return [_host.StateDescriptor(s.name, kinds[s.kind], s.ttl_ms) for s in states]


def open_batch(states, batch):
    """Opens the value-state cache of ``states`` (the value states among
    them) for a batch whose keys are those of ``batch`` (a WIT batch whose
    columns are checked; records without a key are skipped). Returns whether
    it opened one: not without value states. Pair with :func:`close_batch`."""
    values = [s for s in states if s.kind is _VALUE]
    if not values:
        return False
    keys = {}  # an ordered set
    data = batch.data
    pos = 0
    for kl, vl in zip(batch.key_lens, batch.value_lens):
        if kl >= 0:
            end = pos + kl
            keys[data[pos:end]] = None
            pos = end + vl
        else:
            pos += vl
    opened = _Batch(keys)
    for state in values:
        state._reset(opened)
    return True


def close_batch(states):
    """Writes back what the batch changed (one ``value-set-many`` per value
    state) and closes the cache, also when a write fails; raises the first
    failure (:class:`StateError`), after which no other state is written."""
    values = [s for s in states if s.kind is _VALUE]
    try:
        for state in values:
            state._flush()
    finally:
        for state in values:
            state._reset(None)
