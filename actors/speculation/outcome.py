"""How a speculation's run ended, as what Tab may accept: pure functions of its result.

A speculation is *completed* as soon as its transcript is done and checked
(every call has exactly one result); a *boundary* keeps what ran and hands
over the calls it must not run (they run for real after Tab); *empty* (no
text, no call) and *failed* offer nothing. :func:`run_outcome` decides it
from the run's :class:`~messages.session.TurnResult`, the gate's verdicts and
the budget that stopped the run (if one did); the controller only applies
the answer to its record. Boundary trimming (:mod:`.transcript`) and the
pairing check run here, so the decision is unit-testable without actors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fore.actors.speculation.gate import LateBoundary
from fore.actors.speculation.transcript import cancelled_calls, hand_over
from fore.actors.worker.state import pairing_problems
from fore.messages.conversation import AssistantMessage, Item, ToolCall, UserMessage
from fore.messages.session import TurnResult
from fore.messages.speculation import SpeculationState

__all__ = ["Limit", "RunOutcome", "has_answer", "run_outcome"]


@dataclass(frozen=True)
class Limit:
    """A budget the speculation reached: its reason, and whether it cancels at once."""

    reason: str
    """``"speculation <what> reached"``: it names itself in the boundary's reason."""
    hard: bool
    """Time and tokens cancel the run now; the transcript length pauses it at a safe point."""


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run offers: its state, its transcript, and the boundary's parts."""

    state: SpeculationState
    items: tuple[Item, ...] = ()
    error: str | None = None
    boundary_calls: tuple[ToolCall, ...] = ()
    boundary_tool: str | None = None
    boundary_reason: str | None = None


def has_answer(items: Sequence[Item]) -> bool:
    """Whether a transcript holds anything of the model's: a tool call or non-blank text."""
    return any(
        isinstance(item, AssistantMessage) and (item.tool_calls or item.text.strip())
        for item in items
    )


def run_outcome(
    result: TurnResult,
    *,
    limit: Limit | None,
    late: Sequence[LateBoundary] = (),
    refused: str | None = None,
    aborted: str | None = None,
) -> RunOutcome:
    """The outcome of a speculation's run (see the module docs).

    ``late``: calls that ran but are a boundary once seen (the gate's
    ``late``); ``refused``: why the gate refused the submit or a request, if
    it did; ``aborted``: why the speculation was aborted, if it was (then
    nothing is offered, whatever the run did).
    """
    if aborted is not None or (result.status == "cancelled" and not (limit and limit.hard)):
        return RunOutcome("aborted", error=aborted or "cancelled")
    outcome = _offered(result, limit, late, refused)
    if outcome.state not in ("completed", "boundary"):
        return outcome
    problems = pairing_problems(outcome.items)
    if problems:
        return RunOutcome("failed", error="transcript check failed: " + "; ".join(problems))
    return outcome


def _offered(
    result: TurnResult, limit: Limit | None, late: Sequence[LateBoundary], refused: str | None
) -> RunOutcome:
    items, status = result.items, result.status
    if status == "completed":
        if not has_answer(items):  # nothing to accept: Tab runs the prompt normally
            return RunOutcome("empty")
        return RunOutcome("completed", items)
    if status == "boundary" and result.boundary is not None:
        return RunOutcome(
            "boundary",
            items,
            boundary_calls=tuple(
                ToolCall.model_validate(c) for c in result.boundary.get("calls", ())
            ),
            boundary_tool=result.boundary.get("tool"),
            boundary_reason=result.boundary.get("reason"),
        )
    if status == "cancelled" and limit is not None and limit.hard:
        # A hard budget cancelled the run mid-flight: keep what finished; the
        # calls it cancelled run for real after Tab.
        kept, calls = hand_over(items, cancelled_calls(items, f"Cancelled: {limit.reason}"))
        if not any(isinstance(i, UserMessage) for i in kept):
            what = limit.reason.removeprefix("speculation ")
            return RunOutcome("failed", error=f"the {what} before it started")
        return RunOutcome(
            "boundary",
            kept,
            boundary_calls=calls,
            boundary_tool=calls[0].name if calls else None,
            boundary_reason=limit.reason,
        )
    if status == "rejected" and late:
        # A call that ran is a boundary after all (overlay full, or the
        # session's policy objected to its result): it runs for real after Tab.
        kept, calls = hand_over(items, [b.call_id for b in late])
        return RunOutcome(
            "boundary",
            kept,
            boundary_calls=calls,
            boundary_tool=late[0].tool,
            boundary_reason=late[0].reason,
        )
    if status == "rejected" and refused is not None:
        if not any(isinstance(i, UserMessage) for i in items):
            return RunOutcome("failed", error=refused)  # nothing ran: Tab runs it normally
        return RunOutcome("boundary", items, boundary_reason=refused)
    if status in ("paused", "max_turns", "cut_off"):
        if status == "max_turns":
            reason = "speculation turn limit reached"
        elif status == "cut_off" and limit is None:
            reason = result.error or "the answer was cut off"
        else:
            reason = (limit.reason if limit else None) or result.error or "budget reached"
        return RunOutcome("boundary", items, boundary_reason=reason)
    return RunOutcome("failed", error=result.error or status)
