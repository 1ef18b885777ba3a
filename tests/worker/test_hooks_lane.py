"""Hooks on the runtime's hook lane: deadlines from the start, withdrawal, a per-session cap.

Regression tests for the audit of issue 5, G5. Each test uses its own small
Runtime whose hook lane the test fills with hanging hooks, so the lane's
state is known; hung hooks are always released at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import fore.testing
from fore.actors.llm import ScriptedModel
from fore.actors.worker.hookrun import HookGate, HookJob
from fore.actors.worker.hooks import HookEvent, Hooks, HookSpec
from fore.messages.session import Submit
from fore.supervision import Runtime

WAIT = 20.0


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def drain(rt: Runtime, threads: int) -> None:
    """Return once every job queued on the lane before now has finished."""
    barrier = threading.Barrier(threads)
    jobs = [rt.system.hooks.submit(barrier.wait, WAIT) for _ in range(threads)]
    for job in jobs:
        job.result(WAIT)


class Hang:
    """A hook that hangs until released, counting how often it was entered."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = 0
        self.lock = threading.Lock()
        self.__name__ = "hang"

    def __call__(self, ctx: Any) -> None:
        with self.lock:
            self.entered += 1
        self.release.wait(WAIT)


class Count:
    def __init__(self, name: str = "count") -> None:
        self.calls = 0
        self.__name__ = name

    def __call__(self, ctx: Any) -> None:
        self.calls += 1


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def two_threads() -> Iterator[Runtime]:
    rt = Runtime(name="hooks-lane-2", hook_threads=2)
    try:
        yield rt
    finally:
        assert rt.close(timeout=30)


@pytest.fixture
def three_threads() -> Iterator[Runtime]:
    rt = Runtime(name="hooks-lane-3", hook_threads=3)
    try:
        yield rt
    finally:
        assert rt.close(timeout=30)


def fill_lane(rt: Runtime, workspace: Path, hang: Hang, sessions: int) -> list[Any]:
    """``sessions`` sessions, each with a hook hanging on a lane thread (timed out, abandoned)."""
    opened = []
    for _ in range(sessions):
        hooks = Hooks()
        hooks.on_prompt_submit(hang, timeout=0.2)
        s = rt.open_session(workspace=workspace, model=ScriptedModel([]), hooks=hooks)
        opened.append(s)
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "error" and turn.hook_failure is not None
        assert turn.hook_failure.kind == "timeout"
    wait_until(lambda: hang.entered == sessions)
    return opened


def test_a_hook_waiting_for_a_lane_thread_does_not_time_out(
    two_threads: Runtime, workspace: Path
) -> None:
    hang = Hang()
    try:
        fill_lane(two_threads, workspace, hang, 2)
        quick = Count("quick")
        hooks = Hooks()
        hooks.on_prompt_submit(quick, timeout=0.2)
        model = ScriptedModel([{"text": "fine"}])
        with two_threads.open_session(workspace=workspace, model=model, hooks=hooks) as s:
            pending = s.worker.ask(Submit(text="go"), block=False)
            wait_until(lambda: s.run_state().phase == "on_prompt_submit")
            # Longer than the hook's timeout, spent waiting for a thread: not its fault.
            assert not threading.Event().wait(0.6)
            assert not pending.done() and quick.calls == 0
            hang.release.set()
            turn = pending.get(timeout=WAIT)
            assert turn.status == "completed", turn.hook_failure
            assert quick.calls == 1
    finally:
        hang.release.set()


def test_a_hook_that_cannot_start_in_time_is_withdrawn_and_never_runs(
    two_threads: Runtime, workspace: Path
) -> None:
    hang = Hang()
    try:
        fill_lane(two_threads, workspace, hang, 2)
        late = Count("late")
        hooks = Hooks(start_timeout=0.3)
        hooks.on_prompt_submit(late)
        with two_threads.open_session(
            workspace=workspace, model=ScriptedModel([]), hooks=hooks
        ) as s:
            turn = s.submit("go", timeout=WAIT)
            assert turn.status == "error" and turn.hook_failure is not None
            assert turn.hook_failure.kind == "timeout"
            assert "did not start within 0.3s" in turn.hook_failure.message
            hang.release.set()
            drain(two_threads, 2)
            assert late.calls == 0  # withdrawn: its side effects never happen later
    finally:
        hang.release.set()


def test_a_queued_hook_of_a_cancelled_run_never_runs(two_threads: Runtime, workspace: Path) -> None:
    hang = Hang()
    try:
        fill_lane(two_threads, workspace, hang, 2)
        late = Count("late")
        hooks = Hooks()
        hooks.on_prompt_submit(late)
        with two_threads.open_session(
            workspace=workspace, model=ScriptedModel([]), hooks=hooks
        ) as s:
            pending = s.worker.ask(Submit(text="go"), block=False)
            wait_until(lambda: s.run_state().phase == "on_prompt_submit")
            s.cancel("typed")
            assert pending.get(timeout=WAIT).status == "cancelled"
            hang.release.set()
            drain(two_threads, 2)
            assert late.calls == 0
    finally:
        hang.release.set()


def test_one_sessions_hung_hooks_cannot_starve_the_others(
    three_threads: Runtime, workspace: Path
) -> None:
    hang = Hang()
    try:
        hooks = Hooks(start_timeout=0.5, max_in_flight=2)
        hooks.on_prompt_submit(hang, timeout=0.2)
        with three_threads.open_session(
            workspace=workspace, model=ScriptedModel([]), hooks=hooks
        ) as greedy:
            for _ in range(2):
                assert greedy.submit("go", timeout=WAIT).status == "error"
            wait_until(lambda: hang.entered == 2)
            # Its third hook waits for one of its own two threads; it does not take a third.
            third = greedy.submit("go", timeout=WAIT)
            assert third.hook_failure is not None and third.hook_failure.kind == "timeout"
            assert "did not start" in third.hook_failure.message
            assert hang.entered == 2
            other = Count("other")
            other_hooks = Hooks()
            other_hooks.on_prompt_submit(other, timeout=5)
            with three_threads.open_session(
                workspace=workspace, model=ScriptedModel([{"text": "ok"}]), hooks=other_hooks
            ) as s:
                turn = s.submit("go", timeout=WAIT)
                assert turn.status == "completed", turn.hook_failure
                assert other.calls == 1
    finally:
        hang.release.set()


# -- the gate and jobs themselves (plain code, real threads) --------------------------------------


class Lane:
    """A real executor standing in for the hook lane."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=4)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.pool.submit(fn, *args)


def spec(fn: Callable[[Any], Any]) -> HookSpec:
    return HookSpec(event=HookEvent.ON_ABORT, fn=fn, name=getattr(fn, "__name__", "fn"))


def test_the_gate_holds_a_job_until_a_slot_frees_and_skips_withdrawn_ones() -> None:
    lane = Lane()
    gate = HookGate()
    release = threading.Event()
    done: list[str] = []
    finished = threading.Event()

    def blocker(ctx: Any) -> None:
        release.wait(WAIT)

    def job(name: str, fn: Callable[[Any], Any]) -> HookJob:
        def on_done(job: HookJob, result: Any, error: BaseException | None) -> None:
            done.append(name)
            if name == "last":
                finished.set()

        return HookJob(spec(fn), None, on_start=lambda j: None, on_done=on_done)

    first = job("first", blocker)
    withdrawn = job("withdrawn", lambda ctx: None)
    last = job("last", lambda ctx: None)
    gate.submit(first, lane, cap=1)
    gate.submit(withdrawn, lane, cap=1)
    gate.submit(last, lane, cap=1)
    assert withdrawn.state == "waiting" and last.state == "waiting"
    assert withdrawn.withdraw() is True
    release.set()
    assert finished.wait(WAIT)
    assert done == ["first", "last"]
    wait_until(lambda: gate.active == 0)
    lane.pool.shutdown()


def test_a_running_job_is_abandoned_not_withdrawn() -> None:
    lane = Lane()
    gate = HookGate()
    started = threading.Event()
    release = threading.Event()

    def slow(ctx: Any) -> None:
        started.set()
        release.wait(WAIT)

    answered: list[Any] = []
    running = HookJob(
        spec(slow), None, on_start=lambda j: None, on_done=lambda j, r, e: answered.append(j.state)
    )
    gate.submit(running, lane)
    assert started.wait(WAIT)
    assert running.withdraw() is False and running.started
    assert running.cancel() is False
    assert running.state == "abandoned"
    release.set()
    wait_until(lambda: answered == ["abandoned"])
    lane.pool.shutdown()
