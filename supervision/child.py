"""A supervised child: its record, and the start of one incarnation of it.

The :class:`~supervision.supervisor.Supervisor` keeps one :class:`Child` per
child spec for the child's whole life -- across every restart -- with the
stable :class:`~supervision.handle.Handle` its callers hold; each start
(:meth:`Child.start`) makes a new incarnation (a new actor), watches it for
its exit and re-points the handle at it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pykka import ActorDeadError, ActorRef

from fore.actors.core.continuations import tell_quietly
from fore.actors.core.pooled import ActorExit, PooledActor
from fore.actors.core.system import ActorSystem
from fore.actors.core.timer import TimerHandle
from fore.messages.runtime import ChildExited, ChildSpec, ChildStatus
from fore.supervision.handle import Handle


@dataclass(eq=False)
class Child:
    """One child as its supervisor knows it, across its incarnations."""

    spec: ChildSpec
    handle: Handle[Any]
    ref: ActorRef[Any] | None = None
    status: ChildStatus = ChildStatus.STARTING
    restarts: int = 0
    consecutive: int = 0
    on_stopped: Callable[[], None] | None = None
    stop_timer: TimerHandle | None = None
    backoff_waited: bool = False
    last_start: float = 0.0
    start_error: str | None = None
    """Why the last start failed (``None`` after a successful one)."""
    rejected: bool = False
    """The last start returned something that cannot be supervised: never retried."""

    @property
    def urn(self) -> str | None:
        return None if self.ref is None else self.ref.actor_urn

    def cancel_timers(self) -> None:
        if self.stop_timer is not None:
            self.stop_timer.cancel()
        self.stop_timer = None

    def start(self, system: ActorSystem, supervisor: ActorRef[Any], log: Any) -> bool:
        """Start one incarnation; False (with ``start_error``) if that failed.

        Anything the start function raises -- ``SystemExit`` included -- is a
        failed start of that child, never a crash of its supervisor. A start
        that returns anything but a pooled actor's ref is *rejected*
        (``rejected``): what it started is stopped, and retrying would only
        start another one. The new actor's exit is told to ``supervisor`` as a
        :class:`~messages.runtime.ChildExited`.
        """
        self.last_start = time.monotonic()
        self.start_error = None
        self.rejected = False
        try:
            with system.activated():
                ref = self.spec.start()
        except BaseException as exc:
            self.start_error = f"{type(exc).__name__}: {exc}"
            log.error("child_start_failed", child=self.spec.id, error=repr(exc))
            return False
        actor = ref._actor_weakref() if isinstance(ref, ActorRef) else None
        if not isinstance(actor, PooledActor):
            got = type(actor).__name__ if isinstance(ref, ActorRef) else type(ref).__name__
            self.start_error = (
                f"child {self.spec.id!r}: start() must return the ActorRef of a "
                f"PooledActor (only those can be supervised), got {got}"
            )
            self.rejected = True
            log.error("child_not_pooled", child=self.spec.id, got=got)
            if isinstance(ref, ActorRef):
                try:
                    ref.stop(block=False)  # never leave what it started running
                except ActorDeadError:
                    pass
            return False
        child_id = self.spec.id
        handle = self.handle

        def watcher(record: ActorExit) -> None:
            handle.on_actor_exit(record)
            error = record.error
            tell_quietly(
                supervisor,
                ChildExited(
                    child_id=child_id,
                    actor_urn=record.ref.actor_urn,
                    failed=record.failed,
                    killed=record.killed,
                    error=None if error is None else f"{type(error).__name__}: {error}",
                ),
            )

        if not actor.add_exit_watcher(watcher):
            self.start_error = "it exited before it could be watched (on_start failed)"
            return False
        # Watch first, then re-point: an exit in between is reported to us as a
        # ChildExited for this incarnation, and the handle keeps its mail.
        self.ref = ref
        self.status = ChildStatus.RUNNING
        handle.repoint(ref)
        return True


def exited(ref: ActorRef[Any]) -> bool:
    """Whether the actor behind ``ref`` has fully exited (not merely begun stopping).

    ``ref.is_alive()`` turns False as soon as an actor *starts* stopping or
    failing, before its ``on_stop``/``on_failure`` ran and before its queued
    mail was handed to its handle; only the exit itself ends a child.
    """
    actor = ref._actor_weakref()
    return not isinstance(actor, PooledActor) or actor.has_exited
