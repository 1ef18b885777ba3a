"""Staged previews and the ``resolve`` tool.

``ResolveInterceptor`` (the worker's machinery that forces ``resolve``) lives
in :mod:`fore.actors.worker.machinery`; it is still importable from here,
lazily -- an eager import would run upwards into the worker at import time and
make a cycle (the machinery imports :mod:`fore.actors.resolve.pending`). Delete
the re-export, and its line in tests/project/layer_allowlist.txt, once
``supervision/runtime.py`` imports it from the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fore.actors.resolve.pending import (
    MAX_FORCED_ATTEMPTS,
    MAX_REQUEUES,
    PendingAction,
    PendingActions,
    StandingHandler,
)
from fore.actors.resolve.preview import MultiEdit, StalePreview
from fore.actors.resolve.tool import NOTHING_PENDING, Resolve

if TYPE_CHECKING:
    from fore.actors.worker.machinery import ResolveInterceptor

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


def __getattr__(name: str) -> object:
    """``ResolveInterceptor``, imported on first use (deprecated path, see the module docs)."""
    if name == "ResolveInterceptor":
        from fore.actors.worker.machinery import ResolveInterceptor

        return ResolveInterceptor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
