"""The accept protocol: Tab (or submitting the suggestion) and what it must never break.

An accept's critical section runs from Tab to the moment its items are
handed to the worker (InsertItems sent; the record moves from ACCEPTING to
INSERTING): while it lasts, a different submit must not reach the worker
first -- the speculator would apply the overlay and the insert would then
find the worker busy (files changed, no history). So a different submit
during it (a) calls the accept off if the speculation has not been applied
yet (the user moved on: it is aborted, nothing is written, the accept
answers ``aborted``), and (b) waits in ``_held`` until the accept has sent
its items, so it always reaches the worker after them. The same call-off
happens when the accept's own caller stops waiting (its ask's deadline),
instead of the files being written later with nobody looking.

:class:`AcceptProtocol` is a part of
:class:`~actors.speculation.controller.SpeculationController` (its base
class), kept in its own module because it is one concept: its handlers
(``AcceptSuggestion``, ``SubmitPrompt``) and the steps of an accept. The
state and helpers it shares with the rest of the controller are declared
below and defined there.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from fore.actors.core.cancel import CancelScope
from fore.actors.core.future import PooledFuture
from fore.actors.core.pooled import ForeActor, handles, tell_quietly
from fore.actors.speculation.fork import extend
from fore.actors.speculation.states import SpecPhase, Speculation
from fore.actors.telemetry.context import trace_context_of
from fore.actors.worker.worker import WorkerConfig
from fore.errors import ApplyOutcomeUnknown
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import AssistantMessage, Item, UserMessage
from fore.messages.session import Submit, TurnResult
from fore.messages.speculation import (
    AbortSpeculation,
    AcceptResult,
    AcceptSpeculation,
    AcceptSuggestion,
    ForkSnapshot,
    InsertItems,
    SpeculationConfig,
    SpeculationOutcome,
    SpeculationResult,
    SubmitPrompt,
    Suggestion,
    SuggestionSource,
)

_seq = itertools.count(1)

Answer = Callable[[AcceptResult], None]


class AcceptProtocol(ForeActor):
    """The accept protocol of the speculation controller (see the module docs)."""

    # -- shared with the controller (defined there) -----------------------------------
    session_id: str | None
    spec_config: SpeculationConfig
    worker_config: WorkerConfig
    _worker: Any
    _suggestion: Suggestion | None
    _shown: bool
    _epoch: int
    _fork: ForkSnapshot | None
    _status_spec: Speculation | None
    _continuations: dict[str, Callable[[TurnResult], None]]
    _last_accept: float
    _held: list[tuple[Submit, PooledFuture[Any] | None]]
    """Submits held for an accept in its critical section (they reach the worker after it)."""
    _accept_submits: set[CancelScope]
    """The scopes of the normal runs accepts started (``CancelAccept`` cancels them)."""

    @property
    def _current(self) -> Speculation | None:
        raise NotImplementedError

    @property
    def _accepting(self) -> Speculation | None:
        raise NotImplementedError

    def _invalidate(self, reason: str, at: float | None = None) -> None:
        raise NotImplementedError

    def _stale_reason(self, snapshot: ForkSnapshot, config_gen: int) -> str | None:
        raise NotImplementedError

    def _abort(
        self, spec: Speculation, reason: str, *, stale: bool = False, at: float | None = None
    ) -> None:
        raise NotImplementedError

    def _set_suggestion(
        self,
        text: str,
        source: SuggestionSource,
        snapshot: ForkSnapshot,
        *,
        show_now: bool = False,
    ) -> None:
        raise NotImplementedError

    def _alert(self, level: AlertLevel, text: str) -> None:
        raise NotImplementedError

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
        raise NotImplementedError

    def _report_abort(self, spec: Speculation) -> None:
        raise NotImplementedError

    def _take_reply(self) -> PooledFuture[Any] | None:
        raise NotImplementedError

    def _forward(self, message: Any, reply: PooledFuture[Any] | None) -> None:
        raise NotImplementedError

    # -- the protocol ---------------------------------------------------------------------

    @handles(AcceptSuggestion)
    def _on_accept(self, message: AcceptSuggestion) -> None:
        reply = self.defer_reply()
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
            deadline=None if reply is None else reply.deadline,
        )

    @handles(SubmitPrompt)
    def _on_submit_prompt(self, message: SubmitPrompt) -> None:
        suggestion = self._suggestion
        plain = message.segments is None and message.output is None  # structured: a new run
        if suggestion is not None and plain and message.text == suggestion.text:
            reply = self.defer_reply()  # this actor answers it (a crash answers it too)
            # Typing the suggestion and pressing Enter is an explicit request, not a
            # double press: it is never debounced, and its answer is a turn.
            self._last_accept = time.monotonic()
            session_id = self.session_id or ""

            def as_turn(result: AcceptResult) -> None:
                if reply is not None:
                    reply.try_set(result.turn or _as_turn(session_id, result))

            self._accept(
                suggestion,
                as_turn,
                True,
                deadline=None if reply is None else reply.deadline,
            )
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
        """Call off an accept still waiting for its speculation (see the section's notes).

        The speculator decides: a speculation not yet being applied is aborted
        (the accept then answers ``aborted``); one already being applied is
        too late to stop, and its accept completes as usual.
        """
        if spec.phase is not SpecPhase.ACCEPTING or spec.accept_cancelled is not None:
            return
        if spec.reported:
            return  # its speculator crashed: the accept is ending anyway
        if spec.result is not None and (spec.result.applied or spec.result.conflicts):
            return  # the apply already happened: nothing left to call off
        spec.accept_cancelled = reason
        spec.abort_reason = reason
        spec.abort_requested = time.monotonic() if at is None else at
        self.log.info("speculation_accept_called_off", speculation=spec.id, reason=reason)
        tell_quietly(spec.handle, AbortSpeculation(reason=reason, at=spec.abort_requested))

    def _accept_given_up(self, spec: Speculation) -> None:
        spec.give_up_timer = None
        if spec.phase is SpecPhase.ACCEPTING:
            self._call_off(spec, "the accept's caller stopped waiting")

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
        *,
        deadline: float | None = None,
    ) -> None:
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
            self._submit_normally(suggestion, answer, "submitted")
            return
        if stale is not None:
            self._submit_normally(suggestion, answer, "stale")
            return
        spec.accept_epoch = self._epoch
        self._status_spec = spec
        if deadline is not None:
            spec.give_up_timer = self.call_after(
                max(0.0, deadline - time.monotonic()), self._accept_given_up, spec
            )

        def called_off() -> None:
            """Nothing was applied and the user moved on: answer, and let the abort report."""
            spec.move(SpecPhase.ABORTING, state="aborted")
            spec.reason = spec.accept_cancelled
            answer(
                AcceptResult(
                    outcome="aborted",
                    suggestion=suggestion.text,
                    waited_s=time.monotonic() - started,
                )
            )
            if spec.overlay_removed:
                self._report_abort(spec)
            self._accept_done(spec)

        def speculated(result: SpeculationResult) -> None:
            spec.result = result
            cancelled = spec.accept_cancelled is not None
            if result.conflicts:
                spec.move(SpecPhase.ENDED)
                self._alert(AlertLevel.WARN, result.conflict_summary or "the speculation conflicts")
                self._report(spec, "conflict", reason=", ".join(result.conflicts))
                if cancelled:  # the user has moved on: no normal run of the suggestion
                    answer(
                        AcceptResult(
                            outcome="conflict",
                            suggestion=suggestion.text,
                            conflicts=result.conflicts,
                        )
                    )
                    self._accept_done(spec)
                    return
                self._submit_normally(suggestion, answer, "conflict", conflicts=result.conflicts)
                self._accept_done(spec)
                return
            if result.state == "empty":  # nothing to accept: the prompt runs normally
                if cancelled:
                    called_off()
                    return
                spec.move(SpecPhase.ENDED)
                self._report(spec, "empty", result=result)
                self._submit_normally(suggestion, answer, "submitted")
                self._accept_done(spec)
                return
            if result.state not in ("completed", "boundary") or not (
                result.applied or result.apply_started is not None
            ):
                if cancelled and not result.applied:
                    called_off()
                    return
                self._accept_failed(
                    spec,
                    suggestion,
                    answer,
                    result.error or result.state,
                    result.applied,
                    # Not when the user moved on, and never on a half-applied tree
                    # (a failed apply rolls back; ``applied`` names what it could not).
                    run_normally=not cancelled and not result.applied,
                )
                self._accept_done(spec)
                return
            # Applied (too late to call off, if that was tried): the items go in now.
            spec.accept_cancelled = None
            self._insert(
                spec,
                suggestion=suggestion,
                result=result,
                tab_at=tab_at,
                started=started,
                wait=wait,
                answer=answer,
            )
            self._accept_done(spec)

        def failed(error: BaseException) -> None:
            if isinstance(error, ApplyOutcomeUnknown):
                # Files may have changed: say so, and do not run the suggestion on them.
                self._alert(
                    AlertLevel.ERROR,
                    f"accepting the speculation failed and may have changed files ({error})",
                )
                self._accept_failed(spec, suggestion, answer, repr(error), (), run_normally=False)
                self._accept_done(spec)
                return
            if spec.accept_cancelled is not None:
                called_off()  # the abort overtook the accept and stopped the speculator
                return
            self._accept_failed(spec, suggestion, answer, repr(error), ())
            self._accept_done(spec)

        budget = self.spec_config.time_budget_s or 600.0
        self.ask_then(
            spec.handle,
            AcceptSpeculation(),
            then=speculated,
            on_error=failed,
            timeout=budget + 120.0,
        )

    def _accept_failed(
        self,
        spec: Speculation,
        suggestion: Suggestion,
        answer: Answer,
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
            answer(
                AcceptResult(
                    outcome="failed", suggestion=suggestion.text, files_applied=tuple(applied)
                )
            )
            return
        self._submit_normally(suggestion, answer, "failed", files_applied=applied)

    def _insert(
        self,
        spec: Speculation,
        *,
        suggestion: Suggestion,
        result: SpeculationResult,
        tab_at: float,
        started: float,
        wait: bool,
        answer: Answer,
    ) -> None:
        """Insert the accepted transcript (the overlay is already applied)."""
        spec.move(SpecPhase.INSERTING)  # held submits may follow the items now
        items = (UserMessage(text=suggestion.text), *result.items[1:]) if result.items else ()
        boundary = result.state == "boundary"
        continue_calls = result.boundary_calls if boundary else ()
        # A budget or the turn limit stopped it between turns (its transcript
        # ends with tool results, or with no answer at all): the real worker
        # picks the turn up where it stopped, through the normal flow.
        continue_turn = boundary and not continue_calls and not _ends_with_answer(items)
        completed = result.completed_at or time.time()
        saved = max(0.0, min(completed, tab_at) - result.started_at)
        if spec.span is not None:
            spec.span.saved(saved)
        outcome: Literal["accepted", "boundary"] = "boundary" if boundary else "accepted"
        # Tab pressed while the speculation still ran: the accept itself starts
        # when the speculator could apply; the wait is reported separately.
        begin = max(started, result.apply_started or started)
        waited = begin - started

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
                    next_suggestion=spec.next_suggestion,
                    turn=turn,
                )
            )

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
            if run_id is not None and wait:
                self._continuations[run_id] = lambda turn: report(latency, turn)
            else:
                report(latency, None)

        def failed(error: BaseException) -> None:
            applied = ", ".join(result.applied) or "no files"
            self._alert(
                AlertLevel.ERROR,
                f"inserting the accepted speculation failed ({applied} already applied): {error}",
            )
            spec.move(SpecPhase.ENDED)
            self._report(spec, "failed", reason=f"insert failed: {error!r}")
            answer(
                AcceptResult(
                    outcome="failed", suggestion=suggestion.text, files_applied=result.applied
                )
            )

        self.ask_then(
            self._worker,
            InsertItems(
                items=tuple(items), continue_calls=continue_calls, continue_turn=continue_turn
            ),
            then=inserted,
            on_error=failed,
            timeout=60.0,
        )

    def _submit_normally(
        self,
        suggestion: Suggestion,
        answer: Answer,
        outcome: Literal["submitted", "conflict", "stale", "failed"],
        *,
        conflicts: Sequence[str] = (),
        files_applied: Sequence[str] = (),
    ) -> None:
        """Run the suggestion as an ordinary prompt on the current files."""

        submit_id = f"{self.session_id}-accept-{next(_seq)}"
        scope = CancelScope()  # CancelAccept cancels it, even before the worker has it
        self._accept_submits.add(scope)

        def done(turn: TurnResult) -> None:
            self._accept_submits.discard(scope)
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
            self._accept_submits.discard(scope)
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
                scope=scope,
                trace=trace_context_of(answer),
            ),
            then=done,
            on_error=failed,
            timeout=3600.0,
        )


def _answer(reply: PooledFuture[Any] | None, result: AcceptResult) -> None:
    if reply is not None:
        reply.try_set(result)


def _ends_with_answer(items: Sequence[Item]) -> bool:
    """Whether a transcript ends with a final assistant answer (text, no calls)."""
    last = items[-1] if items else None
    return isinstance(last, AssistantMessage) and not last.tool_calls


def _as_turn(session_id: str, result: AcceptResult) -> TurnResult:
    return TurnResult(
        run_id=f"accept-{next(_seq)}",
        session_id=session_id,
        status="completed" if result.outcome in ("accepted", "boundary") else "error",
        items=result.items,
        error=None if result.outcome in ("accepted", "boundary") else result.outcome,
    )
