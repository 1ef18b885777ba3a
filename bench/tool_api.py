"""Tools the way Python developers write them: what ``@tool``, async tools and MCP cost.

Every figure is measured beside its baseline in the same run:

* **per-call overhead** -- 1,000 trivial calls through the tool pool (as a
  session's calls run), for today's ``FunctionTool``, a ``@tool`` function and
  an ``async def`` ``@tool``; the decorated tools should stay within 1.2x of
  ``FunctionTool``. The invocation layer alone (``invoke_tool`` /
  ``ainvoke_tool``, no pool) and calling the function directly are shown too,
  so the decorator's own share is visible;
* **64 concurrent async calls of 50 ms** through the pool: wall time vs
  ``asyncio.gather`` of the same 64 coroutines on a bare loop (target 1.15x);
* **MCP over stdio** -- a trivial call's round trip through Fore (the
  connection on the tool loop, and the whole pool path) vs the SDK's own
  ``ClientSession.call_tool`` in a loop, against the same kind of server.

Each measurement is warmed up, repeated, and its median taken (the per-call
variants interleaved, in alternating order, so machine noise hits them
alike), under the process settings a ``Runtime`` applies (GC thresholds, GIL
switch interval: ``actors.core.tuning``); a batch that does not finish, or a
call that does not succeed, fails the benchmark.

Run: ``fore bench tool-api`` (or ``python -m bench.tool_api [--quick]``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fore.actors.core import ActorSystem, PooledActor, tuning
from fore.actors.tools import FunctionTool, ToolContext, ToolPool, ToolRegistry, WorkspaceFs
from fore.actors.tools.aio import ToolLoop
from fore.actors.tools.base import ainvoke_tool, invoke_tool
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.decorator import tool
from fore.actors.tools.noworkspace import NoWorkspace
from fore.bench._common import BenchFailed, console, machine_line, ratio, table
from fore.messages.conversation import ToolCall
from fore.messages.tools import RunToolBatch, ToolBatchFinished

OVERHEAD_TARGET = 1.2
GATHER_TARGET = 1.15
ASYNC_CALLS = 64
ASYNC_CALL_S = 0.05

_ids = itertools.count()

MCP_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("bench")

@server.tool()
def echo(text: str) -> str:
    return text

server.run()
"""


class _Args(BaseModel):
    n: int = 0


class _Sink(PooledActor):
    """Receives the pool's batch reports and wakes the waiting benchmark."""

    def __init__(self) -> None:
        super().__init__()
        self.events: dict[str, threading.Event] = {}
        self.outcomes: dict[str, list[str]] = {}

    def expect(self, batch_id: str) -> threading.Event:
        event = self.events[batch_id] = threading.Event()
        return event

    def on_receive(self, message: Any) -> None:
        if isinstance(message, ToolBatchFinished):
            self.outcomes[message.batch_id] = [r.outcome for r in message.results]
            self.events[message.batch_id].set()


def _trivial_tools() -> dict[str, Any]:
    def plain(n: int) -> str:
        return "ok"

    @tool
    def decorated(n: int) -> str:
        return "ok"

    @tool
    async def async_decorated(n: int) -> str:
        return "ok"

    @tool
    async def async_sleep(n: int) -> str:
        await asyncio.sleep(ASYNC_CALL_S)
        return "ok"

    return {
        "plain": plain,
        "function_tool": FunctionTool("function_tool", "nothing", _Args, lambda a, c: "ok"),
        "decorated": decorated,
        "async_decorated": async_decorated,
        "async_sleep": async_sleep,
    }


class _PoolRunner:
    """Runs batches on a pool and waits for them (failing loudly if one does not finish)."""

    def __init__(self, pool: Any, sink: Any, sink_actor: _Sink, registry: ToolRegistry) -> None:
        self.pool = pool
        self.sink = sink
        self.sink_actor = sink_actor
        self.registry = registry
        self.fs = WorkspaceFs(Path(tempfile.mkdtemp(prefix="fore-bench-tool-api-")))

    def batch(
        self, name: str, count: int, arguments: dict[str, Any], timeout: float = 120
    ) -> float:
        batch_id = f"b{next(_ids)}"
        event = self.sink_actor.expect(batch_id)
        calls = tuple(ToolCall(id=f"c{i}", name=name, arguments=arguments) for i in range(count))
        start = time.perf_counter()
        self.pool.tell(
            RunToolBatch(
                batch_id=batch_id,
                session_id="bench",
                calls=calls,
                tools=self.registry,
                fs=self.fs,
                reply_to=self.sink,
                max_concurrency=64,
                call_timeout=60,
            )
        )
        if not event.wait(timeout):
            raise BenchFailed(f"{name}: batch {batch_id} did not finish within {timeout:g}s")
        wall = time.perf_counter() - start
        bad = [o for o in self.sink_actor.outcomes[batch_id] if o != "ok"]
        if bad:
            raise BenchFailed(f"{name}: {len(bad)} calls ended {bad[0]!r}")
        return wall


def _median(rounds: int, measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(rounds))


def _context() -> ToolContext:
    return ToolContext(
        fs=NoWorkspace(),
        cancel=CancelToken(),
        deadline=time.monotonic() + 600,
        session_id="b",
        call_id="c",
    )


def _invocation_layer(tools: dict[str, Any], count: int, rounds: int) -> dict[str, float]:
    """µs per call of the invocation layer alone (no pool), and of calling the function."""
    registry = ToolRegistry([tools["function_tool"], tools["decorated"], tools["async_decorated"]])
    ctx = _context()
    out: dict[str, float] = {}
    for name in ("function_tool", "decorated"):
        call = ToolCall(id="c", name=name, arguments={"n": 1})

        def sync_layer(call: ToolCall = call) -> float:
            start = time.perf_counter()
            for _ in range(count):
                invoke_tool(registry, call, ctx)
            return (time.perf_counter() - start) / count

        sync_layer()
        out[name] = _median(rounds, sync_layer) * 1e6
    async_call = ToolCall(id="c", name="async_decorated", arguments={"n": 1})

    async def async_layer() -> float:
        start = time.perf_counter()
        for _ in range(count):
            await ainvoke_tool(registry, async_call, ctx)
        return (time.perf_counter() - start) / count

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(async_layer())
        out["async_decorated"] = (
            statistics.median(loop.run_until_complete(async_layer()) for _ in range(rounds)) * 1e6
        )
    finally:
        loop.close()
    plain = tools["plain"]

    def direct() -> float:
        start = time.perf_counter()
        for i in range(count):
            plain(i)
        return (time.perf_counter() - start) / count

    direct()
    out["plain"] = _median(rounds, direct) * 1e6
    return out


def _gather_baseline(rounds: int) -> float:
    async def sleeper() -> str:
        await asyncio.sleep(ASYNC_CALL_S)
        return "ok"

    async def once() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(sleeper() for _ in range(ASYNC_CALLS)))
        return time.perf_counter() - start

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(once())
        return statistics.median(loop.run_until_complete(once()) for _ in range(rounds))
    finally:
        loop.close()


def _mcp(
    count: int,
    rounds: int,
    runner_factory: Callable[[ToolRegistry], _PoolRunner],
    loop: ToolLoop,
) -> dict[str, float]:
    """µs per trivial MCP call: the SDK's ClientSession loop, Fore's connection, the pool path."""
    try:
        import mcp
    except ImportError:
        console.print("[yellow]MCP: the mcp extra is not installed; skipped[/]")
        return {}
    from fore.actors.tools.mcp import MCPServerStdio
    from fore.actors.tools.mcp.manager import MCPManager

    workdir = Path(tempfile.mkdtemp(prefix="fore-bench-mcp-"))
    script = workdir / "server.py"
    script.write_text(MCP_SERVER)
    params = mcp.StdioServerParameters(command=sys.executable, args=[str(script)])

    async def sdk_loop() -> list[float]:
        async with mcp.Client(params, cache=None) as client:
            await client.list_tools()
            for _ in range(20):
                await client.call_tool("echo", {"text": "x"})
            results = []
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(count):
                    result = await client.call_tool("echo", {"text": "x"})
                    if result.is_error:
                        raise BenchFailed("MCP: the SDK's call failed")
                results.append((time.perf_counter() - start) / count)
            return results

    sdk = statistics.median(asyncio.run(sdk_loop())) * 1e6

    manager = MCPManager(loop)  # on the pool's loop, as in a runtime
    try:
        config = MCPServerStdio(sys.executable, [str(script)], name="bench")
        tools, failures = manager.session_tools([config])
        if failures:
            raise BenchFailed(f"MCP: {failures[0]}")
        connection = manager.find("bench")
        assert connection is not None

        async def fore_loop() -> list[float]:
            for _ in range(20):
                await connection.call("echo", {"text": "x"}, 60)
            results = []
            for _ in range(rounds):
                start = time.perf_counter()
                for _ in range(count):
                    await connection.call("echo", {"text": "x"}, 60)
                results.append((time.perf_counter() - start) / count)
            return results

        fore = statistics.median(loop.run_coroutine(fore_loop()).result(300)) * 1e6
        runner = runner_factory(ToolRegistry(tools))
        name = tools[0].name
        for _ in range(10):
            runner.batch(name, 1, {"text": "x"})

        def pool_path() -> float:
            start = time.perf_counter()
            for _ in range(count):
                runner.batch(name, 1, {"text": "x"})
            return (time.perf_counter() - start) / count

        pooled = _median(rounds, pool_path) * 1e6
    finally:
        loop.run_coroutine(manager.close()).result(30)
    return {"mcp_sdk_us": sdk, "mcp_connection_us": fore, "mcp_pool_us": pooled}


def run(*, quick: bool = False) -> dict[str, float]:
    count = 300 if quick else 1000
    layer_count = 3000 if quick else 20000
    mcp_count = 50 if quick else 200
    rounds = 3 if quick else 5
    console.print(f"[bold]bench tool-api[/] — {machine_line()}")
    tools = _trivial_tools()
    registry = ToolRegistry(
        [tools[n] for n in ("function_tool", "decorated", "async_decorated", "async_sleep")]
    )
    system = ActorSystem(name="bench-tool-api")
    loop = ToolLoop(name="bench-tool-api-aio")
    metrics: dict[str, float] = {}
    tuning.tune()  # as a Runtime does while it is open
    try:
        with system.activated():
            sink = _Sink.start()
            sink_actor = sink._actor_weakref()
            assert sink_actor is not None
            pool = ToolPool.start(aio=loop, max_running=64, per_session=64)
            runner = _PoolRunner(pool, sink, sink_actor, registry)
            per_call: dict[str, float] = {}
            for name in ("function_tool", "decorated", "async_decorated"):
                runner.batch(name, count, {"n": 1})  # warm: threads, loop, caches
            # interleaved rounds: machine noise hits every variant alike
            names = ["function_tool", "decorated", "async_decorated"]
            samples: dict[str, list[float]] = {n: [] for n in names}
            for round_number in range(2 * rounds):
                for name in names if round_number % 2 == 0 else names[::-1]:
                    samples[name].append(runner.batch(name, count, {"n": 1}) / count)
            per_call = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
            runner.batch("async_sleep", ASYNC_CALLS, {"n": 1})
            concurrent = _median(rounds, lambda: runner.batch("async_sleep", ASYNC_CALLS, {"n": 1}))
            gather = _gather_baseline(rounds)

            def pool_runner(mcp_registry: ToolRegistry) -> _PoolRunner:
                return _PoolRunner(pool, sink, sink_actor, mcp_registry)

            mcp_figures = _mcp(mcp_count, rounds, pool_runner, loop)
    finally:
        system.shutdown()
        loop.close(timeout=10)
        tuning.untune()
    layer = _invocation_layer(tools, layer_count, rounds)

    base = per_call["function_tool"]
    sync_ratio = ratio(per_call["decorated"], base)
    async_ratio = ratio(per_call["async_decorated"], base)
    table(
        f"per-call overhead, µs (median of {2 * rounds} rounds; {count:,} trivial calls per batch "
        f"through the pool, {layer_count:,} for the invocation layer)",
        ["tool", "through the pool", "invocation layer", "vs FunctionTool (pool)", "target"],
        [
            ["FunctionTool (today)", base, layer["function_tool"], 1.0, ""],
            [
                "@tool def",
                per_call["decorated"],
                layer["decorated"],
                sync_ratio,
                _verdict(sync_ratio),
            ],
            [
                "@tool async def",
                per_call["async_decorated"],
                layer["async_decorated"],
                async_ratio,
                _verdict(async_ratio),
            ],
            ["the function, called directly", "", layer["plain"], "", ""],
        ],
    )
    gather_ratio = ratio(concurrent, gather)
    table(
        f"{ASYNC_CALLS} concurrent async calls of {ASYNC_CALL_S * 1e3:g} ms, wall ms",
        ["measurement", "tool pool", "asyncio.gather", "pool / gather", "target"],
        [
            [
                f"{ASYNC_CALLS} × await asyncio.sleep({ASYNC_CALL_S:g})",
                concurrent * 1e3,
                gather * 1e3,
                gather_ratio,
                "ok" if gather_ratio <= GATHER_TARGET else f"MISSED (≤ {GATHER_TARGET})",
            ]
        ],
    )
    if mcp_figures:
        sdk = mcp_figures["mcp_sdk_us"]
        table(
            f"MCP over stdio: a trivial call's round trip, µs (median of {rounds} × {mcp_count})",
            ["path", "µs per call", "vs SDK loop"],
            [
                ["SDK: ClientSession.call_tool in a loop", sdk, 1.0],
                [
                    "Fore: MCPConnection.call (tool loop)",
                    mcp_figures["mcp_connection_us"],
                    ratio(mcp_figures["mcp_connection_us"], sdk),
                ],
                [
                    "Fore: through the tool pool (one-call batches)",
                    mcp_figures["mcp_pool_us"],
                    ratio(mcp_figures["mcp_pool_us"], sdk),
                ],
            ],
        )
    metrics.update(
        {
            "function_tool_us": base,
            "decorated_us": per_call["decorated"],
            "async_us": per_call["async_decorated"],
            "decorated_ratio": sync_ratio,
            "async_ratio": async_ratio,
            "layer_function_tool_us": layer["function_tool"],
            "layer_decorated_us": layer["decorated"],
            "layer_async_us": layer["async_decorated"],
            "direct_us": layer["plain"],
            "concurrent_ms": concurrent * 1e3,
            "gather_ms": gather * 1e3,
            "gather_ratio": gather_ratio,
            **mcp_figures,
        }
    )
    return metrics


def _verdict(value: float) -> str:
    return "ok" if value <= OVERHEAD_TARGET else f"MISSED (≤ {OVERHEAD_TARGET})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench tool-api", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    try:
        run(quick=parser.parse_args(argv).quick)
    except BenchFailed as exc:
        console.print(f"[bold red]bench tool-api FAILED:[/] {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
