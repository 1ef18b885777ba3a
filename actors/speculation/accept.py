"""The accept protocol: Tab (or submitting the suggestion) and what it must never break.

An accept runs, in the controller itself: Tab detaches the offered
speculation (ACCEPTING: typing no longer aborts it); once its run is over,
its overlay is applied on the blocking lane (APPLYING: conflict check,
journal, ``os.replace``; all or nothing), then its items are handed to the
worker (INSERTING, ``InsertItems``), then the pipelined suggestion becomes
current. With the speculation already finished that is six hops: Session →
controller → lane → controller → worker → controller → Session.

The accept's critical section runs from Tab to the moment its items are
handed to the worker: while it lasts, a different submit must not reach the
worker first -- the overlay would be applied and the insert would then find
the worker busy (files changed, no history). So a different submit during it
(a) calls the accept off if the speculation has not been applied yet (the
user moved on: it is aborted, nothing is written, the accept answers
``aborted``), and (b) waits in ``_held`` until the accept has sent its items,
so it always reaches the worker after them. An apply already running is
not stopped: it completes, and its items go in -- even if this actor stops
meanwhile: the ``InsertItems`` is built from the record when the apply
starts, and the apply's completion delivers it itself when the controller
that started it is gone (:mod:`.handover`), followed by the submits a crash
left held (a close fails them).

**The accept's scope.** Whoever starts an accept makes its
:class:`~actors.core.cancel.CancelScope` and sends it with it
(``AcceptSuggestion.scope``; a submit of the suggestion's text brings its
run's scope): ``Session.cancel()`` cancels it, and so does the accept's own
deadline (its caller stopped waiting). The scope is the record of that
cancel, so the order in which the Tab and its cancel reach this actor does
not matter -- the cancel travels on the control lane and may overtake the
Tab: an accept that arrives cancelled answers ``aborted`` and applies
nothing (the suggestion it would have taken is withdrawn and its
speculation aborted, as for a Tab called off while it waits); one waiting
for its speculation's run is called off as by a different submit; one
applying completes and inserts. The run an accept starts -- the
continuation after a boundary (``InsertItems.scope``) or the normal run a
Tab becomes (``Submit.scope``) -- runs under a child of the scope, so the
same cancel ends it too, wherever it is.

:class:`AcceptProtocol` is one part of
:class:`~actors.speculation.controller.SpeculationController` (see
:mod:`.base`): its handlers (``AcceptSuggestion``, ``SubmitPrompt``) and the
steps of an accept.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

from fore.actors.core.cancel import CancelScope
from fore.actors.core.future import PooledFuture
from fore.actors.core.handlers import handles
from fore.actors.overlay.apply import apply_overlay
from fore.actors.speculation.base import ControllerBase
from fore.actors.speculation.fork import extend
from fore.actors.speculation.handover import Handover, OwedTab, insert_message
from fore.actors.speculation.states import AcceptCall, Continuation, SpecPhase, Speculation
from fore.actors.telemetry.context import trace_context_of
from fore.errors import ApplyOutcomeUnknown, OverlayApplyFailed, OverlayClosed
from fore.messages.alerts import AlertLevel
from fore.messages.overlay import ApplyResult, ConflictReport
from fore.messages.session import Submit, TurnResult
from fore.messages.speculation import (
    AcceptResult,
    AcceptSuggestion,
    SpeculationResult,
    SubmitPrompt,
    Suggestion,
)

__all__ = ["APPLY_CLOSE_TIMEOUT", "GAVE_UP", "AcceptProtocol"]

APPLY_CLOSE_TIMEOUT = 10.0
"""Seconds an apply waits for writes still in flight into the overlay before it closes it."""

GAVE_UP = "the accept's caller stopped waiting"
"""Why an accept is called off at its deadline (by its caller's scope or by this actor,
whichever gives up first: the reason is the same)."""

_seq = itertools.count(1)

Answer = Callable[[AcceptResult], None]


class AcceptProtocol(ControllerBase):
    """The accept protocol of the speculation controller (see the module docs)."""

    @handles(AcceptSuggestion)
    def _on_accept(self, message: AcceptSuggestion) -> None:
        if message.arrived is not None:
            message.arrived()  # the keys typed after it come next (supervision.input_order)
        reply = self.defer_reply()
        scope = message.scope if message.scope is not None else CancelScope()
        if scope.cancel_called:  # the cancel overtook it: nothing is applied
            _answer(reply, self._called_off_on_arrival(scope))
            return
        now = time.monotonic()
        if now - self._last_accept < self.spec_config.accept_debounce_ms / 1000.0:
            _answer(reply, AcceptResult(outcome="debounced"))
            return
        suggestion = self._suggestion if self._shown else None
        if suggestion is None:  # nothing is shown: there is nothing to Tab into
            _answer(reply, AcceptResult(outcome="no_suggestion"))
            return
        self._last_accept = now
        self._accept(
            suggestion,
            lambda result: _answer(reply, result),
            message.wait_continuation,
            scope,
            reply=reply,
        )

    @handles(SubmitPrompt)
    def _on_submit_prompt(self, message: SubmitPrompt) -> None:
        if message.arrived is not None:
            message.arrived()  # the keys typed after it come next (supervision.input_order)
        suggestion = self._suggestion
        plain = message.segments is None and message.output is None  # structured: a new run
        if suggestion is not None and plain and message.text == suggestion.text:
            reply = self.defer_reply()  # this actor answers it (a crash answers it too)
            session_id = self.session_id or ""

            def as_turn(result: AcceptResult) -> None:
                if reply is not None:
                    reply.try_set(result.turn or _as_turn(session_id, result))

            # The submit's scope is the accept's: Session.cancel() reaches it.
            scope = message.scope if message.scope is not None else CancelScope()
            if scope.cancel_called:
                as_turn(self._called_off_on_arrival(scope))
                return
            # Typing the suggestion and pressing Enter is an explicit request, not a
            # double press: it is never debounced, and its answer is a turn.
            self._last_accept = time.monotonic()
            self._accept(suggestion, as_turn, True, scope, reply=reply)
            return
        # Forwarded (now or after an accept): the worker answers it, so it is not
        # this actor's to answer -- closing the session stops this actor first,
        # and the worker's "cancelled" must still reach the asker.
        reply = self._take_reply()
        self._invalidate("the user submitted something else", at=message.at)
        submit = Submit(
            text=message.text,
            segments=message.segments,
            max_turns=message.max_turns,
            usage_limits=message.usage_limits,
            trace=message.trace,
            submit_id=message.submit_id,
            scope=message.scope,  # Session.cancel() cancels it, even while held
            output=message.output,
        )
        accepting = self._accepting
        if accepting is not None:
            self._call_off(accepting, "the user submitted something else", message.at)
            self._held.append((submit, reply))
            return
        self._forward_submit(submit, reply)

    def _forward_submit(self, submit: Submit, reply: PooledFuture[Any] | None) -> None:
        self._forward(submit, reply)

    def _call_off(self, spec: Speculation, reason: str, at: float | None = None) -> None:
        """Call off an accept still waiting for its speculation (see the module docs).

        While its run goes on (ACCEPTING) the speculation is aborted: its
        worker stopped, nothing applied, and the accept answers ``aborted``.
        Once its apply runs (APPLYING) it is too late to stop it: the accept
        completes as usual, except that a conflict or a failed apply no longer
        runs the suggestion normally (the user moved on).
        """
        if spec.phase not in (SpecPhase.ACCEPTING, SpecPhase.APPLYING):
            return
        if spec.accept_cancelled is not None or spec.reported:
            return  # already called off, or failed and ending anyway
        spec.accept_cancelled = reason
        self.log.info("speculation_accept_called_off", speculation=spec.id, reason=reason)
        if spec.phase is SpecPhase.APPLYING:
            return
        spec.abort_reason = reason
        spec.abort_requested = time.monotonic() if at is None else at
        spec.steps = [("abort_requested", time.monotonic())]
        self._stop_worker(spec)  # its run ends "aborted": then the accept answers

    def _called_off_on_arrival(self, scope: CancelScope) -> AcceptResult:
        """An accept whose scope was cancelled before it arrived: nothing is applied.

        The user pressed Tab and then called it off, so what the Tab would
        have taken goes as it goes for a Tab called off while it waits: the
        suggestion shown is withdrawn and its speculation aborted.
        """
        suggestion = self._suggestion if self._shown else None
        if suggestion is not None:  # timed from the cancel (Ctrl-C)
            self._invalidate(scope.reason or "the accept was called off", at=scope.cancelled_at)
        return AcceptResult(
            outcome="aborted", suggestion=None if suggestion is None else suggestion.text
        )

    def _accept_scope_cancelled(self, scope: CancelScope, reason: str) -> None:
        """An accept's scope was cancelled (posted on the control lane by its callback)."""
        for spec in self._specs.values():
            call = spec.accept
            if call is not None and call.scope is scope:
                # Timed from the cancel (Ctrl-C); too late once its items were handed over.
                self._call_off(spec, reason, scope.cancelled_at)
                return

    def _accept_given_up(self, spec: Speculation) -> None:
        """The accept's deadline passed: its caller stopped waiting, so it is called off
        (through its scope: the run it may have started goes too)."""
        spec.give_up_timer = None
        if spec.accept is not None and spec.phase in (SpecPhase.ACCEPTING, SpecPhase.APPLYING):
            spec.accept.scope.cancel(GAVE_UP)

    def _accept_done(self, spec: Speculation | None) -> None:
        """The accept's critical section is over: held submits may go to the worker now."""
        if spec is not None and spec.give_up_timer is not None:
            spec.give_up_timer.cancel()
            spec.give_up_timer = None
        held, self._held = self._held, []
        for submit, reply in held:
            self._forward_submit(submit, reply)

    def _accept(
        self,
        suggestion: Suggestion,
        answer: Answer,
        wait: bool,
        scope: CancelScope,
        *,
        reply: PooledFuture[Any] | None = None,
    ) -> None:
        """Accept ``suggestion``; ``answer`` sets ``reply`` (deferred here: the deadline)."""
        tab_at = time.time()
        started = time.monotonic()
        telemetry = self.worker_config.telemetry
        if telemetry is not None:  # the accept's span ends with its answer
            answer = telemetry.accept(
                session_id=self.session_id or "", suggestion=suggestion.text
            ).wrap(answer)
        current = self._current
        spec = current if current is not None and current.suggestion is suggestion else None
        stale = None if spec is None else self._stale_reason(spec.snapshot, spec.config_gen)
        if spec is not None and stale is not None:
            self._abort(spec, stale, stale=True)
        elif spec is not None:
            # Detach first: from now on a keystroke cannot abort what is being accepted.
            spec.move(SpecPhase.ACCEPTING)
        self._invalidate("the suggestion was accepted")
        if spec is None:  # nothing was speculated for it: Tab is a normal turn
            self._submit_normally(suggestion, answer, "submitted", scope)
            return
        if stale is not None:
            self._submit_normally(suggestion, answer, "stale", scope)
            return
        spec.accept_epoch = self._epoch
        self._status_spec = spec
        # Its cancel reaches this actor on the control lane; the callback is
        # taken back once the accept has answered.
        called_off = partial(self.post_urgent, self._accept_scope_cancelled, scope)
        registration = scope.on_cancel(called_off)
        spec.accept = AcceptCall(
            answer=_then(registration.remove, answer),
            wait=wait,
            scope=scope,
            registration=registration,
            tab_at=tab_at,
            started=started,
            reply=reply,
        )
        deadline = None if reply is None else reply.deadline
        if deadline is not None:
            spec.give_up_timer = self.call_after(
                max(0.0, deadline - time.monotonic()), self._accept_given_up, spec
            )
        if spec.finished:
            self._continue_accept(spec)
        # Otherwise its run's end continues the accept (Lifecycle._finish).

    def _continue_accept(self, spec: Speculation) -> None:
        """The run of a speculation Tab waits for is over: apply it, or say why not."""
        call, result = spec.accept, spec.result
        assert call is not None and result is not None
        suggestion = spec.suggestion
        scope = call.scope
        if scope.cancel_called:  # before its callback got here: called off all the same
            self._call_off(spec, scope.reason or "the accept was called off", scope.cancelled_at)
        if spec.accept_cancelled is not None:  # its run was stopped: nothing is applied
            self._called_off(spec)
            return
        if result.state == "empty":  # nothing to accept: the prompt runs normally
            spec.move(SpecPhase.ENDED)
            self._report(spec, "empty", result=result)
            self._submit_normally(suggestion, call.answer, "submitted", call.scope)
            self._accept_done(spec)
            return
        if result.state not in ("completed", "boundary"):
            self._accept_failed(spec, call, result.error or result.state, ())
            self._accept_done(spec)
            return
        overlay = spec.overlay
        assert overlay is not None
        # Built now, from the record alone: if this actor is gone when the apply is
        # done, the apply's completion delivers it (never files without history).
        spec.handover = Handover(insert_message(suggestion.text, result, scope))
        spec.move(SpecPhase.APPLYING)  # held submits stay held; the overlay stays
        spec.apply_started = time.monotonic()
        spec.apply_job = self.run_blocking(
            partial(
                apply_overlay,
                overlay,
                self.overlays.journal_dir,
                durable=False,
                close_timeout=APPLY_CLOSE_TIMEOUT,
            ),
            then=partial(self._applied, spec),
            on_error=partial(self._apply_failed, spec),
        )

    def _called_off(self, spec: Speculation) -> None:
        """Nothing was applied and the user moved on: answer, and let the abort report."""
        call = spec.accept
        assert call is not None
        spec.move(SpecPhase.ABORTING, state="aborted")
        spec.reason = spec.accept_cancelled
        call.answer(
            AcceptResult(
                outcome="aborted",
                suggestion=spec.suggestion.text,
                waited_s=time.monotonic() - call.started,
            )
        )
        self._accept_done(spec)

    def _applied(self, spec: Speculation, answer: ApplyResult | ConflictReport) -> None:
        spec.apply_job = None  # its callbacks refer back to this actor: let go of it
        if not _take(spec):
            return  # delivered by the apply's completion (not this incarnation's to answer)
        call = spec.accept
        assert call is not None and spec.result is not None
        if isinstance(answer, ConflictReport):
            spec.move(SpecPhase.ENDED)
            self._alert(AlertLevel.WARN, answer.summary() or "the speculation conflicts")
            self._report(spec, "conflict", reason=", ".join(answer.paths))
            if spec.accept_cancelled is not None:  # the user moved on: no normal run of it
                call.answer(
                    AcceptResult(
                        outcome="conflict",
                        suggestion=spec.suggestion.text,
                        conflicts=answer.paths,
                    )
                )
            else:
                self._submit_normally(
                    spec.suggestion, call.answer, "conflict", call.scope, conflicts=answer.paths
                )
            self._accept_done(spec)
            return
        # Applied (too late to call off, if that was tried): the items go in now,
        # and a turn they continue goes on only if the accept's scope was not cancelled.
        spec.accept_cancelled = None
        self._insert(spec, call, spec.result, answer.paths)
        self._accept_done(spec)

    def _apply_failed(self, spec: Speculation, error: BaseException) -> None:
        spec.apply_job = None
        if not _take(spec):
            return
        call = spec.accept
        assert call is not None
        if not isinstance(error, OverlayApplyFailed | OverlayClosed):
            # A crash of the apply itself: nobody knows what reached the disk. Say
            # so, and do not run the suggestion on files that may have changed.
            unknown = ApplyOutcomeUnknown(f"applying the overlay: {error!r}")
            self._alert(
                AlertLevel.ERROR,
                f"accepting the speculation failed and may have changed files ({unknown})",
            )
            self._accept_failed(spec, call, repr(unknown), (), run_normally=False)
            self._accept_done(spec)
            return
        # Rolled back in process (or never begun): ``applied`` names exactly
        # the paths that stayed changed, normally none.
        applied = tuple(getattr(error, "applied", ()))
        if spec.accept_cancelled is not None and not applied:
            self._called_off(spec)  # the user moved on, and nothing changed: as if never
            return
        self._accept_failed(
            spec,
            call,
            f"applying the overlay failed: {error}",
            applied,
            # Not when the user moved on, and never on a half-applied tree.
            run_normally=spec.accept_cancelled is None and not applied,
        )
        self._accept_done(spec)

    def _accept_failed(
        self,
        spec: Speculation,
        call: AcceptCall,
        reason: str,
        applied: Sequence[str],
        *,
        run_normally: bool = True,
    ) -> None:
        spec.move(SpecPhase.ENDED, state="failed")
        spec.reason = reason
        if applied:
            self._alert(
                AlertLevel.ERROR,
                f"accepting the speculation failed after it changed {', '.join(applied)} "
                f"({reason})",
            )
        self._report(spec, "failed", reason=reason)
        if not run_normally:
            call.answer(
                AcceptResult(
                    outcome="failed",
                    suggestion=spec.suggestion.text,
                    files_applied=tuple(applied),
                )
            )
            return
        self._submit_normally(
            spec.suggestion, call.answer, "failed", call.scope, files_applied=applied
        )

    def _insert(
        self,
        spec: Speculation,
        call: AcceptCall,
        result: SpeculationResult,
        applied: tuple[str, ...],
    ) -> None:
        """Insert the accepted transcript (the overlay is already applied)."""
        spec.move(SpecPhase.INSERTING)  # held submits may follow the items now
        assert spec.handover is not None
        handover = spec.handover
        handover.applied = applied
        items, boundary = handover.insert.items, handover.insert.boundary
        if spec.span is not None:
            spec.span.saved(spec.time_saved)
        outcome: Literal["accepted", "boundary"] = "boundary" if boundary else "accepted"
        begin = spec.accept_began

        def inserted(run_id: str | None) -> None:
            latency = time.monotonic() - begin  # files applied and history inserted
            spec.move(SpecPhase.ACCEPTED, state="accepted")
            self._report(spec, outcome, result=result)
            if not boundary:
                accepted = extend(spec.snapshot, items)
                spec.accepted_snapshot = accepted
                if self._fork is not None and self._fork.version == accepted.version:
                    self._fork = accepted  # the worker's history now ends like this
                nxt = spec.next_suggestion
                if nxt and spec.accept_epoch == self._epoch and self._suggestion is None:
                    self._set_suggestion(nxt, "pipelined", accepted, show_now=True)

            def report(turn: TurnResult | None) -> None:
                nxt = spec.next_suggestion
                call.answer(spec.accepted(applied, latency=latency, next_suggestion=nxt, turn=turn))

            if run_id is not None and call.wait:
                self._continuations[run_id] = Continuation(report=report, reply=call.reply)
            else:
                report(None)

        def failed(error: BaseException) -> None:
            self._alert(
                AlertLevel.ERROR,
                f"inserting the accepted speculation failed ({', '.join(applied) or 'no files'} "
                f"already applied): {error}",
            )
            spec.move(SpecPhase.ENDED)
            self._report(spec, "failed", reason=f"insert failed: {error!r}")
            call.answer(
                AcceptResult(
                    outcome="failed", suggestion=spec.suggestion.text, files_applied=applied
                )
            )

        handover.inserting = self.ask_then(
            self._worker,
            handover.insert.message,  # a turn it continues runs under a child of the accept's scope
            then=inserted,
            on_error=failed,
            timeout=60.0,
        )

    def _hand_over_tab(self, spec: Speculation) -> None:
        """This actor is stopping: a Tab past the point of no return gets the truth.

        Once its apply has begun the accept lands without this actor (:mod:`.handover`),
        so its answer is that outcome, not this actor's end: its reply is released from
        this actor's exit to the accept's :class:`Handover`, worded as :meth:`_insert`
        words it (no pipelined suggestion: none becomes current).
        """
        call, handover = spec.accept, spec.handover
        if call is None or handover is None:
            return
        if spec.phase not in (SpecPhase.APPLYING, SpecPhase.INSERTING):
            return
        if call.reply is not None and not self.release_reply(call.reply):
            return  # answered already
        begin = spec.accept_began
        handover.tab = OwedTab(
            answer=call.answer,
            accepted=lambda applied: spec.accepted(applied, latency=time.monotonic() - begin),
            suggestion=spec.suggestion.text,
        )

    def _submit_normally(
        self,
        suggestion: Suggestion,
        answer: Answer,
        outcome: Literal["submitted", "conflict", "stale", "failed"],
        scope: CancelScope,
        *,
        conflicts: Sequence[str] = (),
        files_applied: Sequence[str] = (),
    ) -> None:
        """Run the suggestion as an ordinary prompt on the current files, under a child of
        the accept's ``scope`` (its cancel reaches the run wherever the run is)."""

        submit_id = f"{self.session_id}-accept-{next(_seq)}"

        def done(turn: TurnResult) -> None:
            answer(
                AcceptResult(
                    outcome=outcome,
                    suggestion=suggestion.text,
                    conflicts=tuple(conflicts),
                    files_applied=tuple(files_applied),
                    items=turn.items,
                    items_inserted=len(turn.items),
                    turn=turn,
                )
            )

        def failed(error: BaseException) -> None:
            answer(
                AcceptResult(
                    outcome="failed",
                    suggestion=suggestion.text,
                    files_applied=tuple(files_applied),
                )
            )

        self.ask_then(
            self._worker,
            Submit(
                text=suggestion.text,
                submit_id=submit_id,
                scope=scope.child(),
                trace=trace_context_of(answer),
            ),
            then=done,
            on_error=failed,
            timeout=3600.0,
        )


def _answer(reply: PooledFuture[Any] | None, result: AcceptResult) -> None:
    if reply is not None:
        reply.try_set(result)


def _then(first: Callable[[], object], answer: Answer) -> Answer:
    """``answer``, after ``first()`` (an accept's answer takes its cancel callback back)."""

    def answered(result: AcceptResult) -> None:
        first()
        answer(result)

    return answered


def _take(spec: Speculation) -> bool:
    """Claim the delivery of an apply's outcome (see :mod:`.handover`)."""
    return spec.handover is None or spec.handover.take()


def _as_turn(session_id: str, result: AcceptResult) -> TurnResult:
    """An accept that ran no turn, as the turn a submit of the suggestion's text answers."""
    done = result.outcome in ("accepted", "boundary")
    return TurnResult(
        run_id=f"accept-{next(_seq)}",
        session_id=session_id,
        status="completed" if done else "cancelled" if result.outcome == "aborted" else "error",
        items=result.items,
        error=None if done else result.outcome,
    )
