"""Tool messages: definitions the model sees, batches, per-call results, cancellation.

A batch request carries in-process references (the session's tool registry,
its filesystem view, services, and the address results go to). Those fields
are excluded from JSON; everything a result reports is plain data.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, JsonValue, model_validator

from fore.messages.address import Ask
from fore.messages.base import ControlMessage, Message
from fore.messages.blobs import ToolOutput
from fore.messages.conversation import ToolCall, ToolResult


class ToolDefinition(Message):
    """What the LLM sees of a tool: name, description, JSON schema of the arguments."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str
    parameters: dict[str, JsonValue]


Outcome = Literal["ok", "error", "invalid", "unknown_tool", "timeout", "cancelled", "crashed"]
"""How a call ended: the tool's own result, or one of the pool's verdicts."""


class RunToolBatch(Message):
    """Run a batch of one session's tool calls on the shared pool.

    Calls run in parallel, except that calls writing the same path run in call
    order and an exclusive tool runs alone within its batch. The pool tells
    ``reply_to`` a :class:`ToolCallStarted` and a :class:`ToolCallFinished` per
    call as they happen, then one :class:`ToolBatchFinished` in call order.
    """

    batch_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    calls: tuple[ToolCall, ...]
    call_timeout: float = Field(default=120.0, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    tools: Any = Field(exclude=True, description="the session's ToolRegistry")
    fs: Any = Field(exclude=True, description="the FsView the calls run against")
    services: Any = Field(default=None, exclude=True, description="ToolServices")
    reply_to: Any = Field(exclude=True, description="an ActorRef or Handle to tell results to")
    trace: Any = Field(
        default=None,
        exclude=True,
        description="the OpenTelemetry context of the turn's span: parent of the call spans",
    )
    scope: Any = Field(
        default=None,
        exclude=True,
        description=(
            "the CancelScope of the run the batch belongs to: cancelling it cancels the "
            "batch's calls, and a batch whose scope was cancelled before it arrived runs "
            "nothing (every call reported cancelled)"
        ),
    )


class ToolCallStarted(Message):
    batch_id: str
    session_id: str
    call_id: str
    name: str


class ToolCallFinished(Message):
    """One call's result, sent as soon as it is known.

    ``call_id`` is the id of the call it answers (the same as
    ``result.call_id``): match results to calls by it. The pool refuses a
    second call with an id already used in its batch, so within a batch
    every id has one real result. Every string in it is valid Unicode (no
    lone surrogates; see ``actors.tools.text``).
    """

    batch_id: str
    session_id: str
    call_id: str = ""
    """Filled from ``result.call_id`` when omitted; must equal it when given."""
    result: ToolResult
    outcome: Outcome
    duration_s: float = 0.0
    stored_summary: str | None = None
    """A summary the tool supplied itself (it returned a ``Stored`` output)."""
    explicit: ToolOutput | None = None
    """The ``Inline`` or ``Stored`` output the tool returned itself, as it returned it.

    ``result.output`` still holds the rendered text (what hooks and events
    see); this keeps the tool's own choice -- an ``Inline`` that must stay
    inline whatever its size, a ``Stored`` with its ``Structured`` content and
    summary -- so the worker can hand it to the blob store unchanged.
    ``None`` when the tool returned plain text or a JSON value.
    """

    @model_validator(mode="after")
    def _call_id_of_the_result(self) -> ToolCallFinished:
        if not self.call_id:
            object.__setattr__(self, "call_id", self.result.call_id)
        elif self.call_id != self.result.call_id:
            raise ValueError(
                f"call_id {self.call_id!r} differs from result.call_id {self.result.call_id!r}"
            )
        return self


class ToolBatchFinished(Message):
    """Every result of a batch, in call order (exactly one per call)."""

    batch_id: str
    session_id: str
    results: tuple[ToolCallFinished, ...]


class ToolBatchRejected(Message):
    """A batch the pool did not accept at all: none of its calls ran or will run.

    Sent instead of any ``ToolCallFinished`` / ``ToolBatchFinished`` when the
    request itself is wrong -- today: its ``batch_id`` is already running for
    the same session. Answering with per-call results under that id would mix
    them into the running batch's results, so the refusal has its own type.
    """

    batch_id: str
    session_id: str
    call_ids: tuple[str, ...]
    reason: str


class CancelToolCalls(ControlMessage):
    """Cancel one session's calls: all of them, one batch's, or the listed ones.

    Running shell calls have their process group killed; Python tools see
    their token cancelled. Every cancelled call still gets a result.
    """

    session_id: str
    batch_id: str | None = None
    call_ids: tuple[str, ...] = ()
    reason: str = "cancelled"


class PoolStats(Message):
    """A snapshot of the pool's load (for tests, benchmarks and debugging).

    ``running`` counts calls still in progress; ``zombies`` counts calls
    already reported timed out or cancelled whose tool thread is still
    running. Both hold a slot under the caps, so ``running + zombies`` never
    exceeds the global cap and ``max_running_seen`` is the most tool bodies
    that ever ran at once. ``abandoned_threads`` counts, since the start, the
    calls (and batch plannings) the pool stopped waiting for.
    """

    running: int
    queued: int
    sessions: int
    max_running_seen: int
    abandoned_threads: int
    per_session_running: dict[str, int]
    zombies: int = 0
    per_session_zombies: dict[str, int] = Field(default_factory=dict)


class GetPoolStats(Ask[PoolStats]):
    """Ask the tool pool for a :class:`PoolStats`."""
