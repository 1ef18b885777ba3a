"""The speculation controller: a session's suggestions, speculations and accepts.

It is the session's front door (``Session`` sends every prompt, keystroke,
Tab, tool change and status query here) and a permanent child of the
session's :class:`~supervision.session_supervisor.SessionSupervisor`, beside
the worker. The supervisor only supervises; everything about speculation
lives here, all of it per session -- nothing is process-global. Each
speculation is one record (:class:`~actors.speculation.states.Speculation`,
the only one of it) and one worker the controller starts and watches itself
(a speculation is never restarted, so it needs no supervisor); what must
outlive a restart of this actor -- the speculation config as last set, the
hook gate the speculations share, the session's subscribers and the last
status sent -- is kept in a :class:`~actors.speculation.base.SpeculationBook`
the supervisor owns. The parts, one module each:

* the front door (:mod:`.front_door`): subscriptions, the worker's own
  commands forwarded with the asker's reply, the status query; with
  speculation off the controller is that and nothing more (Tab answers
  ``no_suggestion``, keystrokes change nothing);
* suggestions (:mod:`.suggestions`): after each completed main turn the
  worker's :class:`~messages.speculation.SnapshotTaken` becomes the fork
  snapshot, one model call predicts the next input, it is shown after the
  display delay, and a speculation starts at once;
* a speculation's run (:mod:`.lifecycle`): admission, its worker and
  overlay, budgets, progress, its end; a crash of its worker fails only that
  speculation (info alert);
* its teardown (:mod:`.teardown`): worker stopped, its LLM stream and tool
  calls confirmed gone, only then the overlay removed -- the same path for
  every end; an abort is timed from the user's keystroke (or submit) to the
  confirmed cancellations and the overlay's removal, and says whether the
  speculation was still running;
* the accept protocol (:mod:`.accept`): overlay applied first, then the
  items inserted into the worker's history, then the pipelined suggestion
  becomes current. Files are never applied without their history;
* here: what changes the input context (a keystroke that is not a prefix of
  the suggestion, a different submit, a new snapshot, a tool or model or
  approval-mode change, the session closing) and aborts the offered
  speculation and cancels a suggestion request still in flight; and after
  every message, the status event (for subscribers that read it) and the
  teardowns it made due.

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
* each speculation detaches from the offer the moment its accept begins
  (its phase leaves OFFERED), so typing while Tab waits can no longer abort
  what is being accepted, and each speculation reports exactly one
  :class:`SpeculationFinished`.
"""

from __future__ import annotations

from typing import Any

from fore.actors.core.errors import ActorStopped
from fore.actors.core.handlers import handles
from fore.actors.speculation.accept import AcceptProtocol
from fore.actors.speculation.base import SpeculationBook
from fore.actors.speculation.fork import assistant_answers
from fore.actors.speculation.front_door import FrontDoor
from fore.actors.speculation.lifecycle import Lifecycle
from fore.actors.speculation.suggestions import Suggestions
from fore.actors.speculation.teardown import TeardownSteps
from fore.actors.worker.approval import narrows_speculation
from fore.messages.gate import ApprovalMode
from fore.messages.session import AddTool, EventBase, SetModel, Subscribe, TurnFinished
from fore.messages.speculation import (
    AbortSpeculation,
    Keystroke,
    SetApprovalMode,
    SnapshotTaken,
)

__all__ = ["SpeculationBook", "SpeculationController"]

_WORKER_EVENTS = frozenset({"snapshot_taken", "turn_finished"})
"""The worker's events this controller reads (a fork snapshot; a continuation's end)."""


class SpeculationController(FrontDoor, Suggestions, AcceptProtocol, Lifecycle, TeardownSteps):
    """A session's front door and speculation controller (see module docs)."""

    def on_start(self) -> None:
        # Only snapshots and turn ends matter here, and only with speculation on:
        # a session without it does not pay a mailbox hop per worker event.
        if self.spec_config.enabled:
            self._worker.tell(Subscribe(address=self.actor_ref, kinds=_WORKER_EVENTS))

    def on_failure(self, *_exc_info: Any) -> None:
        self._let_go_all(crashed=True)  # a crash takes its speculations down, as a stop does

    def on_stop(self) -> None:
        self._let_go_all(crashed=False)

    def _let_go_all(self, *, crashed: bool) -> None:
        """This actor is stopping: nothing may wait on it any more.

        An abort that reaches a speculation now has nobody to wait for and
        reports at once; then every speculation's work is let go (its worker
        stopped, its overlay removed once nothing can write through it). An
        apply still running delivers its items itself, and an accept whose
        apply has begun answers its Tab itself once its items are in
        (:mod:`.handover`); a Tab whose accept has landed and that waits for its
        boundary's continuation is answered now, without the continuation's end.
        Submits held behind an accept are failed when the session closes; after
        a crash (the session lives on, a new incarnation takes over) they go to
        the worker -- after the items of an apply still running, never before.
        """
        self._closing = True
        held, self._held = self._held, []
        if crashed:
            applying = self._accepting
            handover = None if applying is None else applying.handover
            if applying is not None and applying.apply_job is not None and handover is not None:
                handover.held.extend(held)  # before _let_go: the apply may end any moment
            else:
                for submit, reply in held:
                    self._forward_submit(submit, reply)
            held = []
        self._invalidate("session closed")
        self._answer_without_continuations()
        for spec in list(self._specs.values()):
            if spec.accept is not None:  # its scope no longer needs to reach this actor
                spec.accept.registration.remove()
            self._cancel_pipelined(spec, "session closed")
            self._hand_over_tab(spec)  # before _let_go: the apply may end any moment
            self._let_go(spec, "session closed")
        for _submit, reply in held:
            if reply is not None:
                reply.try_set_exception(ActorStopped("the session closed"))
        for spec in self._specs.values():  # no SpeculationFinished will come: end their spans
            if spec.span is not None and not spec.reported:
                spec.span.closed("session closed")

    def _answer_without_continuations(self) -> None:
        """This actor is stopping while Tabs wait for their boundaries' continuations.

        Each accept has landed -- files applied, transcript in the worker's history
        -- and its continuation runs on in the worker, whose ``TurnFinished`` no
        incarnation of this actor will read for that Tab. So each Tab is answered
        now with that truth, ``turn`` None (as the handed-over path answers it),
        not with this actor's crash or close.
        """
        waiting, self._continuations = self._continuations, {}
        for continuation in waiting.values():
            reply = continuation.reply
            if reply is not None and not self.release_reply(reply):
                continue  # answered already
            continuation.report(None)

    def _handle_receive(self, message: Any) -> Any:
        """Every message; then the teardowns it made due, and a status event if it
        changed the status (issue 24) -- built only when a subscriber reads
        ``speculation_status``."""
        answer = super()._handle_receive(message)
        if not self.has_exited and not self._closing:
            self._advance_teardowns()
            if self._subscribers.wants("speculation_status"):
                events = self.book.status_events
                assert events is not None  # set by the book's __post_init__
                events.publish(*self._status_now())
        return answer

    # -- what the input context is -------------------------------------------------------------

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
            waiting.report(event.result)

    @handles(AddTool)
    def _on_add_tool(self, message: AddTool) -> None:
        """A tool change makes every older snapshot stale; the worker gets the tool after."""
        reply = self.defer_reply()
        self._tools = self._tools.with_tool(message.tool)  # a duplicate name fails the ask here
        self._config_gen += 1
        if self._current is not None:
            self._abort(self._current, "the session's tools changed", stale=True)
        self._relay_to_worker(message, reply, timeout=30.0)

    @handles(Keystroke)
    def _on_keystroke(self, message: Keystroke) -> None:
        suggestion = self._suggestion
        if message.text and suggestion is not None and suggestion.text.startswith(message.text):
            return  # still typing the suggestion itself
        self._invalidate("user typed", at=message.at)

    @handles(AbortSpeculation)
    def _on_abort(self, message: AbortSpeculation) -> None:
        self._invalidate(message.reason, at=message.at)

    # -- issue 24: the approval mode, the model ---------------------------------------------

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
