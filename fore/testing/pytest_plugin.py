"""pytest fixtures for Fore: opt in with ``pytest_plugins = ["fore.testing.pytest_plugin"]``.

* ``fore_runtime`` -- a :class:`~fore.Runtime` per test module with its blob
  store and overlays under the module's temp dir; its ``close()`` must succeed.
* ``fore_workspace`` -- a fresh workspace directory (``app.py`` in it).
* ``scripted_session`` -- a factory: ``scripted_session(replies, **open_kwargs)``
  opens a session of ``fore_runtime`` on ``fore_workspace`` with a
  :class:`~fore.testing.ScriptedModel`, closed at the end of the test.
* ``wait_until`` -- :func:`fore.testing.wait_until`, as a fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm.offline import ScriptedModel
from fore.supervision.runtime import Runtime
from fore.supervision.session import Session
from fore.testing._wait import wait_until as _wait_until


@pytest.fixture(scope="module")
def fore_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    base = tmp_path_factory.mktemp("fore-runtime")
    rt = Runtime(name="fore-test", blob_dir=base / "blobs", overlay_root=base / "overlays")
    try:
        yield rt
    finally:
        assert rt.close(timeout=30), f"runtime closed unclean: {rt.overlays_left}"


@pytest.fixture
def fore_workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "app.py").write_text("def main():\n    print('hello')\n")
    return workspace


@pytest.fixture
def scripted_session(
    fore_runtime: Runtime, fore_workspace: Path
) -> Iterator[Callable[..., Session]]:
    opened: list[Session] = []

    def open_scripted(replies: list[dict[str, Any]], **kwargs: Any) -> Session:
        kwargs.setdefault("workspace", fore_workspace)
        session = fore_runtime.open_session(model=ScriptedModel(replies=replies), **kwargs)
        opened.append(session)
        return session

    yield open_scripted
    for session in opened:
        session.close()


@pytest.fixture
def wait_until() -> Callable[..., None]:
    return _wait_until
