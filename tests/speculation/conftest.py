"""The speculation tests' runtime: one per module, overlays in its temp dir, governor off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fore.supervision.runtime import Runtime
from tests.speculation.test_speculation import speculation_runtime


@pytest.fixture(scope="module")
def runtime(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runtime]:
    """Overrides the suite's default ``runtime`` for every module of this folder.

    Named after the module, like the default one; see :func:`speculation_runtime`.
    """
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    yield from speculation_runtime(tmp_path_factory, f"{name}-test")
