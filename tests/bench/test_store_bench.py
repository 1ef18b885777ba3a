"""``fore bench store --quick`` runs end to end (a smoke test, not a measurement).

What a test can pin is that the command works: the store reads back what it
wrote (the benchmark fails otherwise), each measurement and its same-run
baseline is printed. No timing is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fore.actors.store.pgtemp import find_bindir

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_fore_bench_store_quick_runs_and_prints_every_measurement() -> None:
    env = {**os.environ, "FORE_LOG_LEVEL": "error", "COLUMNS": "300"}
    done = subprocess.run(
        [sys.executable, "-m", "fore.supervision.cli", "bench", "store", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = done.stdout
    for measurement in ("load (record, items, alerts, refs)", "open_session", "append"):
        assert measurement in report
    assert "p99 ≤ 50 ms" in report
    if find_bindir() is not None:
        assert "bare executemany, one transaction per turn" in report
    assert "FAILED" not in report
