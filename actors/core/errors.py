"""Errors the pooled runtime raises or answers asks with."""

from __future__ import annotations

from fore.errors import (
    ActorCrashed,
    ActorStopped,
    ActorSystemClosed,
    AskTimeout,
    BlockingOnDispatcherError,
    UnhandledMessageError,
)

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = [
    "ActorCrashed",
    "ActorStopped",
    "ActorSystemClosed",
    "AskTimeout",
    "BlockingOnDispatcherError",
    "UnhandledMessageError",
]
