"""Suite-wide fixtures and the "a run where nothing passed is a failure" rule."""

from __future__ import annotations

import pytest

_passed = 0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _passed
    if report.when == "call" and report.passed:
        _passed += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A green run must have run something: CI must not pass on an empty or
    # fully-skipped collection.
    if exitstatus == 0 and _passed == 0:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
