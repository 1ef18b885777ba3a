"""Stress: asks racing crashes, stops and kills are always answered.

pykka's ``ActorRef.ask`` checks "alive" and then enqueues; an actor that stops
between the two leaves the ask in a mailbox nobody drains (seen here: 37 of
~690k asks hung in a crash stress test). The pooled mailbox closes that race;
these tests hammer it from several threads and require zero unresolved futures
-- an ask that only resolved because its deadline fired counts as unresolved.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

import pykka
import pytest

from fore.actors.core import ActorCrashed, AskTimeout, PooledActor, handles
from fore.messages.base import Message
from fore.messages.runtime import ChildSpec
from fore.supervision import Runtime, Supervisor

TOTAL_ASKS = 120_000
ACTORS = 64
CLIENTS = 6


class Work(Message):
    n: int
    crash: bool = False
    die: bool = False


class Target(PooledActor):
    default_ask_timeout = 120.0

    @handles(Work)
    def _work(self, message: Work) -> int:
        if message.die:
            raise SystemExit(1)
        if message.crash:
            raise RuntimeError("random crash")
        return message.n


def _classify(n: int, future: Any) -> str:
    """How the ask for ``Work(n=n)`` ended; a value must be the answer to *this* ask."""
    try:
        value = future.get(timeout=60)
    except AskTimeout:
        return "unresolved"
    except pykka.Timeout:
        return "unresolved"
    except (ActorCrashed, pykka.ActorDeadError, RuntimeError):
        return "error"
    return "value" if value == n else "misrouted"


@pytest.mark.slow
def test_supervised_asks_all_resolve_under_random_crashes() -> None:
    """Asks through stable handles while children crash (ask and tell paths)."""
    rt = Runtime(name="stress", max_restarts=10**9)
    try:
        sup = rt.start_child(
            ChildSpec(
                id="pool",
                kind="supervisor",
                start=lambda: Supervisor.start(
                    "pool",
                    children=[ChildSpec(id=f"t{i}", start=Target.start) for i in range(ACTORS)],
                    max_restarts=10**9,
                    period=1.0,
                ),
            )
        )
        from fore.messages.runtime import GetChild

        handles_ = [sup.ask(GetChild(child_id=f"t{i}"), timeout=30) for i in range(ACTORS)]
        per_client = TOTAL_ASKS // CLIENTS
        results: list[Counter[str]] = []
        lock = threading.Lock()

        def client(seed: int) -> None:
            rng = random.Random(seed)
            futures = []
            for n in range(per_client):
                handle = handles_[rng.randrange(ACTORS)]
                roll = rng.random()
                if roll < 0.01:
                    handle.tell(Work(n=n, crash=True))  # a crashing tell: restart
                futures.append((n, handle.ask(Work(n=n, die=roll > 0.995), block=False)))
            counts = Counter(_classify(n, f) for n, f in futures)
            with lock:
                results.append(counts)

        threads = [threading.Thread(target=client, args=(s,)) for s in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
            assert not t.is_alive()
        total = sum(results, Counter())
        assert sum(total.values()) == per_client * CLIENTS >= 100_000
        assert total["unresolved"] == 0
        assert total["misrouted"] == 0
        assert total["value"] > 0.9 * sum(total.values())
    finally:
        assert rt.close(timeout=60)


@pytest.mark.slow
def test_plain_ref_asks_all_resolve_while_actors_are_stopped_and_killed() -> None:
    """Asks to plain ActorRefs racing stop, stop-now, kill and crashes."""
    rt = Runtime(name="stress-plain")
    try:
        with rt.system.activated():
            refs = [Target.start() for _ in range(ACTORS)]
        refs_lock = threading.Lock()
        stop = threading.Event()

        def chaos() -> None:
            rng = random.Random(99)
            while not stop.is_set():
                i = rng.randrange(ACTORS)
                with refs_lock:
                    ref = refs[i]
                action = rng.random()
                actor = ref._actor_weakref()
                if action < 0.4:
                    ref.stop(block=False)
                elif action < 0.7:
                    from fore.actors.core import stop_now

                    stop_now(ref, block=False)
                elif actor is not None:
                    actor.kill()
                with rt.system.activated():
                    fresh = Target.start()
                with refs_lock:
                    refs[i] = fresh
                stop.wait(0.0005)

        chaos_thread = threading.Thread(target=chaos)
        chaos_thread.start()
        counts: Counter[str] = Counter()
        futures = []
        rng = random.Random(5)
        try:
            for n in range(TOTAL_ASKS):
                with refs_lock:
                    ref = refs[rng.randrange(ACTORS)]
                futures.append((n, ref.ask(Work(n=n, crash=rng.random() < 0.002), block=False)))
        finally:
            stop.set()
            chaos_thread.join(30)
        counts.update(_classify(n, f) for n, f in futures)
        assert sum(counts.values()) == TOTAL_ASKS
        assert counts["unresolved"] == 0
        assert counts["misrouted"] == 0
        assert counts["error"] > 0  # the chaos really raced the asks
    finally:
        assert rt.close(timeout=60)
