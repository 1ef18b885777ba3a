"""Supervisor plans under pressure: backoffs, superseded operations, odd children.

Regression tests for the supervision audit: a shutdown, a stop or an
escalation never waits behind a restart backoff; a reply owed by an operation
that a shutdown supersedes (or that the supervisor's exit cuts short) is still
answered; a child that is *stopping* is waited for until it has really exited
(so reverse-order shutdown is exact and its mail is carried over to the next
incarnation); a child whose start raises ``SystemExit`` or returns a
non-pooled actor fails that start only; a bad request *told* to a supervisor
is logged, not fatal; snapshots and handles say what is true.

Real pooled actors on real threads; synchronisation by events, exit watchers
and bounded waits; "not yet" states are asserted only where something the
test holds (a gate, a 600 s backoff) makes them certain.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar, NoReturn

import pykka
import pytest
from pykka import ActorDeadError, ActorRef

from fore.actors.core import ActorExit, ActorSystem, PooledActor, PooledFuture, handles, stop_now
from fore.actors.core.logs import capture_logs
from fore.messages.runtime import (
    ChildSpec,
    ChildStatus,
    GetChild,
    Shutdown,
    StartChild,
    StopChild,
    Strategy,
    WhichChildren,
)
from fore.supervision import Backoff, Handle, Runtime, Supervisor, SupervisorIntensityError
from fore.supervision.supervisor import ChildRejectedError
from tests.supervision.test_supervision import (
    WAIT,
    Block,
    Crash,
    Finish,
    Who,
    gate,
    spec,
    urn,
    wait_until,
)

NEVER = 600.0
"""A backoff or shutdown timeout no test waits out: anything it would delay must not wait."""


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    system = ActorSystem(name="sup-plans", dispatcher_threads=4)
    try:
        with system.activated():
            yield system
    finally:
        system.shutdown(timeout=10.0)


def ask(ref: ActorRef[Any] | Handle[Any], message: Any) -> Any:
    return ref.ask(message, block=True, timeout=WAIT)


def watch(ref: Any) -> queue.SimpleQueue[ActorExit]:
    exits: queue.SimpleQueue[ActorExit] = queue.SimpleQueue()
    actor = ref._actor_weakref()
    assert actor is not None and actor.add_exit_watcher(exits.put)
    return exits


def node(sup: ActorRef[Any] | Handle[Any], child_id: str) -> Any:
    for child in ask(sup, WhichChildren()).children:
        if child.id == child_id:
            return child
    return None


def child_status(sup: ActorRef[Any] | Handle[Any], child_id: str) -> ChildStatus | None:
    found = node(sup, child_id)
    return None if found is None else ChildStatus(found.status)


def never_backoff() -> Backoff:
    return Backoff(initial=NEVER, maximum=NEVER, jitter=0.0)


# -- B1: nothing waits behind a backoff ---------------------------------------------------


def test_stop_child_shutdown_and_stop_do_not_wait_behind_a_backoff(system: ActorSystem) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s", children=[spec("w", journal), spec("ok", journal)], backoff=never_backoff()
    )
    w: Handle[Any] = ask(sup, GetChild(child_id="w"))
    w.tell(Crash())  # w now waits out a 600 s backoff
    wait_until(lambda: child_status(sup, "w") is ChildStatus.RESTARTING)

    assert ask(sup, StopChild(child_id="ok")) is True
    assert "stop:ok" in journal
    assert ask(sup, Shutdown()) is None
    assert sup.stop(timeout=WAIT) is True
    assert journal.count("start:w") == 1, "the backoff was cancelled, never served"
    assert system.timer.pending() == 0


def test_an_escalation_does_not_wait_behind_a_backoff(system: ActorSystem) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s",
        children=[spec("w", journal), spec("ok", journal)],
        backoff=never_backoff(),
        max_restarts=1,
        period=NEVER,
    )
    exits = watch(sup)
    w: Handle[Any] = ask(sup, GetChild(child_id="w"))
    ok: Handle[Any] = ask(sup, GetChild(child_id="ok"))
    w.tell(Crash())  # restart 1 of 1: a 600 s backoff
    wait_until(lambda: child_status(sup, "w") is ChildStatus.RESTARTING)
    ok.tell(Crash())  # restart 2: more than max_restarts, the supervisor gives up

    record = exits.get(timeout=WAIT)
    assert record.failed
    assert isinstance(record.error, SupervisorIntensityError)
    assert not w.is_alive() and not ok.is_alive()
    assert system.timer.pending() == 0


# -- B2: replies of superseded or abandoned operations are answered ---------------------------


def test_stop_child_replies_survive_a_shutdown_that_supersedes_them(system: ActorSystem) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s", children=[spec("a", journal, shutdown_timeout=NEVER), spec("b", journal)]
    )
    a: Handle[Any] = ask(sup, GetChild(child_id="a"))
    entered, release = gate("b2-shutdown")
    a.tell(Block(token="b2-shutdown"))
    assert entered.wait(WAIT)
    try:
        stop_a = sup.ask(StopChild(child_id="a"), block=False)  # in flight: a is blocked
        wait_until(lambda: child_status(sup, "a") is ChildStatus.STOPPING)
        stop_b = sup.ask(StopChild(child_id="b"), block=False)  # queued behind it
        shutdown = sup.ask(Shutdown(), block=False)  # supersedes both
        wait_until(lambda: "stop:b" in journal)
    finally:
        release.set()
    assert shutdown.get(timeout=WAIT) is None
    assert stop_a.get(timeout=WAIT) is True
    assert stop_b.get(timeout=WAIT) is True
    assert journal == ["start:a", "start:b", "stop:b", "stop:a"]


def test_stop_child_replies_are_answered_when_the_supervisor_exits(system: ActorSystem) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s", children=[spec("a", journal, shutdown_timeout=NEVER), spec("b", journal)]
    )
    a: Handle[Any] = ask(sup, GetChild(child_id="a"))
    entered, release = gate("b2-exit")
    a.tell(Block(token="b2-exit"))
    assert entered.wait(WAIT)
    try:
        stop_a = sup.ask(StopChild(child_id="a"), block=False)
        wait_until(lambda: child_status(sup, "a") is ChildStatus.STOPPING)
        stop_b = sup.ask(StopChild(child_id="b"), block=False)
        assert isinstance(stop_b, PooledFuture)
        ask(sup, WhichChildren())  # FIFO: StopChild(b) is now queued behind StopChild(a)
        assert not stop_b.done()
        assert stop_now(sup, timeout=WAIT)
        # Both children went down with the supervisor: each StopChild is answered.
        assert stop_a.get(timeout=WAIT) is True
        assert stop_b.get(timeout=WAIT) is True
    finally:
        release.set()


# -- B7: the snapshot after the intensity is exceeded ---------------------------------------


def test_a_snapshot_during_an_escalation_shows_the_crashed_child_stopped(
    system: ActorSystem,
) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s",
        max_restarts=1,
        period=NEVER,
        children=[
            spec("x", journal),
            spec("a", journal),
            spec("b", journal, shutdown_timeout=NEVER),
        ],
    )
    x: Handle[Any] = ask(sup, GetChild(child_id="x"))
    b: Handle[Any] = ask(sup, GetChild(child_id="b"))
    exits = watch(sup)
    x.tell(Crash())
    wait_until(lambda: journal.count("start:x") == 2)
    entered, release = gate("b7")
    b.tell(Block(token="b7"))
    assert entered.wait(WAIT)
    try:
        x.tell(Crash())  # restart 2 of max 1: escalation, which first waits for blocked b
        wait_until(lambda: child_status(sup, "b") is ChildStatus.STOPPING)
        tree = ask(sup, WhichChildren())
        assert tree.status == "failed"
        crashed = node(sup, "x")
        assert crashed.status is ChildStatus.STOPPED
        assert crashed.actor_urn is None
        assert node(sup, "a").status is ChildStatus.RUNNING  # reverse order: b first
    finally:
        release.set()
    assert isinstance(exits.get(timeout=WAIT).error, SupervisorIntensityError)


# -- B8: a stopping child is waited for until it has exited ----------------------------------


class SlowStopper(PooledActor):
    """Records its stop only once its (gated) ``on_stop`` is done."""

    gates: ClassVar[dict[str, tuple[threading.Event, threading.Event]]] = {}

    def __init__(self, name: str, journal: list[str]) -> None:
        super().__init__()
        self.name = name
        self.journal = journal

    def on_stop(self) -> None:
        held = SlowStopper.gates.get(self.name)
        if held is not None:
            entered, release = held
            entered.set()
            release.wait(WAIT)
        self.journal.append(f"stop:{self.name}")

    @handles(Who)
    def _who(self, _m: Who) -> tuple[str, str]:
        return self.name, self.actor_urn

    @handles(Finish)
    def _finish(self, _m: Finish) -> None:
        self.stop()

    @handles(Crash)
    def _crash(self, _m: Crash) -> NoReturn:
        raise RuntimeError(f"{self.name} crashed")


def slow_spec(name: str, journal: list[str], *, gated: bool = False) -> ChildSpec:
    if gated:
        SlowStopper.gates[name] = (threading.Event(), threading.Event())
    else:
        SlowStopper.gates.pop(name, None)
    return ChildSpec(
        id=name, start=lambda: SlowStopper.start(name, journal), shutdown_timeout=NEVER
    )


def test_shutdown_waits_for_a_child_still_in_on_stop_keeping_reverse_order(
    system: ActorSystem,
) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s",
        children=[
            slow_spec("a", journal),
            slow_spec("b", journal, gated=True),
            slow_spec("c", journal),
        ],
    )
    b: Handle[Any] = ask(sup, GetChild(child_id="b"))
    entered, release = SlowStopper.gates["b"]
    b.tell(Finish())  # b stops itself: not alive any more, but on_stop has not finished
    assert entered.wait(WAIT)
    try:
        shutdown = sup.ask(Shutdown(), block=False)
        wait_until(lambda: "stop:c" in journal and child_status(sup, "b") is ChildStatus.STOPPING)
        assert child_status(sup, "a") is ChildStatus.RUNNING, "a must wait for b's exit"
    finally:
        release.set()
    assert shutdown.get(timeout=WAIT) is None
    assert journal == ["stop:c", "stop:b", "stop:a"]


def test_a_sibling_still_in_on_stop_hands_its_mail_to_its_next_incarnation(
    system: ActorSystem,
) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s",
        strategy=Strategy.ONE_FOR_ALL,
        max_restarts=10,
        children=[slow_spec("a", journal), slow_spec("b", journal, gated=True)],
    )
    a: Handle[Any] = ask(sup, GetChild(child_id="a"))
    b: Handle[Any] = ask(sup, GetChild(child_id="b"))
    first_a, first_b = urn(a), urn(b)
    entered, release = SlowStopper.gates["b"]
    b.tell(Finish())
    assert entered.wait(WAIT)
    try:
        pending = b.ask(Who(), block=False)  # lands in b's mailbox while b is in on_stop
        a.tell(Crash())  # one_for_all: b must be stopped (it is, slowly) before restarts
        wait_until(lambda: child_status(sup, "b") is ChildStatus.STOPPING or a.actor_urn != first_a)
        assert a.actor_urn == first_a, "nothing restarts before b has exited"
    finally:
        release.set()
    name, answered_by = pending.get(timeout=WAIT)
    assert name == "b"
    assert answered_by not in (first_b, None)
    assert answered_by == urn(b)


# -- B14: a stop overtakes the child's backlog before it is killed ----------------------------


def test_a_stop_overtakes_a_long_backlog_so_on_stop_still_runs(system: ActorSystem) -> None:
    journal: list[str] = []
    sup = Supervisor.start("s", children=[spec("x", journal, shutdown_timeout=6.0)])
    x: Handle[Any] = ask(sup, GetChild(child_id="x"))
    actor = x._actor_weakref()
    assert actor is not None
    entered, release = gate("b14-first")
    _, never = gate("b14-backlog")
    x.tell(Block(token="b14-first"))
    assert entered.wait(WAIT)
    backlog = [x.ask(Block(token="b14-backlog"), block=False) for _ in range(3)]
    try:
        stopped = sup.ask(StopChild(child_id="x"), block=False)
        wait_until(lambda: len(actor.actor_inbox) == 4)  # the backlog and the stop
        # Half the shutdown timeout: StopNow joins them, on the control lane.
        wait_until(lambda: len(actor.actor_inbox) == 5)
        release.set()  # the running handler ends; StopNow goes before the backlog
        assert stopped.get(timeout=WAIT) is True
        assert journal == ["start:x", "stop:x"], "on_stop ran: x was stopped, not killed"
        for future in backlog:
            with pytest.raises(ActorDeadError):
                future.get(timeout=WAIT)
    finally:
        release.set()
        never.set()


# -- B4: SystemExit from a child's start -----------------------------------------------------


def _exit_now() -> NoReturn:
    sys.exit(3)


def test_system_exit_from_a_start_function_is_a_failed_start(system: ActorSystem) -> None:
    journal: list[str] = []
    sup = Supervisor.start("s", children=[spec("ok", journal)])
    ok: Handle[Any] = ask(sup, GetChild(child_id="ok"))
    with pytest.raises(RuntimeError, match="SystemExit"):
        ask(sup, StartChild(spec=ChildSpec(id="bad", start=_exit_now)))
    assert sup.is_alive()
    assert [n.id for n in ask(sup, WhichChildren()).children] == ["ok"]
    assert ask(ok, Who())[0] == "ok"


def test_an_initial_child_raising_system_exit_is_retried_then_escalates(
    system: ActorSystem,
) -> None:
    attempts: list[int] = []

    def exits() -> NoReturn:
        attempts.append(1)
        sys.exit(3)

    sup = Supervisor.start(
        "s", children=[ChildSpec(id="bad", start=exits)], max_restarts=2, period=NEVER
    )
    record = watch_or_exited(sup)
    assert record is None or isinstance(record.error, SupervisorIntensityError)
    assert len(attempts) == 3  # the first start and two retries, then it gave up


def watch_or_exited(ref: ActorRef[Any]) -> ActorExit | None:
    """The exit record of ``ref`` (``None`` if it exited before it could be watched)."""
    actor = ref._actor_weakref()
    assert actor is not None
    exits: queue.SimpleQueue[ActorExit] = queue.SimpleQueue()
    if not actor.add_exit_watcher(exits.put):
        return None
    return exits.get(timeout=WAIT)


# -- B5: a child that is not a pooled actor ----------------------------------------------------


class Threaded(pykka.ThreadingActor):
    use_daemon_thread = True


def live_threaded() -> int:
    return len(pykka.ActorRegistry.get_by_class(Threaded))


def test_a_non_pooled_child_is_stopped_and_rejected_with_a_clear_error(
    system: ActorSystem,
) -> None:
    sup = Supervisor.start("s")
    with pytest.raises(ChildRejectedError, match="PooledActor"):
        ask(sup, StartChild(spec=ChildSpec(id="t", start=Threaded.start)))
    wait_until(lambda: live_threaded() == 0)
    assert sup.is_alive()
    assert ask(sup, GetChild(child_id="t")) is None


def test_a_non_pooled_initial_child_is_removed_not_retried(system: ActorSystem) -> None:
    starts: list[int] = []

    def start() -> Any:
        starts.append(1)
        return Threaded.start()

    sup = Supervisor.start("s", children=[ChildSpec(id="t", start=start)], max_restarts=5)
    wait_until(lambda: ask(sup, GetChild(child_id="t")) is None)
    wait_until(lambda: live_threaded() == 0)
    assert starts == [1]
    assert sup.is_alive()


# -- B6: a bad request told to a supervisor ------------------------------------------------------


def test_a_bad_request_told_to_a_supervisor_is_logged_not_fatal(system: ActorSystem) -> None:
    journal: list[str] = []
    sup = Supervisor.start("s", children=[spec("ok", journal)])
    ok: Handle[Any] = ask(sup, GetChild(child_id="ok"))
    before = urn(ok)
    with capture_logs() as logs:
        sup.tell(StartChild(spec=spec("ok", journal)))  # duplicate id, nobody to answer
        sup.tell(StartChild(spec=ChildSpec(id="bad", start=_exit_now)))
        wait_until(lambda: sum(e["event"] == "supervisor_request_failed" for e in logs) == 2)
    assert sup.is_alive()
    assert urn(ok) == before
    # Asked, the same request is answered with the error.
    with pytest.raises(ValueError, match="duplicate child id"):
        ask(sup, StartChild(spec=spec("ok", journal)))


# -- B10 / B11: handles -------------------------------------------------------------------------


class Quick(PooledActor):
    default_ask_timeout = 0.5

    @handles(Who)
    def _who(self, _m: Who) -> str:
        return self.actor_urn


def test_handle_asks_take_the_child_class_deadline(system: ActorSystem) -> None:
    sup = Supervisor.start("s", children=[ChildSpec(id="q", start=Quick.start)])
    q: Handle[Any] = ask(sup, GetChild(child_id="q"))
    wait_until(lambda: q.state == "running")
    before = time.monotonic()
    future = q.ask(Who(), block=False)
    after = time.monotonic()
    assert future.deadline is not None
    assert before + 0.5 <= future.deadline <= after + 0.5
    assert q.ask_timeout == 0.5
    assert Handle("x", ask_timeout=2.0).ask_timeout == 2.0
    assert Handle("x").ask_timeout == PooledActor.default_ask_timeout
    for bad in (0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            Handle("x", ask_timeout=bad)


def _boom() -> NoReturn:
    raise RuntimeError("supervisor crashed")


def test_a_stale_grandchild_handle_fails_fast_saying_what_to_do() -> None:
    journal: list[str] = []
    rt = Runtime(name="stale")
    try:
        sup = rt.start_child(
            ChildSpec(
                id="mid",
                kind="supervisor",
                start=lambda: Supervisor.start("mid", children=[spec("w", journal)]),
            )
        )
        old_w: Handle[Any] = ask(sup, GetChild(child_id="w"))
        assert ask(old_w, Who())[0] == "w"
        first = sup.actor_urn
        actor = sup._actor_weakref()
        assert actor is not None and actor.post(_boom)
        wait_until(lambda: sup.actor_urn not in (None, first) and sup.state == "running")
        with pytest.raises(ActorDeadError, match="GetChild"):
            old_w.ask(Who(), timeout=WAIT)
        new_w: Handle[Any] = ask(sup, GetChild(child_id="w"))
        assert ask(new_w, Who())[0] == "w"
    finally:
        assert rt.close(timeout=20)


def test_a_killed_siblings_pending_stops_are_not_carried_to_its_next_incarnation(
    system: ActorSystem,
) -> None:
    journal: list[str] = []
    sup = Supervisor.start(
        "s",
        strategy=Strategy.ONE_FOR_ALL,
        max_restarts=10,
        children=[spec("a", journal), spec("b", journal, shutdown_timeout=0.4)],
    )
    a: Handle[Any] = ask(sup, GetChild(child_id="a"))
    b: Handle[Any] = ask(sup, GetChild(child_id="b"))
    first_b = urn(b)
    entered, release = gate("stuck-sibling")
    b.tell(Block(token="stuck-sibling"))
    assert entered.wait(WAIT)
    try:
        a.tell(Crash())  # b is told to stop, then StopNow, then killed with both still queued
        wait_until(lambda: b.actor_urn not in (None, first_b) and b.state == "running")
    finally:
        release.set()
    name, answered_by = ask(b, Who())
    assert name == "b" and answered_by == b.actor_urn != first_b
    # The killed incarnation ran no on_stop, and the new one was not stopped by
    # the stops that had been meant for the old one.
    assert "stop:b" not in journal
    assert ChildStatus(node(sup, "b").status) is ChildStatus.RUNNING
    assert node(sup, "b").actor_urn == answered_by, "no further restart of b"
    assert node(sup, "a").restarts == 1
