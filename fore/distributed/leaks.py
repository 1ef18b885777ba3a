"""What a shard leaves behind: the load benchmark's leak counters, counted in the shard.

A shard is a process of its own, so what its runtime leaves behind when it
closes -- threads it started and did not end, file descriptors it opened and
did not close, overlay directories still on disk -- can only be counted
there. :class:`LeakBaseline` is taken when the shard starts, after Ray's own
setup (so Ray's threads and connections are not the runtime's), and
:meth:`LeakBaseline.count` compares the process with it after the runtime
closed. Two kinds of Ray connections appear later and are left out: those
accepted on Ray's own listening ports (the caller's calls arrive that way)
and those to the caller's Ray servers (a streaming generator reports its
items to the caller's worker that way).
"""

from __future__ import annotations

import os
import threading

import psutil

from fore.actors.core.logs import get_logger
from fore.supervision.runtime import Runtime

log = get_logger(__name__)

__all__ = ["LeakBaseline", "count_overlay_dirs", "listening_ports"]

RAY_THREADS = ("asyncio_", "uvloop_", "ThreadPoolExecutor")
"""Name prefixes of threads that are Ray's (its actor loops' executors), not the runtime's."""


class LeakBaseline:
    """The process's threads, listening ports and descriptors when the shard started."""

    def __init__(self) -> None:
        self._threads = {t.ident for t in threading.enumerate()}
        self._listening = listening_ports()
        self._fds = open_fds()

    def count(self, ray_ports: frozenset[int]) -> tuple[int, int]:
        """``(threads, file descriptors)`` this process has now that it did not have at the
        baseline, Ray's left out (module docs; ``ray_ports``: the caller's Ray servers).
        Each found is logged as a warning with its name."""
        threads = [
            t
            for t in threading.enumerate()
            if t.ident not in self._threads
            and t is not threading.current_thread()
            # the event loop's executor (Ray's actor loop runs on uvloop): Ray's, not ours
            and not t.name.startswith(RAY_THREADS)
        ]
        if threads:
            log.warning("shard_threads_left", threads=[t.name for t in threads])
        now = open_fds(accepted_on=self._listening, ray_ports=ray_ports)
        fds = {f"{fd} -> {target}" for fd, target in now.items() if self._fds.get(fd) != target}
        if fds:
            log.warning("shard_fds_left", fds=sorted(fds)[:20])
        return len(threads), len(fds)


def listening_ports() -> frozenset[int]:
    """The ports this process listens on (Ray's own servers, before the runtime starts)."""
    try:
        connections = psutil.Process().net_connections(kind="inet")
    except psutil.Error:
        return frozenset()
    return frozenset(c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN)


def open_fds(
    accepted_on: frozenset[int] = frozenset(), ray_ports: frozenset[int] = frozenset()
) -> dict[int, str]:
    """This process's open file descriptors: ``fd -> target`` (a socket with its ports).

    Connections accepted on ``accepted_on`` (Ray's servers: the caller's calls
    arrive that way) and connections to ``ray_ports`` (the caller's Ray
    servers) are Ray's, not the runtime's, and are left out.
    """
    found: dict[int, str] = {}
    skip: set[int] = set()
    peers: dict[int, str] = {}
    try:
        connections = psutil.Process().net_connections(kind="inet")
    except psutil.Error:
        connections = []
    for c in connections:
        remote = c.raddr.port if c.raddr else None
        if c.status != psutil.CONN_LISTEN and (
            (c.laddr and c.laddr.port in accepted_on) or remote in ray_ports
        ):
            skip.add(c.fd)
        peers[c.fd] = f" ({c.laddr.port} -> {remote or '-'})"
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) in skip:
            continue
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed meanwhile (the listing's own descriptor)
        found[int(name)] = target + (
            peers.get(int(name), "") if target.startswith("socket") else ""
        )
    return found


def count_overlay_dirs(runtime: Runtime) -> int:
    """Overlay directories of ``runtime``'s process still on disk (its journal aside)."""
    process_dir = runtime.overlays.process_dir
    try:
        return sum(1 for p in process_dir.iterdir() if p != runtime.overlays.journal_dir)
    except FileNotFoundError:
        return 0
