"""``RayRuntime``: Fore's session API over shards, each a Ray actor in its own process.

One Python process holds one interpreter lock: past a few hundred busy
sessions a single ``Runtime`` is saturated while the machine's other cores
idle, and past one machine's cores nothing in one process helps. A
``RayRuntime`` starts ``shards`` Ray actors, each hosting a whole Fore
``Runtime`` (:class:`~fore.distributed.shard.ShardServer`), and places each
session on one of them::

    from fore.distributed import RayRuntime

    with RayRuntime(shards=2) as rt:          # a local Ray instance, 2 shard processes
        session = rt.open_session(workspace=".", model=model)
        turn = session.submit("run the tests")

**Placement** (:mod:`fore.distributed.placement`): the least-loaded live shard
by its load governor's signal, on the machine whose filesystem has the
workspace; the session stays there. **Routing**: the returned
:class:`~fore.distributed.session.RemoteSession` holds the shard's actor handle
and calls it directly; this object is only the directory. **Events** come back
through a Ray streaming generator per session (ordered, back-pressured,
ended with an error when the shard dies), not through a channel actor: a
channel would put a second process -- and a second hop -- between every
streamed chunk and its reader.

**Faults.** Ray restarts a dead shard (``max_restarts``) in a new process,
which has none of its sessions. A monitor thread polls every shard's load
report (every ``health_interval`` s: also the placement signal); a shard whose
call fails or whose incarnation changed has lost its sessions, and each is
resumed from the store on a live shard (:meth:`RayRuntime._relocate`) -- on
the same machine, since that is where its workspace is. A call in flight when
the shard died raises ``ShardLost``; the next call goes to the new shard.
Nothing completed is lost: a shard writes a turn's items to the store before it
reports the turn.

**Stores.** ``store="sqlite:///…"`` serves one machine (every shard opens the
same file); a cluster of several machines needs ``store="postgresql://…"`` and
a ``blob_dir`` every machine mounts at the same path (``docs/architecture.md``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from fore.actors.core.logs import get_logger
from fore.actors.store import SessionSummary, open_store
from fore.distributed import calls
from fore.distributed.calls import CONTROL_CONCURRENCY, CONTROL_GROUP, _Died, _NotHere
from fore.distributed.directory import ShardDirectory, ShardState
from fore.distributed.errors import NoShardAvailable, ShardLost
from fore.distributed.forward import EventForwarder
from fore.distributed.leaks import listening_ports
from fore.distributed.local import start_local_ray
from fore.distributed.placement import DEFAULT_BAND_MS, ShardInfo, ShardLoad
from fore.distributed.session import Placement, RemoteSession, new_session_id
from fore.distributed.shard import ShardConfig, ShardServer
from fore.distributed.spec import RESUMABLE_OPTIONS, SessionSpec, options_from_config
from fore.supervision.resume import check_labels, rebuild_model, stored_labels, workspace_of

log = get_logger(__name__)

__all__ = ["ANY_NODE", "RayRuntime"]

ANY_NODE = "any"
"""``open_session(node=ANY_NODE)``: the workspace is on a filesystem every machine mounts."""

NODE_LABEL = "fore.node"
"""The label (``Runtime.open_session(labels=...)``) a session's machine is stored under: the
IP address of the Ray node whose filesystem has its workspace -- a node id changes when the
cluster restarts, its address does not -- or :data:`ANY_NODE`. A resume without ``node=``
goes there."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("fore.distributed needs Ray: pip install 'fore-runtime[ray]'") from None
    return ray


class RayRuntime:
    """Sessions sharded over Ray actors, with the ``Runtime`` session API (module docs).

    ``address``: ``None`` starts a local Ray instance on 127.0.0.1
    (:func:`~fore.distributed.local.start_local_ray`; an instance this process
    already started is used as it is), ``"auto"`` or ``"ray://…"``/``"host:port"``
    joins a cluster. ``shards``: how many shard processes. ``store``: the
    shared session store (default: a SQLite file in a temporary directory,
    for one machine only). ``blob_dir``: the shared blob directory (default:
    a temporary one, one machine only). ``governor``: ``LoadGovernor`` keywords
    for every shard's runtime. ``shard_cpus``: the CPUs Ray reserves per shard.
    ``max_restarts``: how often Ray restarts a dead shard. ``unresponsive_s``: a shard
    whose load report is that late takes no new sessions until it answers (a late
    report is a busy shard, still placed on; a dead one fails its call at once).
    """

    def __init__(
        self,
        *,
        address: str | None = None,
        shards: int = 2,
        store: str | None = None,
        blob_dir: str | os.PathLike[str] | None = None,
        overlay_root: str | os.PathLike[str] | None = None,
        num_cpus: int | None = None,
        shard_cpus: float = 1.0,
        max_restarts: int = 3,
        namespace: str = "fore",
        governor: dict[str, Any] | None = None,
        tune_shards: bool = True,
        runtime_options: dict[str, Any] | None = None,
        lease_ttl: float = 30.0,
        health_interval: float = 0.25,
        unresponsive_s: float = 5.0,
        start_timeout: float = 120.0,
        relocate_timeout: float = 90.0,
        band_ms: float = DEFAULT_BAND_MS,
    ) -> None:
        if shards < 1:
            raise ValueError("shards must be at least 1")
        if address is not None and (store is None or store.startswith("sqlite")):
            raise ValueError(
                "a Ray cluster needs a store every machine reaches: store='postgresql://…' "
                "(SQLite serves the shards of one machine: address=None)"
            )
        if address is not None and blob_dir is None:
            raise ValueError(
                "a Ray cluster needs a blob directory every machine mounts at the same path "
                "(blob_dir=...), so a session resumed on another shard still reads its blobs"
            )
        ray = _ray()
        self.id = uuid.uuid4().hex[:8]
        self.health_interval = health_interval
        self.relocate_timeout = relocate_timeout
        self.band_ms = band_ms
        self._owns_ray = False
        self._tmp: Path | None = None
        self._closed = False
        self._lock = threading.Lock()
        """Guards the directory of sessions (the shards' state has its own lock)."""
        self._sessions: dict[str, RemoteSession] = {}
        self._forwarder = EventForwarder(self, name=f"fore-ray-events-{self.id}")
        self.shard_reports: list[dict[str, int]] = []
        """Each shard's leak counters from :meth:`close` (see ``ShardServer.shutdown``)."""
        if not ray.is_initialized():
            if address is None:
                start_local_ray(num_cpus or max(1, int(shards * max(shard_cpus, 1.0))))
            else:
                ray.init(address=address, namespace=namespace, log_to_driver=False)
            self._owns_ray = True
        try:
            self.node_id: str = ray.get_runtime_context().get_node_id()
            self.node_ip = str(ray.util.get_node_ip_address())
            # Ray's servers in this process (shards connect to them: not leaks of theirs)
            self._ray_ports = tuple(sorted(listening_ports()))
            if store is None or blob_dir is None:
                self._tmp = Path(tempfile.mkdtemp(prefix=f"fore-ray-{self.id}-"))
            self.store_url = store or f"sqlite://{self._tmp}/sessions.db"
            blobs = str(blob_dir) if blob_dir is not None else str(self._tmp / "blobs")  # type: ignore[operator]
            config = ShardConfig(
                store_url=self.store_url,
                blob_dir=blobs,
                overlay_root=None if overlay_root is None else str(overlay_root),
                tune_process=tune_shards,
                governor=dict(governor or {}),
                runtime_options=dict(runtime_options or {}),
                lease_ttl=lease_ttl,
                log_level=os.environ.get("FORE_LOG_LEVEL") or "warning",
            )
            # The calls a user waits on with a key pressed run on a loop of their own
            # (calls.CONTROL_METHODS); everything else shares the default one.
            actor = ray.remote(concurrency_groups={CONTROL_GROUP: CONTROL_CONCURRENCY})(ShardServer)
            handles = [
                actor.options(
                    name=f"fore-shard-{self.id}-{i}",
                    namespace=namespace,
                    max_restarts=max_restarts,
                    max_task_retries=0,
                    num_cpus=shard_cpus,
                    max_concurrency=10_000,
                    scheduling_strategy="SPREAD",
                ).remote(i, config)
                for i in range(shards)
            ]
            self._handles = handles
            infos = ray.get([h.info.remote() for h in handles], timeout=start_timeout)
            loads = ray.get([h.load.remote() for h in handles], timeout=start_timeout)
            self._shards = ShardDirectory(
                handles,
                infos,
                loads,
                health_interval=health_interval,
                unresponsive_s=unresponsive_s,
            )
            self._store = open_store(self.store_url, auto_renew=False)
        except BaseException:
            self._teardown(timeout=30.0)
            raise
        self._stop = threading.Event()
        self._monitor = threading.Thread(
            target=self._watch, name=f"fore-ray-monitor-{self.id}", daemon=True
        )
        self._monitor.start()
        log.info("ray_runtime_started", shards=shards, store=self._store.url)

    # -- context manager -----------------------------------------------------------------------

    def __enter__(self) -> RayRuntime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- shards --------------------------------------------------------------------------------

    @property
    def polls(self) -> int:
        """Load polls the monitor made (each asks every shard for its status)."""
        return self._shards.polls

    @property
    def shards(self) -> list[ShardInfo]:
        """Every shard as last seen (index, incarnation, pid, machine)."""
        return [s.info for s in self._shards]

    def shard_loads(self, *, now: bool = False) -> list[ShardLoad]:
        """Every shard's latest load report (``alive`` False: not answering); ``now``: asked now."""
        if now:
            return self._shards.current_loads()
        return [s.load.model_copy(update={"alive": s.alive}) for s in self._shards]

    def shard_handle(self, index: int) -> Any:
        """The Ray actor handle of shard ``index`` (for tools and tests)."""
        return self._shards[index].handle

    @property
    def sessions(self) -> list[RemoteSession]:
        return list(self._sessions.values())

    # -- sessions ------------------------------------------------------------------------------

    def open_session(
        self,
        *,
        workspace: str | os.PathLike[str] | None = None,
        model: Any,
        session_id: str | None = None,
        node: str | None = None,
        **options: Any,
    ) -> RemoteSession:
        """Open a session on the least-loaded shard of the workspace's machine.

        The keywords are ``Runtime.open_session``'s. ``node``: the Ray node id
        (or IP address) of the machine whose filesystem has ``workspace``;
        default: this process's machine; :data:`ANY_NODE` for a filesystem
        every machine mounts at the same path. The machine is stored with the
        session (its :data:`NODE_LABEL` label), so a resume goes back there. The
        model, tools and hooks are sent to the shard by value and run there.
        """
        self._check_open()
        sid = session_id or new_session_id()
        if sid in self._sessions:
            raise ValueError(f"session {sid!r} is already open")
        node_id = self._node(node)
        labels = {**check_labels(options.pop("labels", None)), NODE_LABEL: self._node_ip(node_id)}
        spec = SessionSpec.make(
            sid,
            workspace=self._workspace_path(workspace, node),
            node=node_id,
            model=model,
            options={**options, "labels": labels},
        )
        return self._start(spec, resume=False)

    def resume_session(
        self,
        session_id: str,
        model: Any = None,
        *,
        node: str | None = None,
        **options: Any,
    ) -> RemoteSession:
        """A stored session (closed, or left by a process that died), live again on a shard.

        Same id, history restored (the shard's ``Runtime.resume_session``).
        ``model`` may be left out when the session talked to an
        OpenAI-compatible endpoint (rebuilt from the store, its key from the
        environment; else ``ModelNotRebuildable``); tools, hooks and other
        objects are passed again. The other keywords are
        ``Runtime.resume_session``'s (the rest of the settings are the stored
        ones). ``node``: as for :meth:`open_session`; default: the machine
        stored with the session (this process's machine for a session stored
        without one: by a ``Runtime`` of one process). ``SessionNotFound`` /
        ``SessionLeased`` as the store says; ``NoShardAvailable`` if no shard
        runs on the stored machine (pass ``node=`` to resume it elsewhere).
        """
        self._check_open()
        if session_id in self._sessions:
            raise ValueError(f"session {session_id!r} is already open")
        refused = set(options) - RESUMABLE_OPTIONS
        if refused:
            raise TypeError(
                f"resume_session() got unexpected keyword(s): {', '.join(sorted(refused))}"
            )
        record = self._store.load(session_id).record
        if model is None:
            model = rebuild_model(record.model_settings, session_id)
        stored = options_from_config(record.session_config)
        stored.update(options)
        if node is None:
            node = stored_labels(record.session_config).get(NODE_LABEL)
            try:
                node_id = self._node(node)
            except NoShardAvailable as exc:
                raise NoShardAvailable(
                    f"session {session_id!r} has its workspace on machine {node} (stored with "
                    f"it), where no shard runs: {exc}; pass node= to resume it elsewhere"
                ) from None
        else:
            node_id = self._node(node)
        spec = SessionSpec.make(
            session_id,
            workspace=workspace_of(record.workspace, record.session_config),
            node=node_id,
            model=model,
            options=stored,
        )
        return self._start(spec, resume=True)

    def list_sessions(self, *, limit: int = 20) -> tuple[SessionSummary, ...]:
        """Stored sessions, most recently updated first (open ones included)."""
        return self._store.list_sessions(limit=limit)

    def session(self, session_id: str) -> RemoteSession | None:
        return self._sessions.get(session_id)

    def _start(self, spec: SessionSpec, *, resume: bool) -> RemoteSession:
        placement = self._place(spec, resume=resume, deadline=time.monotonic() + 60.0)
        session = RemoteSession(self, spec, placement)
        with self._lock:
            self._sessions[spec.session_id] = session
        self._shards.opened(placement.index)
        return session

    def _adopt(self, spec: SessionSpec, session_id: str, info: ShardInfo) -> RemoteSession:
        """A session a shard opened by itself (a fork of ``spec``'s, as shard ``info``)."""
        shard = self._shards[info.index]
        placement = Placement(
            index=info.index, incarnation=info.incarnation, handle=shard.handle, info=info
        )
        session = RemoteSession(self, dataclasses.replace(spec, session_id=session_id), placement)
        with self._lock:
            self._sessions[session_id] = session
        return session

    def _workspace_path(
        self, workspace: str | os.PathLike[str] | None, node: str | None
    ) -> str | None:
        if workspace is None:
            return None
        path = Path(workspace)
        if node is None or node == self.node_id:
            return str(path.resolve())  # relative to this process, which is on that machine
        if not path.is_absolute():
            raise ValueError(
                f"workspace {str(workspace)!r} is relative: on another machine it needs an "
                "absolute path"
            )
        return str(path)

    def _node(self, node: str | None) -> str | None:
        """The Ray node id ``node`` names (an id or an IP address); ``None`` for any node."""
        if node is None:
            return self.node_id
        return None if node == ANY_NODE else self._shards.node_id(node)

    def _node_ip(self, node_id: str | None) -> str:
        """What :data:`NODE_LABEL` stores for node ``node_id`` (module docs)."""
        if node_id is None:
            return ANY_NODE
        here = self.node_ip if node_id == self.node_id else node_id
        return self._shards.node_ip(node_id) or here

    # -- placement and moves -------------------------------------------------------------------

    def _place(self, spec: SessionSpec, *, resume: bool, deadline: float) -> Placement:
        """Open ``spec`` on the best live shard; wait for one (until ``deadline``) if none is."""
        while True:
            shard = self._shards.choose(spec.node, self._hosting(), self.band_ms)
            if shard is None:
                if time.monotonic() >= deadline:
                    where = "any machine" if spec.node is None else f"node {spec.node}"
                    raise NoShardAvailable(
                        f"no live shard on {where} can take session {spec.session_id!r}"
                    )
                time.sleep(min(0.1, self.health_interval))
                continue
            ref = shard.handle.open.remote(spec, resume)
            try:
                info: ShardInfo = calls.result(ref, max(1.0, deadline - time.monotonic()) + 60.0)
            except BaseException as exc:
                self._shards.opened(shard.index)
                if not isinstance(exc, _Died | _NotHere):
                    raise
                self._shards.died(shard.index)
                if time.monotonic() >= deadline:
                    raise ShardLost(spec.session_id, shard.index, str(exc)) from None
                continue
            return Placement(
                index=shard.index, incarnation=info.incarnation, handle=shard.handle, info=info
            )

    def _hosting(self) -> list[int]:
        """Each shard's sessions as placement counts them: those of the runtime's directory
        (the directory adds the opens in flight). A shard's own report lags both (made
        before the latest opens returned, or closes landed); this runtime placed every
        session, so its directory is the count."""
        hosted = [0] * len(self._shards)
        with self._lock:
            for session in self._sessions.values():
                if not session.closed:
                    hosted[session.placement.index] += 1
        return hosted

    def _ensure_placed(self, session: RemoteSession) -> Placement:
        """The session's placement, after moving it if its shard died (module docs)."""
        placement = session.placement
        if self._placed_here(session, placement):
            return placement
        return self._relocate(session)

    def _placed_here(self, session: RemoteSession, placement: Placement) -> bool:
        """Whether ``placement`` still hosts ``session`` (no move needed: never blocks)."""
        return session.lost is None and self._shards.hosts(placement.index, placement.incarnation)

    def _relocate(self, session: RemoteSession) -> Placement:
        """Resume ``session`` from the store on a live shard (once, whoever asks first)."""
        with session.lock:
            placement = session.placement
            if self._placed_here(session, placement):
                return placement  # moved meanwhile
            started = time.monotonic()
            new = self._place(session.spec, resume=True, deadline=started + self.relocate_timeout)
            session._moved(new)
            self._shards.opened(new.index)
            log.info(
                "session_moved",
                session=session.id,
                from_shard=placement.index,
                to_shard=new.index,
                seconds=round(time.monotonic() - started, 3),
            )
            return new

    def _session_lost(self, session: RemoteSession, placement: Placement, why: str) -> None:
        if session.placement is placement:
            session.lost = why
        self._shard_died(placement)

    def _shard_died(self, placement: Placement) -> None:
        """The incarnation ``placement`` names is gone: its sessions must move."""
        self._shards.died(placement.index, placement.incarnation)

    # -- the monitor ---------------------------------------------------------------------------

    def _watch(self) -> None:
        """Poll load reports; a failed or restarted shard's sessions are moved (module docs)."""
        while not self._stop.wait(self.health_interval):
            try:
                self._shards.poll()
                self._move_orphans()
            except Exception as exc:  # the monitor must outlive any one bad poll
                if not self._closed:
                    log.warning("ray_monitor_error", error=repr(exc))

    def _move_orphans(self) -> None:
        for session in list(self._sessions.values()):
            if self._stop.is_set():
                return
            if session.closed or self._placed_here(session, session.placement):
                continue
            try:
                self._relocate(session)
            except Exception as exc:
                log.warning("session_move_failed", session=session.id, error=str(exc))

    # -- forwarding events ---------------------------------------------------------------------

    def _forward(self, session: RemoteSession, address: Any, kinds: tuple[str, ...] | None) -> None:
        self._forwarder.start(session, address, kinds)

    # -- closing -------------------------------------------------------------------------------

    def _forget(self, session: RemoteSession) -> None:
        with self._lock:
            self._sessions.pop(session.id, None)
        self._forwarder.stop(session.id)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the distributed runtime is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float = 60.0) -> bool:
        """Close every session, then every shard's runtime, then the shards (and Ray, if ours).

        Returns whether everything closed cleanly; each shard's leak counters
        are in :attr:`shard_reports`.
        """
        if self._closed:
            return True
        deadline = time.monotonic() + timeout
        self._stop.set()
        clean = True
        sessions = list(self._sessions.values())
        refs = []
        for session in sessions:
            try:
                placement = (
                    self._ensure_placed(session) if session.lost is None else session.placement
                )
                refs.append(placement.handle.close_session.remote(session.id, timeout / 2))
            except Exception:
                clean = False
        for ref in refs:
            try:
                clean = bool(calls.result(ref, max(0.1, deadline - time.monotonic()))) and clean
            except Exception as exc:
                clean = False
                log.warning("ray_session_close_failed", error=repr(exc))
        for session in sessions:
            session._closed = True
        self._sessions.clear()
        self._closed = True
        self._monitor.join(timeout=max(0.1, deadline - time.monotonic()))
        reports: list[dict[str, int]] = []
        for shard in self._shards:
            report = self._shutdown_shard(shard, deadline)
            clean = clean and report is not None
            reports.append(report if report is not None else {"unreachable": 1})
        self.shard_reports = reports
        clean = self._teardown(timeout=max(1.0, deadline - time.monotonic())) and clean
        return clean

    def _shutdown_shard(self, shard: ShardState, deadline: float) -> dict[str, int] | None:
        """Close one shard's runtime; a shard Ray is restarting is waited for (until
        ``deadline``), so its new process closes cleanly too."""
        while True:
            left = deadline - time.monotonic()
            try:
                report: dict[str, int] = calls.result(
                    shard.handle.shutdown.remote(max(1.0, left - 5.0), self._ray_ports),
                    max(1.0, left),
                )
                return report
            except _Died as exc:
                if exc.restarting and deadline - time.monotonic() > 2.0:
                    time.sleep(0.2)
                    continue
                log.warning("shard_shutdown_failed", shard=shard.index, error=exc.detail)
                return None
            except Exception as exc:
                log.warning("shard_shutdown_failed", shard=shard.index, error=repr(exc))
                return None

    def _teardown(self, timeout: float) -> bool:
        """Kill the shard actors, stop our threads, leave Ray if we joined it, remove temp files."""
        ray = _ray()
        clean = True
        for handle in getattr(self, "_handles", ()):
            with contextlib.suppress(Exception):
                ray.kill(handle, no_restart=True)
        clean = self._forwarder.close(timeout=min(5.0, timeout)) and clean
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()
        if self._owns_ray:
            ray.shutdown()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return clean
