"""Conversation items: what a session's history is made of.

``Item`` is the tagged union (discriminated on ``kind``) every later part of
Fore shares: the worker's history, the LLM layer's request messages, the
speculations' transcripts. All items round-trip losslessly through JSON.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, JsonValue

from fore.messages.base import Message


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


def _non_finite_path(value: Any, path: str) -> str | None:
    """Where in ``value`` a NaN or infinity sits (``None`` if nowhere)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            found = _non_finite_path(item, f"{path}[{key!r}]")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _non_finite_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _finite_json(arguments: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Refuse NaN and infinities: JSON has no such numbers.

    Python's ``json.loads`` accepts ``NaN``/``Infinity`` in model output, but
    pydantic writes them as ``null`` (and strict JSON readers, providers
    included, reject the constants), so such a call could not round-trip.
    """
    where = _non_finite_path(arguments, "arguments")
    if where is not None:
        raise ValueError(f"{where} is not a finite number (JSON has no NaN or Infinity)")
    return arguments


MAX_ARGUMENTS_ERROR = 600
"""Longest ``ToolCall.arguments_error`` (the excerpt is cut to fit; a hostile model's
megabytes of arguments never reach history)."""

ARGUMENTS_EXCERPT = 80
"""Characters of the raw arguments quoted on each side of the point where parsing failed."""


def invalid_arguments(raw: str, reason: str, position: int | None = None) -> str:
    """The ``arguments_error`` for ``raw`` arguments that failed with ``reason``.

    Says what went wrong, where (``at char N``), how long the text was, and
    quotes a bounded excerpt around the failure (its start when ``position``
    is unknown), so the model can see and correct its mistake. Pure and
    bounded whatever the size of ``raw``.
    """
    reason = " ".join(reason.split())[:200]
    if position is not None:  # json's "Unterminated string starting at" names no place
        reason = f"{reason.removesuffix(' at')} at char {position}"
    start = 0 if position is None else max(0, position - ARGUMENTS_EXCERPT)
    end = min(len(raw), (position or 0) + ARGUMENTS_EXCERPT)
    excerpt = raw[start:end]
    text = (
        f"arguments are not valid JSON: {reason} (of {len(raw)} chars); near: "
        f"{'…' if start > 0 else ''}{excerpt!r}{'…' if end < len(raw) else ''}"
    )
    return text[:MAX_ARGUMENTS_ERROR]


class ToolCall(Message):
    """A tool call the model asked for.

    ``arguments`` is the decoded JSON object the model produced; the tool's
    arguments model validates it before anything runs.

    The model is frozen but ``arguments`` is a plain ``dict`` (pydantic does
    not deep-freeze, and the LLM wire, hooks and tools read and JSON-encode it
    as a dict): treat it as read-only and copy it before changing anything,
    since the same call object is shared by history, events and tools. A dict
    field also makes a ``ToolCall`` unhashable (it compares by value). NaN and
    infinities are refused (a validation error on ``arguments`` naming where):
    JSON cannot carry them, so the call could not round-trip.
    """

    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    arguments: Annotated[dict[str, JsonValue], AfterValidator(_finite_json)] = Field(
        default_factory=dict
    )
    arguments_error: str | None = Field(default=None, max_length=MAX_ARGUMENTS_ERROR)
    """Set when the model's arguments could not be used (not valid JSON, not a
    JSON object, nested too deeply): why, where, and an excerpt of what it sent
    (:func:`invalid_arguments`). ``arguments`` is then empty. The LLM layer
    keeps such a call instead of failing the whole answer; the worker decides
    (it hands the model an error result, a bounded number of times per run)."""


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
