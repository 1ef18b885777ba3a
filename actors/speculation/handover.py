"""What an accept owes the session once its overlay is applied, whoever is left to deliver it.

Files are never applied without their history. An accept's apply runs on the
blocking lane; normally its outcome comes back to the controller, which hands
the items to the worker (``InsertItems``, :mod:`.accept`). But the controller
may stop while the apply runs -- a crash (its supervisor restarts it) or the
session closing -- and the outcome posted to it is then lost with its
mailbox. So the ``InsertItems`` is built when the apply starts, from the
speculation's record alone (:func:`insert_message`, pure), and kept in a
:class:`Handover` that exactly one side delivers (:meth:`Handover.take`): the
controller, when the apply's outcome reaches it, or -- when the controller that
started the apply is gone -- the apply's completion itself, on the lane thread
(:meth:`Handover.deliver_orphaned`):

* applied: the items go to the session's worker through its handle (stable
  across the worker's restarts); if the worker is gone too (the session
  closed), they are appended to the session's store directly, so the stored
  history holds what the files hold;
* then the submits held behind the accept (a crash hands them over; a close
  fails them) go to the worker, after the items: never before them.

The same holds for an accept whose items the stopping controller had already
sent (INSERTING): the worker's answer, which the controller would have read,
is read here (:meth:`Handover.orphaned_insert`).

And the Tab is answered with what happened, not with the controller's end.
An accept past the point of no return lands without the controller, so the
stopping controller releases the Tab's reply from its exit
(:meth:`~actors.core.pooled.PooledActor.release_reply`) and hands it over
(:class:`OwedTab`): once the worker has the items -- or the closed session's
store has them -- it is answered ``accepted`` / ``boundary`` as the controller
would have answered it, except that no pipelined next suggestion comes with
it and a boundary's continuation is not waited for (``turn`` is None); it is
answered ``failed`` (with the paths applied) if the items could not go in,
``conflict`` or ``failed`` if the apply itself did not apply.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import partial
from typing import Any

from pykka import ActorDeadError

from fore.actors.core.cancel import CancelScope
from fore.actors.core.future import PooledFuture
from fore.actors.core.logs import get_logger
from fore.actors.store import TurnBatch
from fore.actors.worker.persistence import Persistence, chunks
from fore.actors.worker.state import SessionState
from fore.messages.conversation import AssistantMessage, Item, UserMessage
from fore.messages.overlay import ApplyResult, ConflictReport
from fore.messages.session import Submit
from fore.messages.speculation import AcceptResult, InsertItems, SpeculationResult

__all__ = ["Handover", "Insert", "OwedTab", "insert_message"]

log = get_logger(__name__)

Held = list[tuple[Submit, PooledFuture[Any] | None]]
"""Submits held behind an accept, each with its asker's reply (the worker answers it)."""


@dataclass(frozen=True)
class Insert:
    """An accepted speculation's items as the worker gets them, and what they mean."""

    message: InsertItems
    boundary: bool
    """It stopped at a boundary (the accept's outcome is ``boundary``)."""

    @property
    def items(self) -> tuple[Item, ...]:
        return self.message.items

    @property
    def continues(self) -> bool:
        """The items continue a turn (the worker runs it under the scope they carry)."""
        return bool(self.message.continue_calls) or self.message.continue_turn


def insert_message(suggestion: str, result: SpeculationResult, scope: CancelScope) -> Insert:
    """The ``InsertItems`` of an accepted speculation, from its record alone.

    Its first item is the user's prompt as the suggestion read; after a
    boundary the turn goes on -- with the calls the speculation did not run,
    or, stopped by a budget or the turn limit between turns (its transcript
    ends with tool results, or with no answer at all), with an LLM request --
    under a child of the accept's ``scope``.
    """
    items = (UserMessage(text=suggestion), *result.items[1:]) if result.items else ()
    boundary = result.state == "boundary"
    continue_calls = result.boundary_calls if boundary else ()
    continue_turn = boundary and not continue_calls and not _ends_with_answer(items)
    continues = bool(continue_calls) or continue_turn
    return Insert(
        InsertItems(
            items=tuple(items),
            continue_calls=continue_calls,
            continue_turn=continue_turn,
            scope=scope.child() if continues else None,
        ),
        boundary,
    )


def _ends_with_answer(items: Sequence[Item]) -> bool:
    """Whether a transcript ends with a final assistant answer (text, no calls)."""
    last = items[-1] if items else None
    return isinstance(last, AssistantMessage) and not last.tool_calls


@dataclass(frozen=True)
class OwedTab:
    """A Tab's answer, handed over by a controller that stopped once its apply had begun."""

    answer: Callable[[AcceptResult], None]
    """Answers the Tab (its reply, released from the stopped controller's exit)."""
    accepted: Callable[[tuple[str, ...]], AcceptResult]
    """The answer once the items are in, given the paths applied (the controller's
    wording, without a pipelined next suggestion and without a continuation's turn)."""
    suggestion: str

    def failed(self, applied: Sequence[str] = (), conflicts: Sequence[str] = ()) -> None:
        """Nothing went in (``conflicts``: the apply found them), or the items did not."""
        self.answer(
            AcceptResult(
                outcome="conflict" if conflicts else "failed",
                suggestion=self.suggestion,
                files_applied=tuple(applied),
                conflicts=tuple(conflicts),
            )
        )


class Handover:
    """An accept's ``InsertItems``, delivered once, by whichever side gets there first.

    Thread-safe: the controller takes it on its own thread, an orphaned apply
    on a blocking-lane thread.
    """

    __slots__ = ("_lock", "_taken", "applied", "held", "insert", "inserting", "tab")

    def __init__(self, insert: Insert) -> None:
        self.insert = insert
        self.held: Held = []
        """Submits a crashed controller left behind the accept (forwarded after the items)."""
        self.tab: OwedTab | None = None
        """The Tab's answer, when a stopping controller handed it over."""
        self.inserting: PooledFuture[Any] | None = None
        """The worker's answer to the ``InsertItems`` the controller sent (INSERTING)."""
        self.applied: tuple[str, ...] = ()
        """The paths the apply changed (known once it is done)."""
        self._lock = threading.Lock()
        self._taken = False

    def take(self) -> bool:
        """Claim the delivery: True exactly once."""
        with self._lock:
            if self._taken:
                return False
            self._taken = True
            return True

    def deliver_orphaned(
        self,
        job: Future[Any],
        worker: Any,
        state: SessionState,
        persist: Persistence | None,
        lane: Any,
    ) -> None:
        """The apply ``job`` is done and its controller is gone: deliver what it owes.

        Runs where the job's done-callback runs (a lane thread, or the stopping
        controller's own thread when the apply was already done): it only sends
        mail, and leaves a store append to ``lane``.
        """
        if not self.take():
            return  # the controller had the outcome: it delivered
        held, self.held = self.held, []
        outcome = _outcome(job)
        if isinstance(outcome, ApplyResult):
            answered: PooledFuture[Any] = PooledFuture()
            self.applied = outcome.paths
            self._when_inserted(answered, state, persist, lane)
            worker.forward(self.insert.message, answered)
        elif self.tab is not None:  # nothing was applied (or nobody knows what: failed)
            if isinstance(outcome, ConflictReport):
                self.tab.failed(conflicts=outcome.paths)
            else:
                self.tab.failed(getattr(outcome, "applied", ()))
        for submit, reply in held:
            worker.forward(submit, reply)

    def orphaned_insert(self, state: SessionState, persist: Persistence | None, lane: Any) -> None:
        """The controller sent the items and stopped before the worker's answer came.

        Runs on the stopping controller's thread; the rest where the answer comes.
        """
        if self.inserting is not None:
            self._when_inserted(self.inserting, state, persist, lane)

    def _when_inserted(
        self,
        answered: PooledFuture[Any],
        state: SessionState,
        persist: Persistence | None,
        lane: Any,
    ) -> None:
        """Once the worker has answered the items (``answered``): a closed session's
        store gets them if the worker was gone, and the Tab handed over its answer."""
        tab, items, applied = self.tab, self.insert.items, self.applied

        def inserted(done: PooledFuture[Any]) -> None:
            error = done.exception()
            if error is None:
                if tab is not None:
                    tab.answer(tab.accepted(applied))
                return
            if not isinstance(error, ActorDeadError) or persist is None:
                log.error("accepted_items_not_inserted", error=repr(error))
                if tab is not None:
                    tab.failed(applied)
                return
            # The worker is gone (the session closed): the store must still get them.
            previous = persist.writing
            writing = lane.submit(_append_to_store, state, persist, items, previous)
            persist.writing = writing
            if tab is not None:
                writing.add_done_callback(partial(_stored, tab, applied))

        answered.add_done_callback(inserted)


def _outcome(job: Future[Any]) -> Any:
    """What an apply job ended with: its answer, or its error (cancelled: unknown)."""
    if job.cancelled():
        return None
    error = job.exception()
    return job.result() if error is None else error


def _stored(tab: OwedTab, applied: tuple[str, ...], appended: Future[bool]) -> None:
    """A closed session's store append of the accepted items is done: answer the Tab."""
    if not appended.cancelled() and appended.exception() is None and appended.result():
        tab.answer(tab.accepted(applied))
    else:
        tab.failed(applied)


def _append_to_store(
    state: SessionState,
    persist: Persistence,
    items: Sequence[Item],
    previous: Future[Any] | None,
) -> bool:
    """Append accepted items to a closed session's history and its store (the lane).

    Its worker is gone, so nothing else writes the session: the append it may
    have left running is waited for (bounded), then history past what the
    store has goes in, these items last. Returns whether the store has them.
    """
    if previous is not None:
        try:
            previous.result(timeout=persist.wait_s)
        except FutureTimeout:
            log.warning("store_append_still_running", session=persist.session_id)
        except BaseException:  # its failure was reported to the session already
            pass
    state.history.extend(items)
    end = len(state.history)
    persist.owed = max(persist.owed, end)
    try:
        for part in chunks(state.history[persist.saved : end]):
            persist.store.append(persist.session_id, TurnBatch(items=part))
            persist.saved += len(part)
    except Exception as exc:  # the files are applied: say loudly that the store lacks them
        log.error("accepted_items_not_stored", session=persist.session_id, error=repr(exc))
        return False
    return True
