"""What the pool reports: one result per call id, FIFO service across sessions.

Real pool actors on a real runtime; the tools wait on events the test sets.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from fore.actors.tools import FunctionTool, ToolContext, ToolRegistry, WorkspaceFs
from fore.messages.conversation import ToolCall, ToolResult
from fore.messages.tools import ToolCallFinished
from tests.tools.test_tool_pool import (
    WAIT,
    Probe,
    Reports,
    TagArgs,
    quick_tool,
    start_pool,
    stats,
    submit,
    wait_until,
)


def test_a_result_carries_the_id_of_its_call() -> None:
    result = ToolResult(call_id="c7", name="t", output="x", is_error=False)
    finished = ToolCallFinished(batch_id="b", session_id="s", result=result, outcome="ok")
    assert finished.call_id == "c7"
    assert ToolCallFinished.model_validate_json(finished.model_dump_json()) == finished
    with pytest.raises(ValidationError, match="differs"):
        ToolCallFinished(batch_id="b", session_id="s", call_id="c8", result=result, outcome="ok")


def test_a_reused_call_id_in_a_batch_is_refused_so_each_id_has_one_result(
    fresh_runtime: Any, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    probe.release.set()
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = (
        ToolCall(id="same", name="quick", arguments={"tag": "first"}),
        ToolCall(id="other", name="quick", arguments={"tag": "other"}),
        ToolCall(id="same", name="quick", arguments={"tag": "second"}),
    )
    batch_id = submit(
        pool, collector, WorkspaceFs(tmp_path), ToolRegistry([quick_tool(probe)]), batch_calls
    )
    reports.pump(lambda: batch_id in reports.batches)
    result = reports.batches[batch_id]
    assert [r.call_id for r in result.results] == ["same", "other", "same"]
    first, other, second = result.results
    assert (first.outcome, first.result.output) == ("ok", "first")
    assert other.outcome == "ok"
    assert second.outcome == "invalid" and second.result.is_error
    assert "already used by call #1" in second.result.output
    assert "start:second" not in probe.events  # it never ran
    ok_by_id = defaultdict(list)
    for finished in result.results:
        if not finished.result.is_error:
            ok_by_id[finished.call_id].append(finished)
    assert all(len(v) == 1 for v in ok_by_id.values())


class Steps:
    """A tool whose call ``tag`` runs until the test releases exactly that tag."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.gates: dict[str, threading.Event] = defaultdict(threading.Event)
        self.lock = threading.Lock()

    def tool(self) -> FunctionTool[TagArgs]:
        def run(args: TagArgs, ctx: ToolContext) -> str:
            with self.lock:
                self.order.append(args.tag)
                gate = self.gates[args.tag]
            assert gate.wait(WAIT), f"{args.tag} never released"
            return args.tag

        return FunctionTool("step", "runs until released", TagArgs, run)

    def release(self, tag: str) -> None:
        with self.lock:
            gate = self.gates[tag]
        gate.set()


def test_sessions_waiting_for_a_slot_are_served_first_come_first_served(
    fresh_runtime: Any, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    steps = Steps()
    registry = ToolRegistry([steps.tool()])
    fs = WorkspaceFs(tmp_path)
    pool = start_pool(fresh_runtime, max_running=1, per_session=1)
    reports = Reports(q)

    def step_calls(tags: list[str]) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(id=t, name="step", arguments={"tag": t}) for t in tags)

    try:
        batches = [
            submit(pool, collector, fs, registry, step_calls(["h0", "h1", "h2"]), session="hog")
        ]
        wait_until(lambda: steps.order == ["h0"])
        for waiting, session in enumerate(["a", "b", "c"], start=3):
            batches.append(
                submit(pool, collector, fs, registry, step_calls([session]), session=session)
            )
            wait_until(lambda waiting=waiting: stats(pool).queued == waiting)
        for running in ["h0", "a", "b", "c", "h1", "h2"]:
            wait_until(lambda running=running: steps.order[-1:] == [running])
            steps.release(running)
        for batch_id in batches:
            assert all(r.outcome == "ok" for r in reports.batch(batch_id).results)
        # The sessions that queued while the hog ran are served in arrival order,
        # ahead of the hog's own next call; nobody jumps the line.
        assert steps.order == ["h0", "a", "b", "c", "h1", "h2"]
    finally:
        for tag in ["h0", "h1", "h2", "a", "b", "c"]:
            steps.release(tag)
