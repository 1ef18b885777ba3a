"""Pooled actors vs pykka ThreadingActor vs raw baselines, in one run.

Measures, side by side: tell throughput into one actor, ask round trip
(p50/p99), round-robin messaging across many live actors, spawn rate, RSS per
idle actor and OS threads in use; prints ratios and the issue's targets with a
verdict each.

The many-actor measurements (spawn, RSS, threads, round-robin, stop) run in a
fresh subprocess per kind: RSS per idle actor is only meaningful in a process
whose earlier phases have not left freed memory behind to hide the new
actors' cost, and 10,000 thread actors must not slow down what is measured
after them. The raw baselines are what the runtime is built from, without the
actor API: ``queue.SimpleQueue`` mailboxes drained by a small thread pool (a
dispatcher without fairness, lanes or supervision) and asyncio queues, one
task each, on one event loop.

Every message sent is accounted for: a phase that loses one (or does not
finish before its deadline) is reported as FAILED instead of as a rate, and
:func:`run` raises :class:`BenchFailed` once everything is printed.

Run: ``fore bench actors [--quick]`` (or ``python -m bench.actors [--quick]``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pykka

from fore.actors.core import ActorSystem, PooledActor
from fore.bench._common import (
    BenchFailed,
    Target,
    console,
    machine_line,
    os_threads,
    percentile,
    ratio,
    rss_bytes,
    table,
    targets_table,
)

_MSG = ("ping", 1)
_ROOT = Path(__file__).resolve().parent.parent
_RAW_POOL_THREADS = 4
"""Threads draining the raw SimpleQueue mailboxes (as many as the pooled dispatcher's here)."""


class _PooledSink(PooledActor):
    default_ask_timeout = 300.0

    def __init__(
        self, started: Callable[[], None] | None = None, done: Callable[[], None] | None = None
    ) -> None:
        super().__init__()
        self.count = 0
        self.started = started
        self.done = done

    def on_start(self) -> None:
        if self.started is not None:
            self.started()

    def on_receive(self, message: Any) -> Any:
        self.count += 1
        if self.done is not None:
            self.done()
        return message


class _ThreadSink(pykka.ThreadingActor):
    use_daemon_thread = True

    def __init__(
        self, started: Callable[[], None] | None = None, done: Callable[[], None] | None = None
    ) -> None:
        super().__init__()
        self.count = 0
        self.started = started
        self.done = done

    def on_start(self) -> None:
        if self.started is not None:
            self.started()

    def on_receive(self, message: Any) -> Any:
        self.count += 1
        if self.done is not None:
            self.done()
        return message


class _Countdown:
    """Counts calls from any thread; ``reached`` is set on the ``target``-th.

    ``itertools.count`` is atomic under the GIL, so no lock is needed.
    :meth:`arm` starts a new count (only between rounds, when nothing counts).
    """

    def __init__(self, target: int) -> None:
        self.arm(target)

    def arm(self, target: int) -> None:
        self._count = itertools.count(1)
        self.target = target
        self.reached = threading.Event()
        if target <= 0:
            self.reached.set()

    def __call__(self) -> None:
        if next(self._count) == self.target:
            self.reached.set()


@dataclass
class _Outcome:
    """One measurement: a rate, or the reason it is not one."""

    value: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# -- tell throughput ---------------------------------------------------------------


def _tell_actor(kind: type[Any], n: int, deadline: float) -> _Outcome:
    ref = kind.start()
    try:
        for _ in range(n // 10):  # warm up: the first kind measured must not pay for both
            ref.tell(_MSG)
        ref.ask(_MSG, timeout=deadline)
        n0 = ref.proxy().count.get(timeout=deadline)
        start = time.perf_counter()
        for _ in range(n):
            ref.tell(_MSG)
        try:
            ref.ask(_MSG, timeout=deadline)  # FIFO: answered once every tell was handled
        except pykka.Timeout:
            return _Outcome(float("nan"), f"not drained within {deadline:g}s")
        elapsed = time.perf_counter() - start
        received = ref.proxy().count.get(timeout=deadline) - n0 - 1
        if received != n:
            return _Outcome(float("nan"), f"{n - received:,} of {n:,} tells lost")
        return _Outcome(n / elapsed)
    finally:
        ref.stop(timeout=30)


def _tell_simple_queue(n: int, deadline: float) -> _Outcome:
    q: queue.SimpleQueue[Any] = queue.SimpleQueue()
    done = threading.Event()

    def consume() -> None:
        for _ in range(n):
            q.get()
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    start = time.perf_counter()
    for _ in range(n):
        q.put(_MSG)
    if not done.wait(deadline):
        return _Outcome(float("nan"), f"not drained within {deadline:g}s")
    return _Outcome(n / (time.perf_counter() - start))


def _tell_asyncio(n: int, deadline: float) -> _Outcome:
    async def main() -> _Outcome:
        q: asyncio.Queue[Any] = asyncio.Queue()

        async def consume() -> None:
            for _ in range(n):
                await q.get()

        task = asyncio.create_task(consume())
        start = time.perf_counter()
        for _ in range(n):
            q.put_nowait(_MSG)
        try:
            await asyncio.wait_for(task, deadline)
        except TimeoutError:
            return _Outcome(float("nan"), f"not drained within {deadline:g}s")
        return _Outcome(n / (time.perf_counter() - start))

    return asyncio.run(main())


# -- ask round trip ----------------------------------------------------------------


_ASK_ROUNDS = 10
"""Ask round trips are measured in this many interleaved rounds per kind."""


def _ask_actor(kind: type[Any], n: int) -> list[float]:
    ref = kind.start()
    try:
        for _ in range(200):
            ref.ask(_MSG, timeout=60)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            ref.ask(_MSG, timeout=60)
            samples.append(time.perf_counter() - t0)
        return samples
    finally:
        ref.stop(timeout=30)


def _ask_simple_queue(n: int) -> list[float]:
    requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def serve() -> None:
        while True:
            item = requests.get()
            if item is None:
                return
            item.put(_MSG)

    threading.Thread(target=serve, daemon=True).start()
    samples = []
    reply: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for _ in range(n):
        t0 = time.perf_counter()
        requests.put(reply)
        reply.get(timeout=60)
        samples.append(time.perf_counter() - t0)
    requests.put(None)
    return samples


def _ask_asyncio(n: int) -> list[float]:
    async def main() -> list[float]:
        requests: asyncio.Queue[Any] = asyncio.Queue()

        async def serve() -> None:
            while True:
                fut = await requests.get()
                if fut is None:
                    return
                fut.set_result(_MSG)

        task = asyncio.create_task(serve())
        loop = asyncio.get_running_loop()
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            fut = loop.create_future()
            requests.put_nowait(fut)
            await asyncio.wait_for(fut, 60)
            samples.append(time.perf_counter() - t0)
        requests.put_nowait(None)
        await task
        return samples

    return asyncio.run(main())


# -- many live actors: one fresh process per kind -----------------------------------------
#
# Each probe spawns ``actors`` actors and waits until every one has started
# (spawn rate), measures RSS and OS threads with all of them alive and idle,
# then sends messages round-robin in rounds -- one per actor (the workload
# every kind gets, thread actors included), then ``messages`` in all -- and
# waits until each round was handled in full; finally it stops them all. It
# prints one JSON object on stdout.


def _rounds(actors: int, messages: int) -> list[int]:
    return [actors] if messages <= actors else [actors, messages]


def _round_key(actors: int, count: int) -> str:
    return "rr_one_per_actor" if count == actors else "rr_many_per_actor"


def _lost(result: dict[str, Any], count: int, got: int, deadline: float) -> dict[str, Any]:
    result["error"] = (
        f"a round of {count:,} round-robin messages was not handled in full within "
        f"{deadline:g}s ({got:,} handled)"
    )
    return result


def _probe_actor_kind(
    kind: type[Any], actors: int, messages: int, deadline: float
) -> dict[str, Any]:
    # Warm up first (imports, class caches, the dispatcher's threads) so the
    # RSS difference below is the actors' own cost.
    warm = kind.start()
    warm.ask(_MSG, timeout=60)
    warm.stop(timeout=60)
    del warm
    started = _Countdown(actors)
    handled = _Countdown(0)
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    refs = [kind.start(started, handled) for _ in range(actors)]
    if not started.reached.wait(deadline):
        return {"error": f"not all {actors:,} actors started within {deadline:g}s"}
    spawn_s = time.perf_counter() - t0
    result: dict[str, Any] = {
        "spawn_per_s": actors / spawn_s,
        "rss_per_actor": (rss_bytes() - rss0) / actors,
        "threads": os_threads(),
    }
    tells = [ref.tell for ref in refs]
    sent = 0
    for count in _rounds(actors, messages):
        handled.arm(count)
        t0 = time.perf_counter()
        for i in range(count):
            tells[i % actors](_MSG)
        if not handled.reached.wait(deadline):
            actors_now = [ref._actor_weakref() for ref in refs]
            got = sum(actor.count for actor in actors_now if actor is not None) - sent
            return _lost(result, count, got, deadline)
        result[_round_key(actors, count)] = count / (time.perf_counter() - t0)
        sent += count
    t0 = time.perf_counter()
    futures = [ref.stop(block=False) for ref in refs]
    for future in futures:
        future.get(timeout=deadline)
    result["stop_per_s"] = actors / (time.perf_counter() - t0)
    return result


def _probe_simple_queue(actors: int, messages: int, deadline: float) -> dict[str, Any]:
    """Raw: one SimpleQueue per actor, drained by a small thread pool via a run queue."""
    handled = _Countdown(0)
    runq: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    per_worker = [0] * _RAW_POOL_THREADS
    warm: queue.SimpleQueue[Any] = queue.SimpleQueue()
    warm.put(_MSG)
    warm.get()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    mailboxes: list[queue.SimpleQueue[Any]] = [queue.SimpleQueue() for _ in range(actors)]
    spawn_s = time.perf_counter() - t0

    def work(slot: int) -> None:
        while True:
            index = runq.get()
            if index is None:
                return
            mailboxes[index].get_nowait()
            per_worker[slot] += 1
            handled()

    workers = [
        threading.Thread(target=work, args=(slot,), daemon=True)
        for slot in range(_RAW_POOL_THREADS)
    ]
    for worker in workers:
        worker.start()
    result: dict[str, Any] = {
        "spawn_per_s": actors / spawn_s,
        "rss_per_actor": (rss_bytes() - rss0) / actors,
        "threads": os_threads(),
    }
    sent = 0
    try:
        for count in _rounds(actors, messages):
            handled.arm(count)
            t0 = time.perf_counter()
            for i in range(count):
                index = i % actors
                mailboxes[index].put(_MSG)
                runq.put(index)
            if not handled.reached.wait(deadline):
                return _lost(result, count, sum(per_worker) - sent, deadline)
            result[_round_key(actors, count)] = count / (time.perf_counter() - t0)
            sent += count
    finally:
        for _ in workers:
            runq.put(None)
    return result


def _probe_asyncio(actors: int, messages: int, deadline: float) -> dict[str, Any]:
    """Raw: one asyncio.Queue and one task per actor, on one event loop."""

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        all_started: asyncio.Future[None] = loop.create_future()
        state: dict[str, Any] = {"started": 0, "handled": 0, "target": 0, "done": None}

        async def actor(mailbox: asyncio.Queue[Any]) -> None:
            state["started"] += 1
            if state["started"] == actors:
                all_started.set_result(None)
            while True:
                await mailbox.get()
                state["handled"] += 1
                if state["handled"] == state["target"]:
                    state["done"].set_result(None)

        warm: asyncio.Queue[Any] = asyncio.Queue()
        warm.put_nowait(_MSG)
        await warm.get()
        rss0 = rss_bytes()
        t0 = time.perf_counter()
        mailboxes: list[asyncio.Queue[Any]] = [asyncio.Queue() for _ in range(actors)]
        tasks = [asyncio.create_task(actor(mailbox)) for mailbox in mailboxes]
        try:
            await asyncio.wait_for(asyncio.shield(all_started), deadline)
        except TimeoutError:
            return {"error": f"not all {actors:,} tasks started within {deadline:g}s"}
        spawn_s = time.perf_counter() - t0
        result: dict[str, Any] = {
            "spawn_per_s": actors / spawn_s,
            "rss_per_actor": (rss_bytes() - rss0) / actors,
            "threads": os_threads(),
        }
        for count in _rounds(actors, messages):
            done: asyncio.Future[None] = loop.create_future()
            state.update(handled=0, target=count, done=done)
            t0 = time.perf_counter()
            for i in range(count):
                mailboxes[i % actors].put_nowait(_MSG)
            try:
                await asyncio.wait_for(asyncio.shield(done), deadline)
            except TimeoutError:
                return _lost(result, count, state["handled"], deadline)
            result[_round_key(actors, count)] = count / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        result["stop_per_s"] = actors / (time.perf_counter() - t0)
        return result

    return asyncio.run(main())


def _probe(kind: str, actors: int, messages: int, deadline: float) -> dict[str, Any]:
    if kind == "pooled":
        system = ActorSystem(name="probe")
        try:
            with system.activated():
                return _probe_actor_kind(_PooledSink, actors, messages, deadline)
        finally:
            system.shutdown()
    if kind == "threading":
        return _probe_actor_kind(_ThreadSink, actors, messages, deadline)
    if kind == "simplequeue":
        return _probe_simple_queue(actors, messages, deadline)
    if kind == "asyncio":
        return _probe_asyncio(actors, messages, deadline)
    raise ValueError(f"unknown probe kind {kind!r}")


def _run_probe(kind: str, actors: int, messages: int, deadline: float) -> dict[str, Any]:
    """Run one probe in a fresh interpreter; its failures come back as ``error``."""
    command = [
        sys.executable,
        "-m",
        "fore.bench.actors",
        "--probe",
        kind,
        "--actors",
        str(actors),
        "--messages",
        str(messages),
        "--deadline",
        str(deadline),
    ]
    try:
        done = subprocess.run(
            command,
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=3 * deadline + 60,
            check=False,
            env={**os.environ, "PYTHONPATH": str(_ROOT)},
        )
    except subprocess.TimeoutExpired:
        return {"error": f"probe did not finish within {3 * deadline + 60:g}s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-3:]
        return {"error": f"probe exited {done.returncode}: {' | '.join(tail)}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# -- the run -----------------------------------------------------------------------------


def _nan(result: dict[str, Any], key: str) -> float:
    value = result.get(key)
    return float("nan") if value is None else float(value)


def run(*, quick: bool = False) -> dict[str, float]:
    """Run every measurement once; print tables and verdicts; return the metrics.

    Raises :class:`BenchFailed` (after printing) when a measurement lost
    messages or missed its deadline.
    """
    tells = 50_000 if quick else 200_000
    asks = 2_000 if quick else 10_000
    actors = 1_000 if quick else 10_000
    rr_messages = 20_000 if quick else 100_000  # 20 or 10 per actor, after a round of 1 each
    # Thread actors get the one-message-per-actor round only: 10,000 of them
    # handle well under 2k msg/s on 2 cores, and the ratio compares that round.
    deadline = 60.0 if quick else 120.0
    console.print(f"[bold]bench actors[/] — {machine_line()}")
    started_at = time.perf_counter()
    failures: list[str] = []

    def check(label: str, outcome: _Outcome) -> float:
        if outcome.error is not None:
            failures.append(f"{label}: {outcome.error}")
        return outcome.value

    system = ActorSystem(name="bench")
    try:
        with system.activated():
            pooled_tell = check("tell PooledActor", _tell_actor(_PooledSink, tells, deadline))
            thread_tell = check("tell ThreadingActor", _tell_actor(_ThreadSink, tells, deadline))
            sq_tell = check("tell SimpleQueue", _tell_simple_queue(tells, deadline))
            aio_tell = check("tell asyncio", _tell_asyncio(tells, deadline))
            table(
                f"tell throughput into one actor ({tells:,} messages)",
                ["kind", "tell (msg/s)", "vs ThreadingActor (×)"],
                [
                    ["PooledActor", pooled_tell, ratio(pooled_tell, thread_tell)],
                    ["pykka ThreadingActor", thread_tell, 1.0],
                    ["queue.SimpleQueue + thread (raw)", sq_tell, ratio(sq_tell, thread_tell)],
                    ["asyncio.Queue (raw, one loop)", aio_tell, ratio(aio_tell, thread_tell)],
                ],
            )
            # Interleaved rounds, each on a fresh actor (a fresh thread for the
            # ThreadingActor): a thread-to-thread round trip on this VM is
            # bimodal (~13 or ~80 us for the same ThreadingActor code, depending
            # on where the scheduler places the pair), and one long run of each
            # kind would compare whichever modes they happened to land in.
            p_ask: list[float] = []
            t_ask: list[float] = []
            s_ask: list[float] = []
            per_round = max(1, asks // _ASK_ROUNDS)
            for _ in range(_ASK_ROUNDS):
                p_ask += _ask_actor(_PooledSink, per_round)
                t_ask += _ask_actor(_ThreadSink, per_round)
                s_ask += _ask_simple_queue(per_round)
    finally:
        system.shutdown()
    a_ask = _ask_asyncio(asks)
    us = 1e6
    t50 = percentile(t_ask, 50)
    table(
        f"ask round trip ({asks:,} sequential asks)",
        ["kind", "p50 (µs)", "p99 (µs)", "p50 vs ThreadingActor (×)"],
        [
            [name, percentile(s, 50) * us, percentile(s, 99) * us, ratio(percentile(s, 50), t50)]
            for name, s in [
                ("PooledActor", p_ask),
                ("pykka ThreadingActor", t_ask),
                ("SimpleQueue request/reply (raw)", s_ask),
                ("asyncio future (raw, one loop)", a_ask),
            ]
        ],
    )

    probes = {
        "pooled": _run_probe("pooled", actors, rr_messages, deadline),
        "simplequeue": _run_probe("simplequeue", actors, rr_messages, deadline),
        "asyncio": _run_probe("asyncio", actors, rr_messages, deadline),
        "threading": _run_probe("threading", actors, actors, deadline),
    }
    labels = {
        "pooled": "PooledActor",
        "threading": "pykka ThreadingActor",
        "simplequeue": f"raw: SimpleQueues, {_RAW_POOL_THREADS} threads",
        "asyncio": "raw: asyncio task each",
    }
    for kind, result in probes.items():
        if "error" in result:
            failures.append(f"{labels[kind]} with {actors:,} actors: {result['error']}")
            for key in ("rr_one_per_actor", "rr_many_per_actor", "stop_per_s"):
                result.pop(key, None)  # a round that lost messages has no rate
    thread_rr = _nan(probes["threading"], "rr_one_per_actor")
    thread_spawn = _nan(probes["threading"], "spawn_per_s")
    rows = []
    for kind, result in probes.items():
        rr = _nan(result, "rr_one_per_actor")
        spawn = _nan(result, "spawn_per_s")
        rows.append(
            [
                labels[kind],
                rr,
                ratio(rr, thread_rr),
                _nan(result, "rr_many_per_actor"),
                spawn,
                ratio(spawn, thread_spawn),
                _nan(result, "stop_per_s"),
            ]
        )
    per_actor = rr_messages // actors
    table(
        f"{actors:,} live actors (each kind in a fresh process): round-robin, spawn, stop",
        [
            "kind",
            "RR, 1 each (msg/s)",
            "vs Thr. (×)",
            f"RR, {per_actor} each (msg/s)",
            "spawn (actors/s)",
            "vs Thr. (×)",
            "stop (actors/s)",
        ],
        rows,
    )
    thread_rss = _nan(probes["threading"], "rss_per_actor")
    table(
        f"{actors:,} live idle actors: memory and threads",
        ["kind", "RSS per idle actor (KiB)", "vs Thr. (×)", "OS threads in process (count)"],
        [
            [
                labels[kind],
                _nan(result, "rss_per_actor") / 1024,
                ratio(_nan(result, "rss_per_actor"), thread_rss),
                _nan(result, "threads"),
            ]
            for kind, result in probes.items()
        ],
    )

    pooled = probes["pooled"]
    metrics: dict[str, float] = {
        "tell_pooled_msgs_per_s": pooled_tell,
        "tell_threading_msgs_per_s": thread_tell,
        "tell_ratio": ratio(pooled_tell, thread_tell),
        "ask_pooled_p50_us": percentile(p_ask, 50) * us,
        "ask_pooled_p99_us": percentile(p_ask, 99) * us,
        "ask_threading_p50_us": t50 * us,
        "ask_p50_ratio": ratio(percentile(p_ask, 50), t50),
        "round_robin_pooled_msgs_per_s": _nan(pooled, "rr_one_per_actor"),
        "round_robin_pooled_many_msgs_per_s": _nan(pooled, "rr_many_per_actor"),
        "round_robin_threading_msgs_per_s": thread_rr,
        "round_robin_ratio": ratio(_nan(pooled, "rr_one_per_actor"), thread_rr),
        "spawn_ratio": ratio(_nan(pooled, "spawn_per_s"), thread_spawn),
        "pooled_rss_per_actor_kib": _nan(pooled, "rss_per_actor") / 1024,
        "threading_rss_per_actor_kib": _nan(probes["threading"], "rss_per_actor") / 1024,
        "pooled_threads": _nan(pooled, "threads"),
        "threading_threads": _nan(probes["threading"], "threads"),
        "actors": float(actors),
        "failures": float(len(failures)),
    }
    full = actors == 10_000
    scale = "" if full else f" (quick run: {actors:,} actors)"
    needs = "needs 10,000 actors; this is a quick run"
    targets_table(
        [
            Target(
                f"round-robin across 10,000 actors vs ThreadingActor{scale}",
                metrics["round_robin_ratio"],
                "×",
                ">=",
                15,
                applies=full,
                missing=needs,
            ),
            Target(
                f"OS threads with 10,000 live pooled actors{scale}",
                metrics["pooled_threads"],
                "threads",
                "<=",
                32,
                applies=full,
                missing=needs,
            ),
            Target(
                f"RSS per idle pooled actor{scale}",
                metrics["pooled_rss_per_actor_kib"],
                "KiB",
                "<=",
                8,
                applies=full,
                missing=needs,
            ),
            Target(
                "tell throughput into one actor vs ThreadingActor",
                metrics["tell_ratio"],
                "×",
                ">=",
                1.0,
            ),
            Target("ask p50 vs ThreadingActor's", metrics["ask_p50_ratio"], "×", "<=", 3.0),
            Target(
                "every message accounted for (lost-work failures)",
                float(len(failures)),
                "failures",
                "==",
                0,
            ),
        ]
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    console.print(
        f"took {time.perf_counter() - started_at:.0f}s; load avg now {load:.2f} "
        f"({actors:,} thread actors inflate it themselves)"
    )
    if failures:
        for failure in failures:
            console.print(f"[bold red]FAILED[/] {failure}")
        raise BenchFailed("; ".join(failures))
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench actors", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts (CI smoke run)")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--actors", type=int, default=10_000, help=argparse.SUPPRESS)
    parser.add_argument("--messages", type=int, default=100_000, help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=120.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        result = _probe(args.probe, args.actors, args.messages, args.deadline)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
        # Daemon threads (10,000 of them, for thread actors) need not be joined.
        os._exit(0)
    try:
        run(quick=args.quick)
    except BenchFailed:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
