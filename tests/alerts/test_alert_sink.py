"""The alert sink keeps its subscribers and history across a crash and restart (audit #5).

Real runtimes and actors; the crash is a real exception raised on the sink's
own thread (``PooledActor.post``), so its supervisor restarts it exactly as
it would after a bug. Waits are bounded polls, never sleeps for a guessed time.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import pytest

import fore.testing
from fore.actors.alerts import AlertSink, AlertSinkState, default_state
from fore.actors.core import ActorSystem, PooledActor
from fore.actors.llm import ScriptedModel
from fore.messages.alerts import Alert, AlertLevel, ForgetSession, GetAlerts, SubscribeAlerts
from fore.messages.session import AlertRaised
from fore.supervision import Runtime

WAIT = 30.0


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def _boom() -> NoReturn:
    raise RuntimeError("simulated bug in the alert sink")


def crash(handle: Any) -> None:
    """Make the sink's current incarnation fail; return once the next one runs."""
    first = handle.actor_urn
    actor = handle.ref._actor_weakref()
    assert actor is not None and actor.post(_boom)
    wait_until(lambda: handle.actor_urn not in (None, first) and handle.state == "running")


class Collect(PooledActor):
    def __init__(self, inbox: list[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.append(message)


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    s = ActorSystem(name="alert-sink-test")
    try:
        yield s
    finally:
        assert s.shutdown(timeout=WAIT)


def test_a_session_still_gets_alerts_after_the_sink_restarts(tmp_path: Path) -> None:
    rt = Runtime(name="alert-restart")
    try:
        model = ScriptedModel([{"text": "one"}, {"text": "two"}])
        with rt.open_session(workspace=tmp_path, model=model) as s:
            s.submit("see @missing.txt", timeout=WAIT)
            before = "file ref @missing.txt could not be resolved: not found"
            wait_until(lambda: [a.text for a in s.alerts] == [before])
            s.drain_events()

            crash(rt.alert_sink)

            s.submit("and @gone.txt", timeout=WAIT)
            after = "file ref @gone.txt could not be resolved: not found"
            # The history survived the restart, and the later alert joined it...
            wait_until(lambda: len(s.alerts) == 2)
            assert [a.text for a in s.alerts] == [before, after]
            # ...and the subscription survived: it reaches the session's event stream.
            for event in s.events(timeout=WAIT):
                if isinstance(event, AlertRaised):
                    assert event.alert.text == after
                    break
            else:
                pytest.fail("the alert never reached the session's event stream")
    finally:
        assert rt.close(timeout=30)


def test_an_injected_state_is_shared_by_every_incarnation(system: ActorSystem) -> None:
    state = AlertSinkState(per_session=3)
    inbox: list[Any] = []
    with system.activated():
        collector = Collect.start(inbox)
        first = AlertSink.start(state=state)
    first.ask(SubscribeAlerts(address=collector, session="s"), timeout=WAIT)
    for i in range(5):
        first.tell(Alert(level=AlertLevel.INFO, text=f"a{i}", session="s", source="test"))
    assert [a.text for a in first.ask(GetAlerts(session="s"), timeout=WAIT)] == ["a2", "a3", "a4"]
    first.stop(timeout=WAIT)

    with system.activated():
        second = AlertSink.start(state=state)  # e.g. the supervisor's restart
    assert [a.text for a in second.ask(GetAlerts(session="s"), timeout=WAIT)] == [
        "a2",
        "a3",
        "a4",
    ]
    second.tell(Alert(level=AlertLevel.WARN, text="later", session="s", source="test"))
    wait_until(lambda: [a.text for a in inbox] == ["a0", "a1", "a2", "a3", "a4", "later"])
    second.tell(ForgetSession(session="s"))
    assert second.ask(GetAlerts(session="s"), timeout=WAIT) == ()
    second.stop(timeout=WAIT)
    collector.stop()


def test_without_a_state_the_sink_uses_its_systems_default(system: ActorSystem) -> None:
    with system.activated():
        first = AlertSink.start()
    first.tell(Alert(level=AlertLevel.INFO, text="kept", session=None, source="test"))
    assert len(first.ask(GetAlerts(session=None), timeout=WAIT)) == 1
    first.stop(timeout=WAIT)
    with system.activated():
        second = AlertSink.start()
        named = AlertSink.start(registry_name="other-sink")
    assert [a.text for a in second.ask(GetAlerts(session=None), timeout=WAIT)] == ["kept"]
    assert named.ask(GetAlerts(session=None), timeout=WAIT) == ()  # another sink, own state
    assert default_state(system, None) is default_state(system, None)
    second.stop(timeout=WAIT)
    named.stop(timeout=WAIT)
    other = ActorSystem(name="alert-sink-other")
    try:
        assert default_state(other, None) is not default_state(system, None)
    finally:
        assert other.shutdown(timeout=WAIT)


def test_a_dead_subscriber_is_dropped(system: ActorSystem) -> None:
    state = AlertSinkState()
    with system.activated():
        sink = AlertSink.start(state=state)
        collector = Collect.start([])
    sink.ask(SubscribeAlerts(address=collector, session=None), timeout=WAIT)
    assert state.subscribers == 1
    collector.stop()
    sink.ask(Alert(level=AlertLevel.ERROR, text="x", source="test"), timeout=WAIT)
    assert state.subscribers == 0
    sink.stop(timeout=WAIT)
    with pytest.raises(ValueError, match="per_session must be positive"):
        AlertSinkState(per_session=0)
