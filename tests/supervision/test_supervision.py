"""Supervision: restart types, strategies, intensity, backoff, handles, shutdown.

Every test runs real pooled actors on a real Runtime; synchronisation is by
events and bounded waits, never by sleeping for a guessed duration.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pykka
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.core import ActorCrashed, PooledActor, handles
from fore.messages.base import Message
from fore.messages.runtime import (
    ChildSpec,
    ChildStatus,
    RestartType,
    StartChild,
    StopChild,
    Strategy,
    WhichChildren,
)
from fore.supervision import (
    Backoff,
    Handle,
    RestartIntensity,
    Runtime,
    Supervisor,
    SupervisorIntensityError,
    plan_restart,
    should_restart,
)
from fore.testing import wait_until

pytestmark = pytest.mark.runtime(close_timeout=20)

WAIT = 10.0


class Crash(Message):
    """Raise in the handler (a tell that raises fails the actor)."""


class Die(Message):
    """Raise SystemExit in the handler."""


class Who(Message):
    """Answer (name, urn)."""


class Finish(Message):
    """Stop normally from inside."""


class Block(Message):
    """Hold the actor until the test releases it."""

    token: str


class Worker(PooledActor):
    """A child that records its lifecycle into a shared journal."""

    gates: ClassVar[dict[str, threading.Event]] = {}
    entered: ClassVar[dict[str, threading.Event]] = {}

    def __init__(self, name: str, journal: list[str]) -> None:
        super().__init__()
        self.name = name
        self.journal = journal

    def on_start(self) -> None:
        self.journal.append(f"start:{self.name}")

    def on_stop(self) -> None:
        self.journal.append(f"stop:{self.name}")

    @handles(Crash)
    def _crash(self, _m: Crash) -> None:
        raise RuntimeError(f"{self.name} crashed")

    @handles(Die)
    def _die(self, _m: Die) -> None:
        raise SystemExit(1)

    @handles(Who)
    def _who(self, _m: Who) -> tuple[str, str]:
        return self.name, self.actor_urn

    @handles(Finish)
    def _finish(self, _m: Finish) -> None:
        self.stop()

    @handles(Block)
    def _block(self, m: Block) -> None:
        Worker.entered.setdefault(m.token, threading.Event()).set()
        Worker.gates.setdefault(m.token, threading.Event()).wait(WAIT)


def gate(token: str) -> tuple[threading.Event, threading.Event]:
    Worker.entered[token] = threading.Event()
    Worker.gates[token] = threading.Event()
    return Worker.entered[token], Worker.gates[token]


def spec(
    name: str,
    journal: list[str],
    restart: RestartType = RestartType.PERMANENT,
    shutdown_timeout: float = 5.0,
) -> ChildSpec:
    return ChildSpec(
        id=name,
        start=lambda: Worker.start(name, journal),
        restart=restart,
        shutdown_timeout=shutdown_timeout,
    )


def urn(handle: Handle[Any]) -> str:
    _name, actor_urn = handle.ask(Who(), timeout=WAIT)
    return str(actor_urn)


def start_supervisor(
    rt: Runtime, sup_id: str, children: list[ChildSpec], **options: Any
) -> Handle[Supervisor]:
    return rt.start_child(
        ChildSpec(
            id=sup_id,
            kind="supervisor",
            start=lambda: Supervisor.start(sup_id, children=children, **options),
            shutdown_timeout=20,
        )
    )


def child(sup: Handle[Supervisor], child_id: str) -> Handle[Any]:
    from fore.messages.runtime import GetChild

    handle = sup.ask(GetChild(child_id=child_id), timeout=WAIT)
    assert isinstance(handle, Handle)
    return handle


def status(sup: Handle[Supervisor], child_id: str) -> tuple[ChildStatus, int] | None:
    """(status, restarts) of one child in the supervisor's snapshot, if it has it."""
    tree = sup.ask(WhichChildren(), timeout=WAIT)
    for node in tree.children:
        if node.id == child_id:
            return node.status, node.restarts
    return None


@contextmanager
def parked_timer(rt: Runtime) -> Iterator[None]:
    """Hold the runtime's single timer thread in a callback until the block ends.

    No timer (a backoff delay, a shutdown timeout) can fire meanwhile, so a
    test can assert the state before it fires without racing the clock.
    """
    entered, release = threading.Event(), threading.Event()

    def park() -> None:
        entered.set()
        release.wait(WAIT * 6)  # bounded: a test that forgets to release cannot hang

    rt.system.timer.call_later(0, park)
    assert entered.wait(WAIT)
    try:
        yield
    finally:
        release.set()


# -- pure policy ---------------------------------------------------------------


def test_should_restart_follows_otp_restart_types() -> None:
    assert should_restart(RestartType.PERMANENT, failed=False)
    assert should_restart(RestartType.PERMANENT, failed=True)
    assert should_restart(RestartType.TRANSIENT, failed=True)
    assert not should_restart(RestartType.TRANSIENT, failed=False)
    assert not should_restart(RestartType.TEMPORARY, failed=True)


@given(
    n=st.integers(min_value=1, max_value=8),
    data=st.data(),
    strategy=st.sampled_from(list(Strategy)),
)
def test_restart_plans_stop_in_reverse_and_start_in_order(
    n: int, data: st.DataObject, strategy: Strategy
) -> None:
    order = [f"c{i}" for i in range(n)]
    failed = data.draw(st.sampled_from(order))
    to_stop, to_start = plan_restart(strategy, order, failed)
    assert failed in to_start and failed not in to_stop
    assert to_start == [c for c in order if c in to_start]  # start order
    assert to_stop == [c for c in reversed(order) if c in to_stop]  # reverse start order
    if strategy is Strategy.ONE_FOR_ONE:
        assert to_start == [failed]
    elif strategy is Strategy.ONE_FOR_ALL:
        assert to_start == order
    else:
        assert to_start == order[order.index(failed) :]
    assert set(to_stop) == set(to_start) - {failed}


def test_restart_intensity_window() -> None:
    intensity = RestartIntensity(max_restarts=2, period=10.0)
    assert intensity.record(0.0)
    assert intensity.record(1.0)
    assert not intensity.record(2.0)  # third within 10 s
    fresh = RestartIntensity(max_restarts=2, period=10.0)
    assert fresh.record(0.0) and fresh.record(1.0)
    assert fresh.record(11.5)  # the first one left the window


def test_backoff_grows_exponentially_within_jitter_and_cap() -> None:
    backoff = Backoff(initial=0.1, maximum=1.0, multiplier=2.0, jitter=0.25)
    rng = random.Random(7)
    for attempt, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        delay = backoff.delay(attempt, rng)
        assert base * 0.75 <= delay <= base * 1.25
    assert backoff.delay(0, rng) == 0.0
    with pytest.raises(ValueError):
        Backoff(jitter=1.5)


# -- restart types ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("restart", "how", "restarted"),
    [
        (RestartType.PERMANENT, "crash", True),
        (RestartType.PERMANENT, "finish", True),
        (RestartType.TRANSIENT, "crash", True),
        (RestartType.TRANSIENT, "finish", False),
        (RestartType.TEMPORARY, "crash", False),
        (RestartType.TEMPORARY, "finish", False),
    ],
)
def test_restart_types(
    fresh_runtime: Runtime, restart: RestartType, how: str, restarted: bool
) -> None:
    journal: list[str] = []
    handle = fresh_runtime.start_child(spec("w", journal, restart))
    first = urn(handle)
    handle.tell(Crash() if how == "crash" else Finish())
    if restarted:
        wait_until(lambda: journal.count("start:w") == 2)
        assert urn(handle) != first
    else:
        wait_until(lambda: fresh_runtime.child("w") is None)
        with pytest.raises(pykka.ActorDeadError):
            handle.ask(Who(), timeout=WAIT)
        assert not handle.is_alive()


# -- strategies --------------------------------------------------------------------


def test_one_for_one_restarts_only_the_failed_child(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    sup = start_supervisor(fresh_runtime, "s", [spec(n, journal) for n in "abc"])
    a, b, c = (child(sup, n) for n in "abc")
    before = [urn(h) for h in (a, b, c)]
    b.tell(Crash())
    wait_until(lambda: journal.count("start:b") == 2)
    after = [urn(h) for h in (a, b, c)]
    assert after[0] == before[0] and after[2] == before[2]
    assert after[1] != before[1]


def test_one_for_all_restarts_every_child_stopping_in_reverse_order(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    sup = start_supervisor(
        fresh_runtime, "s", [spec(n, journal) for n in "abc"], strategy=Strategy.ONE_FOR_ALL
    )
    handles_ = [child(sup, n) for n in "abc"]
    before = [urn(h) for h in handles_]
    journal.clear()
    handles_[0].tell(Crash())
    wait_until(lambda: journal.count("start:c") == 1)
    after = [urn(h) for h in handles_]
    assert all(x != y for x, y in zip(before, after, strict=True))
    # a crashed (no on_stop); siblings stopped in reverse start order, then all start in order.
    assert journal == ["stop:c", "stop:b", "start:a", "start:b", "start:c"]


def test_rest_for_one_restarts_the_failed_child_and_those_after_it(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    sup = start_supervisor(
        fresh_runtime, "s", [spec(n, journal) for n in "abcd"], strategy=Strategy.REST_FOR_ONE
    )
    hs = [child(sup, n) for n in "abcd"]
    before = [urn(h) for h in hs]
    journal.clear()
    hs[1].tell(Crash())
    wait_until(lambda: journal.count("start:d") == 1)
    after = [urn(h) for h in hs]
    assert after[0] == before[0]
    assert all(x != y for x, y in zip(before[1:], after[1:], strict=True))
    assert journal == ["stop:d", "stop:c", "start:b", "start:c", "start:d"]


# -- intensity and escalation --------------------------------------------------------


def test_intensity_exceeded_stops_children_in_reverse_order_and_escalates(
    fresh_runtime: Runtime,
) -> None:
    journal: list[str] = []
    sup = start_supervisor(
        fresh_runtime, "s", [spec(n, journal) for n in "abc"], max_restarts=1, period=60
    )
    first_sup_urn = sup.actor_urn
    exits: list[Any] = []
    sup_actor = sup._actor_weakref()
    assert sup_actor is not None
    exited = threading.Event()

    def on_exit(record: Any) -> None:
        exits.append(record)
        exited.set()

    sup_actor.add_exit_watcher(on_exit)

    b = child(sup, "b")
    b.tell(Crash())
    wait_until(lambda: journal.count("start:b") == 2)
    journal.clear()
    b.tell(Crash())  # second restart in the window: more than max_restarts=1
    assert exited.wait(WAIT)
    record = exits[0]
    assert record.failed
    assert isinstance(record.error, SupervisorIntensityError)
    # Children stopped in reverse start order before the supervisor failed (b had crashed).
    assert journal[:2] == ["stop:c", "stop:a"]
    # The failure reached the root, which restarted the (permanent) supervisor.
    wait_until(lambda: sup.actor_urn not in (None, first_sup_urn) and sup.state == "running")
    tree = fresh_runtime.tree()
    (node,) = [c for c in tree.children if c.id == "s"]
    assert node.restarts == 1
    assert [c.id for c in node.children] == ["a", "b", "c"]
    assert tree.restarts == 1


def test_tree_snapshot_is_typed_and_nested(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    start_supervisor(fresh_runtime, "outer", [spec("x", journal)])
    fresh_runtime.start_child(spec("top", journal))
    tree = fresh_runtime.tree()
    assert tree.id == "root"
    ids = [c.id for c in tree.children]
    services = ["alert_sink", "blob_store", "tool_pool", "llm_gateway", "sessions"]  # the runtime's
    assert ids[: len(services)] == services
    assert ids[len(services) :] == ["outer", "top"]
    outer = tree.children[len(services)]
    assert outer.kind == "supervisor"
    assert outer.children[0].id == "x"
    assert outer.children[0].status is ChildStatus.RUNNING
    assert outer.children[0].actor_class == "Worker"
    assert tree.model_validate_json(tree.model_dump_json()) == tree


# -- backoff ----------------------------------------------------------------------------


def test_backoff_delays_restart_and_mail_waits_in_the_handle(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    sup = start_supervisor(
        fresh_runtime,
        "s",
        [spec("w", journal)],
        backoff=Backoff(initial=0.05, maximum=0.05, jitter=0.0),
        max_restarts=5,
    )
    w = child(sup, "w")
    first = urn(w)
    with parked_timer(fresh_runtime):
        w.tell(Crash())
        # The supervisor has taken the crash in and armed the backoff timer,
        # which cannot fire while the timer thread is parked: nothing is
        # restarted yet, and new mail is kept in the handle.
        wait_until(lambda: status(sup, "w") == (ChildStatus.RESTARTING, 1))
        assert w.state == "restarting"
        assert journal.count("start:w") == 1
        pending = w.ask(Who(), block=False)
        assert not pending.done()
    name, new_urn = pending.get(timeout=WAIT)
    assert name == "w" and new_urn != first
    assert journal.count("start:w") == 2


# -- handles --------------------------------------------------------------------------


def test_handle_delivers_mail_queued_behind_the_crash_to_the_new_incarnation(
    fresh_runtime: Runtime,
) -> None:
    journal: list[str] = []
    w = fresh_runtime.start_child(spec("w", journal))
    first = urn(w)
    entered, release = gate("h1")
    w.tell(Block(token="h1"))
    assert entered.wait(WAIT)
    w.tell(Crash())  # queued behind Block
    answers = [w.ask(Who(), block=False) for _ in range(5)]  # queued behind the crash
    release.set()
    urns = {f.get(timeout=WAIT)[1] for f in answers}
    assert len(urns) == 1 and first not in urns  # all answered, all by the new incarnation


def test_ask_to_a_crashing_actor_gets_an_error_not_a_hang(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    w = fresh_runtime.start_child(spec("w", journal))
    with pytest.raises(ActorCrashed):
        w.ask(Die(), timeout=WAIT)
    # and the handle keeps working across the restart
    assert w.ask(Who(), timeout=WAIT)[0] == "w"


def test_asks_to_a_plain_ref_of_a_crashing_actor_all_resolve() -> None:
    rt = Runtime(name="plain")
    try:
        with rt.system.activated():
            ref = Worker.start("plain", [])
        entered, release = gate("p1")
        ref.tell(Block(token="p1"))
        assert entered.wait(WAIT)
        ref.tell(Crash())
        futures = [ref.ask(Who(), block=False) for _ in range(20)]
        release.set()
        for f in futures:
            with pytest.raises(pykka.ActorDeadError):
                f.get(timeout=WAIT)
    finally:
        rt.close()


def test_start_child_rejects_duplicate_ids(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    fresh_runtime.start_child(spec("dup", journal))
    with pytest.raises(ValueError, match="duplicate child id"):
        fresh_runtime.root.ask(StartChild(spec=spec("dup", journal)), timeout=WAIT)


def test_stop_child_removes_it_for_good(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    w = fresh_runtime.start_child(spec("w", journal))
    assert fresh_runtime.root.ask(StopChild(child_id="w"), timeout=WAIT) is True
    assert journal == ["start:w", "stop:w"]
    assert fresh_runtime.child("w") is None
    with pytest.raises(pykka.ActorDeadError):
        w.tell(Who())


def test_failing_start_function_is_retried_then_escalates(fresh_runtime: Runtime) -> None:
    attempts: list[int] = []
    incarnations: list[Any] = []

    def bad_start() -> Any:
        attempts.append(1)
        if len(attempts) > 3:  # the restarted supervisor's child starts: no endless cascade
            return Worker.start("bad", [])
        raise OSError("cannot start")

    def start_sup() -> Any:
        ref = Supervisor.start(
            "s", children=[ChildSpec(id="bad", start=bad_start)], max_restarts=2, period=60
        )
        incarnations.append(ref)
        return ref

    sup = fresh_runtime.start_child(
        ChildSpec(id="s", kind="supervisor", start=start_sup, shutdown_timeout=20)
    )
    # The first incarnation may give up (and be replaced) before start_child
    # even returns, so its urn is taken from the start function, not the handle.
    wait_until(lambda: len(incarnations) >= 2 and sup.actor_urn == incarnations[-1].actor_urn)
    first = incarnations[0].actor_urn
    assert sup.actor_urn not in (None, first)
    assert len(attempts) >= 3


# -- shutdown -----------------------------------------------------------------------------


def test_orderly_shutdown_in_reverse_start_order_nested() -> None:
    journal: list[str] = []
    rt = Runtime(name="order")
    start_supervisor(rt, "s1", [spec("a", journal), spec("b", journal)])
    rt.start_child(spec("c", journal))
    start_supervisor(rt, "s2", [spec("d", journal), spec("e", journal)])
    assert rt.close(timeout=20)
    assert [e for e in journal if e.startswith("stop")] == [
        "stop:e",
        "stop:d",
        "stop:c",
        "stop:b",
        "stop:a",
    ]


def test_shutdown_timeout_kills_a_stuck_child_and_answers_its_mail() -> None:
    journal: list[str] = []
    rt = Runtime(name="stuck")
    stuck = rt.start_child(spec("stuck", journal, shutdown_timeout=0.2))
    rt.start_child(spec("ok", journal))
    entered, release = gate("s1")
    stuck.tell(Block(token="s1"))
    assert entered.wait(WAIT)
    queued = stuck.ask(Who(), block=False)
    try:
        assert rt.close(timeout=20)
        with pytest.raises(pykka.ActorDeadError):
            queued.get(timeout=WAIT)
        assert "stop:ok" in journal and "stop:stuck" not in journal
    finally:
        release.set()


def test_system_exit_in_one_supervised_actor_leaves_others_running(fresh_runtime: Runtime) -> None:
    journal: list[str] = []
    a = fresh_runtime.start_child(spec("a", journal))
    b = fresh_runtime.start_child(spec("b", journal))
    b_urn = urn(b)
    with pytest.raises(ActorCrashed):
        a.ask(Die(), timeout=WAIT)
    assert urn(b) == b_urn
    assert a.ask(Who(), timeout=WAIT)[0] == "a"
