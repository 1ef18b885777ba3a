"""What tracing costs: main turns with telemetry on, off, and OpenTelemetry not installed.

Three arms, each in a child process of its own (so "not installed" is real:
the child blocks every ``opentelemetry`` import before Fore is imported), run
interleaved, in rotating order, and pooled per arm:

* **not installed** -- the baseline: no OpenTelemetry importable at all;
* **off** -- installed, but ``Runtime()`` without ``telemetry=`` (the default);
* **on** -- ``Runtime(telemetry=Telemetry(...))`` on the SDK with an in-memory
  span exporter (a ``SimpleSpanProcessor``: each span exported as it ends, on
  the thread that ended it -- the dearest way) and an in-memory metric reader.

Two workloads per arm:

* **main turns against the mock LLM server** (the target's): N sessions at
  once, each running turns back to back over real HTTP with the load
  benchmark's latency model (``--ttft-ms``, ``--tokens-per-s``); a turn is a
  model call with two tool calls (``read_file``), the two calls, and a final
  answer -- five spans when tracing is on. Main-turn latency (p50, p95) and
  throughput (turns per second of wall time);
* **per-turn cost without model latency**: one session, a function model that
  answers at once, turns in a row -- what tracing adds per turn in
  microseconds, with nothing to hide it.

Targets (issue 28): main-turn p50 with tracing on, and off, within 3% of not
installed; throughput on within 3%. Each target is the median, over the runs,
of the arm's ratio to the "not installed" child of the same run (the three
children of a run follow each other, so they share the machine's load of the
moment; pooling every run's turns would mix loads). A ``--quick`` run is too
small to judge a 3% difference on a shared machine: its targets say n/a.

Run: ``fore bench telemetry [--quick]`` (or ``python -m fore.bench.telemetry``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fore.bench._common import (
    BenchFailed,
    Target,
    console,
    machine_line,
    percentile,
    ratio,
    table,
    targets_table,
)

ARMS = ("not installed", "off", "on")
BLOCK = """
import sys

class _BlockOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: not installed)")
        return None

sys.meta_path.insert(0, _BlockOpenTelemetry())
"""
"""Prepended to the "not installed" child: every OpenTelemetry import fails."""

READ = {"name": "read_file", "arguments": {"path": "notes.txt"}}


@dataclass
class Sizes:
    sessions: int
    turns: int
    solo_turns: int
    reps: int
    ttft_ms: float
    tokens_per_s: float


@dataclass
class ArmResult:
    turn_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    turns: int = 0
    solo_s: list[float] = field(default_factory=list)
    spans: int = 0
    imported: bool = False


# -- the child --------------------------------------------------------------------------------


def _child(arm: str, sizes: Sizes) -> dict[str, Any]:
    """One arm's workloads in this process (see the module docs); returns its figures."""
    from fore.actors.llm.mock_server import MockLlmServer
    from fore.actors.llm.models import FunctionModel, OpenAICompatible, RetryPolicy
    from fore.actors.llm.script import ScriptFile
    from fore.supervision.runtime import Runtime

    telemetry = None
    spans: Any = None
    if arm == "on":
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from fore.actors.telemetry.config import Telemetry

        spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)

    workspace = Path(tempfile.mkdtemp(prefix="fore-bench-telemetry-"))
    (workspace / "notes.txt").write_text("alpha\nbeta\n" * 20)
    # Each session reads the script in order: one pair of replies per turn.
    pair = [
        {"text": "Reading the notes twice.", "tool_calls": [READ, READ]},
        {"text": "The notes list alpha and beta, twice."},
    ]
    script = ScriptFile.model_validate({"replies": pair * (sizes.turns + 1)})
    result = ArmResult()
    lock = threading.Lock()
    with (
        MockLlmServer(script, ttft_ms=sizes.ttft_ms, tokens_per_s=sizes.tokens_per_s) as server,
        Runtime(name=f"bench-telemetry-{arm.replace(' ', '-')}", telemetry=telemetry) as rt,
    ):
        model = OpenAICompatible(
            base_url=server.base_url, model="mock", api_key="k", retry=RetryPolicy(max_retries=0)
        )
        sessions = [
            rt.open_session(workspace=workspace, model=model) for _ in range(sizes.sessions)
        ]
        sessions[0].submit("go", timeout=60)  # warm: connections, first imports

        def user(session: Any) -> None:
            for _ in range(sizes.turns):
                t0 = time.perf_counter()
                turn = session.submit("go", timeout=120)
                elapsed = time.perf_counter() - t0
                if turn.status != "completed":
                    raise BenchFailed(f"a turn ended {turn.status}: {turn.error}")
                with lock:
                    result.turn_s.append(elapsed)

        threads = [threading.Thread(target=user, args=(s,)) for s in sessions]
        t0 = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result.wall_s = time.perf_counter() - t0
        result.turns = len(result.turn_s)
        for session in sessions:
            session.close()

        def instant(request: Any) -> Any:
            if request.messages[-1].kind == "user":
                return {"text": "Reading.", "tool_calls": [READ, READ]}
            return "Done."

        solo = rt.open_session(workspace=workspace, model=FunctionModel(instant))
        for i in range(sizes.solo_turns + 5):
            t0 = time.perf_counter()
            turn = solo.submit("go", timeout=60)
            if i >= 5:  # the first few warm up
                result.solo_s.append(time.perf_counter() - t0)
            if turn.status != "completed":
                raise BenchFailed(f"a turn ended {turn.status}: {turn.error}")
        solo.close()
    if spans is not None:
        result.spans = len(spans.get_finished_spans())
    result.imported = any(m.startswith("opentelemetry") for m in sys.modules)
    return {
        "turn_s": result.turn_s,
        "wall_s": result.wall_s,
        "turns": result.turns,
        "solo_s": result.solo_s,
        "spans": result.spans,
        "imported": result.imported,
    }


def _run_child(arm: str, sizes: Sizes) -> ArmResult:
    args = json.dumps({"arm": arm, "sizes": sizes.__dict__})
    code = (BLOCK if arm == "not installed" else "") + (
        "import json, sys\n"
        "from fore.bench.telemetry import Sizes, _child\n"
        "spec = json.loads(sys.argv[1])\n"
        "print(json.dumps(_child(spec['arm'], Sizes(**spec['sizes']))))\n"
    )
    env = {**os.environ, "FORE_LOG_LEVEL": os.environ.get("FORE_LOG_LEVEL", "error")}
    done = subprocess.run(
        [sys.executable, "-c", code, args],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise BenchFailed(f"the {arm!r} arm failed: {done.stderr.strip()[-2000:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return ArmResult(**data)


# -- the parent -------------------------------------------------------------------------------


def run(*, quick: bool = False) -> dict[str, float]:
    sizes = Sizes(
        sessions=4 if quick else 16,
        turns=5 if quick else 15,
        solo_turns=30 if quick else 200,
        reps=1 if quick else 5,
        ttft_ms=40.0,
        tokens_per_s=400.0,
    )
    console.print(f"[bold]bench telemetry[/] — {machine_line()}")
    pooled = {arm: ArmResult() for arm in ARMS}
    # Per run: the arm's (p50, throughput) over the same run's "not installed" arm's.
    paired: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    for rep in range(sizes.reps):
        order = ARMS[rep % 3 :] + ARMS[: rep % 3]  # each arm first in turn
        got_by_arm = {arm: _run_child(arm, sizes) for arm in order}
        base_run = got_by_arm["not installed"]
        for arm in ARMS:
            got = got_by_arm[arm]
            paired[arm].append(
                (
                    ratio(percentile(got.turn_s, 50), percentile(base_run.turn_s, 50)),
                    ratio(ratio(got.turns, got.wall_s), ratio(base_run.turns, base_run.wall_s)),
                )
            )
            into = pooled[arm]
            into.turn_s += got.turn_s
            into.solo_s += got.solo_s
            into.wall_s += got.wall_s
            into.turns += got.turns
            into.spans += got.spans
            into.imported = into.imported or got.imported
    if pooled["not installed"].imported:
        raise BenchFailed("the 'not installed' arm imported OpenTelemetry: the block failed")
    expected_spans = 5 * (pooled["on"].turns + sizes.reps) + 5 * (sizes.solo_turns + 5) * sizes.reps
    if pooled["on"].spans < expected_spans:
        raise BenchFailed(
            f"tracing on exported {pooled['on'].spans} spans, expected {expected_spans}"
        )

    base = pooled["not installed"]
    b50 = percentile(base.turn_s, 50)
    b_tput = ratio(base.turns, base.wall_s)
    bsolo = percentile(base.solo_s, 50)
    rows = []
    solo_rows = []
    figures: dict[str, float] = {}
    for arm in ARMS:
        r = pooled[arm]
        p50, p95 = percentile(r.turn_s, 50), percentile(r.turn_s, 95)
        tput = ratio(r.turns, r.wall_s)
        runs = " ".join(f"{p:.2f}/{t:.2f}" for p, t in paired[arm])
        rows.append(
            [arm, p50 * 1e3, p95 * 1e3, tput, ratio(p50, b50), ratio(tput, b_tput), runs, r.turns]
        )
        s50 = percentile(r.solo_s, 50)
        solo_rows.append([arm, s50 * 1e6, (s50 - bsolo) * 1e6, ratio(s50, bsolo)])
        key = arm.replace(" ", "_")
        figures[f"{key}_p50_ms"] = p50 * 1e3
        figures[f"{key}_turns_per_s"] = tput
        figures[f"{key}_solo_p50_us"] = s50 * 1e6
    table(
        f"main turns against the mock server (ttft {sizes.ttft_ms:g} ms, "
        f"{sizes.tokens_per_s:g} tok/s; {sizes.sessions} sessions × {sizes.turns} turns × "
        f"{sizes.reps} runs; a turn = 2 model calls + 2 tool calls)",
        [
            "arm",
            "p50 (ms)",
            "p95 (ms)",
            "throughput (turns/s)",
            "p50 vs not installed (×)",
            "throughput vs not installed (×)",
            "each run: p50 / throughput vs its not installed (×)",
            "n (turns)",
        ],
        rows,
    )
    table(
        f"per-turn cost without model latency (function model, 1 session, "
        f"{sizes.solo_turns} turns × {sizes.reps} runs)",
        ["arm", "p50 (µs)", "added vs not installed (µs)", "vs not installed (×)"],
        solo_rows,
    )
    console.print(f"spans exported with tracing on: {pooled['on'].spans:,}")
    why = "a --quick run is too small to judge 3% on a shared machine"
    targets_table(
        [
            Target(
                "main-turn p50, tracing on / not installed (median of runs)",
                statistics.median(p for p, _ in paired["on"]),
                "×",
                "<=",
                1.03,
                applies=not quick,
                missing=why,
            ),
            Target(
                "main-turn p50, tracing off / not installed (median of runs)",
                statistics.median(p for p, _ in paired["off"]),
                "×",
                "<=",
                1.03,
                applies=not quick,
                missing=why,
            ),
            Target(
                "throughput, tracing on / not installed (median of runs)",
                statistics.median(t for _, t in paired["on"]),
                "×",
                ">=",
                0.97,
                applies=not quick,
                missing=why,
            ),
        ]
    )
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench telemetry", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    args = parser.parse_args(argv)
    run(quick=args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
