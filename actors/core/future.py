"""Futures with deadlines and completion callbacks.

pykka's ``ThreadingFuture.get()`` without a timeout waits forever; in Fore every
ask has a deadline, so :class:`PooledFuture` turns ``get()`` into
``get(timeout=<time left until the deadline>)``. Completion callbacks let an
actor ask another actor without blocking its dispatcher thread: the callback
posts the answer back to the asking actor as a message.

A blocking ``get()`` of a pending future on a dispatcher thread raises
:class:`~actors.core.errors.BlockingOnDispatcherError` instead of waiting: the
thread serves many actors, and the answer may have to come from one of them.
"""

from __future__ import annotations

import math
import queue
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from pykka import ThreadingFuture, Timeout
from pykka._types import OptExcInfo

from fore.actors.core.dispatcher import on_a_dispatcher_thread
from fore.actors.core.errors import AskTimeout, BlockingOnDispatcherError

T = TypeVar("T")
log = structlog.get_logger(__name__)

DoneCallback = Callable[["PooledFuture[Any]"], None]


def check_ask_timeout(value: object, what: str) -> float:
    """``value`` as an ask deadline in seconds, or a clear error.

    Every ask has a deadline: ``None`` (pykka's "wait forever"), a
    non-number, zero, a negative number, NaN or infinity is refused here, where
    the deadline is configured, instead of turning into a wait that never ends.
    """
    if value is None:
        raise TypeError(
            f"{what} is None: every ask needs a deadline (a number of seconds > 0); "
            "waiting forever is not supported"
        )
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{what} must be a finite number of seconds > 0, not {value!r}")
    return seconds


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
        if (
            self._result is None
            and self._get_hook is None
            and (timeout is None or timeout > 0)
            and on_a_dispatcher_thread()
        ):
            raise BlockingOnDispatcherError(
                "a handler must not wait on a pending future: it would hold one of the "
                "runtime's few dispatcher threads (and deadlock if the answer must come "
                "from an actor queued behind it); use ask_then(), add_done_callback() or "
                "run_blocking() instead"
            )
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
