"""Threads that run tool calls, outside the dispatcher.

A tool may block for minutes or hang forever. The runner gives every running
call a thread of its own, reusing idle threads and letting threads idle for
``idle_ttl`` seconds exit. A call the pool gives up on (timeout, cancel) keeps
its thread until the tool returns, but no longer counts against the pool's
cap: the pool reports the call finished at once, and the runner starts a new
thread for the next call rather than waiting for the stuck one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

Job = tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]


class ThreadRunner:
    """An elastic set of daemon threads (see module docs)."""

    def __init__(
        self, *, name: str = "fore-tool", idle_ttl: float = 30.0, max_threads: int = 512
    ) -> None:
        self.name = name
        self.idle_ttl = idle_ttl
        self.max_threads = max_threads
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._pending = 0
        self._counter = 0
        self._closed = False

    def submit(
        self, fn: Callable[[], Any], on_done: Callable[[Any, BaseException | None], None]
    ) -> None:
        """Run ``fn()`` on a runner thread, then ``on_done(result, error)`` on that thread."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool runner is shut down")
            self._pending += 1
            spawn = self._pending > self._idle and len(self._threads) < self.max_threads
            if spawn:
                self._counter += 1
                thread = threading.Thread(
                    target=self._loop, name=f"{self.name}-{self._counter}", daemon=True
                )
                self._threads.add(thread)
        self._jobs.put((fn, on_done))
        if spawn:
            thread.start()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            with self._lock:
                self._idle += 1
            try:
                job = self._jobs.get(timeout=self.idle_ttl)
            except queue.Empty:
                job = None
            with self._lock:
                self._idle -= 1
                if job is None:
                    self._threads.discard(me)
                    return
                self._pending -= 1
            fn, on_done = job
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn()
            except BaseException as exc:  # a tool must never take its thread down silently
                error = exc
            try:
                on_done(result, error)
            except Exception:
                log.exception("tool_runner_callback_failed")

    @property
    def thread_count(self) -> int:
        with self._lock:
            return len(self._threads)

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Stop idle threads; wait up to ``timeout`` for busy ones. True if all exited."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        import time

        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)
