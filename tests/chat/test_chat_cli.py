"""``fore chat``'s command line: every mistake is one line and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fore.supervision.cli import build_parser


def fore(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fore.supervision.cli", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "fore chat: one of --demo, --script or --base-url is required"),
        (("--script", "missing.json"), "fore chat: missing.json: cannot read script"),
        (("--base-url", "ftp://x", "--model", "m"), "--base-url must start with http://"),
        (("--base-url", "http://127.0.0.1:9/v1"), "--model is required with --base-url"),
        (("--demo", "--script", "x.json"), "not allowed with argument"),
        (("--approval", "sometimes", "--demo"), "invalid choice: 'sometimes'"),
        (("--demo",), "needs an interactive terminal"),
    ],
)
def test_mistakes_are_one_line(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    done = fore("chat", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr


def test_the_flags_parse() -> None:
    source = ["--workspace", "w", "--base-url", "http://h/v1", "--model", "m"]
    options = ["--approval", "plan", "--no-speculation", "--max-turns", "3", "--system", "x"]
    args = build_parser().parse_args(["chat", *source, *options])
    assert (args.approval, args.no_speculation, args.max_turns) == ("plan", True, 3)
    assert str(args.workspace) == "w" and args.system == "x"
