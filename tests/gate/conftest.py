"""The gate tests' corpus workspace (``fore.bench.shell_corpus``), one per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from fore.bench.shell_corpus import make_workspace


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The corpus workspace: commands are classified in it as a speculation would."""
    return make_workspace(tmp_path_factory.mktemp("corpus"))
