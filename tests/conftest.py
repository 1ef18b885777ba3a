"""Suite-wide fixtures and the "a run where nothing passed is a failure" rule."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from fore.supervision.runtime import Runtime

# The suite opts in to Fore's own pytest fixtures, as an application would
# (tests/project/test_testing_plugin.py uses them).
pytest_plugins = ["fore.testing.pytest_plugin"]

_passed = 0

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


@pytest.fixture(scope="module")
def runtime(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    """A default :class:`Runtime` shared by one test module; it must close cleanly.

    Named after the module (its thread names say whose it is). A module that
    needs another runtime -- a blob dir, overlays, no blobs, function scope, a
    longer close -- defines its own ``runtime`` fixture, which overrides this one.
    """
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    rt = Runtime(name=f"{name}-test")
    try:
        yield rt
    finally:
        assert rt.close(timeout=30)
