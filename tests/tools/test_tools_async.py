"""``async def`` tools: run on the tool layer's event loop with a threaded tool's guarantees.

Deadlines, cancellation (the coroutine itself is cancelled), isolation and
write ordering are checked on a real pool; a sync tool that returns a
coroutine is an error, never the text of a coroutine object (issue 23.2).
Tools synchronise on events the test sets, never on guessed sleeps.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import itertools
import queue
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.llm import FunctionModel
from fore.actors.tools import FunctionTool, ToolContext, ToolPool, ToolRegistry, WorkspaceFs
from fore.actors.tools.aio import ToolLoop, ToolLoopClosed
from fore.actors.tools.base import Tool, invoke_tool
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.decorator import tool
from fore.messages.conversation import ToolCall, ToolResult
from fore.messages.llm import LlmRequest
from fore.messages.tools import CancelToolCalls, RunToolBatch, ToolBatchFinished
from fore.supervision import Runtime
from tests.tools.test_tool_pool import Collector, Reports, stats, submit, wait_until

pytestmark = pytest.mark.runtime(name="async-tools", blobs=False)

WAIT = 20.0
_ids = itertools.count()


def pool_of(runtime: Runtime, **options: Any) -> Any:
    with runtime.system.activated():
        return ToolPool.start(aio=runtime.tool_loop, **options)


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c{next(_ids)}", name=name, arguments=arguments)


class Signals:
    """Thread-safe flags the async tools set, for the test to wait on."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.threads: list[str] = []
        self.log: list[str] = []
        self.lock = threading.Lock()

    def note(self, text: str) -> None:
        with self.lock:
            self.log.append(text)


def waiting_tool(
    signals: Signals, name: str = "wait_forever", timeout: float | None = None
) -> Tool[Any]:
    @tool(name=name, timeout=timeout)
    async def wait_forever(tag: str = "") -> str:
        signals.threads.append(threading.current_thread().name)
        signals.started.set()
        try:
            await asyncio.Event().wait()  # only a cancel ends it
        except asyncio.CancelledError:
            signals.cancelled.set()
            raise
        return "never"

    return wait_forever


# -- where and how async tools run ----------------------------------------------------------


def test_an_async_tool_runs_on_the_tool_loop(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    seen: list[str] = []

    @tool
    async def fetch(url: str) -> str:
        seen.append(threading.current_thread().name)
        await asyncio.sleep(0)
        return f"fetched {url}"

    assert inspect.iscoroutinefunction(fetch.execute)
    pool = pool_of(fresh_runtime)
    reports = Reports(q)
    batch = submit(
        pool, collector, WorkspaceFs(tmp_path), ToolRegistry([fetch]), (call("fetch", url="x"),)
    )
    (result,) = reports.batch(batch).results
    assert (result.outcome, result.result.output) == ("ok", "fetched x")
    assert seen == ["async-tools-tool-aio"]  # the tool loop's thread, not a dispatcher's


def test_a_tool_subclass_with_an_async_execute(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox

    class Args(BaseModel):
        n: int

    class Square(Tool[Args]):
        name = "square"
        description = "Square a number, asynchronously."
        args_model = Args

        async def execute(self, args: Args, ctx: ToolContext) -> int:
            await asyncio.sleep(0)
            return args.n * args.n

    pool = pool_of(fresh_runtime)
    reports = Reports(q)
    batch = submit(
        pool, collector, WorkspaceFs(tmp_path), ToolRegistry([Square()]), (call("square", n=7),)
    )
    assert reports.batch(batch).results[0].result.output == "49"


def test_many_async_calls_run_at_once_on_one_thread(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    """Eight calls each wait for all eight to have started: only concurrency ends them."""
    q, collector = inbox
    count = 8
    arrived = [0]
    threads: set[str] = set()

    @tool
    async def meet(tag: str) -> str:
        threads.add(threading.current_thread().name)
        arrived[0] += 1
        async with asyncio.timeout(WAIT):
            while arrived[0] < count:
                await asyncio.sleep(0.001)
        return tag

    pool = pool_of(fresh_runtime, per_session=count)
    reports = Reports(q)
    batch = submit(
        pool,
        collector,
        WorkspaceFs(tmp_path),
        ToolRegistry([meet]),
        tuple(call("meet", tag=str(i)) for i in range(count)),
    )
    results = reports.batch(batch).results
    assert [r.result.output for r in results] == [str(i) for i in range(count)]
    assert threads == {"async-tools-tool-aio"}
    assert stats(pool).max_running_seen == count


# -- deadline, cancellation, isolation, ordering -----------------------------------------------


def test_the_deadline_cancels_the_coroutine(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    signals = Signals()

    @tool
    async def quick(x: int) -> int:
        return x + 1

    pool = pool_of(fresh_runtime)
    reports = Reports(q)
    batch = submit(
        pool,
        collector,
        WorkspaceFs(tmp_path),
        # only the stuck tool's deadline is short: the sibling may take 0.5 s on a loaded machine
        ToolRegistry([waiting_tool(signals, timeout=0.5), quick]),
        (call("wait_forever"), call("quick", x=1)),
        call_timeout=WAIT,
    )
    stuck, sibling = reports.batch(batch).results
    assert (stuck.outcome, stuck.result.output) == ("timeout", "wait_forever timed out after 0.5s")
    assert (sibling.outcome, sibling.result.output) == ("ok", "2")
    assert signals.cancelled.wait(WAIT)  # the coroutine itself received the cancellation
    wait_until(lambda: stats(pool).zombies == 0)  # so it does not linger as a zombie
    wait_until(lambda: fresh_runtime.tool_loop.running == 0)


def test_a_cancel_cancels_the_coroutine(fresh_runtime: Runtime, inbox: Any, tmp_path: Path) -> None:
    q, collector = inbox
    signals = Signals()
    pool = pool_of(fresh_runtime)
    reports = Reports(q)
    stuck = call("wait_forever")
    batch = submit(
        pool, collector, WorkspaceFs(tmp_path), ToolRegistry([waiting_tool(signals)]), (stuck,)
    )
    assert signals.started.wait(WAIT)
    pool.tell(CancelToolCalls(session_id="s1", call_ids=(stuck.id,), reason="user pressed Esc"))
    (result,) = reports.batch(batch).results
    assert (result.outcome, result.result.output) == ("cancelled", "Cancelled: user pressed Esc")
    assert signals.cancelled.wait(WAIT)
    wait_until(lambda: stats(pool).zombies == 0)


def test_one_failing_async_tool_does_not_take_its_siblings_down(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox

    @tool
    async def explode(x: int) -> int:
        await asyncio.sleep(0)
        raise ValueError(f"exploded {x}")

    @tool
    async def base_exception() -> int:
        raise KeyboardInterrupt  # even this fails its own call only

    @tool
    async def fine(x: int) -> int:
        await asyncio.sleep(0)
        return x

    pool = pool_of(fresh_runtime)
    reports = Reports(q)
    batch = submit(
        pool,
        collector,
        WorkspaceFs(tmp_path),
        ToolRegistry([explode, base_exception, fine]),
        (call("explode", x=1), call("base_exception"), call("fine", x=3), call("fine", x="bad")),
    )
    outcomes = [(r.outcome, r.result.output) for r in reports.batch(batch).results]
    assert outcomes[0] == ("error", "explode failed: ValueError: exploded 1")
    assert outcomes[1][0] == "error" and "KeyboardInterrupt" in outcomes[1][1]
    assert outcomes[2] == ("ok", "3")
    assert outcomes[3][0] == "invalid"
    # the loop survived: a later batch runs
    again = submit(
        pool, collector, WorkspaceFs(tmp_path), ToolRegistry([fine]), (call("fine", x=4),)
    )
    assert reports.batch(again).results[0].result.output == "4"


def test_async_writes_to_one_path_run_in_call_order(
    fresh_runtime: Runtime, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox
    log: list[str] = []

    @tool(writes=lambda path, tag: [path])
    async def append(path: str, tag: str, ctx: ToolContext) -> str:
        log.append(f"start {tag}")
        for _ in range(5):
            await asyncio.sleep(0.001)  # would interleave with a sibling if overlapping
        existing = ctx.fs.read_bytes(path) if ctx.fs.stat(path) else b""
        ctx.fs.write_bytes(path, existing + tag.encode())
        log.append(f"end {tag}")
        return tag

    pool = pool_of(fresh_runtime)
    reports = Reports(q)
    batch = submit(
        pool,
        collector,
        WorkspaceFs(tmp_path),
        ToolRegistry([append]),
        tuple(call("append", path="./out.txt", tag=t) for t in "abcd"),
    )
    reports.batch(batch)
    assert (tmp_path / "out.txt").read_text() == "abcd"
    assert log == [f"{edge} {t}" for t in "abcd" for edge in ("start", "end")]


# -- a sync tool that returns a coroutine ------------------------------------------------------


class NArgs(BaseModel):
    n: int


async def _compute(n: int) -> int:
    return n


def coroutine_returning_tool() -> FunctionTool[NArgs]:
    """What a new user writes: a FunctionTool around an async function."""
    return FunctionTool("compute", "compute", NArgs, lambda args, _ctx: _compute(args.n))


def test_a_sync_tool_returning_a_coroutine_is_a_clear_error() -> None:
    ctx = ToolContext(
        fs=None, cancel=CancelToken(), deadline=time.monotonic() + 5, session_id="s", call_id="c"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = invoke_tool(ToolRegistry([coroutine_returning_tool()]), call("compute", n=1), ctx)
        gc.collect()
    assert result.outcome == "error" and result.is_error
    assert "<coroutine" not in result.output
    assert result.output.startswith(
        "compute failed: its execute() returned an awaitable (coroutine)"
    )
    assert "async def" in result.output
    assert not [str(w.message) for w in caught if "never awaited" in str(w.message)]


def test_a_session_shows_the_error_not_a_coroutine_object(fresh_runtime: Runtime) -> None:
    def decide(request: LlmRequest) -> Any:
        results = [i for i in request.messages if isinstance(i, ToolResult)]
        if not results:
            return {"text": "", "tool_calls": [{"name": "compute", "arguments": {"n": 2}}]}
        return results[0].output

    session = fresh_runtime.open_session(
        model=FunctionModel(decide), tools=[coroutine_returning_tool()]
    )
    try:
        turn = session.submit("go", timeout=WAIT)
        answer = str(turn.items[-1].text)
        assert "<coroutine object" not in answer
        assert "returned an awaitable" in answer
    finally:
        session.close()


# -- the loop's lifecycle -------------------------------------------------------------------------


def test_the_loop_starts_with_the_first_async_call_and_closes_with_the_runtime(
    tmp_path: Path,
) -> None:
    @tool
    def sync_tool(x: int) -> int:
        return x

    @tool
    async def async_tool(x: int) -> int:
        return x

    def decide(request: LlmRequest) -> Any:
        prompt = request.messages[-1]
        if prompt.kind == "user":
            name = "async_tool" if "async" in str(prompt) else "sync_tool"
            return {"text": "", "tool_calls": [{"name": name, "arguments": {"x": 1}}]}
        return "done"

    rt = Runtime(name="loop-life", blobs=False)
    try:
        session = rt.open_session(model=FunctionModel(decide), tools=[sync_tool, async_tool])
        assert session.submit("sync please", timeout=WAIT).status == "completed"
        assert not rt.tool_loop.started  # synchronous tools never start it
        assert session.submit("async please", timeout=WAIT).status == "completed"
        assert rt.tool_loop.started
        assert any(t.name == "loop-life-tool-aio" for t in threading.enumerate())
    finally:
        assert rt.close(timeout=30)
    assert rt.tool_loop.closed
    assert not any(t.name == "loop-life-tool-aio" for t in threading.enumerate())


def test_a_closed_loop_refuses_work_clearly() -> None:
    loop = ToolLoop(name="closed-loop")
    done: queue.Queue[Any] = queue.Queue()

    async def answer() -> int:
        return 42

    loop.submit(answer, lambda result, error: done.put((result, error)))
    assert done.get(timeout=WAIT) == (42, None)
    assert loop.close(timeout=5)
    with pytest.raises(ToolLoopClosed):
        loop.submit(answer, lambda result, error: None)
    coroutine = answer()
    with pytest.raises(ToolLoopClosed):
        loop.run_coroutine(coroutine)
    assert coroutine.cr_frame is None  # closed, never left un-awaited


def test_close_cancels_what_still_runs() -> None:
    loop = ToolLoop(name="closing-loop")
    done: queue.Queue[Any] = queue.Queue()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    loop.submit(forever, lambda result, error: done.put(error))
    assert started.wait(WAIT)
    assert loop.close(timeout=5)
    assert isinstance(done.get(timeout=WAIT), asyncio.CancelledError)


# -- no reference cycles on the hot path (see tests/core/test_reference_cycles.py) ---------------


def test_a_finished_async_batch_is_freed_without_the_collector(tmp_path: Path) -> None:
    import weakref

    @tool
    async def hop(tag: str, ctx: ToolContext) -> str:
        await asyncio.sleep(0)
        return tag

    @tool
    async def fails(tag: str) -> str:
        raise ValueError(tag)

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    rt = Runtime(name="async-cycles", blobs=False)
    try:
        q: queue.Queue[Any] = queue.Queue()
        with rt.system.activated():
            collector = Collector.start(q)
        pool = pool_of(rt)
        request = RunToolBatch(
            batch_id="b1",
            session_id="s1",
            calls=(call("hop", tag="a"), call("fails", tag="b"), call("hop", tag="c")),
            tools=ToolRegistry([hop, fails]),
            fs=WorkspaceFs(tmp_path),
            reply_to=collector,
        )
        pool.tell(request)
        while not isinstance(message := q.get(timeout=WAIT), ToolBatchFinished):
            pass
        assert [r.outcome for r in message.results] == ["ok", "error", "ok"]
        batch = weakref.ref(request)
        del request, message
        wait_until(lambda: batch() is None, timeout=5.0)
    finally:
        assert rt.close(timeout=30)
        if enabled:
            gc.enable()
