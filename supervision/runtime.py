"""The Runtime: one actor system, its supervision tree, and the session API.

``Runtime`` owns an :class:`~actors.core.system.ActorSystem` (dispatcher,
timer, blocking lane, registry), the root supervisor, the shared actors every
session uses (tool pool, LLM gateway) with the threads behind them, and a
supervisor per open session (opened, resumed, forked and closed by
:mod:`supervision.runtime_sessions`, wired by :mod:`supervision.session_wiring`).
Closing it shuts the tree down and then stops every runtime thread, so
nothing outlives it::

    root (one_for_one)
    ├── alert_sink       AlertSink     (every user-facing warning and error)
    ├── blob_store       BlobStoreActor (disk: FsBlobStore, owned here)
    ├── tool_pool        ToolPool      (threads: ThreadRunner; async tools and MCP: ToolLoop)
    ├── llm_gateway      LlmGateway    (threads: two LlmLoops, main and background)
    └── sessions         Supervisor    (one_for_one)
        └── session:<id> SessionSupervisor (one_for_one)
            ├── worker       Worker
            └── speculation  SpeculationController (the session's front door; it
                             starts and watches one Worker per speculation)

**Close order.** The sessions go first, and the close then waits -- with
everything their speculations' teardowns need still running (tool pool, LLM
loops, timer, blocking lane) -- until every overlay the runtime created is
removed; only then are the shared actors and the threads stopped. Whatever
is still on disk after that (a teardown past its deadline) is removed by the
close itself, when nothing can write into it any more; what cannot be is
named, with the reason, in :attr:`Runtime.overlays_left` and the close
returns False. No cleanup runs after ``close()`` has returned.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from pykka import ActorRef

from fore.actors.alerts import AlertSink, AlertSinkState
from fore.actors.blobs.actor import BlobStoreActor
from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.core import tuning
from fore.actors.core.logs import get_logger
from fore.actors.core.system import ActorSystem
from fore.actors.llm.gateway import LlmGateway
from fore.actors.llm.loop import LlmLoop
from fore.actors.overlay.store import OverlayLeft, OverlayStore
from fore.actors.speculation.governor import LoadGovernor, LoadProbe
from fore.actors.store import SessionStore
from fore.actors.telemetry.config import Telemetry, instrumentation
from fore.actors.telemetry.usage import PriceTable, UsageLedger
from fore.actors.tools.aio import ToolLoop
from fore.actors.tools.mcp.manager import MCPManager
from fore.actors.tools.pool import DEFAULT_MAX_RUNNING, DEFAULT_PER_SESSION, ToolPool
from fore.actors.tools.runner import ThreadRunner
from fore.messages.alerts import Alert, AlertLevel
from fore.messages.blobs import BlobLimits
from fore.messages.runtime import (
    ChildSpec,
    GetChild,
    StartChild,
    StopChild,
    Strategy,
    TreeSnapshot,
    WhichChildren,
)
from fore.messages.usage import ModelPrice, UsageSummary
from fore.supervision.handle import Handle
from fore.supervision.persist import RuntimeStore
from fore.supervision.resume import SessionArgs
from fore.supervision.runtime_sessions import RuntimeSessions
from fore.supervision.session import Session
from fore.supervision.supervisor import Supervisor

log = get_logger(__name__)


class Runtime(RuntimeSessions):
    """An actor system, a supervision tree and the sessions on it."""

    def __init__(
        self,
        *,
        name: str = "fore",
        dispatcher_threads: int | None = None,
        throughput: int = 32,
        blocking_threads: int = 16,
        hook_threads: int = 16,
        max_restarts: int = 10,
        restart_period: float = 10.0,
        max_running_tools: int = DEFAULT_MAX_RUNNING,
        tools_per_session: int = DEFAULT_PER_SESSION,
        blobs: bool = True,
        blob_dir: str | os.PathLike[str] | None = None,
        blob_limits: BlobLimits | None = None,
        blob_max_bytes: int | None = 2 * 1024**3,
        blob_max_age_s: float | None = 7 * 24 * 3600.0,
        overlay_root: str | os.PathLike[str] | None = None,
        tune_process: bool = False,
        speculation_governor: LoadGovernor | None = None,
        store: str | SessionStore | None = None,
        telemetry: Telemetry | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        self.name = name
        self._tuned = False
        # -- the session store (supervision/persist.py): opened before anything
        # starts, so a bad URL, an unreachable server, a newer schema or a damaged
        # file is one StoreError from here and nothing is left half-open.
        self._store = RuntimeStore.open(store)
        self._session_args: dict[str, SessionArgs] = {}
        """How each open session was opened (its fork opens the same way)."""
        if blob_dir is None and self._store is not None:
            blob_dir = self._store.blob_dir  # blobs must outlive the process, like history
        # -- telemetry (issue 28): spans and metrics when asked for; usage always --
        self.telemetry = instrumentation(telemetry)
        """The actors' :class:`~actors.telemetry.tracing.Instrumentation` (``None``: off)."""
        self.usage_ledger = UsageLedger(PriceTable(prices))
        self.system = ActorSystem(
            name=name,
            dispatcher_threads=dispatcher_threads,
            throughput=throughput,
            blocking_threads=blocking_threads,
            hook_threads=hook_threads,
        )
        self.runner = ThreadRunner(name=f"{name}-tool")
        # async def tools and MCP connections; its thread starts with the first use.
        self.tool_loop = ToolLoop(name=f"{name}-tool-aio")
        self._mcp: MCPManager | None = None
        tel, usage = self.telemetry, self.usage_ledger
        self.llm_loop = LlmLoop(name=f"{name}-llm", telemetry=tel, usage=usage)
        # Suggestions and speculation stream on a loop of their own, so the
        # user's main turns never queue behind them (actors.llm.gateway).
        self.llm_background_loop = LlmLoop(name=f"{name}-llm-bg", telemetry=tel, usage=usage)
        self._sessions: dict[str, Session] = {}
        self._session_models: dict[str, tuple[Any, ...]] = {}
        """Each open session's model and fast model: told to forget it when it closes."""
        self._closed = False
        self.overlays = OverlayStore(overlay_root)
        self.overlays_left: tuple[OverlayLeft, ...] = ()
        """Overlays the last close could not remove, each with its reason (normally none)."""
        swept = self.overlays.sweep_dead()  # overlays (and journals) of dead processes
        recovered = self.overlays.recover()  # our own interrupted applies (normally none)
        if swept.removed or swept.recovered or recovered:
            log.info(
                "overlays_swept",
                removed=len(swept.removed),
                recovered=len(swept.recovered) + len(recovered),
            )
        # A roll-forward that left a file alone (the user edited it between
        # the crash and now) is the user's business: they are told below,
        # once the alert sink runs.
        recovery_alerts = [
            Alert(
                level=AlertLevel.WARN,
                source="overlay",
                text=(
                    f"an interrupted accept in {record.workspace} was completed, except for "
                    f"{', '.join(record.skipped)}: changed since, so left as they are"
                ),
            )
            for record in (*swept.recovered, *recovered)
            if record.skipped
        ]
        self.blob_limits = blob_limits or BlobLimits()
        self._owned_blob_dir: Path | None = None
        self.blob_fs: FsBlobStore | None = None
        if blobs:
            if blob_dir is None:
                self._owned_blob_dir = Path(tempfile.mkdtemp(prefix=f"{name}-blobs-"))
                blob_dir = self._owned_blob_dir
            self.blob_fs = FsBlobStore(
                Path(blob_dir),
                max_total_bytes=blob_max_bytes,
                max_age_s=blob_max_age_s,
                grace_s=60.0,
            )
        with self.system.activated():
            self.root: ActorRef[Supervisor] = Supervisor.start(
                "root",
                strategy=Strategy.ONE_FOR_ONE,
                max_restarts=max_restarts,
                period=restart_period,
                registry_name=f"{name}:root",
            )
        # Subscribers and alert history live outside the sink actor, so a
        # restarted sink keeps every session's alert stream.
        self.alert_state = AlertSinkState()
        self.alert_sink: Handle[AlertSink] = self.start_child(
            ChildSpec(
                id="alert_sink", start=functools.partial(AlertSink.start, state=self.alert_state)
            )
        )
        self.system.alert_sink = self.alert_sink
        for alert in recovery_alerts:
            self.alert_sink.tell(alert)
        self.blob_store: Handle[BlobStoreActor] | None = None
        if self.blob_fs is not None:
            blob_fs = self.blob_fs
            # Retention keeps what stored (not only live) sessions quote.
            referenced = None if self._store is None else self._store.referenced_blobs
            self.blob_store = self.start_child(
                ChildSpec(
                    id="blob_store",
                    start=lambda: BlobStoreActor.start(
                        blob_fs, limits=self.blob_limits, referenced=referenced
                    ),
                )
            )
        self.tool_pool: Handle[ToolPool] = self.start_child(
            ChildSpec(
                id="tool_pool",
                start=lambda: ToolPool.start(
                    runner=self.runner,
                    aio=self.tool_loop,
                    max_running=max_running_tools,
                    per_session=tools_per_session,
                    telemetry=self.telemetry,
                ),
            )
        )
        self.llm_gateway: Handle[LlmGateway] = self.start_child(
            ChildSpec(
                id="llm_gateway",
                start=lambda: LlmGateway.start(self.llm_loop, background=self.llm_background_loop),
            )
        )
        self.sessions_supervisor: Handle[Supervisor] = self.start_child(
            ChildSpec(
                id="sessions",
                kind="supervisor",
                shutdown_timeout=60.0,
                start=lambda: Supervisor.start("sessions", max_restarts=1000, period=10.0),
            )
        )
        # Speculation runs only while the runtime has headroom: sampled
        # scheduling waits of the actors and the foreground LLM loop.
        self.speculation_governor = speculation_governor or LoadGovernor()
        self._load_probe = LoadProbe(
            self.speculation_governor,
            self.system,
            loops=(self.llm_loop.call_soon_threadsafe,),
        )
        # GC and GIL settings for a long-running, allocation-heavy host
        # (actors.core.tuning); undone on close.
        if tune_process:
            tuning.tune()
            self._tuned = True

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

    @property
    def usage(self) -> UsageSummary:
        """Every session's model usage and cost so far, by purpose (closed sessions included)."""
        return self.usage_ledger.total()

    # -- shutdown ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 30.0) -> bool:
        """Orderly shutdown: sessions, their overlays, the rest of the tree, every thread.

        Returns whether everything stopped within ``timeout`` and every overlay
        the runtime created is gone (see the module docs for the order; what
        is left is named in :attr:`overlays_left`).
        """
        if self._closed:
            return True
        for session in list(self._sessions.values()):
            session._closed = True
            session._events.close()
        self._closed = True
        deadline = time.monotonic() + timeout
        clean = True
        self._load_probe.close()
        # 1. The sessions, while what their speculations' teardowns use still runs.
        try:
            self.root.ask(
                StopChild(child_id="sessions"), timeout=max(0.1, deadline - time.monotonic())
            )
        except Exception as exc:
            clean = False
            log.warning("runtime_sessions_shutdown_incomplete", error=repr(exc))
        # 2. The teardowns finish: every overlay removed, each after its worker
        # stopped and its tool calls and stream were cancelled. Half of what is
        # left at most, so the rest of the shutdown keeps its time.
        self.overlays.wait_removed(timeout=max(0.0, (deadline - time.monotonic()) / 2))
        # 3. The rest of the tree, then every thread.
        try:
            self.root.stop(timeout=max(0.1, deadline - time.monotonic()))
        except Exception as exc:
            clean = False
            log.warning("runtime_tree_shutdown_incomplete", error=repr(exc))
        clean = self.system.shutdown(max(0.5, deadline - time.monotonic())) and clean
        if self._store is not None:  # no append can run any more: every lease goes
            self._store.close()
        clean = self.llm_loop.close(max(0.5, deadline - time.monotonic())) and clean
        clean = self.llm_background_loop.close(max(0.5, deadline - time.monotonic())) and clean
        clean = self.runner.shutdown(max(0.5, deadline - time.monotonic())) and clean
        # async tools and MCP servers (each server's process is stopped here)
        clean = self.tool_loop.close(max(0.5, deadline - time.monotonic())) and clean
        # 4. Nothing runs any more that could write into an overlay: what a
        # teardown did not finish (past its deadline, stopped early, its removal
        # dropped by the shut-down lane) is removed here, or named.
        left = self.overlays.remove_outstanding(timeout=max(0.1, deadline - time.monotonic()))
        self.overlays_left = tuple(left)
        if left:
            clean = False
            log.warning("runtime_overlays_left", overlays=[str(item) for item in left])
        self._sessions.clear()
        self._session_args.clear()
        for session_id in list(self._session_models):
            self._forget_models(session_id)
        if self.blob_fs is not None:
            self.blob_fs.close()  # withdraw the pins it publishes for other processes
        if self._owned_blob_dir is not None:
            shutil.rmtree(self._owned_blob_dir, ignore_errors=True)
        self._drop_empty_overlay_dir()
        if self._tuned:
            tuning.untune()
        return clean

    def _drop_empty_overlay_dir(self) -> None:
        """Remove this process's overlay directory if nothing is left in it.

        Several runtimes of one process share it, so only an empty one goes;
        a later process sweeps a leftover of a dead one.
        """
        process_dir = self.overlays.process_dir
        journal_dir = self.overlays.journal_dir
        try:
            entries = list(process_dir.iterdir()) if process_dir.exists() else []
        except OSError:
            return
        if any(e != journal_dir for e in entries):
            return
        try:
            if journal_dir.exists() and not any(journal_dir.iterdir()):
                journal_dir.rmdir()
            process_dir.rmdir()
        except OSError:
            pass
