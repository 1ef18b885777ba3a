"""The input each hook event gets, mutable only where a hook may edit it.

Every edit is checked when the hook answers (:func:`~actors.worker.hook_chain.edit_problem`);
the identity fields of the tool-call contexts cannot be assigned at all (the
worker pairs calls and results by id). Re-exported by :mod:`actors.worker.hooks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fore.messages.conversation import Item, Segment
from fore.messages.llm import ResponseSchema, ToolChoice
from fore.messages.tools import ToolDefinition


@dataclass
class PromptContext:
    """on_prompt_submit: the user's input (``text`` may be rewritten)."""

    session_id: str
    purpose: str
    text: str
    segments: tuple[Segment, ...] = ()


@dataclass
class LlmRequestContext:
    """pre_llm_request: a *copy* of what is about to be sent (edit it freely).

    Edits change this request only, never the session's history.
    """

    session_id: str
    purpose: str
    turn: int
    messages: list[Item]
    tools: list[ToolDefinition]
    tool_choice: ToolChoice = "auto"
    model_name: str = ""
    response_schema: ResponseSchema | None = None
    """Structured output's JSON-schema response format (set by Fore; hooks may read it)."""


@dataclass(frozen=True)
class ToolMeta:
    """Read-only facts about a call."""

    description: str
    exclusive: bool
    index: int
    batch_size: int
    turn: int


class _ReadOnlyFields:
    """Fields named in ``_read_only`` can be set once (by ``__init__``), never again.

    The worker pairs every call with its result by id; a hook that could
    rename the id or the tool would break that pairing, so only the fields a
    hook is meant to edit stay assignable.
    """

    _read_only: ClassVar[frozenset[str]] = frozenset()

    def __setattr__(self, key: str, value: Any) -> None:
        if key in self._read_only and key in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.{key} is read-only: hooks may not change it"
            )
        object.__setattr__(self, key, value)

    def __delattr__(self, key: str) -> None:
        if key in self._read_only:
            raise AttributeError(
                f"{type(self).__name__}.{key} is read-only: hooks may not delete it"
            )
        object.__delattr__(self, key)


@dataclass
class ToolCallContext(_ReadOnlyFields):
    """pre_tool_call: ``arguments`` is a private copy the hook may rewrite.

    Everything else is read-only: the call that runs is built from the
    model's own id and tool name plus these arguments.
    """

    _read_only: ClassVar[frozenset[str]] = frozenset(
        {"session_id", "purpose", "call_id", "name", "meta", "tool"}
    )

    session_id: str
    purpose: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    meta: ToolMeta
    tool: Any = None
    """The tool object (for state access), ``None`` for an unknown tool."""


@dataclass
class ToolOutcome:
    """The result a post_tool_call hook may rewrite."""

    output: str
    is_error: bool


@dataclass
class PostToolCallContext(_ReadOnlyFields):
    """post_tool_call: the call and its (rewritable) result; the rest is read-only.

    ``arguments`` are the ones the call ran with (a copy: editing them
    changes nothing).
    """

    _read_only: ClassVar[frozenset[str]] = frozenset(
        {"session_id", "purpose", "call_id", "name", "outcome", "meta", "tool"}
    )

    session_id: str
    purpose: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: ToolOutcome
    outcome: str
    meta: ToolMeta
    tool: Any = None


@dataclass
class TurnEndContext:
    """on_turn_end: the history including the final answer (a copy)."""

    session_id: str
    purpose: str
    turn: int
    messages: list[Item]
    final_text: str


@dataclass
class AbortContext:
    """on_abort: why the run ended early."""

    session_id: str
    purpose: str
    reason: str
    status: str
