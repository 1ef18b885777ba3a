"""The blocking lane: a bounded executor for work that must block.

Actor handlers never block a dispatcher thread: disk work, subprocess waits
and user hooks that may sleep run here, and their results come back to the
actor as a message. The lane is bounded so a burst of blocking work queues
instead of spawning unbounded threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class BlockingLane:
    """A named, bounded :class:`ThreadPoolExecutor` (threads start lazily)."""

    def __init__(
        self,
        max_workers: int,
        *,
        name: str = "fore-blocking",
        initializer: Callable[[], None] | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("the blocking lane needs at least one worker")
        self.max_workers = max_workers
        self._executor = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix=name, initializer=initializer
        )
        self._local = threading.local()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._executor.submit(fn, *args, **kwargs)

    def shutdown(self, *, wait: bool = True, cancel_pending: bool = True) -> None:
        self._executor.shutdown(wait=wait, cancel_futures=cancel_pending)
