"""No module or package in ``tests/`` may take a standard-library name, or Fore's.

Helper scripts (an MCP demo server) run as ``python tests/<folder>/x.py``,
which puts the script's folder first on ``sys.path``: a ``typing/`` package or
a ``fore/`` folder there then replaces the standard library's ``typing`` or
Fore itself in that process, and the script dies in an unrelated import (this
happened once). So the top of ``tests/`` (the package folders, e.g.
``tests/project``, not ``tests/fore``) and every folder that holds such a
script must be free of those names.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FORBIDDEN = set(sys.stdlib_module_names) | {"fore"}


def names_in(folder: Path) -> set[str]:
    return {
        p.stem if p.suffix == ".py" else p.name
        for p in folder.iterdir()
        # a folder shadows only as a regular package: a namespace portion
        # (no __init__.py, e.g. a stale __pycache__-only folder) loses to stdlib
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }


def script_folders() -> set[Path]:
    """``tests/`` itself and every folder with a script run as ``python path/x.py``."""
    scripts = (p for p in TESTS.rglob("*.py") if 'if __name__ == "__main__":' in p.read_text())
    return {TESTS} | {p.parent for p in scripts}


def test_nothing_in_tests_shadows_the_standard_library_or_fore() -> None:
    assert TESTS / "tools" in script_folders()  # mcp_demo_server.py: the check looks somewhere
    shadowing = {
        str(folder.relative_to(TESTS.parent)): sorted(names_in(folder) & FORBIDDEN)
        for folder in sorted(script_folders())
    }
    assert not any(shadowing.values()), f"rename these: {shadowing}"
