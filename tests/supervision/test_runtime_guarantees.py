"""The pooled runtime's promises at their edges.

* every ask is answered -- also one whose reply the actor deferred and then
  never gave because it crashed, stopped or was killed;
* "the actor is not running" is one error however it is met --
  :class:`ActorStopped`, a ``ForeError`` and a ``pykka.ActorDeadError``;
* no ask waits forever: a wait-forever deadline is refused where it is
  configured, and ``ask_then`` is bounded even for a target whose futures
  carry no deadline;
* a handler never blocks a dispatcher thread on a pending future (it gets
  :class:`BlockingOnDispatcherError` instead of stalling the runtime);
* an actor started while its system shuts down is refused, not orphaned;
* the blocking lane is bounded, and one timer thread serves every timer.

Real threads and real actors; synchronisation by events, barriers, exit
watchers and bounded waits only.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

import pykka
import pytest
from pykka import ActorDeadError

from fore.actors.core import ActorCrashed, ActorExit, ActorSystem, AskTimeout, PooledActor, handles
from fore.actors.core.errors import ActorStopped, ActorSystemClosed, BlockingOnDispatcherError
from fore.actors.core.future import PooledFuture
from fore.errors import ForeError
from fore.messages.base import Message

WAIT = 10.0


class Later(Message):
    """Defer the reply (and never give it)."""


class Crash(Message):
    pass


class Finish(Message):
    pass


class Ping(Message):
    pass


class AskInside(Message):
    """Make a blocking ask of another actor from inside the handler."""


class PollInside(Message):
    """Poll a pending future with ``get(timeout=0)`` from inside the handler."""


class Deferrer(PooledActor):
    def __init__(self) -> None:
        super().__init__()
        self.owed: list[PooledFuture[Any] | None] = []

    @handles(Later)
    def _later(self, _m: Later) -> None:
        self.owed.append(self.defer_reply())

    @handles(Crash)
    def _crash(self, _m: Crash) -> NoReturn:
        raise RuntimeError("crashed with a reply owed")

    @handles(Finish)
    def _finish(self, _m: Finish) -> None:
        self.stop()

    @handles(Ping)
    def _ping(self, _m: Ping) -> str:
        return "pong"


class Blocker(PooledActor):
    def __init__(self, other: Any) -> None:
        super().__init__()
        self.other = other

    @handles(AskInside)
    def _ask_inside(self, _m: AskInside) -> Any:
        return self.other.ask(Ping(), timeout=WAIT)

    @handles(PollInside)
    def _poll_inside(self, _m: PollInside) -> str:
        pending: PooledFuture[Any] = PooledFuture()
        try:
            pending.get(timeout=0)
        except pykka.Timeout:
            return "polled"
        return "unexpected"


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    system = ActorSystem(name="guarantees", dispatcher_threads=2, blocking_threads=2)
    try:
        with system.activated():
            yield system
    finally:
        system.shutdown(timeout=10.0)


def watch(ref: Any) -> queue.SimpleQueue[ActorExit]:
    exits: queue.SimpleQueue[ActorExit] = queue.SimpleQueue()
    actor = ref._actor_weakref()
    assert actor is not None and actor.add_exit_watcher(exits.put)
    return exits


# -- deferred replies owed at exit ----------------------------------------------------------


@pytest.mark.parametrize(
    ("how", "error"),
    [("crash", ActorCrashed), ("stop", ActorStopped), ("kill", ActorStopped)],
)
def test_a_deferred_reply_owed_when_the_actor_exits_is_answered_at_once(
    system: ActorSystem, how: str, error: type[BaseException]
) -> None:
    ref = Deferrer.start()
    owed = ref.ask(Later(), block=False)
    assert isinstance(owed, PooledFuture)
    assert ref.ask(Ping(), timeout=WAIT) == "pong"  # FIFO: the reply is deferred by now
    assert not owed.done()
    exits = watch(ref)
    actor = ref._actor_weakref()
    assert actor is not None
    if how == "crash":
        ref.tell(Crash())
    elif how == "stop":
        ref.tell(Finish())
    else:
        actor.kill()
    exits.get(timeout=WAIT)
    assert owed.done(), "answered by the exit, not left to its deadline"
    with pytest.raises(error):
        owed.get(timeout=0)


def test_every_way_of_meeting_a_stopped_actor_is_actor_stopped(system: ActorSystem) -> None:
    """A tell, an ask and a proxy of a stopped ref (pykka's own check), an ask still queued
    behind a running handler when the actor is killed, and a deferred reply owed at the
    kill: each is ``ActorStopped`` -- so ``except fore.ForeError`` catches it and pykka
    code's ``except ActorDeadError`` still does. (A supervised child's handle:
    tests/supervision/test_runtime_supervision.py.)"""
    met: list[BaseException] = []
    gone = Deferrer.start()
    gone.stop()
    for send in (
        lambda: gone.tell(Ping()),
        lambda: gone.ask(Ping(), timeout=WAIT),
        gone.proxy,
    ):
        with pytest.raises(ActorDeadError) as info:
            send()
        met.append(info.value)
    assert str(met[0]) == f"{gone} not found"  # pykka's words, kept
    killed = Deferrer.start()
    actor = killed._actor_weakref()
    assert actor is not None
    exits = watch(killed)
    owed = killed.ask(Later(), block=False)
    assert killed.ask(Ping(), timeout=WAIT) == "pong"
    entered, release = threading.Event(), threading.Event()
    assert actor.post(lambda: (entered.set(), release.wait(WAIT)))
    assert entered.wait(WAIT)
    queued = killed.ask(Ping(), block=False)  # behind the running handler
    actor.kill()
    release.set()
    exits.get(timeout=WAIT)
    for future in (queued, owed):
        with pytest.raises(ActorDeadError) as info:
            future.get(timeout=WAIT)
        met.append(info.value)
    assert [type(e) for e in met] == [ActorStopped] * 5
    assert all(isinstance(e, ForeError) for e in met)


class Releaser(Deferrer):
    """Hands its owed replies on as it exits (``release_reply``): someone else answers them."""

    def __init__(self) -> None:
        super().__init__()
        self.released: list[bool] = []

    def _let_go(self) -> None:
        for reply in self.owed:
            assert reply is not None
            self.released.append(self.release_reply(reply))
            self.released.append(self.release_reply(reply))  # twice: it is no longer owed here

    def on_failure(self, *_exc_info: Any) -> None:
        self._let_go()

    def on_stop(self) -> None:
        self._let_go()


@pytest.mark.parametrize("how", ["crash", "stop"])
def test_a_released_deferred_reply_is_answered_by_whoever_took_it_not_by_the_exit(
    system: ActorSystem, how: str
) -> None:
    ref = Releaser.start()
    owed = ref.ask(Later(), block=False)
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    actor = ref._actor_weakref()
    assert isinstance(actor, Releaser)
    exits = watch(ref)
    ref.tell(Crash() if how == "crash" else Finish())
    exits.get(timeout=WAIT)
    assert actor.released == [True, False]
    assert not owed.done(), "the exit answered a reply it had handed on"
    reply = actor.owed[0]
    assert reply is not None and reply.try_set("the truth, from whoever outlived it")
    assert owed.get(timeout=0) == "the truth, from whoever outlived it"


@pytest.mark.parametrize("kind", [Deferrer, Releaser])
def test_a_deferred_reply_given_before_the_exit_keeps_its_value(
    system: ActorSystem, kind: type[Deferrer]
) -> None:
    ref = kind.start()
    owed = ref.ask(Later(), block=False)
    assert ref.ask(Ping(), timeout=WAIT) == "pong"
    actor = ref._actor_weakref()
    assert isinstance(actor, kind)
    reply = actor.owed[0]
    assert reply is not None and reply.try_set("answered")
    exits = watch(ref)
    ref.tell(Crash())
    exits.get(timeout=WAIT)
    assert owed.get(timeout=0) == "answered"
    if isinstance(actor, Releaser):
        assert actor.released == [False, False]  # answered: nothing was owed to release


# -- no wait-forever deadlines ----------------------------------------------------------------


def test_a_class_with_a_wait_forever_deadline_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="deadline"):

        class Forever(PooledActor):
            default_ask_timeout = None  # type: ignore[assignment]

    for bad in (0, -5.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="default_ask_timeout"):
            type("Bad", (PooledActor,), {"default_ask_timeout": bad})


class NoDeadline(PooledActor):
    """Its futures carry no deadline (a pykka-style ``_create_future``); it never answers."""

    @classmethod
    def _create_future(cls) -> PooledFuture[Any]:
        return PooledFuture()

    @handles(Later)
    def _later(self, _m: Later) -> None:
        self.defer_reply()


class Asker(PooledActor):
    default_ask_timeout = 0.2

    def __init__(self, target: Any, outcome: queue.SimpleQueue[Any]) -> None:
        super().__init__()
        self.target = target
        self.outcome = outcome

    @handles(Ping)
    def _go(self, _m: Ping) -> None:
        self.ask_then(self.target, Later(), then=self.outcome.put, on_error=self.outcome.put)


def test_ask_then_is_bounded_even_when_the_target_future_has_no_deadline(
    system: ActorSystem,
) -> None:
    outcome: queue.SimpleQueue[Any] = queue.SimpleQueue()
    asker = Asker.start(NoDeadline.start(), outcome)
    asker.tell(Ping())
    assert isinstance(outcome.get(timeout=WAIT), AskTimeout)  # the asker's own default


def test_ask_then_refuses_a_bad_timeout(system: ActorSystem) -> None:
    ref = Deferrer.start()
    actor = ref._actor_weakref()
    assert actor is not None
    with pytest.raises(ValueError, match="timeout"):
        actor.ask_then(ref, Ping(), then=print, timeout=float("inf"))


# -- handlers never block a dispatcher thread on a future ------------------------------------


def test_a_blocking_ask_inside_a_handler_raises_instead_of_stalling(system: ActorSystem) -> None:
    other = Deferrer.start()
    blocker = Blocker.start(other)
    with pytest.raises(BlockingOnDispatcherError, match="ask_then"):
        blocker.ask(AskInside(), timeout=WAIT)
    assert blocker.is_alive(), "an ask's handler error goes to the asker only"
    assert blocker.ask(PollInside(), timeout=WAIT) == "polled", "a non-blocking poll is fine"
    assert other.ask(Ping(), timeout=WAIT) == "pong"


def test_a_blocking_get_outside_the_dispatcher_still_waits(system: ActorSystem) -> None:
    ref = Deferrer.start()
    future = ref.ask(Ping(), block=False)
    assert future.get(timeout=WAIT) == "pong"  # the test thread may block


# -- no actor starts while its system shuts down ---------------------------------------------


class Spawner(PooledActor):
    """Starts another actor from its on_stop (as cleanup code might)."""

    def __init__(self, outcome: queue.SimpleQueue[Any]) -> None:
        super().__init__()
        self.outcome = outcome

    def on_stop(self) -> None:
        try:
            self.outcome.put(Deferrer.start())
        except ActorSystemClosed as exc:
            self.outcome.put(exc)


def test_an_actor_started_during_system_shutdown_is_refused() -> None:
    system = ActorSystem(name="closing", dispatcher_threads=2)
    outcome: queue.SimpleQueue[Any] = queue.SimpleQueue()
    with system.activated():
        Spawner.start(outcome)
    assert system.shutdown(timeout=WAIT)
    got = outcome.get(timeout=WAIT)
    assert isinstance(got, ActorSystemClosed), f"an orphan was started: {got!r}"
    assert "shutting down" in str(got)
    assert len(system.registry) == 0


# -- the blocking lane and the timer ----------------------------------------------------------


def lane_threads(system: ActorSystem) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"{system.name}-blocking")]


def test_the_blocking_lane_never_runs_more_than_its_threads(system: ActorSystem) -> None:
    bound = system.blocking.max_workers
    assert bound == 2
    release = threading.Event()
    running = threading.Semaphore(0)
    entered: list[int] = []
    lock = threading.Lock()

    def job(n: int) -> int:
        with lock:
            entered.append(n)
        running.release()
        release.wait(WAIT)
        return n

    futures = [system.blocking.submit(job, n) for n in range(bound * 3)]
    try:
        for _ in range(bound):
            assert running.acquire(timeout=WAIT)
        # Every lane thread now sits in a job that waits for `release`: the
        # other jobs can only be queued, never run on an extra thread.
        assert len(lane_threads(system)) == bound
        with lock:
            assert len(entered) == bound
        assert sum(f.running() for f in futures) == bound
    finally:
        release.set()
    assert sorted(f.result(timeout=WAIT) for f in futures) == list(range(bound * 3))
    assert len(lane_threads(system)) == bound


def test_many_timers_share_one_thread_and_cancelled_ones_never_fire(
    system: ActorSystem,
) -> None:
    before = {t.ident for t in threading.enumerate()}
    fired: list[tuple[int, int | None]] = []
    lock = threading.Lock()
    count = 1000
    kept = [n for n in range(count) if n % 2 == 0]
    all_fired = threading.Event()

    def fire(n: int) -> None:
        with lock:
            fired.append((n, threading.get_ident()))
            if len(fired) == len(kept):
                all_fired.set()

    # The timer thread is held in a callback while the timers are set and half of them
    # cancelled: a timer cancelled before it is due never fires, but on a loaded machine
    # setting a thousand timers can take longer than the first ones' 1 ms delay.
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(WAIT)

    system.timer.call_later(0, hold)
    assert entered.wait(WAIT)
    try:
        handles_ = [system.timer.call_later((n % 20) / 1000, fire, n) for n in range(count)]
        for n, handle in enumerate(handles_):
            if n % 2:
                handle.cancel()
    finally:
        release.set()
    assert all_fired.wait(WAIT)
    marker = threading.Event()
    system.timer.call_later(0.05, marker.set)  # after every kept timer's deadline
    assert marker.wait(WAIT)
    with lock:
        assert sorted(n for n, _ in fired) == kept, "cancelled timers never fire"
        threads = {ident for _, ident in fired}
    assert len(threads) == 1
    assert threads <= before, "no thread was started for a timer"
    assert system.timer.pending() == 0
