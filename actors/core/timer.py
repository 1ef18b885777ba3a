"""One timer thread for the whole runtime.

Debounces, backoff delays, hook and tool deadlines all need "run this later,
unless cancelled". A thread per timer (``threading.Timer``) would cost an OS
thread each; here a single thread sleeps until the earliest deadline of a heap.
Cancelled entries are dropped lazily and compacted when they pile up.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from fore.actors.core.logs import get_logger

log = get_logger(__name__)


class TimerHandle:
    """A scheduled callback; ``cancel()`` is idempotent and thread-safe."""

    __slots__ = ("_args", "_fn", "cancelled", "when")

    def __init__(self, when: float, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self._fn: Callable[..., Any] | None = fn
        self._args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self._fn = None
        self._args = ()

    def _fire(self) -> None:
        fn, args = self._fn, self._args
        if fn is None or self.cancelled:
            return
        self._fn = None
        fn(*args)


class Timer:
    """A heap of :class:`TimerHandle` served by one daemon thread."""

    def __init__(self, name: str = "fore-timer") -> None:
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._pushes_since_compact = 0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def call_later(self, delay: float, fn: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run ``fn(*args)`` on the timer thread after ``delay`` seconds.

        ``fn`` must be quick (typically: tell an actor a message).
        """
        when = time.monotonic() + max(0.0, delay)
        handle = TimerHandle(when, fn, args)
        with self._cond:
            if self._stopped:
                raise RuntimeError("timer is shut down")
            heapq.heappush(self._heap, (when, next(self._seq), handle))
            self._pushes_since_compact += 1
            if self._pushes_since_compact > 1024 and self._pushes_since_compact > len(self._heap):
                self._compact()
            if self._heap[0][2] is handle:
                self._cond.notify()
        return handle

    def _compact(self) -> None:
        # Called with the condition held: drop cancelled entries so a stream of
        # cancelled debounce timers cannot grow the heap without bound.
        self._heap[:] = [e for e in self._heap if not e[2].cancelled]
        heapq.heapify(self._heap)
        self._pushes_since_compact = 0

    def pending(self) -> int:
        with self._cond:
            return sum(1 for _, _, h in self._heap if not h.cancelled)

    def _loop(self) -> None:
        heap = self._heap
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    if not heap:
                        self._cond.wait()
                        continue
                    when, _, handle = heap[0]
                    if handle.cancelled:
                        heapq.heappop(heap)
                        continue
                    delay = when - time.monotonic()
                    if delay <= 0:
                        heapq.heappop(heap)
                        break
                    self._cond.wait(delay)
            try:
                handle._fire()
            except BaseException:  # even SystemExit: this one thread serves every timer
                log.exception("timer_callback_failed")

    def shutdown(self, timeout: float = 2.0) -> bool:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()
