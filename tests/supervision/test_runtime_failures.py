"""Failures on the edges of an actor's message loop never wedge anything.

A ``BaseException`` in a handler fails that actor only; these tests pin the
same rule for code that runs *around* handlers: a reply future's ``set``, a
future's done-callback, an exit watcher, a timer callback, and blocking-lane
work nobody attached a callback to. Each case used to leave an actor scheduled
forever (never running again, never exiting, its supervisor never told), asks
unanswered, or the runtime's single timer thread dead.

Real threads and real actors; synchronisation by events, futures and bounded
waits only.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from pykka import ActorDeadError

from fore.actors.core import ActorExit, ActorSystem, PooledActor, PooledFuture, handles
from fore.actors.core.logs import capture_logs
from fore.actors.core.timer import Timer
from fore.messages.base import Message

WAIT = 5.0


class Ping(Message):
    pass


class Hold(Message):
    """Keep the actor busy until the test's gate opens."""


class Fail(Message):
    pass


class Offload(Message):
    """Run blocking work with neither ``then`` nor ``on_error``."""

    fail: bool


class Gate:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()


class Plain(PooledActor):
    def __init__(self, gate: Gate | None = None) -> None:
        super().__init__()
        self.gate = gate or Gate()
        self.offloaded: queue.SimpleQueue[Any] = queue.SimpleQueue()

    @handles(Ping)
    def _ping(self, _m: Ping) -> str:
        return "pong"

    @handles(Hold)
    def _hold(self, _m: Hold) -> str:
        self.gate.entered.set()
        return "released" if self.gate.release.wait(WAIT) else "never released"

    @handles(Fail)
    def _fail(self, _m: Fail) -> NoReturn:
        raise RuntimeError("handler failed")

    @handles(Offload)
    def _offload(self, message: Offload) -> None:
        def work() -> int:
            if message.fail:
                raise ValueError("unobserved blocking failure")
            return 1

        self.offloaded.put(self.run_blocking(work))


class TrippingFuture(PooledFuture[Any]):
    """A reply future whose ``set`` raises ``SystemExit`` after storing the value."""

    def set(self, value: Any = None) -> None:
        super().set(value)
        raise SystemExit("delivering the reply exploded")


class Tripwire(Plain):
    """Its asks use :class:`TrippingFuture` (pykka's ``_create_future`` hook)."""

    @classmethod
    def _create_future(cls) -> PooledFuture[Any]:
        return TrippingFuture(time.monotonic() + 60)


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    system = ActorSystem(name="edge", dispatcher_threads=2)
    try:
        with system.activated():
            yield system
    finally:
        system.shutdown(timeout=5.0)


def watch(ref: Any) -> queue.SimpleQueue[ActorExit]:
    exits: queue.SimpleQueue[ActorExit] = queue.SimpleQueue()
    actor = ref._actor_weakref()
    assert actor is not None and actor.add_exit_watcher(exits.put)
    return exits


def hold(ref: Any, gate: Gate) -> PooledFuture[Any]:
    future: PooledFuture[Any] = ref.ask(Hold(), block=False)
    assert gate.entered.wait(WAIT)
    return future


def raise_system_exit(*_args: Any) -> NoReturn:
    raise SystemExit("from a callback")


# -- an exception escaping the message loop -------------------------------------------


def test_an_exception_escaping_the_reply_path_fails_the_actor_instead_of_wedging_it(
    system: ActorSystem,
) -> None:
    gate = Gate()
    ref = Tripwire.start(gate)
    exits = watch(ref)
    ref.tell(Hold())
    assert gate.entered.wait(WAIT)
    tripping = ref.ask(Ping(), block=False)  # its reply's set() raises SystemExit
    queued = [ref.ask(Ping(), block=False) for _ in range(3)]

    gate.release.set()

    assert tripping.get(timeout=WAIT) == "pong"  # set() stored the value before raising
    record = exits.get(timeout=WAIT)  # the actor failed, and its watchers were told
    assert record.failed is True
    assert isinstance(record.error, SystemExit)
    for future in queued:  # mail queued behind it is answered, not stranded
        with pytest.raises(ActorDeadError):
            future.get(timeout=WAIT)
    assert not ref.is_alive()
    with pytest.raises(ActorDeadError):
        ref.ask(Ping(), timeout=WAIT)
    assert len(system.registry) == 0
    # The dispatcher threads are fine: another actor still runs.
    other = Plain.start()
    assert other.ask(Ping(), timeout=WAIT) == "pong"


def test_a_done_callback_raising_system_exit_is_contained_and_logged(
    system: ActorSystem,
) -> None:
    gate = Gate()
    ref = Plain.start(gate)
    held = hold(ref, gate)
    held.add_done_callback(raise_system_exit)  # runs on the dispatcher, inside the reply

    with capture_logs() as logs:
        gate.release.set()
        assert held.get(timeout=WAIT) == "released"
        # The actor was not unwound by the callback: it still runs its mail.
        assert ref.ask(Ping(), timeout=WAIT) == "pong"

    assert any(entry["event"] == "future_callback_failed" for entry in logs)
    assert ref.is_alive()


def test_a_done_callback_on_a_settled_future_cannot_unwind_the_caller() -> None:
    future: PooledFuture[int] = PooledFuture()
    future.set(1)
    with capture_logs() as logs:
        future.add_done_callback(raise_system_exit)  # runs at once, on this thread
    assert "future_callback_failed" in [entry["event"] for entry in logs]
    assert future.get(timeout=0) == 1


def test_an_exit_watcher_raising_system_exit_does_not_strand_queued_asks(
    system: ActorSystem,
) -> None:
    gate = Gate()
    ref = Plain.start(gate)
    actor = ref._actor_weakref()
    assert actor is not None
    assert actor.add_exit_watcher(raise_system_exit)
    later = watch(ref)  # a second watcher, registered after the raising one
    held = hold(ref, gate)
    ref.tell(Fail())
    queued = [ref.ask(Ping(), block=False) for _ in range(3)]

    gate.release.set()

    assert held.get(timeout=WAIT) == "released"
    record = later.get(timeout=WAIT)
    assert record.failed is True
    assert isinstance(record.error, RuntimeError)
    for future in queued:
        with pytest.raises(ActorDeadError):
            future.get(timeout=WAIT)


# -- the timer thread ---------------------------------------------------------------------


def test_a_timer_callback_raising_system_exit_does_not_kill_the_timer_thread() -> None:
    timer = Timer(name="edge-timer")
    try:
        fired = threading.Event()
        with capture_logs() as logs:
            timer.call_later(0, raise_system_exit)
            timer.call_later(0, fired.set)  # due no earlier than the first: runs after it
            assert fired.wait(WAIT)
        assert "timer_callback_failed" in [entry["event"] for entry in logs]
    finally:
        assert timer.shutdown()


# -- blocking work with nobody listening ------------------------------------------------


def test_run_blocking_without_callbacks_fails_the_actor_on_error(system: ActorSystem) -> None:
    ref = Plain.start()
    exits = watch(ref)

    ref.tell(Offload(fail=True))

    record = exits.get(timeout=WAIT)
    assert record.failed is True
    assert isinstance(record.error, ValueError)
    assert str(record.error) == "unobserved blocking failure"


def test_run_blocking_without_callbacks_succeeding_leaves_the_actor_alone(
    system: ActorSystem,
) -> None:
    ref = Plain.start()
    ref.tell(Offload(fail=False))
    actor = ref._actor_weakref()
    assert actor is not None
    work = actor.offloaded.get(timeout=WAIT)
    assert work.result(timeout=WAIT) == 1
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    assert ref.is_alive()
