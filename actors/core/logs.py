"""Fore's logging: structlog events, delivered through the standard ``logging`` module.

Fore is a library that runs inside other people's processes, so its logging
follows the stdlib rules for libraries:

* Every Fore module logs through :func:`get_logger`: a structlog logger
  wrapped over ``logging.getLogger("fore.…")`` with Fore's own short
  processor chain. structlog's *global* configuration belongs to the host
  application and is neither read nor changed, so a host that configured
  structlog keeps its processors, and Fore's events do not pass through them.
* An event becomes one ``logging.LogRecord`` on a ``fore.*`` logger. Its
  message is the event name followed by ``key=value`` pairs, so any handler
  prints something useful; ``record.fore_event`` holds the event name and
  ``record.fore`` the event's fields, for handlers that want structure; an
  exception travels as the record's ``exc_info``. A host's handlers, levels
  and filters, and pytest's ``caplog``, see Fore's events like any others.
* Nothing is configured unless asked. The ``fore`` logger gets a
  ``NullHandler`` (as the logging HOWTO asks of libraries) and nothing else;
  :func:`configure_logging` -- called by the ``fore`` CLI, never by
  ``Runtime()`` -- attaches one handler to the ``fore`` logger that renders
  console lines or JSON lines. Fore never touches the root logger, the
  ``pykka`` logger or any other library's.

A disabled level costs one ``isEnabledFor`` check (stdlib caches it): the
event is not even built.
"""

from __future__ import annotations

import json as _json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import IO, Any

import structlog

ROOT_LOGGER = "fore"
"""Every Fore logger is ``fore`` or below it."""

logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())


def _value(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return _json.dumps(text, ensure_ascii=False)
    return text


def _to_stdlib(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The last processor: turn the event into one stdlib ``LogRecord``'s arguments."""
    exc_info = event_dict.pop("exc_info", None)
    stack_info = bool(event_dict.pop("stack_info", False))
    event = str(event_dict.pop("event", ""))
    fields = dict(event_dict)
    message = event
    if fields:
        message += " " + " ".join(f"{key}={_value(value)}" for key, value in fields.items())
    kwargs: dict[str, Any] = {
        "extra": {"fore_event": event, "fore": fields},
        "stacklevel": 4,
    }
    if exc_info:
        kwargs["exc_info"] = exc_info
    if stack_info:
        kwargs["stack_info"] = True
    # No args: the message is never %-formatted, whatever characters it holds.
    return (message,), kwargs


_PROCESSORS: list[Any] = [structlog.contextvars.merge_contextvars, _to_stdlib]


class ForeLogger(structlog.stdlib.BoundLogger):
    """A stdlib-backed structlog logger that skips disabled levels at once."""

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.DEBUG):
            return super().debug(event, *args, **kw)
        return None

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.INFO):
            return super().info(event, *args, **kw)
        return None

    def warning(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.WARNING):
            return super().warning(event, *args, **kw)
        return None

    warn = warning

    def error(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.ERROR):
            return super().error(event, *args, **kw)
        return None

    def exception(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.ERROR):
            kw.setdefault("exc_info", True)
            return super().error(event, *args, **kw)
        return None

    def critical(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if self._logger.isEnabledFor(logging.CRITICAL):
            return super().critical(event, *args, **kw)
        return None

    def bind(self, **new_values: Any) -> ForeLogger:
        return super().bind(**new_values)


def get_logger(name: str, **initial: Any) -> ForeLogger:
    """A Fore logger on the stdlib logger ``name`` (which must be under ``fore``)."""
    if name != ROOT_LOGGER and not name.startswith(ROOT_LOGGER + "."):
        name = f"{ROOT_LOGGER}.{name}"
    return ForeLogger(logging.getLogger(name), _PROCESSORS, dict(initial))


# -- what the CLI asks for ---------------------------------------------------------


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is *now* (test runners swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}


def _timestamp(record: logging.LogRecord) -> str:
    seconds = int(record.created)
    micros = int((record.created - seconds) * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


class ConsoleFormatter(logging.Formatter):
    """``2026-01-01T00:00:00.000000Z [warning ] event  key=value …`` (plus a traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "fore_event", None)
        fields: Mapping[str, Any] = getattr(record, "fore", None) or {}
        if event is None:  # a plain stdlib record (another library through this handler)
            event, fields = record.getMessage(), {"logger": record.name}
        line = f"{_timestamp(record)} [{record.levelname.lower():<8s}] {event}"
        if fields:
            pairs = " ".join(f"{key}={_value(value)}" for key, value in fields.items())
            line = f"{line:<60s} {pairs}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: timestamp, level, logger, event and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        event = getattr(record, "fore_event", None)
        fields: Mapping[str, Any] = getattr(record, "fore", None) or {}
        entry: dict[str, Any] = {
            "timestamp": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage() if event is None else event,
        }
        for key, value in fields.items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _json.dumps(entry, default=repr, ensure_ascii=False)


_lock = threading.Lock()
_handler: logging.Handler | None = None


def configure_logging(
    *,
    level: str | None = None,
    json: bool | None = None,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send Fore's events to ``stream`` (stderr) as console or JSON lines.

    For applications that want Fore's own rendering -- the ``fore`` CLI calls
    this; a library host normally configures ``logging`` itself instead. It
    touches only the ``fore`` logger: one handler (replacing the one an earlier
    call attached), its level, and ``propagate = False`` so a root handler
    does not print each event twice. ``level`` defaults to ``FORE_LOG_LEVEL``
    (else ``warning``), ``json`` to ``FORE_LOG_JSON=1``. Returns the handler.
    """
    global _handler
    level_name = (level or os.environ.get("FORE_LOG_LEVEL") or "warning").lower()
    if level_name not in _LEVELS:
        raise ValueError(f"unknown log level {level_name!r}; use one of {sorted(_LEVELS)}")
    as_json = json if json is not None else os.environ.get("FORE_LOG_JSON", "") == "1"
    handler = logging.StreamHandler(stream or _CurrentStderr())
    handler.setFormatter(JsonFormatter() if as_json else ConsoleFormatter())
    root = logging.getLogger(ROOT_LOGGER)
    with _lock:
        if _handler is not None:
            root.removeHandler(_handler)
        _handler = handler
        root.addHandler(handler)
        root.setLevel(_LEVELS[level_name])
        root.propagate = False
    return handler


def unconfigure_logging() -> None:
    """Undo :func:`configure_logging`: Fore's events go to the host's handlers again."""
    global _handler
    root = logging.getLogger(ROOT_LOGGER)
    with _lock:
        if _handler is not None:
            root.removeHandler(_handler)
            _handler = None
        root.setLevel(logging.NOTSET)
        root.propagate = True


class _Capture(logging.Handler):
    def __init__(self, entries: list[dict[str, Any]]) -> None:
        super().__init__(logging.NOTSET)
        self.entries = entries

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "fore_event", None)
        if event is None:
            return
        entry: dict[str, Any] = {"event": event, "log_level": record.levelname.lower()}
        entry.update(getattr(record, "fore", None) or {})
        entry["logger"] = record.name
        if record.exc_info:
            entry["exc_info"] = record.exc_info
        self.entries.append(entry)


@contextmanager
def capture_logs(level: int = logging.DEBUG) -> Iterator[list[dict[str, Any]]]:
    """Collect Fore's events (``event``, ``log_level`` and the fields) while the block runs.

    For tests: the ``fore`` logger's level is lowered to ``level`` for the
    duration and restored after; nothing else of the logging setup changes.
    """
    entries: list[dict[str, Any]] = []
    handler = _Capture(entries)
    root = logging.getLogger(ROOT_LOGGER)
    previous = root.level
    root.addHandler(handler)
    if previous == logging.NOTSET or previous > level:
        root.setLevel(level)
    try:
        yield entries
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
