"""A supervisor's plan: asynchronous operations, one at a time, that a newer plan supersedes.

A supervisor never blocks its dispatcher thread, so a multi-step plan ("stop
these in reverse order, then start those") is a queue of operations, each of
which calls its ``done`` when it has finished -- on a child's exit or a
timer, not before it returns -- and the next one runs then (posted to the
actor, so it does not nest in the finished one's stack). A shutdown or an
escalation takes over from whatever was planned: :meth:`OpQueue.supersede`
moves the generation on, so the callbacks of an operation in flight see that
they are stale and do nothing, and :meth:`OpQueue.drop` hands back every
operation that had not finished, so the replies they owed are still
answered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fore.actors.core.future import PooledFuture

Done = Callable[[], None]
Operation = Callable[[Done], None]


@dataclass(eq=False)
class Op:
    """One step of the supervisor's plan, and the reply it owes (if any)."""

    run: Operation
    reply: PooledFuture[Any] | None = None
    dropped: Any = None
    """What ``reply`` is answered with if the op is superseded or the supervisor exits."""


class OpQueue:
    """The supervisor's operations, run one at a time (see the module docs).

    ``post`` runs a callable later on the supervisor (its
    :meth:`~actors.core.pooled.PooledActor.post`); everything here runs on
    the supervisor, one message at a time, so nothing is locked.
    """

    def __init__(self, post: Callable[..., Any]) -> None:
        self._post = post
        self._queued: deque[Op] = deque()
        self._running: Op | None = None
        self.generation = 0
        """Bumped when an op starts or is superseded; a stale op's callbacks do nothing."""

    def enqueue(self, op: Op) -> None:
        self._queued.append(op)
        if self._running is None:
            self._next()

    def _next(self, gen: int | None = None) -> None:
        if gen is not None and gen != self.generation:
            return  # the op that finished was superseded; its successor runs already
        self._running = None
        if not self._queued:
            return
        op = self._running = self._queued.popleft()
        self.generation += 1
        current = self.generation

        def done() -> None:
            self._post(self._next, current)

        op.run(done)

    def supersede(self) -> None:
        """Make the op in flight stale: its callbacks (and its ``done``) do nothing."""
        self.generation += 1

    def drop(self) -> list[Op]:
        """Take every op that has not finished, the one in flight first, off the queue."""
        dropped = list(self._queued)
        if self._running is not None:
            dropped.insert(0, self._running)
        self._queued.clear()
        self._running = None
        return dropped
