"""``fore bench telemetry --quick`` runs for real and reads like every micro-benchmark.

Nothing is timed here (a 3% target is judged by the full run, not by a test):
the run must finish, export the spans it should, keep the "not installed"
arm free of OpenTelemetry (it raises otherwise), and print units and a
verdict on every target row.
"""

from __future__ import annotations

import pytest

from tests.bench.test_bench_micro_tables import check_tables, run_quick


@pytest.mark.slow
def test_bench_telemetry_quick() -> None:
    report = run_quick("telemetry")
    check_tables(report)
    assert "not installed" in report and "spans exported with tracing on" in report
