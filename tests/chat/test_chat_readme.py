"""The README's ``fore chat`` section and its suggestion example are true.

The example that produces a suggestion and presses Tab runs as printed (a
fresh interpreter, a real workspace) and prints exactly what the README says
it prints; the commands the section shows parse.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
HEADING = "### A suggestion, and Tab, in Python"


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = re.search(r"\n#{2,3} ", text[start + len(heading) :])
    end = start + len(heading) + following.start() if following else len(text)
    return text[start:end]


def test_the_suggestion_example_produces_a_suggestion_and_accepts_it(tmp_path: Path) -> None:
    part = section(README.read_text(), HEADING)
    (code,) = re.findall(r"```python\n(.*?)\n```", part, re.S)
    (printed,) = re.findall(r"It prints:\n\n```text\n(.*?)\n```", part, re.S)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == printed.strip()
    assert (tmp_path / "shop" / "prices.py").read_text() == "TAX = 0.25\n"


def test_the_chat_commands_in_the_readme_parse() -> None:
    from fore.supervision.cli import build_parser

    part = section(README.read_text(), "## `fore chat`")
    commands = [
        line.split("#")[0].strip()
        for line in re.findall(r"```sh\n(.*?)\n```", part, re.S)[0].splitlines()
    ]
    assert len(commands) == 3
    for command in commands:
        args = build_parser().parse_args(shlex.split(command)[1:])
        assert args.command == "chat"
    assert "fore bench chat" in part
    rules = section(README.read_text(), "### How suggestions are made")
    for purpose in ("`main`", "`suggestion`", "`speculation`", "`pipelined`"):
        assert purpose in rules
    assert '`{"suggestion": "…"}`' in rules and "**second** answer" in rules
