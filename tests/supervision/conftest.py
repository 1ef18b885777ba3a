"""The supervision tests' session workspace."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """``app.py`` (``print('hello')``) in the test's temp dir."""
    (tmp_path / "app.py").write_text("print('hello')\n")
    return tmp_path
