"""A session's events on its shard, handed to one remote reader in ordered batches.

In one process a session's events go into an :class:`EventQueue` that the
caller's thread reads. On a shard the reader is in another process, at the
end of a Ray streaming generator (``ShardServer.events``): the actors of the
session ``tell`` their events to an :class:`EventSink` from their dispatcher
threads, and the generator, on the shard's asyncio loop, takes whatever has
arrived as one batch and yields it. A batch per wake-up, not an object per
event: a streamed answer is an event per chunk, and one Ray object each
would cost more than the chunk. Two things keep a token stream from costing
a wake-up (a cross-thread call into the loop) and a Ray item per token:

* **the reader's filter is applied as events arrive** -- a reader that asked
  for some kinds (the load benchmark's users read 4 of the ~20) makes every
  other event a no-op on the actor's thread: not buffered, no wake-up;
* **a wake-up lingers** ``linger_s`` (default :data:`LINGER_S`, 5 ms) before it
  takes the batch, so the chunks of a stream that arrive meanwhile travel in
  the same Ray item (at most ~200 items a second per streaming session, never
  one per token), at the price of at most that much delay on an event.

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
LINGER_S = 0.005
"""How long a woken reader waits for more events before it takes a batch (module docs)."""


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
        self._keep: frozenset[str] | None = None
        """The current reader's kinds: other events are dropped as they arrive."""
        self.wakeups = 0
        """Times an event woke the reader (at most one per batch: the cost per batch)."""
        self.filtered = 0
        """Events the current reader's kinds left out, dropped on arrival."""

    # -- the actors' side (any thread) ------------------------------------------------

    def tell(self, event: Any) -> None:
        """An event from one of the session's actors (never blocks, never raises)."""
        with self._lock:
            if self._closed:
                return
            keep = self._keep
            if keep is not None and type(event).__name__ not in keep:
                self.filtered += 1
                return
            if len(self._events) >= self._maxlen:
                self._events.popleft()
                self.dropped += 1
            self._events.append(event)
            wake = None if self._woken else self._wake
            if wake is not None:
                self._woken = True
                self.wakeups += 1
        if wake is not None:
            _wake_up(wake)
        if self._on_event is not None:
            self._on_event(event)

    # -- the reader's side (the shard's event loop) ------------------------------------

    def take(self, limit: int = MAX_BATCH) -> list[Any]:
        """Up to ``limit`` buffered events, oldest first (without waiting)."""
        with self._lock:
            count = min(limit, len(self._events))
            return [self._events.popleft() for _ in range(count)]

    async def batches(
        self, kinds: Collection[str] | None = None, *, linger_s: float = LINGER_S
    ) -> AsyncIterator[list[Any]]:
        """Batches of events as they arrive, until the sink closes or a newer reader starts.

        ``kinds`` keeps only events of those class names (``"SuggestionReady"``
        ...); the others are dropped as they arrive (those already buffered,
        when taken), so they never cross the wire nor wake the reader.
        ``linger_s``: how long a wake-up waits for more events (module docs).
        A reader with nothing to read never wakes: an event, :meth:`close` or a
        newer reader wakes it (no polling, no timer while it waits).
        """
        loop = asyncio.get_running_loop()
        flag = asyncio.Event()
        keep = None if kinds is None else frozenset(kinds)
        with self._lock:
            self._reader += 1
            me = self._reader
            previous = self._wake
            self._wake = (loop, flag)
            self._woken = False
            self._keep = keep
        if previous is not None:
            _wake_up(previous)  # the older reader sees a newer one and ends
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
                await flag.wait()
                if linger_s > 0 and not self._closed and len(self) < MAX_BATCH:
                    # Still marked woken: the events meanwhile wake nobody; close() and a
                    # newer reader do (a timer handle, not a task: the linger is per batch).
                    flag.clear()
                    timer = loop.call_later(linger_s, flag.set)
                    try:
                        await flag.wait()
                    finally:
                        timer.cancel()
        finally:
            with self._lock:
                if self._reader == me:
                    self._wake = None
                    self._keep = None

    def close(self) -> None:
        """No more events; the reader gets what is buffered, then its stream ends."""
        with self._lock:
            self._closed = True
            wake = self._wake
        if wake is not None:
            _wake_up(wake)

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        with self._lock:
            return len(self._events)


def _wake_up(wake: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
    """Set a reader's flag from any thread (nothing if its loop is closed: the shard stops)."""
    loop, flag = wake
    try:
        loop.call_soon_threadsafe(flag.set)
    except RuntimeError:
        pass


class AlertForwarder:
    """Subscribed to the alert sink for one session: its alerts become ``AlertRaised`` events."""

    def __init__(self, session_id: str, sink: EventSink) -> None:
        self.session_id = session_id
        self.sink = sink

    def tell(self, alert: Alert) -> None:
        self.sink.tell(AlertRaised(session_id=self.session_id, alert=alert))
