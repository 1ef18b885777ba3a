"""The Runtime: one actor system and the root of its supervision tree.

``Runtime`` is what applications hold. It owns an
:class:`~actors.core.system.ActorSystem` (dispatcher, timer, blocking lane,
registry) and the root :class:`~supervision.supervisor.Supervisor`; closing it
shuts the tree down in reverse start order and then stops every runtime thread,
so nothing outlives it.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

import structlog
from pykka import ActorRef

from actors.core.logs import configure_logging
from actors.core.system import ActorSystem
from messages.runtime import ChildSpec, GetChild, StartChild, Strategy, TreeSnapshot, WhichChildren
from supervision.handle import Handle
from supervision.supervisor import Supervisor

log = structlog.get_logger(__name__)


class Runtime:
    """An actor system plus a supervision tree, used as a context manager."""

    def __init__(
        self,
        *,
        name: str = "fore",
        dispatcher_threads: int | None = None,
        throughput: int = 32,
        blocking_threads: int = 16,
        max_restarts: int = 10,
        restart_period: float = 10.0,
        log_level: str | None = None,
        log_json: bool | None = None,
    ) -> None:
        configure_logging(level=log_level, json=log_json)
        self.name = name
        self.system = ActorSystem(
            name=name,
            dispatcher_threads=dispatcher_threads,
            throughput=throughput,
            blocking_threads=blocking_threads,
        )
        with self.system.activated():
            self.root: ActorRef[Supervisor] = Supervisor.start(
                "root",
                strategy=Strategy.ONE_FOR_ONE,
                max_restarts=max_restarts,
                period=restart_period,
                registry_name="root",
            )
        self._closed = False

    # -- context manager ----------------------------------------------------

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- supervision ----------------------------------------------------------

    def start_child(self, spec: ChildSpec, *, timeout: float = 30.0) -> Handle[Any]:
        """Start a child under the root supervisor; returns its stable handle."""
        handle: Handle[Any] = self.root.ask(StartChild(spec=spec), block=True, timeout=timeout)
        return handle

    def child(self, child_id: str, *, timeout: float = 10.0) -> Handle[Any] | None:
        handle: Handle[Any] | None = self.root.ask(
            GetChild(child_id=child_id), block=True, timeout=timeout
        )
        return handle

    def tree(self, *, timeout: float = 10.0) -> TreeSnapshot:
        """A typed snapshot of the whole supervision tree."""
        snapshot: TreeSnapshot = self.root.ask(WhichChildren(), block=True, timeout=timeout)
        return snapshot

    # -- shutdown ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 30.0) -> bool:
        """Orderly shutdown of the tree, then of every runtime thread.

        Returns whether everything stopped within ``timeout``.
        """
        if self._closed:
            return True
        self._closed = True
        deadline = time.monotonic() + timeout
        clean = True
        try:
            self.root.stop(timeout=max(0.1, deadline - time.monotonic()))
        except Exception as exc:
            clean = False
            log.warning("runtime_tree_shutdown_incomplete", error=repr(exc))
        clean = self.system.shutdown(max(0.5, deadline - time.monotonic())) and clean
        return clean
