"""The speculator: one actor per speculation, running the suggestion in an overlay.

It is the real agent loop -- a :class:`~actors.worker.worker.Worker` with purpose
``speculation`` -- configured so that nothing real can change:

* its filesystem view is a fresh copy-on-write overlay (one per speculation);
* its interceptor is the speculation gate: read tools run, writes go to the
  overlay only in auto-edit/yolo (and only while they fit its size bound),
  everything else stops the run at a boundary; the gate also pins every
  request's tools to the fork snapshot's. The session's own interceptor runs
  after the gate with strict semantics (:mod:`actors.speculation.gate`);
* the session's ``pre_tool_call`` hooks also run, and any answer but Continue
  is a boundary -- speculation never bypasses permission policy;
* its history is the session's fork snapshot (cache-safe prefix), its model
  the session's fast model when one is configured (model object *and* name);
* turns, transcript length, tokens and time are budgeted. The turn limit is
  the worker's own; the transcript length pauses the run at its next safe
  point (before the next LLM request). Time and tokens are hard: at the time
  budget's deadline, or the moment the spend passes the token budget (live,
  from the request in flight -- :class:`~actors.speculation.metered.MeteredModel`),
  the run is cancelled at once -- LLM stream and tool calls -- and the
  speculation ends at a boundary with its partial transcript: what finished
  is kept, the cancelled calls become the boundary's calls (they run for real
  after Tab), and the pairing check runs on the result. Every budget names
  itself in the boundary's reason.

A speculation is *completed* as soon as its transcript is done and checked
(every call has exactly one result): the pipelined suggestion is the session
supervisor's business and never delays an accept. On accept the overlay is
applied (conflict-checked, all or nothing) and the transcript handed to the
session supervisor. Whatever the end -- accepted, aborted, failed, or a crash
of this actor -- the worker and the overlay go to one
:class:`~actors.speculation.reaper.SpeculationReaper`, which stops the worker
on its control lane (cancelling the LLM stream and the tool calls), confirms
the cancellations and only then removes the overlay.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykka import ActorDeadError

from fore.actors.core.future import PooledFuture
from fore.actors.core.pooled import ForeActor, handles, tell_quietly
from fore.actors.core.timer import TimerHandle
from fore.actors.overlay.actor import OverlayActor
from fore.actors.overlay.apply import OverlayApplyFailed
from fore.actors.overlay.fs import OverlayClosed, OverlayFs
from fore.actors.overlay.store import OverlayStore
from fore.actors.resolve.pending import PendingActions
from fore.actors.speculation.fork import fork_prefix, trim_history
from fore.actors.speculation.gate import SpeculationGate
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.speculation.metered import MeteredModel
from fore.actors.speculation.reaper import ReapOrder, SpeculationReaper, Steps
from fore.actors.speculation.transcript import cancelled_calls, hand_over
from fore.actors.tools.base import ToolRegistry, ToolServices
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.fsclock import Instant
from fore.actors.worker.hooks import HookEvent, HooksView
from fore.actors.worker.state import SessionState, pairing_problems
from fore.actors.worker.worker import Worker, WorkerConfig
from fore.errors import ApplyOutcomeUnknown
from fore.messages.conversation import AssistantMessage, Item, ToolCall, UserMessage
from fore.messages.overlay import ApplyOverlay, ApplyResult, ConflictReport
from fore.messages.runtime import StopNow
from fore.messages.session import (
    CancelRun,
    EventBase,
    ItemAdded,
    PauseRun,
    Submit,
    Subscribe,
    ToolStarted,
    TurnResult,
)
from fore.messages.speculation import (
    AbortSpeculation,
    AcceptSpeculation,
    ForkSnapshot,
    SpeculationConfig,
    SpeculationDone,
    SpeculationProgress,
    SpeculationResult,
    SpeculationState,
    SpeculationUsage,
    Suggestion,
    TokenBudgetReached,
)


@dataclass
class SpeculationSetup:
    """Everything a speculator needs (built by its session supervisor)."""

    speculation_id: str
    suggestion: Suggestion
    snapshot: ForkSnapshot
    config: SpeculationConfig
    main: WorkerConfig
    """The session's main worker configuration (gateway, pool, hooks, services)."""
    tools: ToolRegistry
    """The session's tools when the speculation started (they execute its calls;
    what the requests *describe* is always ``snapshot.tools``)."""
    overlays: OverlayStore
    supervisor: Any
    model: Any
    """The provider object for the speculation's requests (the fast model, or the main one)."""
    model_name: str = ""
    """The wire name to send (empty: the snapshot's, i.e. the main request's)."""
    workspace: Path = field(default_factory=Path)
    governor: LoadGovernor | None = None
    """The runtime's load governor: each model request waits for headroom under it."""
    started: Instant = field(default_factory=Instant.now)
    """When the speculation started (its session supervisor built this setup): a
    real file that changed at or after it is never overwritten by the accept."""
    trace: Any = None
    """The speculation span's OpenTelemetry context: its worker's run is a child (issue 28)."""


_WORKER_EVENTS = frozenset({"run_started", "item_added", "tool_started"})
"""Its worker's events a speculator reads (progress, the message limit, pending limits)."""


class Speculator(ForeActor):
    """Runs one speculation (see module docs)."""

    def __init__(self, setup: SpeculationSetup) -> None:
        super().__init__()
        self.setup = setup
        self.session_id = setup.main.session_id
        self.state: SpeculationState = "running"
        self.started_at = time.time()
        self.completed_at: float | None = None
        self.items: tuple[Any, ...] = ()
        self.boundary_calls: tuple[ToolCall, ...] = ()
        self.boundary_tool: str | None = None
        self.boundary_reason: str | None = None
        self.error: str | None = None
        self.turns = 0
        self.tool_calls = 0
        self.tokens = 0
        self.estimated_tokens = 0
        self.files_written = 0
        self.transcript_items = 0
        self._waiting: list[PooledFuture[Any] | None] = []
        self._abort_reason: str | None = None
        self._steps: Steps = []
        self._limit: str | None = None
        self._hard = False
        """The limit cancels the run at once (time, tokens), not at the next safe point."""
        self._pause_pending = False
        self._cancel_pending = False
        self._gate: SpeculationGate | None = None
        self._worker: Any = None
        self._overlay_actor: Any = None
        self._model: MeteredModel | None = None
        self._budget_timer: TimerHandle | None = None
        self._finished = False
        self._applying = False
        self._apply_reply: PooledFuture[Any] | None = None
        """The accept waiting for the overlay's apply (settled if this actor crashes)."""
        self._reaped = False
        self.overlay: OverlayFs | None = None

    # -- start ------------------------------------------------------------------

    def on_start(self) -> None:
        try:
            self._start()
        except BaseException:
            self._reap()  # whatever was started must not outlive us
            raise

    def _start(self) -> None:
        setup = self.setup
        main = setup.main
        config = setup.config
        snapshot = setup.snapshot
        # Created first and kept at once, so that whatever fails next, the
        # reaper (or the runtime's close) still knows of it; owned by the
        # session, so closing the session waits for its removal.
        workspace = main.fs
        if not isinstance(workspace, WorkspaceFs):  # a speculation needs a real workspace
            raise TypeError(
                f"a speculation needs the main session's WorkspaceFs, not {workspace!r}"
            )
        self.overlay = setup.overlays.create(
            workspace,
            overlay_id=setup.speculation_id,
            max_bytes=config.overlay_max_bytes,
            owner=main.session_id,
            started=setup.started,
        )
        self._overlay_actor = OverlayActor.start(
            self.overlay, journal_dir=setup.overlays.journal_dir, session_id=main.session_id
        )
        self._model = MeteredModel(
            setup.model, self.actor_ref, token_budget=config.token_budget, governor=setup.governor
        )
        history = trim_history(snapshot.history, config.max_history, config.history_trim_step)
        state = SessionState(history=list(history))
        self._gate = SpeculationGate(
            config.approval_mode,
            self.overlay,
            setup.workspace,
            tools=snapshot.tools,
            policy=main.policy,
            approval=main.state.approval,
        )
        worker_config = WorkerConfig(
            session_id=main.session_id,
            model=self._model,
            gateway=main.gateway,
            tool_pool=main.tool_pool,
            fs=self.overlay,
            tools=setup.tools,
            hooks=HooksView(
                main.hooks, frozenset({HookEvent.PRE_TOOL_CALL, HookEvent.POST_TOOL_CALL})
            ),  # type: ignore[arg-type]
            interceptor=self._gate,
            state=state,
            services=ToolServices(blobs=main.services.blobs, pending_actions=PendingActions()),
            model_name=setup.model_name or snapshot.model_name,
            system_prompt=snapshot.system_prompt,
            purpose="speculation",
            stream=config.stream_forks,
            max_turns=config.max_turns,
            call_timeout=main.call_timeout,
            tool_concurrency=main.tool_concurrency,
            max_batch_calls=main.max_batch_calls,
            max_argument_retries=main.max_argument_retries,
            hidden_tools=main.hidden_tools,
            strict_tool_hooks=True,
            blob_store=main.blob_store,
            blob_limits=main.blob_limits,
            telemetry=main.telemetry,
        )
        self._worker = Worker.start(worker_config)
        self._worker.tell(Subscribe(address=self.actor_ref, kinds=_WORKER_EVENTS))
        if config.time_budget_s is not None:
            self._budget_timer = self.call_after(
                config.time_budget_s, self._reach_limit, "time budget", True
            )
        self.ask_then(
            self._worker,
            Submit(
                text=setup.suggestion.text,
                max_turns=config.max_turns,
                submit_id=setup.speculation_id,
                trace=setup.trace,
            ),
            then=self._run_ended,
            on_error=self._run_failed,
            timeout=(config.time_budget_s or 600.0) + 60.0,
        )

    def on_stop(self) -> None:
        self._reap()

    def on_failure(self, *exc_info: Any) -> None:
        # A crash fails only this speculation: an accept waiting for it learns
        # at once (it runs the prompt normally), and the reaper still stops the
        # worker in order -- LLM stream and tools cancelled -- before the
        # overlay goes. kill() would skip the worker's on_stop and leak both.
        error = RuntimeError(f"the speculator crashed: {exc_info[1]!r}")
        if self._apply_reply is not None:
            # Its apply runs on in the overlay actor: whether files changed is unknown.
            self._apply_reply.try_set_exception(
                ApplyOutcomeUnknown(f"the speculator crashed while applying: {exc_info[1]!r}")
            )
            self._apply_reply = None
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if waiter is not None:
                waiter.try_set_exception(error)
        self._reap()

    def _reap(self) -> None:
        """Hand the worker and the overlay to a reaper (once); it removes the overlay last."""
        if self._reaped:
            return
        self._reaped = True
        if self._budget_timer is not None:
            self._budget_timer.cancel()
        setup = self.setup
        order = ReapOrder(
            speculation_id=setup.speculation_id,
            session_id=self.session_id or "",
            worker=self._worker,
            overlay_actor=self._overlay_actor,
            overlay=self.overlay,
            tool_pool=setup.main.tool_pool,
            model=self._model,
            supervisor=setup.supervisor,
            steps=list(self._steps),
        )
        try:
            SpeculationReaper.start(order)
        except Exception as exc:  # the system is shutting down: no waiting is possible
            self.log.warning("speculation_reaper_failed", error=repr(exc))
            for ref in (self._worker, self._overlay_actor):  # their on_stop cleans up
                if ref is not None:
                    tell_quietly(ref, StopNow())
            if self._overlay_actor is None and self.overlay is not None:
                self.overlay.remove(0.0)  # no actor owns it; the runtime's close checks

    # -- progress and budgets ---------------------------------------------------------

    @handles(EventBase)
    def _on_event(self, event: EventBase) -> None:
        if self._pause_pending:
            self._request_pause()
        if self._cancel_pending:
            self._request_cancel()
        if isinstance(event, ItemAdded) and event.run_id is not None:
            self.transcript_items += 1
            if self.transcript_items > self.setup.config.max_messages:
                self._reach_limit("message limit")
        elif isinstance(event, ToolStarted):
            self.tool_calls += 1
        else:
            return
        self._report_progress(
            event.kind, getattr(event, "name", "") or type(getattr(event, "item", None)).__name__
        )

    @handles(SpeculationUsage)
    def _on_usage(self, message: SpeculationUsage) -> None:
        self.tokens += message.usage.total_tokens
        budget = self.setup.config.token_budget
        if budget is not None and self.tokens > budget:
            self._reach_limit("token budget", True)

    @handles(TokenBudgetReached)
    def _on_budget_reached(self, message: TokenBudgetReached) -> None:
        """The spend passed the token budget while a request was still streaming."""
        self.tokens = max(self.tokens, message.spent)
        self._reach_limit("token budget", True)

    def _report_progress(self, inner: str, detail: str) -> None:
        files = 0
        if self.overlay is not None:
            written, whiteouts, _dirs = self.overlay.counts()
            files = written + whiteouts
        tell_quietly(
            self.setup.supervisor,
            SpeculationProgress(
                session_id=self.session_id or "",
                speculation_id=self.setup.speculation_id,
                inner=inner,
                detail=detail,
                tool_calls=self.tool_calls,
                files_written=files,
            ),
        )

    def _reach_limit(self, what: str, hard: bool = False) -> None:
        """A budget is spent: the reason names it.

        Soft (the transcript length): pause at the next safe point. Hard (time,
        tokens): cancel the run now -- its LLM stream and tool calls -- and
        keep the partial transcript (:meth:`_run_ended`).
        """
        if self._finished or self._limit is not None:
            return
        self._limit = f"speculation {what} reached"
        self._hard = hard
        self.log.info(
            "speculation_limit", speculation=self.setup.speculation_id, limit=what, hard=hard
        )
        self._report_progress("limit", self._limit)
        if hard:
            self._request_cancel()
        else:
            self._request_pause()

    def _request_pause(self) -> None:
        self._pause_pending = False
        if self._finished or self._worker is None or self._limit is None:
            return

        def answered(accepted: bool) -> None:
            # Refused when the run has not started yet (our Submit is still
            # queued): ask again on its next event, so the limit is never lost.
            if not accepted and not self._finished:
                self._pause_pending = True

        self.ask_then(
            self._worker,
            PauseRun(reason=self._limit),
            then=answered,
            on_error=lambda _error: None,
            timeout=30.0,
        )

    def _request_cancel(self) -> None:
        self._cancel_pending = False
        if self._finished or self._worker is None or self._limit is None:
            return

        def answered(cancelled: bool) -> None:
            # Nothing to cancel yet (the Submit is queued behind the cancel on the
            # control lane): cancel again on the run's first event.
            if not cancelled and not self._finished:
                self._cancel_pending = True

        self.ask_then(
            self._worker,
            CancelRun(reason=self._limit, submit_id=self.setup.speculation_id),
            then=answered,
            on_error=lambda _error: None,
            timeout=30.0,
        )

    # -- the run's end ----------------------------------------------------------------

    def _run_ended(self, result: TurnResult) -> None:
        if self._finished:
            return
        self.turns = result.turns
        self.tokens = max(self.tokens, result.usage.total_tokens)
        status = result.status
        if self._abort_reason is not None or (status == "cancelled" and not self._hard):
            self._finish("aborted", items=(), error=self._abort_reason or "cancelled")
            return
        outcome = self._outcome(result)
        if isinstance(outcome, str):
            self._finish("failed", items=(), error=outcome)
            return
        state, items = outcome
        problems = pairing_problems(items)
        if problems:
            self._finish(
                "failed", items=(), error="transcript check failed: " + "; ".join(problems)
            )
            return
        self._finish(state, items=items)

    def _outcome(self, result: TurnResult) -> tuple[SpeculationState, tuple[Item, ...]] | str:
        """How the run ended, as (state, transcript) -- or why it failed.

        Sets the boundary's calls, tool and reason as a side effect.
        """
        items = result.items
        status = result.status
        gate = self._gate
        late = gate.late if gate is not None else []
        if status == "completed":
            if not _has_answer(items):  # nothing to accept: Tab runs the prompt normally
                return "empty", ()
            return "completed", items
        if status == "boundary" and result.boundary is not None:
            self.boundary_calls = tuple(
                ToolCall.model_validate(c) for c in result.boundary.get("calls", ())
            )
            self.boundary_tool = result.boundary.get("tool")
            self.boundary_reason = result.boundary.get("reason")
            return "boundary", items
        if status == "cancelled" and self._hard:
            # A hard budget cancelled the run mid-flight: keep what finished; the
            # calls it cancelled run for real after Tab.
            assert self._limit is not None
            cut = cancelled_calls(items, f"Cancelled: {self._limit}")
            kept, calls = hand_over(items, cut)
            if not any(isinstance(i, UserMessage) for i in kept):
                return f"the {self._limit.removeprefix('speculation ')} before it started"
            self.boundary_calls = calls
            self.boundary_tool = calls[0].name if calls else None
            self.boundary_reason = self._limit
            return "boundary", kept
        if status == "rejected" and late:
            # A call that ran is a boundary after all (overlay full, or the
            # session's policy objected to its result): it runs for real after Tab.
            kept, calls = hand_over(items, [b.call_id for b in late])
            self.boundary_calls = calls
            self.boundary_tool = late[0].tool
            self.boundary_reason = late[0].reason
            return "boundary", kept
        if status == "rejected" and gate is not None and gate.refused is not None:
            if not any(isinstance(i, UserMessage) for i in items):
                return gate.refused  # nothing ran; Tab runs the prompt normally
            self.boundary_tool = None
            self.boundary_reason = gate.refused
            return "boundary", items
        if status in ("paused", "max_turns", "cut_off"):
            self.boundary_tool = None
            if status == "max_turns":
                self.boundary_reason = "speculation turn limit reached"
            elif status == "cut_off" and self._limit is None:
                self.boundary_reason = result.error or "the answer was cut off"
            else:
                self.boundary_reason = self._limit or result.error or "budget reached"
            return "boundary", items
        return result.error or status

    def _run_failed(self, error: BaseException) -> None:
        if self._abort_reason is not None:
            self._finish("aborted", items=(), error=self._abort_reason)
            return
        self._finish("failed", items=(), error=f"the speculation's worker failed: {error!r}")

    def _finish(
        self, state: SpeculationState, *, items: tuple[Any, ...], error: str | None = None
    ) -> None:
        if self._finished:
            return
        self._finished = True
        if self._budget_timer is not None:
            self._budget_timer.cancel()
        self.state = state
        self.items = items
        self.error = error
        self.completed_at = time.time()
        if self._model is not None:
            spent, estimated = self._model.spent()
            self.tokens = max(self.tokens, spent)
            self.estimated_tokens = estimated
        if self.overlay is not None:
            files, whiteouts, _dirs = self.overlay.counts()
            self.files_written = files + whiteouts
        tell_quietly(self.setup.supervisor, SpeculationDone(result=self._result()))
        waiting, self._waiting = self._waiting, []
        if state in ("aborted", "failed", "empty"):
            for waiter in waiting:
                if waiter is not None:
                    waiter.try_set(self._result())
            self._reap_and_stop()
            return
        for waiter in waiting:
            self._apply(waiter)

    def _reap_and_stop(self) -> None:
        self._reap()
        self.stop()

    def _result(self, **update: Any) -> SpeculationResult:
        """This speculation's result; ``update`` overrides fields (``state``, ``error``, ...)."""
        fields: dict[str, Any] = {
            "speculation_id": self.setup.speculation_id,
            "state": self.state,
            "items": self.items,
            "boundary_calls": self.boundary_calls,
            "boundary_tool": self.boundary_tool,
            "boundary_reason": self.boundary_reason,
            "error": self.error,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "tokens": self.tokens,
            "estimated_tokens": self.estimated_tokens,
            "files_written": self.files_written,
            "started_at": self.started_at,
            "completed_at": self.completed_at,
        }
        fields.update(update)
        return SpeculationResult(**fields)

    # -- accept -----------------------------------------------------------------------

    @handles(AcceptSpeculation)
    def _on_accept(self, _message: AcceptSpeculation) -> None:
        reply = self.defer_reply()
        if not self._finished:
            self._waiting.append(reply)  # still running: answer when it finishes
            return
        self._apply(reply)

    def _apply(self, reply: PooledFuture[Any] | None) -> None:
        if self.state not in ("completed", "boundary"):
            if reply is not None:
                reply.try_set(self._result())  # aborted or failed: the caller runs it normally
            return
        if self._reaped or self._applying:  # one accept per speculation (the supervisor's rule)
            if reply is not None:
                reply.try_set_exception(RuntimeError("this speculation is already being accepted"))
            return
        self._applying = True
        self._apply_reply = reply
        apply_started = time.monotonic()

        def applied(answer: ApplyResult | ConflictReport) -> None:
            self._apply_reply = None
            if isinstance(answer, ConflictReport):
                result = self._result(
                    conflicts=answer.paths,
                    conflict_summary=answer.summary(),
                    apply_started=apply_started,
                )
            else:
                result = self._result(applied=answer.paths, apply_started=apply_started)
            if reply is not None:
                reply.try_set(result)
            self._reap_and_stop()

        def failed(error: BaseException) -> None:
            self._apply_reply = None
            if reply is not None:
                if isinstance(error, OverlayApplyFailed | OverlayClosed):
                    # Rolled back in process (or never begun): ``applied`` names
                    # exactly the paths that stayed changed, normally none.
                    reply.try_set(
                        self._result(
                            state="failed",
                            applied=tuple(getattr(error, "applied", ())),
                            error=f"applying the overlay failed: {error}",
                        )
                    )
                else:  # a timeout or a crash: nobody knows what reached the disk
                    reply.try_set_exception(ApplyOutcomeUnknown(f"applying the overlay: {error!r}"))
            self._reap_and_stop()

        self.ask_then(
            self._overlay_actor, ApplyOverlay(), then=applied, on_error=failed, timeout=60.0
        )

    # -- abort ------------------------------------------------------------------------

    @handles(AbortSpeculation)
    def _on_abort(self, message: AbortSpeculation) -> bool:
        if not self._steps:
            now = time.monotonic()
            self._steps.append(("abort_requested", now))
            if self._finished:  # nothing left to cancel: only the overlay to remove
                self._steps.append(("already_finished", now))
        if self._finished:
            if self.state in ("completed", "boundary") and not self._applying:
                self._reap_and_stop()  # finished, never accepted
            return False
        self._abort_reason = message.reason
        # StopNow, not CancelRun: our Submit may still be queued behind it
        # (control mail overtakes it), and a cancel of a run that has not
        # started would be lost. Stopping cancels whatever is in flight (LLM
        # stream, tool calls) in the worker's on_stop and answers a queued
        # Submit with ActorDeadError; either way the run's end comes back here,
        # and the reaper then confirms the cancellations before the overlay goes.
        try:
            if self._worker is None:
                raise ActorDeadError("the speculation's worker never started")
            self._worker.tell(StopNow())
        except ActorDeadError:
            self._finish("aborted", items=(), error=message.reason)
        return True


def _has_answer(items: tuple[Item, ...]) -> bool:
    """Whether a transcript holds anything of the model's: a tool call or non-blank text."""
    return any(
        isinstance(item, AssistantMessage) and (item.tool_calls or item.text.strip())
        for item in items
    )


def new_speculation_id() -> str:
    return f"spec-{uuid.uuid4().hex[:10]}"


__all__ = [
    "ApplyOutcomeUnknown",
    "SpeculationSetup",
    "Speculator",
    "fork_prefix",
    "new_speculation_id",
]
