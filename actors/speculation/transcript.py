"""Cutting calls out of a speculation's transcript so that they run for real after Tab.

A speculation that stops at a boundary hands over its transcript minus the
calls it must not have run (or whose results it must not keep): the worker
already does this for a call refused *before* it runs. Two stops happen after
the fact -- a budget that cancels a batch in flight, and a call that ran but
is a boundary once seen (the overlay filled up, the session's policy
objected) -- and :func:`hand_over` is the same cut done on the finished
transcript: each such call leaves its assistant message and its result
leaves the history, and the calls come back as the boundary's calls, which
the main worker re-attaches and runs through the normal flow on accept.

The cut keeps the transcript paired (every remaining call keeps its one
result) and never leaves an empty assistant message behind. When the
message is dropped, the calls are re-attached on accept to the previous
assistant message, whose results are then the transcript's tail -- still a
valid order (an assistant message, then the results of its calls).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from fore.messages.conversation import AssistantMessage, Item, ToolCall, ToolResult


def hand_over(
    items: Sequence[Item], call_ids: Collection[str]
) -> tuple[tuple[Item, ...], tuple[ToolCall, ...]]:
    """``items`` without the calls ``call_ids`` and their results, and those calls (in order)."""
    wanted = set(call_ids)
    if not wanted:
        return tuple(items), ()
    kept: list[Item] = []
    removed: list[ToolCall] = []
    for item in items:
        if isinstance(item, ToolResult) and item.call_id in wanted:
            continue
        if isinstance(item, AssistantMessage) and any(c.id in wanted for c in item.tool_calls):
            removed.extend(c for c in item.tool_calls if c.id in wanted)
            calls = tuple(c for c in item.tool_calls if c.id not in wanted)
            if calls or item.text:
                kept.append(item.model_copy(update={"tool_calls": calls}))
            continue
        kept.append(item)
    return tuple(kept), tuple(removed)


def cancelled_calls(items: Sequence[Item], prefix: str) -> list[str]:
    """Ids of the calls whose results are the worker's cancellation text starting ``prefix``.

    A cancelled run gives every call that had not finished (or whose result
    had not passed its post_tool_call hooks) a synthetic error result
    ``"Cancelled: <reason>"``; a call that finished keeps its real result.
    """
    return [
        item.call_id
        for item in items
        if isinstance(item, ToolResult) and item.is_error and item.output.startswith(prefix)
    ]


__all__ = ["cancelled_calls", "hand_over"]
