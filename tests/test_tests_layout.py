"""No module or package in ``tests/`` may take a standard-library name.

Helper scripts in ``tests/`` (an MCP demo server, a store child process) run
as ``python tests/x.py``, which puts ``tests/`` first on ``sys.path``: a
``tests/typing/`` package then replaces the standard library's ``typing`` in
that process, and the script dies in an unrelated import (this happened once).
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).parent


def test_nothing_in_tests_shadows_the_standard_library() -> None:
    names = {
        p.stem if p.suffix == ".py" else p.name
        for p in TESTS.iterdir()
        # a folder shadows only as a regular package: a namespace portion
        # (no __init__.py, e.g. a stale __pycache__-only folder) loses to stdlib
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    shadowing = sorted(names & set(sys.stdlib_module_names))
    assert not shadowing, f"rename these in tests/: {shadowing}"
