"""The actor runtime under Fore, for code that builds its own actors.

``PooledActor`` keeps pykka's API (``tell``, ``ask``, proxies, ``on_start`` /
``on_stop`` / ``on_failure``) on a shared dispatcher instead of a thread per
actor; ``ActorSystem`` owns the dispatcher, timer, lanes and registry;
``Supervisor`` is OTP's, with ``ChildSpec`` children and ``Handle``\\ s that
survive restarts. See ``docs/architecture.md`` sections 1 and 2.
"""

from __future__ import annotations

from fore.actors.core import (
    ActorCrashed,
    ActorExit,
    ActorStopped,
    ActorSystem,
    ActorSystemClosed,
    AskTimeout,
    BlockingOnDispatcherError,
    ForeActor,
    PooledActor,
    PooledFuture,
    UnhandledMessageError,
    handles,
    shutdown_default_system,
    stop_now,
)
from fore.actors.core.system import current_system, default_system
from fore.messages.base import ControlMessage, Message
from fore.messages.runtime import ChildSpec, RestartType, StopNow, TreeSnapshot
from fore.supervision.handle import Handle
from fore.supervision.policy import Backoff, RestartIntensity
from fore.supervision.supervisor import ChildRejectedError, Supervisor, SupervisorIntensityError

__all__ = [
    "ActorCrashed",
    "ActorExit",
    "ActorStopped",
    "ActorSystem",
    "ActorSystemClosed",
    "AskTimeout",
    "Backoff",
    "BlockingOnDispatcherError",
    "ChildRejectedError",
    "ChildSpec",
    "ControlMessage",
    "ForeActor",
    "Handle",
    "Message",
    "PooledActor",
    "PooledFuture",
    "RestartIntensity",
    "RestartType",
    "StopNow",
    "Supervisor",
    "SupervisorIntensityError",
    "TreeSnapshot",
    "UnhandledMessageError",
    "current_system",
    "default_system",
    "handles",
    "shutdown_default_system",
    "stop_now",
]
