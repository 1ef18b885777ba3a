"""The controller attacks' runtime (one per test) and workspace; a worker that crashes on ``Boom``.

The other speculation tests use the suite's ``runtime`` (tests/conftest.py: overlays in a
temp dir, governor off)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fore.actors.speculation.governor import LoadGovernor
from fore.actors.worker.worker import Worker
from fore.supervision.runtime import Runtime
from tests.speculation.test_speculation import Boom


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    """The controller attacks' runtime (``attacks.py``): one per test, closed whatever it did.

    Two blocking-lane threads (an apply can be held on one while the other
    works), overlays in the test's temp dir, the load governor off. A test that
    closes it itself asserts on that close.
    """
    runtime = Runtime(
        name="controller-attacks",
        overlay_root=tmp_path / "overlays",
        speculation_governor=LoadGovernor(enabled=False),
        blocking_threads=2,
    )
    try:
        yield runtime
    finally:
        runtime.close(timeout=30)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with ``app.py`` (``x = 1``) and ``notes.txt``; modules may define their own."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("x = 1\n")
    (root / "notes.txt").write_text("alpha\n")
    return root


@pytest.fixture
def buggy_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker -- a speculation's or the session's -- crashes on ``Boom`` (a tell it has no
    handler for) and is otherwise unchanged."""
    original = Worker.on_unhandled

    def on_unhandled(self: Worker, message: Any) -> Any:
        if isinstance(message, Boom):
            raise RuntimeError("speculation worker bug")
        return original(self, message)

    monkeypatch.setattr(Worker, "on_unhandled", on_unhandled)
