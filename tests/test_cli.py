"""The ``fore`` command: the load benchmark's report, ``fore run``, and user mistakes.

Every test runs the real command in a child process (``python -m
supervision.cli``, what the ``fore`` console script calls), so exit codes,
stdout/stderr and the leak counters are those a user sees. The benchmark runs
are small (a few sessions, a few turns) but go through everything: the mock
LLM server over real HTTP, sessions, tools, blobs, overlays, suggestions,
accepts and aborts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from actors.llm.mock_server import MockLlmServer
from actors.llm.script import ScriptFile

WAIT = 240.0


def fore(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
    full_env = {k: v for k, v in os.environ.items() if k != "FORE_LOG_LEVEL"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "supervision.cli", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        cwd=cwd,
        env=full_env,
        check=False,
    )


def assert_one_line_error(done: Any, code: int, needle: str) -> None:
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert needle in lines[0]


QUANTILES = {"count", "p50", "p95", "p99"}


def check_report(report: dict[str, Any], sessions: int) -> None:
    assert report["sessions"] == sessions
    assert report["turns"] >= sessions
    for name in (
        "accept_latency_ms",
        "abort_latency_ms",
        "abort_cleanup_ms",
        "main_turn_ms",
        "tab_waited_ms",
    ):
        assert set(report[name]) == QUANTILES, name
    for name in (
        "suggestions",
        "speculations_started",
        "speculations_skipped",
        "wasted_tokens",
        "peak_threads",
    ):
        assert isinstance(report[name], int), name
    assert report["peak_fds"] > 0
    assert report["rss_per_session_kib"] >= 0
    assert report["main_turn_ms"]["count"] > 0
    assert report["main_turn_ms"]["p50"] > 0
    assert report["leaks"] == {
        "overlay_dirs": 0,
        "threads": 0,
        "file_descriptors": 0,
        "live_actors": 0,
        "unclean_shutdown": 0,
    }
    assert report["errors"] == []


# Every suggestion is speculated (no load shedding), so the counts below are certain.
BENCH = ("bench", "--sessions", "3", "--turns", "3", "--no-progress", "--no-governor")


def test_bench_tab_every_time_accepts_speculations(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    # Think long enough for the suggestion (shown 300 ms after the answer) to be there.
    done = fore(
        *BENCH, "--think-ms", "1500", "--accept-p", "1", "--edit-p", "0", "--json", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert "fore bench: 3 sessions" in done.stdout
    assert "leaks after shutdown" in done.stdout
    report = json.loads(out.read_text())["speculation"]
    check_report(report, 3)
    assert report["suggestions"] > 0
    assert report["speculations_started"] > 0
    accepted = report["accepts"].get("accepted", 0) + report["accepts"].get("boundary", 0)
    assert accepted > 0
    assert report["accept_latency_ms"]["count"] == accepted
    assert report["accept_latency_ms"]["p99"] >= report["accept_latency_ms"]["p50"] > 0
    assert report["speculations"].get("aborted", 0) == 0  # nobody typed over a suggestion
    assert report["speculations_skipped"] == 0  # --no-governor: every suggestion speculated


def test_bench_typing_every_time_aborts_and_compares(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = fore(*BENCH, "--think-ms", "600", "--accept-p", "0", "--compare", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "speculation on vs off" in done.stdout
    data = json.loads(out.read_text())
    spec, plain = data["speculation"], data["no_speculation"]
    check_report(spec, 3)
    check_report(plain, 3)
    assert spec["accepts"] == {}
    assert spec["speculations"]["aborted"] > 0
    assert spec["abort_latency_ms"]["count"] == spec["speculations"]["aborted"]
    assert spec["abort_cleanup_ms"]["count"] == spec["speculations"]["aborted"]
    assert spec["accept_latency_ms"]["p50"] is None  # no samples: null, not NaN
    assert plain["speculations_started"] == 0
    assert plain["suggestions"] > 0  # suggestions still run without speculation
    assert data["main_turn_p99_ratio"] == pytest.approx(
        spec["main_turn_ms"]["p99"] / plain["main_turn_ms"]["p99"]
    )


def test_bench_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "latency.png"
    done = fore(
        "bench", "--sessions", "2", "--turns", "2", "--think-ms", "100", "--no-progress",
        "--plot", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("bench", "--sessions", "0"), "--sessions: must be at least 1"),
        (("bench", "--sessions", "many"), "--sessions: expected a whole number"),
        (("bench", "--accept-p", "1.5"), "--accept-p: must be between 0 and 1"),
        (("bench", "--duration", "-3"), "--duration: must be a non-negative number"),
        (("bench", "--think-ms", "nan"), "--think-ms: must be a non-negative number"),
        (("bench", "--json", "/nonexistent-dir/r.json"), "is not a directory"),
        (("bench", "nosuch"), "invalid choice"),
        (("frobnicate",), "invalid choice"),
        (("run", "hi"), "required"),
        (("run", "--workspace", ".", "--script", "a.json", "--base-url", "x", "hi"), "not allowed"),
        (("bench", "--log-level", "loud"), "--log-level: invalid choice"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(fore(*args), 2, needle)


def test_unwritable_output_paths_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(fore("bench", "--json", str(tmp_path)), 2, "it is a directory")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        # Root ignores permission bits; procfs directories refuse writes even
        # to root, so the check is exercised whoever runs the suite.
        unwritable = next(d for d in (locked, Path("/proc/self")) if not os.access(d, os.W_OK))
        assert_one_line_error(
            fore("bench", "--plot", str(unwritable / "p.png")), 2, "permission denied"
        )
    finally:
        locked.chmod(0o700)


def test_bad_log_level_from_the_environment_is_one_line(tmp_path: Path) -> None:
    done = fore("run", "--workspace", str(tmp_path), "--script", "x.json", "hi",
                env={"FORE_LOG_LEVEL": "chatty"})  # fmt: skip
    assert_one_line_error(done, 2, "unknown log level 'chatty'")


def test_help_for_every_command() -> None:
    for args in ((), ("bench",), ("run",), ("mock-llm",)):
        done = fore(*args, "--help")
        assert done.returncode == 0, (args, done.stderr)
        assert "usage:" in done.stdout
    assert "--sessions" in fore("bench", "--help").stdout
    assert "--workspace" in fore("run", "--help").stdout
    assert "--ttft-ms" in fore("mock-llm", "--help").stdout


# -- fore run --------------------------------------------------------------------------------

SCRIPT = {
    "replies": [
        {
            "when": {"purpose": "main"},
            "text": "Writing it.",
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "out/hello.txt", "content": "hi\n"}}
            ],
        },
        {"when": {"purpose": "main", "contains": "out/hello.txt"}, "text": "Done: wrote it."},
    ]
}


def test_run_with_a_script_prints_events_and_exits_0(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    done = fore("run", "--workspace", str(ws), "--script", str(script), "write the file")
    assert done.returncode == 0, done.stderr
    assert "Writing it." in done.stdout
    assert "[tool write_file done" in done.stdout
    assert "Done: wrote it." in done.stdout
    assert "[turn completed after 2 LLM calls]" in done.stdout
    assert (ws / "out" / "hello.txt").read_text() == "hi\n"


def test_run_json_lines(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    done = fore("run", "--workspace", str(ws), "--script", str(script), "--json", "go")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds.count("tool_started") == kinds.count("tool_finished") == 1
    assert kinds.index("tool_started") < kinds.index("tool_finished")
    finished = [e for e in events if e["kind"] == "turn_finished"]
    assert len(finished) == 1
    assert finished[0]["result"]["status"] == "completed"
    assert kinds[-1] == "turn_finished"


def test_run_exit_code_says_how_the_turn_ended(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    looping = {
        "replies": [{"text": "again", "tool_calls": [{"name": "list_directory", "arguments": {}}]}]
        * 5
    }
    script = tmp_path / "loop.json"
    script.write_text(json.dumps(looping))
    done = fore("run", "--workspace", str(ws), "--script", str(script), "--max-turns", "2", "go")
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "[turn max_turns after 2 LLM calls]" in done.stdout


def test_run_against_the_mock_server(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\nbeta\n")
    script = ScriptFile.model_validate(
        {
            "replies": [
                {
                    "when": {"purpose": "main"},
                    "text": "Reading.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
                },
                {"when": {"contains": "beta"}, "text": "It lists alpha and beta."},
            ]
        }
    )
    with MockLlmServer(script) as server:
        done = fore(
            "run", "--workspace", str(ws), "--base-url", server.base_url, "--model", "mock-1",
            "--api-key", "k-123", "what is in @notes.txt?",
        )  # fmt: skip
        requests = server.requests()
    assert done.returncode == 0, done.stderr
    assert "It lists alpha and beta." in done.stdout
    assert len(requests) == 2
    first = requests[0]
    assert isinstance(first.body, dict)
    assert first.body["model"] == "mock-1"
    assert first.headers["authorization"] == "Bearer k-123"
    wire = json.dumps(first.body["messages"])
    assert "[File: notes.txt]" in wire  # the @path reference reached the model


def test_run_against_an_unreachable_endpoint_is_one_line(tmp_path: Path) -> None:
    done = fore(
        "run", "--workspace", str(tmp_path), "--base-url", "http://127.0.0.1:9/v1",
        "--model", "m", "hi",
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("fore run: error: LLM connection error")


def test_run_with_a_bad_script_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"replies": [{"text": 3}]}')
    assert_one_line_error(
        fore("run", "--workspace", str(tmp_path), "--script", str(bad), "hi"), 2, "fore run:"
    )
    assert_one_line_error(
        fore("run", "--workspace", str(tmp_path / "missing"), "--script", str(bad), "hi"),
        2,
        "not a directory",
    )
