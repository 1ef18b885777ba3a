"""The pooled actor runtime: mailboxes, dispatcher, futures, timer, blocking lane."""

from fore.actors.core.errors import (
    ActorCrashed,
    ActorStopped,
    ActorSystemClosed,
    AskTimeout,
    BlockingOnDispatcherError,
    UnhandledMessageError,
)
from fore.actors.core.future import PooledFuture
from fore.actors.core.handlers import handles
from fore.actors.core.logs import configure_logging
from fore.actors.core.pooled import ActorExit, ForeActor, PooledActor, stop_now, stop_now_all
from fore.actors.core.system import (
    ActorSystem,
    current_system,
    default_system,
    shutdown_default_system,
)
from fore.actors.core.timer import TimerHandle

__all__ = [
    "ActorCrashed",
    "ActorExit",
    "ActorStopped",
    "ActorSystem",
    "ActorSystemClosed",
    "AskTimeout",
    "BlockingOnDispatcherError",
    "ForeActor",
    "PooledActor",
    "PooledFuture",
    "TimerHandle",
    "UnhandledMessageError",
    "configure_logging",
    "current_system",
    "default_system",
    "handles",
    "shutdown_default_system",
    "stop_now",
    "stop_now_all",
]
