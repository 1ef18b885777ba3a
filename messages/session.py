"""Session messages: what the worker is told, and the events it reports.

The worker is driven by :class:`Submit`, :class:`Resume`, :class:`PauseRun` and
:class:`CancelRun` (control lane), plus the LLM and tool events it receives.
Subscribers get :data:`SessionEvent`\\ s. A submit (or resume) is answered
with a :class:`TurnResult` when the run ends or pauses.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Generic, Literal

from pydantic import ConfigDict, Field, JsonValue, field_serializer
from pydantic_core import to_jsonable_python
from typing_extensions import TypeVar

from fore.actors.core.cancel import CancelScope
from fore.messages.address import Ask
from fore.messages.alerts import Alert
from fore.messages.base import ControlMessage, Message
from fore.messages.conversation import Item, Segment
from fore.messages.llm import Usage
from fore.messages.usage import UsageLimitHit, UsageLimits

RunStatus = Literal[
    "completed",  # the model finished and the turn-end hooks said Finish
    "cancelled",  # the user cancelled the run, or the session closed under it
    "rejected",  # a hook or the interceptor cancelled the submit or a request
    "aborted",  # a hook returned Abort
    "paused",  # a hook paused the run (resume continues it)
    "max_turns",  # the per-run turn budget is spent
    "error",  # the LLM failed, a hook failed or timed out, or the worker failed
    "interrupted",  # a paused run was superseded by a new submit
    "boundary",  # speculation only: the run stopped at a gate boundary
    "cut_off",  # the provider cut the model's answer off at an output limit (finish_reason length)
    "usage_limit",  # a UsageLimits limit of the turn or session was crossed (see usage_limit)
]
"""How a run ended.

``on_abort`` hooks run exactly once for every run that *started* -- whose
user message entered history -- and ended early: ``cancelled``, ``aborted``,
``max_turns``, ``usage_limit``, ``error``, ``interrupted``, ``cut_off``, and ``rejected`` by a
``pre_llm_request`` Cancel. A submit that ends before its user message
entered history never started: one ``rejected`` or failed at
``on_prompt_submit``, or ``cancelled`` while its input was prepared, while its
on_prompt_submit hooks ran, or before the worker even received it. Nothing of
it is in history, so no ``on_abort`` runs for it, just as none runs for a
``completed`` run.

``cut_off``: the answer stopped at the provider's output limit (``max_tokens``,
or the server's context), so it is not what the model meant to say. Its text is
kept in history; its tool calls, if any, are not run (the last may be cut
mid-way, and the plan they were part of is incomplete).
"""

HookEventName = Literal[
    "on_prompt_submit",
    "pre_llm_request",
    "pre_tool_call",
    "post_tool_call",
    "on_turn_end",
    "on_abort",
]

HookFailureKind = Literal[
    "raised", "timeout", "invalid_result", "condition", "invalid_arguments", "invalid_edit"
]
"""How a hook failed: it raised, it did not answer within its timeout (or
could not start within its start timeout), it returned a result its event
does not allow (e.g. ``ContinueWithMessages`` with items that are not items),
its ``when`` condition raised, (pre_tool_call) it left arguments that are not
a JSON object, or it left another field of its input invalid (on_prompt_submit
``text`` / ``segments``, pre_llm_request ``messages`` / ``tools`` /
``tool_choice``, post_tool_call ``result``); the message names the field."""

ErrorKind = Literal["hook", "llm", "input", "worker", "store"]
"""What made a run end with status ``error`` (``store``: the session store could not
save the turn -- its items are in history, not yet in the store)."""


class HookFailure(Message):
    """Which hook failed, at which event, and how (the typed form of a hook error).

    Callers branch on these fields (retry after a timeout, disable a broken
    hook, tell the user which policy failed) instead of parsing ``error``.
    """

    event: HookEventName
    hook: str
    kind: HookFailureKind
    message: str
    """What went wrong, without the event and hook prefix."""


class OutputRequest(Message):
    """Structured output: the run must end with a value of ``output_type``.

    ``json_schema`` is the type's JSON schema (what the model is asked for, as
    data); ``output_type`` is the type itself, an in-process field left out of
    JSON (like ``LlmRequest.model``): the answer is validated with
    ``pydantic.TypeAdapter(output_type)``, so the type's own validators run.
    ``max_retries`` bounds the re-asks after an answer that does not validate
    (each is an LLM call and counts against the run's ``max_turns``).
    ``Session.submit(output_type=...)`` builds it (:mod:`actors.output`).
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    json_schema: dict[str, JsonValue]
    output_type: Any = Field(default=None, exclude=True)
    max_retries: int = Field(default=2, ge=0, le=20)


class Resume(Message):
    """Continue a paused run, optionally adding ``messages`` to history.

    Paused before an LLM request or at turn end, the messages go in at once
    and the model is asked again. Paused at a tool call (``pre_tool_call``),
    they go in right after the current batch's results, before the next LLM
    request (earlier would split the calls from their results). Messages that
    would break pairing (a result without its call, a call without its
    result) are refused with a ``ValueError``.
    """

    messages: tuple[Item, ...] = ()


class Subscribe(Message):
    """Forward session events to ``address`` (an in-process reference).

    ``kinds``: the event kinds (each event's ``kind`` field) the subscriber
    reads; ``None`` (the default) is every kind. An event of another kind is
    neither sent to it nor, when nobody reads it, built at all (the
    speculation controller's ``speculation_status``). Subscribing the same
    address again replaces its kinds.
    """

    address: Any = Field(exclude=True)
    kinds: frozenset[str] | None = None


class Unsubscribe(Message):
    address: Any = Field(exclude=True)


class AddTool(Message):
    """Offer one more tool to the session's model (an in-process tool object)."""

    tool: Any = Field(exclude=True)


class SetModel(Message):
    """Switch the session's model from its next run on (``Session.set_model``).

    Refused (``WorkerBusy``) while a run is in progress. ``model_name`` is the
    wire name to send (empty: the model object's own ``name``).
    """

    model: Any = Field(exclude=True)
    model_name: str = ""


class GetHistory(Message):
    """Ask for the session's history (a tuple of items)."""


class GetRunState(Message):
    """Ask for a :class:`RunState`."""


class RunState(Message):
    """Where the worker is (for tests, UIs and debugging)."""

    session_id: str
    status: Literal["idle", "running", "paused"]
    phase: str
    run_id: str | None = None
    turns_used: int = 0
    history_length: int = 0


OutputT = TypeVar("OutputT", default=Any)
"""The type of a structured turn's ``TurnResult.output`` (``Any`` when unnamed)."""


class TurnResult(Message, Generic[OutputT]):
    """How a run ended (or paused), and the items it added to history."""

    run_id: str
    session_id: str
    status: RunStatus
    items: tuple[Item, ...] = ()
    error: str | None = None
    """For humans: why the run did not complete (also set for cancel/abort/reject)."""
    error_kind: ErrorKind | None = None
    """Set when ``status`` is ``error``: what failed (``hook``: see ``hook_failure``)."""
    hook_failure: HookFailure | None = None
    """The failed hook, when a hook failing or timing out ended the run."""
    turns: int = 0
    usage: Usage = Usage()
    boundary: dict[str, Any] | None = None
    """Speculation only: the gate boundary's tool, reason and the calls not run."""
    usage_limit: UsageLimitHit | None = None
    """Status ``usage_limit``: which limit (turn or session; requests or tokens) was crossed."""
    output: OutputT | None = None
    """Structured output (``submit(output_type=...)``): the validated value, or ``None``."""
    output_error: str | None = None
    """Structured output: why there is no ``output`` -- the last validation errors
    once the re-asks ran out, or how the run ended before an answer validated."""

    @field_serializer("output", when_used="json")
    def _output_json(self, value: Any) -> Any:
        # The value is whatever the caller's type validated to (a model, a
        # dataclass, a plain value): JSON-able where pydantic knows how, else its str.
        return to_jsonable_python(value, fallback=str)


class Submit(Ask[TurnResult[Any]]):
    """Start a run with user input: plain text (``@path`` recognised) or segments.

    ``scope`` is the run's :class:`~actors.core.cancel.CancelScope`, made by
    the sender before it sends the submit (``Session.submit`` does). Cancelling
    it cancels the run wherever the submit is: on its way or queued behind an
    ending run (it is answered ``cancelled`` and never starts: nothing of it
    enters history), or running (the worker ends it as :class:`CancelRun`
    does: its work stopped, its open calls closed, ``on_abort``,
    ``TurnFinished``). The scope is the record of the cancel, so a cancel can
    come before its submit without anyone remembering it. Without a scope the
    worker makes the run's own. One scope per submit: the worker cancels it
    when the run ends early and closes it when the run completes.

    ``submit_id`` (chosen by the sender, unique; ``Session.submit`` generates
    one) names the submit for a :class:`CancelRun` once the worker has it.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    text: str | None = None
    segments: tuple[Segment, ...] | None = None
    max_turns: int | None = Field(default=None, ge=1)
    submit_id: str | None = Field(default=None, min_length=1, max_length=200)
    scope: CancelScope | None = Field(default=None, exclude=True)
    """The run's cancel scope (in-process, like ``trace``); ``None``: the worker makes one."""
    # -- telemetry (issue 28) --
    usage_limits: UsageLimits | None = None
    """Limits of this turn's main requests (:class:`~messages.usage.UsageLimits`)."""
    trace: Any = Field(default=None, exclude=True)
    """The OpenTelemetry context the turn's span is a child of (in-process)."""
    output: OutputRequest | None = None
    """Structured output: the run ends with a validated value (``TurnResult.output``)."""


class PauseRun(Ask[bool]):
    """Pause the running run at its next safe point (before its next LLM request)."""

    reason: str = "paused by request"


class CancelRun(ControlMessage, Ask[bool]):
    """Cancel the run the worker has: LLM stream and tools are cancelled, calls get results.

    Without ``submit_id`` it cancels the current run (or, when that is already
    ending, the submit queued behind it, which then never starts). With
    ``submit_id`` it cancels that submit's run only: the current one, or the
    submit queued behind it. Answered (when asked) with whether it cancelled
    anything: ``False`` when there is nothing to cancel -- no run, a run
    already ending, a queued submit already cancelled, or a ``submit_id`` the
    worker does not have (not arrived yet, ended, or never sent: nothing is
    remembered for it). A cancel that may come before its submit -- this
    message travels on the control lane and can overtake it -- goes through
    the submit's scope instead (:attr:`Submit.scope`, ``Session.cancel``).
    """

    reason: str = "cancelled by user"
    submit_id: str | None = None


# -- events ---------------------------------------------------------------------


class EventBase(Message):
    """Common fields of every session event."""

    session_id: str
    at: float = Field(default_factory=time.time)


class RunStarted(EventBase):
    """A run began: ``text`` is the user's prompt as submitted."""

    kind: Literal["run_started"] = "run_started"
    run_id: str
    text: str


class ItemAdded(EventBase):
    """An item was appended to (or inserted into) the session's history."""

    kind: Literal["item_added"] = "item_added"
    run_id: str | None
    item: Item


class TextDelta(EventBase):
    """A piece of the assistant's answer as it streams (see :class:`LlmRetried`)."""

    kind: Literal["text_delta"] = "text_delta"
    run_id: str
    text: str


class ToolStarted(EventBase):
    """A tool call began running (after the gate and the ``pre_tool_call`` hooks)."""

    kind: Literal["tool_started"] = "tool_started"
    run_id: str
    call_id: str
    name: str


class ToolFinished(EventBase):
    """A tool call ended: ``outcome`` is how (ok, error, cancelled, timeout, skipped …)."""

    kind: Literal["tool_finished"] = "tool_finished"
    run_id: str
    call_id: str
    name: str
    outcome: str
    is_error: bool
    duration_s: float = 0.0


class RunPaused(EventBase):
    """A hook paused the run (``where`` it paused, ``reason`` why); ``Resume`` goes on."""

    kind: Literal["run_paused"] = "run_paused"
    run_id: str
    reason: str
    where: str


class TurnFinished(EventBase):
    """The run ended; ``result`` is the same :class:`TurnResult` ``submit`` returns."""

    kind: Literal["turn_finished"] = "turn_finished"
    result: TurnResult


class AlertRaised(EventBase):
    """A user-facing warning or error about this session (also in ``session.alerts``)."""

    kind: Literal["alert"] = "alert"
    alert: Alert


class LlmRetried(EventBase):
    """The run's current LLM request is being retried after a failed attempt.

    A retry streams the answer anew from its start. When the failed attempt
    had already streamed part of an answer (a connection cut mid-stream, a
    malformed chunk), the run's :class:`TextDelta` events since its previous
    ``LlmRetried`` (or since the request began) are void:
    ``discard_streamed_text`` is then true and ``discard_chars`` is how many
    characters of the run's streamed text to drop from its end before
    appending the retry's deltas. History is unaffected (it holds only the
    completed answer).
    """

    kind: Literal["llm_retried"] = "llm_retried"
    run_id: str
    attempt: int
    reason: str
    discard_streamed_text: bool = False
    discard_chars: int = Field(default=0, ge=0)


SessionEvent = Annotated[
    RunStarted
    | ItemAdded
    | TextDelta
    | ToolStarted
    | ToolFinished
    | RunPaused
    | TurnFinished
    | AlertRaised
    | LlmRetried,
    Field(discriminator="kind"),
]
"""Everything a session subscriber may receive (the speculation controller adds its own kinds)."""
