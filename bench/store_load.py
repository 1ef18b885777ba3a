"""``fore bench --store sqlite``: the load benchmark with a session store, against none.

The write-ahead rule (:mod:`actors.worker.persistence`) puts one store append
-- a SQLite transaction, on disk when it returns -- between a turn's end and
its report. This runs the load benchmark's workload (:mod:`bench.load`) twice
per pair: every session in a SQLite store, and no store at all, on the same
seed, alternating the order between pairs (``--pairs N``), and pools each
arm's typed turns. The verdict is the main-turn latency ratio, store ÷ none:
**p99 <= 1.05**. Each run is bounded by ``--duration``; the pair by twice that.
"""

from __future__ import annotations

import math
from typing import Any

from fore.bench._common import Target, console, ratio, table, targets_table
from fore.bench.load import run_comparison
from fore.bench.load_options import LoadOptions
from fore.bench.load_report import leaks_total
from fore.bench.report import verdict_line

__all__ = ["P99_RATIO_TARGET", "run_store_comparison"]

P99_RATIO_TARGET = 1.05


def run_store_comparison(options: LoadOptions, pairs: int) -> tuple[int, dict[str, Any]]:
    """Run and print the comparison; returns ``(exit code, figures)``."""
    with_store, without, comparison, _samples = run_comparison(options, pairs, arm="store")
    reports = with_store + without
    interrupted = any(r.interrupted for r in reports)
    figures: dict[str, Any] = {}
    if comparison is not None:
        rows = [
            [
                f"pair {i + 1} (seed {int(row['seed'])})",
                row["on_p50"],
                row["on_p99"],
                row["off_p50"],
                row["off_p99"],
                row["p99_ratio"],
            ]
            for i, row in enumerate(comparison.pairs)
        ]
        rows.append(
            [
                "pooled",
                comparison.on_ms["p50"],
                comparison.on_ms["p99"],
                comparison.off_ms["p50"],
                comparison.off_ms["p99"],
                comparison.p99_ratio,
            ]
        )
        table(
            f"main-turn latency with a SQLite session store vs none ({options.sessions} "
            f"sessions, {len(comparison.on_turns_s)} + {len(comparison.off_turns_s)} typed turns)",
            [
                "run",
                "store p50 (ms)",
                "store p99 (ms)",
                "none p50 (ms)",
                "none p99 (ms)",
                "p99 ratio (×)",
            ],
            rows,
        )
        figures = {
            "store_ms": comparison.on_ms,
            "none_ms": comparison.off_ms,
            "p50_ratio": comparison.p50_ratio,
            "p99_ratio": comparison.p99_ratio,
            "pairs": comparison.pairs,
        }
    measured = comparison.p99_ratio if comparison is not None else math.nan
    targets = [
        Target(
            "main-turn p99, SQLite store ÷ none",
            measured,
            "×",
            "<=",
            P99_RATIO_TARGET,
            note=None
            if comparison is None
            else f"p50 ratio {ratio(comparison.on_ms['p50'], comparison.off_ms['p50']):.3f}",
            short="store p99 ratio",
        )
    ]
    targets_table(targets)
    console.print(verdict_line(targets, interrupted=interrupted), soft_wrap=True, markup=False)
    leaky = [r for r in reports if leaks_total(r)]
    if leaky:
        console.print(f"leaks after shutdown: {leaky[0].leaks}", markup=False)
        return 1, figures
    if interrupted:
        return 130, figures
    return 0, figures
