"""``fore bench tool-api --quick`` runs end to end (a smoke test, not a measurement).

What a test can pin is that the command works -- every batch finishes, every
call succeeds (the benchmark exits non-zero otherwise) -- and that the report
has each measurement the issue asks for beside its baseline. No timing is
asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_fore_bench_tool_api_quick_runs() -> None:
    env = {**os.environ, "FORE_LOG_LEVEL": "error", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "fore.supervision.cli", "bench", "tool-api", "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = done.stdout
    for row in (
        "FunctionTool (today)",
        "@tool def",
        "@tool async def",
        "asyncio.gather",
        "SDK: ClientSession.call_tool in a loop",
        "Fore: MCPConnection.call",
    ):
        assert row in report, f"no {row!r} in the report"
    assert "FAILED" not in report
