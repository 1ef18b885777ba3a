"""The fore CLI as a new user meets it: defaults, keys, errors, and what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = {
    "replies": [
        {
            "text": "Reading.",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
        },
        {"text": "done"},
    ]
}


def fore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORE_", "OPENAI_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "fore", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "app.py").write_text("print(1)\n")
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    return workspace


def test_version() -> None:
    done = fore("--version", cwd=ROOT)
    assert done.returncode == 0 and done.stdout.startswith("fore ")


def test_run_defaults_to_the_current_directory_and_prints_alerts(ws: Path) -> None:
    done = fore("run", "--script", "../script.json", "see @missing.py", cwd=ws)
    assert done.returncode == 0, done.stderr
    # The unresolved reference is said in the plain output too, before the answer.
    assert "[warn] file ref @missing.py could not be resolved" in done.stdout
    assert done.stdout.index("[warn]") < done.stdout.index("[turn completed")


def test_run_json_does_not_repeat_the_request_on_every_turn(ws: Path) -> None:
    done = fore("run", "--script", "../script.json", "--json", "hi", cwd=ws)
    assert done.returncode == 0, done.stderr
    kinds = [json.loads(line)["kind"] for line in done.stdout.splitlines()]
    assert "snapshot_taken" not in kinds
    assert kinds[-2:] == ["turn_finished", "usage"]  # the usage line is last (issue 28)
    assert max(len(line) for line in done.stdout.splitlines()) < 2000


def test_an_api_key_on_the_command_line_is_warned_about_and_a_key_file_is_read(
    ws: Path, tmp_path: Path
) -> None:
    done = fore("run", "--script", "../script.json", "--api-key", "sk-secret", "hi", cwd=ws)
    assert done.returncode == 0
    assert "fore run: warning: --api-key" in done.stderr
    assert "sk-secret" not in done.stderr
    assert "--api-key " not in fore("run", "--help", cwd=ws).stdout  # not advertised
    missing = fore("run", "--script", "../script.json", "--api-key-file", "nope", "hi", cwd=ws)
    assert missing.returncode == 2
    assert missing.stderr.startswith("fore run: --api-key-file nope: ")
    two = tmp_path / "two-lines"
    two.write_text("a\nb\n")
    bad = fore("run", "--script", "../script.json", "--api-key-file", str(two), "hi", cwd=ws)
    assert bad.returncode == 2 and "expected one line" in bad.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--workspace", "/nonexistent-dir", "--script", "x.json", "hi"),
        ("run", "--base-url", "ftp://x", "--model", "m", "hi"),
        ("bench", "--pairs", "2"),
        ("bench", "--sessions", "0"),
    ],
)
def test_every_usage_error_is_one_line_with_the_command_prefix(args: tuple[str, ...]) -> None:
    done = fore(*args, cwd=ROOT)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"fore {args[0]}: "), lines[0]
