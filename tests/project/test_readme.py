"""The README's Python example runs as printed (in a fresh interpreter, on a real workspace)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_session_api_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)\n```", README.read_text(), re.S)
    assert blocks, "the README has no Python example"
    (tmp_path / "myproject").mkdir()
    (tmp_path / "myproject" / "app.py").write_text("def main():\n    return 1\n")
    done = subprocess.run(
        [sys.executable, "-c", blocks[0]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # the @app.py reference was attached, the tool ran, the scripted answer came back
    assert done.stdout.strip() == (
        "completed ['user', 'system', 'assistant', 'tool_result', 'assistant']"
    )


def test_the_readme_documents_the_bench_and_run_options_that_exist() -> None:
    """What the README promises about the CLI is what the parser accepts."""
    from fore.bench.sim_user import THINK_DISTS
    from fore.supervision.cli import build_parser

    text = README.read_text()
    for choice in THINK_DISTS:
        assert build_parser().parse_args(["bench", "--think-dist", choice]).think_dist == choice
        assert f"`{choice}`" in text, choice
    for name in ("FORE_BASE_URL", "OPENAI_BASE_URL", "FORE_MODEL", "OPENAI_MODEL"):
        assert name in text
    assert "--base-url` and `--model` may\nbe left out" in text


def _block(marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)\n```", README.read_text(), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"one README example with {marker!r}"
    return found[0]


def _run(code: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_tool_example_streams_events_and_answers(tmp_path: Path) -> None:
    code = _block("@tool")
    assert len([line for line in code.splitlines() if line.strip()]) <= 25  # the bound asked for
    lines = _run(code, tmp_path).splitlines()
    assert lines[0] == "run_started What's the weather in Lisbon?"
    assert "tool_started get_weather" in lines
    assert "tool_finished get_weather" in lines
    assert lines.index("tool_finished get_weather") < lines.index("turn_finished ")
    assert "".join(
        line[len("text_delta ") :] for line in lines if line.startswith("text_delta")
    ) == ("It is 18°C and sunny in Lisbon.")
    assert lines[-1] == "answer: It is 18°C and sunny in Lisbon."


def test_the_mcp_example_asks_a_real_git_server(tmp_path: Path) -> None:
    pytest.importorskip("mcp_server_git")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    (tmp_path / "new.txt").write_text("x\n")
    out = _run(_block("MCPServerStdio"), tmp_path)
    assert out.startswith("Repository status:")
    assert "new.txt" in out


def test_the_observability_example_traces_prices_and_limits(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    (tmp_path / "notes.txt").write_text("alpha\n")
    lines = _run(_block("InMemorySpanExporter"), tmp_path).splitlines()
    assert lines[0] == (
        "completed ['chat function', 'execute_tool read_file', 'chat function', "
        "'invoke_agent fore']"
    )
    usage = re.fullmatch(r"2 requests, (\d+) tokens, \$(\S+)", lines[1])
    assert usage, lines[1]
    assert int(usage[1]) > 0 and float(usage[2]) > 0  # priced by "*"
    assert lines[2] == "usage_limit requests 1"


def test_the_structured_output_example_validates_and_re_asks(tmp_path: Path) -> None:
    code = _block("output_type=")
    lines = _run(code, tmp_path).splitlines()
    assert lines == ["18.0 ['sunny']", "completed 1 True True"]


def test_readme_and_help_agree_on_exit_codes_and_log_level_defaults() -> None:
    from fore.supervision.cli import build_parser

    text = " ".join(README.read_text().split())
    run_help = build_parser()._subparsers._group_actions[0].choices["run"].description  # type: ignore[union-attr]
    codes = re.findall(r"(\d+) ([a-z][a-z ]+?)(?:,|\.)", run_help.split("Exit code:")[1])
    assert codes, run_help
    for code, meaning in codes:
        assert f"{code} {meaning.strip()}" in text, (code, meaning)
    parser = build_parser()
    for command, default in (("bench", "error"), ("run", "critical"), ("chat", "critical")):
        args = ["--script", "x.json", "p"] if command == "run" else []
        assert parser.parse_args([command, *args]).log_level == default
    assert "default `error` for `bench`, `critical` for `run` and `chat`" in text
