"""What a distributed runtime knows of its shards, kept current by their load reports.

The runtime's monitor thread polls every shard's ``status`` (its
:class:`~fore.distributed.placement.ShardInfo` and
:class:`~fore.distributed.placement.ShardLoad`) every ``health_interval``
seconds, one report in flight per shard. :class:`ShardDirectory` holds the
answers and what follows from them:

* **Restarted.** A report from a new incarnation means Ray restarted the
  shard in a new process: the old incarnation is *dead* and its sessions must
  move (the runtime moves them; :meth:`ShardDirectory.hosts` says which
  placements are gone).
* **Dead.** A call that fails because the process is gone marks it dead at
  once (:meth:`ShardDirectory.died`); so does a failed report.
* **Late is not gone** (:meth:`ShardState.missed`). A shard busy opening
  sessions, or starved of a core for a moment, answers its report late;
  counting it out for that moment sent every open meanwhile to the other
  shard (a lasting 129/71 skew of 200 sessions). A late report is counted
  (``slow_polls``) and the shard keeps taking sessions; only one silent for
  ``unresponsive_s`` takes no new sessions, until it answers again.

Placement itself is plain code (:mod:`fore.distributed.placement`); the
directory feeds it each live shard's sustained pressure and the session
counts the runtime gives it, plus the opens it has in flight
(:meth:`ShardDirectory.choose` / :meth:`ShardDirectory.opened`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fore.actors.core.logs import get_logger
from fore.distributed import calls
from fore.distributed.calls import _Died, _NotHere
from fore.distributed.errors import NoShardAvailable
from fore.distributed.placement import (
    PRESSURE_WINDOW,
    ShardInfo,
    ShardLoad,
    choose_shard,
    sustained_pressure,
)

log = get_logger(__name__)

__all__ = ["ShardDirectory", "ShardState"]


@dataclass
class ShardState:
    """What the runtime knows of one shard."""

    index: int
    handle: Any
    info: ShardInfo
    load: ShardLoad
    alive: bool = True
    placed: int = 0
    """Sessions opening here now (placed, not yet in the runtime's directory)."""
    dead: set[str] = field(default_factory=set)
    """Incarnations known to have died (their sessions must move)."""
    pending: Any = None
    """The load report asked for and not yet answered (one at a time)."""
    pending_since: float = 0.0
    """When the unanswered report was asked for."""
    slow_polls: int = 0
    """Load reports not answered within one poll (a busy shard: still placed on)."""
    pressures: deque[float] = field(default_factory=lambda: deque(maxlen=PRESSURE_WINDOW))
    """The pressure of its last reports (placement weighs their lowest: placement.py)."""

    def __post_init__(self) -> None:
        self.pressures.append(self.load.pressure_ms)

    def reported(self, info: ShardInfo, load: ShardLoad) -> None:
        """A load report arrived; a new incarnation's means the old one died (module docs)."""
        if info.incarnation != self.info.incarnation:
            self.dead.add(self.info.incarnation)
            self.info = info
            self.pressures.clear()
        self.load = load
        self.pressures.append(load.pressure_ms)
        self.alive = load.alive

    def missed(self, now: float, unresponsive_s: float) -> None:
        """Its report is not in yet at ``now``: busy, still placed on, unless it has been
        silent for ``unresponsive_s`` (module docs: late is not gone)."""
        self.slow_polls += 1
        if now - self.pending_since > unresponsive_s:
            self.alive = False

    def placement_load(self, sessions: int) -> ShardLoad:
        """What placement weighs: its sustained pressure and ``sessions`` (the runtime's
        count, with the opens in flight here)."""
        return self.load.model_copy(
            update={"pressure_ms": sustained_pressure(self.pressures), "sessions": sessions}
        )


class ShardDirectory:
    """Every shard of a runtime as last seen, polled by the runtime's monitor (module docs).

    Thread safe: the monitor polls while callers place sessions and report
    failed calls.
    """

    def __init__(
        self,
        handles: Sequence[Any],
        infos: Sequence[ShardInfo],
        loads: Sequence[ShardLoad],
        *,
        health_interval: float,
        unresponsive_s: float,
    ) -> None:
        self._lock = threading.Lock()
        self._shards = [
            ShardState(index=i, handle=h, info=info, load=load)
            for i, (h, info, load) in enumerate(zip(handles, infos, loads, strict=True))
        ]
        self.health_interval = health_interval
        self.unresponsive_s = max(unresponsive_s, health_interval)
        self.polls = 0
        """Load polls made (each asks every shard for its status)."""

    def __getitem__(self, index: int) -> ShardState:
        return self._shards[index]

    def __iter__(self) -> Iterator[ShardState]:
        return iter(self._shards)

    def __len__(self) -> int:
        return len(self._shards)

    # -- machines ----------------------------------------------------------------------------

    def node_id(self, name: str) -> str:
        """The id of the Ray node ``name`` names (its id or IP address) that runs a shard;
        :class:`NoShardAvailable` if none does."""
        for shard in self._shards:
            if name in (shard.info.node_id, shard.info.node_ip):
                return shard.info.node_id
        known = sorted({s.info.node_ip for s in self._shards})
        raise NoShardAvailable(f"no shard runs on node {name!r} (shards run on {', '.join(known)})")

    def node_ip(self, node_id: str) -> str | None:
        """The IP address of node ``node_id`` if a shard runs there."""
        return next((s.info.node_ip for s in self._shards if s.info.node_id == node_id), None)

    # -- placement ---------------------------------------------------------------------------

    def choose(
        self, node: str | None, sessions: Sequence[int], band_ms: float
    ) -> ShardState | None:
        """The live shard a new session on ``node`` goes to (``sessions[i]``: the runtime's
        sessions on shard ``i``), counted as an open in flight there; ``None``: none is live.
        Every ``choose`` that returned a shard is followed by :meth:`opened`."""
        with self._lock:
            live = [s for s in self._shards if s.alive]
            chosen = choose_shard(
                [s.placement_load(sessions[s.index] + s.placed) for s in live],
                node=node,
                band_ms=band_ms,
            )
            if chosen is None:
                return None
            shard = self._shards[chosen.index]
            shard.placed += 1
            return shard

    def opened(self, index: int) -> None:
        """An open on shard ``index`` ended (its session is in the runtime's directory, or
        it failed)."""
        with self._lock:
            shard = self._shards[index]
            shard.placed = max(0, shard.placed - 1)

    # -- failures ----------------------------------------------------------------------------

    def hosts(self, index: int, incarnation: str) -> bool:
        """Whether incarnation ``incarnation`` of shard ``index`` is not known to have died."""
        return incarnation not in self._shards[index].dead

    def died(self, index: int, incarnation: str | None = None) -> None:
        """Shard ``index``'s ``incarnation`` (default: its current one) is gone."""
        shard = self._shards[index]
        with self._lock:
            if incarnation is None or incarnation == shard.info.incarnation:
                shard.alive = False
            shard.dead.add(shard.info.incarnation if incarnation is None else incarnation)

    def current_loads(self, timeout: float = 10.0) -> list[ShardLoad]:
        """Every shard's load as of now: a status call to each, answered or failed within
        ``timeout``, apart from the monitor's poll (whose last report may be a poll
        interval old). For a count that must be exact at one moment -- a benchmark's
        admitted speculations read after the sessions' open ones. Files nothing: the
        monitor stays the one writer of what the directory knows."""
        asked = [(s, calls.method(s.handle, "status").remote()) for s in self._shards]
        # One deadline for all of them: each dead shard would otherwise add a timeout.
        deadline = time.monotonic() + timeout
        loads = []
        for shard, ref in asked:
            try:
                loads.append(calls.result(ref, max(0.0, deadline - time.monotonic()))[1])
            except Exception as exc:  # a dead or late shard: its last report, not alive
                log.warning("shard_load_failed", shard=shard.index, error=repr(exc))
                loads.append(shard.load.model_copy(update={"alive": False}))
        return loads

    # -- the monitor's poll ------------------------------------------------------------------

    def poll(self) -> None:
        """Ask every shard for its status (one report in flight each), and file the answers."""
        import ray

        self.polls += 1
        now = time.monotonic()
        for shard in self._shards:
            if shard.pending is None:
                shard.pending = calls.method(shard.handle, "status").remote()
                shard.pending_since = now
        pending = [s.pending for s in self._shards]
        ray.wait(pending, num_returns=len(pending), timeout=max(0.05, self.health_interval))
        now = time.monotonic()
        for shard in self._shards:
            ref = shard.pending
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                with self._lock:
                    shard.missed(now, self.unresponsive_s)
                continue
            shard.pending = None
            try:
                info, load = calls.result(ref, 0.0)
            except (_Died, _NotHere):
                self.died(shard.index)
                continue
            except Exception as exc:
                log.warning("shard_load_failed", shard=shard.index, error=repr(exc))
                continue
            with self._lock:
                shard.reported(info, load)
