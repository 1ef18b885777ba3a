"""structlog, configured once for the whole runtime.

Actors log through ``self.log``, a logger bound to the actor's class, id and
session, so every event can be traced to one session and one actor. Output is
a plain console line (default) or JSON lines (``FORE_LOG_JSON=1`` or
``json=True``); the level comes from ``FORE_LOG_LEVEL`` (default ``warning``).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import IO

import structlog

_lock = threading.Lock()
_configured: str | None = None
"""``None``, ``"defaults"`` (configured with no explicit setting) or ``"explicit"``."""


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is *now* (test runners swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}


def configure_logging(
    *,
    level: str | None = None,
    json: bool | None = None,
    stream: IO[str] | None = None,
    force: bool = False,
) -> None:
    """Configure structlog (idempotent unless ``force``).

    Every :class:`~actors.core.system.ActorSystem` calls this with no
    arguments, so the first call wins -- except that a call with an explicit
    ``level``, ``json`` or ``stream`` replaces a configuration made from the
    defaults alone: a bare system created first (the process default, say)
    must not swallow the settings a later ``Runtime(log_level=...)`` asks for.
    """
    global _configured
    explicit = level is not None or json is not None or stream is not None
    with _lock:
        if _configured is not None and not force and (not explicit or _configured == "explicit"):
            return
        level_name = (level or os.environ.get("FORE_LOG_LEVEL") or "warning").lower()
        if level_name not in _LEVELS:
            raise ValueError(f"unknown log level {level_name!r}; use one of {sorted(_LEVELS)}")
        as_json = json if json is not None else os.environ.get("FORE_LOG_JSON", "") == "1"
        renderer: structlog.typing.Processor
        if as_json:
            renderer = structlog.processors.JSONRenderer()
        else:
            renderer = structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            )
        processors: list[structlog.typing.Processor] = [
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ]
        if as_json:
            processors.append(structlog.processors.format_exc_info)
        processors.append(renderer)
        structlog.configure(
            processors=processors,
            wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level_name]),
            logger_factory=structlog.PrintLoggerFactory(file=stream or _CurrentStderr()),  # type: ignore[arg-type]
            cache_logger_on_first_use=False,
        )
        _configured = "explicit" if explicit else "defaults"
