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
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from pykka import ActorDeadError

from fore.actors.core.cancel import CancelScope
from fore.actors.core.future import PooledFuture
from fore.actors.core.logs import get_logger
from fore.actors.store import TurnBatch
from fore.actors.worker.persistence import Persistence, chunks
from fore.actors.worker.state import SessionState
from fore.messages.conversation import AssistantMessage, Item, UserMessage
from fore.messages.overlay import ApplyResult
from fore.messages.session import Submit
from fore.messages.speculation import InsertItems, SpeculationResult

__all__ = ["Handover", "Insert", "insert_message"]

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


class Handover:
    """An accept's ``InsertItems``, delivered once, by whichever side gets there first.

    Thread-safe: the controller takes it on its own thread, an orphaned apply
    on a blocking-lane thread.
    """

    __slots__ = ("_lock", "_taken", "held", "insert")

    def __init__(self, insert: Insert) -> None:
        self.insert = insert
        self.held: Held = []
        """Submits a crashed controller left behind the accept (forwarded after the items)."""
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
        applied = (
            not job.cancelled()
            and job.exception() is None
            and isinstance(job.result(), ApplyResult)
        )
        if applied:
            answered: PooledFuture[Any] = PooledFuture()
            items = self.insert.items

            def inserted(done: PooledFuture[Any]) -> None:
                error = done.exception()
                if error is None:
                    return
                if not isinstance(error, ActorDeadError) or persist is None:
                    log.error("accepted_items_not_inserted", error=repr(error))
                    return
                # The worker is gone (the session closed): the store must still get them.
                previous = persist.writing
                persist.writing = lane.submit(_append_to_store, state, persist, items, previous)

            answered.add_done_callback(inserted)
            worker.forward(self.insert.message, answered)
        for submit, reply in held:
            worker.forward(submit, reply)


def _append_to_store(
    state: SessionState,
    persist: Persistence,
    items: Sequence[Item],
    previous: Future[Any] | None,
) -> None:
    """Append accepted items to a closed session's history and its store (the lane).

    Its worker is gone, so nothing else writes the session: the append it may
    have left running is waited for (bounded), then history past what the
    store has goes in, these items last.
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
