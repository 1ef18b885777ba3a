"""Cache-safe forks: what suggestion, speculation and pipelined requests send.

After each main turn the session keeps a :class:`~messages.speculation.ForkSnapshot`
of what the main request sent. Every fork request is that snapshot's system
prompt, tools and (trimmed) history, byte for byte, followed by the fork's
own messages -- so provider prefix caches hit. History is trimmed to the last
``max_history`` entries, but only at a point that does not start with a tool
result whose call was cut off (providers reject an orphan result).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from messages.conversation import AssistantMessage, Item, SystemMessage, ToolResult
from messages.speculation import ForkSnapshot
from messages.tools import ToolDefinition


def snapshot_version(system_prompt: str | None, tools: Sequence[ToolDefinition]) -> str:
    """A digest of what makes a fork's prefix: the system prompt and the tools."""
    canonical = json.dumps(
        {"system": system_prompt, "tools": [t.model_dump(mode="json") for t in tools]},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def trim_history(items: Sequence[Item], max_entries: int) -> tuple[Item, ...]:
    """The last ``max_entries`` items, never starting with an orphan tool result."""
    if max_entries <= 0:
        return ()
    start = max(0, len(items) - max_entries)
    while start < len(items) and isinstance(items[start], ToolResult):
        start += 1
    return tuple(items[start:])


def fork_prefix(snapshot: ForkSnapshot, max_history: int) -> list[Item]:
    """The messages every fork of ``snapshot`` starts with."""
    prefix: list[Item] = []
    if snapshot.system_prompt:
        prefix.append(SystemMessage(text=snapshot.system_prompt))
    prefix.extend(trim_history(snapshot.history, max_history))
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
