"""How a pooled actor's handler waits without blocking: continuations.

A handler must not block its dispatcher thread, so everything that takes
time comes back to the actor as mail, and the code that acts on it runs in
the actor's context like any handler:

* :meth:`Continuations.post` / :meth:`Continuations.post_urgent` -- a call
  the actor makes to itself later (``post_urgent`` on the control lane,
  ahead of queued mail: a cancel that must not wait behind its work);
* :meth:`Continuations.run_blocking` -- blocking work on the blocking lane,
  its outcome delivered back;
* :meth:`Continuations.ask_then` / :meth:`Continuations.ask_typed` -- an ask
  of another actor whose answer (or error, or deadline) is delivered back;
* :meth:`Continuations.send_after` / :meth:`Continuations.call_after` -- the
  runtime's single timer thread.

A mixin of :class:`~actors.core.pooled.PooledActor` (not used alone): it
reads the actor's ref, system and logger, declared below. Kept apart from
the actor's message loop and lifecycle (:mod:`actors.core.pooled`) because
it is what a handler *uses*, not how the actor runs. :func:`tell_quietly`,
the one "tell and swallow ActorDeadError" helper, lives here because
``post`` and ``send_after`` are built on it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from concurrent.futures import Future as ConcurrentFuture
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

from pydantic import ConfigDict
from pykka import ActorDeadError
from typing_extensions import deprecated

from fore.actors.core.cancel import unless_cancelled
from fore.actors.core.errors import ActorCrashed
from fore.actors.core.future import PooledFuture, check_ask_timeout
from fore.messages.base import ControlMessage

if TYPE_CHECKING:
    from pykka import ActorRef

    from fore.actors.core.cancel import CancelScope
    from fore.actors.core.system import ActorSystem
    from fore.actors.core.timer import TimerHandle
    from fore.messages.address import Address, Recipient, Replying

T = TypeVar("T")
M = TypeVar("M")
R = TypeVar("R")


class _Call:
    """A continuation an actor posts to itself (blocking results, timers, asks).

    Private to one actor; it never crosses actor boundaries, which is why it is
    not one of the pydantic messages in :mod:`messages`.
    """

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args


class _UrgentCall(ControlMessage):
    """A :class:`_Call` on the control lane (:meth:`PooledActor.post_urgent`).

    A pydantic control message only because the mailbox routes by
    ``isinstance(message, ControlMessage)``; it is built with
    ``model_construct`` (no validation) and, like ``_Call``, never leaves
    its actor.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    fn: Any
    args: tuple[Any, ...]


def is_private_call(message: object) -> bool:
    """Whether ``message`` is a continuation an actor posted to itself (:class:`_Call`).

    Such a call belongs to the incarnation that posted it (its callable is bound
    to that object's state): a supervisor's handle never carries it over to the
    next incarnation.
    """
    return isinstance(message, _Call | _UrgentCall)


def tell_quietly(recipient: Recipient[M], message: M) -> bool:
    """Tell ``message``; False (instead of ``ActorDeadError``) if the recipient is gone.

    For notices whose recipient may legitimately have exited (a subscriber, a
    speculation's supervisor, a reply to an asker that gave up): the one
    helper for the "tell and swallow ActorDeadError" copies around Fore.
    """
    try:
        recipient.tell(message)
    except ActorDeadError:
        return False
    return True


class Continuations:
    """Posting to oneself, the blocking lane, asks and timers (a mixin of ``PooledActor``)."""

    # The actor's state these methods use (set up by PooledActor).
    default_ask_timeout: ClassVar[float]
    _fore_system: ActorSystem

    if TYPE_CHECKING:  # PooledActor's members these methods use

        @property
        def actor_ref(self) -> ActorRef[Any]: ...

        @property
        def log(self) -> Any: ...

    def post(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn(*args)`` later, in this actor's context; False if it is gone."""
        return tell_quietly(self.actor_ref, _Call(fn, args))

    def post_urgent(self, fn: Callable[..., object], *args: object) -> bool:
        """Like :meth:`post`, on the control lane: ``fn(*args)`` overtakes queued mail.

        For a cancel that must not wait behind the work it cancels (a
        :class:`~actors.core.cancel.CancelScope` callback posts the actor's
        cancel handler this way). Safe from any thread; False if the actor is
        gone.
        """
        return tell_quietly(self.actor_ref, _UrgentCall.model_construct(fn=fn, args=args))

    def run_blocking(
        self,
        fn: Callable[..., T],
        *args: Any,
        then: Callable[[T], Any] | None = None,
        on_error: Callable[[BaseException], Any] | None = None,
        scope: CancelScope | None = None,
    ) -> ConcurrentFuture[T]:
        """Run ``fn(*args)`` on the blocking lane; deliver the outcome as a message.

        ``then(result)`` or ``on_error(exc)`` runs in this actor's context. With
        no ``on_error`` -- whether or not ``then`` is given -- an exception
        raised by ``fn`` fails the actor like a crashing handler, so an error is
        never silently lost (if the actor is gone by then, it is logged).
        Cancelled work (``future.cancel()``, or the lane shutting down) goes to
        ``on_error`` as :class:`ActorCrashed`; without ``on_error`` it is logged.

        With ``scope`` the work belongs to it, as an ask under a scope does
        (:meth:`ask_typed`): a job whose scope is cancelled before it starts
        does not run (its future raises :class:`~fore.errors.Cancelled`), and
        an outcome that finds the scope cancelled when it reaches this actor is
        dropped -- neither ``then`` nor ``on_error`` runs. So a continuation
        never acts for work that was called off while it waited on the lane.
        """
        job: Callable[..., T] = (
            fn if scope is None else functools.partial(unless_cancelled, scope, fn)
        )
        future = self._fore_system.blocking.submit(job, *args)
        future.add_done_callback(
            functools.partial(
                self._fore_blocking_settled, then=then, on_error=on_error, scope=scope
            )
        )
        return future

    def _fore_blocking_settled(
        self,
        future: ConcurrentFuture[Any],
        *,
        then: Callable[[Any], Any] | None,
        on_error: Callable[[BaseException], Any] | None,
        scope: CancelScope | None = None,
    ) -> None:
        # Runs on the blocking-lane thread: hand the outcome to the actor,
        # unless there is nothing to act on (a success nobody asked to see, or
        # work whose scope was cancelled: its outcome would be dropped there).
        if scope is not None and scope.cancel_called:
            self.log.debug("blocking_outcome_dropped", reason=scope.reason)
            return
        error = None if future.cancelled() else future.exception()
        if then is None and on_error is None and error is None and not future.cancelled():
            return
        posted = self.post(self._fore_blocking_done, future, then, on_error, scope)
        if not posted and error is not None:
            self.log.warning("blocking_error_after_exit", error=repr(error))

    def _fore_blocking_done(
        self,
        future: ConcurrentFuture[Any],
        then: Callable[[Any], Any] | None,
        on_error: Callable[[BaseException], Any] | None,
        scope: CancelScope | None = None,
    ) -> None:
        if scope is not None and scope.cancel_called:
            # Called off while the outcome was on its way here.
            self.log.debug("blocking_outcome_dropped", reason=scope.reason)
            return
        if future.cancelled():
            if on_error is None:
                self.log.warning("blocking_work_cancelled")
                return
            error: BaseException | None = ActorCrashed("blocking work was cancelled")
        else:
            error = future.exception()
        if error is not None:
            if on_error is None:
                raise error
            on_error(error)
        elif then is not None:
            then(future.result())

    @overload
    def ask_then(
        self,
        target: Address[M],
        message: Replying[M, R],
        then: Callable[[R], object],
        on_error: Callable[[BaseException], object] | None = None,
        *,
        timeout: float | None = None,
    ) -> PooledFuture[R]: ...

    @overload
    @deprecated(
        "ask_then of a message that declares no answer type (make it an Ask[R]) -- or whose "
        "Ask[R] answer the target or `then` does not take"
    )
    def ask_then(
        self,
        target: Any,
        message: Any,
        then: Callable[[Any], Any],
        on_error: Callable[[BaseException], Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> PooledFuture[Any]: ...

    def ask_then(
        self,
        target: Any,
        message: Any,
        then: Callable[[Any], Any],
        on_error: Callable[[BaseException], Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> PooledFuture[Any]:
        """Ask ``target`` without blocking; ``then(answer)`` runs here when it comes.

        ``target`` is an ``ActorRef`` or a supervision handle of a pooled
        actor. The answer always comes: at the latest the ask's deadline
        (``timeout`` or the target's default) delivers ``AskTimeout`` to
        ``on_error`` (or fails this actor when there is none).

        Typed like :meth:`ask_typed`: ``message`` is an
        :class:`~fore.messages.address.Ask` ``[R]`` that ``target`` accepts,
        ``then`` takes its ``R``, and the future carries it. The second,
        untyped overload is kept for the askers whose messages do not declare
        their answer yet (a host's own actors); it is marked deprecated, and
        mypy reports every call that falls to it, a mistyped typed ask
        included. Every Fore request message declares its answer.
        """
        if timeout is not None:
            timeout = check_ask_timeout(timeout, "ask_then(timeout=...)")
        future: PooledFuture[Any] = target.ask(message, block=False)
        if not isinstance(future, PooledFuture):
            raise TypeError(
                f"ask_then needs a pooled actor's ref or handle, not {target!r} "
                "(its futures cannot call back; ask a plain pykka actor from the blocking lane)"
            )
        deadline = future.deadline
        if timeout is not None:
            deadline = time.monotonic() + timeout
        elif deadline is None:  # not a pooled target's future: our own default bounds it
            deadline = time.monotonic() + type(self).default_ask_timeout
        timer: TimerHandle | None = None
        if not future.done():
            timer = self._fore_system.timer.call_later(deadline - time.monotonic(), future.expire)

        def delivered(f: PooledFuture[Any]) -> None:
            if timer is not None:
                timer.cancel()
            self.post(self._fore_ask_done, f, then, on_error)

        future.add_done_callback(delivered)
        return future

    def _fore_ask_done(
        self,
        future: PooledFuture[Any],
        then: Callable[[Any], Any],
        on_error: Callable[[BaseException], Any] | None,
    ) -> None:
        error = future.exception()
        if error is not None:
            if on_error is None:
                raise error
            on_error(error)
        else:
            then(future.get(timeout=0))

    def ask_typed(
        self,
        target: Address[M],
        message: Replying[M, R],
        then: Callable[[R], object],
        on_error: Callable[[BaseException], object] | None = None,
        *,
        timeout: float | None = None,
        scope: CancelScope | None = None,
    ) -> PooledFuture[R]:
        """:meth:`ask_then`, checked by mypy: ``then`` takes the answer the message declares.

        ``message`` is a request (an :class:`~messages.address.Ask` ``[R]``
        subclass) that ``target`` accepts, and ``then`` takes its ``R``; a
        mismatch is a type error instead of a continuation that misreads
        its answer. With ``scope``, an answer (or error) that finds the scope
        cancelled when it reaches this actor is dropped: the work it belonged
        to has been called off, and its continuation must not act on it.
        """
        if scope is None:
            return self.ask_then(target, message, then, on_error, timeout=timeout)
        name = type(message).__name__
        return self.ask_then(
            target,
            message,
            functools.partial(self._fore_scoped_answer, scope, name, then),
            functools.partial(self._fore_scoped_error, scope, name, on_error),
            timeout=timeout,
        )

    def _fore_scoped_answer(
        self, scope: CancelScope, name: str, then: Callable[[Any], object], answer: Any
    ) -> None:
        if scope.cancel_called:
            self.log.debug("answer_dropped", message_type=name, reason=scope.reason)
            return
        then(answer)

    def _fore_scoped_error(
        self,
        scope: CancelScope,
        name: str,
        on_error: Callable[[BaseException], object] | None,
        error: BaseException,
    ) -> None:
        if scope.cancel_called:
            self.log.debug(
                "answer_dropped", message_type=name, reason=scope.reason, error=repr(error)
            )
            return
        if on_error is None:
            raise error
        on_error(error)

    def send_after(self, delay: float, message: Any) -> TimerHandle:
        """Tell this actor ``message`` after ``delay`` seconds (cancellable)."""
        return self._fore_system.timer.call_later(delay, tell_quietly, self.actor_ref, message)

    def call_after(self, delay: float, fn: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run ``fn(*args)`` in this actor's context after ``delay`` seconds."""
        return self._fore_system.timer.call_later(delay, self.post, fn, *args)
