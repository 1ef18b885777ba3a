"""The worker: one session's agent loop as an event-driven actor.

A run is prompt -> LLM -> (tool calls -> results -> LLM)* -> done. Every step
is a message the worker reacts to -- a submit, an LLM stream event, a tool
result, a hook's answer, a pause/resume, a cancel -- so the worker never
blocks a dispatcher thread and is abortable at any point:

* LLM requests go to the gateway; their events come back here;
* tool batches go to the shared pool; their results come back here;
* hooks (user code) run on the hook lane, one at a time, each with a
  timeout that starts when it starts running, through the session's
  :class:`~actors.worker.hookrun.HookGate`; their answers come back here.
  The trusted interceptor runs inline.

History integrity is the worker's first promise: every tool call in history
gets exactly one result -- a real one, or a synthetic ``Skipped`` /
``Cancelled`` / ``Aborted`` / ``Interrupted`` one -- so history is never in a
state an LLM provider rejects.

The model is not trusted to be reasonable. An empty answer is kept in
history (dropping it would put two user turns in a row). Of one answer's tool
calls at most ``WorkerConfig.max_batch_calls`` run; each call past them gets
an error result. A call whose arguments are not a JSON object
(``ToolCall.arguments_error``) is not run: its error result says why, so the
model can correct itself, up to ``max_argument_retries`` answers per run; the
next such answer ends the run as an LLM protocol error. However many calls,
hooks and steps follow each other, continuations run one after another
(:meth:`Worker._then`), never nested: the stack stays flat.

A run that is ending stays ended: once a cancel, an abort or a failure has
begun a run's ending (its on_abort chain), no continuation of work that was
already under way -- a file-reference preparer, a blob-store answer, a hook
answer -- may take the run further. Every continuation checks :func:`_live`
first, and no new hook chain starts for an ending run except its on_abort.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from pykka import ActorDeadError
from pykka._envelope import Envelope

from fore.actors.blobs.summary import fits_utf8, truncated_fallback
from fore.actors.core.future import PooledFuture
from fore.actors.core.pooled import ForeActor, handles
from fore.actors.core.timer import TimerHandle
from fore.actors.output.interceptor import start_output
from fore.actors.speculation.fork import snapshot_version
from fore.actors.telemetry.limits import LimitGuard, SessionUsage
from fore.actors.tools.base import ToolRegistry, ToolServices
from fore.actors.worker.approval import refusal
from fore.actors.worker.hookrun import DetachedChain, HookJob
from fore.actors.worker.hooks import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_START_TIMEOUT,
    NOT_APPLICABLE,
    Abort,
    AbortContext,
    Cancel,
    ChainState,
    Continue,
    ContinueWithMessages,
    HookError,
    HookEvent,
    Hooks,
    HookSpec,
    HookTimeout,
    LlmRequestContext,
    Pause,
    Paused,
    PostToolCallContext,
    PromptContext,
    Skip,
    ToolCallContext,
    ToolMeta,
    ToolOutcome,
    TurnEndContext,
    advance,
    edit_problem,
    final_outcome,
    messages_problem,
    next_hook,
    outcome_problem,
    raised_error,
)
from fore.actors.worker.interceptor import (
    AnswerCall,
    Boundary,
    ContinueWith,
    Interceptor,
    RetryRequest,
)
from fore.actors.worker.persistence import Persistence, TurnWriter
from fore.actors.worker.run_state import ALLOWED, CallStatus, Ending, RunProgress
from fore.actors.worker.state import PreparedInput, SessionState, prepare_plain, submit_segments
from fore.errors import WorkerBusy
from fore.messages.alerts import Alert, AlertLevel
from fore.messages.blob_store import ReferenceBlobs, StoredOutput, StoreToolOutput
from fore.messages.blobs import BlobLimits, Inline, Stored, Text
from fore.messages.conversation import (
    AssistantMessage,
    FileRef,
    Item,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import (
    CancelLlmRequest,
    LlmCancelled,
    LlmCompleted,
    LlmError,
    LlmFailed,
    LlmRequest,
    LlmRetrying,
    LlmTextDelta,
    LlmToolCallDelta,
    Purpose,
    ToolChoice,
    Usage,
)
from fore.messages.session import (
    AddTool,
    AlertRaised,
    CancelRun,
    ErrorKind,
    GetHistory,
    GetRunState,
    HookFailure,
    ItemAdded,
    LlmRetried,
    PauseRun,
    Resume,
    RunPaused,
    RunStarted,
    RunState,
    RunStatus,
    SetModel,
    Submit,
    Subscribe,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnResult,
    Unsubscribe,
)
from fore.messages.speculation import ForkSnapshot, InsertItems, SnapshotTaken
from fore.messages.tools import (
    CancelToolCalls,
    RunToolBatch,
    ToolBatchFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from fore.messages.usage import UsageLimitHit

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["WorkerBusy"]

_ids = itertools.count()


def _may_exceed(text: str, threshold: int) -> bool:
    """Whether ``text`` is larger than ``threshold`` UTF-8 bytes.

    Counted as stored (lone surrogates -- e.g. file names decoded with
    ``surrogateescape`` -- count 3 bytes), so any text is measurable.
    """
    return not fits_utf8(text, threshold)


def _needs_store(item: _Call, threshold: int) -> bool:
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


def _fits(text: str, threshold: int) -> bool:
    return not _may_exceed(text, threshold)


def wrap_up_choice(wrap_up: bool, turn: int, max_turns: int) -> ToolChoice:
    """The tool choice of LLM call ``turn`` of ``max_turns`` (see ``WorkerConfig.wrap_up``)."""
    return "none" if wrap_up and turn >= max_turns else "auto"


def _live(run: _Run) -> bool:
    """The run may go on: it has not ended, and its ending (on_abort) has not begun."""
    return not run.ended and not run.aborted and run.end_save is None


_BLOB_MARK = "[blob:"


def _blob_texts(item: Item) -> tuple[str, ...]:
    """The texts of ``item`` that quote a ``[blob:<id>]`` reference (cheap substring test)."""
    if isinstance(item, ToolResult):
        texts: tuple[str, ...] = (item.output,)
    elif isinstance(item, UserMessage | AssistantMessage | SystemMessage):
        texts = (item.text,)
    else:  # pragma: no cover - every item kind is above
        return ()
    return tuple(t for t in texts if _BLOB_MARK in t)


def _ignore(_problem: str | None) -> None:
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


MAX_EARLY_CANCELS = 256
"""How many cancels that overtook their submit a worker remembers (oldest dropped)."""

DEFAULT_MAX_BATCH_CALLS = 128
"""Tool calls of one answer that may run (``WorkerConfig.max_batch_calls``)."""

DEFAULT_MAX_ARGUMENT_RETRIES = 3
"""Answers with unusable tool arguments a run hands back to the model
(``WorkerConfig.max_argument_retries``)."""


@dataclass
class WorkerConfig:
    """Everything a worker needs; built by the Runtime for each session."""

    session_id: str
    model: Any
    gateway: Any
    tool_pool: Any
    fs: Any
    tools: ToolRegistry
    hooks: Hooks = field(default_factory=Hooks)
    interceptor: Interceptor = field(default_factory=Interceptor)
    state: SessionState = field(default_factory=SessionState)
    services: ToolServices = field(default_factory=ToolServices)
    model_name: str = ""
    system_prompt: str | None = None
    purpose: Purpose = "main"
    max_turns: int = 50
    call_timeout: float = 120.0
    tool_concurrency: int | None = None
    hidden_tools: frozenset[str] = frozenset()
    strict_tool_hooks: bool = False
    """Any pre_tool_call result but Continue is a boundary (speculation)."""
    preparer: Callable[[Submit], PreparedInput] | None = None
    """Turns a submit into the user message (e.g. resolving ``@path`` references)."""
    blob_store: Any = None
    """The blob-store actor: large outputs are stored there and summarised in history."""
    blob_limits: BlobLimits = field(default_factory=BlobLimits)
    alert_sink: Any = None
    stream: bool = True
    """Ask the model for a streamed answer (text shown as it arrives). A speculation's
    worker follows ``SpeculationConfig.stream_forks`` (on by default, so that an abort
    closes the stream and the server stops generating)."""
    max_batch_calls: int = DEFAULT_MAX_BATCH_CALLS
    """Tool calls of one answer that may run; each call past it gets an error result
    saying so (it is not run, not shown to hooks). A model is not trusted to stay
    reasonable: this bounds what one answer can set in motion."""
    max_argument_retries: int = DEFAULT_MAX_ARGUMENT_RETRIES
    """How many answers with tool arguments that are not a JSON object
    (``ToolCall.arguments_error``) a run hands back to the model as error results,
    so it can correct itself; the next one ends the run as an LLM protocol error.
    ``0``: the first one does."""
    wrap_up: bool = False
    """Make the last LLM call the run's budget allows with ``tool_choice: "none"``.

    A model that keeps calling tools (small local models in llama.cpp's
    function-calling mode do) otherwise ends every run at ``max_turns`` with
    no answer; with ``wrap_up`` its last call must answer from what the tools
    returned -- LangChain's ``early_stopping_method="generate"``. A hook or
    interceptor that sets its own ``tool_choice`` still wins."""
    # -- telemetry (issue 28) --
    telemetry: Any = None
    """The runtime's :class:`~actors.telemetry.tracing.Instrumentation` (``None``: off)."""
    session_usage: SessionUsage | None = None
    """The session's usage limits and its main requests so far (kept across restarts)."""
    persist: Persistence | None = None
    """The session's write-ahead to its session store (:mod:`actors.worker.persistence`);
    ``None``: history lives in memory only (no store, or a speculation's worker)."""

    def __post_init__(self) -> None:
        if self.max_batch_calls < 1:
            raise ValueError("max_batch_calls must be at least 1")
        if self.max_argument_retries < 0:
            raise ValueError("max_argument_retries must not be negative")


@dataclass
class _Call:
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
class _Run(RunProgress):
    """One submit's run. Its status is its phase alone (:class:`RunProgress`)."""

    run_id: str
    start_len: int
    max_turns: int
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
    calls: list[_Call] = field(default_factory=list)
    index: int = 0
    batch_id: str | None = None
    resume_point: tuple[Any, ...] | None = None
    pause_requested: str | None = None
    boundary: dict[str, Any] | None = None
    error_kind: ErrorKind | None = None
    hook_failure: HookFailure | None = None
    successor: tuple[_Run, Submit] | None = None
    """A submit that interrupted this paused run; it starts once this run has ended."""
    cancel_reason: str | None = None
    """Cancelled while queued behind an interrupted run: it ends without starting."""
    saving: bool = False
    """Its end is being written to the session store (reported once that is done)."""
    end_save: Ending | None = None
    """Set while its end is written to the session store (phase ``saving``): the status
    and error it then ends with. Until then it is ending: nothing left to cancel."""
    # -- telemetry (issue 28) --
    span: Any = None
    """Its :class:`~actors.telemetry.tracing.TurnSpan` (telemetry on)."""
    limits: LimitGuard | None = None
    """Its usage limits and the session's (main runs with limits only)."""
    usage_limit: UsageLimitHit | None = None
    output: Any = None
    """Structured output: the run's ``OutputRun`` (actors.output), shared with the
    OutputInterceptor through ``SessionState.output`` while the run is current."""


@dataclass
class _ChainRun:
    """One hook chain in progress: which run, its state, and where to go next."""

    run: _Run
    state: ChainState
    done: Callable[[ChainState], None]
    abort_chain: bool
    spec: HookSpec | None = None
    token: object | None = None
    job: HookJob | None = None
    wait_timer: TimerHandle | None = None
    """Fires if the hook has not started within ``Hooks.start_timeout``."""


class Worker(ForeActor):
    """One session's agent loop (see module docs)."""

    def __init__(self, config: WorkerConfig) -> None:
        super().__init__()
        self.config = config
        self.session_id = config.session_id
        self.state = config.state
        self._run: _Run | None = None
        self._chain_run: _ChainRun | None = None
        self._chain_token: object | None = None
        self._early_cancels: OrderedDict[str, str] = OrderedDict()
        """Cancels that named a submit not received yet: submit id -> reason."""
        self._seen_submits: OrderedDict[str, None] = OrderedDict()
        """Submit ids received (bounded): a late cancel for one is not an early cancel."""
        self._continuations: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._draining = False
        self._writer = None if config.persist is None else TurnWriter(self, config.persist)
        self._held: list[tuple[Any, PooledFuture[Any] | None]] | None = None
        """Messages that arrived while a restarted worker reloads from the store."""
        self._stopping = False

    # -- lifecycle -------------------------------------------------------------

    def on_start(self) -> None:
        self.config.interceptor.attach(self.alert)
        self.state.output = None  # a crashed incarnation's structured run is over
        if self._writer is not None and self._writer.started():
            # A restart: history comes back from the session store first.
            self._held = []
            self._writer.reload(self._reloaded)
            return
        self._repair()

    def _repair(self) -> None:
        repaired = self.state.repair("Interrupted: the session's worker restarted")
        for item in repaired:
            self._emit(ItemAdded(session_id=self.config.session_id, run_id=None, item=item))

    def on_stop(self) -> None:
        """The session closed under a run: cancel it; its on_abort hooks still run once."""
        self._stopping = True  # no more waiting on the store: the end is reported now
        run = self._run
        if run is None or run.ended:
            return
        successor, run.successor = run.successor, None
        if run.end_save is not None or run.ending is not None:
            # Already ending: keep the status it is ending with.
            end = run.end_save or run.ending
            assert end is not None
            status, error = end.status, end.error
        else:
            status, error = "cancelled", "session closed"
            self._close_open_calls(run, "Cancelled: the session closed")
        self._abort_detached(run, status, error or status)
        self._cancel_inflight(run, "session closed")
        self._complete(run, status, error)
        if successor is not None:  # queued behind the run; it never started
            self._answer_unstarted(successor[0], "cancelled", "session closed")

    def on_failure(self, *exc_info: Any) -> None:
        run = self._run
        if run is not None and not run.ended:
            reason = f"the session's worker failed: {exc_info[1]!r}"
            if run.span is not None:
                run.span.fail(reason)
            self._abort_detached(run, "error", reason)
            self._cancel_inflight(run, "worker failed")
            if run.reply is not None:
                run.reply.try_set_exception(RuntimeError(reason))
            if run.successor is not None and run.successor[0].reply is not None:
                run.successor[0].reply.try_set_exception(RuntimeError(reason))

    def _hooks_config(self) -> tuple[float, float, int]:
        """``(default_timeout, start_timeout, max_in_flight)`` of the session's hooks."""
        hooks = self.config.hooks
        return (
            hooks.default_timeout,
            getattr(hooks, "start_timeout", DEFAULT_START_TIMEOUT),
            getattr(hooks, "max_in_flight", DEFAULT_MAX_IN_FLIGHT),
        )

    def _abort_detached(self, run: _Run, status: RunStatus, reason: str) -> None:
        """Run what is left of ``run``'s on_abort when no message will reach this actor again.

        If on_abort has not started, it starts now (the interceptor inline,
        the hooks detached). If its chain is under way, a hook in flight that
        has started finishes on its own and the hooks after it run detached; a
        hook that had not started yet is withdrawn and runs detached instead:
        each hook runs exactly once either way. A run that never started
        (nothing of it in history) gets no on_abort.
        """
        hooks = self.config.hooks
        chain = self._chain_run
        if run.end_save is not None:
            return  # it ended; only its report waits for the store
        if run.aborted:
            if chain is None or chain.run is not run or chain.state.event is not HookEvent.ON_ABORT:
                return
            job = chain.job
            first = chain.state.index
            if job is not None and not job.withdraw():
                first += 1  # it started (or finished): it is not run again
            specs = chain.state.specs[first:]
            ctx = chain.state.ctx
        elif not run.started:
            self._submit_cancelled()
            return
        else:
            run.begin_ending(status, reason)
            ctx = AbortContext(
                session_id=self.config.session_id,
                purpose=self.config.purpose,
                reason=reason,
                status=status,
            )
            try:
                self.config.interceptor.on_abort(ctx)
            except Exception:
                self.log.exception("interceptor_on_abort_failed")
            specs = hooks.chain(HookEvent.ON_ABORT)
        if specs:
            default_timeout, start_timeout, cap = self._hooks_config()
            DetachedChain(
                HookEvent.ON_ABORT,
                specs,
                ctx,
                lane=self.system.hooks,
                timer=self.system.timer,
                gate=self.state.hook_gate,
                cap=cap,
                default_timeout=default_timeout,
                start_timeout=start_timeout,
                log=self.log,
            ).start()

    # -- the session store: write-ahead and reload (actors/worker/persistence.py) ----

    def on_receive(self, message: Any) -> Any:
        held = self._held
        if held is not None:  # reloading after a restart: handled once history is back
            held.append((message, self.defer_reply()))
            return None
        return super().on_receive(message)

    def _reloaded(self, kept: int, lost: int, problem: str | None) -> None:
        """History is back from the store: repair it, say what was lost, handle what waited."""
        if problem is not None:
            self.alert(
                AlertLevel.ERROR,
                f"the session's worker restarted and could not reload history from the session "
                f"store ({problem}); it goes on with the history in memory",
                "store",
            )
        elif lost:
            self.alert(
                AlertLevel.WARN,
                f"the session's worker restarted: the turn in flight was lost ({lost} "
                f"item{'' if lost == 1 else 's'} not saved); history was reloaded from the "
                "session store"
                + (f", with {kept} unsaved item(s) of earlier turns kept" if kept else ""),
                "store",
            )
        self._repair()
        held, self._held = self._held or [], None
        for message, reply in held:
            # In arrival order, each as if it had just arrived (its reply kept).
            self._fore_process(Envelope(message, reply_to=reply))

    def _save_then(self, run: _Run | None, then: Callable[[str | None], None]) -> bool:
        """Write history so far to the store, then ``then(problem)``; False: nothing to write."""
        writer = self._writer
        if writer is None:
            return False
        usage = None
        if run is not None and not run.saving:
            run.saving = True
            usage = run.usage
        if self._stopping:
            # The session is closing under the run: its end is reported now, and
            # its items still go to the store (closing the session waits for it).
            writer.save(_ignore, usage=usage)
            return False
        return writer.save(then, usage=usage)

    def _store_failed(self, problem: str, what: str) -> str:
        text = (
            f"the session store could not save {what} ({problem}); its items stay in this "
            "process's memory and are written with the next save that succeeds"
        )
        self.alert(AlertLevel.ERROR, text, "store")
        return text

    def _saved(self, run: _Run, problem: str | None) -> None:
        """The run's end is in the store (or could not be written): report it now."""
        if run.ended:
            return
        end = run.end_save or run.ending or Ending("completed", None)
        if problem is not None:
            end = Ending("error", self._store_failed(problem, "this turn"))
            run.end_save = end
            run.error_kind = "store"
        self._complete(run, end.status, end.error)

    def _pause_saved(
        self, run: _Run, reason: str, where: str, point: tuple[Any, ...], problem: str | None
    ) -> None:
        if not _live(run):
            return  # cancelled while it was saved: its end reports
        if problem is not None:
            self._store_failed(problem, "the paused turn")
        self._pause(run, reason, where, point, saved=True)

    # -- subscription and queries ------------------------------------------------

    @handles(Subscribe)
    def _on_subscribe(self, message: Subscribe) -> None:
        self.state.subscribers.append(message.address)

    @handles(Unsubscribe)
    def _on_unsubscribe(self, message: Unsubscribe) -> None:
        if message.address in self.state.subscribers:
            self.state.subscribers.remove(message.address)

    @handles(InsertItems)
    def _on_insert(self, message: InsertItems) -> str | None:
        """Accepted speculation: append its items; after a boundary, continue the turn."""
        current = self._run
        if current is not None and not current.ended:
            raise WorkerBusy(f"session {self.config.session_id} is busy with run {current.run_id}")
        if not message.continue_calls and not message.continue_turn:
            for item in message.items:
                self._append(None, item)
            reply = self.defer_reply() if self._writer is not None else None

            def inserted(problem: str | None) -> None:
                if problem is not None:
                    self._store_failed(problem, "the accepted speculation's items")
                if reply is not None:
                    reply.try_set(None)

            if not self._save_then(None, inserted):
                inserted(None)
            return None
        # Answered at once (the items are in history); the continuation's end
        # is its TurnFinished event.
        run = _Run(
            run_id=f"run-{uuid.uuid4().hex[:12]}",
            start_len=len(self.state.history),
            max_turns=self.config.max_turns,
            started=True,
        )
        self._run = run
        self._observe(run, None)
        if not message.continue_calls:
            # A speculation stopped by a budget, ending in tool results: the turn
            # goes on with an LLM request on the history as it now is.
            for item in message.items:
                self._append(run, item)
            return self._inserted(run, lambda: self._llm_turn(run))
        items = list(message.items)
        extra = tuple(message.continue_calls)
        last = max(
            (i for i, it in enumerate(items) if isinstance(it, AssistantMessage)), default=None
        )
        # The speculation removed the calls it did not run; give them back to the
        # answer that made them, after the calls that did run.
        if last is not None and not any(isinstance(it, UserMessage) for it in items[last:]):
            old = items[last]
            assert isinstance(old, AssistantMessage)
            items[last] = old.model_copy(update={"tool_calls": (*old.tool_calls, *extra)})
        else:
            last = len(items)
            items.append(AssistantMessage(text="", tool_calls=extra))
        for item in items:
            self._append(run, item)
        assistant = items[last]
        assert isinstance(assistant, AssistantMessage)
        run.assistant_index = run.start_len + last
        return self._inserted(run, lambda: self._start_tools(run, assistant, only=extra))

    def _inserted(self, run: _Run, go_on: Callable[[], None]) -> str | None:
        """The accepted items are in history: save them (a store), answer, continue the turn."""
        reply = self.defer_reply() if self._writer is not None else None

        def saved(problem: str | None) -> None:
            if problem is not None:
                self._store_failed(problem, "the accepted speculation's items")
            if reply is not None:
                reply.try_set(run.run_id)
            if _live(run):  # from saving (or starting) it goes on as from starting
                self._emit(
                    RunStarted(session_id=self.config.session_id, run_id=run.run_id, text="")
                )
                go_on()

        if self._writer is not None:
            run.phase = "saving"
            if self._writer.save(saved):
                return None
        saved(None)
        return run.run_id

    @handles(AddTool)
    def _on_add_tool(self, message: AddTool) -> None:
        self.config.tools = self.config.tools.with_tool(message.tool)

    @handles(SetModel)
    def _on_set_model(self, message: SetModel) -> None:
        """Switch models between runs (issue 24): a run keeps the model it began with."""
        run = self._run
        if run is not None and not run.ended:
            raise WorkerBusy("a run is in progress: switch models between turns")
        self.config.model = message.model
        self.config.model_name = message.model_name or str(getattr(message.model, "name", ""))

    @handles(GetHistory)
    def _on_history(self, _message: GetHistory) -> tuple[Item, ...]:
        return tuple(self.state.history)

    @handles(GetRunState)
    def _on_run_state(self, _message: GetRunState) -> RunState:
        run = self._run
        status = "idle" if run is None else "paused" if run.phase == "paused" else "running"
        return RunState(
            session_id=self.config.session_id,
            status=status,
            phase="idle" if run is None else run.phase,
            run_id=None if run is None else run.run_id,
            turns_used=0 if run is None else run.turns,
            history_length=len(self.state.history),
        )

    def _emit(self, event: Any) -> None:
        for subscriber in list(self.state.subscribers):
            try:
                subscriber.tell(event)
            except ActorDeadError:
                self.state.subscribers.remove(subscriber)

    def alert(self, level: AlertLevel, text: str, source: str) -> Alert:
        alert = Alert(level=level, text=text, session=self.config.session_id, source=source)
        self.state.alerts.append(alert)
        sink = self.config.alert_sink
        if sink is not None:
            try:
                sink.tell(alert)  # subscribers (the session's event stream) get it from there
                return alert
            except ActorDeadError:
                pass
        self._emit(AlertRaised(session_id=self.config.session_id, alert=alert))
        return alert

    # -- history -------------------------------------------------------------------

    def _append(self, run: _Run | None, item: Item, *, pinned: bool = False) -> None:
        """Append ``item`` to history; pin the blobs its text references (unless ``pinned``).

        Retention never removes a blob a live session references: a tool
        output converted by the blob store is pinned by the store itself;
        anything else that quotes ``[blob:<id>]`` -- a user submit, a model
        answer, an inline tool output, items a hook or a speculation added --
        is pinned here with a :class:`ReferenceBlobs` (a tell; the store scans
        the text off its dispatcher thread).
        """
        self.state.history.append(item)
        if not pinned:
            self._reference_blobs(item)
        self._emit(
            ItemAdded(session_id=self.config.session_id, run_id=run and run.run_id, item=item)
        )

    def _reference_blobs(self, item: Item) -> None:
        store = self.config.blob_store
        if store is None:
            return
        texts = _blob_texts(item)
        if not texts:
            return
        try:
            store.tell(ReferenceBlobs(session_id=self.config.session_id, texts=texts))
        except ActorDeadError:
            self.log.warning("blob_reference_not_sent", reason="the blob store is gone")

    # -- submit ---------------------------------------------------------------------

    @handles(Submit)
    def _on_submit(self, message: Submit) -> None:
        sid = message.submit_id
        early = self._early_cancels.pop(sid, None) if sid is not None else None
        current = self._run
        busy = current is not None and not current.ended
        ending = current is not None and (current.aborted or current.end_save is not None)
        queue_behind = busy and ending
        interrupt = busy and not ending
        if early is None and busy:
            assert current is not None
            if queue_behind and current.successor is not None:
                raise WorkerBusy(
                    f"session {self.session_id} is ending run {current.run_id} and already "
                    "has a submit queued behind it"
                )
            if interrupt and current.phase != "paused":
                raise WorkerBusy(f"session {self.session_id} is busy with run {current.run_id}")
        output = start_output(message.output, self.config.interceptor)  # refuses, or None
        if sid is not None:
            self._seen_submits[sid] = None
            while len(self._seen_submits) > MAX_EARLY_CANCELS:
                self._seen_submits.popitem(last=False)
        run = _Run(
            run_id=f"run-{uuid.uuid4().hex[:12]}",
            start_len=len(self.state.history),
            max_turns=message.max_turns or self.config.max_turns,
            reply=self.defer_reply(),
            submit_id=sid,
            output=output,
        )
        if early is not None:
            # Its cancel overtook it on the control lane: it never starts.
            self._answer_unstarted(run, "cancelled", early)
            return
        if current is not None and busy:
            if queue_behind:
                # The current run is ending (its on_abort hooks are running, each
                # under a deadline): this submit starts as soon as it has ended.
                current.successor = (run, message)
                return
            # The paused run ends first (its on_abort included); this one starts after.
            self._interrupt(current, (run, message))
            return
        self._begin(run, message)

    def _begin(self, run: _Run, message: Submit) -> None:
        run.start_len = len(self.state.history)
        if run.cancel_reason is not None:
            # Cancelled while it waited for the run before it to end: it never started.
            self._answer_unstarted(run, "cancelled", run.cancel_reason)
            return
        self._run = run
        self._observe(run, message)
        self.state.output = run.output  # structured output: read by the OutputInterceptor
        run.phase = "preparing"
        preparer = self.config.preparer
        segments = submit_segments(message)
        if preparer is None or not any(isinstance(seg, FileRef) for seg in segments):
            # Nothing to resolve: no file access, so no hop to the blocking lane.
            self._prepared(run, prepare_plain(message))
        else:
            self.run_blocking(
                preparer,
                message,
                then=lambda prepared: self._prepared(run, prepared),
                on_error=lambda exc: self._fail(
                    run, f"preparing the input failed: {exc!r}", kind="input"
                ),
            )

    def _answer_unstarted(self, run: _Run, status: RunStatus, reason: str) -> None:
        """End a submit that never started (nothing of it in history, no hooks, no on_abort).

        It is not the worker's current run, so nothing of the current run --
        the interceptor's state, the stash -- is touched.
        """
        run.phase = "ended"
        result = self._result(run, status, reason)
        self._emit(TurnFinished(session_id=self.config.session_id, result=result))
        reply, run.reply = run.reply, None
        if reply is not None:
            reply.try_set(result)

    def _submit_cancelled(self) -> None:
        try:
            self.config.interceptor.on_submit_cancelled()
        except Exception:
            self.log.exception("interceptor_on_submit_cancelled_failed")

    def _prepared(self, run: _Run, prepared: PreparedInput) -> None:
        if not _live(run):
            return  # cancelled while its input was prepared
        for level, text, source in prepared.alerts:
            self.alert(level, text, source)
        self.state.stash = list(prepared.stash)  # drained by the file-ref interceptor
        self._emit(
            RunStarted(session_id=self.config.session_id, run_id=run.run_id, text=prepared.text)
        )
        user = UserMessage(text=prepared.text, segments=prepared.segments)
        interceptor = self.config.interceptor
        verdict = interceptor.on_prompt_submit(user)
        if isinstance(verdict, Cancel):
            self._complete(run, "rejected", verdict.reason or "submit cancelled")
            return
        extras = verdict.items if isinstance(verdict, ContinueWith) else ()
        ctx = PromptContext(
            session_id=self.config.session_id,
            purpose=self.config.purpose,
            text=user.text,
            segments=user.segments,
        )
        run.phase = "on_prompt_submit"

        def done(state: ChainState) -> None:
            outcome = final_outcome(state)
            if isinstance(outcome, Cancel):
                # The run never started (nothing entered history): no on_abort.
                self._submit_cancelled()
                self._complete(run, "rejected", outcome.reason or "submit cancelled by a hook")
                return
            final = user
            if ctx.text != user.text or tuple(ctx.segments) != user.segments:
                # Checked as each hook answered (edit_problem); built validated.
                try:
                    final = UserMessage(text=ctx.text, segments=tuple(ctx.segments))
                except ValidationError as exc:
                    hook = state.ran[-1] if state.ran else "on_prompt_submit"
                    error = HookError(
                        HookEvent.ON_PROMPT_SUBMIT,
                        hook,
                        f"left the prompt invalid ({exc.errors()[0]['msg']})",
                        kind="invalid_edit",
                    )
                    self._hook_failed(run, error)
                    return
            run.started = True
            self._append(run, final)
            for item in extras:
                self._append(run, item)
            self._llm_turn(run)

        self._chain(run, HookEvent.ON_PROMPT_SUBMIT, ctx, self._on_outcome(run, done))

    # -- LLM turns ---------------------------------------------------------------------

    def _llm_turn(self, run: _Run, retry: LlmRequestContext | None = None) -> None:
        """Ask the model: budget check, the interceptor, the pre_llm_request hooks, send.

        ``retry`` is the request an interceptor asked to send again
        (:class:`RetryRequest`): it is an LLM call like any other -- it counts
        against ``max_turns`` and passes the pre_llm_request hooks -- but the
        interceptor, which built it, does not see it again.
        """
        if not _live(run):
            return
        answered = self.config.interceptor.turn_answered() if retry is None else None
        if answered is not None:  # e.g. structured output's final_answer was accepted
            self._turn_end(run, answered)
            return
        if run.pause_requested is not None:
            reason, run.pause_requested = run.pause_requested, None
            point: tuple[Any, ...] = ("llm",) if retry is None else ("llm", retry)
            self._pause(run, reason, "before the next LLM request", point)
            return
        if run.turns >= run.max_turns:
            self._finish(
                run,
                "max_turns",
                f"the run's budget of {run.max_turns} LLM calls is spent",
                abort=True,
            )
            return
        if run.limits is not None and self._usage_limited(run, run.limits.before_request()):
            return
        config = self.config
        if retry is None:
            messages: list[Item] = []
            if config.system_prompt:
                messages.append(SystemMessage(text=config.system_prompt))
            messages.extend(self.state.history)
            base = LlmRequestContext(
                session_id=self.config.session_id,
                purpose=config.purpose,
                turn=run.turns + 1,
                messages=messages,
                tools=list(config.tools.definitions(exclude=config.hidden_tools)),
                tool_choice=wrap_up_choice(config.wrap_up, run.turns + 1, run.max_turns),
                model_name=config.model_name,
            )
            verdict = config.interceptor.pre_llm_request(base)
            if isinstance(verdict, Cancel):
                # The user message is in history: the run started, so on_abort runs.
                self._finish(run, "rejected", verdict.reason or "request cancelled", abort=True)
                return
        else:
            base = retry
            base.turn = run.turns + 1
        # The hooks edit a copy: the interceptor's own request object stays as it
        # left it (its callbacks are given that one), and a retry built from it
        # is not edited twice.
        if config.hooks.chain(HookEvent.PRE_LLM_REQUEST):
            ctx = dataclasses.replace(base, messages=list(base.messages), tools=list(base.tools))
        else:
            ctx = base
        run.phase = "pre_llm_request"

        def done(state: ChainState) -> None:
            outcome = final_outcome(state)
            if isinstance(outcome, Cancel):
                self._finish(
                    run, "rejected", outcome.reason or "request cancelled by a hook", abort=True
                )
                return
            self._send(run, ctx, base, edited_by=state.ran[-1] if state.ran else None)

        self._chain(run, HookEvent.PRE_LLM_REQUEST, ctx, self._on_outcome(run, done))

    def _send(
        self,
        run: _Run,
        ctx: LlmRequestContext,
        base: LlmRequestContext,
        *,
        edited_by: str | None = None,
    ) -> None:
        rid = f"{run.run_id}-{run.turns + 1}-{next(_ids)}"
        fields: dict[str, Any] = {
            "request_id": rid,
            "session_id": self.config.session_id,
            "purpose": self.config.purpose,
            "model_name": ctx.model_name,
            "messages": tuple(ctx.messages),
            "tools": tuple(ctx.tools),
            "tool_choice": ctx.tool_choice,
            "response_schema": ctx.response_schema,
            # LlmCompleted carries the assembled calls; only an output limit counts them live.
            "stream_tool_deltas": run.limits is not None and run.limits.watches_output,
            "stream": self.config.stream,
            "model": self.config.model,
            "reply_to": self.actor_ref,
            "trace": None if run.span is None else run.span.context,
        }
        if edited_by is None:
            # Without hooks every part is already a validated, frozen message, and
            # re-validating the whole history on every turn would cost O(history).
            request = LlmRequest.model_construct(**fields)
        else:
            # A request a hook edited is validated (a hook may leave anything; each
            # hook's edit was checked as it answered, this is the last word).
            try:
                request = LlmRequest(**fields)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "request"
                error = HookError(
                    HookEvent.PRE_LLM_REQUEST,
                    edited_by,
                    f"left the request invalid ({where}: {first['msg']})",
                    kind="invalid_edit",
                )
                self._hook_failed(run, error)
                return
        run.turns += 1
        run.llm_request_id = rid
        run.llm_ctx = ctx
        run.llm_base = base
        run.streamed_chars = 0
        run.sent_history_len = len(self.state.history)
        run.phase = "streaming"
        if run.limits is not None:
            run.limits.sent()
        self.config.gateway.tell(request)

    def _current_request(self, request_id: str) -> _Run | None:
        run = self._run
        if run is None or run.ended or run.llm_request_id != request_id:
            return None
        return run

    @handles(LlmTextDelta)
    def _on_text(self, message: LlmTextDelta) -> None:
        run = self._current_request(message.request_id)
        if run is not None:
            run.streamed_chars += len(message.text)
            self._emit(
                TextDelta(session_id=self.config.session_id, run_id=run.run_id, text=message.text)
            )
            if run.limits is not None:
                self._usage_limited(run, run.limits.streamed(len(message.text)))

    @handles(LlmToolCallDelta)
    def _on_tool_delta(self, message: LlmToolCallDelta) -> None:
        """Tool-call fragments are assembled by the LLM layer; only an output limit counts them."""
        run = self._current_request(message.request_id)
        if run is not None and run.limits is not None:
            chars = len(message.arguments_delta) + len(message.name or "")
            self._usage_limited(run, run.limits.streamed(chars))

    @handles(LlmRetrying)
    def _on_retrying(self, message: LlmRetrying) -> None:
        run = self._current_request(message.request_id)
        if run is not None:
            # The retry streams its answer from the start: what this attempt
            # streamed is void (see LlmRetried).
            void, run.streamed_chars = run.streamed_chars, 0
            if run.limits is not None:
                run.limits.retried()
            self._emit(
                LlmRetried(
                    session_id=self.config.session_id,
                    run_id=run.run_id,
                    attempt=message.attempt,
                    reason=message.reason,
                    discard_streamed_text=void > 0,
                    discard_chars=void,
                )
            )

    @handles(LlmCancelled)
    def _on_llm_cancelled(self, message: LlmCancelled) -> None:
        """We only cancel requests we have already let go of."""

    @handles(LlmFailed)
    def _on_llm_failed(self, message: LlmFailed) -> None:
        run = self._current_request(message.request_id)
        if run is None:
            return
        run.llm_request_id = None
        self._llm_failed(run, message.error)

    def _llm_failed(self, run: _Run, error: LlmError) -> None:
        """The request failed (or its answer was unusable): the interceptor may retry once."""
        assert run.llm_base is not None
        retry = self.config.interceptor.on_llm_error(run.llm_base, error)
        if isinstance(retry, RetryRequest) and not run.llm_retried:
            run.llm_retried = True
            self._llm_turn(run, retry=retry.ctx)
            return
        self.alert(AlertLevel.ERROR, f"LLM request failed ({error.kind}): {error.message}", "llm")
        run.error_kind = "llm"
        self._finish(run, "error", f"LLM {error.kind} error: {error.message}", abort=True)

    @handles(LlmCompleted)
    def _on_llm_completed(self, message: LlmCompleted) -> None:
        run = self._current_request(message.request_id)
        if run is None:
            return
        run.llm_request_id = None
        run.llm_retried = False
        run.usage = run.usage + message.usage  # every field, cache writes included (#27)
        assistant = message.message
        assert run.llm_base is not None
        if run.limits is not None and self._usage_limited(
            run, run.limits.answered(message.usage), answer=assistant
        ):
            return
        bad = next((c for c in assistant.tool_calls if c.arguments_error is not None), None)
        if bad is not None:
            if run.argument_retries >= self.config.max_argument_retries:
                # The bound is spent: the answer is unusable, as a protocol error.
                retries = run.argument_retries
                after = (
                    f" (after {retries} earlier answer{'' if retries == 1 else 's'} with "
                    "invalid arguments in this run)"
                    if retries
                    else ""
                )
                error = LlmError(
                    kind="protocol", message=f"tool call {bad.name!r}: {bad.arguments_error}{after}"
                )
                self._llm_failed(run, error)
                return
            run.argument_retries += 1
        self.config.interceptor.on_llm_response(run.llm_base, assistant)
        if message.finish_reason == "length":
            self._cut_off(run, assistant)
            return
        # An empty answer is kept too: dropping it would leave two user turns in
        # a row in the next request, which real servers and templates reject.
        run.assistant_index = len(self.state.history)
        self._append(run, assistant)
        if assistant.tool_calls:
            self._start_tools(run, assistant)
        else:
            self._turn_end(run, assistant)

    def _cut_off(self, run: _Run, assistant: AssistantMessage) -> None:
        """The provider cut the answer off (``finish_reason`` length): keep its text, run nothing.

        Ends the run ``cut_off`` (see :data:`~messages.session.RunStatus`): a cut
        answer is not what the model meant to say, so reporting it ``completed``
        would hide the loss.
        """
        dropped = len(assistant.tool_calls)
        kept = assistant.model_copy(update={"tool_calls": ()}) if dropped else assistant
        # Kept even when empty, like any answer: no two user turns in a row.
        run.assistant_index = len(self.state.history)
        self._append(run, kept)
        reason = "the model's answer was cut off at its output limit (finish_reason length)"
        if dropped:
            reason += f"; its {dropped} tool call(s) were not run"
        self.alert(AlertLevel.WARN, reason, "llm")
        self._finish(run, "cut_off", reason, abort=True)

    # -- telemetry and usage limits (issue 28; logic in actors.telemetry) -----------------

    def _observe(self, run: _Run, message: Submit | None) -> None:
        """A run begins: its span (telemetry on) and its usage limits (main runs with limits)."""
        config = self.config
        if config.telemetry is not None:
            run.span = config.telemetry.turn(
                session_id=config.session_id,
                run_id=run.run_id,
                purpose=config.purpose,
                prompt=None if message is None else message.text,
                parent=None if message is None else message.trace,
            )
        if config.purpose == "main":
            guard = LimitGuard(
                None if message is None else message.usage_limits, config.session_usage
            )
            if guard.active:
                run.limits = guard

    def _usage_limited(
        self, run: _Run, hit: UsageLimitHit | None, *, answer: AssistantMessage | None = None
    ) -> bool:
        """End ``run`` at the usage limit it crossed (``hit``), if any; True if it ended.

        A stream in flight is cancelled. An ``answer`` whose reported usage
        crossed the limit is kept like a cut-off one: its text enters history,
        its tool calls are not run.
        """
        if hit is None or not _live(run):
            return False
        run.usage_limit = hit
        reason = hit.describe()
        if answer is not None:
            dropped = len(answer.tool_calls)
            run.assistant_index = len(self.state.history)
            self._append(run, answer.model_copy(update={"tool_calls": ()}) if dropped else answer)
            if dropped:
                reason += f"; the answer's {dropped} tool call(s) were not run"
        else:
            self._cancel_inflight(run, reason)
        self.alert(AlertLevel.WARN, reason, "usage")
        self._finish(run, "usage_limit", reason, abort=True)
        return True

    # -- tools: pre hooks ------------------------------------------------------------------

    def _start_tools(
        self, run: _Run, assistant: AssistantMessage, only: Sequence[ToolCall] | None = None
    ) -> None:
        registry = self.config.tools
        calls = assistant.tool_calls
        wanted = None if only is None else {c.id for c in only}
        cap = self.config.max_batch_calls
        run.calls = []
        for index, call in enumerate(calls):
            if wanted is not None and call.id not in wanted:
                continue
            # A call past the cap, or whose arguments are unusable, is never run nor
            # shown to the hooks: its error result tells the model why.
            refusal: tuple[str, str] | None = None
            if index >= cap:  # by position in the answer, also when continuing after a boundary
                refusal = over_cap_text(len(calls), cap), "refused"
            elif call.arguments_error is not None:
                refusal = bad_arguments_text(call), "invalid"
            tool = registry.get(call.name)
            meta = ToolMeta(
                description=getattr(tool, "description", ""),
                exclusive=bool(getattr(tool, "exclusive", False)),
                index=index,
                batch_size=len(calls),
                turn=run.turns,
            )
            ctx = ToolCallContext(
                session_id=self.config.session_id,
                purpose=self.config.purpose,
                call_id=call.id,
                name=call.name,
                arguments={} if refusal is not None else copy.deepcopy(dict(call.arguments)),
                meta=meta,
                tool=tool,
            )
            item = _Call(call=call, ctx=ctx)
            if refusal is not None:
                self._synthetic(item, *refusal)
            run.calls.append(item)
        run.index = 0
        self._pre_tools(run, None)

    def _pre_tools(self, run: _Run, resume_from: int | None) -> None:
        """Evaluate pre_tool_call (interceptor, then hooks) per call, in order."""
        if not _live(run):
            return
        while run.index < len(run.calls):
            item = run.calls[run.index]
            if item.status != "pending":
                run.index += 1
                continue
            start = 0
            if resume_from is not None:
                start, resume_from = resume_from, None
            else:
                verdict = self.config.interceptor.pre_tool_call(item.ctx)
                if isinstance(verdict, Boundary):
                    self._boundary(run, run.index, verdict.reason, verdict.tool or item.call.name)
                    return
                if isinstance(verdict, Skip):
                    self._skip(item, verdict.reason)
                    run.index += 1
                    continue
                if isinstance(verdict, AnswerCall):  # Fore's own call (final_answer)
                    self._synthetic(item, verdict.output, "answered", is_error=verdict.is_error)
                    item.explicit = Inline(text=verdict.output)  # the model must read it all
                    run.index += 1
                    continue
                if isinstance(verdict, Abort):
                    self._abort_calls(run, "aborted", verdict.reason or "aborted by policy")
                    return
                if isinstance(verdict, Pause):
                    self._pause(
                        run, verdict.reason, f"pre_tool_call {item.call.name}", ("pre_tool", 0)
                    )
                    return
                if self.config.strict_tool_hooks:
                    # What the gate approved: a hook that changes it is gated again.
                    item.gate_args = copy.deepcopy(item.ctx.arguments)
                if self._approval_started(run, item):
                    return  # the session's approval policy first (below)
            self._pre_tool_hooks(run, item, start)
            return
        self._run_tools(run)

    def _pre_tool_hooks(self, run: _Run, item: _Call, start: int) -> None:
        """The public ``pre_tool_call`` hooks of the current call, from hook ``start``."""
        run.phase = "pre_tool_call"
        done = functools.partial(self._after_pre_tool, run, item, run.index)
        self._chain(
            run, HookEvent.PRE_TOOL_CALL, item.ctx, self._on_outcome(run, done), start=start
        )

    def _after_pre_tool(self, run: _Run, item: _Call, index: int, state: ChainState) -> None:
        outcome = final_outcome(state)
        if self.config.strict_tool_hooks:
            hook = state.ran[-1] if state.ran else "pre_tool_call"
            if not isinstance(outcome, Continue):
                # Speculation: a hook that would not simply allow the call is a boundary.
                self._boundary(
                    run, index, f"hook {hook} returned {type(outcome).__name__}", item.call.name
                )
                return
            approved = item.gate_args if item.gate_args is not None else item.call.arguments
            if item.ctx.arguments != approved:
                # A hook rewrote what the gate approved: the gate decides again on
                # the arguments that would run. A hook must never make a
                # speculation run a call the gate did not approve.
                verdict = self.config.interceptor.pre_tool_call(item.ctx)
                if not isinstance(verdict, Continue):
                    why = getattr(verdict, "reason", "")
                    self._boundary(
                        run,
                        index,
                        f"hook {hook} changed the arguments and the gate answered "
                        f"{type(verdict).__name__}" + (f": {why}" if why else ""),
                        item.call.name,
                    )
                    return
        if isinstance(outcome, Skip):
            self._skip(item, outcome.reason)
        elif isinstance(outcome, Abort):
            self._abort_calls(run, "aborted", outcome.reason or "aborted by a pre_tool_call hook")
            return
        elif isinstance(outcome, Pause):
            assert state.stopped_at is not None
            self._pause(
                run,
                outcome.reason,
                f"pre_tool_call {item.call.name}",
                ("pre_tool", state.stopped_at + 1),
            )
            return
        else:
            if self._approval_started(run, item, again=True):
                return  # a hook rewrote the arguments the person approved: judged again
            item.status = "approved"
            item.executed = self._executed_call(item)
        run.index = index + 1
        self._pre_tools(run, None)

    # -- tools: approval (actors/worker/approval.py; issue 24) ---------------------------------

    def _approval_started(self, run: _Run, item: _Call, *, again: bool = False) -> bool:
        """Start judging ``item`` under the session's approval policy; False: nothing to judge.

        Before the public hooks (``again=False``), and after them when a hook
        rewrote the arguments that were judged (``again=True``). Calls that
        cannot need asking pass inline; the rest are judged on the hook lane
        (:class:`~actors.worker.approval.LiveApproval.decide`), where a
        refusal -- or any failure to get an answer -- skips the call.
        """
        approval = self.state.approval
        if approval is None or self.config.purpose == "speculation":
            return False
        if again and (item.approval_args is None or item.approval_args == item.ctx.arguments):
            return False
        item.approval_args = copy.deepcopy(item.ctx.arguments)
        if approval.allows_at_once(item.ctx):
            return False
        run.phase = "approval"
        index = run.index

        def done(state: ChainState) -> None:
            if not _live(run):
                return
            outcome = final_outcome(state)
            if state.error is not None:
                why = refusal(state.error, approval.timeout_s)
                self.alert(AlertLevel.WARN, f"{item.call.name} was not run: {why}", "approval")
                outcome = Skip(why)
            if isinstance(outcome, Skip):
                self._skip(item, outcome.reason)
            elif not again:
                self._pre_tool_hooks(run, item, 0)
                return
            else:
                item.status = "approved"
                item.executed = self._executed_call(item)
            run.index = index + 1
            self._pre_tools(run, None)

        self._chain(run, HookEvent.PRE_TOOL_CALL, item.ctx, done, specs=(approval.spec,))
        return True

    @staticmethod
    def _executed_call(item: _Call) -> ToolCall:
        """The call to run: never the hooks' id or name (read-only), only their arguments.

        The hooks' arguments were validated as each hook answered; unchanged
        arguments need no new message.
        """
        if item.ctx.arguments == item.call.arguments:
            return item.call
        return ToolCall(id=item.call.id, name=item.call.name, arguments=item.ctx.arguments)

    def _skip(self, item: _Call, reason: str) -> None:
        self._synthetic(
            item, f"Skipped: {reason or 'a pre_tool_call hook skipped this call'}", "skipped"
        )

    @staticmethod
    def _synthetic(item: _Call, output: str, outcome: str, *, is_error: bool = True) -> None:
        """The call does not run: ``output`` is its (error) result."""
        item.status = "skipped"
        item.outcome = outcome
        item.post_done = True  # synthetic: nothing for post hooks to check
        item.result = ToolResult(
            call_id=item.call.id, name=item.call.name, output=output, is_error=is_error
        )

    # -- tools: running -----------------------------------------------------------------

    def _run_tools(self, run: _Run) -> None:
        approved = [c for c in run.calls if c.status == "approved"]
        if not approved:
            self._post_tools(run)
            return
        config = self.config
        batch_id = f"{run.run_id}-b{run.turns}-{next(_ids)}"
        run.batch_id = batch_id
        run.phase = "tools"
        for item in approved:
            item.status = "running"
        config.tool_pool.tell(
            RunToolBatch(
                batch_id=batch_id,
                session_id=self.config.session_id,
                calls=tuple(item.executed or item.call for item in approved),
                call_timeout=config.call_timeout,
                max_concurrency=config.tool_concurrency,
                tools=config.tools,
                fs=config.fs,
                services=config.services,
                reply_to=self.actor_ref,
                trace=None if run.span is None else run.span.context,
            )
        )

    def _batch_run(self, batch_id: str) -> _Run | None:
        run = self._run
        if run is None or run.ended or run.batch_id != batch_id:
            return None
        return run

    @handles(ToolCallStarted)
    def _on_tool_started(self, message: ToolCallStarted) -> None:
        run = self._batch_run(message.batch_id)
        if run is not None:
            self._emit(
                ToolStarted(
                    session_id=self.config.session_id,
                    run_id=run.run_id,
                    call_id=message.call_id,
                    name=message.name,
                )
            )

    @handles(ToolCallFinished)
    def _on_tool_finished(self, message: ToolCallFinished) -> None:
        run = self._batch_run(message.batch_id)
        if run is not None:
            self._emit(
                ToolFinished(
                    session_id=self.config.session_id,
                    run_id=run.run_id,
                    call_id=message.result.call_id,
                    name=message.result.name,
                    outcome=message.outcome,
                    is_error=message.result.is_error,
                    duration_s=message.duration_s,
                )
            )

    @handles(ToolBatchFinished)
    def _on_batch_finished(self, message: ToolBatchFinished) -> None:
        run = self._batch_run(message.batch_id)
        if run is None:
            return
        run.batch_id = None
        running = [c for c in run.calls if c.status == "running"]
        matched = match_results([item.call for item in running], message.results)
        for item, finished in zip(running, matched, strict=True):
            if finished is None:  # never happens; be total anyway
                self._close_call(item, "Cancelled: no result was reported")
                continue
            item.status = "done"
            item.result = finished.result
            item.outcome = finished.outcome
            item.stored_summary = finished.stored_summary
            item.explicit = finished.explicit
        self._post_tools(run)

    # -- tools: post hooks, conversion, commit -------------------------------------------------

    def _post_tools(self, run: _Run) -> None:
        run.index = 0
        self._post_step(run)

    def _post_step(self, run: _Run) -> None:
        if not _live(run):
            return
        while run.index < len(run.calls):
            item = run.calls[run.index]
            if item.status != "done" or item.result is None or item.post_done:
                run.index += 1
                continue
            ctx = PostToolCallContext(
                session_id=self.config.session_id,
                purpose=self.config.purpose,
                call_id=item.call.id,
                name=item.call.name,
                arguments=item.ctx.arguments,
                result=ToolOutcome(output=item.result.output, is_error=item.result.is_error),
                outcome=item.outcome,
                meta=item.ctx.meta,
                tool=item.ctx.tool,
            )
            verdict = self.config.interceptor.post_tool_call(ctx)
            if isinstance(verdict, Abort):
                self._apply_post(item, ctx)  # the aborting party saw (and may mask) it
                self._abort_calls(run, "aborted", verdict.reason or "aborted by policy")
                return
            run.phase = "post_tool_call"
            index = run.index

            def done(
                state: ChainState,
                item: _Call = item,
                ctx: PostToolCallContext = ctx,
                index: int = index,
            ) -> None:
                # Continue, or Abort: the aborting hook saw this result and may have
                # masked it; the results after it never passed their hooks (withheld).
                self._apply_post(item, ctx)
                outcome = final_outcome(state)
                if isinstance(outcome, Abort):
                    self._abort_calls(
                        run, "aborted", outcome.reason or "aborted by a post_tool_call hook"
                    )
                    return
                run.index = index + 1
                self._post_step(run)

            self._chain(run, HookEvent.POST_TOOL_CALL, ctx, self._on_outcome(run, done))
            return
        self._convert(run)

    def _apply_post(self, item: _Call, ctx: PostToolCallContext) -> None:
        assert item.result is not None
        item.post_done = True
        if ctx.result.output != item.result.output or ctx.result.is_error != item.result.is_error:
            item.result = item.result.model_copy(
                update={"output": ctx.result.output, "is_error": ctx.result.is_error}
            )
            # The tool's own summary and inline/stored choice no longer describe it.
            item.stored_summary = None
            item.explicit = None

    def _convert(self, run: _Run) -> None:
        """Store large outputs in the blob store; history keeps their summaries.

        Runs after the post_tool_call hooks (they saw the full output). One ask
        per large output, answered by message -- nothing here blocks.
        """
        store = self.config.blob_store
        threshold = self.config.blob_limits.inline_threshold
        pending = [
            c
            for c in run.calls
            if c.result is not None
            and not c.committed
            and c.status != "removed"
            and store is not None
            and _needs_store(c, threshold)
        ]
        if not pending:
            self._commit(run)
            return
        run.phase = "storing outputs"
        remaining = [len(pending)]

        def one_done() -> None:
            remaining[0] -= 1
            if remaining[0] == 0 and _live(run):
                self._commit(run)

        for item in pending:
            assert item.result is not None
            message = StoreToolOutput(
                session_id=self.config.session_id,
                call_id=item.call.id,
                output=item.result.output,
                stored_summary=item.stored_summary,
                tool_output=item.explicit,
            )
            self.ask_then(
                store,
                message,
                then=functools.partial(self._output_stored, run, item, one_done),
                on_error=functools.partial(self._output_not_stored, run, item, one_done),
                timeout=120.0,
            )

    def _output_stored(
        self, run: _Run, item: _Call, one_done: Callable[[], None], stored: StoredOutput
    ) -> None:
        if not _live(run) or item.result is None:
            return  # the run is ending: its calls were closed (and committed) already
        item.result = item.result.model_copy(update={"output": stored.history_text})
        item.pinned = True  # the store pinned every blob this text references
        one_done()

    def _output_not_stored(
        self, run: _Run, item: _Call, one_done: Callable[[], None], error: BaseException
    ) -> None:
        if not _live(run) or item.result is None:
            return
        self.alert(
            AlertLevel.WARN,
            f"the blob store failed ({error}); the output of {item.call.name} went into "
            "history truncated",
            "blob_store",
        )
        item.result = item.result.model_copy(
            update={"output": self._truncated(item.result.output, "the blob store failed")}
        )
        one_done()

    def _truncated(self, output: str, reason: str) -> str:
        return truncated_fallback(Text(text=output), self.config.blob_limits, reason=reason)

    def _commit(self, run: _Run) -> None:
        if not _live(run):
            return
        for item in run.calls:
            if item.result is not None and not item.committed and item.status != "removed":
                item.committed = True
                self._append(run, item.result, pinned=item.pinned)
        run.calls = []
        self._flush_pending_messages(run)
        if run.boundary is not None:
            self._complete(run, "boundary", run.boundary.get("reason"))
            return
        self._llm_turn(run)

    # -- turn end -------------------------------------------------------------------------

    def _flush_pending_messages(self, run: _Run) -> None:
        """Resume messages given at a tool-call pause: after the batch's results."""
        pending, run.pending_messages = run.pending_messages, []
        for item in pending:
            self._append(run, item)

    def _turn_end(self, run: _Run, assistant: AssistantMessage) -> None:
        if not _live(run):
            return
        ctx = TurnEndContext(
            session_id=self.config.session_id,
            purpose=self.config.purpose,
            turn=run.turns,
            messages=list(self.state.history),
            final_text=assistant.text,
        )
        verdict = self.config.interceptor.on_turn_end(ctx)
        if isinstance(verdict, ContinueWithMessages):
            self._continue_with(run, verdict.messages)
            return
        if isinstance(verdict, Paused):
            self._pause(run, verdict.reason, "on_turn_end", ("turn_end", 0, ctx))
            return
        self._turn_end_hooks(run, ctx, 0)

    def _turn_end_hooks(self, run: _Run, ctx: TurnEndContext, start: int) -> None:
        run.phase = "on_turn_end"

        def done(state: ChainState) -> None:
            outcome = final_outcome(state)
            if isinstance(outcome, ContinueWithMessages):
                self._continue_with(run, outcome.messages)
            elif isinstance(outcome, Paused):
                assert state.stopped_at is not None
                self._pause(
                    run, outcome.reason, "on_turn_end", ("turn_end", state.stopped_at + 1, ctx)
                )
            else:
                self._complete(run, "completed", None)

        self._chain(run, HookEvent.ON_TURN_END, ctx, self._on_outcome(run, done), start=start)

    def _continue_with(self, run: _Run, items: Sequence[Item]) -> None:
        if not _live(run):
            return
        for item in items:
            self._append(run, item)
        self._llm_turn(run)

    # -- pause and resume ----------------------------------------------------------------------

    @handles(PauseRun)
    def _on_pause(self, message: PauseRun) -> bool:
        run = self._run
        if run is None or run.ended or not _live(run) or run.phase == "paused":
            return False
        run.pause_requested = message.reason
        return True

    def _pause(
        self, run: _Run, reason: str, where: str, point: tuple[Any, ...], *, saved: bool = False
    ) -> None:
        if not saved and self._writer is not None:
            # A pause may wait hours for a person: what the run did so far is saved first.
            run.phase = "saving"
            if self._writer.save(functools.partial(self._pause_saved, run, reason, where, point)):
                return
        run.phase = "paused"
        run.resume_point = point
        self._emit(
            RunPaused(
                session_id=self.config.session_id, run_id=run.run_id, reason=reason, where=where
            )
        )
        result = self._result(run, "paused", reason or None)
        reply, run.reply = run.reply, None
        if reply is not None:
            reply.try_set(result)

    @handles(Resume)
    def _on_resume(self, message: Resume) -> None:
        run = self._run
        if run is None or run.ended or run.phase != "paused":
            raise RuntimeError(f"session {self.session_id} has no paused run to resume")
        problem = messages_problem(message.messages)
        if problem is not None:
            raise ValueError(f"cannot resume with these messages: {problem}")
        run.reply = self.defer_reply()
        point = run.resume_point or ("llm",)
        run.resume_point = None
        kind = point[0]
        if kind == "llm":
            for item in message.messages:
                self._append(run, item)
            # A retry built before the pause no longer holds the new messages.
            retry = point[1] if len(point) > 1 and not message.messages else None
            self._llm_turn(run, retry=retry)
        elif kind == "pre_tool":
            # Not here: between an answer's calls and their results. They go in
            # right after the batch's results, before the next LLM request.
            run.pending_messages.extend(message.messages)
            run.phase = "pre_tool_call"
            self._pre_tools(run, point[1])
        elif message.messages:
            self._continue_with(run, message.messages)
        else:
            self._turn_end_hooks(run, point[2], point[1])

    def _interrupt(self, run: _Run, successor: tuple[_Run, Submit]) -> None:
        """A new submit supersedes a paused run: close its open calls, end it, then start.

        The paused run ends like any interrupted run -- its on_abort hooks run
        once, and its TurnFinished comes after them -- and only then does the
        new submit start, so the two runs' hooks and items never interleave.
        """
        run.successor = successor
        self._close_open_calls(run, "Interrupted by user")
        self._finish(run, "interrupted", "superseded by a new submit", abort=True)

    # -- cancel, abort, failure -----------------------------------------------------------------

    @handles(CancelRun)
    def _on_cancel(self, message: CancelRun) -> bool:
        run = self._run
        current = run if run is not None and not run.ended else None
        sid = message.submit_id
        if sid is not None:
            successor = current.successor[0] if current and current.successor else None
            if successor is not None and successor.submit_id == sid:
                if successor.cancel_reason is None:
                    successor.cancel_reason = message.reason
                return True
            if current is None or current.submit_id != sid:
                if sid in self._seen_submits:
                    return False  # that submit ended already
                # The cancel overtook its submit on the control lane: remember it.
                self._early_cancels[sid] = message.reason
                while len(self._early_cancels) > MAX_EARLY_CANCELS:
                    self._early_cancels.popitem(last=False)
                return True
        if current is None:
            return False
        if current.aborted or current.end_save is not None:
            # Already ending (its on_abort hooks are running, each with a deadline):
            # nothing left to cancel but a submit queued behind it.
            if (
                sid is None
                and current.successor is not None
                and current.successor[0].cancel_reason is None
            ):
                current.successor[0].cancel_reason = message.reason
                return True
            return False
        self._cancel_inflight(current, message.reason)
        self._close_open_calls(current, f"Cancelled: {message.reason}")
        self._finish(current, "cancelled", message.reason, abort=True)
        return True

    def _cancel_inflight(self, run: _Run, reason: str) -> None:
        """Stop what is under way: the hook in flight (never started ones never
        run), the LLM request, the tool batch."""
        self._chain_token = None
        chain, self._chain_run = self._chain_run, None
        if chain is not None:
            if chain.job is not None:
                chain.job.cancel()
            if chain.wait_timer is not None:
                chain.wait_timer.cancel()
        if run.llm_request_id is not None:
            try:
                self.config.gateway.tell(
                    CancelLlmRequest(
                        request_id=run.llm_request_id, reason=reason, purpose=self.config.purpose
                    )
                )
            except ActorDeadError:
                pass
            run.llm_request_id = None
        if run.batch_id is not None:
            try:
                self.config.tool_pool.tell(
                    CancelToolCalls(
                        session_id=self.config.session_id, batch_id=run.batch_id, reason=reason
                    )
                )
            except ActorDeadError:
                pass
            run.batch_id = None

    def _close_call(self, item: _Call, text: str) -> None:
        item.status = "done"
        item.outcome = "cancelled"
        item.post_done = True  # synthetic: nothing for post hooks to check
        item.result = ToolResult(
            call_id=item.call.id, name=item.call.name, output=text, is_error=True
        )

    def _close_open_calls(self, run: _Run, text: str, withheld: str | None = None) -> None:
        """Give every call of the current answer a result and commit them.

        Calls that never ran (or are still running) get ``text``. A call that
        ran but whose result has not passed its post_tool_call hooks gets
        ``withheld`` instead -- those hooks are where results are masked and
        checked, so a raw result must never reach history around them.
        """
        if withheld is None:
            withheld = (
                f"{text} (the call ran, but its result was withheld: the run ended before "
                "its post_tool_call hooks had passed it)"
            )
        for item in run.calls:
            if item.status == "removed":
                continue
            if item.result is None or item.status == "running":
                self._close_call(item, text)
            elif not item.post_done and not item.committed:
                self._close_call(item, withheld)
            if not item.committed:
                item.committed = True
                assert item.result is not None
                result = item.result
                if self.config.blob_store is not None and not _fits(
                    result.output, self.config.blob_limits.inline_threshold
                ):
                    result = result.model_copy(
                        update={"output": self._truncated(result.output, "the run ended early")}
                    )
                self._append(run, result, pinned=item.pinned)
        run.calls = []
        self._flush_pending_messages(run)

    def _abort_calls(self, run: _Run, status: RunStatus, reason: str) -> None:
        self._cancel_inflight(run, reason)
        self._close_open_calls(run, f"Aborted: {reason}")
        self._finish(run, status, reason, abort=True)

    def _hook_failed(self, run: _Run, error: HookError) -> None:
        self._fail(run, str(error), kind="hook", failure=error.failure())

    def _fail(
        self,
        run: _Run,
        error: str,
        *,
        kind: ErrorKind = "worker",
        failure: HookFailure | None = None,
    ) -> None:
        if not _live(run):
            # Ending already (a cancel came first): its status stands.
            self.log.info("failure_after_run_ending", run_id=run.run_id, error=error)
            return
        run.error_kind = kind
        run.hook_failure = failure
        self._cancel_inflight(run, error)
        self._close_open_calls(run, f"Not run: {error}", withheld=f"Aborted: {error}")
        self.alert(AlertLevel.ERROR, error, "hooks" if kind == "hook" else "worker")
        self._finish(run, "error", error, abort=True)

    def _boundary(self, run: _Run, index: int, reason: str, tool: str) -> None:
        """Speculation: stop at call ``index``; run what was approved before it."""
        removed = run.calls[index:]
        run.boundary = {
            "tool": tool,
            "reason": reason,
            "calls": [c.call.model_dump(mode="json") for c in removed],
        }
        for item in removed:
            item.status = "removed"
        kept = [c.call for c in run.calls[:index]]
        if run.assistant_index is not None:
            old = self.state.history[run.assistant_index]
            assert isinstance(old, AssistantMessage)
            if kept or old.text:
                self.state.history[run.assistant_index] = old.model_copy(
                    update={"tool_calls": tuple(kept)}
                )
            else:
                del self.state.history[run.assistant_index]
                run.assistant_index = None
        run.index = index
        self._run_tools(run)

    def _finish(self, run: _Run, status: RunStatus, error: str | None, *, abort: bool) -> None:
        if run.ended:
            return
        if not abort or run.aborted or run.end_save is not None:
            self._complete(run, status, error)
            return
        if not run.started:
            # Nothing of it entered history: it never started, so no on_abort
            # (see messages.session.RunStatus); drop what was staged for it.
            self._cancel_inflight(run, error or status)
            self._submit_cancelled()
            self._complete(run, status, error)
            return
        run.begin_ending(status, error)
        ctx = AbortContext(
            session_id=self.config.session_id,
            purpose=self.config.purpose,
            reason=error or status,
            status=status,
        )
        try:
            self.config.interceptor.on_abort(ctx)
        except Exception:
            self.log.exception("interceptor_on_abort_failed")

        def done(state: ChainState) -> None:
            self._complete(run, status, error)

        self._chain(run, HookEvent.ON_ABORT, ctx, done, abort_chain=True)

    def _snapshot(self, run: _Run) -> ForkSnapshot:
        """What the last main request actually sent, plus the answer it got.

        Forks (suggestion, speculation, pipelined) replay this prefix byte for
        byte so the provider's prefix cache hits. It is taken from the request
        as sent -- after the interceptors and ``pre_llm_request`` hooks edited
        their copy -- not rebuilt from history, which may differ from it.
        """
        ctx = run.llm_ctx
        assert ctx is not None
        sent = list(ctx.messages)
        system: str | None = None
        first = sent[0] if sent else None
        if self.config.system_prompt and isinstance(first, SystemMessage):
            system = first.text
            sent.pop(0)
        tools = tuple(self.config.interceptor.fork_tools(ctx.tools))
        return ForkSnapshot(
            session_id=self.config.session_id,
            version=snapshot_version(system, tools),
            system_prompt=system,
            tools=tools,
            model_name=ctx.model_name,
            history=(*sent, *self.state.history[run.sent_history_len :]),
        )

    def _result(self, run: _Run, status: RunStatus, error: str | None) -> TurnResult:
        output, output_error = (
            (None, None) if run.output is None else run.output.outcome(status, error)
        )
        return TurnResult(
            run_id=run.run_id,
            session_id=self.config.session_id,
            status=status,
            items=tuple(self.state.history[run.start_len :]),
            error=error,
            error_kind=run.error_kind if status == "error" else None,
            hook_failure=run.hook_failure if status == "error" else None,
            turns=run.turns,
            usage=run.usage,
            boundary=run.boundary,
            usage_limit=run.usage_limit if status == "usage_limit" else None,
            output=output,
            output_error=output_error,
        )

    def _complete(self, run: _Run, status: RunStatus, error: str | None) -> None:
        if run.ended:
            return
        if run.end_save is None and self._save_then(run, functools.partial(self._saved, run)):
            # Write-ahead: reported once its items are in the session store. Until
            # then the run is ending (a cancel finds nothing to cancel, a submit
            # waits behind it), and this status is the one it ends with.
            run.end_save = run.ending or Ending(status, error)
            if "saving" in ALLOWED[run.phase]:  # preparing and on_abort stay as they are
                run.phase = "saving"
            return
        if run.end_save is not None:
            status, error = run.end_save.status, run.end_save.error
        elif run.ending is not None:  # the ending that began first decides how the run ended
            status, error = run.ending.status, run.ending.error
        run.phase = "ended"
        self.state.stash = []  # a stash never outlives its submit
        self.state.output = None  # nor does a structured run's contract
        try:
            self.config.interceptor.on_run_end(status)
        except Exception:
            self.log.exception("interceptor_on_run_end_failed")
        result = self._result(run, status, error)
        if run.span is not None:
            run.span.end(result)
        if status == "completed" and self.config.purpose == "main" and run.llm_ctx is not None:
            self._emit(
                SnapshotTaken(session_id=self.config.session_id, snapshot=self._snapshot(run))
            )
        self._emit(TurnFinished(session_id=self.config.session_id, result=result))
        reply, run.reply = run.reply, None
        if reply is not None:
            reply.try_set(result)
        if self._run is run:
            self._run = None
        successor, run.successor = run.successor, None
        if successor is not None:
            self._begin(*successor)

    # -- running hook chains ---------------------------------------------------------------------

    def _chain(
        self,
        run: _Run,
        event: HookEvent,
        ctx: Any,
        done: Callable[[ChainState], None],
        *,
        start: int = 0,
        abort_chain: bool = False,
        specs: tuple[HookSpec, ...] | None = None,
    ) -> None:
        """Run ``event``'s hooks from index ``start``; ``done(state)`` gets the outcome.

        ``specs``: run these instead of the session's hooks (the approval job).

        Each hook runs on the hook lane (through the session's
        :class:`~actors.worker.hookrun.HookGate`) with its own timeout, armed
        when it starts running; only the newest chain step is current, so
        answers that arrive after a timeout or a cancel are ignored. An ending
        run starts no chain but its on_abort.
        """
        if not abort_chain and not _live(run):
            return
        chain = self.config.hooks.chain(event) if specs is None else specs
        state = ChainState(event, chain, ctx, index=start)
        self._chain_step(_ChainRun(run, state, done, abort_chain))

    def _on_outcome(
        self, run: _Run, then: Callable[[ChainState], None]
    ) -> Callable[[ChainState], None]:
        """``then`` as a chain's continuation: it runs only if the run is live and no hook failed.

        Every step after a chain of the run's own hooks opens the same way: a
        run that ended, or began its ending, while the hooks ran drops their
        outcome; a hook that failed ends the run as a hook error (a post hook's
        result is withheld then, never committed raw). The approval chain
        (a failure skips the call) and on_abort (runs on an ending run) take
        their ``done`` as it is.
        """

        def done(state: ChainState) -> None:
            if not _live(run):
                return
            if state.error is not None:
                self._hook_failed(run, state.error)
                return
            then(state)

        return done

    def _chain_step(self, chain: _ChainRun) -> None:
        if chain.run.ended or (not chain.abort_chain and chain.run.aborted):
            return
        state = chain.state
        spec = next_hook(state)
        if spec is None:
            self._chain_done(chain)
            return
        default_timeout, start_timeout, cap = self._hooks_config()
        timeout = spec.timeout or default_timeout
        chain.spec = spec
        chain.token = token = object()
        self._chain_run = chain
        self._chain_token = token
        job = HookJob(
            spec,  # the hook's condition, then the hook: user code, under the deadline
            state.ctx,
            on_start=functools.partial(self._hook_started, chain, token, timeout),
            on_done=functools.partial(self._hook_finished, chain, token),
        )
        chain.job = job
        chain.wait_timer = self.call_after(
            start_timeout, self._hook_not_started, chain, token, start_timeout
        )
        self.state.hook_gate.submit(job, self.system.hooks, cap)

    def _hook_started(self, chain: _ChainRun, token: object, timeout: float, job: HookJob) -> None:
        """On the lane thread, right before the hook runs: its deadline starts now."""
        wait = chain.wait_timer
        if wait is not None:
            wait.cancel()
        job.arm(
            self.system.timer.call_later(
                timeout, self.post, self._hook_timed_out, chain, token, timeout
            )
        )

    def _hook_finished(
        self,
        chain: _ChainRun,
        token: object,
        job: HookJob,
        result: Any,
        error: BaseException | None,
    ) -> None:
        """On the lane thread: hand the hook's answer to the actor."""
        if not self.post(self._hook_settled, chain, token, result, error) and error is not None:
            self.log.warning("hook_error_after_exit", hook=job.spec.name, error=repr(error))

    def _hook_settled(
        self, chain: _ChainRun, token: object, result: Any, error: BaseException | None
    ) -> None:
        if error is None:
            self._hook_answered(chain, token, result)
        else:
            self._hook_raised(chain, token, error)

    def _chain_done(self, chain: _ChainRun) -> None:
        if self._chain_run is chain:
            self._chain_run = None  # only a chain in flight is kept (see _abort_detached)
        self._then(chain.done, chain.state)

    def _then(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run the continuation ``fn(*args)`` -- iteratively, never nested in another.

        A chain with no hook to run (none registered, or none whose ``tools``
        pattern matches) ends at once, and its continuation starts the next
        step: the next call's chain, the next post hook. Called directly, an
        answer with N tool calls would nest N chains on the stack (a
        ``RecursionError`` at about 165 calls, and a crashed worker). A
        continuation that arrives while another one runs is queued instead and
        run by the outermost call when the current one returns, so the stack
        stays flat however many calls, hooks or steps follow. Every caller of
        a chain returns right after starting it, so the order is unchanged.
        """
        self._continuations.append((fn, args))
        if self._draining:
            return
        self._draining = True
        try:
            while self._continuations:
                step, step_args = self._continuations.popleft()
                step(*step_args)
        finally:
            self._draining = False
            self._continuations.clear()  # non-empty only if a step raised (the actor fails)

    def _hook_current(self, chain: _ChainRun, token: object) -> bool:
        if token is not self._chain_token:
            return False  # timed out already, or the run was cancelled meanwhile
        self._chain_token = None
        if chain.job is not None:
            chain.job.settle()
        if chain.wait_timer is not None:
            chain.wait_timer.cancel()
            chain.wait_timer = None
        return True

    def _hook_answered(self, chain: _ChainRun, token: object, result: Any) -> None:
        if not self._hook_current(chain, token):
            return
        spec = chain.spec
        assert spec is not None
        state = chain.state
        go_on = advance(state, spec, result)
        if result is not NOT_APPLICABLE and state.error is None:
            problem = None
            # A call that will not run, or a submit / request that is cancelled,
            # uses nothing the hook left.
            if not isinstance(state.outcome, Skip | Cancel) and not (
                state.event is HookEvent.PRE_TOOL_CALL and isinstance(state.outcome, Abort)
            ):
                problem = edit_problem(state.event, state.ctx)
            kind: Any = (
                "invalid_arguments" if state.event is HookEvent.PRE_TOOL_CALL else "invalid_edit"
            )
            if problem is None and not go_on:
                problem = outcome_problem(state.event, state.outcome)
                kind = "invalid_result"
            if problem is not None:
                state.error = HookError(state.event, spec.name, problem, kind=kind)
                go_on = False
        if go_on:
            self._chain_step(chain)
        else:
            self._chain_done(chain)

    def _hook_raised(self, chain: _ChainRun, token: object, exc: BaseException) -> None:
        if not self._hook_current(chain, token):
            return
        assert chain.spec is not None
        self._chain_failed(chain, raised_error(chain.state.event, chain.spec.name, exc))

    def _hook_timed_out(self, chain: _ChainRun, token: object, timeout: float) -> None:
        if not self._hook_current(chain, token):
            return
        assert chain.spec is not None
        if chain.job is not None:
            chain.job.cancel()  # it is running: abandoned (its answer is ignored)
        self._chain_failed(
            chain,
            HookTimeout(chain.state.event, chain.spec.name, f"did not answer within {timeout:g}s"),
        )

    def _hook_not_started(self, chain: _ChainRun, token: object, start_timeout: float) -> None:
        """The hook is still waiting for a lane thread after ``start_timeout``."""
        if token is not self._chain_token:
            return
        if chain.job is not None and not chain.job.withdraw():
            return  # it has started: its own deadline governs it now
        self._hook_current(chain, token)
        assert chain.spec is not None
        self._chain_failed(
            chain,
            HookTimeout(
                chain.state.event,
                chain.spec.name,
                f"did not start within {start_timeout:g}s (the blocking lane is busy; "
                "it was withdrawn and never runs)",
            ),
        )

    def _chain_failed(self, chain: _ChainRun, error: HookError) -> None:
        """A hook failed: the chain stops with ``error`` -- except on_abort, which goes on.

        on_abort hooks are cleanup: one failing must not keep the next from
        running (the detached chain behaves the same), so the failure is
        logged and raised as an alert, and the chain moves on.
        """
        if chain.abort_chain:
            self.log.warning("on_abort_hook_failed", error=str(error))
            self.alert(AlertLevel.WARN, str(error), "hooks")
            chain.state.index += 1
            self._chain_step(chain)
            return
        chain.state.error = error
        self._chain_done(chain)
