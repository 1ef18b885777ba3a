"""Session state that outlives a worker incarnation.

The worker owns its session's history, but a worker can crash and be
restarted by its supervisor. :class:`SessionState` is handed to each
incarnation, so a restart keeps the conversation; :meth:`SessionState.repair`
gives any tool call left without a result (the crash happened mid-run) a
synthetic one, so history is again in a state providers accept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fore.actors.core.subscribers import Subscribers
from fore.actors.worker.hookrun import HookGate
from fore.messages.alerts import Alert
from fore.messages.conversation import AssistantMessage, Item, ToolResult

if TYPE_CHECKING:
    from fore.actors.worker.approval import LiveApproval

MAX_ALERTS = 200


@dataclass
class SessionState:
    """A session's history, alerts and event subscribers (owned by its worker)."""

    history: list[Item] = field(default_factory=list)
    alerts: deque[Alert] = field(default_factory=lambda: deque(maxlen=MAX_ALERTS))
    subscribers: Subscribers = field(default_factory=Subscribers)
    output: Any = None
    """The current run's structured-output contract (``actors.output.OutputRun``), if any."""
    hook_gate: HookGate = field(default_factory=HookGate)
    """The session's admission to the hook lane for hooks: it outlives a worker
    incarnation, so hooks abandoned by a crashed worker still count against its cap."""
    approval: LiveApproval | None = None
    """The session's approval policy for normal turns (``None``: calls run unasked).
    Here so that a restarted worker keeps its mode and the person's "always" answers."""

    def repair(self, text: str) -> list[ToolResult]:
        """Close every tool call that has no result; returns the results added."""
        added = [
            ToolResult(call_id=call.id, name=call.name, output=text, is_error=True)
            for call in unanswered_calls(self.history)
        ]
        self.history.extend(added)
        return added


def unanswered_calls(items: Sequence[Item]) -> list[Any]:
    """Tool calls in ``items`` without a result (in order)."""
    answered = {item.call_id for item in items if isinstance(item, ToolResult)}
    return [
        call
        for item in items
        if isinstance(item, AssistantMessage)
        for call in item.tool_calls
        if call.id not in answered
    ]


def pairing_problems(items: Iterable[Item]) -> list[str]:
    """Everything that breaks "every call has exactly one result, after it"."""
    problems: list[str] = []
    calls: dict[str, str] = {}
    results: dict[str, int] = {}
    for item in items:
        if isinstance(item, AssistantMessage):
            for call in item.tool_calls:
                if call.id in calls:
                    problems.append(f"tool call id {call.id} appears twice")
                calls[call.id] = call.name
        elif isinstance(item, ToolResult):
            if item.call_id not in calls:
                problems.append(f"result for {item.call_id} has no preceding call")
            results[item.call_id] = results.get(item.call_id, 0) + 1
    for call_id, name in calls.items():
        count = results.get(call_id, 0)
        if count != 1:
            problems.append(f"call {call_id} ({name}) has {count} results")
    return problems
