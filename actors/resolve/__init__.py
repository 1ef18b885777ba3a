"""Staged previews and the ``resolve`` tool."""

from fore.actors.resolve.interceptor import ResolveInterceptor
from fore.actors.resolve.pending import (
    MAX_FORCED_ATTEMPTS,
    MAX_REQUEUES,
    PendingAction,
    PendingActions,
    StandingHandler,
)
from fore.actors.resolve.preview import MultiEdit, StalePreview
from fore.actors.resolve.tool import NOTHING_PENDING, Resolve

__all__ = [
    "MAX_FORCED_ATTEMPTS",
    "MAX_REQUEUES",
    "NOTHING_PENDING",
    "MultiEdit",
    "PendingAction",
    "PendingActions",
    "Resolve",
    "ResolveInterceptor",
    "StalePreview",
    "StandingHandler",
]
