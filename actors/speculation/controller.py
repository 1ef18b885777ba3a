"""The speculation controller: a session's suggestions, speculations and accepts.

It is the session's front door (``Session`` sends every prompt, keystroke,
Tab, tool change and status query here) and a permanent child of the
session's :class:`~supervision.session_supervisor.SessionSupervisor`, beside
the worker. The supervisor only supervises; everything about speculation
lives here, all of it per session -- nothing is process-global. It starts
one :class:`~actors.speculation.speculator.Speculator` per speculation and
watches its exit itself (a speculator is never restarted, so it needs no
supervisor: its reaper finishes the cleanup even after this actor stopped).
What must outlive a restart of this actor -- the session's subscribers and
the last status sent -- is kept in a :class:`SpeculationBook` the supervisor
owns.

* it subscribes to its worker's events; after each completed main turn the
  worker's :class:`~messages.speculation.SnapshotTaken` becomes the session's
  fork snapshot, and (from the second answer on, not in plan mode) one model
  call predicts the next input -- unless the last answer says "type X to ...";
* the suggestion is shown (a :class:`SuggestionReady` event, and only then
  ``s.suggestion``) after the display delay, and a
  :class:`~actors.speculation.speculator.Speculator` starts at once;
* a :class:`Keystroke` that is not a prefix of the suggestion, a different
  submit, or closing the session aborts the speculation (control lane) and
  cancels a suggestion request still in flight;
* Tab (:class:`AcceptSuggestion`, or submitting exactly the suggestion) takes
  the accept path: overlay applied first, then the items inserted into the
  worker's history, then the pipelined suggestion becomes current. Files are
  never applied without their history: a different submit while Tab waits
  for a running speculation calls the accept off (the speculation is aborted,
  nothing applied, the accept answers ``aborted``) and reaches the worker only
  after the accept's items would have; so does an accept whose caller stopped
  waiting (its ask's deadline passed) -- it is aborted, not applied later;
* a crashing speculator fails only its speculation (info alert);
* with speculation off it is a plain relay: submits are forwarded to the
  worker, Tab answers ``no_suggestion`` and keystrokes change nothing;
* telemetry: one :class:`SpeculationFinished` per speculation; an abort is
  timed from the user's keystroke (or submit) to the reaper's confirmed
  cancellations and the overlay's removal, and says whether the speculation
  was still running (a finished one had nothing to cancel).

**Versions, not counters.** Three numbers keep late answers from doing harm:

* ``_epoch`` changes whenever the user's input context changes (a main turn
  ended, the user typed or submitted, an accept began). A suggestion request
  remembers its epoch and is cancelled when the epoch moves, so a late reply is
  never shown; a pipelined suggestion that arrives after its accept becomes
  current only if nothing happened since that accept. A suggestion made *during*
  an accept (a normal run's answer says "type yes ...") belongs to the newest
  epoch and is kept.
* ``_config_gen`` changes when the session's tools change (``AddTool`` comes
  through here). A speculation records it when it starts; a fork snapshot
  records it when it is taken. A snapshot older than the tools is stale: no
  speculation starts on it, a running one is aborted as ``stale``, and an
  accept checks both the generation and the snapshot version before using a
  speculation's work.
* each speculation detaches from ``_current`` the moment its accept begins,
  so typing while Tab waits can no longer abort what is being accepted, and
  each speculation reports exactly one :class:`SpeculationFinished`.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykka import ActorDeadError, ActorRef

from fore.actors.alerts import send_alert
from fore.actors.core.cancel import CancelScope
from fore.actors.core.future import PooledFuture
from fore.actors.core.pooled import (
    ActorExit,
    PooledActor,
    handles,
    stop_now,
    tell_quietly,
)
from fore.actors.core.subscribers import Subscribers
from fore.actors.core.timer import TimerHandle
from fore.actors.overlay.store import OverlayStore
from fore.actors.speculation.accept import AcceptProtocol
from fore.actors.speculation.fork import assistant_answers, extend, last_answer
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.speculation.speculator import (
    SpeculationSetup,
    Speculator,
    new_speculation_id,
)
from fore.actors.speculation.states import (
    SpecPhase,
    Speculation,
    accepting,
    offered,
)
from fore.actors.speculation.status import (
    StatusEvents,
    abort_timings,
    finished_event,
    status_of,
)
from fore.actors.speculation.suggest import suggestion_from_reply, suggestion_request
from fore.actors.speculation.suggestion_filter import filter_suggestion
from fore.actors.speculation.suggestion_prompt import extract_type_hint
from fore.actors.tools.base import ToolRegistry
from fore.actors.worker.approval import narrows_speculation
from fore.actors.worker.worker import WorkerConfig
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.llm import (
    LlmCancelled,
    LlmCompleted,
    LlmFailed,
    LlmRequest,
    LlmRetrying,
    Purpose,
)
from fore.messages.runtime import GetChild
from fore.messages.session import (
    AddTool,
    CancelRun,
    EventBase,
    GetHistory,
    GetRunState,
    PauseRun,
    Resume,
    SetModel,
    Submit,
    Subscribe,
    TurnFinished,
    TurnResult,
    Unsubscribe,
)
from fore.messages.speculation import (
    AbortSpeculation,
    CancelAccept,
    ForkSnapshot,
    GetSpeculation,
    Keystroke,
    OverlayRemoved,
    SetApprovalMode,
    SnapshotTaken,
    SpeculationConfig,
    SpeculationDone,
    SpeculationOutcome,
    SpeculationProgress,
    SpeculationResult,
    SpeculationSkipped,
    SpeculationStatus,
    Suggestion,
    SuggestionReady,
    SuggestionSource,
)

_seq = itertools.count(1)

_WORKER_EVENTS = frozenset({"snapshot_taken", "turn_finished"})
"""The worker's events this controller reads (a fork snapshot; a continuation's end)."""

_UNDER_WAY = (SpecPhase.OFFERED, SpecPhase.ACCEPTING, SpecPhase.INSERTING)
"""Phases in which a speculation's own end (done, crash) still matters to the controller."""


SPECULATOR_STOP_TIMEOUT = 15.0
"""Seconds a speculator has to stop when its session closes before it is killed."""


def _kill_if_alive(ref: ActorRef[Any]) -> None:
    actor = ref._actor_weakref()
    if isinstance(actor, PooledActor) and not actor.has_exited:
        actor.kill()


@dataclass(frozen=True)
class _SuggestionRequest:
    request: LlmRequest
    """Cancelled through its own scope (``request.scope``) when the epoch moves."""
    epoch: int
    snapshot: ForkSnapshot

    @property
    def request_id(self) -> str:
        return self.request.request_id


@dataclass(eq=False)
class SpeculationBook:
    """What a session keeps across a restart of its controller (owned by its supervisor).

    The session's subscribers (``Session`` subscribes once, when it opens) and
    the status events' memory of what was last sent, so a restarted controller
    goes on emitting to the same front ends without repeating itself. Like the
    alert sink's state: built by the supervisor, handed to every incarnation.
    """

    session_id: str
    subscribers: Subscribers = field(default_factory=Subscribers)
    status_events: StatusEvents | None = None

    def emit(self, event: Any) -> None:
        """Tell every subscriber of the event's kind; one that is gone is dropped."""
        self.subscribers.emit(event)

    def __post_init__(self) -> None:
        if self.status_events is None:
            self.status_events = StatusEvents(self.session_id, self.emit)


class SpeculationController(AcceptProtocol):
    """A session's front door and speculation controller (see module docs)."""

    def __init__(
        self,
        *,
        name: str,
        session_id: str,
        worker: Any,
        worker_config: WorkerConfig,
        speculation: SpeculationConfig,
        overlays: OverlayStore,
        workspace: Path,
        book: SpeculationBook,
        fast_model: Any = None,
        governor: LoadGovernor | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        """The session supervisor's id: alerts name it, as they did when this was the supervisor."""
        self.session_id = session_id
        self.worker_config = worker_config
        self.spec_config = speculation
        self.overlays = overlays
        self.workspace = workspace
        self.fast_model = fast_model
        self.governor = governor
        """Runtime-wide admission control: speculate only with headroom (None: always)."""
        self.book = book
        self._tools: ToolRegistry = worker_config.tools
        """The session's tools as this controller last forwarded them (speculations run these)."""
        self._fork: ForkSnapshot | None = None
        self._fork_gen = 0
        self._config_gen = 0
        self._epoch = 0
        self._suggestion: Suggestion | None = None
        self._shown = False
        self._show_timer: TimerHandle | None = None
        self._suggestion_request: _SuggestionRequest | None = None
        self._specs: dict[str, Speculation] = {}
        self._status_spec: Speculation | None = None
        self._last_status = SpeculationStatus()
        self._continuations: dict[str, Callable[[TurnResult], None]] = {}
        self._last_accept = float("-inf")
        self._held: list[tuple[Submit, PooledFuture[Any] | None]] = []
        """Submits that wait for that accept (they must reach the worker after it)."""
        self._worker = worker
        self._closing = False
        """Set when this actor stops: its speculators are being stopped, aborts report at once."""
        # -- issue 24: calling off a Tab, approval mode, model ----------
        self._accept_submits: set[CancelScope] = set()
        """The scopes of the normal runs accepts started (``CancelAccept`` cancels them)."""

    @property
    def _current(self) -> Speculation | None:
        """The speculation behind the current suggestion (typing aborts it), if any."""
        return offered(self._specs.values())

    @property
    def _accepting(self) -> Speculation | None:
        """The speculation whose accept has not yet handed its items to the worker."""
        return accepting(self._specs.values())

    @property
    def _subscribers(self) -> Subscribers:
        return self.book.subscribers

    @property
    def _status_events(self) -> StatusEvents:
        events = self.book.status_events
        assert events is not None  # set by the book's __post_init__
        return events

    def on_start(self) -> None:
        # Only snapshots and turn ends matter here, and only with speculation on:
        # a session without it does not pay a mailbox hop per worker event.
        if self.spec_config.enabled:
            self._worker.tell(Subscribe(address=self.actor_ref, kinds=_WORKER_EVENTS))

    def on_failure(self, *_exc_info: Any) -> None:
        self.on_stop()  # a crash takes its speculations down, as a stop does

    def on_stop(self) -> None:
        # Speculators go first (as when the supervisor stopped them before
        # itself): each one's reaper removes its overlay; an abort that
        # reaches one now has nobody to wait for and reports at once.
        self._closing = True
        for spec in self._specs.values():
            if not spec.exited and stop_now(spec.handle, block=False):
                # As the supervisor's stop escalated: killed if still there at its
                # shutdown timeout (the runtime's timer outlives this actor).
                self.system.timer.call_later(SPECULATOR_STOP_TIMEOUT, _kill_if_alive, spec.handle)
        self._invalidate("session closed")
        for spec in list(self._specs.values()):
            self._cancel_pipelined(spec, "session closed")
        held, self._held = self._held, []
        for _submit, reply in held:
            if reply is not None:
                reply.try_set_exception(ActorDeadError("the session closed"))
        for spec in self._specs.values():  # no SpeculationFinished will come: end their spans
            if spec.span is not None and not spec.reported:
                spec.span.closed("session closed")

    def _alert(self, level: AlertLevel, text: str) -> None:
        # Worded as the session supervisor's own alerts were (prefix and source).
        send_alert(
            self.system.alert_sink,
            level,
            f"{self.name}: {text}",
            session=self.session_id,
            source="supervisor",
        )

    # -- subscribers (the session's event stream) -------------------------------------

    @handles(Subscribe)
    def _on_subscribe(self, message: Subscribe) -> None:
        self._subscribers.add(message.address, message.kinds)

    @handles(Unsubscribe)
    def _on_unsubscribe(self, message: Unsubscribe) -> None:
        self._subscribers.remove(message.address)

    def _emit(self, event: Any) -> None:
        self.book.emit(event)

    @handles(GetChild)
    def _on_get_child(self, message: GetChild) -> ActorRef[Any] | None:
        """A live speculator by its child id (``speculator:<speculation id>``), for tests."""
        for spec in self._specs.values():
            if spec.child_id == message.child_id and not spec.exited:
                return spec.handle
        return None

    # -- the fork model ---------------------------------------------------------------------

    def _fork_model(self) -> tuple[Any, str]:
        """The provider object and wire name of suggestion, speculation and pipelined requests.

        The fast model when configured -- its object and its name (a provider
        sends ``request.model_name`` when set, so the name matters as much as
        the object); otherwise the main model, under the main request's name.
        """
        fast = self.fast_model
        name = self.spec_config.fast_model_name
        if not name and fast is not None:
            name = str(getattr(fast, "name", "") or "")
        return (fast if fast is not None else self.worker_config.model), name

    # -- events from the worker -----------------------------------------------------------

    @handles(EventBase)
    def _on_worker_event(self, _event: EventBase) -> None:
        """Only snapshots and turn ends matter here (the session subscribes to the rest)."""

    @handles(SnapshotTaken)
    def _on_snapshot(self, event: SnapshotTaken) -> None:
        snapshot = event.snapshot
        self._fork = snapshot
        self._fork_gen = self._config_gen
        current = self._current
        if current is not None:
            stale = current.snapshot.version != snapshot.version
            reason = (
                "the session's system prompt or tools changed"
                if stale
                else "superseded by a new main turn"
            )
            self._abort(current, reason, stale=stale)
        self._invalidate("a new main turn ended")
        if not self.spec_config.enabled or self.spec_config.approval_mode is ApprovalMode.PLAN:
            return
        if assistant_answers(snapshot.history) < 2:
            return  # suggestions start from the second answer
        self._suggest(snapshot)

    @handles(TurnFinished)
    def _on_turn_finished(self, event: TurnFinished) -> None:
        """The end of a continuation after a boundary accept (other turns need nothing here)."""
        waiting = self._continuations.pop(event.result.run_id, None)
        if waiting is not None:
            waiting(event.result)

    # -- tools -------------------------------------------------------------------------------

    @handles(AddTool)
    def _on_add_tool(self, message: AddTool) -> None:
        """A tool change makes every older snapshot stale; the worker gets the tool after."""
        reply = self.defer_reply()
        self._tools = self._tools.with_tool(message.tool)  # a duplicate name fails the ask here
        self._config_gen += 1
        if self._current is not None:
            self._abort(self._current, "the session's tools changed", stale=True)
        self._relay_to_worker(message, reply, timeout=30.0)

    # -- suggestions ---------------------------------------------------------------------------

    def _invalidate(self, reason: str, at: float | None = None) -> None:
        """The input context changed: what was offered for the old one goes (see module docs).

        ``at``: when the user did what changed it (abort latency starts there).
        """
        self._epoch += 1
        request = self._suggestion_request
        if request is not None:
            self._suggestion_request = None
            request.request.scope.cancel(reason)  # wherever it is: never sent, or hung up
        self._clear_suggestion()
        if self._current is not None:
            self._abort(self._current, reason, at=at)

    def _clear_suggestion(self) -> None:
        self._suggestion = None
        self._shown = False
        if self._show_timer is not None:
            self._show_timer.cancel()
            self._show_timer = None

    def _suggest(self, snapshot: ForkSnapshot) -> None:
        hint = extract_type_hint(last_answer(snapshot.history))
        if hint:
            verdict = filter_suggestion(hint)
            if verdict.accepted:
                self._set_suggestion(verdict.text, "hint", snapshot)
                return
        request_id = f"{self.session_id}-suggest-{next(_seq)}"
        request = self._ask_for_suggestion(snapshot, request_id, "suggestion")
        self._suggestion_request = _SuggestionRequest(request, self._epoch, snapshot)

    def _ask_for_suggestion(
        self, snapshot: ForkSnapshot, request_id: str, purpose: Purpose
    ) -> LlmRequest:
        """One suggestion request on the fork's prefix (the fast model when configured).

        Returned as sent: its own scope (``request.scope``) is what cancels it.
        """
        model, model_name = self._fork_model()
        request = suggestion_request(
            snapshot,
            max_history=self.spec_config.max_history,
            trim_step=self.spec_config.history_trim_step,
            request_id=request_id,
            purpose=purpose,
            model=model,
            model_name=model_name,
            reply_to=self.actor_ref,
            stream=self.spec_config.stream_forks,
            max_tokens=self.spec_config.suggestion_max_tokens,
        )
        self.worker_config.gateway.tell(request)
        return request

    @handles(LlmCompleted)
    def _on_llm_completed(self, message: LlmCompleted) -> None:
        request = self._suggestion_request
        if request is not None and message.request_id == request.request_id:
            self._suggestion_request = None
            if request.epoch != self._epoch:
                return
            verdict = suggestion_from_reply(message.message.text)
            if not verdict.accepted:
                self.log.debug("suggestion_rejected", reason=str(verdict.reason), text=verdict.text)
                return
            self._set_suggestion(verdict.text, "model", request.snapshot)
            return
        spec = self._pipelined_owner(message.request_id)
        if spec is not None:
            self._on_pipelined(spec, message)
        # Anything else is a late reply to a request we cancelled: ignored.

    @handles(LlmFailed)
    def _on_llm_failed(self, message: LlmFailed) -> None:
        self._request_ended(message.request_id, message.error.message)

    @handles(LlmCancelled)
    def _on_llm_cancelled(self, message: LlmCancelled) -> None:
        self._request_ended(message.request_id, message.reason)

    @handles(LlmRetrying)
    def _on_llm_retrying(self, message: LlmRetrying) -> None:
        """A suggestion request is retried by the gateway; nothing to do until it ends."""

    def _request_ended(self, request_id: str, why: str) -> None:
        request = self._suggestion_request
        if request is not None and request.request_id == request_id:
            self._suggestion_request = None
            self.log.info("suggestion_failed", error=why)
            return
        spec = self._pipelined_owner(request_id)
        if spec is not None:
            spec.pipelined_request = None
            self.log.info("pipelined_suggestion_failed", speculation=spec.id, error=why)
            self._forget(spec)

    def _set_suggestion(
        self,
        text: str,
        source: SuggestionSource,
        snapshot: ForkSnapshot,
        *,
        show_now: bool = False,
    ) -> None:
        self._clear_suggestion()
        suggestion = Suggestion(
            id=f"sug-{next(_seq)}", text=text, source=source, snapshot_version=snapshot.version
        )
        self._suggestion = suggestion
        delay = self.spec_config.suggestion_delay_ms / 1000.0
        if show_now or delay <= 0:
            self._show(suggestion)
        else:
            self._show_timer = self.call_after(delay, self._show, suggestion)
        if self.spec_config.speculate:
            self._start_speculation(suggestion, snapshot)

    def _show(self, suggestion: Suggestion) -> None:
        if self._suggestion is suggestion and not self._shown:
            self._shown = True
            self._show_timer = None
            self._emit(SuggestionReady(session_id=self.session_id or "", suggestion=suggestion))

    # -- speculation ------------------------------------------------------------------------

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
        child_id = f"speculator:{spec_id}"
        model, model_name = self._fork_model()
        telemetry = self.worker_config.telemetry
        span = (
            None
            if telemetry is None
            else telemetry.speculation(
                session_id=self.session_id or "", speculation_id=spec_id, suggestion=suggestion.text
            )
        )
        setup = SpeculationSetup(
            speculation_id=spec_id,
            suggestion=suggestion,
            snapshot=snapshot,
            config=self.spec_config,
            main=self.worker_config,
            tools=self._tools,
            overlays=self.overlays,
            supervisor=self.actor_ref,
            model=model,
            model_name=model_name,
            workspace=self.workspace,
            governor=self.governor,
            trace=None if span is None else span.context,
        )
        ref = self._start_speculator(setup)
        if ref is None:
            if span is not None:
                span.span.end()
            if self.governor is not None:
                self.governor.release()  # its slot, admitted above
            self._alert(AlertLevel.INFO, f"speculation {spec_id} failed to start")
            return
        spec = Speculation(
            id=spec_id,
            child_id=child_id,
            suggestion=suggestion,
            snapshot=snapshot,
            config_gen=self._config_gen,
            started_at=time.time(),
            handle=ref,
            holds_slot=self.governor is not None,
            span=span,
        )
        self._specs[spec_id] = spec  # offered: it is the current one now
        self._status_spec = spec

    @handles(SpeculationProgress)
    def _on_progress(self, event: SpeculationProgress) -> None:
        spec = self._specs.get(event.speculation_id)
        if spec is not None:
            spec.live_tool_calls = max(spec.live_tool_calls, event.tool_calls)
            spec.live_files = max(spec.live_files, event.files_written)
        self._emit(event)

    def _release_slot(self, spec: Speculation) -> None:
        """Its run is over (done, aborted or gone): the governor's slot is free."""
        if spec.holds_slot and self.governor is not None:
            spec.holds_slot = False
            self.governor.release()

    @handles(SpeculationDone)
    def _on_done(self, message: SpeculationDone) -> None:
        result = message.result
        spec = self._specs.get(result.speculation_id)
        if spec is None:
            return
        self._release_slot(spec)
        spec.result = result
        if spec.phase is SpecPhase.ABORTING:
            return  # reported once its overlay is gone (with the abort's timings)
        if spec.phase not in _UNDER_WAY:
            return
        spec.state = result.state
        if result.state == "failed":
            spec.reason = result.error
            self._alert(AlertLevel.INFO, f"speculation {spec.id} failed: {result.error}")
            if spec.phase is SpecPhase.OFFERED:  # an accepting one is reported by its accept
                spec.move(SpecPhase.ENDED)
                self._report(spec, "failed", reason=result.error)
        elif result.state == "empty":
            # Nothing to accept: not offered as finished; Tab runs the prompt normally.
            if spec.phase is SpecPhase.OFFERED:  # an accepting one is reported by its accept
                spec.move(SpecPhase.ENDED)
                self._report(spec, "empty", result=result)
        elif result.state == "completed":
            self._ask_pipelined(spec)

    @handles(OverlayRemoved)
    def _on_overlay_removed(self, message: OverlayRemoved) -> None:
        spec = self._specs.get(message.speculation_id)
        if spec is None:
            return
        spec.overlay_removed = True
        spec.removal = message
        self._release_slot(spec)
        if spec.phase is SpecPhase.ABORTING:
            self._report_abort(spec)
        self._forget(spec)

    def _report_abort(self, spec: Speculation) -> None:
        """An aborted speculation's telemetry, timed from the user's keystroke.

        ``cancel_latency``: keystroke -> LLM stream closed *and* tool calls
        cancelled (the reaper's confirmations), only for a speculation that was
        still running when the abort reached it; ``cleanup_latency``:
        keystroke -> overlay removed, for every abort.
        """
        spec.move(SpecPhase.ENDED)
        timings = abort_timings(spec)
        self._report(
            spec,
            "stale" if spec.state == "stale" else "aborted",
            reason=spec.abort_reason,
            cancel_latency=timings.cancel_latency,
            cleanup_latency=timings.cleanup_latency,
            steps=timings.steps,
            was_running=timings.was_running,
            tokens=timings.tokens,
            estimated_tokens=timings.estimated_tokens,
        )

    def _forget(self, spec: Speculation) -> None:
        """Drop a speculation that has nothing left to report or deliver.

        Its pipelined suggestion may still be on the way after its speculator
        and overlay are long gone (Tab came first): it is kept until that ends.
        """
        if spec.exited and spec.overlay_removed and spec.pipelined_request is None:
            self._specs.pop(spec.id, None)

    def _start_speculator(self, setup: SpeculationSetup) -> ActorRef[Speculator] | None:
        """Start its speculator and watch its exit; None if it did not start.

        A speculator is never restarted, so it needs no supervisor: this actor
        watches it (the exit comes back as a call in this actor's context) and
        stops it when the session closes; its reaper finishes the cleanup.
        """
        try:
            with self.system.activated():
                ref: ActorRef[Speculator] = Speculator.start(setup)
        except BaseException as exc:
            self.log.error(
                "speculator_start_failed", speculation=setup.speculation_id, error=repr(exc)
            )
            return None
        actor = ref._actor_weakref()
        if not isinstance(actor, PooledActor):
            return None

        def watcher(record: ActorExit) -> None:
            error = record.error
            self.post(
                self._on_speculator_exit,
                setup.speculation_id,
                record.failed,
                None if error is None else f"{type(error).__name__}: {error}",
            )

        if not actor.add_exit_watcher(watcher):
            self.log.error(
                "speculator_start_failed", speculation=setup.speculation_id, error="exited at once"
            )
            return None
        return ref

    def _on_speculator_exit(self, speculation_id: str, failed: bool, error: str | None) -> None:
        """A speculator exited (it is never restarted; its reaper removes the overlay)."""
        spec = self._specs.get(speculation_id)
        if spec is None:
            return
        spec.exited = True
        self._release_slot(spec)
        if failed:
            self.log.warning("speculator_failed", speculation=spec.id, error=error)
            self._alert(AlertLevel.INFO, f"speculation {spec.id} failed: {error}")
            if spec.phase in _UNDER_WAY:
                if spec.phase is SpecPhase.OFFERED:
                    spec.move(SpecPhase.ENDED, state="failed")
                else:  # its accept ends it: the accept's ask fails now (or inserts)
                    spec.state = "failed"
                spec.reason = error
                self._report(spec, "failed", reason=error)
        self._forget(spec)

    @handles(Keystroke)
    def _on_keystroke(self, message: Keystroke) -> None:
        suggestion = self._suggestion
        if message.text and suggestion is not None and suggestion.text.startswith(message.text):
            return  # still typing the suggestion itself
        self._invalidate("user typed", at=message.at)

    @handles(AbortSpeculation)
    def _on_abort(self, message: AbortSpeculation) -> None:
        self._invalidate(message.reason, at=message.at)

    # -- issue 24: calling off a waiting Tab, the approval mode, the model ------------------

    @handles(CancelAccept)
    def _on_cancel_accept(self, message: CancelAccept) -> None:
        """``Session.cancel()``: a Tab still waiting for its speculation is called off
        (it answers ``aborted``, nothing applied); a normal run an accept started is
        cancelled like any run."""
        if self._accepting is not None:
            self._call_off(self._accepting, message.reason)
        for scope in list(self._accept_submits):
            scope.cancel(message.reason)  # the worker hears of it, or finds it on arrival

    @handles(SetApprovalMode)
    def _on_set_approval_mode(self, message: SetApprovalMode) -> None:
        """New speculations run under the new mode; see :class:`SetApprovalMode`."""
        old, new = self.spec_config.approval_mode, message.mode
        if new is old:
            return
        self.spec_config = self.spec_config.model_copy(update={"approval_mode": new})
        if not narrows_speculation(new, old):
            return
        reason = f"the approval mode changed to {new.value}"
        if self._accepting is not None:
            self._call_off(self._accepting, reason)
        if new is ApprovalMode.PLAN:
            self._invalidate(reason)  # no suggestions in plan mode
            return
        current = self._current
        if current is None:
            return
        self._abort(current, reason)
        suggestion = self._suggestion
        if suggestion is current.suggestion and self.spec_config.speculate:
            self._start_speculation(suggestion, current.snapshot)  # again, under the new mode

    @handles(SetModel)
    def _on_set_model(self, message: SetModel) -> None:
        """What was suggested and speculated with the old model goes; the worker switches."""
        reply = self.defer_reply()
        self._invalidate("the session's model changed")
        self._relay_to_worker(message, reply, timeout=30.0)

    def _abort(
        self, spec: Speculation, reason: str, *, stale: bool = False, at: float | None = None
    ) -> None:
        """Abort an offered speculation; telemetry follows once its overlay is gone."""
        if spec.phase is not SpecPhase.OFFERED:
            return  # being accepted (detached), or already ending
        spec.move(SpecPhase.ABORTING, state="stale" if stale else "aborted")
        spec.reason = reason
        spec.abort_reason = reason
        spec.abort_requested = time.monotonic() if at is None else at
        self._cancel_pipelined(spec, reason)
        told = not self._closing and tell_quietly(
            spec.handle, AbortSpeculation(reason=reason, at=spec.abort_requested)
        )
        if not told:
            spec.move(SpecPhase.ENDED)
            self._report(spec, "stale" if stale else "aborted", reason=reason)

    # -- the pipelined suggestion ---------------------------------------------------------------

    def _ask_pipelined(self, spec: Speculation) -> None:
        """After a completed speculation: predict the input after that (Tab-Tab-Tab).

        Asked here, not by the speculator, so that the speculation is complete
        -- and Tab applies it -- without waiting for this reply; it is
        delivered whenever it comes (see :meth:`_on_pipelined`).
        """
        result = spec.result
        if result is None or spec.pipelined_request is not None:
            return
        user = UserMessage(text=spec.suggestion.text)
        snapshot = extend(
            spec.snapshot, [user, *[i for i in result.items if not isinstance(i, UserMessage)]]
        )
        spec.pipelined_request = self._ask_for_suggestion(
            snapshot, f"{spec.id}-pipelined", "pipelined"
        )

    def _pipelined_owner(self, request_id: str) -> Speculation | None:
        for spec in self._specs.values():
            if (
                spec.pipelined_request is not None
                and spec.pipelined_request.request_id == request_id
            ):
                return spec
        return None

    def _cancel_pipelined(self, spec: Speculation, reason: str) -> None:
        if spec.pipelined_request is not None:
            spec.pipelined_request.scope.cancel(reason)
            spec.pipelined_request = None
            self._forget(spec)

    def _on_pipelined(self, spec: Speculation, message: LlmCompleted) -> None:
        spec.pipelined_request = None
        self._forget(spec)
        verdict = suggestion_from_reply(message.message.text)
        if not verdict.accepted:
            self.log.debug("pipelined_rejected", reason=str(verdict.reason), text=verdict.text)
            return
        spec.next_suggestion = verdict.text
        # Tab came first: the pipelined suggestion becomes current now -- unless
        # the user has done anything since (typed, submitted, a turn ended).
        if (
            spec.phase is SpecPhase.ACCEPTED
            and spec.accepted_snapshot is not None
            and spec.accept_epoch == self._epoch
            and self._suggestion is None
        ):
            self._set_suggestion(verdict.text, "pipelined", spec.accepted_snapshot)

    # -- the front door: commands for the worker alone ---------------------------------

    @handles(Resume, PauseRun, GetHistory, GetRunState, CancelRun)
    def _on_worker_command(self, message: Any) -> None:
        """Forwarded with the asker's own reply: the worker answers it directly.

        ``CancelRun`` arrives and leaves on the control lane (it cancels what the
        worker has; a cancel that must reach a submit still on its way goes through
        the submit's scope, ``SubmitPrompt.scope``).
        """
        self._forward(message, self._take_reply())

    def _take_reply(self) -> PooledFuture[Any] | None:
        """The current ask's reply, to hand on: unlike ``defer_reply`` it is not this actor's
        to answer when it exits (held submits are failed by ``on_stop`` explicitly)."""
        envelope = self._fore_current
        if envelope is None or not isinstance(envelope.reply_to, PooledFuture):
            return None
        reply = envelope.reply_to
        envelope.reply_to = None  # answered by the worker, not by this handler
        return reply

    def _forward(self, message: Any, reply: PooledFuture[Any] | None) -> None:
        """Hand ``message`` to the worker with the original asker's reply (no hop back)."""
        try:
            self._worker.forward(message, reply)
        except ActorDeadError:  # a tell to a worker gone for good: nobody waits for it
            self.log.debug("worker_gone", message=type(message).__name__)

    def _relay_to_worker(
        self, message: Any, reply: PooledFuture[Any] | None, *, timeout: float
    ) -> None:
        """Ask the worker; its answer or its failure settles ``reply`` (when someone asked)."""

        def done(answer: Any) -> None:
            if reply is not None:
                reply.try_set(answer)

        def failed(error: BaseException) -> None:
            if reply is not None:
                reply.try_set_exception(error)

        self.ask_then(self._worker, message, then=done, on_error=failed, timeout=timeout)

    # -- status and telemetry ---------------------------------------------------------------

    @handles(GetSpeculation)
    def _on_get(self, _message: GetSpeculation) -> tuple[SpeculationStatus, str | None]:
        return self._status_now()

    def _status_now(self) -> tuple[SpeculationStatus, str | None]:
        """The current speculation's status and the suggestion on offer."""
        spec = self._status_spec
        status = self._status_of(spec) if spec is not None else self._last_status
        shown = self._suggestion if self._shown else None
        return status, (shown.text if shown is not None else None)

    def _handle_receive(self, message: Any) -> Any:
        """Every message, then a status event if it changed the status (issue 24).

        The status is built only when a subscriber reads ``speculation_status``.
        """
        answer = super()._handle_receive(message)
        if not self.has_exited and self._subscribers.wants("speculation_status"):
            self._status_events.publish(*self._status_now())
        return answer

    def _status_of(self, spec: Speculation) -> SpeculationStatus:
        return status_of(spec)

    def _report(
        self,
        spec: Speculation,
        outcome: SpeculationOutcome,
        *,
        result: SpeculationResult | None = None,
        reason: str | None = None,
        cancel_latency: float | None = None,
        cleanup_latency: float | None = None,
        steps: tuple[tuple[str, float], ...] = (),
        was_running: bool | None = None,
        tokens: int | None = None,
        estimated_tokens: int | None = None,
    ) -> None:
        """The speculation's one telemetry event (typed event and structlog).

        ``duration_s`` is the run's own duration (start to its end), never the
        time the user then spent reading before Tab or typing.
        """
        if spec.reported:
            return
        spec.reported = True
        event = finished_event(
            self.session_id or "",
            spec,
            outcome,
            result=result or spec.result,
            reason=reason,
            cancel_latency=cancel_latency,
            cleanup_latency=cleanup_latency,
            steps=steps,
            was_running=was_running,
            tokens=tokens,
            estimated_tokens=estimated_tokens,
        )
        if spec.span is not None:
            spec.span.end(event)
        self.log.info(
            "speculation_finished",
            speculation=spec.id,
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
