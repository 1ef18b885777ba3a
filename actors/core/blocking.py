"""Blocking lanes: bounded thread pools for work that must block.

Actor handlers never block a dispatcher thread: disk work, subprocess waits
and user hooks that may sleep run on a lane, and their results come back to
the actor as a message. A lane is bounded, so a burst of blocking work queues
instead of spawning unbounded threads; its threads start lazily.

Why not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined at
interpreter exit and by ``shutdown(wait=True)`` with no deadline, so one user
hook that never returns (a confirmation prompt nobody answers, a hung
network call) would hang ``Runtime.close()`` and then the process's exit.
Here every wait has a deadline: :meth:`BlockingLane.shutdown` waits at most
``timeout`` seconds and then abandons what still runs (daemon threads, which
never hold up the exit), reporting whether the lane went down cleanly.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class BlockingLane:
    """A named, bounded pool of daemon threads (started lazily) with a ``Future`` API."""

    def __init__(
        self,
        max_workers: int,
        *,
        name: str = "fore-blocking",
        initializer: Callable[[], None] | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("a blocking lane needs at least one worker")
        self.max_workers = max_workers
        self.name = name
        self._initializer = initializer
        self._cond = threading.Condition()
        self._jobs: deque[_Job] = deque()
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._shutdown = False
        self._ids = itertools.count()

    # -- running work -------------------------------------------------------------

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; raises ``RuntimeError`` once the lane is shut down."""
        future: Future[T] = Future()
        with self._cond:
            if self._shutdown:
                raise RuntimeError(f"blocking lane {self.name!r} is shut down")
            self._jobs.append((future, fn, args, kwargs))
            if self._idle > 0:
                self._cond.notify()
            # More jobs than idle threads (an idle thread counts until it has
            # woken up): one more thread, so no job waits behind a slow one
            # while the lane has room.
            if len(self._jobs) > self._idle and len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._work, name=f"{self.name}_{next(self._ids)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
        return future

    def _work(self) -> None:
        if self._initializer is not None:
            self._initializer()
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._jobs and not self._shutdown:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._jobs:  # shut down and drained
                    self._threads.discard(me)
                    self._cond.notify_all()
                    return
                future, fn, args, kwargs = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller gets it; the lane thread lives on
                future.set_exception(exc)
            else:
                future.set_result(result)
            del future, fn, args, kwargs  # no reference to a finished job's data

    # -- introspection ------------------------------------------------------------

    @property
    def threads(self) -> int:
        """Threads the lane has started and that have not exited."""
        with self._cond:
            return len(self._threads)

    @property
    def queued(self) -> int:
        """Jobs waiting for a thread."""
        with self._cond:
            return len(self._jobs)

    # -- shutting down --------------------------------------------------------------

    def shutdown(
        self, *, wait: bool = True, cancel_pending: bool = True, timeout: float = 10.0
    ) -> bool:
        """Refuse new work; optionally cancel what is queued and wait for the threads.

        Waits at most ``timeout`` seconds; returns whether every thread ended
        in time. A thread still running user code after that is abandoned (it
        is a daemon: it cannot hold up the interpreter's exit).
        """
        with self._cond:
            self._shutdown = True
            if cancel_pending:
                while self._jobs:
                    self._jobs.popleft()[0].cancel()
            self._cond.notify_all()
            if not wait:
                return not self._threads
            deadline = time.monotonic() + max(0.0, timeout)
            me = threading.current_thread()
            while self._threads - {me}:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True
