"""The load benchmark's workload: generated workspaces and the scripted conversation.

Every session gets its own small source tree with tests, and every session's
model follows the same script (the mock server consumes it per session): main
turns that read, grep, edit and run commands; suggestions; speculations that
read and write (some finishing, some hitting a boundary); pipelined
suggestions. Replies are tagged by purpose, so main work and speculative work
consume separate streams of the script.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CALC = '''"""A tiny calculator."""

VERSION = "1.0"


def add(a: int, b: int) -> int:
    return a + b


def sub(a: int, b: int) -> int:
    return a - b
'''

TEST_CALC = """from src.calc import add, sub


def test_add() -> None:
    assert add(2, 3) == 5


def test_sub() -> None:
    assert sub(5, 3) == 2
"""

USER_PROMPTS = [
    "what does this project do?",
    "check the calculator for missing cases",
    "how are the tests organised?",
    "look for TODOs",
    "summarise the code size",
    "what should we do next?",
]


def make_workspace(root: Path) -> Path:
    """A small source tree with tests."""
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "tests").mkdir(exist_ok=True)
    (root / "notes").mkdir(exist_ok=True)
    (root / "src" / "calc.py").write_text(CALC)
    (root / "src" / "__init__.py").write_text("")
    (root / "tests" / "test_calc.py").write_text(TEST_CALC)
    (root / "README.md").write_text("# calc\n\nA tiny calculator. TODO: add mul.\n")
    return root


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _main(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"when": {"purpose": "main"}, "text": text, "tool_calls": list(calls)}


def _spec(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"when": {"purpose": "speculation"}, "text": text, "tool_calls": list(calls)}


def _suggest(text: str, purpose: str = "suggestion") -> dict[str, Any]:
    return {"when": {"purpose": purpose}, "text": json.dumps({"suggestion": text})}


SUGGESTIONS = [
    "write down the todo list",
    "check the tests again",
    "note the code size",
    "review the readme",
]


def script(turns: int) -> dict[str, Any]:
    """The conversation every session follows (enough replies for ``turns`` rounds).

    A main turn is two model calls: one batch of parallel tools (list, grep,
    read, a shell command, a write), then the answer. A speculation reads and
    greps, then writes; every other one also runs a shell command next to its
    write -- the shell would see the real tree while a write is pending, so the
    gate stops it there (a boundary).
    """
    replies: list[dict[str, Any]] = []
    for i in range(turns + 2):
        replies += [
            _main(
                "Let me look.",
                _call("list_directory", path="."),
                _call("grep", pattern="def ", path="src"),
                _call("read_file", path="src/calc.py"),
                _call("shell", command="wc -l src/calc.py tests/test_calc.py"),
                _call(
                    "write_file",
                    path=f"notes/main_{i}.md",
                    content=f"Round {i}: add() and sub() exist; mul() is missing.\n",
                ),
            ),
            _main(f"Round {i}: the calculator has add and sub; mul is missing. Tests cover both."),
        ]
    for i in range(turns * 3 + 6):
        replies.append(_suggest(SUGGESTIONS[i % len(SUGGESTIONS)]))
        replies.append(_suggest(SUGGESTIONS[(i + 1) % len(SUGGESTIONS)], purpose="pipelined"))
    for i in range(turns * 3 + 6):
        write = _call("write_file", path="notes/todo.md", content=f"- [ ] add mul() ({i})\n")
        if i % 2 == 1:
            replies += [
                _spec(
                    "Checking.",
                    _call("read_file", path="README.md"),
                    _call("grep", pattern="TODO", path="."),
                ),
                _spec("", write, _call("shell", command="cat notes/todo.md")),
            ]
        else:
            replies += [
                _spec(
                    "Checking.",
                    _call("read_file", path="src/calc.py"),
                    _call("grep", pattern="TODO", path="."),
                    _call("shell", command="wc -l src/calc.py"),
                ),
                _spec("", write),
                _spec("Wrote the todo list to notes/todo.md."),
            ]
    return {"replies": replies}
