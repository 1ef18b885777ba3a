"""What a turn costs: CPU seconds of every process of a load run, per turn, by role.

``fore bench``'s latencies depend on how loaded the machine is; what a turn
*costs* much less so. :class:`CpuMeter` reads the CPU time (user + system) of
this process and all its descendants when the users start and when the rounds
end, and divides by the turns done meanwhile. The processes of a run are this
one (the sessions themselves with ``--shards 0``; the simulated users and the
Ray client with ``--shards N``), the mock LLM server, and with ``--shards N``
the shard processes and Ray's own (GCS, raylet, its agents). The mock stands
in for a remote model, so ``fore`` -- everything but the mock -- is what the
runtime costs; comparing ``fore`` of ``--shards 0`` and ``--shards N`` at the
same workload is the fair comparison of one process and the sharded runtime
(issue 26), because it does not depend on how many cores the machine had
free. A process that ended during the rounds (a shard killed) is missing from
the second reading: its CPU is not counted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from fore.bench.report_accounting import Accounting

__all__ = ["CpuMeter", "process_role", "turns_done"]

ROLES = ("bench", "shards", "ray", "mock")
"""``bench``: this process; ``shards``: the Ray shard processes; ``ray``: Ray's other
processes; ``mock``: the mock LLM server."""


def turns_done(accounting: Accounting) -> int:
    """Turns the users got an answer to (typed or Tab): what the CPU is divided by."""
    buckets = accounting.turns.buckets
    return buckets.get("typed", 0) + buckets.get("tab", 0)


def in_flight(accounting: Accounting) -> int:
    """Rounds the users were inside when the run was frozen (cut by its duration or Ctrl-C)."""
    buckets = accounting.turns.buckets
    return buckets.get("in_flight_duration", 0) + buckets.get("in_flight_interrupt", 0)


def process_role(process: psutil.Process) -> str:
    """Which of :data:`ROLES` a process of the run plays (by its command line)."""
    if process.pid == os.getpid():
        return "bench"
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return "ray"
    if "mock_server" in command:
        return "mock"
    if "ShardServer" in command:
        return "shards"
    return "ray"


@dataclass(frozen=True)
class _Reading:
    role: str
    started: float
    cpu_s: float


def _read() -> dict[int, _Reading]:
    me = psutil.Process()
    found: dict[int, _Reading] = {}
    for process in (me, *me.children(recursive=True)):
        try:
            times = process.cpu_times()
            found[process.pid] = _Reading(
                process_role(process), process.create_time(), times.user + times.system
            )
        except psutil.Error:  # ended meanwhile
            continue
    return found


class CpuMeter:
    """CPU of the run's processes between :meth:`start` and :meth:`stop` (module docs)."""

    def __init__(self) -> None:
        self._before: dict[int, _Reading] = {}
        self._after: dict[int, _Reading] = {}

    def start(self) -> None:
        """The users start."""
        self._before = _read()

    def stop(self) -> None:
        """The rounds ended."""
        self._after = _read()

    def per_turn(self, turns: int) -> dict[str, float]:
        """Milliseconds of CPU per turn by role, plus ``fore`` (all but the mock) and
        ``total``; ``{}`` without a turn or a reading."""
        if turns <= 0 or not self._after:
            return {}
        spent = dict.fromkeys(ROLES, 0.0)
        for pid, now in self._after.items():
            before = self._before.get(pid)
            same = before is not None and before.started == now.started
            spent[now.role] += now.cpu_s - (before.cpu_s if same and before else 0.0)
        per_turn = {role: round(1000 * s / turns, 2) for role, s in spent.items()}
        per_turn["fore"] = round(sum(v for k, v in per_turn.items() if k != "mock"), 2)
        per_turn["total"] = round(per_turn["fore"] + per_turn["mock"], 2)
        return per_turn
