"""Where a session's events go: a bounded queue its readers drain, and alerts turned into events.

Kept apart from :mod:`supervision.session` because neither needs the session: the
worker, the controller and the alert sink ``tell`` these as they would an actor,
and :mod:`fore.distributed.events` builds its stream on the same queue.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from fore.actors.core.errors import ActorStopped
from fore.messages.alerts import Alert
from fore.messages.session import AlertRaised


class EventQueue:
    """A bounded, thread-safe event buffer that actors can ``tell``.

    Events are observability: if nobody reads them, the oldest are dropped
    (and counted) rather than growing without bound. The history is the
    source of truth.
    """

    def __init__(self, maxlen: int = 10_000) -> None:
        self._events: deque[Any] = deque()
        self._maxlen = maxlen
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0
        self.on_close: list[Callable[[], None]] = []
        """Called once when the queue closes (the session's async streams end with it)."""

    def tell(self, event: Any) -> None:
        with self._cond:
            if self._closed:
                raise ActorStopped("event queue closed")
            if len(self._events) >= self._maxlen:
                self._events.popleft()
                self.dropped += 1
            self._events.append(event)
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Any | None:
        """The next event, or ``None`` when closed or when ``timeout`` passes."""
        with self._cond:
            if not self._events and not self._closed:
                self._cond.wait(timeout)
            if self._events:
                return self._events.popleft()
            return None

    def drain(self) -> list[Any]:
        with self._cond:
            events = list(self._events)
            self._events.clear()
            return events

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        listeners, self.on_close = self.on_close, []
        for listener in listeners:
            listener()

    @property
    def closed(self) -> bool:
        return self._closed


class AlertEvents:
    """Turns the alert sink's alerts for one session into session events."""

    def __init__(self, session_id: str, events: Any) -> None:
        self.session_id = session_id
        self.events = events

    def tell(self, alert: Alert) -> None:
        self.events.tell(AlertRaised(session_id=self.session_id, alert=alert))
