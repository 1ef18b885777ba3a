"""A speculation's status and its one telemetry event, built from the controller's record.

:func:`status_of` is what ``s.speculation`` answers for a record;
:func:`finished_event` is its one :class:`SpeculationFinished`, and
:func:`abort_timings` reads an abort's timings from its teardown's steps.
All three are plain functions of the record (the controller only decides when).

**Status events**: push what ``s.speculation`` would answer, when it changes.

A front end shows what the speculation behind the grey suggestion is doing
(*speculating: 2 calls, 1 file* → *ready* / *stopped at shell: why* /
*aborted*). Polling ``Session.speculation`` for it costs an ask per poll and
still lags; instead the speculation controller hands this publisher the status
after every message it handles -- while any subscriber reads
``speculation_status`` (``Subscribe(kinds=...)``); with none, no status is
built at all -- and the publisher emits a
:class:`~messages.speculation.SpeculationStatusChanged` only when the status or
the suggestion on offer differ from the last one sent. Checking after *every*
message -- rather than at each place that changes the state -- means no
transition can be forgotten, and comparing first keeps a run of messages that
change nothing (LLM retries, snapshots without a suggestion) silent.

The controller builds the status without validation
(``SpeculationStatus.model_construct``: every field is its own, already
typed), so the check costs a few microseconds per message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fore.actors.speculation.states import SpecPhase, Speculation
from fore.messages.speculation import (
    SpeculationFinished,
    SpeculationOutcome,
    SpeculationResult,
    SpeculationStatus,
    SpeculationStatusChanged,
)


class StatusEvents:
    """Emits a :class:`SpeculationStatusChanged` for each change (see the module docs)."""

    def __init__(self, session_id: str, emit: Callable[[Any], None]) -> None:
        self.session_id = session_id
        self._emit = emit
        self._last: tuple[SpeculationStatus, str | None] = (IDLE, None)
        """What was last sent; at first the state before any suggestion (not an event)."""
        self.sent = 0
        """Events sent so far (telemetry, tests)."""

    def publish(self, status: SpeculationStatus, shown: str | None) -> bool:
        """Emit ``status`` and the suggestion on offer unless both are unchanged."""
        if (status, shown) == self._last:
            return False
        self._last = (status, shown)
        self._emit(SpeculationStatusChanged(session_id=self.session_id, status=status, shown=shown))
        self.sent += 1
        return True


IDLE = SpeculationStatus()
"""A session's status before its first suggestion."""

_ACCEPTING = (SpecPhase.ACCEPTING, SpecPhase.APPLYING, SpecPhase.INSERTING)
"""Phases in which ``SpeculationStatus.accepting`` is true: Tab pressed, items not yet in."""


def status_of(spec: Speculation) -> SpeculationStatus:
    """What ``s.speculation`` answers for ``spec`` (its result once its run ended)."""
    result = spec.result
    # Built unvalidated: every field is the controller's own, already typed.
    return SpeculationStatus.model_construct(
        speculation_id=spec.id,
        state=spec.state,
        suggestion=spec.suggestion.text,
        turns=result.turns if result else 0,
        tool_calls=result.tool_calls if result else spec.live_tool_calls,
        files_written=result.files_written if result else spec.live_files,
        tokens=result.tokens if result else 0,
        started_at=result.started_at if result else spec.started_at,
        completed_at=result.completed_at if result else None,
        boundary_tool=result.boundary_tool if result else None,
        boundary_reason=result.boundary_reason if result else None,
        next_suggestion=spec.next_suggestion,
        accepting=spec.phase in _ACCEPTING,
        reason=spec.reason,
    )


@dataclass(frozen=True)
class AbortTimings:
    """An aborted speculation's timings, from the user's keystroke (see :func:`abort_timings`)."""

    steps: tuple[tuple[str, float], ...]
    cancel_latency: float | None
    cleanup_latency: float | None
    was_running: bool | None


def abort_timings(spec: Speculation) -> AbortTimings:
    """An aborted speculation's telemetry, timed from the user's keystroke.

    ``cancel_latency``: keystroke -> LLM stream closed *and* tool calls
    cancelled (its teardown's confirmations), only for a speculation that was
    still running when the abort reached it; ``cleanup_latency``:
    keystroke -> overlay removed, for every abort.
    """
    steps = tuple(spec.steps)
    at: dict[str, float] = {}
    for name, when in steps:
        at.setdefault(name, when)
    start = spec.abort_requested
    if start is not None:
        steps = (("keystroke", start), *steps)
    was_running = "abort_requested" in at and "already_finished" not in at
    cancel = None
    if was_running and start is not None and {"llm_cancelled", "tools_cancelled"} <= set(at):
        cancel = max(at["llm_cancelled"], at["tools_cancelled"]) - start
    removed = at.get("overlay_removed")
    return AbortTimings(
        steps=steps,
        cancel_latency=cancel,
        cleanup_latency=None if start is None or removed is None else removed - start,
        was_running=was_running if "abort_requested" in at else None,
    )


def finished_event(
    session_id: str,
    spec: Speculation,
    outcome: SpeculationOutcome,
    *,
    result: SpeculationResult | None,
    reason: str | None = None,
    abort: AbortTimings | None = None,
    tokens: tuple[int, int] | None = None,
) -> SpeculationFinished:
    """The speculation's one telemetry event.

    ``duration_s`` is the run's own duration (start to its end), never the
    time the user then spent reading before Tab or typing. ``abort``: an
    abort's timings (:func:`abort_timings`); ``tokens``: ``(spent, of which
    estimated)`` counted once every stream has ended, used when not less than
    the result's.
    """
    if result is not None and result.completed_at is not None:
        duration = max(0.0, result.completed_at - result.started_at)
    else:
        duration = time.time() - spec.started_at
    spent = result.tokens if result else 0
    estimated = result.estimated_tokens if result else 0
    if tokens is not None and tokens[0] >= spent:
        spent, estimated = tokens
    return SpeculationFinished(
        session_id=session_id,
        speculation_id=spec.id,
        outcome=outcome,
        state=(result.state if result is not None else "running"),
        suggestion=spec.suggestion.text,
        turns=result.turns if result else 0,
        tool_calls=result.tool_calls if result else 0,
        files_written=result.files_written if result else 0,
        tokens=spent,
        estimated_tokens=estimated,
        duration_s=duration,
        boundary_tool=result.boundary_tool if result else None,
        boundary_reason=result.boundary_reason if result else None,
        reason=reason,
        was_running=None if abort is None else abort.was_running,
        cancel_latency_s=None if abort is None else abort.cancel_latency,
        cleanup_latency_s=None if abort is None else abort.cleanup_latency,
        abort_steps=() if abort is None else abort.steps,
    )
