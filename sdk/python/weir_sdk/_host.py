"""The only caller of the host imports: the WIT bindings inside a component,
swappable fakes natively.

Owns the module-level functions the rest of the SDK calls for keyed state,
timers, logging and metrics (``value_get``, ``register_event_timer``, ``log``,
...), the WIT record types an export returns (``Batch``, ``Emitted``,
``SideOutput``, ``OperatorInfo``, ``StateDescriptor``, ``StateKind``), and
``HostError``, what a failed host call raises (its ``value`` is one of the
``StateError_*`` cases), and ``Packed``, the flat byte strings of the
batched value-state calls ``value_get_many`` / ``value_set_many``
(contract 0.1.3). The types of the ``window-function`` export
(``WindowFunctionKind``, ``Window``, ``Accumulated``; contract 0.1.3) come
from the same place.

Inside a component (built by componentize-py, which generates the
``wit_world`` package from ``wit/operator.wit``) the functions *are* the
generated bindings: one host call each, nothing in between. Natively there
is no host: the functions raise until ``weir_sdk.testing`` installs its
in-memory fakes with :func:`install`.

Must not touch: operator logic. Everything here is plumbing.
"""

try:  # Inside a component.
    from componentize_py_types import Err as HostError
    from wit_world.imports import log as _wit_log
    from wit_world.imports import metrics as _wit_metrics
    from wit_world.imports import state as _wit_state
    from wit_world.imports.state import Packed
    from wit_world.imports import timers as _wit_timers
    from wit_world.imports.types import (
        Batch,
        Emitted,
        OperatorInfo,
        SideOutput,
        StateDescriptor,
        StateKind,
    )
    from wit_world.exports.window_function import (
        Accumulated,
        Window,
        WindowFunctionKind,
    )

    IN_COMPONENT = True

    value_get = _wit_state.value_get
    value_set = _wit_state.value_set
    value_get_many = _wit_state.value_get_many
    value_set_many = _wit_state.value_set_many
    list_get = _wit_state.list_get
    list_add = _wit_state.list_add
    map_get = _wit_state.map_get
    map_put = _wit_state.map_put
    map_remove = _wit_state.map_remove
    map_entries = _wit_state.map_entries
    clear = _wit_state.clear
    register_event_timer = _wit_timers.register_event_timer
    delete_event_timer = _wit_timers.delete_event_timer
    current_watermark = _wit_timers.current_watermark
    register_processing_timer = _wit_timers.register_processing_timer
    delete_processing_timer = _wit_timers.delete_processing_timer
    current_processing_time = _wit_timers.current_processing_time
    counter_add = _wit_metrics.counter_add
    gauge_set = _wit_metrics.gauge_set

    _LEVELS = {
        "trace": _wit_log.Level.TRACE,
        "debug": _wit_log.Level.DEBUG,
        "info": _wit_log.Level.INFO,
        "warn": _wit_log.Level.WARN,
        "error": _wit_log.Level.ERROR,
    }

    def log(level, message):
        _wit_log.log(_LEVELS[level], message)

except ImportError:  # Natively: plain Python stand-ins for the WIT types.
    import enum
    import sys

    IN_COMPONENT = False

    class HostError(Exception):
        """What a failed host call raises; ``value`` is the ``StateError_*`` case."""

        def __init__(self, value):
            super().__init__(value)
            self.value = value

    class StateKind(enum.Enum):
        VALUE = 0
        LIST = 1
        MAP = 2

    class _Record:
        """A WIT record: fields by keyword or position, compared by value."""

        __slots__ = ()

        def __init__(self, *args, **kwargs):
            for name, value in zip(self.__slots__, args):
                setattr(self, name, value)
            for name, value in kwargs.items():
                setattr(self, name, value)

        def __eq__(self, other):
            return type(self) is type(other) and all(
                getattr(self, n) == getattr(other, n) for n in self.__slots__
            )

        def __repr__(self):
            fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
            return f"{type(self).__name__}({fields})"

    class Batch(_Record):
        __slots__ = ("timestamps", "key_lens", "value_lens", "data")

    class SideOutput(_Record):
        __slots__ = ("tag", "records")

    class Packed(_Record):
        __slots__ = ("lens", "data")

    class Emitted(_Record):
        __slots__ = ("main", "side")

    class StateDescriptor(_Record):
        __slots__ = ("name", "kind", "ttl_ms")

    class OperatorInfo(_Record):
        __slots__ = ("name", "version", "keyed", "states")

    class WindowFunctionKind(enum.Enum):
        NONE = 0
        AGGREGATE = 1
        PROCESS_WINDOW = 2

    class Window(_Record):
        __slots__ = ("start", "end")

    class Accumulated(_Record):
        __slots__ = ("key", "window", "accumulator")

    def _no_host(*_args):
        raise RuntimeError(
            "no Weir host: outside a component, run the operator in weir_sdk.testing.Harness"
        )

    value_get = value_set = value_get_many = value_set_many = _no_host
    list_get = list_add = _no_host
    map_get = map_put = map_remove = map_entries = clear = _no_host
    register_event_timer = delete_event_timer = current_watermark = _no_host
    register_processing_timer = delete_processing_timer = current_processing_time = _no_host
    counter_add = gauge_set = _no_host

    def log(level, message):
        print(f"[{level}] {message}", file=sys.stderr)


class StateError_UnknownState:  # noqa: N801 (named like the WIT binding's case)
    def __init__(self, value):
        self.value = value


class StateError_WrongKind:  # noqa: N801
    def __init__(self, value):
        self.value = value


class StateError_KeyOutOfRange:  # noqa: N801
    pass


class StateError_Backend:  # noqa: N801
    def __init__(self, value):
        self.value = value


#: The names of the functions :func:`install` may replace.
HOST_FUNCTIONS = (
    "value_get",
    "value_set",
    "value_get_many",
    "value_set_many",
    "list_get",
    "list_add",
    "map_get",
    "map_put",
    "map_remove",
    "map_entries",
    "clear",
    "register_event_timer",
    "delete_event_timer",
    "current_watermark",
    "register_processing_timer",
    "delete_processing_timer",
    "current_processing_time",
    "log",
    "counter_add",
    "gauge_set",
)


def install(fake):
    """Routes every host function to the same-named method of ``fake``
    (natively, for ``weir_sdk.testing``)."""
    module = globals()
    for name in HOST_FUNCTIONS:
        module[name] = getattr(fake, name)


def explain(error):
    """What a host state (or timer) error means, as the Rust SDK words it.

    ``error`` is a ``HostError``; its ``value`` is a generated
    ``StateError_*`` case inside a component, or one of the classes above
    natively: both are told apart by class name.
    """
    case = getattr(error, "value", error)
    kind = type(case).__name__
    if kind.endswith("UnknownState"):
        return f"the host knows no state with id {case.value}"
    if kind.endswith("WrongKind"):
        return f"state id {case.value} is of another kind on the host"
    if kind.endswith("KeyOutOfRange"):
        return "the key belongs to a key group this subtask does not own"
    if kind.endswith("Backend"):
        return str(case.value)
    return repr(case)
