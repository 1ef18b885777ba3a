"""Staged previews and the ``resolve`` tool.

``ResolveInterceptor``, the worker's machinery that forces ``resolve``, lives in
:mod:`fore.actors.worker.machinery`; its texts and the forced-choice rule are in
:mod:`fore.actors.resolve.forcing`.
"""

from __future__ import annotations

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
    "StalePreview",
    "StandingHandler",
]
