"""Suite-wide fixtures and the "a run where nothing passed is a failure" rule."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

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
