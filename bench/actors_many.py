"""Many live actors, one fresh process per kind: spawn, RSS, threads, round-robin, stop.

Part of ``fore bench actors`` (:mod:`bench.actors`): RSS per idle actor is
only meaningful in a process whose earlier phases have not left freed memory
behind to hide the new actors' cost, and 10,000 thread actors must not slow
down what is measured after them, so :func:`run_probe` runs each kind's probe
in a fresh interpreter (``python -m fore.bench.actors_many --probe KIND``),
which prints one JSON object on stdout.

Each probe spawns ``actors`` actors and waits until every one has started
(spawn rate), measures RSS and OS threads with all of them alive and idle,
then sends messages round-robin in rounds -- one per actor (the workload
every kind gets, thread actors included), then ``messages`` in all -- and
waits until each round was handled in full; finally it stops them all.
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
from pathlib import Path
from typing import Any, NoReturn

from fore.actors.core import ActorSystem
from fore.bench._common import os_threads, rss_bytes
from fore.bench.actor_sinks import MESSAGE, PooledSink, ThreadSink

_ROOT = Path(__file__).resolve().parent.parent
RAW_POOL_THREADS = 4
"""Threads draining the raw SimpleQueue mailboxes (as many as the pooled dispatcher's here)."""


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
    warm.ask(MESSAGE, timeout=60)
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
            tells[i % actors](MESSAGE)
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
    per_worker = [0] * RAW_POOL_THREADS
    warm: queue.SimpleQueue[Any] = queue.SimpleQueue()
    warm.put(MESSAGE)
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
        threading.Thread(target=work, args=(slot,), daemon=True) for slot in range(RAW_POOL_THREADS)
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
                mailboxes[index].put(MESSAGE)
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
        warm.put_nowait(MESSAGE)
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
                mailboxes[i % actors].put_nowait(MESSAGE)
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
                return _probe_actor_kind(PooledSink, actors, messages, deadline)
        finally:
            system.shutdown()
    if kind == "threading":
        return _probe_actor_kind(ThreadSink, actors, messages, deadline)
    if kind == "simplequeue":
        return _probe_simple_queue(actors, messages, deadline)
    if kind == "asyncio":
        return _probe_asyncio(actors, messages, deadline)
    raise ValueError(f"unknown probe kind {kind!r}")


def run_probe(kind: str, actors: int, messages: int, deadline: float) -> dict[str, Any]:
    """Run one probe in a fresh interpreter; its failures come back as ``error``."""
    command = [
        sys.executable,
        "-m",
        "fore.bench.actors_many",
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


def main(argv: list[str] | None = None) -> NoReturn:
    """One probe in this (fresh) process: its result as one JSON line on stdout."""
    parser = argparse.ArgumentParser(prog="fore bench actors (probe)")
    parser.add_argument("--probe", required=True)
    parser.add_argument("--actors", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--deadline", type=float, default=120.0)
    args = parser.parse_args(argv)
    result = _probe(args.probe, args.actors, args.messages, args.deadline)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    # Daemon threads (10,000 of them, for thread actors) need not be joined.
    os._exit(0)


if __name__ == "__main__":
    main()
