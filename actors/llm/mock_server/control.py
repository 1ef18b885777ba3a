"""What both server flavours offer: :class:`MockLlmControl`, and polling their stats.

The in-process :class:`~fore.actors.llm.mock_server.server.MockLlmServer` calls the app
directly, the spawned one speaks HTTP to the control endpoints; tests and benchmarks are
written against this protocol and run with either. Separate so that neither flavour
imports the other for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from fore.actors.llm.mock_server.settings import FaultKind, MockStats, RecordedRequest
from fore.actors.llm.script import ScriptFile


class MockLlmControl(Protocol):
    """What both server flavours offer (in-process and subprocess)."""

    @property
    def base_url(self) -> str: ...

    def stats(self) -> MockStats: ...

    def requests(self) -> tuple[RecordedRequest, ...]: ...

    def queue_fault(
        self,
        fault: FaultKind,
        *,
        count: int = 1,
        retry_after: float | None = None,
        session: str | None = None,
        stall_s: float | None = None,
    ) -> None: ...

    def reset(self) -> None: ...

    def set_script(self, script: ScriptFile | None) -> None: ...

    def wait_for_stats(
        self, predicate: Callable[[MockStats], bool], timeout_s: float = 5.0
    ) -> MockStats: ...


def _wait_for_stats(
    get: Callable[[], MockStats], predicate: Callable[[MockStats], bool], timeout_s: float
) -> MockStats:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = get()
        if predicate(stats):
            return stats
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"mock LLM stats did not reach the condition in {timeout_s}s: {stats}"
            )
        time.sleep(0.01)
