"""A pooled actor's mailbox: two lanes, FIFO each, closed atomically.

The mailbox is where pykka's "ask races teardown" bug is closed: ``put`` and
``close`` take the same lock, so an envelope is either in the mailbox before it
closes (and then answered by the drain) or rejected at once with
:class:`~fore.errors.ActorStopped` (a ``pykka.ActorDeadError``). There is no
window in which an envelope lands in a mailbox that nobody will ever read.

Scheduling follows Akka's dispatcher design: a mailbox is "scheduled" (in the
dispatcher's run queue or being run) at most once at a time, which is what
makes an actor single-threaded although it has no thread of its own.
"""

from __future__ import annotations

import queue
from collections import deque
from threading import Lock
from typing import TYPE_CHECKING, Any

from pykka._envelope import Envelope

from fore.actors.core.errors import ActorStopped
from fore.messages.base import ControlMessage

if TYPE_CHECKING:
    from fore.actors.core.dispatcher import Dispatcher
    from fore.actors.core.pooled import PooledActor

_OPEN = 0
_CLOSED = 1


class Mailbox:
    """Per-actor FIFO mailbox with a control lane that overtakes ordinary mail."""

    __slots__ = (
        "_control",
        "_dispatcher",
        "_lock",
        "_normal",
        "_owner",
        "_owner_name",
        "_scheduled",
        "_started",
        "_state",
    )

    def __init__(self) -> None:
        self._lock = Lock()
        self._normal: deque[Envelope[Any]] = deque()
        self._control: deque[Envelope[Any]] | None = None  # allocated on first use
        self._state = _OPEN
        self._scheduled = False
        self._started = False  # mail before the start signal waits, unscheduled
        self._owner: PooledActor | None = None
        self._owner_name = "the actor"
        self._dispatcher: Dispatcher | None = None

    def bind(self, owner: PooledActor, dispatcher: Dispatcher) -> None:
        """Attach the actor that consumes this mailbox and its dispatcher."""
        self._owner = owner
        self._dispatcher = dispatcher

    # -- the pykka ActorInbox protocol ------------------------------------

    def put(self, envelope: Envelope[Any], /) -> None:
        """Enqueue an envelope, or reject it at once if the actor is gone.

        A rejected ask gets :class:`ActorStopped` on its future; a rejected
        tell raises :class:`ActorStopped` to the sender, as pykka does for a
        dead actor.
        """
        control = isinstance(envelope.message, ControlMessage)
        with self._lock:
            if self._state == _CLOSED:
                rejected = True
            else:
                rejected = False
                if control:
                    if self._control is None:
                        self._control = deque()
                    self._control.append(envelope)
                else:
                    self._normal.append(envelope)
                if self._scheduled or not self._started:
                    return
                self._scheduled = True
        if rejected:
            reject(envelope, ActorStopped(f"{self._owner_name} is not running (mailbox closed)"))
            return
        assert self._dispatcher is not None, "mailbox used before its actor was started"
        self._dispatcher.schedule(self)

    def offer(self, envelope: Envelope[Any]) -> bool:
        """Enqueue unless closed; return False (touching nothing) when closed.

        Used by supervision handles, which keep mail for a restarting child
        instead of rejecting it.
        """
        control = isinstance(envelope.message, ControlMessage)
        with self._lock:
            if self._state == _CLOSED:
                return False
            if control:
                if self._control is None:
                    self._control = deque()
                self._control.append(envelope)
            else:
                self._normal.append(envelope)
            if self._scheduled or not self._started:
                return True
            self._scheduled = True
        assert self._dispatcher is not None
        self._dispatcher.schedule(self)
        return True

    def put_first(self, envelope: Envelope[Any]) -> None:
        """Enqueue the start signal ahead of everything, and start scheduling.

        Mail sent before this (from the actor's ``__init__``, or by a thread
        that found it in the registry) waits until the actor has started, so
        ``on_start`` always runs first.
        """
        with self._lock:
            if self._control is None:
                self._control = deque()
            self._control.appendleft(envelope)
            self._started = True
            if self._scheduled:
                return
            self._scheduled = True
        assert self._dispatcher is not None
        self._dispatcher.schedule(self)

    def get(self) -> Envelope[Any]:
        """Pop the next envelope without blocking (pykka protocol; unused by the loop)."""
        with self._lock:
            if self._control:
                return self._control.popleft()
            if self._normal:
                return self._normal.popleft()
        raise queue.Empty

    def empty(self) -> bool:
        with self._lock:
            return not self._normal and not self._control

    def __len__(self) -> int:
        with self._lock:
            return len(self._normal) + (len(self._control) if self._control else 0)

    # -- lifecycle ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    def close(self) -> list[Envelope[Any]]:
        """Refuse all further mail and return what was still queued, control lane first.

        It also lets go of its actor: the actor holds its mailbox (and its ref
        does), so the pair would otherwise be a reference cycle -- every stopped
        actor left for the cyclic collector, whose pauses stop every thread.
        A slice running right now keeps its own reference to the actor.
        """
        owner = self._owner
        name = None if owner is None else str(owner)  # the actor's code: not under the lock
        with self._lock:
            self._state = _CLOSED
            if name is not None:
                self._owner_name = name
            self._owner = None
            leftovers = list(self._control) if self._control else []
            leftovers.extend(self._normal)
            self._normal.clear()
            if self._control:
                self._control.clear()
        return leftovers

    # -- dispatcher side ----------------------------------------------------

    def run(self, throughput: int) -> None:
        """Process up to ``throughput`` envelopes, then yield the thread.

        Called only by a dispatcher thread that took this mailbox off the run
        queue, so at most one thread runs an actor at any time.
        """
        owner = self._owner
        lock = self._lock
        if owner is None:  # closed (its actor killed) while it waited for a thread
            with lock:
                self._scheduled = False
            return
        normal = self._normal
        for _ in range(throughput):
            with lock:
                control = self._control
                if control:
                    envelope = control.popleft()
                elif normal and self._state == _OPEN:
                    envelope = normal.popleft()
                else:
                    self._scheduled = False
                    return
            try:
                owner._fore_process(envelope)
            except BaseException as exc:
                # _fore_process contains handler errors itself; what escapes it
                # comes from delivering the outcome (a reply future's code, an
                # exit watcher). Left to the dispatcher, this mailbox would stay
                # "scheduled" forever: the actor would never run again nor exit,
                # and its supervisor would never hear of it. So the actor fails.
                owner._fore_escaped(envelope, exc)
        with lock:
            if self._state == _OPEN and (normal or self._control):
                again = True
            else:
                self._scheduled = False
                again = False
        if again:
            assert self._dispatcher is not None
            self._dispatcher.schedule(self)


def reject(envelope: Envelope[Any], error: ActorStopped) -> None:
    """Mail for an actor that is not running: its ask answered with ``error``, its tell
    raises it (as pykka does for a dead actor)."""
    if envelope.reply_to is not None:
        envelope.reply_to.set_exception((ActorStopped, error, None))
    else:
        raise error
