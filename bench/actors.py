"""Pooled actors vs pykka ThreadingActor vs raw baselines, in one run.

Measures, side by side: tell throughput into one actor, ask round trip
(p50/p99), round-robin messaging across many live actors, spawn rate, RSS per
idle actor and OS threads in use. Prints ratios against the baselines.

Run: ``fore bench actors`` (or ``python -m bench.actors [--quick]``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import queue
import threading
import time
from typing import Any

import pykka

from actors.core import ActorSystem, PooledActor
from bench._common import (
    console,
    machine_line,
    os_threads,
    percentile,
    ratio,
    rss_bytes,
    table,
)


class _PooledSink(PooledActor):
    def __init__(self, done: Any = None) -> None:
        super().__init__()
        self.count = 0
        self.done = done

    def on_receive(self, message: Any) -> Any:
        self.count += 1
        if self.done is not None:
            self.done()
        return message


class _ThreadSink(pykka.ThreadingActor):
    use_daemon_thread = True

    def __init__(self, done: Any = None) -> None:
        super().__init__()
        self.count = 0
        self.done = done

    def on_receive(self, message: Any) -> Any:
        self.count += 1
        if self.done is not None:
            self.done()
        return message


_MSG = ("ping", 1)


# -- tell throughput ---------------------------------------------------------------


def _tell_actor(kind: type[Any], n: int) -> float:
    ref = kind.start()
    try:
        start = time.perf_counter()
        for _ in range(n):
            ref.tell(_MSG)
        ref.ask(_MSG, timeout=120)
        return n / (time.perf_counter() - start)
    finally:
        ref.stop(timeout=30)


def _tell_simple_queue(n: int) -> float:
    q: queue.SimpleQueue[Any] = queue.SimpleQueue()
    done = threading.Event()

    def consume() -> None:
        for _ in range(n):
            q.get()
        done.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    start = time.perf_counter()
    for _ in range(n):
        q.put(_MSG)
    done.wait(120)
    return n / (time.perf_counter() - start)


def _tell_asyncio(n: int) -> float:
    async def main() -> float:
        q: asyncio.Queue[Any] = asyncio.Queue()

        async def consume() -> None:
            for _ in range(n):
                await q.get()

        task = asyncio.create_task(consume())
        start = time.perf_counter()
        for _ in range(n):
            q.put_nowait(_MSG)
        await task
        return n / (time.perf_counter() - start)

    return asyncio.run(main())


# -- ask round trip ----------------------------------------------------------------


def _ask_actor(kind: type[Any], n: int) -> list[float]:
    ref = kind.start()
    try:
        for _ in range(200):
            ref.ask(_MSG)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            ref.ask(_MSG)
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

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    samples = []
    reply: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for _ in range(n):
        t0 = time.perf_counter()
        requests.put(reply)
        reply.get()
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
            await fut
            samples.append(time.perf_counter() - t0)
        requests.put_nowait(None)
        await task
        return samples

    return asyncio.run(main())


# -- many actors: spawn, RSS, threads, round-robin -------------------------------------


def _many(kind: type[Any], actors: int, messages: int) -> dict[str, float]:
    counter = itertools.count(1)
    all_done = threading.Event()

    def done() -> None:
        if next(counter) == messages:
            all_done.set()

    rss0 = rss_bytes()
    start = time.perf_counter()
    refs = [kind.start(done) for _ in range(actors)]
    # Wait until every actor has started (its on_start ran / thread is up).
    for ref in refs[-10:]:
        ref.ask(("warm",), timeout=120)
    spawn_s = time.perf_counter() - start
    counter = itertools.count(11)  # the 10 warm-up messages above
    rss1 = rss_bytes()
    threads = os_threads()
    start = time.perf_counter()
    for i in range(messages - 10):
        refs[i % actors].tell(_MSG)
    all_done.wait(600)
    rr_s = time.perf_counter() - start
    start = time.perf_counter()
    futures = [ref.stop(block=False) for ref in refs]
    for f in futures:
        f.get(timeout=120)
    stop_s = time.perf_counter() - start
    return {
        "spawn_per_s": actors / spawn_s,
        "stop_per_s": actors / stop_s,
        "rss_per_actor": (rss1 - rss0) / actors,
        "threads": float(threads),
        "round_robin_msgs_per_s": (messages - 10) / rr_s,
    }


def run(*, quick: bool = False) -> dict[str, float]:
    """Run every measurement once; print tables; return the metrics."""
    tells = 50_000 if quick else 200_000
    asks = 2_000 if quick else 10_000
    actors = 1_000 if quick else 10_000
    rr_messages = 20_000 if quick else 100_000
    console.print(f"[bold]bench actors[/] — {machine_line()}")

    system = ActorSystem(name="bench")
    metrics: dict[str, float] = {}
    try:
        with system.activated():
            pooled_tell = _tell_actor(_PooledSink, tells)
            thread_tell = _tell_actor(_ThreadSink, tells)
            sq_tell = _tell_simple_queue(tells)
            aio_tell = _tell_asyncio(tells)
            table(
                f"tell throughput into one actor ({tells:,} messages)",
                ["kind", "msg/s", "vs ThreadingActor"],
                [
                    ["PooledActor", pooled_tell, ratio(pooled_tell, thread_tell)],
                    ["pykka ThreadingActor", thread_tell, 1.0],
                    ["queue.SimpleQueue + thread (raw)", sq_tell, ratio(sq_tell, thread_tell)],
                    ["asyncio.Queue (raw, one loop)", aio_tell, ratio(aio_tell, thread_tell)],
                ],
            )
            p_ask = _ask_actor(_PooledSink, asks)
            t_ask = _ask_actor(_ThreadSink, asks)
            s_ask = _ask_simple_queue(asks)
            a_ask = _ask_asyncio(asks)
            us = 1e6
            table(
                f"ask round trip ({asks:,} sequential asks)",
                ["kind", "p50 µs", "p99 µs", "p50 vs ThreadingActor"],
                [
                    [
                        "PooledActor",
                        percentile(p_ask, 50) * us,
                        percentile(p_ask, 99) * us,
                        ratio(percentile(p_ask, 50), percentile(t_ask, 50)),
                    ],
                    [
                        "pykka ThreadingActor",
                        percentile(t_ask, 50) * us,
                        percentile(t_ask, 99) * us,
                        1.0,
                    ],
                    [
                        "SimpleQueue request/reply (raw)",
                        percentile(s_ask, 50) * us,
                        percentile(s_ask, 99) * us,
                        ratio(percentile(s_ask, 50), percentile(t_ask, 50)),
                    ],
                    [
                        "asyncio future (raw, one loop)",
                        percentile(a_ask, 50) * us,
                        percentile(a_ask, 99) * us,
                        ratio(percentile(a_ask, 50), percentile(t_ask, 50)),
                    ],
                ],
            )
            pooled_many = _many(_PooledSink, actors, rr_messages)
            thread_many = _many(_ThreadSink, actors, rr_messages)
            table(
                f"{actors:,} live actors, {rr_messages:,} round-robin messages",
                ["metric", "PooledActor", "ThreadingActor", "pooled / threading"],
                [
                    [
                        "round-robin msg/s",
                        pooled_many["round_robin_msgs_per_s"],
                        thread_many["round_robin_msgs_per_s"],
                        ratio(
                            pooled_many["round_robin_msgs_per_s"],
                            thread_many["round_robin_msgs_per_s"],
                        ),
                    ],
                    [
                        "spawn actors/s",
                        pooled_many["spawn_per_s"],
                        thread_many["spawn_per_s"],
                        ratio(pooled_many["spawn_per_s"], thread_many["spawn_per_s"]),
                    ],
                    [
                        "stop actors/s",
                        pooled_many["stop_per_s"],
                        thread_many["stop_per_s"],
                        ratio(pooled_many["stop_per_s"], thread_many["stop_per_s"]),
                    ],
                    [
                        "RSS per idle actor (KiB)",
                        pooled_many["rss_per_actor"] / 1024,
                        thread_many["rss_per_actor"] / 1024,
                        ratio(pooled_many["rss_per_actor"], thread_many["rss_per_actor"]),
                    ],
                    [
                        "OS threads in process",
                        pooled_many["threads"],
                        thread_many["threads"],
                        ratio(pooled_many["threads"], thread_many["threads"]),
                    ],
                ],
            )
    finally:
        system.shutdown()

    metrics.update(
        tell_pooled_msgs_per_s=pooled_tell,
        tell_threading_msgs_per_s=thread_tell,
        tell_ratio=ratio(pooled_tell, thread_tell),
        ask_pooled_p50_us=percentile(p_ask, 50) * 1e6,
        ask_pooled_p99_us=percentile(p_ask, 99) * 1e6,
        ask_threading_p50_us=percentile(t_ask, 50) * 1e6,
        ask_p50_ratio=ratio(percentile(p_ask, 50), percentile(t_ask, 50)),
        round_robin_ratio=ratio(
            pooled_many["round_robin_msgs_per_s"], thread_many["round_robin_msgs_per_s"]
        ),
        round_robin_pooled_msgs_per_s=pooled_many["round_robin_msgs_per_s"],
        round_robin_threading_msgs_per_s=thread_many["round_robin_msgs_per_s"],
        pooled_rss_per_actor_kib=pooled_many["rss_per_actor"] / 1024,
        pooled_threads=pooled_many["threads"],
        threading_threads=thread_many["threads"],
        spawn_ratio=ratio(pooled_many["spawn_per_s"], thread_many["spawn_per_s"]),
        actors=float(actors),
    )
    verdicts = [
        ("round-robin ≥ 15× ThreadingActor", metrics["round_robin_ratio"] >= 15),
        ("≤ 32 OS threads with all pooled actors alive", metrics["pooled_threads"] <= 32),
        ("≤ 8 KiB RSS per idle pooled actor", metrics["pooled_rss_per_actor_kib"] <= 8),
        ("tell throughput ≥ ThreadingActor", metrics["tell_ratio"] >= 1.0),
        ("ask p50 within 3× ThreadingActor", metrics["ask_p50_ratio"] <= 3.0),
    ]
    table("targets", ["target", "met"], [[name, "yes" if ok else "NO"] for name, ok in verdicts])
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench actors", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts (CI smoke run)")
    args = parser.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
