"""The Anthropic Messages API wire format: the request, as pure functions.

What :class:`~actors.llm.anthropic.AnthropicModel` sends, kept apart from the
HTTP code so every rule is unit- and property-tested (what it reads back is
:mod:`.anthropic_answer`; what both wires share is :mod:`.codec`):

* :func:`encode_history` turns Fore's history (any sequence of items) into a
  ``system`` field and ``messages`` the API accepts: roles alternate and start
  with ``user``; a turn's tool results are ``tool_result`` blocks merged into
  one user turn, first in it; system messages after the start become
  ``<system-reminder>`` text in a user turn (the API has no system role in
  ``messages``); empty answers, orphan results and unanswered calls -- which
  the API rejects -- are made valid deterministically (same history, same
  bytes).
* :func:`request_body` / :func:`request_payload` build the body, with the
  stable parts first (tools, system, messages) and the ``cache_control``
  breakpoints of :func:`place_breakpoints`.

**Prompt caching.** The API caches nothing unless asked: a ``cache_control``
marker on a block makes the prefix up to and including it (tools, then
system, then messages) a cache entry, at most four markers a request. Fore
marks the last tool, the last system block, the end of the previous model
turn (the last assistant message before the final user turn) and the final
message. The previous turn's end is the point a main request, its forks
(suggestion, speculation, pipelined -- the same snapshot byte for byte) and the
next main request all share, so each of them reads what the one before wrote
there; the final message's marker writes the entry the next request reads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fore.actors.llm.codec import dumps
from fore.messages.conversation import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import NamedToolChoice, ToolChoice
from fore.messages.tools import ToolDefinition

Json = dict[str, Any]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header: the API version this codec speaks."""

MAX_BREAKPOINTS = 4
"""The most ``cache_control`` markers one request may carry (the API's limit)."""

CacheTtl = Literal["5m", "1h"]

OMITTED_START = "(earlier conversation omitted)"
"""The user turn put before a history that starts with an answer (a trimmed fork)."""
EMPTY_USER = "(empty message)"
"""The text of a user turn that would otherwise have no content."""
CONTINUE = "Continue."
"""The user turn after a history that ends with an answer (the API wants a user turn)."""
NO_RESULT = "(no result was recorded for this tool call)"
"""The ``tool_result`` of a call history holds no result for."""

_TOOL_ID = re.compile(r"[^A-Za-z0-9_-]")


def tool_use_id(call_id: str) -> str:
    """``call_id`` as the API accepts it (``^[A-Za-z0-9_-]+$``): other characters become ``_``.

    Ids from other providers (``functions.read:0``) are otherwise refused;
    the mapping is deterministic, so a call and its result keep matching.
    """
    return _TOOL_ID.sub("_", call_id) or "_"


def reminder_text(text: str) -> str:
    """A system message that is not at the start of history, as user-turn text."""
    return f"<system-reminder>\n{text}\n</system-reminder>"


# -- request ---------------------------------------------------------------------------------


def to_anthropic_tools(tools: Sequence[ToolDefinition]) -> list[Json]:
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in tools
    ]


def to_anthropic_tool_choice(choice: ToolChoice) -> Json:
    """``auto`` / ``required`` / ``none`` / a named tool as the API spells them.

    The ``resolve`` tool's forced choice (``NamedToolChoice("resolve")``) is
    ``{"type": "tool", "name": "resolve"}``; ``required`` is ``any``.
    """
    if isinstance(choice, NamedToolChoice):
        return {"type": "tool", "name": choice.name}
    if choice == "required":
        return {"type": "any"}
    return {"type": choice}


@dataclass
class _Turns:
    """Messages being built: consecutive user content merges into one turn."""

    messages: list[Json] = field(default_factory=list)
    results: list[Json] = field(default_factory=list)
    """``tool_result`` blocks of the user turn being built (they go first in it)."""
    texts: list[Json] = field(default_factory=list)
    open_calls: dict[str, None] = field(default_factory=dict)
    """``tool_use`` ids of the last assistant turn without a result yet (in order)."""

    def user_text(self, text: str) -> None:
        if text.strip():
            self.texts.append({"type": "text", "text": text})

    def result(self, item: ToolResult) -> None:
        call_id = tool_use_id(item.call_id)
        if call_id not in self.open_calls:
            # An orphan (its call was trimmed away, or answered already): the API
            # refuses a tool_result without its tool_use, so it is kept as text.
            self.user_text(f"[result of tool {item.name} (call {item.call_id})]\n{item.output}")
            return
        del self.open_calls[call_id]
        block: Json = {"type": "tool_result", "tool_use_id": call_id}
        if item.output:
            block["content"] = item.output
        if item.is_error:
            block["is_error"] = True
        self.results.append(block)

    def flush_user(self, *, force: bool = False) -> None:
        """End the user turn being built (``force``: even if it has no content yet)."""
        results = self.results
        for call_id in self.open_calls:  # unanswered calls: the API wants a result for each
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": NO_RESULT,
                    "is_error": True,
                }
            )
        self.open_calls = {}
        blocks = results + self.texts
        if not blocks and not force:
            return
        if not blocks:
            blocks = [{"type": "text", "text": EMPTY_USER}]
        self.messages.append({"role": "user", "content": blocks})
        self.results = []
        self.texts = []

    def assistant(self, item: AssistantMessage) -> None:
        blocks: list[Json] = []
        if item.text.strip():
            blocks.append({"type": "text", "text": item.text})
        seen: set[str] = set()
        for call in item.tool_calls:
            call_id = tool_use_id(call.id)
            if call_id in seen:  # the API refuses duplicate ids in one turn
                continue
            seen.add(call_id)
            blocks.append(
                {"type": "tool_use", "id": call_id, "name": call.name, "input": call.arguments}
            )
        if not blocks:
            return  # an empty answer: nothing the API would accept (its turn merges away)
        if self.results or self.texts or self.open_calls:
            self.flush_user()
        if not self.messages:  # history starts with an answer (a trimmed fork)
            self.messages.append(
                {"role": "user", "content": [{"type": "text", "text": OMITTED_START}]}
            )
        last = self.messages[-1]
        if last["role"] == "assistant":
            last["content"].extend(blocks)  # two answers in a row: one turn
        else:
            self.messages.append({"role": "assistant", "content": blocks})
        for block in blocks:
            if block["type"] == "tool_use":
                self.open_calls[block["id"]] = None


def encode_history(
    items: Sequence[Item], *, prefill: str | None = None
) -> tuple[list[Json], list[Json]]:
    """``(system blocks, messages)`` for ``items``: always a valid Messages request.

    Leading system messages become the top-level ``system`` (one text block
    each); every later one is a ``<system-reminder>`` in a user turn. See the
    module docs for the rest. ``prefill``: an answer to go on from (a paused
    turn), sent as the final assistant message (without trailing whitespace,
    which the API refuses there).
    """
    system: list[Json] = []
    turns = _Turns()
    started = False
    for item in items:
        if isinstance(item, SystemMessage):
            if not started:
                if item.text.strip():
                    system.append({"type": "text", "text": item.text})
                continue
            turns.user_text(reminder_text(item.text))
            continue
        started = True
        if isinstance(item, UserMessage):
            turns.user_text(item.text)
        elif isinstance(item, ToolResult):
            turns.result(item)
        elif isinstance(item, AssistantMessage):
            turns.assistant(item)
        else:  # pragma: no cover - Item is a closed union
            raise TypeError(f"not a conversation item: {item!r}")
    turns.flush_user()
    messages = turns.messages
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": OMITTED_START}]})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": [{"type": "text", "text": CONTINUE}]})
    if prefill is not None and prefill.rstrip():
        messages.append(
            {"role": "assistant", "content": [{"type": "text", "text": prefill.rstrip()}]}
        )
    return system, messages


def cache_control(ttl: CacheTtl = "5m") -> Json:
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def previous_turn_end(messages: Sequence[Json]) -> int | None:
    """Index of the last assistant message before the final message (``None``: none)."""
    for index in range(len(messages) - 2, -1, -1):
        if messages[index]["role"] == "assistant":
            return index
    return None


def place_breakpoints(
    tools: list[Json],
    system: list[Json],
    messages: list[Json],
    ttl: CacheTtl = "5m",
    *,
    final: bool = True,
) -> int:
    """Mark the cache breakpoints (in place, on the last block of each); how many.

    The last tool, the last system block, the end of the previous model turn
    and (``final``) the final message: at most :data:`MAX_BREAKPOINTS`. A
    one-shot fork (a suggestion) passes ``final=False``: nothing will extend
    its own last message, and a cache write costs more than plain input. The
    marked blocks must be fresh dicts (this writes into them).
    """
    marker = cache_control(ttl)
    placed = 0
    targets: list[Json] = []
    if tools:
        targets.append(tools[-1])
    if system:
        targets.append(system[-1])
    turn_end = previous_turn_end(messages)
    if turn_end is not None:
        targets.append(messages[turn_end]["content"][-1])
    if messages and final:
        targets.append(messages[-1]["content"][-1])
    for block in targets[:MAX_BREAKPOINTS]:
        block["cache_control"] = marker
        placed += 1
    return placed


@dataclass(frozen=True)
class Thinking:
    """Extended thinking for a request: its token budget (the API's minimum is 1,024)."""

    budget_tokens: int

    def __post_init__(self) -> None:
        if self.budget_tokens < 1024:
            raise ValueError(f"thinking budget_tokens must be >= 1024, got {self.budget_tokens}")


def request_body(
    *,
    model: str,
    items: Sequence[Item],
    tools: Sequence[ToolDefinition],
    tool_choice: ToolChoice | None,
    max_tokens: int,
    stream: bool,
    temperature: float | None = None,
    thinking: Thinking | None = None,
    cache: bool = True,
    cache_ttl: CacheTtl = "5m",
    cache_final: bool = True,
    prefill: str | None = None,
) -> Json:
    """The JSON body of a Messages request.

    Key order is part of the contract: ``model``, ``tools``, ``system`` and
    ``messages`` come first, and what differs between a main request and its
    forks (``tool_choice``, ``max_tokens``, ``thinking``, ``stream``) after
    them, so two requests that share a prompt prefix also share the bytes of
    their bodies up to it. ``tool_choice`` is sent only with tools (the API
    has nothing to choose from without them).
    """
    system, messages = encode_history(items, prefill=prefill)
    tool_blocks = to_anthropic_tools(tools)
    if cache:
        place_breakpoints(tool_blocks, system, messages, cache_ttl, final=cache_final)
    body: Json = {"model": model}
    if tool_blocks:
        body["tools"] = tool_blocks
    if system:
        body["system"] = system
    body["messages"] = messages
    if tool_blocks and tool_choice is not None:
        body["tool_choice"] = to_anthropic_tool_choice(tool_choice)
    body["max_tokens"] = max_tokens
    if thinking is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking.budget_tokens}
    elif temperature is not None:
        body["temperature"] = min(1.0, temperature)  # the API's range is 0..1
    body["stream"] = stream
    return body


def request_payload(**fields: Any) -> bytes:
    """:func:`request_body` encoded (same arguments)."""
    return dumps(request_body(**fields)).encode()


__all__ = [
    "ANTHROPIC_VERSION",
    "MAX_BREAKPOINTS",
    "Thinking",
    "encode_history",
    "place_breakpoints",
    "request_body",
    "request_payload",
    "to_anthropic_tool_choice",
    "to_anthropic_tools",
    "tool_use_id",
]
