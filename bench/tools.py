"""Tool pool vs a bare ThreadPoolExecutor, in one run.

* 64 calls that each wait 50 ms on I/O: pool wall time vs ``ThreadPoolExecutor(64)``
  (target: within 1.15x);
* 1,000 trivial calls: per-call cost of the pool vs the executor directly, and the
  pool's added overhead per call;
* 8 sessions x 64 calls of 20 ms under a *contended* global cap (16 slots for a demand
  of 8 sessions x 8 per-session slots): slowest / fastest session completion (fairness,
  target <= 1.5), beside a bare ``ThreadPoolExecutor(16)`` fed session after session
  (first come, first served: what no fairness looks like) and the ideal (total work / cap);
* cancel of a running shell call -> its process group gone, p50/p99 (target p99 <= 50 ms),
  with the default process tracking and with each backend of
  :mod:`actors.tools.proctrack` that works here;
* one ``shell`` call of ``true``, per tracking backend, beside a bare
  ``Popen(["/bin/bash", "-c", "true"])`` + ``wait`` measured in the same run (what a
  cgroup per call, or a supervisor process per call, adds to a command).

Both sides are warmed up before they are timed (the pool's threads, the
executor's threads), each measurement is repeated and its median taken, and
every wait is checked: a batch that does not finish makes the benchmark fail
loudly rather than report a number for work that never completed.

Run: ``fore bench tools`` (or ``python -m bench.tools [--quick]``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fore.actors.core import ActorSystem, PooledActor
from fore.actors.tools import (
    FunctionTool,
    ToolContext,
    ToolPool,
    ToolRegistry,
    WorkspaceFs,
    invoke_tool,
)
from fore.actors.tools.builtin import Shell, default_registry
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.proctrack import TrackingKind, get_tracker, tracking_unavailable
from fore.bench._common import (
    BenchFailed,
    Target,
    console,
    machine_line,
    percentile,
    ratio,
    table,
    targets_table,
)
from fore.messages.conversation import ToolCall
from fore.messages.tools import CancelToolCalls, RunToolBatch, ToolBatchFinished, ToolCallFinished

_ids = itertools.count()

IO_WALL_TARGET = 1.15
FAIRNESS_TARGET = 1.5
CANCEL_P99_TARGET_MS = 50.0
FAIR_SESSIONS = 8
FAIR_GLOBAL_CAP = 16
"""Smaller than the sessions' total demand (8 x 8), so slots are contended."""
FAIR_PER_SESSION = 8
FAIR_CALL_S = 0.02


class _Args(BaseModel):
    n: int = 0


class _Sink(PooledActor):
    def __init__(self) -> None:
        super().__init__()
        self.batches: dict[str, threading.Event] = {}
        self.done_at: dict[str, float] = {}
        self.outcomes: dict[str, list[str]] = {}
        self.finished: queue.Queue[ToolCallFinished] = queue.Queue()

    def expect(self, batch_id: str) -> threading.Event:
        event = threading.Event()
        self.batches[batch_id] = event
        return event

    def on_receive(self, message: Any) -> None:
        if isinstance(message, ToolBatchFinished):
            self.done_at[message.batch_id] = time.perf_counter()
            self.outcomes[message.batch_id] = [r.outcome for r in message.results]
            self.batches[message.batch_id].set()
        elif isinstance(message, ToolCallFinished):
            self.finished.put(message)


def _await(sink: _Sink, batch_id: str, event: threading.Event, timeout: float, what: str) -> None:
    """Wait for a batch; fail the benchmark if it does not finish, or finishes badly."""
    if not event.wait(timeout):
        raise BenchFailed(f"{what}: batch {batch_id} did not finish within {timeout:g}s")
    bad = [outcome for outcome in sink.outcomes.get(batch_id, []) if outcome != "ok"]
    if bad and what != "cancel":
        raise BenchFailed(f"{what}: {len(bad)} calls of batch {batch_id} ended {bad[0]!r}")


def _run_batch(
    pool: Any,
    sink: Any,
    sink_actor: _Sink,
    registry: ToolRegistry,
    fs: WorkspaceFs,
    name: str,
    count: int,
    session: str = "s",
) -> tuple[str, threading.Event]:
    batch_id = f"b{next(_ids)}"
    event = sink_actor.expect(batch_id)
    pool.tell(
        RunToolBatch(
            batch_id=batch_id,
            session_id=session,
            calls=tuple(ToolCall(id=f"c{i}", name=name, arguments={"n": i}) for i in range(count)),
            tools=registry,
            fs=fs,
            reply_to=sink,
            max_concurrency=None,
        )
    )
    return batch_id, event


def _sleeper(seconds: float) -> Callable[[_Args, Any], str]:
    """A tool body that waits on "I/O" (a sleep releases the GIL as a socket read would)."""

    def wait(args: _Args, ctx: Any) -> str:
        time.sleep(seconds)
        return "ok"

    return wait


def _median_of(rounds: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(rounds))


def run(*, quick: bool = False) -> dict[str, float]:
    fair_calls = 32 if quick else 64
    trivial_calls = 300 if quick else 1000
    cancels = 15 if quick else 60
    rounds = 3 if quick else 5
    console.print(f"[bold]bench tools[/] — {machine_line()}")
    system = ActorSystem(name="bench-tools")
    workdir = Path(tempfile.mkdtemp(prefix="fore-bench-tools-"))
    fs = WorkspaceFs(workdir)
    io_tool = FunctionTool("io", "waits 50 ms", _Args, _sleeper(0.05))
    nop_tool = FunctionTool("nop", "nothing", _Args, lambda a, c: "ok")
    work_tool = FunctionTool("work", "waits 20 ms", _Args, _sleeper(FAIR_CALL_S))
    registry = ToolRegistry([io_tool, nop_tool, work_tool])
    metrics: dict[str, float] = {}
    try:
        with system.activated():
            sink = _Sink.start()
            sink_actor = sink._actor_weakref()
            assert sink_actor is not None
            pool = ToolPool.start(max_running=64, per_session=64)

            def pool_batch(name: str, count: int, timeout: float) -> float:
                t0 = time.perf_counter()
                batch_id, ev = _run_batch(pool, sink, sink_actor, registry, fs, name, count)
                _await(sink_actor, batch_id, ev, timeout, name)
                return time.perf_counter() - t0

            pool_batch("io", 64, 30)  # warm: the runner starts its 64 threads
            pool_batch("nop", trivial_calls, 60)
            pool_io = _median_of(rounds, lambda: pool_batch("io", 64, 30))
            pool_trivial = _median_of(rounds, lambda: pool_batch("nop", trivial_calls, 60))
            pool_trivial /= trivial_calls

            with ThreadPoolExecutor(64) as executor:

                def bare(fn: Callable[[int], object], count: int) -> float:
                    t0 = time.perf_counter()
                    list(executor.map(fn, range(count)))
                    return time.perf_counter() - t0

                def sleep_50ms(_: int) -> None:
                    time.sleep(0.05)

                def trivial(_: int) -> str:
                    return "ok"

                bare(sleep_50ms, 64)  # warm: all 64 executor threads exist
                bare(trivial, trivial_calls)
                bare_io = _median_of(rounds, lambda: bare(sleep_50ms, 64))
                bare_trivial = _median_of(rounds, lambda: bare(trivial, trivial_calls))
                bare_trivial /= trivial_calls

            fair_pool = ToolPool.start(max_running=FAIR_GLOBAL_CAP, per_session=FAIR_PER_SESSION)
            start = time.perf_counter()
            batches = [
                _run_batch(
                    fair_pool, sink, sink_actor, registry, fs, "work", fair_calls, session=f"s{i}"
                )
                for i in range(FAIR_SESSIONS)
            ]
            for batch_id, ev in batches:
                _await(sink_actor, batch_id, ev, 120, "fairness")
            completions = [sink_actor.done_at[b] - start for b, _ in batches]
            fairness = max(completions) / min(completions)
            bare_completions = _fifo_completions(fair_calls)
            bare_fairness = max(bare_completions) / min(bare_completions)
            ideal = FAIR_SESSIONS * fair_calls * FAIR_CALL_S / FAIR_GLOBAL_CAP

            latencies = _cancel_latencies(pool, sink, sink_actor, fs, workdir, cancels)
            kinds: tuple[TrackingKind, ...] = ("cgroup", "subreaper", "group")
            backends = [k for k in kinds if not tracking_unavailable(k)]
            by_backend = {
                kind: _cancel_latencies(
                    pool, sink, sink_actor, fs, workdir, cancels, Shell(tracking=kind)
                )
                for kind in backends
            }
            costs = _shell_costs(fs, backends, 20 if quick else 60)
    finally:
        system.shutdown()

    overhead_us = (pool_trivial - bare_trivial) * 1e6
    io_ratio = ratio(pool_io, bare_io)
    cancel_p50 = percentile(latencies, 50) * 1e3
    cancel_p99 = percentile(latencies, 99) * 1e3
    table(
        f"tool pool vs ThreadPoolExecutor (median of {rounds} rounds each)",
        ["measurement", "pool", "bare executor", "pool / bare (×)", "target"],
        [
            [
                "64 × 50 ms I/O calls, wall (ms)",
                pool_io * 1e3,
                bare_io * 1e3,
                io_ratio,
                f"≤ {IO_WALL_TARGET}×",
            ],
            [
                f"{trivial_calls:,} trivial calls, per call (µs)",
                pool_trivial * 1e6,
                bare_trivial * 1e6,
                ratio(pool_trivial, bare_trivial),
                f"pool adds {overhead_us:.1f} µs",
            ],
        ],
    )
    table(
        f"fairness: {FAIR_SESSIONS} sessions × {fair_calls} calls of {FAIR_CALL_S * 1e3:g} ms, "
        f"{FAIR_GLOBAL_CAP} slots (per session {FAIR_PER_SESSION})",
        ["measurement", "pool", f"bare executor({FAIR_GLOBAL_CAP}), FIFO", "ideal", "target"],
        [
            [
                "fastest session done (ms)",
                min(completions) * 1e3,
                min(bare_completions) * 1e3,
                ideal * 1e3,
                "",
            ],
            [
                "slowest session done (ms)",
                max(completions) * 1e3,
                max(bare_completions) * 1e3,
                ideal * 1e3,
                "",
            ],
            [
                "slowest / fastest (×)",
                fairness,
                bare_fairness,
                1.0,
                f"≤ {FAIRNESS_TARGET}×",
            ],
        ],
    )
    table(
        "cancellation",
        ["measurement", "value", "target"],
        [
            ["cancel → process group gone, p50 (ms)", cancel_p50, ""],
            [
                "cancel → process group gone, p99 (ms)",
                cancel_p99,
                f"≤ {CANCEL_P99_TARGET_MS:g} ms",
            ],
        ],
    )
    targets_table(
        [
            Target("64 × 50 ms I/O calls: pool / bare wall", io_ratio, "×", "<=", IO_WALL_TARGET),
            Target("fairness: slowest / fastest session", fairness, "×", "<=", FAIRNESS_TARGET),
            Target(
                "cancel → process group gone, p99", cancel_p99, "ms", "<=", CANCEL_P99_TARGET_MS
            ),
        ]
    )
    auto_kind = get_tracker("auto").kind
    table(
        f"shell tracking backends (auto here: {auto_kind})",
        [
            "backend",
            "one `true` call, median (ms)",
            "vs bare bash (×)",
            "cancel p50 (ms)",
            "cancel p99 (ms)",
        ],
        [
            ["bare Popen(bash -c true) + wait", costs["bare"] * 1e3, 1.0, "", ""],
            *[
                [
                    kind,
                    costs[kind] * 1e3,
                    ratio(costs[kind], costs["bare"]),
                    percentile(by_backend[kind], 50) * 1e3,
                    percentile(by_backend[kind], 99) * 1e3,
                ]
                for kind in backends
            ],
        ],
    )
    for kind in backends:
        metrics[f"shell_{kind}_ms"] = costs[kind] * 1e3
        metrics[f"cancel_{kind}_p50_ms"] = percentile(by_backend[kind], 50) * 1e3
        metrics[f"cancel_{kind}_p99_ms"] = percentile(by_backend[kind], 99) * 1e3
    metrics["shell_bare_ms"] = costs["bare"] * 1e3
    metrics.update(
        io_wall_ratio=io_ratio,
        pool_io_ms=pool_io * 1e3,
        bare_io_ms=bare_io * 1e3,
        trivial_pool_us=pool_trivial * 1e6,
        trivial_bare_us=bare_trivial * 1e6,
        trivial_overhead_us=overhead_us,
        fairness=fairness,
        fairness_bare_fifo=bare_fairness,
        fairness_slowest_ms=max(completions) * 1e3,
        fairness_ideal_ms=ideal * 1e3,
        cancel_p50_ms=cancel_p50,
        cancel_p99_ms=cancel_p99,
    )
    return metrics


def _fifo_completions(calls: int) -> list[float]:
    """Seconds until each session's last call is done on a bare FIFO executor.

    The sessions' calls are submitted session after session, as they would
    arrive without a fair scheduler: the first session finishes long before
    the last. This is the unfair baseline the pool's ratio is read against.
    """
    with ThreadPoolExecutor(FAIR_GLOBAL_CAP) as executor:
        list(executor.map(lambda _: time.sleep(FAIR_CALL_S), range(FAIR_GLOBAL_CAP)))  # warm
        start = time.perf_counter()
        futures = [
            [executor.submit(time.sleep, FAIR_CALL_S) for _ in range(calls)]
            for _ in range(FAIR_SESSIONS)
        ]
        done = []
        for session in futures:
            for future in session:
                future.result(timeout=120)
            done.append(time.perf_counter() - start)
    return done


def _shell_costs(fs: WorkspaceFs, backends: list[TrackingKind], calls: int) -> dict[str, float]:
    """Median seconds of one ``shell`` call of ``true`` per backend, and of a bare bash.

    Interleaved: each round runs the bare baseline and every backend once, so a
    load change on the machine hits all of them alike.
    """
    tools: dict[str, ToolRegistry] = {k: ToolRegistry([Shell(tracking=k)]) for k in backends}
    call = ToolCall(id="t", name="shell", arguments={"command": "true"})
    samples: dict[str, list[float]] = {kind: [] for kind in ["bare", *backends]}

    def bare() -> None:
        subprocess.Popen(
            ["/bin/bash", "-c", "true"], stdin=subprocess.DEVNULL, start_new_session=True
        ).wait(10)

    def tool(kind: str) -> None:
        ctx = ToolContext(
            fs=fs, cancel=CancelToken(), deadline=time.monotonic() + 30, session_id="b", call_id="t"
        )
        result = invoke_tool(tools[kind], call, ctx)
        if result.outcome != "ok":
            raise BenchFailed(f"shell ({kind}): {result.output}")

    for round_ in range(calls + 2):
        for kind, values in samples.items():
            t0 = time.perf_counter()
            bare() if kind == "bare" else tool(kind)
            if round_ >= 2:  # the first rounds warm up (a backend's one-time probe)
                values.append(time.perf_counter() - t0)
    return {kind: statistics.median(values) for kind, values in samples.items()}


def _cancel_latencies(
    pool: Any,
    sink: Any,
    sink_actor: _Sink,
    fs: WorkspaceFs,
    workdir: Path,
    cancels: int,
    shell: Shell | None = None,
) -> list[float]:
    """Seconds from a cancel request to the shell call's process group being gone."""
    shell_registry = default_registry() if shell is None else ToolRegistry([shell])
    latencies = []
    for _ in range(cancels):
        pidfile = workdir / f"pid{next(_ids)}"
        batch_id = f"k{next(_ids)}"
        ev = sink_actor.expect(batch_id)
        pool.tell(
            RunToolBatch(
                batch_id=batch_id,
                session_id="cancel",
                calls=(
                    ToolCall(
                        id="sh",
                        name="shell",
                        arguments={"command": f"echo $$ > {pidfile.name}; sleep 60"},
                    ),
                ),
                tools=shell_registry,
                fs=fs,
                reply_to=sink,
            )
        )
        deadline = time.monotonic() + 10
        while not (pidfile.exists() and pidfile.read_text().strip()):
            if time.monotonic() > deadline:
                raise BenchFailed("cancel: the shell call did not start within 10s")
            time.sleep(0.001)
        pgid = int(pidfile.read_text())
        time.sleep(0.01)  # let `sleep` replace the echo
        t0 = time.perf_counter()
        pool.tell(CancelToolCalls(session_id="cancel", batch_id=batch_id))
        while True:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            if time.perf_counter() - t0 > 10:
                raise BenchFailed("cancel: the process group survived cancellation for 10s")
            time.sleep(0.0002)
        latencies.append(time.perf_counter() - t0)
        _await(sink_actor, batch_id, ev, 10, "cancel")
        if sink_actor.outcomes[batch_id] != ["cancelled"]:
            raise BenchFailed(f"cancel: the call ended {sink_actor.outcomes[batch_id]}")
    return latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench tools", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    try:
        run(quick=parser.parse_args(argv).quick)
    except BenchFailed as exc:
        console.print(f"[bold red]bench tools FAILED:[/] {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
