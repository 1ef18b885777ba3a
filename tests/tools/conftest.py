"""Fixtures shared by the tools tests: a workspace, an overlay store, a process-tracking
backend, the pool's report inbox, the MCP server."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fore.actors.overlay import OverlayStore
from fore.actors.tools.proctrack import tracking_unavailable
from fore.supervision.runtime import Runtime
from tests.tools.test_tool_pool import Collector

DEMO = str(Path(__file__).with_name("mcp_demo_server.py"))
WAIT = 60.0


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An empty workspace, ``ws`` under the test's temp dir (a module may define its own)."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def overlay_store(tmp_path: Path) -> Iterator[OverlayStore]:
    """Overlays under the test's temp dir: a speculation's view of a workspace."""
    store = OverlayStore(tmp_path / "overlays")
    yield store
    store.close()


def available_backend(kind: str) -> str:
    """``kind``, a process-tracking backend, if it works on this machine; else the test is
    skipped with the reason (a cgroup needs a delegated cgroup2 with ``cgroup.kill``, the
    subreaper Linux's ``PR_SET_CHILD_SUBREAPER``). On the CI machine all of them work."""
    why = tracking_unavailable(kind)
    if why is not None:
        pytest.skip(f"{kind}: {why}")
    return kind


@pytest.fixture
def inbox(fresh_runtime: Runtime) -> tuple[queue.Queue[Any], Any]:
    """A :class:`Collector` on the test's runtime and the queue it puts what it receives on."""
    q: queue.Queue[Any] = queue.Queue()
    with fresh_runtime.system.activated():
        collector = Collector.start(q)
    return q, collector


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, DEMO, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert process.poll() is None, "the HTTP demo server exited"
                assert time.monotonic() < deadline, "the HTTP demo server did not listen"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=30)
