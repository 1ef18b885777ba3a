"""``fore bench --shards N``: the load benchmark over a local Ray cluster of N shards.

The workload is :mod:`bench.load`'s, unchanged: the same simulated users
(:class:`~bench.sim_user.SimUser`), the same mock LLM server, the same report.
What differs is where the sessions live: each in one of N shard processes
(:class:`fore.distributed.RayRuntime`), placed on the least-loaded shard. The
users stay in this process, on a small runtime of their own (they are actors),
and reach their sessions through the remote handles: every prompt, Tab and
keystroke crosses a process boundary through Ray, and every event comes back
through it. So the latencies are end to end through Ray: a keystroke's abort
latency is timed from the user's keystroke in this process (one machine: the
monotonic clock is shared) to the shard's confirmed cancel.

The report adds what only shards have: each shard's load (its governor's
pressure, sessions, admitted and refused speculations) and each shard's leak
counters, measured in the shard (``ShardServer.shutdown``) and summed into the
report's.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from fore.actors.llm import OpenAICompatible, RetryPolicy
from fore.bench._common import console
from fore.bench.cpu import CpuMeter, turns_done
from fore.messages.gate import ApprovalMode
from fore.messages.session import Subscribe
from fore.messages.speculation import SpeculationConfig

if TYPE_CHECKING:
    from fore.bench.load import _Interrupts
    from fore.bench.load_options import LoadOptions
    from fore.bench.load_report import LoadReport
    from fore.distributed import RayRuntime, RemoteSession
    from fore.distributed.placement import ShardLoad

__all__ = ["BenchSession", "print_shard_table", "run_load_ray"]

EVENT_KINDS = (
    "SuggestionReady",
    "SpeculationProgress",
    "SpeculationFinished",
    "SpeculationSkipped",
)
"""The events a simulated user reads: only these leave the shards."""


class _Controller:
    """A remote session's front door (its controller) as :class:`~bench.sim_user.SimUser` uses it.

    ``Subscribe`` names an actor of this process, which a shard cannot reach:
    it becomes :meth:`RemoteSession.forward_events` (the events a user reads,
    in order, from the runtime's event thread). Everything else is the remote
    handle's.
    """

    def __init__(self, session: RemoteSession) -> None:
        self._session = session
        self._handle = session.supervisor

    def tell(self, message: Any) -> None:
        if isinstance(message, Subscribe):
            self._session.forward_events(message.address, EVENT_KINDS)
            return
        self._handle.tell(message)

    def ask(self, message: Any, *, block: bool = True, timeout: float | None = None) -> Any:
        return self._handle.ask(message, block=block, timeout=timeout)


class BenchSession:
    """What the load benchmark needs of a session, for a session on a shard."""

    def __init__(self, session: RemoteSession) -> None:
        self.remote = session
        self.id = session.id
        self.controller = _Controller(session)

    def close(self) -> bool:
        return self.remote.close()


class _Totals:
    """The shards' governors summed, as the load benchmark's timeline reads one governor."""

    def __init__(self, rt: RayRuntime) -> None:
        self._rt = rt
        self.running = self.refused = self.admitted = 0

    def refresh(self, loads: list[ShardLoad] | None = None) -> None:
        """Summed from ``loads``, or from the monitor's last reports."""
        loads = self._rt.shard_loads() if loads is None else loads
        self.running = sum(s.running_speculations for s in loads)
        self.refused = sum(s.refused for s in loads)
        self.admitted = sum(s.admitted for s in loads)


def run_load_ray(
    options: LoadOptions, interrupts: _Interrupts
) -> tuple[LoadReport, dict[str, list[float]]]:
    """Run the workload with the sessions on ``options.shards`` Ray shards (module docs)."""
    from fore.bench.load import (
        _open_states,
        _spawn_server,
        freeze_ledger,
        open_user_session,
    )
    from fore.bench.load_report import Timeline, build_report, quantiles_ms
    from fore.bench.matched_load import overlapping
    from fore.bench.sim_user import Recorder, start_users, users_finished
    from fore.distributed import RayRuntime  # imports Ray only when it starts one
    from fore.errors import BenchSetupError
    from fore.supervision import Runtime

    begun = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="fore-bench-ray-"))
    recorder = Recorder()
    try:
        server = _spawn_server(options)
    except Exception as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise BenchSetupError(f"cannot start the mock LLM server: {exc}") from None
    users_rt: Runtime | None = None
    rt: RayRuntime | None = None
    try:
        try:
            rt = RayRuntime(
                shards=options.shards,
                store=f"sqlite://{root}/sessions.db",
                blob_dir=root / "blobs",
                overlay_root=root / "overlays",
                governor={"enabled": options.governor},
            )
        except Exception as exc:
            raise BenchSetupError(f"cannot start {options.shards} Ray shards: {exc}") from None
        users_rt = Runtime(name="bench-users", overlay_root=root / "user-overlays")
        threads_before = {t.ident for t in threading.enumerate()}
        model = OpenAICompatible(
            base_url=server.base_url,
            api_key="bench",
            model="mock",
            retry=RetryPolicy(max_retries=2, initial_backoff=0.05, max_backoff=0.5),
        )
        config = SpeculationConfig(
            enabled=True, speculate=options.speculation, approval_mode=ApprovalMode.AUTO_EDIT
        )
        sessions: list[tuple[Any, Path]] = []
        for i in range(options.sessions):
            if interrupts.requested.is_set():
                break
            remote, workspace = open_user_session(rt, root, i, model, config)
            sessions.append((BenchSession(remote), workspace))
        started = time.monotonic()
        setup = started - begun
        window = options.duration - setup - options.drain_s - max(2.0, setup / 2)
        deadline = started + max(1.0, window)
        hard_stop = deadline + options.drain_s
        done = threading.Semaphore(0)
        meter = CpuMeter()
        meter.start()
        users = start_users(users_rt.system, sessions, options, recorder, done, deadline)
        totals = _Totals(rt)
        timeline = Timeline()
        finished = 0
        rounds_cut = 0
        while finished < len(users):
            finished += users_finished(done)
            totals.refresh()
            timeline.sample(time.monotonic() - started, totals, recorder.rounds)  # type: ignore[arg-type]
            if interrupts.requested.is_set() or time.monotonic() > hard_stop:
                rounds_cut = len(users) - finished
                break
        wall = time.monotonic() - started
        meter.stop()
        interrupted = interrupts.requested.is_set()
        ledger = recorder.ledger
        freeze_ledger(
            ledger, options, len(sessions), interrupted=interrupted, rounds_cut=rounds_cut
        )
        # The open speculations first, then the admissions, each shard asked now: the
        # monitor's last report can be a poll old and miss a speculation admitted since,
        # which the open states would then show without its admission (the sum would
        # not close). Read in this order, anything open was admitted before it was read.
        open_states = _open_states(sessions)
        loads = rt.shard_loads(now=True)
        totals.refresh(loads)
        accounting = ledger.result(open_states, admitted=totals.admitted)
        closing = time.monotonic()
        for user in users:
            user.stop()
        for session, _ in sessions:
            session.close()
        clean = rt.close(timeout=120)
        users_clean = users_rt.close(timeout=30)
        teardown = time.monotonic() - closing
        leaks = {
            "session_overlays": 0,
            "overlay_dirs": 0,
            "threads": 0,
            "file_descriptors": 0,
            "live_actors": len(users_rt.system.registry),
            "unclean_shutdown": 0 if clean and users_clean else 1,
        }
        for shard_report in rt.shard_reports:
            for key, value in shard_report.items():
                leaks[key] = leaks.get(key, 0) + int(value)
        if len(rt.shard_reports) < options.shards:
            leaks["unclean_shutdown"] += options.shards - len(rt.shard_reports)
        leaked = [t for t in threading.enumerate() if t.ident not in threads_before]
        leaks["threads"] += len(leaked)
        governor = totals
        report = build_report(
            options,
            recorder,
            accounting,
            governor,  # type: ignore[arg-type]
            timeline,
            leaks,
            interrupted=interrupted,
        )
        report.speculations_skipped = max(report.speculations_skipped, totals.refused)
        report.shard_loads = [load.model_dump() for load in loads]
        report.cpu_ms_per_turn = meter.per_turn(turns_done(accounting))
        report.tab_roundtrip_ms = quantiles_ms(recorder.tab_roundtrip_s)
        report.wall_s = wall
        report.setup_s = setup
        report.teardown_s = teardown
        report.wall_total_s = time.monotonic() - begun
        if leaked:
            report.errors.append("leaked threads: " + ", ".join(t.name for t in leaked[:10]))
        samples = {
            "accept": recorder.accept_latency_s,
            "abort_cancel": recorder.abort_cancel_s,
            "abort_cleanup": recorder.abort_cleanup_s,
            "main_turn": recorder.typed_turn_s,
            # how many other typed turns each one ran beside (bench.matched_load)
            "main_turn_load": [float(n) for n in overlapping(recorder.typed_turn_spans)],
            "tab_roundtrip": recorder.tab_roundtrip_s,
        }
        return report, samples
    finally:
        if rt is not None and not rt.closed:
            rt.close(timeout=30)
        if users_rt is not None and not users_rt.closed:
            users_rt.close(timeout=10)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def print_shard_table(report: LoadReport) -> None:
    """Per-shard load at the end of the rounds (``fore bench --shards N``)."""
    if not report.shard_loads:
        return
    table = Table(title="per-shard load (at the end of the rounds)")
    for header in (
        "shard",
        "sessions",
        "pressure (ms)",
        "threshold (ms)",
        "speculations admitted",
        "skipped: no headroom",
        "skipped (%)",
    ):
        table.add_column(header, justify="right")
    for load in report.shard_loads:
        offered = load["admitted"] + load["refused"]
        share = 100.0 * load["refused"] / offered if offered else 0.0
        table.add_row(
            f"#{load['index']}",
            f"{load['sessions']:,}",
            f"{load['pressure_ms']:.1f}",
            f"{load['threshold_ms']:.1f}",
            f"{load['admitted']:,}",
            f"{load['refused']:,}",
            f"{share:.0f}",
        )
    console.print(table)
    abort, tab = report.abort_latency_ms, report.tab_roundtrip_ms
    cpu = report.cpu_ms_per_turn
    if cpu:
        console.print(
            "CPU per turn (ms, every process, the rounds only): "
            + ", ".join(f"{role} {cpu[role]:.1f}" for role in ("bench", "shards", "ray", "mock"))
            + f"; Fore (all but the mock) {cpu['fore']:.1f}, total {cpu['total']:.1f}",
            soft_wrap=True,
        )
    console.print(
        "through Ray, p50 / p99 (n): keystroke → speculation aborted "
        + (
            f"{abort['p50']:.2f} / {abort['p99']:.2f} ms (n={abort['count']:.0f})"
            if abort.get("count")
            else "—"
        )
        + "; Tab → accept answered here (its continuation included) "
        + (
            f"{tab['p50']:.2f} / {tab['p99']:.2f} ms (n={tab['count']:.0f})"
            if tab.get("count")
            else "—"
        ),
        soft_wrap=True,
    )
