"""Benchmark: the shell classifier's cost per command and the tool gate's cost per call.

The gate runs before every speculative tool call, so it must stay cheap next
to the tool itself. Measured in one run:

* the classifier over the whole corpus (:mod:`bench.shell_corpus`, classified
  in the corpus workspace, so every path operand goes through the scope
  check's ``lstat`` walk): each command classified several times, its median
  taken, then the median and p99 over commands; the same over the corpus's
  ``${...}`` operand group alone (those operands are re-read as bash may read
  them, a few extra parses);
* the gate's added cost per call: ``evaluate_tool_call`` on a read tool and on
  a shell call, each timed side by side with a baseline (a function call doing
  a bare dict lookup), in interleaved rounds; the ratio is printed;
* the same shell call with a session directory inside a git repository (when
  git is installed): the git-config probe reads the repository's config files,
  lists its hooks directory and reads its index (for submodules) on every
  such call.

Run with ``python -m bench.shell`` (``--quick`` for a short run).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fore.actors.gate.shell import classify_shell_command
from fore.actors.gate.tool_gate import evaluate_tool_call
from fore.bench._common import Target, targets_table
from fore.bench.shell_corpus import CORPUS, EXPANSION_OPERANDS, make_workspace

_TABLE = {"read_file": "allow", "shell": "boundary"}


def _baseline(name: str, arguments: dict[str, object], mode: str) -> str | None:
    return _TABLE.get(name)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _classifier_costs(
    repeats: int, workspace: Path, corpus: list[tuple[str, str]] = CORPUS
) -> list[float]:
    """Median microseconds per corpus command."""
    costs: list[float] = []
    for command, _ in corpus:
        samples: list[float] = []
        for _ in range(repeats):
            start = time.perf_counter_ns()
            classify_shell_command(command, workspace)
            samples.append((time.perf_counter_ns() - start) / 1000)
        costs.append(statistics.median(samples))
    return costs


def _per_call_ns(call: Callable[[], object], iterations: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(iterations):
        call()
    return (time.perf_counter_ns() - start) / iterations


def _side_by_side(
    gate: Callable[[], object], baseline: Callable[[], object], iterations: int, rounds: int
) -> tuple[float, float]:
    """Median ns per call of ``gate`` and ``baseline``, measured in alternating rounds."""
    gate_ns: list[float] = []
    base_ns: list[float] = []
    for _ in range(rounds):
        base_ns.append(_per_call_ns(baseline, iterations))
        gate_ns.append(_per_call_ns(gate, iterations))
    return statistics.median(gate_ns), statistics.median(base_ns)


def run(*, quick: bool = False) -> dict[str, float]:
    """Measure, print a table, and return the metrics (µs and ratios)."""
    repeats = 3 if quick else 15
    rounds = 3 if quick else 7
    read_iterations = 2_000 if quick else 20_000
    shell_iterations = 200 if quick else 2_000

    with tempfile.TemporaryDirectory(prefix="fore-bench-corpus-") as base:
        workspace = make_workspace(Path(base))
        for command, _ in CORPUS:  # warm-up: parser creation, caches, imports
            classify_shell_command(command, workspace)
        costs = _classifier_costs(repeats, workspace)
        operand_costs = _classifier_costs(repeats, workspace, EXPANSION_OPERANDS)
        metrics = _gate_costs(workspace, rounds, read_iterations, shell_iterations)
    metrics = {
        "corpus_commands": float(len(CORPUS)),
        "classify_median_us": statistics.median(costs),
        "classify_p99_us": _percentile(costs, 0.99),
        "classify_max_us": max(costs),
        "classify_operands_median_us": statistics.median(operand_costs),
        "classify_operands_p99_us": _percentile(operand_costs, 0.99),
        **metrics,
    }
    _print(metrics, quick=quick)
    return metrics


def _gate_costs(
    workspace: Path, rounds: int, read_iterations: int, shell_iterations: int
) -> dict[str, float]:
    """The gate's cost per call next to a bare dict lookup (same rounds, interleaved)."""

    read_args: dict[str, object] = {"path": "src/app.py", "offset": 0, "limit": 100}
    shell_args: dict[str, object] = {"command": "git status"}
    read_gate, read_base = _side_by_side(
        lambda: evaluate_tool_call("read_file", read_args, "default", cwd=workspace),
        lambda: _baseline("read_file", read_args, "default"),
        read_iterations,
        rounds,
    )
    shell_gate, shell_base = _side_by_side(
        lambda: evaluate_tool_call("shell", shell_args, "default", cwd=workspace),
        lambda: _baseline("shell", shell_args, "default"),
        shell_iterations,
        rounds,
    )
    classify_only, _ = _side_by_side(
        lambda: classify_shell_command("git status", workspace),
        lambda: None,
        shell_iterations,
        rounds,
    )

    probed_ns = _probed_gate_ns(shell_args, shell_iterations, rounds)
    return {
        "gate_read_us": read_gate / 1000,
        "gate_read_baseline_us": read_base / 1000,
        "gate_read_added_us": (read_gate - read_base) / 1000,
        "gate_read_ratio": read_gate / read_base,
        "gate_shell_us": shell_gate / 1000,
        "gate_shell_baseline_us": shell_base / 1000,
        "gate_shell_added_us": (shell_gate - shell_base) / 1000,
        "gate_shell_ratio": shell_gate / shell_base,
        "classify_git_status_us": classify_only / 1000,
        "gate_shell_probed_us": probed_ns / 1000,
    }


def _probed_gate_ns(shell_args: dict[str, object], iterations: int, rounds: int) -> float:
    """Median ns of the shell gate with a session directory in a real repository (NaN: no git)."""
    if shutil.which("git") is None:
        return float("nan")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    with tempfile.TemporaryDirectory(prefix="fore-bench-shell-") as work:
        repo = Path(work)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True, env=env)
        for index in range(200):
            (repo / f"file{index:03}.py").write_text("x = 1\n")
        subprocess.run(["git", "add", "."], cwd=repo, check=True, env=env)
        probed, _ = _side_by_side(
            lambda: evaluate_tool_call("shell", shell_args, "default", cwd=repo),
            lambda: None,
            iterations,
            rounds,
        )
    return probed


def _print(metrics: dict[str, float], *, quick: bool) -> None:
    table = Table(title=f"shell classifier and tool gate{' (quick)' if quick else ''}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("baseline", justify="right")
    table.add_column("ratio (×)", justify="right")
    table.add_row("corpus commands", f"{metrics['corpus_commands']:.0f}", "", "")
    table.add_row("classify median / command", f"{metrics['classify_median_us']:.1f} µs", "", "")
    table.add_row("classify p99 / command", f"{metrics['classify_p99_us']:.1f} µs", "", "")
    table.add_row("classify max / command", f"{metrics['classify_max_us']:.1f} µs", "", "")
    table.add_row(
        "classify ${...} operands median / p99",
        f"{metrics['classify_operands_median_us']:.1f} / "
        f"{metrics['classify_operands_p99_us']:.1f} µs",
        f"{metrics['classify_median_us']:.1f} / {metrics['classify_p99_us']:.1f} µs",
        f"{metrics['classify_operands_median_us'] / metrics['classify_median_us']:.1f}×",
    )
    table.add_row(
        "gate: read_file call",
        f"{metrics['gate_read_us']:.2f} µs",
        f"{metrics['gate_read_baseline_us']:.2f} µs",
        f"{metrics['gate_read_ratio']:.1f}×",
    )
    table.add_row("gate: read_file added", f"{metrics['gate_read_added_us']:.2f} µs", "", "")
    table.add_row(
        "gate: shell 'git status'",
        f"{metrics['gate_shell_us']:.1f} µs",
        f"{metrics['gate_shell_baseline_us']:.2f} µs",
        f"{metrics['gate_shell_ratio']:.0f}×",
    )
    table.add_row("gate: shell added", f"{metrics['gate_shell_added_us']:.1f} µs", "", "")
    table.add_row(
        "classify 'git status' alone", f"{metrics['classify_git_status_us']:.1f} µs", "", ""
    )
    table.add_row(
        "gate: shell 'git status', cwd in a repo",
        f"{metrics['gate_shell_probed_us']:.1f} µs",
        f"{metrics['gate_shell_us']:.1f} µs",
        f"{metrics['gate_shell_probed_us'] / metrics['gate_shell_us']:.1f}×",
    )
    Console().print(table)
    # Issue 10's only figure: even adversarial input is classified in well under a second.
    targets_table(
        [
            Target(
                "slowest corpus command classified",
                metrics["classify_max_us"] / 1e3,
                "ms",
                "<=",
                1000,
            )
        ]
    )


if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
