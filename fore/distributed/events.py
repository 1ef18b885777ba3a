"""A session's events on its shard, handed to one remote reader in ordered batches.

In one process a session's events go into an :class:`EventQueue` that the
caller's thread reads. On a shard the reader is in another process, at the
end of a Ray streaming generator (``ShardServer.events``): the actors of the
session ``tell`` their events to an :class:`EventSink` from their dispatcher
threads, and the generator, on the shard's asyncio loop, takes whatever has
arrived as one batch and yields it. A batch per wake-up, not an object per
event: a streamed answer is an event per chunk, and one Ray object each
would cost more than the chunk.

The rules are the local queue's: events keep their order; they are
observability, so if nobody reads them the oldest are dropped (and counted)
beyond ``maxlen`` rather than growing without bound; the session's history is
the source of truth. One reader at a time: a new reader takes over and the
previous one's stream ends.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection
from typing import Any

from fore.messages.alerts import Alert
from fore.messages.session import AlertRaised

__all__ = ["AlertForwarder", "EventSink"]

DEFAULT_MAXLEN = 10_000
MAX_BATCH = 512
"""At most this many events per yielded batch (a burst is split, never reordered)."""


class EventSink:
    """Thread-safe buffer of one session's events with one asyncio reader (module docs)."""

    def __init__(
        self,
        session_id: str,
        *,
        maxlen: int = DEFAULT_MAXLEN,
        on_event: Callable[[Any], None] | None = None,
    ) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.session_id = session_id
        self._maxlen = maxlen
        self._events: deque[Any] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self.dropped = 0
        """Events dropped because nobody read them (the oldest first)."""
        self._on_event = on_event
        self._reader = 0
        """The current reader's number: a newer reader ends the older one's stream."""
        self._wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        self._woken = False

    # -- the actors' side (any thread) ------------------------------------------------

    def tell(self, event: Any) -> None:
        """An event from one of the session's actors (never blocks, never raises)."""
        with self._lock:
            if self._closed:
                return
            if len(self._events) >= self._maxlen:
                self._events.popleft()
                self.dropped += 1
            self._events.append(event)
            wake = None if self._woken else self._wake
            if wake is not None:
                self._woken = True
        if wake is not None:
            loop, flag = wake
            try:
                loop.call_soon_threadsafe(flag.set)
            except RuntimeError:  # the loop is closed: the shard is stopping
                pass
        if self._on_event is not None:
            self._on_event(event)

    # -- the reader's side (the shard's event loop) ------------------------------------

    def take(self, limit: int = MAX_BATCH) -> list[Any]:
        """Up to ``limit`` buffered events, oldest first (without waiting)."""
        with self._lock:
            count = min(limit, len(self._events))
            return [self._events.popleft() for _ in range(count)]

    async def batches(
        self, kinds: Collection[str] | None = None, *, poll_s: float = 1.0
    ) -> AsyncIterator[list[Any]]:
        """Batches of events as they arrive, until the sink closes or a newer reader starts.

        ``kinds`` keeps only events of those class names (``"SuggestionReady"``
        ...); the others are taken and dropped here, so they never cross the
        wire.
        """
        loop = asyncio.get_running_loop()
        flag = asyncio.Event()
        keep = None if kinds is None else frozenset(kinds)
        with self._lock:
            self._reader += 1
            me = self._reader
            self._wake = (loop, flag)
            self._woken = False
        try:
            while True:
                with self._lock:
                    if self._closed and not self._events:
                        return
                    if self._reader != me:
                        return
                    self._woken = False
                    flag.clear()
                batch = self.take()
                if keep is not None:
                    batch = [e for e in batch if type(e).__name__ in keep]
                if batch:
                    yield batch
                    continue
                try:
                    await asyncio.wait_for(flag.wait(), poll_s)
                except TimeoutError:
                    pass  # look again: closed, or taken over
        finally:
            with self._lock:
                if self._reader == me:
                    self._wake = None

    def close(self) -> None:
        """No more events; the reader gets what is buffered, then its stream ends."""
        with self._lock:
            self._closed = True
            wake = self._wake
        if wake is not None:
            loop, flag = wake
            try:
                loop.call_soon_threadsafe(flag.set)
            except RuntimeError:
                pass

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


class AlertForwarder:
    """Subscribed to the alert sink for one session: its alerts become ``AlertRaised`` events."""

    def __init__(self, session_id: str, sink: EventSink) -> None:
        self.session_id = session_id
        self.sink = sink

    def tell(self, alert: Alert) -> None:
        self.sink.tell(AlertRaised(session_id=self.session_id, alert=alert))
