"""Stable handles: the address of a supervised child that survives restarts.

Callers hold a :class:`Handle`, not an ``ActorRef``. When the child crashes,
the mail still queued in its mailbox and everything sent meanwhile is kept in
the handle, in order, and delivered to the restarted actor once the
supervisor re-points the handle. So a restart is invisible except for the one
message that crashed the child (whose asker got the error) and the dead
incarnation's own continuations (calls it posted to itself: a blocking
result, a timer, an ask's answer), which act on its state and go with it. If the child is
not restarted, every kept ask is answered with :class:`~fore.errors.ActorStopped` (a
``pykka.ActorDeadError``).

A handle is as stable as the supervisor that owns it: it follows restarts of
*its child*, but when that supervisor itself dies (a crash, an escalation, a
stop -- even one its own parent follows with a restart) the handle is closed
for good, and every later send fails at once with :class:`ActorStopped`
saying so. A restarted supervisor has new handles for its children: get them
again with :class:`~messages.runtime.GetChild` from the supervisor's handle.

Asks through a handle have the child class's ``default_ask_timeout`` as their
deadline unless the handle or the call says otherwise; none waits forever.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any, Generic, Literal, TypeVar, overload

from pykka import ActorProxy, ActorRef
from pykka._envelope import Envelope
from pykka.messages import _ActorStop

from fore.actors.core.continuations import is_private_call
from fore.actors.core.errors import ActorStopped
from fore.actors.core.future import PooledFuture, check_ask_timeout
from fore.actors.core.logs import get_logger
from fore.actors.core.mailbox import reject
from fore.actors.core.pooled import ActorExit, PooledActor
from fore.actors.core.ref import stopped_as_fore
from fore.messages.runtime import StopNow

A = TypeVar("A", bound=PooledActor)
log = get_logger(__name__)

HandleState = Literal["starting", "running", "restarting", "dead"]

SUPERVISOR_STOP = _ActorStop()
SUPERVISOR_STOP_NOW = StopNow()
"""The stops a supervisor sends to one incarnation of its child (through its ref).

They are these exact objects, so a handle can tell them from stops sent
through it: if the incarnation exits before reaching them, they are dropped
with it instead of being carried over to -- and stopping -- the next one.
"""


class Handle(Generic[A]):
    """The stable address of one supervised child (duck-types ``ActorRef``)."""

    max_buffered = 100_000
    """Mail kept while the child restarts; beyond this, sends are rejected."""

    def __init__(self, child_id: str, *, ask_timeout: float | None = None) -> None:
        """``ask_timeout``: the deadline of asks through this handle.

        ``None`` (the default) means the current child class's
        ``default_ask_timeout`` (60 s before the first start); it never means
        "wait forever".
        """
        self.child_id = child_id
        self._ask_timeout = (
            None if ask_timeout is None else check_ask_timeout(ask_timeout, "Handle ask_timeout")
        )
        self._lock = threading.Lock()
        self._ref: ActorRef[A] | None = None
        self._buffer: deque[Envelope[Any]] = deque()
        self._state: HandleState = "starting"
        self._closed_reason = ""

    def __repr__(self) -> str:
        return f"<Handle {self.child_id} {self._state} -> {self._ref}>"

    # -- ActorRef surface -------------------------------------------------------

    @property
    def state(self) -> HandleState:
        return self._state

    @property
    def ref(self) -> ActorRef[A] | None:
        """The ``ActorRef`` of the current incarnation (changes on restart)."""
        return self._ref

    @property
    def actor_urn(self) -> str | None:
        ref = self._ref
        return None if ref is None else ref.actor_urn

    @property
    def actor_class(self) -> type[A] | None:
        ref = self._ref
        return None if ref is None else ref.actor_class

    def is_alive(self) -> bool:
        return self._state != "dead"

    @property
    def ask_timeout(self) -> float:
        """The deadline (seconds) of an ask through this handle without a ``timeout``."""
        if self._ask_timeout is not None:
            return self._ask_timeout
        ref = self._ref
        cls = PooledActor if ref is None else ref.actor_class
        return float(getattr(cls, "default_ask_timeout", PooledActor.default_ask_timeout))

    def _actor_weakref(self) -> A | None:
        ref = self._ref
        return None if ref is None else ref._actor_weakref()

    def tell(self, message: Any) -> None:
        """Send without waiting; raises ActorStopped once the child is gone for good."""
        self._send(Envelope(message))

    @overload
    def ask(
        self, message: Any, *, block: Literal[False], timeout: float | None = None
    ) -> PooledFuture[Any]: ...
    @overload
    def ask(
        self, message: Any, *, block: Literal[True] = True, timeout: float | None = None
    ) -> Any: ...
    def ask(self, message: Any, *, block: bool = True, timeout: float | None = None) -> Any:
        """Ask the current incarnation; the answer survives restarts (see module doc).

        The ask's deadline is ``timeout``, else the handle's ``ask_timeout``,
        else the child class's ``default_ask_timeout``.
        """
        if timeout is not None and not (math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"an ask's timeout must be a finite number >= 0, not {timeout!r}")
        limit = timeout if timeout is not None else self.ask_timeout
        future: PooledFuture[Any] = PooledFuture(time.monotonic() + limit)
        self._send(Envelope(message, reply_to=future))
        return future.get(timeout=timeout) if block else future

    def forward(self, message: Any, reply_to: PooledFuture[Any] | None) -> None:
        """Send ``message`` on behalf of someone else's ask: ``reply_to`` gets the answer.

        For a front door that relays a request (the speculation controller
        handing a submit to the worker): the worker answers the original asker
        directly, so the relay adds no hop on the way back. Without
        ``reply_to`` it is :meth:`tell`; a gone child answers ``reply_to``
        with :class:`ActorStopped` (as an ask would).
        """
        self._send(Envelope(message, reply_to=reply_to))

    def proxy(self) -> ActorProxy[A]:
        """A pykka proxy whose calls always reach the current incarnation.

        The proxy sends through this handle, so it follows restarts: a call
        made while the child restarts waits in the handle like any other mail
        and is answered by the next incarnation. pykka learns the attributes
        by introspecting one actor object; any incarnation serves (they share
        a class), so a proxy can be made while the child is restarting too
        (the handle's ref keeps the last incarnation until it is replaced).
        Raises :class:`~fore.errors.ActorStopped` (a ``pykka.ActorDeadError``) once the
        handle is closed, or before the child's first start.
        """
        if self._ref is None and self._state != "dead":
            raise ActorStopped(f"{self.child_id} has not started yet")
        with stopped_as_fore():  # pykka's own check: a closed handle is not alive
            return ActorProxy(actor_ref=self)  # type: ignore[arg-type]

    # -- sending ------------------------------------------------------------

    def _send(self, envelope: Envelope[Any]) -> None:
        with self._lock:
            state = self._state
            if state == "running":
                assert self._ref is not None
                if self._ref.actor_inbox.offer(envelope):  # type: ignore[attr-defined]
                    return
                # The actor has just exited; its watcher will hand us its mail.
                self._buffer.append(envelope)
                return
            if state != "dead" and len(self._buffer) < self.max_buffered:
                self._buffer.append(envelope)
                return
        error = ActorStopped(
            f"{self.child_id} is gone for good ({self._closed_reason}); this handle will "
            "never reach it again -- after a restart of its supervisor, ask the supervisor "
            "for the new handle (GetChild)"
            if state == "dead"
            else f"{self.child_id} is restarting and its buffer is full"
        )
        reject(envelope, error)

    # -- supervisor side --------------------------------------------------------

    def on_actor_exit(self, record: ActorExit) -> None:
        """Exit watcher: keep the dead incarnation's queued mail for the next one."""
        with self._lock:
            if self._ref is None or record.ref.actor_urn != self._ref.actor_urn:
                return
            if self._state == "dead":
                return
            self._state = "restarting"
            # The dead incarnation's own continuations (a blocking result, a timer, an
            # ask's answer) act on its state, not the next one's: they go with it.
            kept = [
                e
                for e in record.claim_leftovers()
                if not _stops(e) and not is_private_call(e.message)
            ]
            self._buffer.extendleft(reversed(kept))

    def repoint(self, ref: ActorRef[A]) -> None:
        """Point at a new incarnation and deliver the kept mail to it, in order."""
        with self._lock:
            if self._state == "dead":
                return
            self._ref = ref
            inbox = ref.actor_inbox
            while self._buffer:
                if not inbox.offer(self._buffer[0]):  # type: ignore[attr-defined]
                    self._state = "restarting"  # died already: keep the rest
                    return
                self._buffer.popleft()
            self._state = "running"

    def close(self, reason: str = "stopped") -> None:
        """The child is gone for good: answer kept asks with ActorStopped."""
        with self._lock:
            if self._state != "dead":
                self._closed_reason = reason
            self._state = "dead"
            kept, self._buffer = self._buffer, deque()
        dropped = 0
        for envelope in kept:
            if envelope.reply_to is None:
                dropped += 1
                continue
            error = ActorStopped(f"{self.child_id} {reason} before handling the message")
            try:
                envelope.reply_to.set_exception((ActorStopped, error, None))
            except Exception:  # already answered at its deadline
                pass
        if dropped:
            log.warning("dead_letters", child=self.child_id, count=dropped, reason=reason)


def _stops(envelope: Envelope[Any]) -> bool:
    """A supervisor's stop for the incarnation that just exited: done, not carried over."""
    if envelope.message is SUPERVISOR_STOP or envelope.message is SUPERVISOR_STOP_NOW:
        if envelope.reply_to is not None:
            try:
                envelope.reply_to.set(None)
            except Exception:  # already answered at its deadline
                pass
        return True
    return False
