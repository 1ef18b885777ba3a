"""What the tool pool keeps for each batch and each of its calls.

Plain records, owned by the :class:`~actors.tools.pool.actor.ToolPool` actor
and touched only on its thread. A call's ``state`` moves planning ->
waiting -> ready -> running -> done, or running -> zombie -> done for a call
reported before its thread returned (:mod:`.zombies`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fore.actors.core.cancel import Lease, Registration
from fore.actors.core.timer import TimerHandle
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.scheduling import CallShape
from fore.messages.conversation import ToolCall
from fore.messages.tools import RunToolBatch, ToolCallFinished

_NO_SHAPE = CallShape(frozenset(), False)


@dataclass(eq=False)
class _Call:
    batch: _Batch
    index: int
    call: ToolCall
    shape: CallShape = _NO_SHAPE
    waiting_on: set[_Call] = field(default_factory=set)
    """Calls that must end (their thread, not just their report) before this one starts."""
    dependents: list[_Call] = field(default_factory=list)
    state: str = "planning"
    """planning | waiting | ready | running | zombie | done (see module docs)."""
    reported: bool = False
    holds_slot: bool = False
    token: CancelToken = field(default_factory=CancelToken)
    timer: TimerHandle | None = None
    """The call's deadline while it runs."""
    wait_timer: TimerHandle | None = None
    """How long it may wait for a zombie it must not overlap."""
    started: float = 0.0
    timeout: float = 0.0
    """Its deadline in seconds once it runs (the tool's own ``timeout``, else the batch's)."""
    ended_as: str = ""
    """How a zombie's call was reported ("timed out", "was cancelled")."""


@dataclass(eq=False)
class _Batch:
    request: RunToolBatch
    calls: list[_Call] = field(default_factory=list)
    results: list[ToolCallFinished | None] = field(default_factory=list)
    remaining: int = 0
    planned: bool = False
    plan_timer: TimerHandle | None = None
    plan_stuck: bool = False
    """Planning timed out and its thread has not returned yet (a planning zombie)."""
    lease: Lease | None = None
    """Held under the request's scope until every call is reported."""
    registration: Registration | None = None
    """The scope's cancel callback (removed once the batch is reported)."""

    @property
    def session(self) -> str:
        return self.request.session_id

    @property
    def key(self) -> tuple[str, str]:
        return (self.request.session_id, self.request.batch_id)


def _cancel(timer: TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()
