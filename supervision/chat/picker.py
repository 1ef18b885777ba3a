"""``fore chat --resume``: pick one of the recent stored sessions (issue 25).

A small, line-based picker that runs before the chat's screen starts: the
recent sessions of this workspace, newest first, one per line (age, turns,
title, id), and a prompt for the number. Enter takes the newest; ``q`` or an
empty list leaves without opening anything. Plain functions over a reader and
a writer, so the tests drive it without a terminal.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from fore.messages.conversation import AssistantMessage, UserMessage
from fore.supervision.resume import summary_lines

__all__ = ["pick_session", "resumed_banner"]


def pick_session(
    sessions: Sequence[Any],
    *,
    read: Callable[[str], str] = input,
    write: Callable[[str], None] = print,
    now: float | None = None,
    attempts: int = 3,
) -> str | None:
    """The id of the session the person picks, or ``None`` (nothing to pick, or ``q``).

    ``sessions`` are :class:`~actors.store.records.SessionSummary` rows, newest
    first. A session open in another process is shown as such; picking it is
    allowed (the resume then says who holds it). After ``attempts`` answers
    that are not a number of the list, nothing is picked.
    """
    if not sessions:
        return None
    write("Recent sessions in this workspace:")
    for line in summary_lines(sessions, time.time() if now is None else now):
        write(line)
    for _ in range(attempts):
        try:
            answer = read(f"Resume which one? [1-{len(sessions)}, Enter: 1, q: none] ").strip()
        except EOFError:
            return None
        if answer.lower() in ("q", "quit"):
            return None
        if not answer:
            return str(sessions[0].session_id)
        if answer.isdigit() and 1 <= int(answer) <= len(sessions):
            return str(sessions[int(answer) - 1].session_id)
        write(f"  {answer!r} is not a number from 1 to {len(sessions)}")
    return None


def resumed_banner(session_id: str, history: Sequence[Any], *, shown: int = 4) -> list[str]:
    """Lines saying which session goes on, and how its conversation last went."""
    turns = sum(1 for item in history if isinstance(item, UserMessage))
    lines = [f"resumed session {session_id} ({turns} turn{'' if turns == 1 else 's'} so far)"]
    said = [
        item for item in history if isinstance(item, UserMessage | AssistantMessage) and item.text
    ]
    for item in said[-shown:]:
        who = "you" if isinstance(item, UserMessage) else "model"
        text = " ".join(item.text.split())
        lines.append(f"  {who}: {text[:100] + ('…' if len(text) > 100 else '')}")
    return lines
