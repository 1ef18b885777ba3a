"""The worker tests' default workspace (a module that needs other files defines its own)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """``notes.txt`` (``alpha``) in the test's temp dir."""
    (tmp_path / "notes.txt").write_text("alpha\n")
    return tmp_path
