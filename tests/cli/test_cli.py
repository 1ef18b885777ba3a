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
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from tests.processes import alive

WAIT = 240.0
_ISOLATED = frozenset(
    {"FORE_LOG_LEVEL", "FORE_BASE_URL", "OPENAI_BASE_URL", "FORE_MODEL", "OPENAI_MODEL"}
)
"""Configuration a test must pass explicitly, never inherit."""


def fore(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Any:
    """``fore *args`` in a child process. Its terminal is 200 columns wide unless ``env``
    says otherwise: the tests read the reports' rows as text, and on a narrow terminal
    a label wraps wherever the widest value of the run pushes it (a slow run's longer
    numbers moved "speculation on vs off" onto two lines)."""
    full_env = {k: v for k, v in os.environ.items() if k not in _ISOLATED}
    full_env["COLUMNS"] = "200"
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fore.supervision.cli", *args],
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
        "abort_finished_cleanup_ms",
        "main_turn_ms",
        "tab_waited_ms",
    ):
        assert set(report[name]) == QUANTILES, name
    for name in (
        "suggestions",
        "speculations_started",
        "speculations_skipped",
        "wasted_tokens",
        "wasted_tokens_estimated",
        "aborts_of_finished",
        "peak_threads",
    ):
        assert isinstance(report[name], int), name
    assert report["wasted_tokens"] >= report["wasted_tokens_estimated"] >= 0
    # the total wall time covers setup, the rounds and the teardown
    assert report["wall_total_s"] >= report["setup_s"] + report["wall_s"] + report["teardown_s"]
    assert report["rounds_cut"] == 0
    assert report["interrupted"] is False
    # every planned turn, suggestion shown and speculation started is in one bucket
    assert report["turns_planned"] == sessions * report["options"]["turns"]
    for group in ("turns", "suggestions", "speculations"):
        accounting = report["accounting"][group]
        assert accounting["accounted"] == accounting["total"], (group, accounting)
    assert report["accounting"]["turns"]["total"] == report["turns_planned"]
    assert report["accounting"]["speculations"]["total"] == report["speculations_started"]
    assert report["peak_fds"] > 0
    assert report["rss_per_session_kib"] >= 0
    assert report["main_turn_ms"]["count"] > 0
    assert report["main_turn_ms"]["p50"] > 0
    assert report["leaks"] == {
        "session_overlays": 0,
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
        *BENCH, "--think-ms", "1500", "--think-dist", "fixed", "--accept-p", "1",
        "--edit-p", "0", "--type-during-p", "0", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "fore bench: 3 sessions" in done.stdout
    assert "leaks after shutdown" in done.stdout
    check_output(done.stdout)
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
    done = fore(
        *BENCH, "--think-ms", "600", "--accept-p", "0", "--compare", "--price", "2,10,0.5",
        "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "speculation on vs off" in done.stdout
    # Issue 28: the tokens the provider reported, priced at --price, and the waste in money.
    assert "cost by purpose (at $2 / $10 / $0.5 per M input / output" in done.stdout
    check_output(done.stdout)
    # No Tab: the accept latency is "—" and says why, never nan.
    assert "— (no Tab applied a speculation)" in done.stdout
    assert "main-turn p99 on/off" in done.stdout.splitlines()[-1]
    data = json.loads(out.read_text())
    spec, plain = data["speculation"], data["no_speculation"]
    check_report(spec, 3)
    check_report(plain, 3)
    assert spec["accepts"] == {}
    assert spec["speculations"]["aborted"] > 0
    assert spec["options"]["price"] == [2.0, 10.0, 0.5]
    assert spec["usage"]["by_purpose"]["main"]["cost_usd"] > 0
    by = spec["usage"]["by_purpose"]
    spent = by["speculation"] if "speculation" in by else spec["usage"]["total"]
    assert spec["wasted_cost_usd"] == pytest.approx(
        spec["wasted_tokens"] * spent["cost_usd"] / spent["total_tokens"]
    )
    assert spec["wasted_cost_usd"] > 0
    # Abort latency is sampled only over speculations still running at the keystroke;
    # aborts of finished ones (nothing to cancel) are counted apart, never as 0 ms.
    running = spec["abort_latency_ms"]["count"]
    assert spec["abort_cleanup_ms"]["count"] == running
    assert 0 < running + spec["aborts_of_finished"] <= spec["speculations"]["aborted"]
    if running:
        assert spec["abort_latency_ms"]["p50"] > 0
    assert spec["accept_latency_ms"]["p50"] is None  # no samples: null, not NaN
    assert plain["speculations_started"] == 0
    assert plain["suggestions"] > 0  # suggestions still run without speculation
    assert data["main_turn_p99_ratio"] == pytest.approx(
        spec["main_turn_ms"]["p99"] / plain["main_turn_ms"]["p99"]
    )


def test_bench_compare_pools_interleaved_pairs(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = fore(
        *BENCH, "--think-ms", "600", "--compare", "--pairs", "2", "--seed", "7",
        "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 pairs pooled" in done.stdout
    data = json.loads(out.read_text())
    comparison = data["comparison"]
    assert [p["seed"] for p in comparison["pairs"]] == [7, 8]
    for pair in comparison["pairs"]:
        assert pair["p99_ratio"] == pytest.approx(pair["on_p99"] / pair["off_p99"])
    # every typed turn of both runs of an arm is pooled: more than one run's worth
    assert comparison["on_ms"]["count"] > data["speculation"]["main_turn_ms"]["count"]
    assert comparison["off_ms"]["count"] > data["no_speculation"]["main_turn_ms"]["count"]
    assert data["main_turn_p99_ratio"] == pytest.approx(
        comparison["on_ms"]["p99"] / comparison["off_ms"]["p99"]
    )
    assert data["speculation"]["options"]["seed"] == 7


def test_bench_plot_writes_a_png_and_says_where(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "latency.png"
    done = fore(
        "bench", "--sessions", "2", "--turns", "2", "--think-ms", "100", "--no-progress",
        "--plot", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"figure written to {out}" in done.stdout
    check_output(done.stdout)


def test_bench_explain_prints_the_glossary_under_the_table() -> None:
    from fore.bench.report import GLOSSARY

    done = fore(*BENCH, "--turns", "1", "--think-ms", "100", "--explain")
    assert done.returncode == 0, done.stderr
    glossary = done.stdout.index("glossary")
    assert done.stdout.index("leaks after shutdown") < glossary
    for term in GLOSSARY:
        assert term in done.stdout[glossary:], term
    check_output(done.stdout)


def check_output(stdout: str) -> None:
    """What every load-benchmark report shows: closed accounting, n, no nan, the verdict last."""
    assert "nan" not in stdout.lower().replace("nanos", "")
    assert "DOES NOT CLOSE" not in stdout
    assert stdout.count("✓ closes") == 3  # turns, suggestions, speculations
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("verdict"), last
    for target in ("accept p99", "abort p99", "leaks", "accounting"):
        assert target in last, (target, last)


def test_bench_ctrl_c_closes_in_order_and_reports_what_finished(tmp_path: Path) -> None:
    """Ctrl-C in a terminal reaches the whole foreground process group -- the mock
    server child too. The runtime must close its sessions before that server goes, so
    no request fails on the way out (no error lines), and what finished is reported."""
    import signal
    import time

    import psutil

    out = tmp_path / "report.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in _ISOLATED} | {"TMPDIR": str(scratch)}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "fore.supervision.cli", "bench", "--sessions", "6",
            "--turns", "500", "--think-ms", "300", "--duration", "200", "--no-progress",
            "--no-governor", "--json", str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a terminal gives a job
    )  # fmt: skip
    try:
        # Bounded wait until the rounds are under way: a session's second main turn
        # has written its note (turns, suggestions and speculations are in flight).
        until = time.monotonic() + 120
        while not list(scratch.glob("fore-bench-*/ws/*/notes/main_1.md")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < until, "the benchmark never got to its rounds"
            time.sleep(0.05)
        children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert children  # the mock server
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        stdout, stderr = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, stderr
    # No structlog error lines, no traceback: one line saying what happened.
    assert stderr.strip().splitlines() == [
        "fore bench: interrupted: the report covers what finished"
    ], stderr
    assert "INTERRUPTED" in stdout
    assert stdout.strip().splitlines()[-1].startswith("verdict (partial: interrupted)")
    report = json.loads(out.read_text())["speculation"]
    assert report["interrupted"] is True
    assert report["leaks"] == dict.fromkeys(report["leaks"], 0)
    buckets = report["accounting"]["turns"]["buckets"]
    assert buckets["not_started_interrupt"] > 0  # far more turns than it played
    for group in ("turns", "suggestions", "speculations"):
        accounting = report["accounting"][group]
        assert accounting["accounted"] == accounting["total"], (group, accounting)
    # The mock server went with it (bounded poll: it is stopped, then reaped).
    until = time.monotonic() + 30
    while any(alive(pid) for pid in children):
        assert time.monotonic() < until, "the mock server outlived the benchmark"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("bench", "--sessions", "0"), "--sessions: must be at least 1"),
        (("bench", "--sessions", "many"), "--sessions: expected a whole number"),
        (("bench", "--accept-p", "1.5"), "--accept-p: must be between 0 and 1"),
        (("bench", "--duration", "-3"), "--duration: must be a positive number"),
        (("bench", "--duration", "0"), "--duration: must be a positive number"),
        (("bench", "--think-ms", "nan"), "--think-ms: must be a non-negative number"),
        (("bench", "--think-ms", "-1"), "--think-ms: must be a non-negative number"),
        (("bench", "--think-dist", "poisson"), "--think-dist: invalid choice"),
        (("bench", "--tokens-per-s", "0"), "--tokens-per-s: must be a positive number"),
        (("bench", "--tokens-per-s", "inf"), "--tokens-per-s: must be a positive number"),
        (("bench", "--ttft-ms", "-5"), "--ttft-ms: must be a non-negative number"),
        (("bench", "--turns", "0"), "--turns: must be at least 1"),
        (("bench", "--edit-p", "-0.1"), "--edit-p: must be a non-negative number"),
        (("bench", "--type-during-p", "2"), "--type-during-p: must be between 0 and 1"),
        (("bench", "--type-during-p", "nan"), "--type-during-p: must be a non-negative number"),
        (("bench", "--seed", "x"), "--seed: invalid int value"),
        (("bench", "--pairs", "2"), "--pairs needs --compare"),
        (("bench", "--compare", "--pairs", "0"), "--pairs: must be at least 1"),
        (
            ("run", "--workspace", ".", "--script", "a.json", "--timeout", "0", "hi"),
            "--timeout: must be a positive number",
        ),
        (
            ("run", "--workspace", ".", "--script", "a.json", "--max-turns", "0", "hi"),
            "--max-turns: must be at least 1",
        ),
        (("bench", "--json", "/nonexistent-dir/r.json"), "is not a directory"),
        (("bench", "nosuch"), "invalid choice"),
        (("frobnicate",), "invalid choice"),
        (("run", "hi"), "required"),
        (("run", "--workspace", ".", "hi"), "one of --script or --base-url is required"),
        (("run", "--workspace", ".", "--script", "a.json", "--base-url", "x", "hi"), "not allowed"),
        (("bench", "--log-level", "loud"), "--log-level: invalid choice"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: tuple[str, ...], needle: str) -> None:
    assert_one_line_error(fore(*args), 2, needle)


def test_unwritable_output_paths_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(fore("bench", "--json", str(tmp_path)), 2, "it is a directory")
    assert_one_line_error(fore("bench", "--html", str(tmp_path)), 2, "it is a directory")
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
    assert kinds[-2:] == ["turn_finished", "usage"]  # the usage line is last (issue 28)


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


def test_run_takes_the_endpoint_and_model_from_the_environment(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = ScriptFile.model_validate({"replies": [{"text": "Configured by env."}]})
    with MockLlmServer(script) as server:
        done = fore(
            "run", "--workspace", str(ws), "hi",
            env={"FORE_BASE_URL": server.base_url, "FORE_MODEL": "env-model"},
        )  # fmt: skip
        requests = server.requests()
    assert done.returncode == 0, done.stderr
    assert "Configured by env." in done.stdout
    assert requests[0].body["model"] == "env-model"  # type: ignore[index]
    with MockLlmServer(script) as server:  # the OPENAI_* names work too; flags still win
        done = fore(
            "run", "--workspace", str(ws), "--model", "flag-model", "hi",
            env={"OPENAI_BASE_URL": server.base_url, "OPENAI_MODEL": "env-model"},
        )  # fmt: skip
        requests = server.requests()
    assert done.returncode == 0, done.stderr
    assert requests[0].body["model"] == "flag-model"  # type: ignore[index]
    done = fore("run", "--workspace", str(ws), "hi", env={"FORE_BASE_URL": server.base_url})
    assert_one_line_error(done, 2, "--model is required")


def _slow_second_reply(delay_ms: int) -> ScriptFile:
    return ScriptFile.model_validate(
        {
            "replies": [
                {
                    "when": {"purpose": "main"},
                    "text": "Reading.",
                    "tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}],
                },
                {"when": {"contains": "alpha"}, "text": "It says alpha.", "delay_ms": delay_ms},
            ]
        }
    )


def test_run_prints_events_while_the_turn_runs(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\n")
    with MockLlmServer(_slow_second_reply(600_000)) as server:  # the answer never comes
        env = {k: v for k, v in os.environ.items() if k not in _ISOLATED}
        proc = subprocess.Popen(
            [sys.executable, "-m", "fore.supervision.cli", "run", "--workspace", str(ws),
             "--base-url", server.base_url, "--model", "m", "--json", "read the notes"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put("")

        threading.Thread(target=pump, daemon=True).start()
        try:
            kinds: list[str] = []
            while "tool_finished" not in kinds:
                line = lines.get(timeout=60)  # printed only at the end: never, here
                assert line, "the output ended before the tool's event"
                kinds.append(json.loads(line)["kind"])
            # the tool's events are out while the turn still waits for its answer
            assert proc.poll() is None
            assert "turn_finished" not in kinds
        finally:
            proc.kill()
            proc.wait(timeout=WAIT)


def test_run_with_a_closed_stdout_finishes_the_turn_quietly(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    env = {k: v for k, v in os.environ.items() if k not in _ISOLATED}
    read, write = os.pipe()
    os.close(read)  # like `| head -1` after its line: every write now fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fore.supervision.cli", "run", "--workspace", str(ws),
             "--script", str(script), "write the file"],
            stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=WAIT,
            check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert (ws / "out" / "hello.txt").read_text() == "hi\n"  # the turn still ran


def test_run_that_times_out_says_so(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\n")
    with MockLlmServer(_slow_second_reply(600_000)) as server:
        done = fore(
            "run", "--workspace", str(ws), "--base-url", server.base_url, "--model", "m",
            "--timeout", "1.5", "read the notes",
        )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == ["fore run: turn timed out after 1.5 s"]


def test_bench_that_cannot_start_its_mock_server_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fore.actors.llm.mock_server import MockLlmServer as Server
    from fore.supervision.cli import main

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the mock LLM server exited at start\n(status 2)")

    monkeypatch.setattr(Server, "spawn", refuse)  # a fault at setup, injected
    code = main(["bench", "--sessions", "1", "--turns", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.strip().splitlines() == [
        "fore bench: error: cannot start the mock LLM server: "
        "the mock LLM server exited at start (status 2)"
    ]


def test_bench_report_that_cannot_be_written_is_one_line() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    done = fore(
        "bench", "--sessions", "1", "--turns", "1", "--think-ms", "100", "--no-progress",
        "--json", "/dev/full",
    )  # fmt: skip
    assert_one_line_error(done, 1, "fore bench: error: cannot write the report")


def test_bench_stops_by_itself_within_its_duration(tmp_path: Path) -> None:
    """Far more turns than the duration allows: the users stop at their deadline (no
    errors, nothing leaked) instead of running every turn."""
    out = tmp_path / "report.json"
    done = fore(
        "bench", "--sessions", "2", "--turns", "1000", "--think-ms", "50", "--duration", "6",
        "--no-progress", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())["speculation"]
    check_report(report, 2)
    assert report["turns"] < 2 * 1000
