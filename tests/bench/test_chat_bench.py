"""``fore bench chat`` runs end to end (a short run; the figures are the benchmark's business)."""

from __future__ import annotations

import math
import shutil

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def test_the_chat_benchmark_measures_every_path_through_the_real_tui() -> None:
    from fore.bench.chat import run

    figures = run(quick=True, rounds=3)
    assert set(figures) == {"echo_p99_ms", "abort_p99_ms", "tab_applied_p99_ms", "tab_shown_p99_ms"}
    assert all(math.isfinite(value) and value > 0 for value in figures.values())


def test_fore_bench_chat_is_a_micro_benchmark_name() -> None:
    from fore.supervision.cli import build_parser

    assert build_parser().parse_args(["bench", "chat", "--quick"]).name == "chat"
