"""The load governor: speculation only with headroom.

The decision logic is plain code, tested with recorded waits. End to end, a
governor that refuses shows what a session does without headroom: the
suggestion is still offered, the speculation is skipped (status and a typed
event say why), nothing is speculated, and Tab runs the suggestion as a normal
turn. The runtime's probe is shown feeding its governor real samples.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.llm import ScriptedModel
from fore.actors.speculation.governor import LoadGovernor
from fore.messages.speculation import SpeculationProgress, SpeculationSkipped, SuggestionReady
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    Replies,
    main_reply,
    spec,
    suggestion,
    wait_until,
)

# -- the decision ---------------------------------------------------------------------


def test_no_evidence_of_pressure_admits() -> None:
    governor = LoadGovernor(min_samples=10)
    for _ in range(9):
        governor.record(1.0)  # huge waits, but too few samples to act on
    assert governor.pressure_ms() == 0.0
    assert governor.try_admit() is None
    assert governor.running == 1


def test_pressure_is_the_windowed_percentile() -> None:
    governor = LoadGovernor(window=10, percentile=90, min_samples=1)
    for ms in range(1, 11):
        governor.record(ms / 1000)
    assert governor.pressure_ms() == pytest.approx(9.0)
    for _ in range(10):  # the window slides: old samples leave
        governor.record(0.0005)
    assert governor.pressure_ms() == pytest.approx(0.5)


def test_pressure_over_the_threshold_refuses_with_a_reason() -> None:
    governor = LoadGovernor(threshold_ms=4.0, window=20, min_samples=5)
    for _ in range(20):
        governor.record(0.010)
    reason = governor.try_admit()
    assert reason is not None and "busy" in reason and "10.0 ms > 4 ms" in reason
    assert (governor.admitted, governor.refused, governor.running) == (0, 1, 0)
    for _ in range(20):
        governor.record(0.001)
    assert governor.try_admit() is None


def test_a_short_burst_of_long_waits_refuses_by_default() -> None:
    """The default looks at the window's tail: a few long waits among many short ones."""
    governor = LoadGovernor()
    for _ in range(governor.window - 3):
        governor.record(0.001)
    for _ in range(3):
        governor.record(0.008)  # a burst: 5% of the window
    assert governor.try_admit() is not None
    p90 = LoadGovernor(percentile=90.0)
    for wait in [0.001] * (p90.window - 3) + [0.008] * 3:
        p90.record(wait)
    assert p90.try_admit() is None  # what a p90 would have let through


def test_a_request_waits_for_headroom_until_the_pressure_falls() -> None:
    governor = LoadGovernor(window=10, min_samples=1, max_defer_s=60.0, defer_poll_s=0.005)
    calmed = threading.Event()

    def calm_down() -> None:
        for _ in range(10):
            governor.record(0.0005)  # ten short waits push the long ones out of the window
        calmed.set()

    async def scenario() -> tuple[float, bool]:
        calm = await governor.wait_for_headroom()  # no pressure: no wait at all
        for _ in range(10):
            governor.record(0.010)
        asyncio.get_running_loop().call_later(0.05, calm_down)
        await governor.wait_for_headroom()
        return calm, calmed.is_set()

    calm, burst_was_over = asyncio.run(scenario())
    assert calm == 0.0
    assert burst_was_over  # it returned because the pressure fell (its deadline is 60 s)
    assert governor.deferred == 1
    assert not governor.busy()


def test_headroom_waits_are_bounded_and_cancellable() -> None:
    stuck = LoadGovernor(window=5, min_samples=1, max_defer_s=0.05, defer_poll_s=0.005)
    for _ in range(5):
        stuck.record(0.050)
    asyncio.run(stuck.wait_for_headroom())  # returns at max_defer_s: the request goes anyway
    assert stuck.busy() and stuck.deferred == 1

    async def cancelled() -> bool:
        slow = LoadGovernor(window=5, min_samples=1, max_defer_s=60.0)
        for _ in range(5):
            slow.record(0.050)
        task = asyncio.ensure_future(slow.wait_for_headroom())
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(cancelled())
    assert LoadGovernor(enabled=False).busy() is False


def test_the_concurrency_cap_holds_until_a_slot_is_released() -> None:
    governor = LoadGovernor(max_concurrent=2)
    assert governor.try_admit() is None and governor.try_admit() is None
    reason = governor.try_admit()
    assert reason is not None and "the cap" in reason
    governor.release()
    assert governor.try_admit() is None
    governor.release()
    governor.release()
    governor.release()  # one too many: never below zero
    assert governor.running == 0


def test_a_disabled_governor_admits_everything() -> None:
    governor = LoadGovernor(enabled=False, max_concurrent=0)
    for _ in range(100):
        governor.record(1.0)
    assert all(governor.try_admit() is None for _ in range(5))


@given(st.lists(st.floats(min_value=0, max_value=1), max_size=200), st.floats(0, 100))
def test_pressure_is_one_of_the_recent_samples(waits: list[float], percentile: float) -> None:
    governor = LoadGovernor(window=50, percentile=percentile, min_samples=1)
    for wait in waits:
        governor.record(wait)
    pressure = governor.pressure_ms()
    recent = waits[-50:]
    assert pressure == 0.0 if not recent else pressure in {w * 1000 for w in recent}


def test_admissions_and_releases_from_many_threads_balance() -> None:
    governor = LoadGovernor(max_concurrent=1000)

    def churn() -> None:
        for _ in range(500):
            assert governor.try_admit() is None
            governor.release()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert governor.running == 0 and governor.admitted == 4000


# -- in a runtime -----------------------------------------------------------------------


@pytest.fixture
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    rt = Runtime(
        name="governor-test",
        overlay_root=tmp_path_factory.mktemp("overlays"),
        speculation_governor=LoadGovernor(max_concurrent=0),  # never any headroom
    )
    try:
        yield rt
    finally:
        assert rt.close(timeout=30)


def test_without_headroom_the_suggestion_is_offered_but_not_speculated(
    refusing: Runtime, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text("x = 1\n")
    script = [*TWO_TURNS, suggestion("bump x to 2"), main_reply("Bumped it the normal way.")]
    with refusing.open_session(
        workspace=tmp_path, model=ScriptedModel(script), speculation=spec()
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.suggestion == "bump x to 2")
        status = s.speculation
        assert status.state == "skipped" and status.suggestion == "bump x to 2"
        assert status.reason is not None and "the cap" in status.reason
        events = s.drain_events()
        skipped = [e for e in events if isinstance(e, SpeculationSkipped)]
        assert [e.suggestion for e in skipped] == ["bump x to 2"]
        assert any(isinstance(e, SuggestionReady) for e in events)
        assert not any(isinstance(e, SpeculationProgress) for e in events)
        result = s.accept(timeout=WAIT)
        assert result.outcome == "submitted"
        assert result.turn is not None and result.turn.status == "completed"
        assert s.history[-1].text == "Bumped it the normal way."
    assert refusing.speculation_governor.refused == 1
    assert refusing.speculation_governor.running == 0


def test_the_runtime_probe_feeds_its_governor(tmp_path: Path) -> None:
    governor = LoadGovernor()
    with Runtime(name="probe-test", speculation_governor=governor):
        wait_until(lambda: len(governor._waits) >= 10)
        assert 0.0 <= governor.pressure_ms() < 10_000


def test_a_controller_stopped_under_a_running_speculation_gives_its_slot_back(
    tmp_path: Path,
) -> None:
    """A runtime that closes stops every session's controller while its speculation
    runs (no abort reaches it first, as ``Session.close`` sends one): the controller
    lets the speculation go, and the governor's slot is free again -- a slot kept
    would shrink the cap of every session sharing the governor."""
    governor = LoadGovernor(enabled=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    rt = Runtime(
        name="slot-test", overlay_root=tmp_path / "overlays", speculation_governor=governor
    )
    with Replies(main=["Hello.", "x is 1."], suggestion=['{"suggestion": "bump x"}']) as replies:
        replies.hold("speculation")  # it runs until the runtime closes
        try:
            s = rt.open_session(workspace=ws, model=replies.model, speculation=spec())
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(replies.seen("speculation")) == 1)
            assert governor.running == 1
        finally:
            assert rt.close(timeout=30)
    assert governor.running == 0
