"""Operator metrics, reported by the host beside its own per-operator metrics.

Natively, inside ``weir_sdk.testing.Harness``, they are recorded
(``Harness.counters``, ``Harness.gauges``).
"""

from . import _host


def counter_add(name, delta=1):
    """Adds ``delta`` (a non-negative integer) to the counter ``name``."""
    _host.counter_add(name, delta)


def gauge_set(name, value):
    """Sets the gauge ``name`` to ``value``."""
    _host.gauge_set(name, float(value))
