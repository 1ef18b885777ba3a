"""The chat's side of approvals: Shift-Tab's cycle, the modes' help, call summaries.

The policy itself is the runtime's (:mod:`actors.worker.approval`):
``fore chat`` opens its session with ``open_session(approval=mode,
approver=...)``, so every tool call of a normal turn is judged by the worker
-- with the speculation gate's classifier, on the hook lane -- and the calls
that must ask reach :meth:`~supervision.chat.app.ChatApp.approver`, which
shows them inline (y / n / always) and waits for the key. Shift-Tab and
``/approval`` call ``Session.set_approval_mode``, which the speculation gate
follows too (a stricter mode speculates again, ``plan`` withdraws the
suggestion). What is left here is presentation.
"""

from __future__ import annotations

from typing import Any

from fore.actors.worker.approval import call_text
from fore.messages.gate import ApprovalMode
from fore.supervision.chat.text import MAX_SUMMARY, one_line

MODE_CYCLE: tuple[ApprovalMode, ...] = (
    ApprovalMode.DEFAULT,
    ApprovalMode.AUTO_EDIT,
    ApprovalMode.YOLO,
    ApprovalMode.PLAN,
)
"""Shift-Tab's order (Claude Code's)."""

MODE_HELP: dict[ApprovalMode, str] = {
    ApprovalMode.DEFAULT: "file edits and commands that change things ask first",
    ApprovalMode.AUTO_EDIT: "file edits run unasked; other changes ask first",
    ApprovalMode.YOLO: "everything runs unasked",
    ApprovalMode.PLAN: "read-only: every change is refused",
}


def next_mode(mode: ApprovalMode) -> ApprovalMode:
    """The mode after ``mode`` in Shift-Tab's cycle."""
    return MODE_CYCLE[(MODE_CYCLE.index(mode) + 1) % len(MODE_CYCLE)]


def short_arguments(name: str, arguments: Any, limit: int = MAX_SUMMARY) -> str:
    """A call's arguments as one short line: its main argument when it has one (the
    worker's choice, :func:`~actors.worker.approval.call_text`), sanitized and clipped
    the chat's way."""
    return one_line(call_text(name, arguments), limit)
