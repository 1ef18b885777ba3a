"""The suite's shared fixtures are defined once (issue 22 point 6).

``runtime`` / ``fresh_runtime`` live in ``tests/conftest.py`` (a module changes
them with the ``runtime`` marker) and ``wait_until`` in ``fore.testing``'s
plugin; a copy in a test module drifts from them (its own close deadline, its
own governor) and hides which tests run on a different runtime. The vendored
pykka suite keeps its own ``runtime`` fixture: it is another concept there.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SHARED = {"runtime": "tests/conftest.py", "fresh_runtime": "tests/conftest.py", "wait_until": ""}
VENDORED = TESTS / "pykka_suite"


def fixtures_in(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            "fixture" in ast.unparse(decorator) for decorator in node.decorator_list
        ):
            found.add(node.name)
    return found


def test_no_test_module_defines_a_shared_fixture_again() -> None:
    copies = sorted(
        f"{path.relative_to(TESTS.parent)}: {name}"
        for path in TESTS.rglob("*.py")
        if VENDORED not in path.parents
        for name in fixtures_in(path) & set(SHARED)
        if str(path.relative_to(TESTS.parent)) != SHARED[name]
    )
    assert copies == [], "use the shared fixture (or the runtime marker) instead:\n" + "\n".join(
        copies
    )


def test_the_scan_finds_the_shared_runtime() -> None:
    assert {"runtime", "fresh_runtime"} <= fixtures_in(TESTS / "conftest.py")
