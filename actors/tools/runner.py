"""Threads that run tool calls, outside the dispatcher.

A tool may block for minutes or hang forever. The runner gives every running
call a thread of its own, reusing idle threads and letting threads idle for
``idle_ttl`` seconds exit. A call the pool gives up on (timeout, cancel) keeps
its thread until the tool returns; the pool reports the call at once but keeps
counting it against its caps as a *zombie* until this runner reports the
thread done (see :mod:`actors.tools.pool`), and bounds how many zombies one
session may have, so one session cannot fill the runner with stuck threads.

Two rules keep a submitted job from ever waiting without a thread:

* a thread whose idle wait times out exits only if the other idle threads
  cover every pending job -- otherwise a submit that counted it as idle just
  before it timed out would leave its job stranded in the queue;
* a thread counts as idle again as soon as its job has returned, *before* it
  reports the result, so a job submitted in reaction to that report (the
  pool's next call) can always use it.

Threads stuck in tools that never return are not reclaimed. When
``max_threads`` of them exist and none is free, :meth:`ThreadRunner.submit`
raises :class:`RunnerSaturated` instead of queueing a job no thread would
take: the pool turns that into an error result naming the cause.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from fore.actors.core.logs import get_logger
from fore.errors import RunnerSaturated

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["RunnerSaturated"]

log = get_logger(__name__)

Job = tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]


class ThreadRunner:
    """An elastic set of daemon threads (see module docs)."""

    def __init__(
        self, *, name: str = "fore-tool", idle_ttl: float = 30.0, max_threads: int = 512
    ) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
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
        """Run ``fn()`` on a runner thread, then ``on_done(result, error)`` on that thread.

        Raises :class:`RunnerSaturated` when every one of ``max_threads``
        threads is busy (in practice: stuck in calls that timed out).
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool runner is shut down")
            spawn = self._pending + 1 > self._idle
            if spawn and len(self._threads) >= self.max_threads:
                busy = len(self._threads) - self._idle
                log.warning("tool_runner_saturated", threads=len(self._threads), busy=busy)
                raise RunnerSaturated(
                    f"no tool thread is free: all {len(self._threads)} runner threads are busy "
                    f"(the limit is {self.max_threads}; threads stuck in calls that timed out "
                    "or were cancelled stay busy until their tool returns)"
                )
            self._pending += 1
            if spawn:
                self._counter += 1
                thread = threading.Thread(
                    target=self._loop, name=f"{self.name}-{self._counter}", daemon=True
                )
                self._threads.add(thread)
        self._jobs.put((fn, on_done))
        if spawn:
            thread.start()

    def _next_job(self) -> Job | None:
        """The next job (``None``: shut down); ``queue.Empty`` after ``idle_ttl`` idle seconds.

        A seam: tests replace it to make the idle timeout race a submit.
        """
        return self._jobs.get(timeout=self.idle_ttl)

    def _loop(self) -> None:
        me = threading.current_thread()
        with self._lock:
            self._idle += 1
        while True:
            try:
                job = self._next_job()
            except queue.Empty:
                with self._lock:
                    if self._pending > self._idle - 1:
                        continue  # a job counted on this thread: stay for it
                    self._idle -= 1
                    self._threads.discard(me)
                    return
            with self._lock:
                self._idle -= 1
                if job is None:
                    self._threads.discard(me)
                    return
                self._pending -= 1
            self._run(job)
            # An idle thread waits up to ``idle_ttl`` for its next job: it must
            # not keep the last one (its call, batch, results) alive meanwhile.
            del job

    def _run(self, job: Job) -> None:
        fn, on_done = job
        result: Any = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as exc:  # a tool must never take its thread down silently
            error = exc
        with self._lock:
            self._idle += 1  # free for the next job before the result is reported
        try:
            on_done(result, error)
        except Exception:
            log.exception("tool_runner_callback_failed")

    @property
    def thread_count(self) -> int:
        with self._lock:
            return len(self._threads)

    @property
    def busy_count(self) -> int:
        """Threads running a job (including ones stuck in tools that never return)."""
        with self._lock:
            return len(self._threads) - self._idle

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Stop idle threads; wait up to ``timeout`` for busy ones. True if all exited."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)
