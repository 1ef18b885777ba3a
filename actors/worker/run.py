"""A run's records, plain data the phases share: the run, its calls, its hook chain.

:class:`Run` (a submit's run; its status is its phase alone, see
:mod:`~actors.worker.run_state`), :class:`Call` (one tool call of an answer),
:class:`ChainRun` (one hook chain in progress), and the small pure helpers the
phases use on them: the refusal texts, :func:`match_results`,
the inline-or-stored test. No actor here: each is unit-testable on its own.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fore.actors.blobs.summary import fits_utf8
from fore.actors.core.cancel import CancelScope, Registration
from fore.actors.core.future import PooledFuture
from fore.actors.core.timer import TimerHandle
from fore.actors.output.contract import OutputRun
from fore.actors.telemetry.limits import LimitGuard
from fore.actors.worker.hookrun import HookJob
from fore.actors.worker.hooks import ChainState, HookSpec, LlmRequestContext, ToolCallContext
from fore.actors.worker.run_state import CallStatus, RunProgress
from fore.messages.blobs import Inline, Stored
from fore.messages.conversation import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import ToolChoice, Usage
from fore.messages.session import ErrorKind, HookFailure, Submit
from fore.messages.tools import ToolCallFinished
from fore.messages.usage import UsageLimitHit

if TYPE_CHECKING:  # tracing imports opentelemetry, an optional extra: never at import time
    from fore.actors.telemetry.tracing import TurnSpan

serials = itertools.count()


def _may_exceed(text: str, threshold: int) -> bool:
    """Whether ``text`` is larger than ``threshold`` UTF-8 bytes.

    Counted as stored (lone surrogates -- e.g. file names decoded with
    ``surrogateescape`` -- count 3 bytes), so any text is measurable.
    """
    return not fits_utf8(text, threshold)


def needs_store(item: Call, threshold: int) -> bool:
    """Whether ``item``'s output goes to the blob store.

    A tool that returned a ``ToolOutput`` itself decided: ``Inline`` stays in
    history whatever its size (``inspect``'s capped answers -- storing them
    again would hand the model a summary of what it asked to read), ``Stored``
    is stored whatever its size. Plain values are stored past the threshold.
    """
    assert item.result is not None
    if isinstance(item.explicit, Inline):
        return False
    if isinstance(item.explicit, Stored):
        return True
    return _may_exceed(item.result.output, threshold)


def fits(text: str, threshold: int) -> bool:
    return not _may_exceed(text, threshold)


def wrap_up_choice(wrap_up: bool, turn: int, max_turns: int) -> ToolChoice:
    """The tool choice of LLM call ``turn`` of ``max_turns`` (see ``WorkerConfig.wrap_up``)."""
    return "none" if wrap_up and turn >= max_turns else "auto"


_BLOB_MARK = "[blob:"


def blob_texts(item: Item) -> tuple[str, ...]:
    """The texts of ``item`` that quote a ``[blob:<id>]`` reference (cheap substring test)."""
    if isinstance(item, ToolResult):
        texts: tuple[str, ...] = (item.output,)
    elif isinstance(item, UserMessage | AssistantMessage | SystemMessage):
        texts = (item.text,)
    else:  # pragma: no cover - every item kind is above
        return ()
    return tuple(t for t in texts if _BLOB_MARK in t)


def ignore_problem(_problem: str | None) -> None:
    """The answer of a save nobody waits for (the worker is stopping)."""


def match_results(
    calls: Sequence[ToolCall], results: Iterable[ToolCallFinished]
) -> list[ToolCallFinished | None]:
    """Each call's result by call id (``None``: no result was reported for it).

    The pool reports results in call order, but pairing must not rest on it:
    a result given to the wrong call would put one call's output under
    another's id. Repeated ids (a model may repeat one) are matched in order.
    """
    by_id: dict[str, deque[ToolCallFinished]] = {}
    for finished in results:
        by_id.setdefault(finished.result.call_id, deque()).append(finished)
    matched: list[ToolCallFinished | None] = []
    for call in calls:
        queue = by_id.get(call.id)
        matched.append(queue.popleft() if queue else None)
    return matched


def over_cap_text(calls: int, cap: int) -> str:
    """The result of a call past ``WorkerConfig.max_batch_calls`` (it was not run)."""
    return (
        f"Not run: this answer made {calls} tool calls and at most {cap} of them run per "
        f"answer (the first {cap}). Make this call again in a later answer if it is "
        "still needed."
    )


def bad_arguments_text(call: ToolCall) -> str:
    """The result of a call whose arguments are not a JSON object (it was not run)."""
    return (
        f"Error: the call was not run: its {call.arguments_error}. Call {call.name} again "
        "with its arguments as one valid JSON object."
    )


@dataclass
class Call:
    call: ToolCall
    ctx: ToolCallContext
    status: CallStatus = "pending"
    executed: ToolCall | None = None
    """What runs: the model's id and name with the arguments the pre hooks left."""
    result: ToolResult | None = None
    outcome: str = ""
    stored_summary: str | None = None
    explicit: Inline | Stored | None = None
    """The ToolOutput the tool returned itself: it decides inline vs stored, not the size."""
    post_done: bool = False
    """The result passed its post_tool_call hooks (or is synthetic and needs none)."""
    committed: bool = False
    pinned: bool = False
    """The blob store converted the result (and pinned every blob its text references)."""
    gate_args: dict[str, Any] | None = None
    """Strict mode: the arguments the interceptor (the speculation gate) approved."""
    approval_args: dict[str, Any] | None = None
    """The arguments the session's approval policy judged (a hook that changes them
    has them judged again)."""


@dataclass
class Run(RunProgress):
    """One submit's run. Its status is its phase alone (:class:`RunProgress`)."""

    run_id: str
    start_len: int
    max_turns: int
    scope: CancelScope = field(default_factory=CancelScope)
    """What cancels the run's work wherever it is: its LLM requests and tool batches
    carry it, so a cancel that overtakes them on their way stops them at arrival.
    The submit's own (``Submit.scope``) when its sender made one."""
    cancel_registration: Registration | None = None
    """The worker's callback on a sender's scope (its cancel ends the run), while pending."""
    reply: PooledFuture[Any] | None = None
    submit_id: str | None = None
    started: bool = False
    """The user message is in history: the run started (it gets on_abort if it ends early)."""
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    llm_request_id: str | None = None
    llm_ctx: LlmRequestContext | None = None
    """The request as sent (after the interceptor and the pre_llm_request hooks)."""
    llm_base: LlmRequestContext | None = None
    """The request as the interceptor left it (what its own callbacks are given)."""
    sent_history_len: int = 0
    """Length of history when ``llm_ctx`` was sent (what came after is its answer)."""
    llm_retried: bool = False
    argument_retries: int = 0
    """Answers with unusable tool arguments handed back to the model in this run."""
    streamed_chars: int = 0
    """Text forwarded as TextDelta for the current request attempt (void on a retry)."""
    pending_messages: list[Item] = field(default_factory=list)
    """Resume messages given at a tool-call pause: they go in after the batch's results."""
    assistant_index: int | None = None
    calls: list[Call] = field(default_factory=list)
    index: int = 0
    batch_id: str | None = None
    resume_point: tuple[Any, ...] | None = None
    pause_requested: str | None = None
    boundary: dict[str, Any] | None = None
    error_kind: ErrorKind | None = None
    hook_failure: HookFailure | None = None
    successor: tuple[Run, Submit] | None = None
    """A submit that interrupted this paused run; it starts once this run has ended
    (unless its scope was cancelled meanwhile: then it ends without starting)."""
    # -- telemetry (issue 28) --
    span: TurnSpan | None = None
    """Its :class:`~actors.telemetry.tracing.TurnSpan` (telemetry on)."""
    limits: LimitGuard | None = None
    """Its usage limits and the session's (main runs with limits only)."""
    usage_limit: UsageLimitHit | None = None
    output: OutputRun | None = None
    """Structured output: the run's ``OutputRun`` (actors.output), shared with the
    OutputInterceptor through ``SessionState.output`` while the run is current."""

    def call_off(self, reason: str) -> bool:
        """The worker cancels the run's scope itself; False if it already was cancelled.

        Its own callback on the scope is taken back first: the worker is the
        one cancelling, so nothing needs to be posted back to it.
        """
        registration, self.cancel_registration = self.cancel_registration, None
        if registration is not None:
            registration.remove()
        return self.scope.cancel(reason)


@dataclass
class ChainRun:
    """One hook chain in progress: which run, its state, and where to go next."""

    run: Run
    state: ChainState
    done: Callable[[ChainState], None]
    abort_chain: bool
    spec: HookSpec | None = None
    token: object | None = None
    job: HookJob | None = None
    wait_timer: TimerHandle | None = None
    """Fires if the hook has not started within ``Hooks.start_timeout``."""
