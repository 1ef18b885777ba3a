"""Supervision edge cases: temporary siblings, dying supervisors, stops mid-escalation, proxies.

Each test pins an OTP rule or a handle guarantee that a sibling test file
(``test_supervision.py``) does not reach: what happens to *other* children
when one crashes, to handles when the supervisor itself goes away, to a stop
that races an escalation, and to a pykka proxy held across a restart.

Real pooled actors on real threads; synchronisation by events and bounded
waits; "not yet" states are asserted only while the timer thread is parked
(so no timer can end them), never by guessing durations.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from pykka import ActorRef

from fore.actors.core import ActorExit, ActorStopped, ActorSystem, PooledActor, handles, stop_now
from fore.messages.runtime import (
    ChildSpec,
    ChildStatus,
    GetChild,
    RestartType,
    StopChild,
    Strategy,
    WhichChildren,
)
from fore.supervision import Backoff, Handle, Runtime, Supervisor, SupervisorIntensityError
from tests.supervision.test_supervision import (
    WAIT,
    Block,
    Crash,
    Who,
    child,
    gate,
    parked_timer,
    spec,
    start_supervisor,
    status,
    urn,
    wait_until,
)

pytestmark = pytest.mark.runtime(close_timeout=20)


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    system = ActorSystem(name="sup-bare", dispatcher_threads=4)
    try:
        with system.activated():
            yield system
    finally:
        system.shutdown(timeout=10.0)


def ask(ref: ActorRef[Any], message: Any) -> Any:
    """A blocking ask through a plain ``ActorRef`` (typed ``Any`` for the tests)."""
    return ref.ask(message, block=True, timeout=WAIT)


def watch(ref: Any) -> queue.SimpleQueue[ActorExit]:
    exits: queue.SimpleQueue[ActorExit] = queue.SimpleQueue()
    actor = ref._actor_weakref()
    assert actor is not None and actor.add_exit_watcher(exits.put)
    return exits


def ids(sup: Handle[Supervisor]) -> list[str]:
    return [node.id for node in sup.ask(WhichChildren(), timeout=WAIT).children]


# -- temporary children under one_for_all / rest_for_one -----------------------------------


@pytest.mark.parametrize("strategy", [Strategy.ONE_FOR_ALL, Strategy.REST_FOR_ONE])
def test_a_temporary_sibling_taken_down_by_a_restart_is_removed_not_restarted(
    fresh_runtime: Runtime, strategy: Strategy
) -> None:
    journal: list[str] = []
    specs = [
        spec("a", journal),
        spec("t", journal, RestartType.TEMPORARY),
        spec("tr", journal, RestartType.TRANSIENT),
        spec("z", journal),
    ]
    sup = start_supervisor(fresh_runtime, "s", specs, strategy=strategy)
    t = child(sup, "t")
    tr = child(sup, "tr")
    tr_before = urn(tr)

    child(sup, "a").tell(Crash())  # both strategies take every sibling down

    wait_until(lambda: journal.count("start:z") == 2)
    assert "stop:t" in journal
    assert journal.count("start:t") == 1, "a temporary child is never restarted"
    assert ids(sup) == ["a", "tr", "z"]
    assert sup.ask(GetChild(child_id="t"), timeout=WAIT) is None
    assert not t.is_alive()
    with pytest.raises(ActorStopped):
        t.ask(Who(), timeout=WAIT)
    # A transient sibling is restarted (OTP restarts it with the others).
    assert journal.count("start:tr") == 2
    assert urn(tr) != tr_before


# -- a supervisor that dies closes every handle -------------------------------------------


def _boom() -> NoReturn:
    raise RuntimeError("supervisor crashed")


@pytest.mark.parametrize("how", ["stop_now", "crash", "kill"])
def test_a_dying_supervisor_closes_the_handles_of_children_between_incarnations(
    system: ActorSystem, how: str
) -> None:
    journal: list[str] = []
    sup_ref = Supervisor.start(
        "s",
        children=[spec("w", journal), spec("ok", journal)],
        backoff=Backoff(initial=600.0, maximum=600.0, jitter=0.0),
    )
    sup_actor = sup_ref._actor_weakref()
    assert sup_actor is not None
    w: Handle[Any] = ask(sup_ref, GetChild(child_id="w"))
    ok: Handle[Any] = ask(sup_ref, GetChild(child_id="ok"))
    assert urn(ok)

    w.tell(Crash())  # w now waits out a 600 s backoff: no actor, a "restarting" handle

    def w_restarting() -> bool:
        tree = ask(sup_ref, WhichChildren())
        return any(n.id == "w" and n.status is ChildStatus.RESTARTING for n in tree.children)

    wait_until(w_restarting)
    assert w.is_alive(), "a restarting handle is alive"
    pending = w.ask(Who(), block=False)
    exits = watch(sup_ref)

    if how == "stop_now":
        assert stop_now(sup_ref, timeout=WAIT)
    elif how == "kill":
        sup_actor.kill()
    else:
        assert sup_actor.post(_boom)

    record = exits.get(timeout=WAIT)
    assert record.failed is (how == "crash")
    assert w.state == "dead" and not w.is_alive()
    with pytest.raises(ActorStopped):
        pending.get(timeout=WAIT)
    with pytest.raises(ActorStopped):
        w.tell(Who())
    assert not ok.is_alive()
    with pytest.raises(ActorStopped):
        ok.ask(Who(), timeout=WAIT)
    assert system.timer.pending() == 0, "the backoff timer was cancelled"


# -- a stop arriving mid-escalation ---------------------------------------------------------


def test_a_stop_arriving_mid_escalation_does_not_cancel_the_escalation(
    system: ActorSystem,
) -> None:
    journal: list[str] = []
    sup_ref = Supervisor.start(
        "s",
        strategy=Strategy.REST_FOR_ONE,
        max_restarts=1,
        period=600,
        children=[
            spec("x", journal),
            spec("a", journal),
            spec("b", journal, shutdown_timeout=600),
        ],
    )
    handles_: dict[str, Handle[Any]] = {n: ask(sup_ref, GetChild(child_id=n)) for n in "xab"}
    exits = watch(sup_ref)
    entered, release = gate("escalation")
    handles_["b"].tell(Block(token="escalation"))
    assert entered.wait(WAIT)
    try:
        # Restart 1 (allowed): a crashes; rest_for_one stops b first, and b's
        # stop waits behind its Block -- the restart stays in progress.
        handles_["a"].tell(Crash())
        wait_until(lambda: _status(sup_ref, "b") is ChildStatus.STOPPING)
        # Restart 2 exceeds max_restarts=1: the escalation is queued behind it.
        handles_["x"].tell(Crash())
        wait_until(lambda: ask(sup_ref, WhichChildren()).status == "failed")
        stopped = sup_ref.stop(block=False)  # must not cancel the escalation
    finally:
        release.set()

    record = exits.get(timeout=WAIT)
    assert record.failed is True, "the parent must see the failure, not a clean stop"
    assert isinstance(record.error, SupervisorIntensityError)
    assert stopped.get(timeout=WAIT) is True  # the stop's asker is answered too
    assert not any(h.is_alive() for h in handles_.values())


def _status(sup_ref: ActorRef[Supervisor], child_id: str) -> ChildStatus | None:
    tree = ask(sup_ref, WhichChildren())
    for node in tree.children:
        if node.id == child_id:
            return ChildStatus(node.status)
    return None


# -- proxies through handles ---------------------------------------------------------------


class Gizmo(PooledActor):
    def __init__(self) -> None:
        super().__init__()
        self.label = "gizmo"

    def whoami(self) -> str:
        return self.actor_urn

    @handles(Crash)
    def _crash(self, _m: Crash) -> NoReturn:
        raise RuntimeError("gizmo crashed")


def test_a_handle_proxy_follows_the_child_across_a_restart(fresh_runtime: Runtime) -> None:
    g = fresh_runtime.start_child(ChildSpec(id="g", start=Gizmo.start))
    proxy = g.proxy()
    first = proxy.whoami().get(timeout=WAIT)
    assert first == g.actor_urn

    g.tell(Crash())

    wait_until(lambda: g.actor_urn != first and g.state == "running")
    second = proxy.whoami().get(timeout=WAIT)
    assert second == g.actor_urn != first
    assert proxy.label.get(timeout=WAIT) == "gizmo"


def test_a_proxy_made_while_the_child_restarts_reaches_the_next_incarnation(
    fresh_runtime: Runtime,
) -> None:
    sup = start_supervisor(
        fresh_runtime,
        "s",
        [ChildSpec(id="g", start=Gizmo.start)],
        backoff=Backoff(initial=0.05, maximum=0.05, jitter=0.0),
    )
    g = child(sup, "g")
    first = g.actor_urn
    with parked_timer(fresh_runtime):
        g.tell(Crash())
        wait_until(lambda: status(sup, "g") == (ChildStatus.RESTARTING, 1))
        proxy = g.proxy()  # made between incarnations
        answer = proxy.whoami()
        assert not answer.done(), "kept in the handle until the child is back"
    assert answer.get(timeout=WAIT) == g.actor_urn != first

    assert sup.ask(StopChild(child_id="g"), timeout=WAIT) is True
    with pytest.raises(ActorStopped):
        g.proxy()
    with pytest.raises(ActorStopped):
        proxy.whoami().get(timeout=WAIT)
