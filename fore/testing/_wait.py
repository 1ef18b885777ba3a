"""Bounded polling: wait for a state, never for a duration."""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_TIMEOUT_S = 10.0


def wait_until(
    predicate: Callable[[], object],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    interval: float = 0.005,
    message: str | Callable[[], str] = "condition not reached in time",
) -> None:
    """Poll ``predicate`` until it is true; fail with ``message`` after ``timeout`` s.

    A test that waits for a *state* this way passes on a slow or loaded
    machine too; only a state that never comes fails it (``AssertionError``).
    ``message`` may be a function: it is called at the failure, so it can
    describe the state the wait gave up on (a pid still alive, a queue's length).
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (waited {timeout:g} s)")
        time.sleep(interval)
