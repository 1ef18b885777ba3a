"""Calls reported timed out or cancelled whose Python thread still runs ("zombies").

A Python thread cannot be killed, so the pool reports such a call at once but
keeps treating it as running: it keeps its slot under the caps, a later call
that must not overlap it (same path, exclusive, shell after a write) waits
for its thread -- in the same batch or a later one of the session -- and a
session with too many of them gets clear errors instead of more threads.

The stuck tools here ignore their token and block on events the test sets,
so every ordering is decided by the test, not by sleeps.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.tools import FunctionTool, ToolContext, ToolRegistry, WorkspaceFs
from fore.actors.tools.pool import zombies
from fore.messages.conversation import ToolCall
from fore.messages.tools import CancelToolCalls
from tests.tools.test_tool_pool import (
    WAIT,
    Probe,
    Reports,
    TagArgs,
    gate_tool,
    quick_tool,
    start_pool,
    stats,
    submit,
    wait_until,
)


class WriteArgs(BaseModel):
    path: str
    text: str
    stall: bool = False


class Writer:
    """A write tool whose stalled calls ignore their token until the test lets them go."""

    def __init__(self) -> None:
        self.let_go = threading.Event()
        self.log: list[str] = []
        self.lock = threading.Lock()

    def tool(self, name: str = "slow_write", *, exclusive: bool = False) -> FunctionTool[WriteArgs]:
        def run(args: WriteArgs, ctx: ToolContext) -> str:
            with self.lock:
                self.log.append(f"start:{args.text}")
            if args.stall:
                # Like a blocking library call: the token is never looked at.
                assert self.let_go.wait(WAIT * 4), "never let go"
            ctx.fs.write_bytes(args.path, args.text.encode())
            with self.lock:
                self.log.append(f"end:{args.text}")
            return f"wrote {args.text}"

        return FunctionTool(
            name, "writes text to a path", WriteArgs, run, exclusive=exclusive, writes=_path
        )


def _path(args: WriteArgs) -> list[str]:
    return [args.path]


@pytest.fixture
def writer() -> Iterator[Writer]:
    w = Writer()
    try:
        yield w
    finally:
        w.let_go.set()  # no thread outlives the test


def write(call_id: str, text: str, *, stall: bool = False, path: str = "x") -> ToolCall:
    return ToolCall(
        id=call_id, name="slow_write", arguments={"path": path, "text": text, "stall": stall}
    )


# -- ordering holds after a timeout or a cancel ---------------------------------------------


def test_a_later_write_waits_for_the_thread_of_a_timed_out_write(
    fresh_runtime: Any, inbox: Any, tmp_path: Path, writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the later write's wait for the zombie is not what this tests: it outlasts the test's
    # own steps before the let-go, however slow the machine
    monkeypatch.setattr(zombies, "ZOMBIE_HANDOVER_GRACE", WAIT)
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch = submit(
        pool,
        collector,
        WorkspaceFs(tmp_path),
        ToolRegistry([writer.tool()]),
        (write("w1", "first", stall=True), write("w2", "second")),
        call_timeout=1.5,
    )
    reports.pump(lambda: "w1" in reports.finished)
    assert reports.finished["w1"][0].outcome == "timeout"  # reported at once ...
    assert stats(pool).zombies == 1  # ... while its thread still runs
    assert "start:second" not in writer.log  # the later write of the same path waits
    assert "w2" not in {s.call_id for s in reports.started}
    writer.let_go.set()
    result = reports.batch(batch)
    assert [r.outcome for r in result.results] == ["timeout", "ok"]
    assert writer.log.index("end:first") < writer.log.index("start:second")
    assert (tmp_path / "x").read_text() == "second"
    wait_until(lambda: stats(pool).zombies == 0)


def test_a_call_after_a_cancelled_exclusive_call_waits_for_its_thread(
    fresh_runtime: Any, inbox: Any, tmp_path: Path, writer: Writer
) -> None:
    q, collector = inbox
    probe = Probe()
    probe.release.set()
    registry = ToolRegistry([writer.tool("solo", exclusive=True), quick_tool(probe)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    solo = ToolCall(id="solo", name="solo", arguments={"path": "s", "text": "S", "stall": True})
    after = ToolCall(id="after", name="quick", arguments={"tag": "after"})
    batch = submit(pool, collector, WorkspaceFs(tmp_path), registry, (solo, after))
    wait_until(lambda: "start:S" in writer.log)
    assert pool.ask(CancelToolCalls(session_id="s1", call_ids=("solo",)), timeout=WAIT) == 1
    reports.pump(lambda: "solo" in reports.finished)
    assert reports.finished["solo"][0].outcome == "cancelled"
    assert stats(pool).zombies == 1
    assert "start:after" not in probe.events  # the exclusive call's thread still runs
    writer.let_go.set()
    result = reports.batch(batch)
    assert [r.outcome for r in result.results] == ["cancelled", "ok"]
    assert "start:after" in probe.events


def test_a_write_in_a_later_batch_waits_for_a_zombie_of_an_earlier_batch(
    fresh_runtime: Any, inbox: Any, tmp_path: Path, writer: Writer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the later write's wait for the zombie is not what this tests: it outlasts the test's
    # own steps before the let-go, however slow the machine
    monkeypatch.setattr(zombies, "ZOMBIE_HANDOVER_GRACE", WAIT)
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)  # one session, one view, as the worker sends them
    registry = ToolRegistry([writer.tool()])
    first = submit(
        pool, collector, fs, registry, (write("w1", "first", stall=True),), call_timeout=1.5
    )
    assert reports.batch(first).results[0].outcome == "timeout"
    # The model retries the write in its next turn: a new batch, same path.
    second = submit(pool, collector, fs, registry, (write("w2", "second"),), call_timeout=1.5)
    wait_until(lambda: stats(pool).queued == 0 and stats(pool).zombies == 1)
    assert "start:second" not in writer.log
    writer.let_go.set()
    assert reports.batch(second).results[0].outcome == "ok"
    assert (tmp_path / "x").read_text() == "second"
    # Another path never waited for the zombie: only conflicting calls do.
    other = submit(pool, collector, fs, registry, (write("w3", "other", path="y"),))
    assert reports.batch(other).results[0].outcome == "ok"


def test_a_write_blocked_by_a_thread_that_never_ends_gets_an_error_at_its_deadline(
    fresh_runtime: Any, inbox: Any, tmp_path: Path, writer: Writer
) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    result = reports.batch(
        submit(
            pool,
            collector,
            WorkspaceFs(tmp_path),
            ToolRegistry([writer.tool()]),
            (write("w1", "first", stall=True), write("w2", "second")),
            call_timeout=0.3,
        )
    )
    stuck, refused = result.results
    assert stuck.outcome == "timeout"
    assert refused.outcome == "error" and refused.result.is_error
    assert "'w1'" in refused.result.output and "still running" in refused.result.output
    assert "start:second" not in writer.log  # it never ran beside the stuck one
    assert not (tmp_path / "x").exists()
    assert stats(pool).zombies == 1


# -- the caps bound what really runs ---------------------------------------------------------


class Blocker:
    """Tools that hold their thread, token or not, until released; counts bodies running."""

    def __init__(self) -> None:
        self.probe = Probe()

    def tool(self) -> FunctionTool[TagArgs]:
        def run(args: TagArgs, ctx: ToolContext) -> str:
            self.probe.enter(args.tag)
            try:
                assert self.probe.release.wait(WAIT * 4), "never released"
                return "done"
            finally:
                self.probe.leave(args.tag)

        return FunctionTool("block", "blocks", TagArgs, run)


@pytest.fixture
def blocker() -> Iterator[Blocker]:
    b = Blocker()
    try:
        yield b
    finally:
        b.probe.release.set()


def _calls(name: str, tags: list[str]) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(id=t, name=name, arguments={"tag": t}) for t in tags)


def test_timed_out_calls_keep_their_slots_until_their_threads_end(
    fresh_runtime: Any, inbox: Any, tmp_path: Path, blocker: Blocker
) -> None:
    q, collector = inbox
    quick = Probe()
    quick.release.set()
    registry = ToolRegistry([blocker.tool(), quick_tool(quick)])
    pool = start_pool(fresh_runtime, max_running=3, per_session=2)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    hog = reports.batch(
        submit(
            pool,
            collector,
            fs,
            registry,
            _calls("block", ["a1", "a2", "a3", "a4"]),
            session="a",
            call_timeout=0.3,
        )
    )
    # Two ran and timed out; their threads still run, so a3 and a4 never started:
    # the session's 2 slots are held, and it is at its bound of stuck threads.
    assert [r.outcome for r in hog.results] == ["timeout", "timeout", "error", "error"]
    assert all("still running" in r.result.output for r in hog.results[2:])
    assert blocker.probe.max_running == 2
    snapshot = stats(pool)
    assert (snapshot.running, snapshot.zombies) == (0, 2)
    assert snapshot.per_session_zombies == {"a": 2}
    assert snapshot.max_running_seen == 2
    # A new batch of that session is refused at once (no thread is spent on it) ...
    again = reports.batch(
        submit(pool, collector, fs, registry, _calls("quick", ["a5"]), session="a")
    )
    assert again.results[0].outcome == "error"
    assert "still running" in again.results[0].result.output
    assert "start:a5" not in quick.events
    # ... while another session keeps working in the slot that is left.
    other = submit(pool, collector, fs, registry, _calls("quick", ["b1", "b2"]), session="b")
    assert [r.outcome for r in reports.batch(other).results] == ["ok", "ok"]
    assert quick.max_running == 1  # 3 slots, 2 held by the zombies
    assert stats(pool).max_running_seen == 3
    # When the stuck threads end, their slots come back.
    blocker.probe.release.set()
    wait_until(lambda: stats(pool).zombies == 0)
    back = reports.batch(
        submit(pool, collector, fs, registry, _calls("quick", ["a6"]), session="a")
    )
    assert back.results[0].outcome == "ok"


def test_a_zombie_holds_its_slot_and_the_queue_moves_on_when_it_ends(
    fresh_runtime: Any, inbox: Any, tmp_path: Path, blocker: Blocker
) -> None:
    q, collector = inbox
    gated = Probe()
    registry = ToolRegistry([blocker.tool(), gate_tool(gated)])
    pool = start_pool(fresh_runtime, max_running=8, per_session=2)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    stuck = submit(pool, collector, fs, registry, _calls("block", ["z"]), call_timeout=0.3)
    assert reports.batch(stuck).results[0].outcome == "timeout"
    work = submit(pool, collector, fs, registry, _calls("gate", ["g1", "g2"]))
    wait_until(lambda: gated.running == 1)
    snapshot = stats(pool)
    assert (snapshot.running, snapshot.zombies, snapshot.queued) == (1, 1, 1)
    blocker.probe.release.set()  # the zombie's thread ends: its slot goes to g2
    wait_until(lambda: gated.running == 2)
    gated.release.set()
    assert [r.outcome for r in reports.batch(work).results] == ["ok", "ok"]
    assert gated.max_running == 2


def test_when_zombies_hold_every_slot_new_calls_get_a_clear_error(
    fresh_runtime: Any, inbox: Any, tmp_path: Path, blocker: Blocker
) -> None:
    q, collector = inbox
    quick = Probe()
    quick.release.set()
    registry = ToolRegistry([blocker.tool(), quick_tool(quick)])
    pool = start_pool(fresh_runtime, max_running=2, per_session=1)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    for session in ("a", "b"):
        result = reports.batch(
            submit(
                pool,
                collector,
                fs,
                registry,
                _calls("block", [session]),
                session=session,
                call_timeout=0.3,
            )
        )
        assert result.results[0].outcome == "timeout"
    refused = reports.batch(
        submit(pool, collector, fs, registry, _calls("quick", ["c"]), session="c")
    )
    assert refused.results[0].outcome == "error"
    assert "all 2 tool slots" in refused.results[0].result.output
    blocker.probe.release.set()
    wait_until(lambda: stats(pool).zombies == 0)
    fine = reports.batch(submit(pool, collector, fs, registry, _calls("quick", ["d"]), session="c"))
    assert fine.results[0].outcome == "ok"


# -- batch planning runs tool code too -------------------------------------------------------


def _hanging_planner(release: threading.Event) -> FunctionTool[TagArgs]:
    def paths(args: TagArgs) -> list[str]:
        assert release.wait(WAIT * 4), "never released"
        return []

    return FunctionTool(
        "plan_hang", "hangs in write_paths", TagArgs, lambda a, c: "ran", writes=paths
    )


def test_a_session_cannot_tie_up_threads_with_plannings_that_hang(
    fresh_runtime: Any, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    release = threading.Event()
    quick = Probe()
    quick.release.set()
    registry = ToolRegistry([_hanging_planner(release), quick_tool(quick)])
    pool = start_pool(fresh_runtime, per_session=2)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    try:
        hanging = [
            submit(pool, collector, fs, registry, _calls("plan_hang", [f"p{i}"]), session="a")
            for i in range(2)
        ]
        refused = reports.batch(
            submit(pool, collector, fs, registry, _calls("quick", ["a3"]), session="a")
        )
        assert refused.results[0].outcome == "error"
        assert "still being planned" in refused.results[0].result.output
        fine = submit(pool, collector, fs, registry, _calls("quick", ["b1"]), session="b")
        assert reports.batch(fine).results[0].outcome == "ok"
        release.set()
        for batch_id in hanging:
            assert reports.batch(batch_id).results[0].outcome == "ok"
        back = submit(pool, collector, fs, registry, _calls("quick", ["a4"]), session="a")
        assert reports.batch(back).results[0].outcome == "ok"
    finally:
        release.set()


def test_a_planning_that_timed_out_counts_as_a_stuck_thread_of_its_session(
    fresh_runtime: Any, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    release = threading.Event()
    quick = Probe()
    quick.release.set()
    registry = ToolRegistry([_hanging_planner(release), quick_tool(quick)])
    pool = start_pool(fresh_runtime, per_session=1)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    try:
        stuck = reports.batch(
            submit(pool, collector, fs, registry, _calls("plan_hang", ["p"]), call_timeout=0.3)
        )
        assert stuck.results[0].outcome == "timeout"
        refused = reports.batch(submit(pool, collector, fs, registry, _calls("quick", ["x"])))
        assert refused.results[0].outcome == "error"
        assert "still running" in refused.results[0].result.output
        release.set()  # the planning thread returns: the session may run again
        tries = iter(range(10_000))

        def runs_again() -> bool:
            batch_calls = _calls("quick", [f"y{next(tries)}"])
            result = reports.batch(submit(pool, collector, fs, registry, batch_calls))
            return result.results[0].outcome == "ok"

        wait_until(runs_again)
    finally:
        release.set()
