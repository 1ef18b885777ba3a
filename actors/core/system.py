"""The actor system: dispatcher, timer, blocking lane and registry, owned together.

A :class:`~supervision.Runtime` owns one system and shuts it down completely on
close (no thread survives), which is what lets the load benchmark report zero
leaked threads. Code that starts pooled actors without a runtime (scripts,
pykka-style tests) gets the lazily created process default system.

Which system a new actor joins: the one bound to the current thread (every
dispatcher and blocking-lane thread is bound to its own system, so an actor
started from a handler joins its parent's system), else the one activated with
``with system.activated():``, else the process default.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from fore.actors.core.blocking import BlockingLane
from fore.actors.core.dispatcher import Dispatcher
from fore.actors.core.logs import configure_logging
from fore.actors.core.registry import Registry
from fore.actors.core.timer import Timer

log = structlog.get_logger(__name__)

_tls = threading.local()
_default_lock = threading.Lock()
_default: ActorSystem | None = None


def _default_dispatcher_threads() -> int:
    return max(4, min(8, 2 * (os.cpu_count() or 2)))


class ActorSystem:
    """Threads and bookkeeping shared by a set of pooled actors."""

    def __init__(
        self,
        *,
        name: str = "fore",
        dispatcher_threads: int | None = None,
        throughput: int = 32,
        blocking_threads: int = 16,
        hook_threads: int = 16,
    ) -> None:
        # Idempotent: a bare system (scripts, tests, the process default) logs
        # through the same configured structlog as a Runtime does.
        configure_logging()
        self.name = name
        self.registry = Registry()
        self.timer = Timer(name=f"{name}-timer")
        self.blocking = BlockingLane(
            blocking_threads, name=f"{name}-blocking", initializer=self._bind_thread
        )
        # User hooks get a lane of their own: a hook may wait on a person (a
        # confirmation prompt) for minutes, and sixteen such waits must not
        # stall the runtime's own blocking work (disk, file references,
        # overlay removal) for every other session.
        self.hooks = BlockingLane(hook_threads, name=f"{name}-hooks", initializer=self._bind_thread)
        self.dispatcher = Dispatcher(
            threads=dispatcher_threads or _default_dispatcher_threads(),
            throughput=throughput,
            name=f"{name}-dispatch",
            on_thread_start=self._bind_thread,
        )
        self._closed = False
        self._closing = False
        self.alert_sink: Any = None
        """Where runtime-level alerts go (set by the Runtime once its sink runs)."""

    def _bind_thread(self) -> None:
        _tls.system = self

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def closing(self) -> bool:
        """Whether :meth:`shutdown` has begun: no new actor may start any more."""
        return self._closing

    @contextmanager
    def activated(self) -> Iterator[ActorSystem]:
        """Make this the system for actors started on the current thread."""
        previous = getattr(_tls, "system", None)
        _tls.system = self
        try:
            yield self
        finally:
            _tls.system = previous

    def shutdown(self, timeout: float = 10.0) -> bool:
        """Stop every live actor, then every thread; return whether all went cleanly.

        The registry is closed first, so an actor started from now on (by a
        handler or another thread) is refused with
        :class:`~actors.core.errors.ActorSystemClosed` instead of being left
        on a dispatcher that is about to lose its threads.
        """
        if self._closed or self._closing:
            return True
        from fore.actors.core.pooled import stop_now_all

        self._closing = True
        self.registry.close(f"actor system {self.name!r} is shutting down")
        deadline = time.monotonic() + timeout
        stop_now_all(self.registry.get_all(), deadline=deadline)
        self._closed = True
        clean = self.dispatcher.shutdown(max(0.1, deadline - time.monotonic()))
        self.timer.shutdown(max(0.1, deadline - time.monotonic()))
        # Lane work that outlives the deadline (a hung hook) is abandoned on
        # daemon threads rather than waited for: shutdown has a deadline too.
        clean &= self.blocking.shutdown(timeout=max(0.1, deadline - time.monotonic()))
        clean &= self.hooks.shutdown(timeout=max(0.1, deadline - time.monotonic()))
        if getattr(_tls, "system", None) is self:
            _tls.system = None
        if not clean:
            log.warning("actor_system_shutdown_unclean", system=self.name)
        return clean


def current_system() -> ActorSystem:
    """The system new pooled actors join on this thread (see module docs)."""
    system: ActorSystem | None = getattr(_tls, "system", None)
    if system is not None and not system.closed:
        return system
    return default_system()


def default_system() -> ActorSystem:
    """The process default system, created on first use (and again after shutdown)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = ActorSystem(name="fore-default")
        return _default


def shutdown_default_system(timeout: float = 10.0) -> bool:
    """Shut the process default system down, if it exists."""
    global _default
    with _default_lock:
        system, _default = _default, None
    return True if system is None else system.shutdown(timeout)
