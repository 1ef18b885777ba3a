"""The event loop the LLM layer runs on: uvloop when installed, else asyncio's.

uvloop (libuv, in C) runs the same asyncio programs with less interpreter
work per I/O event; the LLM thread handles one event per streamed chunk of
every concurrent answer, so that work is what it spends most of its time on
under load (``fore bench``: about 8 % less CPU per round for the whole
process, and lower latency, measured here). Falls back to the standard loop
where uvloop is not available (Windows, or a build without it).

libuv allocates one process-wide pipe (its signal pipe) the first time any
loop is created; it lives as long as the process, like an import.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a dependency where it builds
    uvloop = None  # type: ignore[assignment]

__all__ = ["new_event_loop", "run", "uses_uvloop"]


def uses_uvloop() -> bool:
    return uvloop is not None


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop (not set as the thread's current loop)."""
    if uvloop is not None:
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on :func:`new_event_loop`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)
