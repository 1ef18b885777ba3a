"""Cache-safe forks: what suggestion, speculation and pipelined requests send.

After each main turn the session keeps a :class:`~messages.speculation.ForkSnapshot`
of what the main request sent. Every fork request is that snapshot's system
prompt, tools and (trimmed) history, byte for byte, followed by the fork's
own messages -- so provider prefix caches hit. History is trimmed to at most
``max_history`` entries, but only at a point that does not start with a tool
result whose call was cut off (providers reject an orphan result).

**Prefix identity vs trimming.** The two goals pull apart once a history
outgrows ``max_history``: the main request keeps sending the whole history,
a fork sends only its tail, so from then on the fork's prefix is no longer the
main request's (system prompt and tools still are) and the provider cannot
serve it from the main request's cache entry. What can still be had is that
forks share *each other's* prefix: the cut point moves in fixed steps
(``step`` entries at a time, at multiples of ``step`` from the start of the
history) instead of by one entry per new item, so for several turns in a row
every fork -- suggestion, speculation, pipelined suggestion, the next turn's
suggestion -- starts at the same entry and extends the previous fork's
prefix byte for byte. The cost: a fork carries between ``max_history - step
+ 1`` and ``max_history`` entries instead of always ``max_history``.
"""

from __future__ import annotations

from collections.abc import Sequence

from fore.actors.worker.snapshot import snapshot_version
from fore.messages.conversation import AssistantMessage, Item, SystemMessage, ToolResult
from fore.messages.speculation import ForkSnapshot

__all__ = [
    "assistant_answers",
    "extend",
    "fork_prefix",
    "last_answer",
    "snapshot_version",  # the worker's (it stamps the snapshots it takes); re-exported
    "trim_history",
    "trim_start",
]


def trim_start(length: int, max_entries: int, step: int = 1) -> int:
    """Where a history of ``length`` entries is cut: a multiple of ``step`` (module doc).

    The smallest multiple of ``step`` that leaves at most ``max_entries``
    entries; ``step`` is clamped to ``1..max_entries``. It depends only on the
    length, so every history that is one append-only log cut at the same
    length bucket is cut at the same entry.
    """
    if length <= max_entries:
        return 0
    if max_entries <= 0:
        return length
    step = max(1, min(step, max_entries))
    excess = length - max_entries
    return -(-excess // step) * step


def trim_history(items: Sequence[Item], max_entries: int, step: int = 1) -> tuple[Item, ...]:
    """At most ``max_entries`` items, cut in ``step``-sized steps, never at an orphan result.

    ``step=1`` keeps exactly the last ``max_entries`` (when there are more).
    """
    if max_entries <= 0:
        return ()
    start = trim_start(len(items), max_entries, step)
    while start < len(items) and isinstance(items[start], ToolResult):
        start += 1
    return tuple(items[start:])


def fork_prefix(snapshot: ForkSnapshot, max_history: int, step: int = 1) -> list[Item]:
    """The messages every fork of ``snapshot`` starts with."""
    prefix: list[Item] = []
    if snapshot.system_prompt:
        prefix.append(SystemMessage(text=snapshot.system_prompt))
    prefix.extend(trim_history(snapshot.history, max_history, step))
    return prefix


def assistant_answers(items: Sequence[Item]) -> int:
    """How many final assistant answers (text, no tool calls) a history holds."""
    return sum(1 for i in items if isinstance(i, AssistantMessage) and i.text and not i.tool_calls)


def last_answer(items: Sequence[Item]) -> str:
    for item in reversed(items):
        if isinstance(item, AssistantMessage) and item.text:
            return item.text
    return ""


def extend(snapshot: ForkSnapshot, items: Sequence[Item]) -> ForkSnapshot:
    """The snapshot as it will be once ``items`` are in history (after an accept)."""
    return snapshot.model_copy(update={"history": (*snapshot.history, *items)})
