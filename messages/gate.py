"""The speculation tool gate's vocabulary: approval modes, actions and decisions.

A speculation runs tool calls nobody has approved yet. Before each call the gate
answers one question -- may this run now (``allow``), may it run with its writes
sent into the copy-on-write overlay (``redirect``), or must the speculation stop
here and wait for the user (``boundary``)? The answer is a frozen message so the
speculation can log it, send it across actors and show its reason to the user.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from fore.messages.base import Message

ShellClass = Literal["read-only", "write", "unknown"]
"""What the shell classifier can say about a command.

Only ``"read-only"`` lets a speculative shell call run; ``"unknown"`` means the
classifier could not prove the command harmless and is treated like a write.
"""


class ApprovalMode(StrEnum):
    """How much the user has pre-approved, as set in the session's settings."""

    DEFAULT = "default"
    PLAN = "plan"
    AUTO_EDIT = "auto-edit"
    YOLO = "yolo"


class GateAction(StrEnum):
    """What a speculation does with one tool call."""

    ALLOW = "allow"
    """Run it as it is: it cannot change anything."""
    REDIRECT = "redirect"
    """Run it with its writes redirected into the speculation overlay."""
    BOUNDARY = "boundary"
    """Do not run it: the speculation stops before this call."""


class GateDecision(Message):
    """The gate's verdict on one tool call, with a reason a human can read."""

    action: GateAction
    reason: str = Field(min_length=1)
    tool: str
