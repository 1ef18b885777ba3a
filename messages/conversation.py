"""Conversation items: what a session's history is made of.

``Item`` is the tagged union (discriminated on ``kind``) every later part of
Fore shares: the worker's history, the LLM layer's request messages, the
speculator's transcripts. All items round-trip losslessly through JSON.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue

from messages.base import Message


class TextSegment(Message):
    """Plain text typed by the user."""

    kind: Literal["text"] = "text"
    text: str


class FileRef(Message):
    """An ``@path`` file (or directory) reference, resolved on submit."""

    kind: Literal["file_ref"] = "file_ref"
    path: str = Field(min_length=1)


class Paste(Message):
    """A block of pasted text, kept apart from typed text so UIs can fold it."""

    kind: Literal["paste"] = "paste"
    text: str


Segment = Annotated[TextSegment | FileRef | Paste, Field(discriminator="kind")]
"""One piece of user input."""


class ToolCall(Message):
    """A tool call the model asked for.

    ``arguments`` is the decoded JSON object the model produced; the tool's
    arguments model validates it before anything runs.
    """

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class UserMessage(Message):
    """What the user submitted: the flattened text plus the typed segments."""

    kind: Literal["user"] = "user"
    text: str
    segments: tuple[Segment, ...] = ()


class AssistantMessage(Message):
    """One model answer: text and/or tool calls."""

    kind: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


class SystemMessage(Message):
    """A system message (the system prompt, an attached file, a reminder)."""

    kind: Literal["system"] = "system"
    text: str


class ToolResult(Message):
    """The result of one tool call; every call in history has exactly one."""

    kind: Literal["tool_result"] = "tool_result"
    call_id: str = Field(min_length=1)
    name: str
    output: str
    is_error: bool = False


Item = Annotated[
    UserMessage | AssistantMessage | SystemMessage | ToolResult,
    Field(discriminator="kind"),
]
"""One conversation item."""


def item_text(item: Any) -> str:
    """The human-readable text of an item (for matching and summaries)."""
    if isinstance(item, ToolResult):
        return item.output
    return str(getattr(item, "text", ""))
