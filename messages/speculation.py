"""Suggestion and speculation messages: snapshots, suggestions, accept, abort, telemetry."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import ConfigDict, Field

from fore.actors.core.cancel import CancelScope
from fore.messages.address import Ask
from fore.messages.base import ControlMessage, Message
from fore.messages.conversation import Item, Segment, ToolCall
from fore.messages.gate import ApprovalMode
from fore.messages.llm import Usage
from fore.messages.session import EventBase, OutputRequest, TurnResult
from fore.messages.tools import ToolDefinition
from fore.messages.usage import UsageLimits


class SpeculationConfig(Message):
    """A session's suggestion/speculation settings (the seed's constants are the defaults).

    **The fast model.** Suggestion, speculation and pipelined requests use the
    session's fast model when one is configured -- ``open_session(fast_model=...)``
    (another provider object, sent with its own name) and/or ``fast_model_name``
    here (a model name on the same endpoint); with neither, the main model and
    the name the main request used. The trade-off: a fork reuses the main
    request's prefix byte for byte (system prompt, tools, history) so that the
    provider's prefix cache hits, but prefix caches are per model -- a fork sent
    to a *different* model cannot hit the main model's cache and pays for the
    whole prompt once. Forks on the fast model still share that prefix with
    each other (suggestion, speculation turns, pipelined suggestion), so they
    hit the fast model's cache from the second request on. A fast model pays off
    when its lower price and latency outweigh one uncached prompt per answer;
    for short histories or a cheap main model, leave it unset.
    """

    enabled: bool = False
    """Generate suggestions and speculate on them (off unless asked for)."""
    speculate: bool = True
    """With ``enabled``: also run the suggestion ahead of time (else suggest only)."""
    approval_mode: ApprovalMode = ApprovalMode.DEFAULT
    max_turns: int = Field(default=20, ge=1)
    max_messages: int = Field(default=100, ge=2)
    """Items a speculation's transcript may hold; more ends it at a boundary."""
    suggestion_delay_ms: int = Field(default=300, ge=0)
    """A ready suggestion is shown (``SuggestionReady``, ``s.suggestion``) this much later."""
    accept_debounce_ms: int = Field(default=100, ge=0)
    """A Tab this soon after the previous accept is ignored (a double press).

    Only Tab is debounced: submitting the suggestion's text is an explicit
    request, so it always runs (through the accept path when it can)."""
    max_history: int = Field(default=40, ge=2)
    """History entries a fork request carries at most (see ``history_trim_step``)."""
    history_trim_step: int = Field(default=20, ge=1)
    """Once a history is longer than ``max_history``, forks drop its oldest entries in
    steps of this many (clamped to ``max_history``), not one by one.

    The trade-off: a fork reuses the main request's prefix byte for byte only
    while the whole history fits; past ``max_history`` the fork's history starts
    later than the main request's, so the provider's cache no longer serves it
    the main request's prefix. Cutting at fixed checkpoints keeps the cut point
    still for several turns, so consecutive forks (suggestion, speculation,
    pipelined suggestion, the next turn's suggestion) share *each other's*
    prefix and hit the cache from the second one on. Step 1 is the old
    "last N entries" trimming (every fork starts somewhere new)."""
    token_budget: int | None = Field(default=200_000, ge=1)
    """Tokens one speculation may spend: completed requests' usage plus, for the request
    in flight, an estimate (about 4 characters per token of prompt and streamed
    output). Reaching it cancels the in-flight request or tool calls at once and
    ends the speculation at a boundary with its partial transcript. Each request
    also carries ``max_tokens`` capped at what the budget leaves (and at the model's
    output limit, ``OpenAICompatible.max_output_tokens``), so the provider itself
    stops there; an answer cut at the budget's cap reaches the budget."""
    stream_forks: bool = True
    """Stream the answers of suggestion, speculation and pipelined requests.

    On by default, because an abort must stop the server's generation: a server
    notices that a client left only when it next writes to it, so a non-streamed
    fork that is aborted keeps generating to its end (against a one-slot
    llama.cpp server, an aborted speculation held the slot for minutes, and the
    user's next turn waited). Streamed, the abort closes the connection
    mid-answer and the server stops at its next token. What streaming costs
    this process -- an event per token -- is kept near a non-streamed answer's:
    a fork's stream is read in batches (``OpenAICompatible.background_read_interval``),
    one JSON decode per batch. The token budget is checked per batch (a runaway
    answer is cut mid-stream, by the estimate) and the waste of a cancelled fork
    counts the text streamed before the cancel. Off: one JSON body per answer; the
    budget travels only as ``max_tokens`` and a cancelled fork's waste counts its
    prompt only (its partial output is never seen)."""
    suggestion_max_tokens: int = Field(default=96, ge=1)
    """The ``max_tokens`` of a suggestion request. A suggestion is one short line of
    JSON (a dozen words); without a cap a model that rambles keeps the server busy
    (a small local model wrote 904 tokens in 142 s)."""
    time_budget_s: float | None = Field(default=300.0, gt=0)
    """Seconds one speculation may run. At the deadline the in-flight LLM request and
    tool calls are cancelled and the speculation ends at a boundary with its
    partial transcript (the cancelled calls are re-run for real after Tab)."""
    overlay_max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    fast_model_name: str = ""
    """The fast model's wire name (see the class docs); empty: the fast model
    object's own name, or the main request's model name."""


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
    """The predicted next prompt (``source``: the model, a hint, or pipelined by a speculation)."""

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
    "idle",
    "running",
    "completed",
    "boundary",
    "failed",
    "aborted",
    "accepted",
    "stale",
    "skipped",
    "empty",
]
"""``stale``: the session's tools or system prompt changed after the snapshot
the speculation forked from, so its requests no longer match the main one.
``skipped``: the suggestion was offered but not speculated -- the runtime had
no headroom for it (:class:`~actors.speculation.governor.LoadGovernor`).
``empty``: the speculation's answer had no text and no tool calls: there is
nothing to accept, and Tab runs the suggestion as a normal turn."""


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
    accepting: bool = False
    """Tab was pressed and the accept is in progress (waiting for the run, or applying)."""
    reason: str | None = None
    """Why it was aborted, went stale or failed."""


class SpeculationProgress(EventBase):
    """Something happened inside a running speculation (its worker's event)."""

    kind: Literal["speculation_progress"] = "speculation_progress"
    speculation_id: str
    inner: str
    detail: str = ""
    tool_calls: int = 0
    """Tool calls the speculation has started so far."""
    files_written: int = 0
    """Files its overlay holds so far (written or deleted)."""


class SpeculationStatusChanged(EventBase):
    """The session's speculation status changed: push, instead of polling ``s.speculation``.

    Sent by the speculation controller (to the subscribers that read this kind)
    after any message that changed what ``s.speculation`` / ``s.suggestion``
    would answer -- the status of the session's *current* speculation: it
    started (``running``), ran a tool or wrote a file (``tool_calls``,
    ``files_written``), finished (``completed``,
    ``boundary`` with its tool and reason, ``failed``, ``empty``), was aborted
    (``aborted``, ``stale``) or not started (``skipped``), Tab began
    (``accepting``) or ended (``accepted``), or the suggestion on offer
    appeared or went away (``shown``). Consecutive events always differ.
    When one step both ends a speculation and starts the next (the pipelined
    suggestion after Tab, a speculation started again under a stricter
    approval mode), the status moves straight to the new one's: every
    speculation's own end is its :class:`SpeculationFinished`.
    """

    kind: Literal["speculation_status"] = "speculation_status"
    status: SpeculationStatus
    shown: str | None = None
    """The suggestion on offer now (what ``s.suggestion`` answers; Tab accepts it)."""


SpeculationOutcome = Literal[
    "accepted", "aborted", "boundary", "failed", "conflict", "stale", "empty"
]


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
    estimated_tokens: int = 0
    """Of ``tokens``: estimated for requests that ended without usage (cancelled
    or failed in flight), at about 4 characters per token of prompt and streamed output."""
    was_running: bool | None = None
    """Aborts: whether the speculation was still running when the abort reached it
    (``False``: it had finished; only its overlay was left to remove)."""
    cancel_latency_s: float | None = None
    """Aborts of a *running* speculation: from the keystroke (or submit) to the LLM
    stream confirmed closed and the tool calls confirmed cancelled, whichever came
    last (``abort_steps``). ``None`` when it had already finished: nothing was
    left to cancel."""
    cleanup_latency_s: float | None = None
    """Aborts: from the keystroke (or submit) to the overlay removed."""
    abort_steps: tuple[tuple[str, float], ...] = ()
    """Aborts: each step and when it happened (``time.monotonic()``), in order:
    ``keystroke`` (the user's input that caused it), ``abort_requested``
    (the controller acted on it; then ``already_finished`` if the run had ended),
    ``worker_stopped``,
    ``tools_cancelled`` / ``llm_cancelled`` (either order), ``overlay_removed``."""


# -- control -----------------------------------------------------------------------


class Keystroke(ControlMessage):
    """The user is typing ``text``; anything but a prefix of the suggestion aborts."""

    text: str = ""
    at: float = Field(default_factory=time.monotonic)
    """When the key was pressed (``time.monotonic()``): abort latency starts here."""


class AbortSpeculation(ControlMessage):
    """Abort the running speculation (LLM request and tools cancelled, overlay removed)."""

    reason: str = "user typed"
    at: float = Field(default_factory=time.monotonic)
    """When the user did what aborts it (``time.monotonic()``)."""


class SetApprovalMode(Message):
    """The session's approval mode changed (``Session.set_approval_mode``).

    The speculation controller gives new speculations the new mode (the gate's);
    a stricter mode aborts the speculation on offer -- its work may hold what
    the new mode would ask about -- and speculates on the suggestion again
    under the new mode; ``plan`` withdraws the suggestion (no suggestions in
    plan mode). Answered with ``None``.
    """

    mode: ApprovalMode


class GetSpeculation(Message):
    """Ask for the current :class:`SpeculationStatus` and suggestion."""


class AcceptResult(Message):
    """What a Tab did."""

    outcome: Literal[
        "accepted",
        "boundary",
        "conflict",
        "stale",
        "submitted",
        "no_suggestion",
        "debounced",
        "failed",
        "aborted",
    ]
    """``submitted``: nothing was speculated for the suggestion (speculation off,
    or no headroom), or its speculation came back empty, so Tab ran it as a
    normal turn (in ``turn``). ``aborted``:
    while Tab waited for the speculation, the user submitted something else (or
    the caller stopped waiting): the speculation was aborted, nothing applied."""
    suggestion: str | None = None
    files_applied: tuple[str, ...] = ()
    """Real paths the accept changed -- also when it then failed (files applied but
    the history insert refused), so a caller always knows what changed on disk."""
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


class AcceptSuggestion(Ask[AcceptResult]):
    """Tab: accept the current suggestion (answered with :class:`AcceptResult`).

    ``scope`` is the accept's :class:`~actors.core.cancel.CancelScope`, made
    by whoever starts it before it is sent (``Session.accept`` / ``aaccept``,
    the Ray shard's ``accept``); ``Session.cancel()`` (Ctrl-C) cancels it.
    Cancelling it calls the accept off wherever it is: one that arrives
    cancelled -- the cancel overtook it on its way -- answers ``aborted`` and
    applies nothing (the suggestion it would have taken is withdrawn and its
    speculation aborted, as when a waiting Tab is called off); one waiting
    for its speculation's run is called off the same way; once its apply has
    begun it completes and its items go in (files are never left without
    their history), but the run it starts -- the continuation after a
    boundary, or the normal run a Tab becomes -- runs under the scope and is
    cancelled with it. Without a scope the controller makes one (then only the
    accept's deadline calls it off).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    wait_continuation: bool = True
    scope: CancelScope | None = Field(default=None, exclude=True)
    """The accept's cancel scope (in-process); ``None``: the controller makes one."""
    arrived: Callable[[], None] | None = Field(default=None, exclude=True)
    """Called by the controller first thing when it handles the Tab (in-process): the
    sender's keys typed after it were held until then (``supervision.input_order``)."""


class SubmitPrompt(Ask[TurnResult[Any]]):
    """A submit through the session's front door (its speculation controller).

    It takes the accept path when the text equals the current suggestion.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    text: str | None = None
    segments: tuple[Segment, ...] | None = None
    max_turns: int | None = Field(default=None, ge=1)
    output: OutputRequest | None = None
    """Structured output: never the accept path (the speculation was not asked for
    the value), always a new run -- the speculation is aborted like for other text."""
    at: float = Field(default_factory=time.monotonic)
    """When the user submitted (``time.monotonic()``): an abort it causes is timed from here."""
    submit_id: str | None = Field(default=None, min_length=1, max_length=200)
    """Passed on to the worker's ``Submit`` (a ``CancelRun`` naming it reaches it)."""
    scope: CancelScope | None = Field(default=None, exclude=True)
    """The run's cancel scope, passed on to the worker's ``Submit`` (see ``Submit.scope``);
    on the accept path, the accept's (see :class:`AcceptSuggestion`)."""
    arrived: Callable[[], None] | None = Field(default=None, exclude=True)
    """As ``AcceptSuggestion.arrived``: keys typed after the prompt were held until it arrived."""
    # -- telemetry (issue 28) --
    usage_limits: UsageLimits | None = None
    """Limits of this turn's main requests (passed on to its ``Submit``)."""
    trace: Any = Field(default=None, exclude=True)
    """The OpenTelemetry context the turn's span is a child of (in-process)."""


# -- a speculation's run, and its accept --------------------------------------------


class SpeculationResult(Message):
    """How a speculation's run ended (the controller's record keeps it once the run is over)."""

    speculation_id: str
    state: SpeculationState
    items: tuple[Item, ...] = ()
    boundary_calls: tuple[ToolCall, ...] = ()
    boundary_tool: str | None = None
    boundary_reason: str | None = None
    error: str | None = None
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    estimated_tokens: int = 0
    """Of ``tokens``: estimated for requests that ended without usage."""
    started_at: float = 0.0
    completed_at: float | None = None
    files_written: int = 0
    """Files the speculation changed in its overlay (written or deleted)."""


class InsertItems(Ask[str | None]):
    """Append accepted speculation items to the main worker's history.

    With ``continue_calls``, the last assistant message of ``items`` gets these
    calls back (they stopped the speculation at a boundary) and the worker runs
    them through the normal flow, continuing the turn. With ``continue_turn``
    (a speculation stopped by a budget or its turn limit, ending with tool
    results and no final answer) the worker continues the turn with an LLM
    request on the history as it now is, exactly as if the run had never
    stopped. Either way the answer is the continuation's run id (its end is
    its ``TurnFinished`` event); without either, ``None``.

    ``scope`` is the continuation's cancel scope (a child of the accept's):
    the items always go in, but a continuation whose scope is cancelled --
    before the insert arrived or while it was saved -- does not go on (the
    calls handed over get ``cancelled`` results), and one under way ends as
    :class:`~messages.session.CancelRun` ends a run.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    items: tuple[Item, ...]
    continue_calls: tuple[ToolCall, ...] = ()
    continue_turn: bool = False
    scope: CancelScope | None = Field(default=None, exclude=True)
    """The continuation's cancel scope (in-process); ``None``: the worker makes one."""


# -- from a speculation's metered model to its controller -------------------------------


class SpeculationUsage(Message):
    """One of a speculation's LLM requests completed with this usage."""

    speculation_id: str = ""
    request_id: str
    usage: Usage
    estimated: bool = False
    """No usage arrived (the stream was cancelled or failed): ``usage`` is an estimate."""


class TokenBudgetReached(Message):
    """The speculation's spend (completed usage plus the in-flight estimate) passed
    its token budget while a request was streaming: stop it now."""

    speculation_id: str = ""
    spent: int


class SpeculationSkipped(EventBase):
    """A suggestion was offered without speculating on it (telemetry), and why.

    Tab on it runs it as a normal turn.
    """

    kind: Literal["speculation_skipped"] = "speculation_skipped"
    suggestion: str
    reason: str


class LoadSample(Message):
    """A load probe's sample in flight: when it was sent (``time.monotonic()``).

    How late it reaches the probe actor is how long an actor waits for a
    dispatcher thread (:class:`~actors.speculation.governor.LoadProbe`).
    """

    sent: float
