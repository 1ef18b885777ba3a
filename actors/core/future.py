"""Futures with deadlines and completion callbacks.

pykka's ``ThreadingFuture.get()`` without a timeout waits forever; in Fore every
ask has a deadline, so :class:`PooledFuture` turns ``get()`` into
``get(timeout=<time left until the deadline>)``. Completion callbacks let an
actor ask another actor without blocking its dispatcher thread: the callback
posts the answer back to the asking actor as a message.
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from pykka import ThreadingFuture, Timeout
from pykka._types import OptExcInfo

from actors.core.errors import AskTimeout

T = TypeVar("T")
log = structlog.get_logger(__name__)

DoneCallback = Callable[["PooledFuture[Any]"], None]


class PooledFuture(ThreadingFuture[T]):
    """A pykka future with an optional deadline and done-callbacks."""

    def __init__(self, deadline: float | None = None) -> None:
        super().__init__()
        self._deadline = deadline
        self._callbacks: list[DoneCallback] | None = None

    @property
    def deadline(self) -> float | None:
        """The ``time.monotonic()`` instant after which ``get()`` times out."""
        return self._deadline

    def done(self) -> bool:
        """Whether a value or an exception has been set."""
        return self._result is not None

    def get(self, *, timeout: float | None = None) -> T:
        if timeout is None and self._deadline is not None:
            remaining = max(0.0, self._deadline - time.monotonic())
            try:
                value: T = super().get(timeout=remaining)
                return value
            except Timeout:
                if self.done():
                    # Answered after all (just at the deadline), or the answer
                    # itself is a Timeout: return or raise the real answer.
                    answer: T = super().get(timeout=0)
                    return answer
                msg = "ask not answered before its deadline"
                raise AskTimeout(msg) from None
        result: T = super().get(timeout=timeout)
        return result

    def set(self, value: T | None = None) -> None:
        super().set(value)
        self._run_callbacks()

    def set_exception(self, exc_info: OptExcInfo | None = None) -> None:
        if exc_info is None:
            exc_info = sys.exc_info()
        super().set_exception(exc_info)
        self._run_callbacks()

    def try_set(self, value: Any = None) -> bool:
        """Set the value unless already set; return whether it was set."""
        try:
            self.set(value)
        except queue.Full:
            return False
        return True

    def try_set_exception(self, exc: BaseException) -> bool:
        """Set an exception unless already set; return whether it was set."""
        try:
            self.set_exception((type(exc), exc, exc.__traceback__))
        except queue.Full:
            return False
        return True

    def expire(self) -> bool:
        """Answer with :class:`AskTimeout` if nothing was set yet."""
        return self.try_set_exception(AskTimeout("ask not answered before its deadline"))

    def exception(self) -> BaseException | None:
        """The exception set on the future, if any (``None`` while pending)."""
        result = self._result
        if result is None or result.exc_info is None:
            return None
        exc_type, exc_value, _ = result.exc_info
        if exc_value is None and exc_type is not None:
            return exc_type()
        return exc_value

    def add_done_callback(self, fn: DoneCallback) -> None:
        """Call ``fn(self)`` once the future is done (at once if it already is).

        Callbacks run on the thread that completes the future; they must be
        quick and must not block (post a message and return).
        """
        with self._condition:
            if self._result is None:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        _safe_call(fn, self)

    def _run_callbacks(self) -> None:
        with self._condition:
            callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for fn in callbacks:
                _safe_call(fn, self)


def _safe_call(fn: DoneCallback, future: PooledFuture[Any]) -> None:
    # A callback is someone else's code running on whichever thread completes
    # the future -- usually a dispatcher thread in the middle of an actor's
    # slice. Anything escaping it, even SystemExit, would unwind that actor's
    # message loop, so it is logged and contained here.
    try:
        fn(future)
    except BaseException:
        log.exception("future_callback_failed", callback=repr(fn))
