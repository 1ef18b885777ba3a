"""Attacks: work that does not stop, and churn.

A speculation's worker stuck in a handler, a tool that ignores its cancel, a
hook that hangs past its deadline, the main worker crashing under a boundary's
continuation, and a keystroke storm over a thousand speculations: the user's
next turn is never held up, every overlay goes, every caller is answered, and
nothing grows with the number of speculations (see :mod:`.attacks`).
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from fore.actors.llm import FunctionModel
from fore.actors.speculation.controller import SpeculationController
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.tools.base import FunctionTool, ToolContext
from fore.actors.worker.hooks import Continue, Hooks, ToolCallContext
from fore.messages.conversation import ToolResult
from fore.messages.llm import LlmRequest
from fore.messages.runtime import GetChild
from fore.messages.session import GetRunState
from fore.supervision import Runtime
from tests.speculation.attacks import (
    AUTO_EDIT,
    Blocking,
    BlockingDeploy,
    Held,
    bump_replies,
    controller_of,
    drain_until_finished,
    finished_events,
    in_background,
    nothing_left,
    running_speculation,
    speculation_worker,
    speculation_workers,
    tool_session,
)
from tests.speculation.test_speculation import (
    WAIT,
    Boom,
    call,
    main_reply,
    overlay_dirs,
    settled,
    spec,
    wait_until,
)

# -- a speculation whose work does not stop ------------------------------------------------


def test_a_speculation_worker_that_does_not_stop_is_killed_and_the_next_turn_runs(
    rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's thread is stuck in a handler when the user types: StopNow cannot
    reach it. At the stop deadline it is killed, the overlay still goes, the abort is
    reported (``worker_killed``), and the user's next turn runs meanwhile."""
    monkeypatch.setattr(SpeculationController, "stop_timeout", 0.5)
    with bump_replies(main=["Hello.", "x is 1. Shall I bump it?", "next turn"]) as replies:
        replies.hold("speculation")
        s = running_speculation(rt, ws, replies)
        worker = speculation_worker(s)
        with Held(worker):
            s.drain_events()
            s.keystroke("no, something else")
            assert s.submit("next", timeout=WAIT).items[-1].text == "next turn"
            wait_until(lambda: worker.has_exited)
            nothing_left(rt, s.id)
            (report,) = finished_events(drain_until_finished(s))
            assert report.outcome == "aborted"
            assert "worker_killed" in [name for name, _at in report.abort_steps]
        assert s.close(timeout=WAIT)


def test_a_tool_that_ignores_its_cancel_cannot_write_after_the_overlay_is_gone(
    rt: Runtime, ws: Path
) -> None:
    """A read tool ignores the abort and, once it wakes up, writes through the view it was
    given. The call was reported cancelled (a zombie), so the overlay went without it;
    its late write must fail, leave no overlay directory and never reach the workspace."""
    running, wake = threading.Event(), threading.Event()
    late: list[BaseException | None] = []

    def grep(args: Blocking, ctx: ToolContext) -> str:
        running.set()
        wake.wait(WAIT)  # ignores ctx.cancel
        try:
            ctx.fs.write_bytes("zombie.txt", b"late write\n")
            late.append(None)
        except BaseException as exc:
            late.append(exc)
        return "done"

    tool = FunctionTool("grep", "Search files (ignores cancellation).", Blocking, grep)
    s = tool_session(rt, ws, tool, main_reply("next"))
    try:
        assert running.wait(WAIT)
        s.keystroke("no")
        wait_until(lambda: s.speculation.state == "aborted")
        wait_until(lambda: overlay_dirs(rt) == [])  # gone while the zombie still runs
        assert s.submit("and now?", timeout=WAIT).items[-1].text == "next"
    finally:
        wake.set()
    wait_until(lambda: late != [])
    assert late[0] is not None  # the write was refused
    assert not (ws / "zombie.txt").exists()
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)


def test_hung_speculative_hooks_never_take_the_lane_from_the_users_turn(
    tmp_path: Path, ws: Path
) -> None:
    """A session's pre_tool_call hook hangs past its deadline, but only for speculative
    calls (it waits on something slow). Each speculation that reaches it leaves the hook
    running on the shared hook lane (a thread cannot be killed). A session may hold at
    most ``max_in_flight`` lane threads with its hooks, so speculation after speculation
    must not take every lane thread: the user's own turn still gets one for its hook."""
    lane_threads = 4
    rt = Runtime(
        name="controller-attacks-hooks",
        overlay_root=tmp_path / "overlays",
        speculation_governor=LoadGovernor(enabled=False),
        hook_threads=lane_threads,
    )
    release = threading.Event()
    main_hook_ran = threading.Event()

    def slow_check(ctx: ToolCallContext) -> Continue:
        if ctx.purpose == "speculation":
            release.wait(WAIT * 3)  # far past its deadline
        else:
            main_hook_ran.set()
        return Continue()

    hooks = Hooks()
    hooks.pre_tool_call(slow_check, timeout=0.2)

    def decide(request: LlmRequest) -> Any:
        last = request.messages[-1]
        if request.purpose == "suggestion":
            return '{"suggestion": "search for x"}'
        if request.purpose == "pipelined":
            return '{"suggestion": null}'
        if request.purpose == "speculation" or getattr(last, "text", "") == "final":
            if isinstance(last, ToolResult):
                return "found it"
            return {"text": "", "tool_calls": [call("grep", pattern="x")]}
        return "found it" if isinstance(last, ToolResult) else "ok"

    def at_its_hook(s: Any) -> bool:
        """The current speculation has handed its call to its hook (or has ended since)."""
        status = s.speculation
        if status.state != "running":
            return True
        child = f"speculation:{status.speculation_id}"
        ref = s.controller.ask(GetChild(child_id=child), timeout=WAIT)
        if ref is None:
            return True
        return bool(ref.ask(GetRunState(), timeout=WAIT).phase == "pre_tool_call")

    try:
        s = rt.open_session(
            workspace=ws,
            model=FunctionModel(decide),
            speculation=spec(),
            hooks=hooks,
        )
        s.submit("hi", timeout=WAIT)  # suggestions start from the second answer
        for turn in range(lane_threads + 1):
            last = s.speculation.speculation_id
            s.submit(f"turn {turn}", timeout=WAIT)  # (aborts the speculation before it)
            wait_until(lambda last=last: s.speculation.speculation_id not in (None, last))
            wait_until(lambda: at_its_hook(s))
        # as many speculations as the lane has threads have reached the hanging hook
        result = s.submit("final", timeout=WAIT)
        assert main_hook_ran.is_set()
        assert result.items[-1].text == "found it"
    finally:
        release.set()
        assert rt.close(timeout=30)


# -- the main worker fails under an accept -------------------------------------------------


def test_tab_waiting_for_a_boundarys_continuation_is_answered_when_the_worker_crashes(
    rt: Runtime, ws: Path, buggy_worker: None
) -> None:
    """Tab on a speculation that stopped at a boundary inserts its transcript and lets the
    worker run the boundary call for real; Tab's answer waits for that continuation. The
    main worker crashes during it (its supervisor restarts it): the Tab must be answered
    then -- not at its deadline -- and the controller must not keep waiting for it."""
    deploy = BlockingDeploy()
    s = tool_session(rt, ws, deploy.tool, main_reply("after the crash"))
    try:
        assert settled(s) == "boundary"
        # The caller waits twice as long as the test does for an answer: its own deadline
        # must not be what answers it.
        tab, answers = in_background(lambda: s.accept(timeout=3 * WAIT))
        assert deploy.deploying.wait(WAIT)  # the continuation runs the boundary call
        s.worker.tell(Boom(session_id=s.id))
        wait_until(lambda: answers != [])
        tab.join(WAIT)
        assert not controller_of(s)._continuations
    finally:
        deploy.done.set()
    assert s.submit("go on", timeout=WAIT).items[-1].text == "after the crash"
    assert s.close(timeout=WAIT)
    nothing_left(rt)


# -- churn ---------------------------------------------------------------------------------


def resources(rt: Runtime, prefix: str) -> dict[str, Any]:
    """What a leak would grow: the runtime's threads by kind, threads of no pool, fds,
    actors, pending timers.

    The runtime's threads (named ``prefix...``) are counted by kind, the name without
    its pool index: a pool makes its threads lazily, up to its size. (A model's own
    executor is the model's, bounded by its ``max_workers``.)
    """
    kinds: dict[str, int] = {}
    anonymous = 0
    for thread in threading.enumerate():
        if thread.name.startswith(prefix):
            kind = re.sub(r"[-_]\d+$", "", thread.name)
            kinds[kind] = kinds.get(kind, 0) + 1
        elif thread.name.startswith("Thread-"):
            anonymous += 1
    return {
        "threads": kinds,
        "anonymous": anonymous,
        "fds": psutil.Process().num_fds(),
        "actors": len(rt.system.registry),
        "timers": rt.system.timer.pending(),
    }


def test_a_keystroke_storm_over_many_speculations_keeps_everything_bounded(
    tmp_path: Path, ws: Path
) -> None:
    """A thousand turns, each suggesting, speculating and being typed over (every tenth
    accepted): finished records are forgotten, and nothing grows with the count.

    A runtime of its own, so that its threads are told from other tests' by name.
    """
    rounds = 1000

    def decide(request: LlmRequest) -> Any:
        if request.purpose == "suggestion":
            return '{"suggestion": "bump x"}'
        if request.purpose == "pipelined":
            return '{"suggestion": null}'
        if request.purpose == "speculation":
            if isinstance(request.messages[-1], ToolResult):
                return "Bumped."
            return {"text": "", "tool_calls": [call("write", path="app.py", content="x += 1\n")]}
        return "ok"

    name = "controller-attacks-storm"
    rt = Runtime(
        name=name,
        overlay_root=tmp_path / "overlays",
        speculation_governor=LoadGovernor(enabled=False),
        blocking_threads=2,
    )
    try:
        s = rt.open_session(
            workspace=ws, model=FunctionModel(decide, max_workers=2), speculation=AUTO_EDIT
        )
        controller = controller_of(s)
        peak_records = 0
        started: set[str | None] = set()

        def storm(first: int, count: int) -> dict[str, Any]:
            nonlocal peak_records
            for i in range(first, first + count):
                last = s.speculation.speculation_id
                s.submit(f"turn {i}", timeout=WAIT)  # aborts the last; the next starts after it
                wait_until(lambda last=last: s.speculation.speculation_id not in (None, last))
                started.add(s.speculation.speculation_id)
                if i % 10 == 0:
                    wait_until(lambda: s.speculation.state in ("completed", "boundary", "failed"))
                    s.accept(timeout=WAIT)
                for key in ("n", "no", "no t", ""):
                    s.keystroke(key)
                peak_records = max(peak_records, len(controller._specs))
            wait_until(lambda: not controller._specs and overlay_dirs(rt) == [])
            wait_until(lambda: speculation_workers(rt) == [])
            return resources(rt, name)

        s.submit("hi", timeout=WAIT)  # suggestions start from the second answer
        # The first rounds start the lazily made threads of the pools (lane, model, tools).
        before = storm(1, 100)
        after = storm(101, rounds)
        assert len(started) == 100 + rounds  # each round speculated
        # Records still tearing down at a time: a backlog, never one per round so far.
        assert peak_records < 50, peak_records
        assert not controller._continuations and not s._pending  # no accept's scope kept
        assert not controller._held
        assert rt.speculation_governor.running == 0
        # Pools whose threads come and go: the lane (2 threads) and the tool runner's
        # (made on demand, gone after an idle while): a handful, never one per round.
        assert after["threads"].pop(f"{name}-blocking", 0) <= 2
        assert after["threads"].pop(f"{name}-tool", 0) <= 4
        for kind in (f"{name}-blocking", f"{name}-tool"):
            before["threads"].pop(kind, None)
        assert after["fds"] <= before["fds"], f"{before} -> {after}"
        assert after["anonymous"] <= before["anonymous"], f"{before} -> {after}"
        for key in ("threads", "actors", "timers"):
            assert after[key] == before[key], f"{key}: {before} -> {after}"
        assert controller is controller_of(s)  # never crashed
        assert s.close(timeout=WAIT)
        nothing_left(rt, s.id)
    finally:
        assert rt.close(timeout=30)
