"""The tool pool actor: caps, fairness, ordering, isolation, timeouts, cancellation.

Real pool actors on a real runtime, real threads and subprocesses; tools that
must hold a slot wait on events the test releases, never on guessed sleeps.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import fore.testing
from fore.actors.core import PooledActor, handles
from fore.actors.core.cancel import CancelScope
from fore.actors.tools import (
    FunctionTool,
    ThreadRunner,
    ToolContext,
    ToolPool,
    ToolRegistry,
    WorkspaceFs,
    default_registry,
)
from fore.actors.tools.scheduling import CallShape, batch_dependencies
from fore.messages.base import Message
from fore.messages.blobs import Inline, Stored, Structured, Text
from fore.messages.conversation import ToolCall
from fore.messages.runtime import ChildSpec
from fore.messages.tools import (
    CancelToolCalls,
    GetPoolStats,
    PoolStats,
    RunToolBatch,
    ToolBatchFinished,
    ToolBatchRejected,
    ToolCallFinished,
    ToolCallStarted,
)
from fore.supervision import Runtime

WAIT = 15.0
_ids = itertools.count()


class Collector(PooledActor):
    """Receives everything the pool reports."""

    def __init__(self, inbox: queue.Queue[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.put(message)


class Probe:
    """Shared state of the test tools: concurrency counters and a start log."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.max_running = 0
        self.events: list[str] = []
        self.release = threading.Event()

    def enter(self, tag: str) -> None:
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.events.append(f"start:{tag}")

    def leave(self, tag: str) -> None:
        with self.lock:
            self.running -= 1
            self.events.append(f"end:{tag}")


class TagArgs(BaseModel):
    tag: str
    path: str = ""


def gate_tool(
    probe: Probe, name: str = "gate", *, exclusive: bool = False, writes_all: bool = False
) -> FunctionTool[TagArgs]:
    """Holds its slot until the probe is released."""

    def run(args: TagArgs, ctx: ToolContext) -> str:
        probe.enter(args.tag)
        try:
            if not probe.release.wait(WAIT):
                raise RuntimeError("never released")
            return f"done {args.tag}"
        finally:
            probe.leave(args.tag)

    return FunctionTool(
        name, "waits for the test", TagArgs, run, exclusive=exclusive, writes_all=writes_all
    )


def quick_tool(
    probe: Probe, name: str = "quick", *, exclusive: bool = False
) -> FunctionTool[TagArgs]:
    """Records its start and end; writes ``args.path`` when given."""

    def run(args: TagArgs, ctx: ToolContext) -> str:
        probe.enter(args.tag)
        try:
            time.sleep(0.01)  # widen the window in which wrong overlap would show
            if args.path:
                existing = ctx.fs.read_bytes(args.path) if ctx.fs.stat(args.path) else b""
                ctx.fs.write_bytes(args.path, existing + args.tag.encode())
            return args.tag
        finally:
            probe.leave(args.tag)

    return FunctionTool(
        name,
        "quick",
        TagArgs,
        run,
        exclusive=exclusive,
        writes=lambda a: [a.path] if a.path else [],
    )


def calls(name: str, tags: list[str], **extra: Any) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(id=f"c{next(_ids)}", name=name, arguments={"tag": t, **extra}) for t in tags
    )


def start_pool(runtime: Runtime, **options: Any) -> Any:
    with runtime.system.activated():
        return ToolPool.start(**options)


def submit(
    pool: Any,
    collector: Any,
    fs: WorkspaceFs,
    registry: ToolRegistry,
    batch_calls: tuple[ToolCall, ...],
    *,
    session: str = "s1",
    **options: Any,
) -> str:
    batch_id = f"b{next(_ids)}"
    pool.tell(
        RunToolBatch(
            batch_id=batch_id,
            session_id=session,
            calls=batch_calls,
            tools=registry,
            fs=fs,
            reply_to=collector,
            **options,
        )
    )
    return batch_id


class Reports:
    """Collects pool reports and checks the one-result-per-call invariant."""

    def __init__(self, q: queue.Queue[Any]) -> None:
        self.q = q
        self.finished: dict[str, list[ToolCallFinished]] = {}
        self.by_batch: dict[tuple[str, str], int] = {}
        self.batches: dict[str, ToolBatchFinished] = {}
        self.all_batches: list[ToolBatchFinished] = []
        self.started: list[ToolCallStarted] = []
        self.rejected: list[ToolBatchRejected] = []

    def pump(self, until: Callable[[], bool], timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("expected pool reports did not arrive")
            try:
                message = self.q.get(timeout=remaining)
            except queue.Empty:
                continue
            if isinstance(message, ToolCallFinished):
                self.finished.setdefault(message.result.call_id, []).append(message)
                key = (message.batch_id, message.result.call_id)
                self.by_batch[key] = self.by_batch.get(key, 0) + 1
            elif isinstance(message, ToolBatchFinished):
                self.batches[message.batch_id] = message
                self.all_batches.append(message)
            elif isinstance(message, ToolCallStarted):
                self.started.append(message)
            elif isinstance(message, ToolBatchRejected):
                self.rejected.append(message)

    def batch(self, batch_id: str, timeout: float = WAIT) -> ToolBatchFinished:
        self.pump(lambda: batch_id in self.batches, timeout)
        result = self.batches[batch_id]
        for item in result.results:  # exactly one result per call
            assert self.by_batch[(batch_id, item.result.call_id)] == 1
        return result


def stats(pool: Any) -> PoolStats:
    result: PoolStats = pool.ask(GetPoolStats(), timeout=WAIT)
    return result


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


# -- caps and fairness -----------------------------------------------------------------


def test_global_and_per_session_caps(fresh_runtime: Runtime, inbox: Any, tmp_path: Path) -> None:
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([gate_tool(probe)])
    fs = WorkspaceFs(tmp_path)
    pool = start_pool(fresh_runtime, max_running=5, per_session=3)
    reports = Reports(q)
    batches = [
        submit(
            pool, collector, fs, registry, calls("gate", [f"{s}{i}" for i in range(6)]), session=s
        )
        for s in ("a", "b")
    ]
    wait_until(lambda: stats(pool).running == 5)
    snapshot = stats(pool)
    assert snapshot.queued == 7
    assert all(n <= 3 for n in snapshot.per_session_running.values())
    assert probe.running == 5
    probe.release.set()
    for batch_id in batches:
        assert all(r.outcome == "ok" for r in reports.batch(batch_id).results)
    assert probe.max_running == 5
    assert stats(pool).max_running_seen == 5


def test_a_session_with_one_call_is_not_starved(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    probe.release.set()
    registry = ToolRegistry([quick_tool(probe)])
    fs = WorkspaceFs(tmp_path)
    pool = start_pool(fresh_runtime, max_running=2, per_session=2)
    reports = Reports(q)
    big = submit(
        pool, collector, fs, registry, calls("quick", [f"a{i}" for i in range(40)]), session="a"
    )
    small = submit(pool, collector, fs, registry, calls("quick", ["b0"]), session="b")
    reports.batch(big)
    reports.batch(small)
    starts = [e for e in probe.events if e.startswith("start:")]
    # Session a holds both slots; b's single call takes the first slot that frees.
    assert starts.index("start:b0") <= 2


def test_per_session_cap_from_the_batch(fresh_runtime: Runtime, inbox: Any, tmp_path: Path) -> None:
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([gate_tool(probe)])
    pool = start_pool(fresh_runtime, max_running=10, per_session=8)
    reports = Reports(q)
    batch = submit(
        pool,
        collector,
        WorkspaceFs(tmp_path),
        registry,
        calls("gate", list("abcdef")),
        max_concurrency=2,
    )
    wait_until(lambda: stats(pool).running == 2)
    assert stats(pool).queued == 4
    probe.release.set()
    reports.batch(batch)
    assert probe.max_running == 2


# -- ordering within a batch -------------------------------------------------------------


def test_calls_writing_the_same_path_run_in_call_order(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([quick_tool(probe)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = (
        *calls("quick", ["1"], path="x.txt"),
        *calls("quick", ["A"], path="y.txt"),
        *calls("quick", ["2"], path="./x.txt"),
        *calls("quick", ["B"], path="y.txt"),
        *calls("quick", ["3"], path="x.txt"),
    )
    for _ in range(5):
        (tmp_path / "x.txt").unlink(missing_ok=True)
        (tmp_path / "y.txt").unlink(missing_ok=True)
        reports.batch(submit(pool, collector, WorkspaceFs(tmp_path), registry, batch_calls))
        assert (tmp_path / "x.txt").read_text() == "123"
        assert (tmp_path / "y.txt").read_text() == "AB"


def test_exclusive_tool_runs_alone_within_its_batch(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    probe.release.set()
    registry = ToolRegistry([quick_tool(probe), quick_tool(probe, "solo", exclusive=True)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = (
        *calls("quick", ["p1", "p2", "p3"]),
        *calls("solo", ["S"]),
        *calls("quick", ["q1", "q2", "q3"]),
    )
    reports.batch(submit(pool, collector, WorkspaceFs(tmp_path), registry, batch_calls))
    events = probe.events
    start, end = events.index("start:S"), events.index("end:S")
    assert end == start + 1  # nothing started or ended while S ran
    assert all(events.index(f"end:{t}") < start for t in ("p1", "p2", "p3"))
    assert all(events.index(f"start:{t}") > end for t in ("q1", "q2", "q3"))
    assert probe.max_running == 3  # the parallel parts did run in parallel


# -- isolation ------------------------------------------------------------------------------


def test_a_raising_tool_does_not_cancel_its_slow_sibling(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()

    def explode(args: TagArgs, ctx: ToolContext) -> str:
        raise KeyError("kaboom")

    registry = ToolRegistry([gate_tool(probe), FunctionTool("explode", "raises", TagArgs, explode)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = (*calls("gate", ["slow"]), *calls("explode", ["x"]))
    batch = submit(pool, collector, WorkspaceFs(tmp_path), registry, batch_calls)
    reports.pump(lambda: batch_calls[1].id in reports.finished)
    failed = reports.finished[batch_calls[1].id][0]
    assert failed.outcome == "error"
    assert "KeyError" in failed.result.output and "kaboom" in failed.result.output
    assert batch_calls[0].id not in reports.finished  # the sibling is still running
    probe.release.set()
    result = reports.batch(batch)
    assert [r.outcome for r in result.results] == ["ok", "error"]
    assert result.results[0].result.output == "done slow"


def test_a_hanging_tool_times_out_and_its_sibling_completes(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    hang = Probe()
    fast = Probe()
    fast.release.set()
    stuck = gate_tool(hang)
    stuck.timeout = 0.3  # only the hanging tool's own deadline is short: a loaded machine
    registry = ToolRegistry([stuck, quick_tool(fast)])  # may take 0.3 s to run the sibling
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = (*calls("gate", ["stuck"]), *calls("quick", ["ok"]))
    try:
        result = reports.batch(
            submit(pool, collector, WorkspaceFs(tmp_path), registry, batch_calls, call_timeout=WAIT)
        )
        assert result.results[0].outcome == "timeout"
        assert "timed out" in result.results[0].result.output
        assert result.results[0].result.is_error
        assert result.results[1].outcome == "ok"
        # Reported, so no longer running; but its thread is stuck, so it is a
        # zombie and keeps its slot until the thread ends (test_pool_zombies.py).
        assert stats(pool).running == 0
        assert stats(pool).zombies == 1
        assert stats(pool).abandoned_threads == 1
    finally:
        hang.release.set()


def test_invalid_arguments_and_unknown_tools_become_error_results(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = (
        ToolCall(id="bad", name="read_file", arguments={"path": 3, "limit": "many"}),
        ToolCall(id="none", name="teleport", arguments={}),
        ToolCall(id="good", name="list_directory", arguments={}),
    )
    result = reports.batch(
        submit(pool, collector, WorkspaceFs(tmp_path), default_registry(), batch_calls)
    )
    bad, unknown, good = result.results
    assert bad.outcome == "invalid"
    assert "path" in bad.result.output and "limit" in bad.result.output
    assert unknown.outcome == "unknown_tool" and "teleport" in unknown.result.output
    assert good.outcome == "ok"


# -- cancellation ------------------------------------------------------------------------------


def _pid_from(path: Path) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip() != "")
    return int(path.read_text())


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_cancelling_a_running_shell_kills_its_process_group(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    call = ToolCall(
        id="sleepy",
        name="shell",
        arguments={"command": "echo $$ > pid; sleep 60 & sleep 60; wait"},
    )
    batch = submit(pool, collector, WorkspaceFs(tmp_path), default_registry(), (call,))
    pgid = _pid_from(tmp_path / "pid")
    assert not _group_gone(pgid)
    assert pool.ask(CancelToolCalls(session_id="s1", call_ids=("sleepy",)), timeout=WAIT) == 1
    result = reports.batch(batch)
    assert result.results[0].outcome == "cancelled"
    assert result.results[0].result.is_error
    wait_until(lambda: _group_gone(pgid))


def test_cancel_a_whole_session_leaves_other_sessions_alone(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    other = Probe()
    registry = ToolRegistry([gate_tool(probe), gate_tool(other, "other")])
    pool = start_pool(fresh_runtime, max_running=4, per_session=2)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    mine = submit(pool, collector, fs, registry, calls("gate", list("abcde")), session="mine")
    theirs = submit(pool, collector, fs, registry, calls("other", ["z"]), session="theirs")
    wait_until(lambda: stats(pool).running == 3)
    assert pool.ask(CancelToolCalls(session_id="mine"), timeout=WAIT) == 5
    result = reports.batch(mine)
    assert [r.outcome for r in result.results] == ["cancelled"] * 5
    assert theirs not in reports.batches
    other.release.set()
    assert reports.batch(theirs).results[0].outcome == "ok"
    probe.release.set()


def test_cancel_one_batch_only(fresh_runtime: Runtime, inbox: Any, tmp_path: Path) -> None:
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([gate_tool(probe)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    first = submit(pool, collector, fs, registry, calls("gate", ["a", "b"]))
    second = submit(pool, collector, fs, registry, calls("gate", ["c"]))
    wait_until(lambda: stats(pool).running == 3)
    pool.ask(CancelToolCalls(session_id="s1", batch_id=first), timeout=WAIT)
    assert [r.outcome for r in reports.batch(first).results] == ["cancelled", "cancelled"]
    probe.release.set()
    assert reports.batch(second).results[0].outcome == "ok"


# -- the runner crashing ------------------------------------------------------------------------


class Boom(Message):
    """Make the pool actor itself fail (a bug in the runner)."""


class CrashablePool(ToolPool):
    @handles(Boom)
    def _boom(self, _message: Boom) -> None:
        raise RuntimeError("runner bug")


def test_runner_crash_mid_batch_gives_every_call_a_result_and_restarts(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([gate_tool(probe)])
    pool = fresh_runtime.start_child(ChildSpec(id="crashable_pool", start=CrashablePool.start))
    first_urn = pool.actor_urn
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    batch_calls = calls("gate", ["a", "b", "c"])
    batch = submit(pool, collector, fs, registry, batch_calls)
    wait_until(lambda: probe.running == 3)
    pool.tell(Boom())
    result = reports.batch(batch)
    assert [r.outcome for r in result.results] == ["crashed"] * 3
    assert all("crashed" in r.result.output for r in result.results)
    probe.release.set()
    # The supervisor restarted the pool behind the same handle; it works again.
    wait_until(lambda: pool.actor_urn != first_urn)
    again = submit(pool, collector, fs, registry, calls("gate", ["d"]))
    assert reports.batch(again).results[0].outcome == "ok"


def test_empty_batch_finishes_at_once(fresh_runtime: Runtime, inbox: Any, tmp_path: Path) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    result = reports.batch(submit(pool, collector, WorkspaceFs(tmp_path), default_registry(), ()))
    assert result.results == ()


# -- one session's bad request never harms the pool or other sessions ---------------------------


def test_a_failing_write_paths_fails_only_its_own_call(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    quick = Probe()
    quick.release.set()

    def no_paths(args: TagArgs) -> list[str]:
        raise RuntimeError("no paths today")

    broken = FunctionTool(
        "broken", "raises in write_paths", TagArgs, lambda a, c: "ran", writes=no_paths
    )
    registry = ToolRegistry([gate_tool(probe), broken, quick_tool(quick)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    elsewhere = submit(pool, collector, fs, registry, calls("gate", ["other"]), session="other")
    wait_until(lambda: probe.running == 1)
    mine = submit(
        pool,
        collector,
        fs,
        registry,
        (*calls("broken", ["x"]), *calls("quick", ["y"], path="y.txt")),
        session="mine",
    )
    broken_result, sibling = reports.batch(mine).results
    assert broken_result.outcome == "error" and broken_result.result.is_error
    assert "RuntimeError" in broken_result.result.output
    assert "no paths today" in broken_result.result.output
    assert sibling.outcome == "ok"
    probe.release.set()
    assert reports.batch(elsewhere).results[0].outcome == "ok"  # not "crashed"
    assert pool.is_alive()


def test_a_hanging_write_paths_times_out_its_batch_only(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    stuck = threading.Event()
    quick = Probe()
    quick.release.set()

    def slow_paths(args: TagArgs) -> list[str]:
        stuck.wait(WAIT)
        return []

    slow = FunctionTool(
        "slow_plan", "hangs in write_paths", TagArgs, lambda a, c: "ran", writes=slow_paths
    )
    registry = ToolRegistry([slow, quick_tool(quick)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    try:
        hung = submit(
            pool, collector, fs, registry, calls("slow_plan", ["x", "y"]), call_timeout=0.3
        )
        fine = submit(pool, collector, fs, registry, calls("quick", ["z"]), session="other")
        assert reports.batch(fine).results[0].outcome == "ok"
        result = reports.batch(hung)
        assert [r.outcome for r in result.results] == ["timeout", "timeout"]
        assert all("Not run" in r.result.output for r in result.results)
        assert stats(pool).running == 0
    finally:
        stuck.set()


def test_a_duplicate_batch_id_is_rejected_and_harms_nobody(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([gate_tool(probe)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)

    def run(batch_id: str, session: str, batch_calls: tuple[ToolCall, ...]) -> None:
        pool.tell(
            RunToolBatch(
                batch_id=batch_id,
                session_id=session,
                calls=batch_calls,
                tools=registry,
                fs=fs,
                reply_to=collector,
            )
        )

    original, other, duplicate, same_id_elsewhere = (calls("gate", [tag]) for tag in "abcd")
    run("dup", "s1", original)
    run("other", "s2", other)
    wait_until(lambda: probe.running == 2)
    run("dup", "s1", duplicate)
    reports.pump(lambda: bool(reports.rejected))
    (rejected,) = reports.rejected
    assert (rejected.batch_id, rejected.session_id) == ("dup", "s1")
    assert rejected.call_ids == (duplicate[0].id,)
    assert "already running" in rejected.reason
    # Nothing is reported under the running batch's id for the duplicate: the
    # audit found its error results mixed into the running batch's (G11).
    assert duplicate[0].id not in reports.finished
    assert not reports.all_batches
    # Batch ids need only be unique within a session.
    run("dup", "s3", same_id_elsewhere)
    wait_until(lambda: probe.running == 3)
    probe.release.set()
    # Two batches named "dup" now finish (s1's and s3's), in either order.
    reports.pump(lambda: sum(b.batch_id == "dup" for b in reports.all_batches) == 2)
    by_session = {b.session_id: b for b in reports.all_batches if b.batch_id == "dup"}
    assert [r.result.call_id for r in by_session["s1"].results] == [original[0].id]
    assert [r.result.call_id for r in by_session["s3"].results] == [same_id_elsewhere[0].id]
    wanted = {original[0].id, other[0].id, same_id_elsewhere[0].id}
    reports.pump(lambda: wanted <= set(reports.finished))
    assert all(reports.finished[call_id][0].outcome == "ok" for call_id in wanted)
    assert all(len(reports.finished[call_id]) == 1 for call_id in wanted)
    assert duplicate[0].id not in reports.finished
    assert pool.is_alive()


# -- ordering: shell calls and canonical paths -----------------------------------------------


def test_dependencies_order_a_shell_against_every_write_but_not_reads() -> None:
    write_a = CallShape(frozenset({"a"}), False)
    read = CallShape(frozenset(), False)
    shell = CallShape(frozenset(), False, writes_all=True)
    write_b = CallShape(frozenset({"b"}), False)
    deps = batch_dependencies([write_a, read, shell, write_b, read, shell])
    assert deps == [set(), set(), {0}, {2}, set(), {0, 2, 3}]


def test_a_shell_call_runs_after_earlier_writes_and_before_later_ones(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    writes = Probe()
    writes.release.set()
    registry = ToolRegistry(
        [
            quick_tool(writes, "write"),
            gate_tool(probe, "sh", writes_all=True),
            gate_tool(probe, "read"),
        ]
    )
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch = submit(
        pool,
        collector,
        WorkspaceFs(tmp_path),
        registry,
        (
            *calls("write", ["w1"], path="a.txt"),
            *calls("sh", ["S"]),
            *calls("read", ["R"]),
            *calls("write", ["w2"], path="b.txt"),
        ),
    )
    wait_until(lambda: probe.running == 2)  # the shell and the read run side by side
    assert "end:w1" in writes.events  # the shell started only after the earlier write
    assert "start:w2" not in writes.events  # the later write waits for the shell
    probe.release.set()
    assert all(r.outcome == "ok" for r in reports.batch(batch).results)
    assert "start:w2" in writes.events


def test_builtin_shell_sees_the_writes_before_it_and_none_after(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    for attempt in range(5):
        batch_calls = (
            ToolCall(
                id=f"w{attempt}a", name="write_file", arguments={"path": "a.txt", "content": "one"}
            ),
            ToolCall(id=f"s{attempt}", name="shell", arguments={"command": "cat a.txt"}),
            ToolCall(
                id=f"w{attempt}b", name="write_file", arguments={"path": "a.txt", "content": "two"}
            ),
        )
        result = reports.batch(
            submit(pool, collector, WorkspaceFs(tmp_path), default_registry(), batch_calls)
        )
        assert [r.outcome for r in result.results] == ["ok", "ok", "ok"]
        assert "stdout:\none" in result.results[1].result.output
        assert (tmp_path / "a.txt").read_text() == "two"
        (tmp_path / "a.txt").unlink()


@pytest.mark.parametrize(
    ("spellings", "target"),
    [
        (["x.txt", "link.txt", "./link.txt"], "x.txt"),
        (["d/f.txt", "dlink/f.txt", "d/../dlink/f.txt"], "d/f.txt"),
    ],
)
def test_writes_to_one_file_under_different_names_run_in_call_order(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path, spellings: list[str], target: str
) -> None:
    q, collector = inbox
    (tmp_path / "d").mkdir()
    (tmp_path / "x.txt").write_text("")
    (tmp_path / "d" / "f.txt").write_text("")
    (tmp_path / "link.txt").symlink_to("x.txt")
    (tmp_path / "dlink").symlink_to("d")
    probe = Probe()
    registry = ToolRegistry([quick_tool(probe)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = tuple(
        call
        for tag, path in zip("123", spellings, strict=True)
        for call in calls("quick", [tag], path=path)
    )
    result = reports.batch(submit(pool, collector, WorkspaceFs(tmp_path), registry, batch_calls))
    assert all(r.outcome == "ok" for r in result.results)
    assert (tmp_path / target).read_text() == "123"
    events = probe.events
    assert events.index("end:1") < events.index("start:2")
    assert events.index("end:2") < events.index("start:3")
    assert (tmp_path / "link.txt").is_symlink()


# -- cancellation and timeouts reach a Python tool's token ------------------------------------


def _token_looper(started: threading.Event, saw: queue.Queue[str]) -> FunctionTool[TagArgs]:
    def run(args: TagArgs, ctx: ToolContext) -> str:
        started.set()
        while not ctx.cancel.cancelled:
            ctx.cancel.wait(0.05)
        saw.put(ctx.cancel.reason)
        ctx.cancel.raise_if_cancelled()
        return "unreachable"

    return FunctionTool("looper", "loops until cancelled", TagArgs, run)


def test_a_python_tool_sees_its_token_when_the_pool_cancels_it(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    started = threading.Event()
    saw: queue.Queue[str] = queue.Queue()
    runner = ThreadRunner(name="token-test")
    pool = start_pool(fresh_runtime, runner=runner)
    reports = Reports(q)
    try:
        looper = calls("looper", ["x"])
        batch = submit(
            pool,
            collector,
            WorkspaceFs(tmp_path),
            ToolRegistry([_token_looper(started, saw)]),
            looper,
        )
        assert started.wait(WAIT)
        cancel = CancelToolCalls(
            session_id="s1", call_ids=(looper[0].id,), reason="user pressed stop"
        )
        assert pool.ask(cancel, timeout=WAIT) == 1
        result = reports.batch(batch).results[0]
        assert result.outcome == "cancelled" and result.result.is_error
        assert "user pressed stop" in result.result.output
        assert saw.get(timeout=WAIT) == "user pressed stop"  # the tool itself saw it and returned
        wait_until(lambda: runner.busy_count == 0)  # and its thread is free again
    finally:
        runner.shutdown(timeout=5)


def test_a_call_timeout_cancels_a_python_tools_token(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    started = threading.Event()
    saw: queue.Queue[str] = queue.Queue()
    runner = ThreadRunner(name="timeout-test")
    pool = start_pool(fresh_runtime, runner=runner)
    reports = Reports(q)
    try:
        batch = submit(
            pool,
            collector,
            WorkspaceFs(tmp_path),
            ToolRegistry([_token_looper(started, saw)]),
            calls("looper", ["x"]),
            call_timeout=0.2,
        )
        result = reports.batch(batch).results[0]
        assert result.outcome == "timeout" and "timed out" in result.result.output
        assert started.is_set()
        assert saw.get(timeout=WAIT) == "timeout"
        wait_until(lambda: runner.busy_count == 0)
    finally:
        runner.shutdown(timeout=5)


# -- a runner full of stuck threads ---------------------------------------------------------


def test_a_full_runner_gives_clear_error_results_and_recovers(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    hang = Probe()
    quick = Probe()
    quick.release.set()
    runner = ThreadRunner(name="tiny", max_threads=2)
    registry = ToolRegistry([gate_tool(hang), quick_tool(quick)])
    pool = start_pool(fresh_runtime, runner=runner)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    try:
        stuck = reports.batch(
            submit(pool, collector, fs, registry, calls("gate", ["h1", "h2"]), call_timeout=0.2)
        )
        assert [r.outcome for r in stuck.results] == ["timeout", "timeout"]
        assert runner.busy_count == 2  # both threads are still inside the hanging tool
        refused = reports.batch(submit(pool, collector, fs, registry, calls("quick", ["a", "b"])))
        assert [r.outcome for r in refused.results] == ["error", "error"]
        assert all("no tool thread is free" in r.result.output for r in refused.results)
        hang.release.set()
        wait_until(lambda: runner.busy_count == 0)
        again = reports.batch(submit(pool, collector, fs, registry, calls("quick", ["c"])))
        assert again.results[0].outcome == "ok"
    finally:
        hang.release.set()
        runner.shutdown(timeout=5)


# -- a tool's own ToolOutput travels with its result ------------------------------------------


def test_an_explicit_tool_output_is_carried_to_the_requester(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    outputs: dict[str, Any] = {
        "inline": Inline(text="small but keep it"),
        "stored": Stored(summary="3 lines of log", content=Text(text="a\nb\nc")),
        "structured": Stored(summary="two numbers", content=Structured(value=[1, 2])),
        "plain": "just text",
    }
    tool = FunctionTool("out", "returns what it is told", TagArgs, lambda a, c: outputs[a.tag])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    result = reports.batch(
        submit(
            pool,
            collector,
            WorkspaceFs(tmp_path),
            ToolRegistry([tool]),
            calls("out", list(outputs)),
        )
    )
    inline, stored, structured, plain = result.results
    assert inline.explicit == outputs["inline"] and inline.result.output == "small but keep it"
    assert stored.explicit == outputs["stored"] and stored.result.output == "a\nb\nc"
    assert stored.stored_summary == "3 lines of log"
    assert structured.explicit == outputs["structured"] and structured.result.output == "[1, 2]"
    assert plain.explicit is None and plain.result.output == "just text"
    for finished in result.results:  # and it survives serialisation
        assert ToolCallFinished.model_validate_json(finished.model_dump_json()) == finished


# -- the run's cancel scope (issue 22: a scope travels with the batch) ---------------------


def test_a_batch_whose_scope_was_cancelled_before_it_arrived_runs_nothing(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    """A cancel that overtakes its batch is not lost: the scope is its record."""
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([quick_tool(probe)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    scope = CancelScope()
    scope.cancel("the run was cancelled")
    batch = submit(
        pool, collector, WorkspaceFs(tmp_path), registry, calls("quick", ["a", "b"]), scope=scope
    )
    result = reports.batch(batch)
    assert [r.outcome for r in result.results] == ["cancelled", "cancelled"]
    assert all("the run was cancelled" in r.result.output for r in result.results)
    assert probe.events == []  # nothing ran
    assert scope.settled  # its lease went with the batch's report


def test_cancelling_a_batchs_scope_cancels_its_calls_and_only_them(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    probe = Probe()
    registry = ToolRegistry([gate_tool(probe)])
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    fs = WorkspaceFs(tmp_path)
    scope = CancelScope()
    first = submit(pool, collector, fs, registry, calls("gate", ["a", "b"]), scope=scope)
    second = submit(pool, collector, fs, registry, calls("gate", ["c"]))
    wait_until(lambda: stats(pool).running == 3)
    scope.cancel("stop")
    assert [r.outcome for r in reports.batch(first).results] == ["cancelled", "cancelled"]
    probe.release.set()
    assert reports.batch(second).results[0].outcome == "ok"
    assert scope.settled
