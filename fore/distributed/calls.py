"""A call to a shard, and what its failure means to the caller.

Every call the caller's process makes to a shard -- a session's submit or
keystroke, the monitor's load report, an open, a close -- is a Ray actor
method call, and fails the same few ways: the shard raised (its exception is
the caller's), the shard does not host the session any more (it was
restarted: :class:`_NotHere`), or the shard's process is gone or unreachable
(:class:`_Died`). This module makes the call (:func:`method`: which of the
shard's event loops runs it) and reads its answer (:func:`result` blocking,
:func:`aresult` on an asyncio loop), with those failures translated once for
every kind of caller. What a failure means for a session (a move, a
``ShardLost``) is :class:`~fore.distributed.session.RemoteSession`'s business.
"""

from __future__ import annotations

from typing import Any

from fore.actors.core.errors import AskTimeout
from fore.actors.core.logs import get_logger
from fore.errors import SessionNotHere

log = get_logger(__name__)

__all__ = [
    "CONTROL_CONCURRENCY",
    "CONTROL_GROUP",
    "CONTROL_METHODS",
    "aresult",
    "call_error",
    "cancel",
    "method",
    "result",
    "withdraw",
]

CONTROL_GROUP = "control"
"""The shard's Ray concurrency group of the calls a user waits on with a key pressed."""
CONTROL_METHODS = frozenset({"keystroke", "cancel", "accept", "withdraw", "status"})
"""Shard methods run in :data:`CONTROL_GROUP`: an event loop (and thread) of their own in
the shard, so a keystroke, a Tab or a load report never waits behind the default loop's
backlog of submits, asks and event batches. Ray does not order an async actor's calls
anyway (not even one caller's), so nothing is lost by the second loop."""
CONTROL_CONCURRENCY = 1_000
"""Control calls a shard runs at once (keystrokes, Tabs, cancels, load reports)."""


def method(handle: Any, name: str) -> Any:
    """``handle.<name>``, in the control group for :data:`CONTROL_METHODS`."""
    bound = getattr(handle, name)
    if name in CONTROL_METHODS:
        return bound.options(concurrency_group=CONTROL_GROUP)
    return bound


class _NotHere(Exception):
    """The shard answered that it does not host the session (it was restarted)."""


class _Died(Exception):
    """The shard died or is unreachable."""

    def __init__(self, detail: str, *, restarting: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.restarting = restarting
        """Ray is restarting the shard (its old process is gone either way)."""


def result(ref: Any, timeout: float) -> Any:
    """``ray.get(ref)``, failures as Fore's: the shard's exception, ``_Died``, ``_NotHere``.

    ``timeout`` 0 reads an answer known to be there (Ray's own timeout error
    then, as it is); otherwise a late answer is :class:`AskTimeout`.
    """
    import ray
    from ray import exceptions as rex

    try:
        return ray.get(ref, timeout=timeout)
    except rex.GetTimeoutError:
        if timeout <= 0:
            raise
        raise AskTimeout("the shard did not answer before the call's deadline") from None
    except _call_failures() as exc:
        error = call_error(exc)
        if error is None:
            raise
        raise error from None


async def aresult(ref: Any) -> Any:
    """:func:`result` awaited on the caller's asyncio loop (a Ray ref is awaitable)."""
    try:
        return await ref
    except _call_failures() as exc:
        error = call_error(exc)
        if error is None:
            raise
        raise error from None


def cancel(ref: Any) -> None:
    """Cancel a call (``ray.cancel``): one the shard has not started never runs, a running
    one's coroutine gets ``asyncio.CancelledError`` there. A call that has ended, or a
    shard that is gone, has nothing left to cancel: that is logged, never raised."""
    import ray

    try:
        ray.cancel(ref)
    except Exception as exc:
        log.debug("shard_call_cancel_failed", error=repr(exc))


def withdraw(handle: Any, session_id: str, seq: int) -> None:
    """Tell a shard that input ``seq`` of a session will never come (its call was
    cancelled before it ran there: ``ShardServer.withdraw``), so the inputs after it
    need not wait for it. Fire and forget: a shard that is gone has nothing held."""
    try:
        method(handle, "withdraw").remote(session_id, seq)
    except Exception as exc:
        log.debug("shard_withdraw_failed", session=session_id, seq=seq, error=repr(exc))


def _call_failures() -> tuple[type[BaseException], ...]:
    """The Ray errors of a call that :func:`call_error` translates (Ray imported
    only once a call has failed: the ``except`` clause evaluates this then)."""
    from ray import exceptions as rex

    return (rex.RayTaskError, rex.RayActorError, rex.ObjectLostError, rex.OwnerDiedError)


def call_error(exc: BaseException) -> Exception | None:
    """A failed call's Ray error as what the caller sees (``None``: re-raise it as is).

    The shard's own exception is raised as itself (``SessionNotHere`` as
    ``_NotHere``: the session moved); a shard that died or whose result is lost
    is ``_Died`` (``restarting`` when Ray says it is coming back). Shared by the
    blocking and the async result paths.
    """
    from ray import exceptions as rex

    if isinstance(exc, rex.RayTaskError):
        cause = exc.cause
        if isinstance(cause, SessionNotHere):
            return _NotHere(str(cause))
        if isinstance(cause, Exception):
            return cause
        return None
    restarting = isinstance(exc, rex.ActorUnavailableError)
    return _Died(_one_line(exc), restarting=restarting)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__
