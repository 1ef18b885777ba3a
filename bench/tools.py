"""Tool pool vs a bare ThreadPoolExecutor, in one run.

* 64 calls that each wait 50 ms on I/O: pool wall time vs ``ThreadPoolExecutor(64)``;
* 1,000 trivial calls: per-call overhead of the pool vs the executor;
* 8 sessions x 64 calls: slowest / fastest session completion (fairness);
* cancel of a running shell call -> its process group gone, p50/p99.

Run: ``fore bench tools`` (or ``python -m bench.tools [--quick]``).
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from actors.core import ActorSystem, PooledActor
from actors.tools import FunctionTool, ToolPool, ToolRegistry, WorkspaceFs
from actors.tools.builtin import default_registry
from bench._common import console, machine_line, percentile, ratio, table
from messages.conversation import ToolCall
from messages.tools import CancelToolCalls, RunToolBatch, ToolBatchFinished, ToolCallFinished

_ids = itertools.count()


class _Args(BaseModel):
    n: int = 0


class _Sink(PooledActor):
    def __init__(self) -> None:
        super().__init__()
        self.batches: dict[str, threading.Event] = {}
        self.done_at: dict[str, float] = {}
        self.finished: queue.Queue[ToolCallFinished] = queue.Queue()

    def expect(self, batch_id: str) -> threading.Event:
        event = threading.Event()
        self.batches[batch_id] = event
        return event

    def on_receive(self, message: Any) -> None:
        if isinstance(message, ToolBatchFinished):
            self.done_at[message.batch_id] = time.perf_counter()
            self.batches[message.batch_id].set()
        elif isinstance(message, ToolCallFinished):
            self.finished.put(message)


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


def run(*, quick: bool = False) -> dict[str, float]:
    trivial_calls = 300 if quick else 1000
    cancels = 15 if quick else 60
    console.print(f"[bold]bench tools[/] — {machine_line()}")
    system = ActorSystem(name="bench-tools")
    workdir = Path(tempfile.mkdtemp(prefix="fore-bench-tools-"))
    fs = WorkspaceFs(workdir)
    io_tool = FunctionTool("io", "waits 50 ms", _Args, lambda a, c: time.sleep(0.05) or "ok")
    nop_tool = FunctionTool("nop", "nothing", _Args, lambda a, c: "ok")
    work_tool = FunctionTool("work", "waits 20 ms", _Args, lambda a, c: time.sleep(0.02) or "ok")
    registry = ToolRegistry([io_tool, nop_tool, work_tool])
    metrics: dict[str, float] = {}
    try:
        with system.activated():
            sink = _Sink.start()
            sink_actor = sink._actor_weakref()
            assert sink_actor is not None
            pool = ToolPool.start(max_running=64, per_session=64)

            # warm the runner threads
            _, ev = _run_batch(pool, sink, sink_actor, registry, fs, "io", 64)
            ev.wait(30)

            t0 = time.perf_counter()
            _, ev = _run_batch(pool, sink, sink_actor, registry, fs, "io", 64)
            ev.wait(30)
            pool_io = time.perf_counter() - t0
            with ThreadPoolExecutor(64) as executor:
                list(executor.map(lambda _: time.sleep(0.05), range(64)))  # warm
                t0 = time.perf_counter()
                list(executor.map(lambda _: time.sleep(0.05), range(64)))
                bare_io = time.perf_counter() - t0

            t0 = time.perf_counter()
            _, ev = _run_batch(pool, sink, sink_actor, registry, fs, "nop", trivial_calls)
            ev.wait(60)
            pool_trivial = (time.perf_counter() - t0) / trivial_calls
            with ThreadPoolExecutor(64) as executor:
                t0 = time.perf_counter()
                list(executor.map(lambda _: "ok", range(trivial_calls)))
                bare_trivial = (time.perf_counter() - t0) / trivial_calls

            fair_pool = ToolPool.start(max_running=64, per_session=8)
            start = time.perf_counter()
            batches = [
                _run_batch(fair_pool, sink, sink_actor, registry, fs, "work", 64, session=f"s{i}")
                for i in range(8)
            ]
            for _, ev in batches:
                ev.wait(60)
            completions = [sink_actor.done_at[b] - start for b, _ in batches]
            fairness = max(completions) / min(completions)

            shell_registry = default_registry()
            latencies = []
            for i in range(cancels):
                pidfile = workdir / f"pid{i}"
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
                        raise RuntimeError("shell call did not start")
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
                        raise RuntimeError("process group survived cancellation")
                    time.sleep(0.0002)
                latencies.append(time.perf_counter() - t0)
                ev.wait(10)
    finally:
        system.shutdown()

    table(
        "tool pool vs ThreadPoolExecutor",
        ["measurement", "pool", "bare executor", "pool / bare"],
        [
            [
                "64 × 50 ms I/O calls, wall ms",
                pool_io * 1e3,
                bare_io * 1e3,
                ratio(pool_io, bare_io),
            ],
            [
                f"{trivial_calls:,} trivial calls, µs per call",
                pool_trivial * 1e6,
                bare_trivial * 1e6,
                ratio(pool_trivial, bare_trivial),
            ],
        ],
    )
    table(
        "fairness and cancellation",
        ["measurement", "value", "target"],
        [
            ["8 sessions × 64 calls: slowest / fastest completion", fairness, "≤ 1.5"],
            ["cancel → process group gone, p50 ms", percentile(latencies, 50) * 1e3, ""],
            ["cancel → process group gone, p99 ms", percentile(latencies, 99) * 1e3, "≤ 50"],
        ],
    )
    metrics.update(
        io_wall_ratio=ratio(pool_io, bare_io),
        pool_io_ms=pool_io * 1e3,
        bare_io_ms=bare_io * 1e3,
        trivial_pool_us=pool_trivial * 1e6,
        trivial_bare_us=bare_trivial * 1e6,
        fairness=fairness,
        cancel_p50_ms=percentile(latencies, 50) * 1e3,
        cancel_p99_ms=percentile(latencies, 99) * 1e3,
    )
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench tools", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    run(quick=parser.parse_args(argv).quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
