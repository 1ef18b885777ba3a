"""The worker's per-turn overhead, and many sessions at once, in one run.

* a scripted turn with 0 and with 8 tool calls through a real session, vs the
  same model call and tool calls made directly (no actors): overhead per turn;
* N sessions (default 1,000) each running one scripted turn concurrently:
  wall time, RSS per session, OS threads.

Run: ``fore bench worker`` (or ``python -m bench.worker [--quick] [--sessions N]``).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from fore.actors.llm import ScriptedModel
from fore.actors.tools import CancelToken, ToolContext, WorkspaceFs, default_registry, invoke_tool
from fore.bench._common import (
    Target,
    console,
    machine_line,
    os_threads,
    percentile,
    ratio,
    rss_bytes,
    table,
    targets_table,
)
from fore.messages.conversation import ToolCall, UserMessage
from fore.messages.llm import LlmRequest
from fore.messages.session import Submit
from fore.supervision import Runtime


def _workspace() -> Path:
    root = Path(tempfile.mkdtemp(prefix="fore-bench-worker-"))
    (root / "src").mkdir()
    for i in range(8):
        (root / "src" / f"mod{i}.py").write_text(f"def f{i}():\n    return {i}\n" * 20)
    return root


def _calls(n: int) -> list[dict[str, Any]]:
    return [{"name": "read_file", "arguments": {"path": f"src/mod{i % 8}.py"}} for i in range(n)]


def _turn_replies(tool_calls: int) -> list[dict[str, Any]]:
    if tool_calls == 0:
        return [{"text": "Done."}]
    return [{"text": "Reading.", "tool_calls": _calls(tool_calls)}, {"text": "Done."}]


class _Direct:
    """The same work without actors, on one event loop and one thread pool.

    The fair baseline: persistent loop, HTTP client and threads, as the
    runtime has; only the actors, messages and hooks are missing.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient()
        self.pool = ThreadPoolExecutor(8)
        self.registry = default_registry()

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
        self.pool.shutdown()

    def turn(self, model: ScriptedModel, fs: WorkspaceFs, session: str) -> None:
        def ask(text: str) -> Any:
            request = LlmRequest(
                request_id="d", session_id=session, messages=(UserMessage(text=text),)
            )
            return self.loop.run_until_complete(model.stream(request, lambda e: None, self.client))

        first = ask("go")
        calls = first.message.tool_calls
        if not calls:
            return

        def run_call(c: ToolCall) -> Any:
            ctx = ToolContext(
                fs=fs,
                cancel=CancelToken(),
                deadline=time.monotonic() + 30,
                session_id=session,
                call_id=c.id,
            )
            return invoke_tool(self.registry, c, ctx)

        list(self.pool.map(run_call, calls))
        ask("results")


def run(*, quick: bool = False, sessions: int | None = None) -> dict[str, float]:
    turns = 20 if quick else 100
    many = sessions or (200 if quick else 1000)
    console.print(f"[bold]bench worker[/] — {machine_line()}")
    workspace = _workspace()
    fs = WorkspaceFs(workspace)
    metrics: dict[str, float] = {}
    rows = []
    with Runtime(name="bench-worker") as rt:
        for tool_calls in (0, 8):
            replies = _turn_replies(tool_calls) * turns
            model = ScriptedModel(replies)
            session = rt.open_session(workspace=workspace, model=model)
            worker_times = []
            for _ in range(turns):
                t0 = time.perf_counter()
                result = session.submit("go", timeout=60)
                worker_times.append(time.perf_counter() - t0)
                assert result.status == "completed", result
            session.close()
            direct_model = ScriptedModel(replies)
            direct = _Direct()
            direct_times = []
            for _ in range(turns):
                t0 = time.perf_counter()
                direct.turn(direct_model, fs, "direct")
                direct_times.append(time.perf_counter() - t0)
            direct.close()
            w50, d50 = percentile(worker_times, 50), percentile(direct_times, 50)
            rows.append(
                [
                    f"turn with {tool_calls} tool calls",
                    w50 * 1e3,
                    d50 * 1e3,
                    (w50 - d50) * 1e3,
                    ratio(w50, d50),
                ]
            )
            metrics[f"turn_{tool_calls}_worker_ms"] = w50 * 1e3
            metrics[f"turn_{tool_calls}_direct_ms"] = d50 * 1e3
            metrics[f"turn_{tool_calls}_overhead_ms"] = (w50 - d50) * 1e3

        table(
            f"per-turn overhead (median of {turns} turns, scripted model, unpaced)",
            ["turn", "session (ms)", "direct (ms)", "overhead (ms)", "session / direct (×)"],
            rows,
        )

        rss0 = rss_bytes()
        threads0 = os_threads()
        model = ScriptedModel(_turn_replies(2))
        t_open = time.perf_counter()
        opened = [rt.open_session(workspace=workspace, model=model) for _ in range(many)]
        open_s = time.perf_counter() - t_open
        t0 = time.perf_counter()
        futures = [s._worker.ask(Submit(text="go"), block=False) for s in opened]
        # Sample the thread count *while* the turns run (from this thread, which
        # exists anyway): taken afterwards, it would miss any lazily started
        # thread that has already gone idle or exited.
        peak_threads = os_threads()
        waiting = futures
        deadline = time.monotonic() + 300
        while waiting and time.monotonic() < deadline:
            peak_threads = max(peak_threads, os_threads())
            waiting = [f for f in waiting if not f.done()]
            if waiting:
                time.sleep(0.002)
        outcomes = [f.get(timeout=max(0.1, deadline - time.monotonic())) for f in futures]
        wall = time.perf_counter() - t0
        completed = sum(1 for o in outcomes if o.status == "completed")
        threads_after = os_threads()
        rss1 = rss_bytes()
        for s in opened:
            s.close()
        table(
            f"{many:,} sessions, one scripted turn each (2 tool calls), concurrently",
            ["measurement", "value"],
            [
                ["sessions opened (per s)", many / open_s],
                ["wall time for all turns (s)", wall],
                ["turns (per s)", many / wall],
                ["completed (turns)", float(completed)],
                ["RSS per session (KiB)", (rss1 - rss0) / many / 1024],
                [
                    "OS threads (before → peak during → after)",
                    f"{threads0} → {peak_threads} → {threads_after}",
                ],
            ],
        )
        # Issue 5 sets no figure to reach here (it asks for the measurements);
        # what must hold is that every turn completed.
        targets_table(
            [
                Target(
                    f"turns of {many:,} concurrent sessions not completed",
                    float(many - completed),
                    "",
                    "==",
                    0,
                )
            ]
        )
        metrics.update(
            sessions=float(many),
            sessions_wall_s=wall,
            sessions_completed=float(completed),
            rss_per_session_kib=(rss1 - rss0) / many / 1024,
            threads=float(peak_threads),
        )
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench worker", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument(
        "--sessions", type=int, default=None, help="concurrent sessions (default 1000)"
    )
    args = parser.parse_args(argv)
    run(quick=args.quick, sessions=args.sessions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
