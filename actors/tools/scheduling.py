"""Pure scheduling rules of the tool pool.

* :func:`batch_dependencies` -- which calls of a batch must wait for which:
  calls writing the same path run in call order; a call that may write
  anything (``shell``) is ordered against every writing call; an exclusive
  tool runs alone (after everything before it, before everything after it).
  Calls that only read are never held back by writes.
* :class:`FairQueue` -- ready calls of many sessions, served FIFO round-robin
  under a global cap and a per-session cap, so one session's 500 calls cannot
  starve another session's one call, and a stream of new sessions cannot
  starve a session that was already waiting.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CallShape:
    """What scheduling needs to know about one call.

    ``writes`` are the canonical workspace paths it writes; ``writes_all``
    says it may write any path (a shell command), so it conflicts with every
    call that writes anything.
    """

    writes: frozenset[str]
    exclusive: bool
    writes_all: bool = False

    @property
    def writes_anything(self) -> bool:
        return self.writes_all or bool(self.writes)


def conflicts(earlier: CallShape, later: CallShape) -> bool:
    """Whether ``later`` must wait for ``earlier`` (see module docs)."""
    if earlier.exclusive or later.exclusive:
        return True
    if earlier.writes_all:
        return later.writes_anything
    if later.writes_all:
        return earlier.writes_anything
    return not earlier.writes.isdisjoint(later.writes)


def batch_dependencies(calls: Sequence[CallShape]) -> list[set[int]]:
    """For each call, the indexes of earlier calls it must wait for."""
    return [{i for i in range(j) if conflicts(calls[i], call)} for j, call in enumerate(calls)]


class FairQueue(Generic[T]):
    """FIFO round-robin across sessions with a global and a per-session running cap.

    The *rotation* is the line of sessions that have ready items. A slot goes
    to the first session in line that is under its cap; that session then
    moves to the back of the line (or leaves it when it has nothing left).
    A session at its cap keeps its place, so it is next when one of its own
    calls ends. A session that had nothing ready joins at the back -- but
    ahead of the session served last, if that one is at the back: otherwise a
    lone busy session, served a moment ago, would take the newcomer's turn.

    So, while a session can run, every other session is served at most once
    before it, and a stream of new sessions cannot starve it (each newcomer
    queues behind it). Items of one session run in push order.

    The pool keeps counting a call as running while its thread is alive, even
    after reporting it timed out or cancelled: ``finished`` is called when the
    thread ends, so the caps bound what really runs.
    """

    def __init__(self, *, global_cap: int, session_cap: int) -> None:
        if global_cap < 1 or session_cap < 1:
            raise ValueError("caps must be at least 1")
        self.global_cap = global_cap
        self.default_session_cap = session_cap
        self._ready: dict[str, deque[T]] = {}
        self._rotation: list[str] = []
        self._running: dict[str, int] = {}
        self._caps: dict[str, int] = {}
        self._last_served: str | None = None
        self.running_total = 0

    def set_session_cap(self, session: str, cap: int | None) -> None:
        if cap is None:
            self._caps.pop(session, None)
        else:
            self._caps[session] = max(1, cap)

    def session_cap(self, session: str) -> int:
        return min(self._caps.get(session, self.default_session_cap), self.global_cap)

    def push(self, session: str, item: T) -> None:
        queue = self._ready.get(session)
        if queue is None:
            queue = self._ready[session] = deque()
            rotation = self._rotation
            if rotation and rotation[-1] == self._last_served:
                rotation.insert(len(rotation) - 1, session)
            else:
                rotation.append(session)
        queue.append(item)

    def remove(self, session: str, predicate: Callable[[T], bool]) -> list[T]:
        """Take queued items of a session matching ``predicate`` out of the queue."""
        queue = self._ready.get(session)
        if not queue:
            return []
        taken = [item for item in queue if predicate(item)]
        if taken:
            kept = deque(item for item in queue if not predicate(item))
            if kept:
                self._ready[session] = kept
            else:
                self._drop(session)
        return taken

    def pop_runnable(self) -> tuple[str, T] | None:
        """The next item allowed to start now (and count it as running), or None."""
        if self.running_total >= self.global_cap:
            return None
        for position, session in enumerate(self._rotation):
            if self._running.get(session, 0) >= self.session_cap(session):
                continue  # at its cap: it keeps its place in line
            queue = self._ready[session]
            item = queue.popleft()
            del self._rotation[position]
            if queue:
                self._rotation.append(session)
            else:
                del self._ready[session]
            self._last_served = session
            self._running[session] = self._running.get(session, 0) + 1
            self.running_total += 1
            return session, item
        return None

    def finished(self, session: str) -> None:
        """One running item of ``session`` is done (its thread has ended)."""
        count = self._running.get(session, 0)
        if count <= 0:
            raise ValueError(f"no running item for session {session!r}")
        if count == 1:
            del self._running[session]
        else:
            self._running[session] = count - 1
        self.running_total -= 1

    def running(self, session: str) -> int:
        return self._running.get(session, 0)

    def running_by_session(self) -> dict[str, int]:
        return dict(self._running)

    def queued(self) -> int:
        return sum(len(q) for q in self._ready.values())

    def queued_sessions(self) -> list[str]:
        """Sessions with ready items, in line order."""
        return list(self._rotation)

    def sessions(self) -> int:
        return len(set(self._ready) | set(self._running))

    def _drop(self, session: str) -> None:
        del self._ready[session]
        self._rotation.remove(session)
