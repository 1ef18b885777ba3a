"""Span contexts handed along with the work, without importing OpenTelemetry.

Code that runs whether or not telemetry is on (the session supervisor, the
session facade) passes contexts through these helpers; a context is an
opaque object to them (``None`` when telemetry is off).
"""

from __future__ import annotations

from typing import Any


def trace_context_of(answer: Any) -> Any:
    """The span context an accept's answer callable carries (the parent of the run Tab
    starts when nothing was speculated), or ``None``
    (:meth:`~actors.telemetry.tracing.AcceptSpan.wrap` attaches it)."""
    return getattr(answer, "trace_context", None)


def current_context(telemetry: Any) -> Any:
    """The caller's current context when ``telemetry`` is on (its active span becomes the
    turn's parent), else ``None`` -- and OpenTelemetry is not touched."""
    return None if telemetry is None else telemetry.current()
