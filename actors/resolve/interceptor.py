"""Deprecated import path: the resolve interceptor lives in :mod:`fore.actors.worker.machinery`.

It is the worker's machinery, so it moved beside the worker; its texts and
rules are in :mod:`fore.actors.resolve.forcing`. This module only re-exports
them for the importers not switched yet (``actors/speculation/gate.py``); delete
it, and its line in tests/project/layer_allowlist.txt, once none is left.
"""

from __future__ import annotations

from fore.actors.resolve.forcing import (
    RESOLVE,
    exhausted_text,
    rejects_forced_choice,
    reminder_text,
)
from fore.actors.worker.machinery import ResolveInterceptor

__all__ = [
    "RESOLVE",
    "ResolveInterceptor",
    "exhausted_text",
    "rejects_forced_choice",
    "reminder_text",
]
