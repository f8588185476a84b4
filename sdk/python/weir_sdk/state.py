"""Keyed state: typed handles that are also the declaration.

Owns :class:`ValueState`, :class:`ListState` and :class:`MapState` and
:class:`StateError`. A keyed function declares its states as class
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

Invariants: list and map states make one host call per access
(``ListState.update`` is a clear plus one add per element, as in the Rust
SDK); value states make at most one read and one write per key and call
(see :class:`ValueState`), and the runtime calls ``flush_states`` before a
call returns; a host error or a bad stored value raises :class:`StateError`
naming the state.

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


class ValueState(_State):
    """One value per key (Flink's ``ValueState``).

    Within one call, reads and writes go through a small write-back cache
    of encoded bytes: the first ``get`` of a key asks the host, later ones
    in the same call do not, and ``set``/``clear`` reach the host once per
    key when the call returns. The host buffers a call's writes and commits
    them when the call returns anyway, so this changes nothing it can see;
    it only saves boundary crossings, which cost microseconds each from
    Python (measured in sdk/python/README.md). The cache is dropped at the
    end of every call.
    """

    __slots__ = ("codec", "_cache", "_dirty", "_pack", "_unpack")
    kind = _VALUE

    def __init__(self, name, codec=BYTES, ttl_ms=None, migrate=None):
        super().__init__(name, ttl_ms, migrate)
        self.codec = codec
        fixed = getattr(codec, "struct", None) if isinstance(codec, FixedWidth) else None
        self._pack = fixed.pack if fixed else None
        self._unpack = fixed.unpack if fixed else None
        self._cache = {}  # key -> encoded bytes, or None for "no value"
        self._dirty = set()

    def get(self, ctx, default=None):
        """The current key's value, or ``default`` if it has none."""
        key = ctx.key
        data = self._cache.get(key, _MISSING)
        if data is _MISSING:
            try:
                data = _host.value_get(self.id, key)
            except _host.HostError as e:
                raise self._error(e) from None
            self._cache[key] = data
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
        self._cache[key] = data
        self._dirty.add(key)

    def clear(self, ctx):
        """Removes the current key's value."""
        key = ctx.key
        self._cache[key] = None
        self._dirty.add(key)

    def _flush(self):
        """Writes this call's changes to the host, then forgets the call."""
        cache, dirty = self._cache, self._dirty
        self._cache, self._dirty = {}, set()
        state = self.id
        try:
            for key in dirty:
                data = cache[key]
                if data is None:
                    _host.clear(state, key)
                else:
                    _host.value_set(state, key, data)
        except _host.HostError as e:
            raise self._error(e) from None

    def _discard(self):
        """Forgets the cache without writing (the call failed)."""
        self._cache, self._dirty = {}, set()


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


def flush_states(states):
    """Writes the value states' cached changes to the host (end of a call)."""
    for state in states:
        if state.kind is _VALUE:
            state._flush()


def discard_states(states):
    """Forgets the value states' caches without writing (a failed call)."""
    for state in states:
        if state.kind is _VALUE:
            state._discard()
