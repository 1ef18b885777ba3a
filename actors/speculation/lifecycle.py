"""A speculation's run: started, budgeted, watched and finished by the controller itself.

One speculation is one :class:`~actors.worker.worker.Worker` (purpose
``speculation``, configured by :mod:`.sandbox`) on a fresh overlay, started
here and watched with an exit watcher -- never restarted, so it needs no
supervisor. Its state lives in the controller's record
(:class:`~actors.speculation.states.Speculation`), nowhere else:

* **admission**: a new speculation starts only on a snapshot that matches the
  session's tools and system prompt, and only while the load governor has
  headroom (otherwise the suggestion is offered with ``SpeculationSkipped``);
* **its run** is one ``Submit`` carrying the record's
  :class:`~actors.core.cancel.CancelScope`, which travels with every LLM
  request and tool batch of the run -- its teardown waits for it to settle;
* **progress**: the worker's ``run_started`` / ``item_added`` /
  ``tool_started`` events reach the controller tagged with the speculation
  (:class:`RunEvents`); they count the transcript and the calls and become
  ``SpeculationProgress`` for the subscribers that read it;
* **budgets**: the turn limit is the worker's own; the transcript length
  pauses the run at its next safe point (before the next LLM request); time
  and tokens are hard -- at the time budget's deadline, or the moment the
  spend passes the token budget (live, from the request in flight:
  :class:`~actors.speculation.metered.MeteredModel`), the run's scope is
  cancelled at once, which stops its LLM stream and tool calls wherever they
  are, and the run ends at a boundary with its partial transcript. Every
  budget names itself in the boundary's reason. The scope is the record of
  that cancel: a run whose Submit has not reached its worker yet never
  starts (nothing to accept: Tab runs the suggestion normally);
* **its end**: the run's answer becomes the record's result
  (:func:`~actors.speculation.outcome.run_outcome`), its governor slot is
  freed and its worker is stopped at once (:mod:`.teardown`; the overlay
  stays for Tab). A completed speculation asks for the pipelined suggestion;
  a failed one alerts (info) and reports; one Tab waits for goes on to apply.
* **abort**: typing, a different submit or a new snapshot aborts the offered
  speculation: its worker is stopped on the control lane at once, and its
  telemetry follows once its overlay is gone.
"""

from __future__ import annotations

import time
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from fore.actors.core.continuations import tell_quietly
from fore.actors.core.errors import ActorStopped
from fore.actors.core.handlers import handles
from fore.actors.core.pooled import ActorExit, PooledActor
from fore.actors.speculation.base import ControllerBase
from fore.actors.speculation.metered import MeteredModel
from fore.actors.speculation.outcome import Limit, RunOutcome, run_outcome
from fore.actors.speculation.sandbox import speculation_gate, speculation_worker_config
from fore.actors.speculation.states import SpecPhase, Speculation
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.fsclock import Instant
from fore.actors.worker.worker import Worker
from fore.messages.alerts import AlertLevel
from fore.messages.session import (
    ItemAdded,
    PauseRun,
    Submit,
    Subscribe,
    ToolStarted,
    TurnResult,
)
from fore.messages.speculation import (
    ForkSnapshot,
    SpeculationProgress,
    SpeculationResult,
    SpeculationSkipped,
    SpeculationStatus,
    SpeculationUsage,
    Suggestion,
    TokenBudgetReached,
)

__all__ = ["Lifecycle", "RunEvents", "new_speculation_id"]

RUN_EVENTS = frozenset({"item_added", "tool_started"})
"""A speculation worker's events the controller reads (progress and the message limit)."""


def new_speculation_id() -> str:
    return f"spec-{uuid.uuid4().hex[:10]}"


class RunEvents:
    """A speculation worker's subscriber: hands each event to the controller, tagged.

    The speculation's worker reports with the session's id (it is the
    session's agent loop), so its events are told apart from the main
    worker's by who receives them: this object, one per speculation. A
    controller that is gone raises ``ActorStopped`` (the worker drops it).
    """

    __slots__ = ("_controller", "_speculation_id")

    def __init__(self, controller: Lifecycle, speculation_id: str) -> None:
        self._controller = controller
        self._speculation_id = speculation_id

    def tell(self, event: Any) -> None:
        controller = self._controller
        if not controller.post(controller._on_run_event, self._speculation_id, event):
            raise ActorStopped("the speculation controller is gone")


class Lifecycle(ControllerBase):
    """Starting, budgeting, finishing and aborting speculations (see the module docs)."""

    # -- start ---------------------------------------------------------------------------

    def _stale_reason(self, snapshot: ForkSnapshot, config_gen: int) -> str | None:
        """Why work forked from ``snapshot`` no longer matches the main request, if it does not."""
        if config_gen != self._config_gen:
            return "the session's tools changed after the snapshot"
        fork = self._fork
        if fork is not None and fork.version != snapshot.version:
            return "the session's system prompt or tools changed"
        return None

    def _start_speculation(self, suggestion: Suggestion, snapshot: ForkSnapshot) -> None:
        if self._current is not None:
            self._abort(self._current, "superseded by a new suggestion")
        stale = self._stale_reason(snapshot, self._fork_gen)
        if stale is not None:
            self.log.info("speculation_not_started", reason=stale, suggestion=suggestion.text)
            self._status_spec = None
            self._last_status = SpeculationStatus(
                state="stale", suggestion=suggestion.text, reason=stale
            )
            return
        refused = self.governor.try_admit() if self.governor is not None else None
        if refused is not None:
            self.log.info("speculation_skipped", reason=refused, suggestion=suggestion.text)
            if self.worker_config.telemetry is not None:
                self.worker_config.telemetry.skipped(refused)
            self._status_spec = None
            self._last_status = SpeculationStatus(
                state="skipped", suggestion=suggestion.text, reason=refused
            )
            self._emit(
                SpeculationSkipped(
                    session_id=self.session_id or "", suggestion=suggestion.text, reason=refused
                )
            )
            return
        spec_id = new_speculation_id()
        telemetry = self.worker_config.telemetry
        spec = Speculation(
            id=spec_id,
            suggestion=suggestion,
            snapshot=snapshot,
            config_gen=self._config_gen,
            holds_slot=self.governor is not None,
            span=None
            if telemetry is None
            else telemetry.speculation(
                session_id=self.session_id or "", speculation_id=spec_id, suggestion=suggestion.text
            ),
        )
        try:
            self._launch(spec)
        except Exception as exc:
            self._not_started(spec, exc)
            return
        self._specs[spec_id] = spec  # offered: it is the current one now
        self._status_spec = spec

    def _launch(self, spec: Speculation) -> None:
        """Create its overlay, start its worker (watched), and submit the suggestion."""
        main, config = self.worker_config, self.spec_config
        if not isinstance(main.fs, WorkspaceFs):  # a speculation needs a real workspace
            raise TypeError(f"a speculation needs the main session's WorkspaceFs, not {main.fs!r}")
        # Owned by the session: closing it waits for the overlay's removal.
        spec.overlay = self.overlays.create(
            main.fs,
            overlay_id=spec.id,
            max_bytes=config.overlay_max_bytes,
            owner=main.session_id,
            started=Instant.now(),
        )
        model, model_name = self._fork_model()
        spec.model = MeteredModel(
            model,
            self.actor_ref,
            token_budget=config.token_budget,
            governor=self.governor,
            speculation_id=spec.id,
        )
        spec.gate = speculation_gate(main, config, spec.snapshot, spec.overlay, self.workspace)
        worker_config = speculation_worker_config(
            main,
            config,
            spec.snapshot,
            tools=self._tools,
            overlay=spec.overlay,
            gate=spec.gate,
            model=spec.model,
            model_name=model_name,
            hook_gate=self.book.hook_gate,
        )
        with self.system.activated():
            spec.worker = Worker.start(worker_config)
        actor = spec.worker._actor_weakref()
        if not isinstance(actor, PooledActor) or not actor.add_exit_watcher(
            partial(self._watch_exit, spec.id)
        ):
            raise RuntimeError("its worker exited at once")
        spec.worker.tell(Subscribe(address=RunEvents(self, spec.id), kinds=RUN_EVENTS))
        if config.time_budget_s is not None:
            spec.budget_timer = self.call_after(
                config.time_budget_s, self._reach_limit, spec, "time budget", True
            )
        self.ask_then(
            spec.worker,
            Submit(
                text=spec.suggestion.text,
                max_turns=config.max_turns,
                submit_id=spec.id,
                trace=None if spec.span is None else spec.span.context,
                scope=spec.scope,
            ),
            then=partial(self._run_ended, spec),
            on_error=partial(self._run_failed, spec),
            timeout=(config.time_budget_s or 600.0) + 60.0,
        )

    def _not_started(self, spec: Speculation, error: Exception) -> None:
        """Its start failed: whatever was made goes (nothing ran in it), the slot is freed."""
        self.log.error("speculation_start_failed", speculation=spec.id, error=repr(error))
        if spec.worker is not None:
            spec.worker.stop(block=False)
        overlay = spec.overlay
        if overlay is not None:
            try:
                self.system.blocking.submit(overlay.remove, self.remove_timeout)
            except RuntimeError:  # the blocking lane is shut down: the runtime's close removes it
                pass
        if spec.span is not None:
            spec.span.span.end()
        self._release_slot(spec)
        self._alert(AlertLevel.INFO, f"speculation {spec.id} failed to start")

    # -- progress and budgets ---------------------------------------------------------------

    def _on_run_event(self, speculation_id: str, event: Any) -> None:
        """One of its worker's events (:data:`RUN_EVENTS`, via :class:`RunEvents`)."""
        spec = self._specs.get(speculation_id)
        if spec is None or spec.finished:
            return
        if isinstance(event, ItemAdded) and event.run_id is not None:
            spec.transcript_items += 1
            if spec.transcript_items > self.spec_config.max_messages:
                self._reach_limit(spec, "message limit")
        elif isinstance(event, ToolStarted):
            spec.live_tool_calls += 1
        else:
            return
        self._progress(
            spec,
            event.kind,
            getattr(event, "name", "") or type(getattr(event, "item", None)).__name__,
        )

    def _progress(self, spec: Speculation, inner: str, detail: str) -> None:
        if spec.overlay is not None:
            written, whiteouts, _dirs = spec.overlay.counts()
            spec.live_files = written + whiteouts
        if self._subscribers.wants("speculation_progress"):
            self._emit(
                SpeculationProgress(
                    session_id=self.session_id or "",
                    speculation_id=spec.id,
                    inner=inner,
                    detail=detail,
                    tool_calls=spec.live_tool_calls,
                    files_written=spec.live_files,
                )
            )

    @handles(SpeculationUsage)
    def _on_usage(self, message: SpeculationUsage) -> None:
        spec = self._specs.get(message.speculation_id)
        if spec is None:
            return
        spec.tokens += message.usage.total_tokens
        budget = self.spec_config.token_budget
        if budget is not None and spec.tokens > budget:
            self._reach_limit(spec, "token budget", True)

    @handles(TokenBudgetReached)
    def _on_budget_reached(self, message: TokenBudgetReached) -> None:
        """The spend passed the token budget while a request was still streaming."""
        spec = self._specs.get(message.speculation_id)
        if spec is None:
            return
        spec.tokens = max(spec.tokens, message.spent)
        self._reach_limit(spec, "token budget", True)

    def _reach_limit(self, spec: Speculation, what: str, hard: bool = False) -> None:
        """A budget is spent: the reason names it.

        Soft (the transcript length, counted from the run's own items, so the
        run is under way): ``PauseRun``, at the next safe point. Hard (time,
        tokens): the run's scope is cancelled now -- its LLM stream and tool
        calls stop wherever they are, and a run not started yet never starts --
        and the partial transcript is kept
        (:func:`~actors.speculation.outcome.run_outcome`).
        """
        if spec.finished or spec.limit is not None:
            return
        limit = spec.limit = Limit(f"speculation {what} reached", hard)
        self.log.info("speculation_limit", speculation=spec.id, limit=what, hard=hard)
        self._progress(spec, "limit", limit.reason)
        if hard:
            spec.scope.cancel(limit.reason)  # the worker hears of it, or finds it on arrival
        elif spec.worker is not None:
            tell_quietly(spec.worker, PauseRun(reason=limit.reason))

    # -- the run's end ------------------------------------------------------------------------

    def _run_ended(self, spec: Speculation, result: TurnResult) -> None:
        if spec.finished:
            return
        spec.tokens = max(spec.tokens, result.usage.total_tokens)
        gate = spec.gate
        outcome = run_outcome(
            result,
            limit=spec.limit,
            late=gate.late if gate is not None else (),
            refused=gate.refused if gate is not None else None,
            aborted=spec.abort_reason,
        )
        self._finish(spec, outcome, turns=result.turns)

    def _run_failed(self, spec: Speculation, error: BaseException) -> None:
        if spec.abort_reason is not None:
            self._finish(spec, RunOutcome("aborted", error=spec.abort_reason))
            return
        self._finish(
            spec, RunOutcome("failed", error=f"the speculation's worker failed: {error!r}")
        )

    def _finish(self, spec: Speculation, outcome: RunOutcome, *, turns: int = 0) -> None:
        """The run is over: its result goes into the record, its worker is stopped."""
        if spec.finished:
            return
        tokens, estimated = spec.tokens, 0
        if spec.model is not None:
            spent, estimated = spec.model.spent()
            tokens = max(tokens, spent)
        files = 0
        if spec.overlay is not None:
            written, whiteouts, _dirs = spec.overlay.counts()
            files = written + whiteouts
        spec.result = SpeculationResult(
            speculation_id=spec.id,
            state=outcome.state,
            items=outcome.items,
            boundary_calls=outcome.boundary_calls,
            boundary_tool=outcome.boundary_tool,
            boundary_reason=outcome.boundary_reason,
            error=outcome.error,
            turns=turns,
            tool_calls=spec.live_tool_calls,
            tokens=tokens,
            estimated_tokens=estimated,
            started_at=spec.started_at,
            completed_at=time.time(),
            files_written=files,
        )
        self._release_slot(spec)
        self._stop_worker(spec)  # its work is done; the overlay stays for Tab
        if spec.phase not in (SpecPhase.OFFERED, SpecPhase.ACCEPTING):
            return  # aborting: reported once its overlay is gone (with the abort's timings)
        spec.state = outcome.state
        if outcome.state == "failed":
            spec.reason = outcome.error
            self._alert(AlertLevel.INFO, f"speculation {spec.id} failed: {outcome.error}")
            if spec.phase is SpecPhase.OFFERED:  # an accepting one is reported by its accept
                spec.move(SpecPhase.ENDED)
                self._report(spec, "failed", reason=outcome.error)
        elif outcome.state == "empty":
            # Nothing to accept: not offered as finished; Tab runs the prompt normally.
            if spec.phase is SpecPhase.OFFERED:  # an accepting one is reported by its accept
                spec.move(SpecPhase.ENDED)
                self._report(spec, "empty", result=spec.result)
        elif outcome.state == "completed":
            self._ask_pipelined(spec)
        if spec.phase is SpecPhase.ACCEPTING:
            self._continue_accept(spec)

    # -- abort ----------------------------------------------------------------------------------

    def _abort(
        self, spec: Speculation, reason: str, *, stale: bool = False, at: float | None = None
    ) -> None:
        """Abort an offered speculation; telemetry follows once its overlay is gone."""
        if spec.phase is not SpecPhase.OFFERED:
            return  # being accepted (detached), or already ending
        state: Literal["stale", "aborted"] = "stale" if stale else "aborted"
        spec.reason = spec.abort_reason = reason
        spec.abort_requested = time.monotonic() if at is None else at
        self._cancel_pipelined(spec, reason)
        if self._closing:  # nobody will wait for its teardown: reported now
            spec.move(SpecPhase.ENDED, state=state)
            self._report(spec, state, reason=reason)
            return
        spec.move(SpecPhase.ABORTING, state=state)
        spec.steps = []  # the abort's story starts here (an earlier teardown's steps are not it)
        now = spec.step("abort_requested")
        if spec.finished:  # nothing left to cancel: only the overlay to remove
            spec.step("already_finished", now)
        self._stop_worker(spec)

    if TYPE_CHECKING:  # the teardown's (see base)

        def _watch_exit(self, speculation_id: str, record: ActorExit) -> None:
            raise NotImplementedError
