"""Logging into the host's log, tagged by the host with the operator's uid
and subtask (``weir -v`` shows ``info`` and up).

``weir_sdk.log.info("opened")``, ``warn``, ``error``, ``debug``, ``trace``,
or ``log(level, message)`` with a level name. :class:`Handler` routes the
standard ``logging`` module here. Natively, inside ``weir_sdk.testing.Harness``,
messages are captured (``Harness.logs``); outside it they go to stderr.
"""

from . import _host

LEVELS = ("trace", "debug", "info", "warn", "error")


def log(level, message):
    """Writes ``message`` at ``level`` (one of :data:`LEVELS`)."""
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of {LEVELS}")
    _host.log(level, str(message))


def trace(message):
    """Writes ``message`` at trace level."""
    _host.log("trace", str(message))


def debug(message):
    """Writes ``message`` at debug level."""
    _host.log("debug", str(message))


def info(message):
    """Writes ``message`` at info level."""
    _host.log("info", str(message))


def warn(message):
    """Writes ``message`` at warn level."""
    _host.log("warn", str(message))


def error(message):
    """Writes ``message`` at error level."""
    _host.log("error", str(message))


def __getattr__(name):
    # `Handler` is made on first use: importing `logging` into every
    # component would grow its snapshot for operators that never use it.
    if name == "Handler":
        global Handler
        Handler = _make_handler()
        return Handler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _make_handler():
    import logging

    class Handler(logging.Handler):
        """A ``logging`` handler writing to the host's log:
        ``logging.getLogger().addHandler(weir_sdk.log.Handler())``."""

        def emit(self, record):
            if record.levelno >= logging.ERROR:
                level = "error"
            elif record.levelno >= logging.WARNING:
                level = "warn"
            elif record.levelno >= logging.INFO:
                level = "info"
            else:
                level = "debug"
            _host.log(level, self.format(record))

    Handler.__module__ = __name__
    return Handler
