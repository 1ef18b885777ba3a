"""Suggestion and speculation messages: snapshots, suggestions, accept, abort, telemetry."""

from __future__ import annotations

import time
from typing import Literal

from pydantic import Field

from messages.base import ControlMessage, Message
from messages.conversation import Item, Segment, ToolCall
from messages.gate import ApprovalMode
from messages.session import EventBase, TurnResult
from messages.tools import ToolDefinition


class SpeculationConfig(Message):
    """A session's suggestion/speculation settings (the seed's constants are the defaults)."""

    enabled: bool = False
    """Generate suggestions and speculate on them (off unless asked for)."""
    speculate: bool = True
    """With ``enabled``: also run the suggestion ahead of time (else suggest only)."""
    approval_mode: ApprovalMode = ApprovalMode.DEFAULT
    max_turns: int = Field(default=20, ge=1)
    max_messages: int = Field(default=100, ge=2)
    suggestion_delay_ms: int = Field(default=300, ge=0)
    accept_debounce_ms: int = Field(default=100, ge=0)
    max_history: int = Field(default=40, ge=2)
    token_budget: int | None = Field(default=200_000, ge=1)
    time_budget_s: float | None = Field(default=300.0, gt=0)
    overlay_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)


class ForkSnapshot(Message):
    """What a session's main request sent, frozen after a main turn (cache-safe fork).

    Suggestion, speculation and pipelined requests reuse this prefix byte for
    byte. ``version`` changes when the system prompt or the tools change.
    """

    session_id: str
    version: str
    system_prompt: str | None = None
    tools: tuple[ToolDefinition, ...] = ()
    model_name: str = ""
    history: tuple[Item, ...] = ()
    taken_at: float = Field(default_factory=time.time)


class SnapshotTaken(EventBase):
    """The worker's event after a completed main turn."""

    kind: Literal["snapshot_taken"] = "snapshot_taken"
    snapshot: ForkSnapshot


SuggestionSource = Literal["model", "hint", "pipelined"]


class Suggestion(Message):
    id: str
    text: str
    source: SuggestionSource
    snapshot_version: str
    created_at: float = Field(default_factory=time.time)


class SuggestionReady(EventBase):
    """A suggestion to show the user (sent after the display delay)."""

    kind: Literal["suggestion_ready"] = "suggestion_ready"
    suggestion: Suggestion


SpeculationState = Literal[
    "idle", "running", "completed", "boundary", "failed", "aborted", "accepted"
]


class SpeculationStatus(Message):
    """A snapshot of the session's current speculation (``s.speculation``)."""

    speculation_id: str | None = None
    state: SpeculationState = "idle"
    suggestion: str | None = None
    turns: int = 0
    tool_calls: int = 0
    files_written: int = 0
    tokens: int = 0
    started_at: float | None = None
    completed_at: float | None = None
    boundary_tool: str | None = None
    boundary_reason: str | None = None
    next_suggestion: str | None = None


class SpeculationProgress(EventBase):
    """Something happened inside a running speculation (its worker's event)."""

    kind: Literal["speculation_progress"] = "speculation_progress"
    speculation_id: str
    inner: str
    detail: str = ""


SpeculationOutcome = Literal["accepted", "aborted", "boundary", "failed", "conflict"]


class SpeculationFinished(EventBase):
    """Telemetry for every outcome (also logged with structlog)."""

    kind: Literal["speculation_finished"] = "speculation_finished"
    speculation_id: str
    outcome: SpeculationOutcome
    state: SpeculationState = "running"
    """How far the speculation itself got (completed, boundary, failed, or still running)."""
    suggestion: str
    turns: int = 0
    tool_calls: int = 0
    files_written: int = 0
    tokens: int = 0
    duration_s: float = 0.0
    boundary_tool: str | None = None
    boundary_reason: str | None = None
    reason: str | None = None
    cancel_latency_s: float | None = None
    """Aborts: from the abort request to the run cancelled (LLM stream and tool calls)."""
    cleanup_latency_s: float | None = None
    """Aborts: from the abort request to the overlay removed."""


# -- control -----------------------------------------------------------------------


class Keystroke(ControlMessage):
    """The user is typing ``text``; anything but a prefix of the suggestion aborts."""

    text: str = ""


class AbortSpeculation(ControlMessage):
    """Abort the running speculation (LLM request and tools cancelled, overlay removed)."""

    reason: str = "user typed"


class AcceptSuggestion(Message):
    """Tab: accept the current suggestion (answered with :class:`AcceptResult`)."""

    wait_continuation: bool = True


class SubmitPrompt(Message):
    """A submit through the session supervisor.

    It takes the accept path when the text equals the current suggestion.
    """

    text: str | None = None
    segments: tuple[Segment, ...] | None = None
    max_turns: int | None = Field(default=None, ge=1)


class GetSpeculation(Message):
    """Ask for the current :class:`SpeculationStatus` and suggestion."""


class AcceptResult(Message):
    """What a Tab did."""

    outcome: Literal["accepted", "boundary", "conflict", "no_suggestion", "debounced", "failed"]
    suggestion: str | None = None
    files_applied: tuple[str, ...] = ()
    items_inserted: int = 0
    items: tuple[Item, ...] = ()
    boundary_tool: str | None = None
    boundary_reason: str | None = None
    conflicts: tuple[str, ...] = ()
    time_saved_s: float = 0.0
    accept_latency_s: float = 0.0
    """From Tab (or from the speculation's end, if Tab came first) to the files
    applied and the history inserted."""
    waited_s: float = 0.0
    """How long Tab waited for a still-running speculation to finish."""
    next_suggestion: str | None = None
    turn: TurnResult | None = None
    """The main worker's run.

    The continuation after a boundary, or the normal run after a conflict.
    """


# -- between the session supervisor, the speculator and the worker ---------------------


class StartSpeculating(Message):
    """Sent to a new speculator by its session supervisor."""


class AcceptSpeculation(Message):
    """Apply the overlay and hand over the transcript (waits while still running)."""


class SpeculationResult(Message):
    """The speculator's answer to :class:`AcceptSpeculation` (or its finish report)."""

    speculation_id: str
    state: SpeculationState
    items: tuple[Item, ...] = ()
    boundary_calls: tuple[ToolCall, ...] = ()
    boundary_tool: str | None = None
    boundary_reason: str | None = None
    applied: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    conflict_summary: str | None = None
    error: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    started_at: float = 0.0
    completed_at: float | None = None
    next_suggestion: str | None = None
    apply_started: float | None = None
    """``time.monotonic()`` when the speculator began applying (same process)."""


class SpeculationDone(Message):
    """A speculator tells its session supervisor it has finished (any state)."""

    result: SpeculationResult


class OverlayRemoved(Message):
    """A speculator's overlay is gone (after an abort or a failure)."""

    speculation_id: str


class InsertItems(Message):
    """Append accepted speculation items to the main worker's history.

    With ``continue_calls``, the last assistant message of ``items`` gets these
    calls back (they stopped the speculation at a boundary) and the worker runs
    them through the normal flow, continuing the turn (answered when it ends).
    """

    items: tuple[Item, ...]
    continue_calls: tuple[ToolCall, ...] = ()
