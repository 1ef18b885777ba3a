"""``fore bench actors --quick`` runs end to end (a smoke test, not a measurement).

The benchmark's numbers are for people; what a test can pin is that the
command works as the README says -- every phase finishes, every message is
accounted for (it exits non-zero otherwise), and the report names each target
of the issue. No timing is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_bench_micro_tables import check_tables

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_fore_bench_actors_quick_runs_and_accounts_for_every_message() -> None:
    env = {**os.environ, "FORE_LOG_LEVEL": "error", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "fore.supervision.cli", "bench", "actors", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = done.stdout
    for phase in ("tell", "ask", "round-robin", "targets"):
        assert phase in report, f"no {phase!r} in the report"
    assert "every message accounted for" in report
    assert "FAILED" not in report
    check_tables(report)  # a unit for every number, a verdict for every target
