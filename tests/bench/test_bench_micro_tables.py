"""Every micro-benchmark's tables: a unit for every number, a verdict for every target.

Each ``fore bench NAME --quick`` runs for real (a child process, as a user
runs it) and its output is read as a user reads it: every table goes through
:func:`bench._common.table`, which flags a number column without a unit
``(unit?)``; and the run ends with a ``targets`` table whose every row says
PASS, FAIL or n/a (why). Nothing is timed: a target missed on a busy machine
still has its verdict, which is all this checks. ``actors`` is covered by
``tests/bench/test_runtime_bench_smoke.py`` with the same checks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERDICT = re.compile(r"(PASS|FAIL|n/a|—)( |$)")


def run_quick(name: str) -> str:
    env = {**os.environ, "FORE_LOG_LEVEL": "error", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "fore.supervision.cli", "bench", name, "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def check_tables(report: str) -> None:
    """Units everywhere, no nan, and a verdict on every row of the (last) targets table."""
    assert "(unit?)" not in report, report
    assert "no unit for" not in report, report
    assert not re.search(r"\bnan\b", report, re.IGNORECASE), report
    lines = report.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("targets")]
    assert starts, "no targets table"
    rows = 0
    for line in lines[starts[-1] :]:
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) != 4 or not cells[1]:
            continue  # a rule, or a wrapped row's continuation (rows are top-aligned)
        assert VERDICT.match(cells[3]), line
        rows += 1
    assert rows >= 1, report


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tools", "worker", "shell", "llm", "blobs", "overlay"])
def test_micro_benchmark_tables_have_units_and_verdicts(name: str) -> None:
    check_tables(run_quick(name))


def test_table_flags_a_number_column_without_a_unit(capsys: pytest.CaptureFixture[str]) -> None:
    from fore.bench._common import table

    table("t", ["measurement", "p50 (ms)", "rate"], [["a", 1.0, 2.0], ["b (ms)", 3.0, 4.0]])
    out = capsys.readouterr().out
    assert "rate (unit?)" in out
    assert "no unit for rate" in out
    assert "p50 (ms) (unit?)" not in out
