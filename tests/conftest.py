"""Suite-wide fixtures and the "a run where nothing passed is a failure" rule."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from fore.actors.speculation.governor import LoadGovernor
from fore.supervision.runtime import Runtime

# The suite opts in to Fore's own pytest fixtures, as an application would
# (tests/project/test_testing_plugin.py uses them).
pytest_plugins = ["fore.testing.pytest_plugin"]

_passed = 0

# The property tests' examples are timed by hypothesis (200 ms each by default): on a
# loaded machine (CI runs two test workers on two cores) a pause fails them with
# DeadlineExceeded, which says nothing about the code. Speed is measured in bench/.
settings.register_profile("fore", deadline=None)
settings.load_profile("fore")

# ``fore run`` / ``fore chat`` keep a session store in the user's data directory
# by default: the suite's (and its subprocesses') is a throwaway one, never the
# real home's.
os.environ["XDG_DATA_HOME"] = _data_home = tempfile.mkdtemp(prefix="fore-test-data-")
atexit.register(shutil.rmtree, _data_home, ignore_errors=True)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _passed
    if report.when == "call" and report.passed:
        _passed += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A green run must have run something: CI must not pass on an empty or
    # fully-skipped collection.
    if exitstatus == 0 and _passed == 0:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "runtime(**options): the test runtime's options (fixtures runtime and fresh_runtime)",
    )


def _open_runtime(request: pytest.FixtureRequest, base: Path) -> Iterator[Runtime]:
    """The suite's test runtime: named after the module, overlays under ``base``, load governor off.

    Every speculation a test asks for must run, so the governor is off. A module
    (``pytestmark = pytest.mark.runtime(...)``) or a test changes the runtime with
    the ``runtime`` marker: its keywords go to :class:`Runtime` (``blobs=False``,
    ``name=...``), ``close_timeout`` to the ``close()`` that must succeed (30 s).
    """
    marker = request.node.get_closest_marker("runtime")
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    close_timeout = options.pop("close_timeout", 30)
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    options.setdefault("name", f"{name}-test")
    options.setdefault("overlay_root", base / "overlays")
    options.setdefault("speculation_governor", LoadGovernor(enabled=False))
    rt = Runtime(**options)
    try:
        yield rt
    finally:
        assert rt.close(timeout=close_timeout), f"runtime closed unclean: {rt.overlays_left}"


@pytest.fixture(scope="module")
def runtime(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runtime]:
    """One test runtime (:func:`_open_runtime`) shared by a test module; it must close cleanly."""
    yield from _open_runtime(request, tmp_path_factory.mktemp("runtime"))


@pytest.fixture
def fresh_runtime(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runtime]:
    """A test runtime of one test's own: its crashes, restarts and tools meet no other test's.

    Its overlays are not under ``tmp_path`` (tests use that as a workspace).
    """
    yield from _open_runtime(request, tmp_path_factory.mktemp("runtime"))


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where every connection is refused, for as long as the test runs.

    The port stays bound (never listening) until the test ends: a port bound and closed
    again could be taken meanwhile by another test worker's server, which would answer.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
