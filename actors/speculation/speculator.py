"""The speculator: one actor per speculation, running the suggestion in an overlay.

It is the real agent loop -- a :class:`~actors.worker.worker.Worker` with purpose
``speculation`` -- configured so that nothing real can change:

* its filesystem view is a fresh copy-on-write overlay (one per speculation);
* its interceptor is the speculation gate: read tools run, writes go to the
  overlay only in auto-edit/yolo, everything else stops the run at a boundary;
* the session's ``pre_tool_call`` hooks also run, and any answer but Continue
  is a boundary -- speculation never bypasses permission policy;
* its history is the session's fork snapshot (cache-safe prefix);
* turns, transcript length, tokens and time are budgeted.

When the run ends the transcript is checked (every call has exactly one
result) and, after a completed speculation, a pipelined suggestion is asked
for. On accept the overlay is applied (conflict-checked, all or nothing) and
the transcript handed to the session supervisor; on abort the worker's run is
cancelled (LLM stream and tools) and only then is the overlay removed.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykka import ActorDeadError

from actors.core.future import PooledFuture
from actors.core.pooled import PooledActor, handles
from actors.overlay.actor import OverlayActor
from actors.overlay.fs import OverlayFs
from actors.overlay.store import OverlayStore
from actors.resolve.pending import PendingActions
from actors.speculation.fork import extend, fork_prefix, trim_history
from actors.speculation.gate import SpeculationGate
from actors.speculation.suggest import suggestion_from_reply, suggestion_request
from actors.tools.base import ToolServices
from actors.worker.hooks import HookEvent, HooksView
from actors.worker.state import SessionState, pairing_problems
from actors.worker.worker import Worker, WorkerConfig
from messages.conversation import ToolCall, UserMessage
from messages.llm import CancelLlmRequest, LlmCompleted, LlmFailed
from messages.overlay import ApplyOverlay, ApplyResult, ConflictReport, DiscardOverlay
from messages.runtime import StopNow
from messages.session import (
    EventBase,
    ItemAdded,
    PauseRun,
    Submit,
    Subscribe,
    ToolStarted,
    TurnResult,
)
from messages.speculation import (
    AbortSpeculation,
    AcceptSpeculation,
    ForkSnapshot,
    OverlayRemoved,
    SpeculationConfig,
    SpeculationDone,
    SpeculationProgress,
    SpeculationResult,
    SpeculationState,
    Suggestion,
)


@dataclass
class SpeculationSetup:
    """Everything a speculator needs (built by its session supervisor)."""

    speculation_id: str
    suggestion: Suggestion
    snapshot: ForkSnapshot
    config: SpeculationConfig
    main: WorkerConfig
    """The session's main worker configuration (model, tools, hooks, services)."""
    overlays: OverlayStore
    supervisor: Any
    fast_model: Any = None
    workspace: Path = field(default_factory=Path)


class Speculator(PooledActor):
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
        self.transcript_items = 0
        self.next_suggestion: str | None = None
        self._waiting: list[PooledFuture[Any] | None] = []
        self._pipelined_request: str | None = None
        self._abort_reason: str | None = None
        self._worker: Any = None
        self._overlay_actor: Any = None
        self._budget_timer: Any = None
        self._finished = False
        self.overlay: OverlayFs | None = None

    # -- start ------------------------------------------------------------------

    def on_start(self) -> None:
        setup = self.setup
        main = setup.main
        config = setup.config
        self._overlay_actor, self.overlay = OverlayActor.for_store(
            setup.overlays,
            main.fs,
            session_id=main.session_id,
            overlay_id=setup.speculation_id,
            max_bytes=config.overlay_max_bytes,
        )
        state = SessionState(history=list(trim_history(setup.snapshot.history, config.max_history)))
        worker_config = WorkerConfig(
            session_id=main.session_id,
            model=setup.fast_model or main.model,
            gateway=main.gateway,
            tool_pool=main.tool_pool,
            fs=self.overlay,
            tools=main.tools,
            hooks=HooksView(
                main.hooks, frozenset({HookEvent.PRE_TOOL_CALL, HookEvent.POST_TOOL_CALL})
            ),  # type: ignore[arg-type]
            interceptor=SpeculationGate(config.approval_mode, self.overlay, setup.workspace),
            state=state,
            services=ToolServices(blobs=main.services.blobs, pending_actions=PendingActions()),
            model_name=setup.snapshot.model_name,
            system_prompt=setup.snapshot.system_prompt,
            purpose="speculation",
            max_turns=config.max_turns,
            call_timeout=main.call_timeout,
            tool_concurrency=main.tool_concurrency,
            hidden_tools=main.hidden_tools,
            strict_tool_hooks=True,
            blob_store=main.blob_store,
            blob_limits=main.blob_limits,
        )
        self._worker = Worker.start(worker_config)
        self._worker.tell(Subscribe(address=self.actor_ref))
        if config.time_budget_s is not None:
            self._budget_timer = self.call_after(
                config.time_budget_s, self._over_budget, "time budget"
            )
        self.ask_then(
            self._worker,
            Submit(text=setup.suggestion.text, max_turns=config.max_turns),
            then=self._run_ended,
            on_error=self._run_failed,
            timeout=(config.time_budget_s or 600.0) + 60.0,
        )

    def on_stop(self) -> None:
        self._teardown()

    def on_failure(self, *exc_info: Any) -> None:
        self._teardown()

    def _teardown(self) -> None:
        """Last-resort cleanup that never blocks: kill the worker, drop the overlay.

        The orderly paths (accept, abort) have already stopped the worker and
        removed the overlay by message; this covers a crash. The removal runs
        on the blocking lane, where it waits for any tool still writing.
        """
        if self._budget_timer is not None:
            self._budget_timer.cancel()
        for ref in (self._worker, self._overlay_actor):
            actor = ref._actor_weakref() if ref is not None else None
            if isinstance(actor, PooledActor):
                actor.kill()
        overlay = self.overlay
        if overlay is not None and not overlay.removed:
            self.system.blocking.submit(overlay.remove, 30.0)

    def _cleanup_then_stop(self) -> None:
        """Orderly end: the worker stops first (no tool may still write), then the overlay goes."""
        if self._worker is not None:
            try:
                self._worker.tell(StopNow())
            except ActorDeadError:
                pass

        def removed(_answer: Any) -> None:
            try:
                self.setup.supervisor.tell(OverlayRemoved(speculation_id=self.setup.speculation_id))
            except ActorDeadError:
                pass
            self.stop()

        self.ask_then(
            self._overlay_actor,
            DiscardOverlay(timeout=30.0),
            then=removed,
            on_error=lambda _e: self.stop(),
            timeout=60.0,
        )

    # -- progress -------------------------------------------------------------------

    @handles(EventBase)
    def _on_event(self, event: EventBase) -> None:
        if isinstance(event, ItemAdded) and event.run_id is not None:
            self.transcript_items += 1
            if self.transcript_items > self.setup.config.max_messages:
                self._over_budget("message limit")
        elif isinstance(event, ToolStarted):
            self.tool_calls += 1
        else:
            return
        self._report_progress(
            event.kind, getattr(event, "name", "") or type(getattr(event, "item", None)).__name__
        )

    def _report_progress(self, inner: str, detail: str) -> None:
        try:
            self.setup.supervisor.tell(
                SpeculationProgress(
                    session_id=self.session_id,
                    speculation_id=self.setup.speculation_id,
                    inner=inner,
                    detail=detail,
                )
            )
        except ActorDeadError:
            pass

    def _over_budget(self, what: str) -> None:
        if self.state == "running" and self._worker is not None:
            self._worker.tell(PauseRun(reason=f"speculation {what} reached"))

    # -- the run's end ----------------------------------------------------------------

    def _run_ended(self, result: TurnResult) -> None:
        if self._budget_timer is not None:
            self._budget_timer.cancel()
        self.turns = result.turns
        self.tokens = result.usage.total_tokens
        items = result.items
        problems = pairing_problems(items)
        status = result.status
        if self._abort_reason is not None or status == "cancelled":
            self._finish("aborted", items=(), error=self._abort_reason or "cancelled")
            return
        if problems:
            self._finish(
                "failed", items=(), error="transcript check failed: " + "; ".join(problems)
            )
            return
        if status == "completed":
            self.items = items
            self._ask_pipelined()
            return
        if status == "boundary" and result.boundary is not None:
            self.boundary_calls = tuple(
                ToolCall.model_validate(c) for c in result.boundary.get("calls", ())
            )
            self.boundary_tool = result.boundary.get("tool")
            self.boundary_reason = result.boundary.get("reason")
            self._finish("boundary", items=items)
            return
        if status in ("paused", "max_turns"):
            self.boundary_tool = None
            self.boundary_reason = (
                "speculation turn limit reached"
                if status == "max_turns"
                else result.error or "budget reached"
            )
            self._finish("boundary", items=items)
            return
        self._finish("failed", items=(), error=result.error or status)

    def _run_failed(self, error: BaseException) -> None:
        if self._abort_reason is not None:
            self._finish("aborted", items=(), error=self._abort_reason)
            return
        self._finish("failed", items=(), error=f"the speculation's worker failed: {error!r}")

    def _ask_pipelined(self) -> None:
        """After a completed speculation: predict the input after that (Tab-Tab-Tab)."""
        setup = self.setup
        user = UserMessage(text=setup.suggestion.text)
        snapshot = extend(
            setup.snapshot, [user, *[i for i in self.items if not isinstance(i, UserMessage)]]
        )
        request_id = f"{setup.speculation_id}-pipelined"
        self._pipelined_request = request_id
        request = suggestion_request(
            snapshot,
            max_history=setup.config.max_history,
            request_id=request_id,
            purpose="pipelined",
            model=setup.fast_model or setup.main.model,
            reply_to=self.actor_ref,
        )
        setup.main.gateway.tell(request)

    @handles(LlmCompleted)
    def _on_pipelined(self, message: LlmCompleted) -> None:
        if message.request_id != self._pipelined_request:
            return
        self._pipelined_request = None
        self.tokens += message.usage.total_tokens
        verdict = suggestion_from_reply(message.message.text)
        self.next_suggestion = verdict.text if verdict.accepted else None
        self._finish("completed", items=self.items)

    @handles(LlmFailed)
    def _on_pipelined_failed(self, message: LlmFailed) -> None:
        if message.request_id != self._pipelined_request:
            return
        self._pipelined_request = None
        self._finish("completed", items=self.items)

    def _finish(
        self, state: SpeculationState, *, items: tuple[Any, ...], error: str | None = None
    ) -> None:
        if self._finished:
            return
        self._finished = True
        self.state = state
        self.items = items
        self.error = error
        self.completed_at = time.time()
        try:
            self.setup.supervisor.tell(SpeculationDone(result=self._result()))
        except ActorDeadError:
            pass
        if state in ("aborted", "failed"):
            for waiter in self._waiting:
                if waiter is not None:
                    waiter.try_set(self._result())
            self._waiting = []
            self._cleanup_then_stop()
            return
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            self._apply(waiter)

    def _result(self, **update: Any) -> SpeculationResult:
        return SpeculationResult(
            speculation_id=self.setup.speculation_id,
            state=self.state,
            items=self.items,
            boundary_calls=self.boundary_calls,
            boundary_tool=self.boundary_tool,
            boundary_reason=self.boundary_reason,
            error=self.error,
            turns=self.turns,
            tool_calls=self.tool_calls,
            tokens=self.tokens,
            started_at=self.started_at,
            completed_at=self.completed_at,
            next_suggestion=self.next_suggestion,
            **update,
        )

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
                reply.try_set(self._result())
            return

        apply_started = time.monotonic()

        def applied(answer: ApplyResult | ConflictReport) -> None:
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
            self._cleanup_then_stop()

        def failed(error: BaseException) -> None:
            if reply is not None:
                reply.try_set(
                    self._result(state="failed", error=f"applying the overlay failed: {error}")
                )
            self._cleanup_then_stop()

        self.ask_then(
            self._overlay_actor, ApplyOverlay(), then=applied, on_error=failed, timeout=60.0
        )

    # -- abort ------------------------------------------------------------------------

    @handles(AbortSpeculation)
    def _on_abort(self, message: AbortSpeculation) -> bool:
        if self._finished:
            if self.state in ("completed", "boundary"):  # finished, never accepted
                self._cleanup_then_stop()
            return False
        self._abort_reason = message.reason
        if self._pipelined_request is not None:
            try:
                self.setup.main.gateway.tell(CancelLlmRequest(request_id=self._pipelined_request))
            except ActorDeadError:
                pass
            self._pipelined_request = None
            self._finish("aborted", items=(), error=message.reason)
            return True
        if self._worker is not None:
            # StopNow, not CancelRun: our Submit may still be queued behind it
            # (control mail overtakes it), and a cancel of a run that has not
            # started would be lost. Stopping cancels whatever is in flight
            # (LLM stream, tool calls) and answers a queued Submit with
            # ActorDeadError; either way the run's end comes back here.
            try:
                self._worker.tell(StopNow())
            except ActorDeadError:
                self._finish("aborted", items=(), error=message.reason)
        return True


def new_speculation_id() -> str:
    return f"spec-{uuid.uuid4().hex[:10]}"


__all__ = ["SpeculationSetup", "Speculator", "fork_prefix", "new_speculation_id"]
