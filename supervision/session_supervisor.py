"""The session supervisor: supervises a session's worker, drives suggestions and speculation.

It is a :class:`~supervision.supervisor.Supervisor` (one_for_one: the worker is
permanent, each speculator temporary) that also owns the session's
speculation state, all of it per session -- nothing is process-global:

* it subscribes to its worker's events; after each completed main turn the
  worker's :class:`~messages.speculation.SnapshotTaken` becomes the session's
  fork snapshot, and (from the second answer on, not in plan mode) one model
  call predicts the next input -- unless the last answer says "type X to ...";
* the suggestion is shown (a :class:`SuggestionReady` event) after the display
  delay, and a :class:`~actors.speculation.speculator.Speculator` starts at once;
* a :class:`Keystroke` that is not a prefix of the suggestion, a different
  submit, or closing the session aborts the speculation (control lane);
* Tab (:class:`AcceptSuggestion`, or submitting exactly the suggestion) takes
  the accept path: overlay applied first, then the items inserted into the
  worker's history, then the pipelined suggestion becomes current;
* a crashing speculator fails only its speculation (info alert).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pykka import ActorDeadError

from actors.core.future import PooledFuture
from actors.core.pooled import handles
from actors.overlay.store import OverlayStore
from actors.speculation.fork import assistant_answers, extend, last_answer
from actors.speculation.speculator import SpeculationSetup, Speculator, new_speculation_id
from actors.speculation.suggest import suggestion_from_reply, suggestion_request
from actors.speculation.suggestion_filter import filter_suggestion
from actors.speculation.suggestion_prompt import extract_type_hint
from actors.worker.worker import WorkerConfig
from messages.alerts import AlertLevel
from messages.conversation import UserMessage
from messages.gate import ApprovalMode
from messages.llm import LlmCompleted, LlmFailed
from messages.runtime import ChildExited, ChildSpec, RestartType
from messages.session import (
    EventBase,
    Submit,
    Subscribe,
    TurnFinished,
    TurnResult,
    Unsubscribe,
)
from messages.speculation import (
    AbortSpeculation,
    AcceptResult,
    AcceptSpeculation,
    AcceptSuggestion,
    ForkSnapshot,
    GetSpeculation,
    InsertItems,
    Keystroke,
    OverlayRemoved,
    SnapshotTaken,
    SpeculationConfig,
    SpeculationDone,
    SpeculationFinished,
    SpeculationProgress,
    SpeculationResult,
    SpeculationStatus,
    SubmitPrompt,
    Suggestion,
    SuggestionReady,
    SuggestionSource,
)
from supervision.supervisor import Supervisor

_seq = itertools.count(1)


@dataclass
class _Speculation:
    id: str
    child_id: str
    suggestion: Suggestion
    snapshot: ForkSnapshot
    started_at: float
    state: str = "running"
    result: SpeculationResult | None = None
    handle: Any = None
    abort_requested: float | None = None
    abort_reason: str | None = None
    cancel_latency: float | None = None


class SessionSupervisor(Supervisor):
    """A session's supervisor and speculation controller (see module docs)."""

    def __init__(
        self,
        sup_id: str,
        *,
        session_id: str,
        worker_config: WorkerConfig,
        speculation: SpeculationConfig,
        overlays: OverlayStore,
        workspace: Path,
        fast_model: Any = None,
        worker_spec: ChildSpec,
    ) -> None:
        super().__init__(
            sup_id,
            session_id=session_id,
            max_restarts=5,
            period=30.0,
            children=[worker_spec],
        )
        self.worker_config = worker_config
        self.spec_config = speculation
        self.overlays = overlays
        self.workspace = workspace
        self.fast_model = fast_model
        self._fork: ForkSnapshot | None = None
        self._suggestion: Suggestion | None = None
        self._suggestion_request: str | None = None
        self._current: _Speculation | None = None
        self._last_status = SpeculationStatus()
        self._subscribers: list[Any] = []
        self._aborting: dict[str, _Speculation] = {}
        self._continuations: dict[str, Any] = {}
        self._accepting = 0
        """Accepts in progress: a suggestion arriving meanwhile is stale and dropped."""
        self._last_accept = 0.0
        self._worker = self._children["worker"].handle

    def on_start(self) -> None:
        super().on_start()
        self._worker.tell(Subscribe(address=self.actor_ref))  # kept until the worker runs

    def on_stop(self) -> None:
        self._abort("session closed")
        super().on_stop()

    # -- subscribers (the session's event stream) -------------------------------------

    @handles(Subscribe)
    def _on_subscribe(self, message: Subscribe) -> None:
        self._subscribers.append(message.address)

    @handles(Unsubscribe)
    def _on_unsubscribe(self, message: Unsubscribe) -> None:
        if message.address in self._subscribers:
            self._subscribers.remove(message.address)

    def _emit(self, event: Any) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber.tell(event)
            except ActorDeadError:
                self._subscribers.remove(subscriber)

    # -- events from the worker -----------------------------------------------------------

    @handles(EventBase)
    def _on_worker_event(self, _event: EventBase) -> None:
        """Only snapshots matter here; the session's own subscription gets the rest."""

    @handles(SnapshotTaken)
    def _on_snapshot(self, event: SnapshotTaken) -> None:
        old = self._fork
        self._fork = event.snapshot
        current = self._current
        if (
            current is not None
            and old is not None
            and current.snapshot.version != event.snapshot.version
        ):
            self._abort("the session's system prompt or tools changed")
        if not self.spec_config.enabled or self.spec_config.approval_mode is ApprovalMode.PLAN:
            return
        if assistant_answers(event.snapshot.history) < 2:
            return  # suggestions start from the second answer
        self._suggest(event.snapshot)

    @handles(TurnFinished)
    def _on_turn_finished(self, event: TurnFinished) -> None:
        """The end of a continuation after a boundary accept (other turns need nothing here)."""
        waiting = self._continuations.pop(event.result.run_id, None)
        if waiting is not None:
            waiting(event.result)

    def _suggest(self, snapshot: ForkSnapshot) -> None:
        hint = extract_type_hint(last_answer(snapshot.history))
        if hint:
            verdict = filter_suggestion(hint)
            if verdict.accepted:
                self._set_suggestion(verdict.text, "hint", snapshot)
                return
        request_id = f"{self.session_id}-suggest-{next(_seq)}"
        self._suggestion_request = request_id
        request = suggestion_request(
            snapshot,
            max_history=self.spec_config.max_history,
            request_id=request_id,
            purpose="suggestion",
            model=self.fast_model or self.worker_config.model,
            reply_to=self.actor_ref,
        )
        self.worker_config.gateway.tell(request)

    @handles(LlmCompleted)
    def _on_suggestion_reply(self, message: LlmCompleted) -> None:
        if message.request_id != self._suggestion_request or self._fork is None:
            return
        self._suggestion_request = None
        verdict = suggestion_from_reply(message.message.text)
        if not verdict.accepted:
            self.log.debug("suggestion_rejected", reason=str(verdict.reason), text=verdict.text)
            return
        self._set_suggestion(verdict.text, "model", self._fork)

    @handles(LlmFailed)
    def _on_suggestion_failed(self, message: LlmFailed) -> None:
        if message.request_id == self._suggestion_request:
            self._suggestion_request = None
            self.log.info("suggestion_failed", error=message.error.message)

    def _set_suggestion(self, text: str, source: SuggestionSource, snapshot: ForkSnapshot) -> None:
        if self._accepting and source != "pipelined":
            # The user pressed Tab meanwhile: the accept changes the history this
            # suggestion was made for, and it must not abort what is accepted.
            self.log.debug("suggestion_dropped_during_accept", text=text)
            return
        suggestion = Suggestion(
            id=f"sug-{next(_seq)}", text=text, source=source, snapshot_version=snapshot.version
        )
        self._suggestion = suggestion
        delay = self.spec_config.suggestion_delay_ms / 1000.0
        self.call_after(delay, self._show, suggestion)
        if self.spec_config.speculate:
            self._start_speculation(suggestion, snapshot)

    def _show(self, suggestion: Suggestion) -> None:
        if self._suggestion is suggestion:
            self._emit(SuggestionReady(session_id=self.session_id or "", suggestion=suggestion))

    # -- speculation ------------------------------------------------------------------------

    def _start_speculation(self, suggestion: Suggestion, snapshot: ForkSnapshot) -> None:
        self._abort("superseded by a new suggestion")
        spec_id = new_speculation_id()
        child_id = f"speculator:{spec_id}"
        setup = SpeculationSetup(
            speculation_id=spec_id,
            suggestion=suggestion,
            snapshot=snapshot,
            config=self.spec_config,
            main=self.worker_config,
            overlays=self.overlays,
            supervisor=self.actor_ref,
            fast_model=self.fast_model,
            workspace=self.workspace,
        )
        current = _Speculation(
            id=spec_id,
            child_id=child_id,
            suggestion=suggestion,
            snapshot=snapshot,
            started_at=time.time(),
        )
        self._current = current
        child = self._add(
            ChildSpec(
                id=child_id,
                restart=RestartType.TEMPORARY,
                shutdown_timeout=15.0,
                start=lambda: Speculator.start(setup),
            )
        )
        if not self._start_child(child):
            self._children.pop(child_id, None)
            self._current = None
            return
        current.handle = child.handle
        self._last_status = self._status_of(current)

    @handles(SpeculationProgress)
    def _on_progress(self, event: SpeculationProgress) -> None:
        self._emit(event)

    @handles(SpeculationDone)
    def _on_done(self, message: SpeculationDone) -> None:
        result = message.result
        aborting = self._aborting.get(result.speculation_id)
        if aborting is not None and aborting.abort_requested is not None:
            aborting.result = result
            aborting.cancel_latency = time.monotonic() - aborting.abort_requested
            return
        current = self._current
        if current is None or current.id != result.speculation_id:
            return
        current.state = result.state
        current.result = result
        self._last_status = self._status_of(current)
        if result.state in ("aborted", "failed"):
            self._telemetry(current, result.state, reason=result.error)
            self._current = None
            if result.state == "failed":
                self._alert(AlertLevel.INFO, f"speculation {current.id} failed: {result.error}")

    @handles(OverlayRemoved)
    def _on_overlay_removed(self, message: OverlayRemoved) -> None:
        aborted = self._aborting.pop(message.speculation_id, None)
        if aborted is None or aborted.abort_requested is None:
            return
        self._telemetry(
            aborted,
            "aborted",
            reason=aborted.abort_reason,
            cancel_latency=aborted.cancel_latency,
            cleanup_latency=time.monotonic() - aborted.abort_requested,
        )

    def _on_unexpected_exit(self, child: Any, message: ChildExited) -> None:
        current = self._current
        if current is not None and child.spec.id == current.child_id:
            # A crashing speculator fails its speculation only; it is not restarted.
            self._children.pop(child.spec.id, None)
            child.handle.close("speculation failed")
            if message.failed:
                current.state = "failed"
                self._last_status = self._status_of(current)
                self._telemetry(current, "failed", reason=message.error)
                self._alert(AlertLevel.INFO, f"speculation {current.id} failed: {message.error}")
                self._current = None
            return
        super()._on_unexpected_exit(child, message)

    @handles(Keystroke)
    def _on_keystroke(self, message: Keystroke) -> None:
        suggestion = self._suggestion
        if message.text and suggestion is not None and suggestion.text.startswith(message.text):
            return  # still typing the suggestion itself
        self._suggestion = None
        self._abort("user typed")

    @handles(AbortSpeculation)
    def _on_abort(self, message: AbortSpeculation) -> None:
        self._abort(message.reason)

    def _abort(self, reason: str) -> None:
        """Abort the current speculation; telemetry follows once its overlay is gone."""
        current = self._current
        if current is None:
            return
        self._current = None
        current.abort_requested = time.monotonic()
        current.abort_reason = reason
        if current.result is not None:
            current.cancel_latency = 0.0  # it had finished: nothing left to cancel
        current.state = "aborted"
        self._last_status = self._status_of(current).model_copy(update={"state": "aborted"})
        self._aborting[current.id] = current
        try:
            current.handle.tell(AbortSpeculation(reason=reason))
        except ActorDeadError:
            self._aborting.pop(current.id, None)
            self._telemetry(current, "aborted", reason=reason)

    # -- accept ----------------------------------------------------------------------------

    @handles(AcceptSuggestion)
    def _on_accept(self, message: AcceptSuggestion) -> None:
        self._accept(self.defer_reply(), message.wait_continuation)

    @handles(SubmitPrompt)
    def _on_submit_prompt(self, message: SubmitPrompt) -> None:
        reply = self.defer_reply()
        suggestion = self._suggestion
        if suggestion is not None and message.segments is None and message.text == suggestion.text:
            self._accept(reply, True, as_turn=True)
            return
        self._suggestion = None
        self._abort("the user submitted something else")
        self._forward_submit(
            Submit(text=message.text, segments=message.segments, max_turns=message.max_turns), reply
        )

    def _forward_submit(self, submit: Submit, reply: PooledFuture[Any] | None) -> None:
        def done(result: TurnResult) -> None:
            if reply is not None:
                reply.try_set(result)

        def failed(error: BaseException) -> None:
            if reply is not None:
                reply.try_set_exception(error)

        self.ask_then(self._worker, submit, then=done, on_error=failed, timeout=3600.0)

    def _accept(
        self, reply: PooledFuture[Any] | None, wait: bool, *, as_turn: bool = False
    ) -> None:
        tab_at = time.time()
        started = time.monotonic()
        suggestion = self._suggestion
        self._accepting += 1
        answered = [False]

        def answer(result: AcceptResult) -> None:
            if not answered[0]:
                answered[0] = True
                self._accepting -= 1
            if reply is None:
                return
            if as_turn:
                reply.try_set(result.turn or _as_turn(self.session_id or "", result))
            else:
                reply.try_set(result)

        if time.monotonic() - self._last_accept < self.spec_config.accept_debounce_ms / 1000.0:
            answer(AcceptResult(outcome="debounced"))
            return
        self._last_accept = time.monotonic()
        if suggestion is None:
            answer(AcceptResult(outcome="no_suggestion"))
            return
        self._suggestion = None
        current = self._current
        if current is None or current.suggestion is not suggestion:
            self._submit_normally(suggestion, answer, "accepted")
            return

        finished_before_tab = current.result is not None

        def speculated(result: SpeculationResult) -> None:
            self._current = None
            if finished_before_tab:
                result = result.model_copy(update={"apply_started": None})
            self._last_status = self._status_of(current, result)
            if result.conflicts:
                self._alert(AlertLevel.WARN, result.conflict_summary or "the speculation conflicts")
                self._telemetry(current, "conflict", reason=", ".join(result.conflicts))
                self._submit_normally(suggestion, answer, "conflict", conflicts=result.conflicts)
                return
            if result.state not in ("completed", "boundary"):
                self._telemetry(current, "failed", reason=result.error)
                self._submit_normally(suggestion, answer, "failed")
                return
            self._insert(
                current,
                suggestion=suggestion,
                result=result,
                tab_at=tab_at,
                started=started,
                wait=wait,
                answer=answer,
            )

        def failed(error: BaseException) -> None:
            self._current = None
            self._telemetry(current, "failed", reason=repr(error))
            self._submit_normally(suggestion, answer, "failed")

        self.ask_then(
            current.handle, AcceptSpeculation(), then=speculated, on_error=failed, timeout=3600.0
        )

    def _insert(
        self,
        current: _Speculation,
        *,
        suggestion: Suggestion,
        result: SpeculationResult,
        tab_at: float,
        started: float,
        wait: bool,
        answer: Any,
    ) -> None:
        """Insert the accepted transcript (the overlay is already applied)."""
        items = (UserMessage(text=suggestion.text), *result.items[1:]) if result.items else ()
        boundary = result.state == "boundary"
        completed = result.completed_at or time.time()
        saved = max(0.0, min(completed, tab_at) - result.started_at)
        outcome = "boundary" if boundary else "accepted"
        self._telemetry(current, outcome, result=result)
        if result.next_suggestion and not boundary:
            self._set_suggestion(
                result.next_suggestion, "pipelined", extend(current.snapshot, items)
            )

        def report(latency: float, turn: TurnResult | None) -> None:
            answer(
                AcceptResult(
                    outcome=outcome,
                    suggestion=suggestion.text,
                    files_applied=result.applied,
                    items_inserted=len(items),
                    items=tuple(items),
                    boundary_tool=result.boundary_tool,
                    boundary_reason=result.boundary_reason,
                    time_saved_s=saved,
                    accept_latency_s=latency,
                    waited_s=waited,
                    next_suggestion=result.next_suggestion,
                    turn=turn,
                )
            )

        # Tab pressed while the speculation still ran: the accept itself starts
        # when the speculator could apply; the wait is reported separately.
        begin = max(started, result.apply_started or started)
        waited = begin - started

        def inserted(run_id: str | None) -> None:
            latency = time.monotonic() - begin  # files applied and history inserted
            if run_id is not None and wait:
                self._continuations[run_id] = lambda turn: report(latency, turn)
            else:
                report(latency, None)

        def failed(error: BaseException) -> None:
            self._alert(AlertLevel.ERROR, f"inserting the accepted speculation failed: {error}")
            answer(AcceptResult(outcome="failed", suggestion=suggestion.text))

        self.ask_then(
            self._worker,
            InsertItems(
                items=tuple(items), continue_calls=result.boundary_calls if boundary else ()
            ),
            then=inserted,
            on_error=failed,
            timeout=60.0,
        )

    def _submit_normally(
        self,
        suggestion: Suggestion,
        answer: Any,
        outcome: str,
        *,
        conflicts: Sequence[str] = (),
    ) -> None:
        """Run the suggestion as an ordinary prompt on the current files."""

        def done(turn: TurnResult) -> None:
            answer(
                AcceptResult(
                    outcome=outcome,
                    suggestion=suggestion.text,
                    conflicts=tuple(conflicts),
                    items=turn.items,
                    items_inserted=len(turn.items),
                    turn=turn,
                )
            )

        def failed(error: BaseException) -> None:
            answer(AcceptResult(outcome="failed", suggestion=suggestion.text))

        self.ask_then(
            self._worker, Submit(text=suggestion.text), then=done, on_error=failed, timeout=3600.0
        )

    # -- status and telemetry ---------------------------------------------------------------

    @handles(GetSpeculation)
    def _on_get(self, _message: GetSpeculation) -> tuple[SpeculationStatus, str | None]:
        current = self._current
        status = self._status_of(current) if current is not None else self._last_status
        return status, (self._suggestion.text if self._suggestion is not None else None)

    def _status_of(
        self, current: _Speculation, result: SpeculationResult | None = None
    ) -> SpeculationStatus:
        result = result or current.result
        return SpeculationStatus(
            speculation_id=current.id,
            state=current.state,
            suggestion=current.suggestion.text,
            turns=result.turns if result else 0,
            tool_calls=result.tool_calls if result else 0,
            files_written=len(result.applied) if result else 0,
            tokens=result.tokens if result else 0,
            started_at=current.started_at,
            completed_at=result.completed_at if result else None,
            boundary_tool=result.boundary_tool if result else None,
            boundary_reason=result.boundary_reason if result else None,
            next_suggestion=result.next_suggestion if result else None,
        )

    def _telemetry(
        self,
        current: _Speculation,
        outcome: str,
        *,
        result: SpeculationResult | None = None,
        reason: str | None = None,
        cancel_latency: float | None = None,
        cleanup_latency: float | None = None,
    ) -> None:
        result = result or current.result
        event = SpeculationFinished(
            session_id=self.session_id or "",
            speculation_id=current.id,
            outcome=outcome,
            state=(result.state if result is not None else "running"),
            suggestion=current.suggestion.text,
            turns=result.turns if result else 0,
            tool_calls=result.tool_calls if result else 0,
            files_written=len(result.applied) if result else 0,
            tokens=result.tokens if result else 0,
            duration_s=time.time() - current.started_at,
            boundary_tool=result.boundary_tool if result else None,
            boundary_reason=result.boundary_reason if result else None,
            reason=reason,
            cancel_latency_s=cancel_latency,
            cleanup_latency_s=cleanup_latency,
        )
        self.log.info(
            "speculation_finished",
            speculation=current.id,
            outcome=outcome,
            turns=event.turns,
            tool_calls=event.tool_calls,
            files_written=event.files_written,
            tokens=event.tokens,
            duration_s=round(event.duration_s, 4),
            boundary_tool=event.boundary_tool,
            reason=reason,
        )
        self._emit(event)


def _as_turn(session_id: str, result: AcceptResult) -> TurnResult:
    return TurnResult(
        run_id=f"accept-{next(_seq)}",
        session_id=session_id,
        status="completed" if result.outcome in ("accepted", "boundary") else "error",
        items=result.items,
        error=None if result.outcome in ("accepted", "boundary") else result.outcome,
    )
