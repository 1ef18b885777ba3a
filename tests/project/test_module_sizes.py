"""No module of Fore is over 600 lines unless it is one concept and says so (issue 22 point 5).

A long module that mixes jobs hides its seams: the next change has to read all
of it. Some concepts are long and whole (the error tree, the supervisor's plan
executor, the overlay's entries): those keep their length, and their docstring
says "one concept" and why, so the exception is a decision a reader can check,
not an accident that grows. The test reads every source module once, through
its real path (``fore/`` links the layer folders in).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("actors", "messages", "supervision", "bench", "fore")
LIMIT = 600


def _modules() -> list[Path]:
    seen: dict[Path, Path] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            seen.setdefault(path.resolve(), path)
    return sorted(seen)


def test_the_sources_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert "fore/errors.py" in names and "supervision/supervisor.py" in names


def test_a_module_over_the_limit_says_it_is_one_concept() -> None:
    offenders = []
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "one concept" not in " ".join(doc.lower().split()):
            offenders.append(f"{path.relative_to(ROOT)} ({text.count(chr(10))} lines)")
    assert offenders == [], "split these or say in the docstring why each is one concept"
