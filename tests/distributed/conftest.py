"""The distributed tests' workspace."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """``ws/app.py`` (``x = 1``) under the test's temp dir."""
    path = tmp_path / "ws"
    path.mkdir()
    (path / "app.py").write_text("x = 1\n")
    return path
