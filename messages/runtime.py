"""Runtime and supervision messages: control mail, child exits, tree snapshots."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from fore.messages.address import Ask
from fore.messages.base import ControlMessage, Message


class StopNow(ControlMessage):
    """Stop the actor ahead of its queued mail; queued asks get ActorStopped."""


class RestartType(StrEnum):
    """When a supervisor restarts a child (OTP semantics)."""

    PERMANENT = "permanent"  # always restarted
    TRANSIENT = "transient"  # restarted only after an abnormal exit
    TEMPORARY = "temporary"  # never restarted


class Strategy(StrEnum):
    """Which children a supervisor restarts when one of them fails."""

    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"


class ChildExited(Message):
    """A supervised child stopped, failed or was killed (sent to its supervisor)."""

    child_id: str
    actor_urn: str
    failed: bool
    killed: bool = False
    error: str | None = None


class ChildStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    STOPPED = "stopped"


class ChildSnapshot(Message):
    """One node of the supervision tree, as seen at one instant."""

    id: str
    kind: Literal["worker", "supervisor"]
    actor_class: str
    actor_urn: str | None
    status: ChildStatus
    restart: RestartType
    restarts: int = 0
    children: tuple[ChildSnapshot, ...] = ()


class TreeSnapshot(Message):
    """A typed snapshot of a supervision tree, for debugging and tests."""

    id: str
    strategy: Strategy
    status: Literal["running", "shutting_down", "stopped", "failed"]
    restarts: int = 0
    children: tuple[ChildSnapshot, ...] = Field(default=())


class WhichChildren(Ask[TreeSnapshot | None]):
    """Ask a supervisor for its :class:`TreeSnapshot`."""


class Shutdown(Message):
    """Ask a supervisor for an orderly shutdown of its children (reverse start order)."""


class StopChild(Message):
    """Ask a supervisor to stop one child for good (it will not be restarted)."""

    child_id: str


class ChildSpec(Message):
    """How a supervisor starts and treats one child.

    ``start`` builds the child and returns its ``ActorRef`` (a pooled actor).
    It is an in-process callable, so a ChildSpec does not round-trip through
    JSON -- the one exception in :mod:`messages`, kept because a supervisor
    must be told *how* to start a child.
    """

    id: str = Field(min_length=1)
    start: Callable[[], Any]
    restart: RestartType = RestartType.PERMANENT
    shutdown_timeout: float = Field(default=5.0, gt=0)
    kind: Literal["worker", "supervisor"] = "worker"


class StartChild(Message):
    """Ask a supervisor to start (and from then on supervise) one more child."""

    spec: ChildSpec


class GetChild(Message):
    """Ask a supervisor for the stable handle of one child (``None`` if unknown)."""

    child_id: str
