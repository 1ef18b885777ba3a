"""Fixtures shared by the tools tests: a workspace, an overlay store, a process-tracking
backend, the pool's report inbox, the MCP server."""

from __future__ import annotations

import queue
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from fore.actors.overlay import OverlayStore
from fore.actors.tools.proctrack import tracking_unavailable
from fore.bench.llama_server import free_port
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


def _listens(process: subprocess.Popen[bytes], port: int) -> bool:
    """``process`` itself listens on ``port`` (not just anyone: the suite runs on two
    workers, and the other may have bound the port between our probe and the child)."""
    try:
        connections = psutil.Process(process.pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections)


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    for _attempt in range(3):  # a free port can be taken between the probe and the bind
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, DEMO, "--http", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + WAIT
            while not _listens(process, port) and process.poll() is None:
                assert time.monotonic() < deadline, "the HTTP demo server did not listen"
                time.sleep(0.05)
            if process.poll() is None:
                yield f"http://127.0.0.1:{port}/mcp"
                return
        finally:
            process.kill()
            process.wait(timeout=30)
    pytest.fail("the HTTP demo server exited three times (its port taken each time?)")
