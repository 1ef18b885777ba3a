"""``fore.testing``'s opt-in pytest plugin and its bounded poll, as an application uses them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fore.supervision.runtime import Runtime
from fore.supervision.session import Session
from fore.testing import wait_until


def test_scripted_session_runs_a_turn_on_the_plugins_runtime(
    fore_runtime: Runtime, fore_workspace: Path, scripted_session: Callable[..., Session]
) -> None:
    session = scripted_session([{"text": "hello from the script"}])
    turn = session.submit("hi", timeout=30)
    assert turn.status == "completed"
    assert turn.items[-1].text == "hello from the script"
    assert (fore_workspace / "app.py").is_file()


def test_the_wait_until_fixture_is_fore_testings(wait_until: Callable[..., None]) -> None:
    from fore.testing import wait_until as public

    assert wait_until is public


def test_wait_until_returns_once_the_state_is_reached() -> None:
    flag = threading.Event()
    threading.Timer(0.05, flag.set).start()
    wait_until(flag.is_set, timeout=30)
    assert flag.is_set()


def test_wait_until_fails_with_its_message_at_the_deadline() -> None:
    with pytest.raises(AssertionError, match=r"^never true \(waited 0.05 s\)$"):
        wait_until(lambda: False, timeout=0.05, message="never true")


def test_a_message_function_describes_the_state_at_the_failure() -> None:
    calls: list[float] = []

    def state() -> str:
        calls.append(time.monotonic())
        return f"asked {len(calls)} time(s)"

    with pytest.raises(AssertionError, match=r"^asked 1 time\(s\) \(waited 0.01 s\)$"):
        wait_until(lambda: False, timeout=0.01, message=state)
    assert len(calls) == 1  # called once, at the failure, never while polling
