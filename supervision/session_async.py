"""The session API for asyncio applications: events as an async iterator, answers as awaitables.

A web or editor front end lives on an event loop, which must never wait on
the runtime. Two bridges, neither with a thread of its own:

* :class:`EventStream` (``Session.stream()``): a subscriber the session's
  actors ``tell`` events to from their dispatcher threads. ``tell`` appends to
  a bounded buffer under a lock (the oldest events are dropped and counted
  when nobody reads: events are observability, history is the truth) and,
  at most once until the loop has run it, schedules a wake-up with
  ``loop.call_soon_threadsafe``; the consumer awaits a plain future on its
  loop. A burst of a thousand events is one wake-up, and a consumer that
  stops reading costs at most ``maxlen`` events. The actors hold only a small
  sink with a weak reference to the stream, so a stream nobody holds any more
  (``break`` out of ``async for``) unsubscribes itself: the next event finds
  it gone and the actor drops it. It ends when the session closes, or at
  :meth:`EventStream.aclose` (also ``async with session.stream() as events``).
  Cancelling the task that waits in ``async for`` cancels only that wait.
* :func:`wait_answer`: an actor's answer (a ``PooledFuture``) as an awaitable.
  The future's done-callback hands the answer to the loop with
  ``call_soon_threadsafe``; the deadline is an asyncio timeout, after which
  :class:`~actors.core.errors.AskTimeout` is raised as by the blocking calls.

What cancellation *means* for each call (a cancelled ``asubmit`` cancels its
run, a cancelled ``aaccept`` calls the accept off) is the session's business
(:mod:`supervision.session`); this module only moves answers and events
between threads.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from fore.actors.core.errors import ActorStopped, AskTimeout
from fore.actors.core.future import PooledFuture

T = TypeVar("T")

DEFAULT_STREAM_MAXLEN = 10_000
"""Events a stream buffers for a consumer that does not keep up (the oldest go first)."""


class _Sink:
    """What the actors hold: a weak reference to the stream (see the module docs)."""

    __slots__ = ("_stream",)

    def __init__(self, stream: EventStream) -> None:
        self._stream = weakref.ref(stream)

    def tell(self, event: Any) -> None:
        stream = self._stream()
        if stream is None:
            raise ActorStopped("the event stream is gone")
        stream._put(event)


class EventStream:
    """One consumer's async iterator of a session's events (``Session.stream()``).

    ``async for event in stream`` yields every event from the moment the
    stream was made until the session closes or :meth:`aclose`; ``dropped``
    counts events lost to the bound.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        maxlen: int = DEFAULT_STREAM_MAXLEN,
        on_close: Callable[[_Sink], None] | None = None,
    ) -> None:
        if maxlen < 1:
            raise ValueError("a stream's maxlen must be at least 1")
        self._loop = loop
        self._maxlen = maxlen
        self._lock = threading.Lock()
        self._events: deque[Any] = deque()
        self._closed = False
        self._wake_scheduled = False
        self._waiter: asyncio.Future[None] | None = None
        self._on_close = on_close
        self.dropped = 0
        self.sink = _Sink(self)
        """The subscriber to hand the actors (``Subscribe(address=stream.sink)``)."""

    def __repr__(self) -> str:
        return f"<EventStream {len(self._events)} buffered, closed={self._closed}>"

    # -- producers (any thread) ----------------------------------------------------------

    def _put(self, event: Any) -> None:
        with self._lock:
            if self._closed:
                raise ActorStopped("the event stream is closed")
            if len(self._events) >= self._maxlen:
                self._events.popleft()
                self.dropped += 1
            self._events.append(event)
            if self._wake_scheduled:
                return
            self._wake_scheduled = True
        self._schedule_wake()

    def close(self) -> None:
        """End the stream (any thread): what is buffered is still read, then it stops."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            schedule = not self._wake_scheduled
            self._wake_scheduled = True
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self.sink)
        if schedule:
            self._schedule_wake()

    def _schedule_wake(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody is left to read
            with self._lock:
                self._closed = True
                self._events.clear()

    # -- the consumer (on the loop) ------------------------------------------------------

    def _wake(self) -> None:
        with self._lock:
            self._wake_scheduled = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def closed(self) -> bool:
        return self._closed

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Any:
        while True:
            with self._lock:
                if self._events:
                    return self._events.popleft()
                if self._closed:
                    raise StopAsyncIteration
            # Nothing can be told between the check and this wait's start that
            # its wake-up would miss: the wake-up runs on this loop, after we yield.
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def aclose(self) -> None:
        """Stop receiving events (unsubscribes from the session's actors)."""
        self.close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def wait_answer(future: PooledFuture[T], timeout: float) -> T:
    """The actor's answer to an ask, awaited on the running loop (never blocking it).

    Raises what the actor answered with, or :class:`AskTimeout` after
    ``timeout`` seconds. Cancelling the caller only stops the wait.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[T] = loop.create_future()

    def settle(done: PooledFuture[T]) -> None:
        if answer.done():  # cancelled or timed out meanwhile
            return
        error = done.exception()
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(done.get(timeout=0))

    def delivered(done: PooledFuture[Any]) -> None:
        try:
            loop.call_soon_threadsafe(settle, done)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    future.add_done_callback(delivered)
    try:
        return await asyncio.wait_for(answer, timeout)
    except TimeoutError:
        raise AskTimeout(f"no answer within {timeout:g} s") from None


__all__ = ["DEFAULT_STREAM_MAXLEN", "EventStream", "wait_answer"]
