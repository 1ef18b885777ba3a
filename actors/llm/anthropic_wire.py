"""The Anthropic Messages API wire format, as pure functions.

What :class:`~actors.llm.anthropic.AnthropicModel` sends and reads, kept apart
from the HTTP code so every rule is unit- and property-tested:

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
* :class:`AnthropicAssembler` turns streamed events (``message_start``,
  ``content_block_*``, ``message_delta``, ``ping``, ``error``) into Fore's
  events and the final message; :func:`complete_from_message` reads a
  non-streamed answer; :func:`anthropic_error` types an ``error`` object.

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

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fore.actors.llm.errors import LlmException, error_from_payload, llm_error
from fore.actors.llm.wire import (
    MAX_ANSWER_CHARS,
    MAX_TOOL_CALLS,
    answer_too_large,
    arrived_summary,
    incomplete_stream,
    too_many_calls,
    tool_call,
)
from fore.messages.conversation import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import LlmToolCallDelta, NamedToolChoice, ToolChoice, Usage
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


def dumps(value: Any) -> str:
    """The wire form of JSON: compact, not ASCII-escaped (what the mock's cache keys hash)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def request_payload(**fields: Any) -> bytes:
    """:func:`request_body` encoded (same arguments)."""
    return dumps(request_body(**fields)).encode()


# -- response ---------------------------------------------------------------------------------

STOP_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
    "pause_turn": "pause_turn",
}
"""Anthropic's ``stop_reason`` as Fore's ``finish_reason``.

``max_tokens`` (and a full context window) is ``length``: the worker ends the
run ``cut_off``, as for any provider. ``refusal`` is ``content_filter``, as
OpenAI reports a policy stop. ``pause_turn`` (a long turn the API
paused) is continued by :class:`~actors.llm.anthropic.AnthropicModel`, which sends
the answer so far back as a prefill (``request_body(prefill=...)``)."""


def finish_reason(stop_reason: Any) -> str:
    if not isinstance(stop_reason, str) or not stop_reason:
        raise llm_error("protocol", "the answer has no stop_reason", retryable=True)
    return STOP_REASONS.get(stop_reason, stop_reason)


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def usage_from(data: Any) -> Usage | None:
    """An Anthropic ``usage`` object as :class:`Usage`.

    The API's ``input_tokens`` counts only what was neither read from nor
    written to the cache; Fore's ``prompt_tokens`` is the whole prompt (as
    OpenAI reports it), so the three are added up.
    """
    if not isinstance(data, Mapping):
        return None
    uncached = _count(data, "input_tokens")
    read = _count(data, "cache_read_input_tokens")
    written = _count(data, "cache_creation_input_tokens")
    output = _count(data, "output_tokens")
    prompt = uncached + read + written
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=output,
        total_tokens=prompt + output,
        cached_tokens=read,
        cache_write_tokens=written,
    )


_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""Each documented error ``type`` and the HTTP status the API answers it with."""


def anthropic_error(error: Any, *, where: str) -> LlmException:
    """Type an Anthropic ``error`` object (``{"type": ..., "message": ...}``) sent in a
    stream or a 200 body: its ``type`` decides the kind, as its status would."""
    if isinstance(error, Mapping):
        status = _ERROR_STATUS.get(str(error.get("type")))
        if status is not None:
            return error_from_payload(
                {"message": error.get("message"), "type": error.get("type"), "status": status},
                where=where,
            )
    return error_from_payload(error, where=where)


@dataclass
class _Block:
    kind: str
    call_id: str = ""
    name: str = ""
    call_index: int = -1
    parts: list[str] = field(default_factory=list)


class AnthropicAssembler:
    """Feeds on decoded stream events; yields Fore events; builds the final message.

    Bounded like the OpenAI assembler: past ``max_answer_chars`` of text and
    tool input, or ``max_tool_calls`` calls, an event is a non-retryable
    protocol error. ``progress`` counts events that said something (text, a
    tool call or its input, thinking, a stop reason); ``ping`` says nothing.
    Text is collected in :attr:`text` (the caller passes new pieces on).
    """

    def __init__(
        self,
        request_id: str,
        *,
        tool_events: bool = True,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        max_tool_calls: int = MAX_TOOL_CALLS,
    ) -> None:
        self.request_id = request_id
        self.tool_events = tool_events
        self.max_answer_chars = max_answer_chars
        self.max_tool_calls = max_tool_calls
        self.text: list[str] = []
        self.blocks: dict[int, _Block] = {}
        self.calls: list[_Block] = []
        self.stop_reason: str | None = None
        self.stopped = False
        """``message_stop`` arrived: the answer is whole."""
        self.started = False
        self.events = 0
        self.size = 0
        self.progress = 0
        self._usage: dict[str, int] = {}

    def _grow(self, chars: int) -> None:
        self.size += chars
        if self.size > self.max_answer_chars:
            raise answer_too_large(self.max_answer_chars, tool_input="input")

    def _merge_usage(self, data: Any) -> None:
        # message_start carries the input counts, message_delta the (cumulative)
        # output count and sometimes the input counts again: later values win.
        if isinstance(data, Mapping):
            for key in (
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
            ):
                if key in data:
                    self._usage[key] = _count(data, key)

    def feed(self, event: Any) -> list[LlmToolCallDelta]:
        """One decoded event; the tool-call events it makes (text goes to :attr:`text`)."""
        if not isinstance(event, Mapping):
            raise llm_error("protocol", "stream event is not a JSON object", retryable=True)
        self.events += 1
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "ping":
            return []
        if kind == "content_block_start":
            return self._start(event)
        if kind == "content_block_stop":
            return []
        if kind == "message_start":
            self.started = True
            message = event.get("message")
            if isinstance(message, Mapping):
                self._merge_usage(message.get("usage"))
            return []
        if kind == "message_delta":
            delta = event.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, Mapping) else None
            if isinstance(reason, str) and reason:
                self.stop_reason = reason
                self.progress += 1
            self._merge_usage(event.get("usage"))
            return []
        if kind == "message_stop":
            self.stopped = True
            return []
        if kind == "error":
            raise anthropic_error(event.get("error"), where="stream")
        return []  # an event type this client does not know: skipped, as the SDK does

    def _index(self, event: Mapping[str, Any]) -> int:
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise llm_error("protocol", "content block event without a valid index", retryable=True)
        return index

    def _start(self, event: Mapping[str, Any]) -> list[LlmToolCallDelta]:
        index = self._index(event)
        raw = event.get("content_block")
        if not isinstance(raw, Mapping):
            raise llm_error("protocol", "content_block_start without a block", retryable=True)
        kind = str(raw.get("type"))
        block = self.blocks[index] = _Block(kind)
        if kind == "text":
            text = raw.get("text")
            if isinstance(text, str) and text:
                self._grow(len(text))
                self.text.append(text)
                self.progress += 1
            return []
        if kind != "tool_use":
            if kind in ("thinking", "redacted_thinking"):
                self.progress += 1
            return []  # thinking, server tools ...: not part of Fore's answer
        call_id, name = raw.get("id"), raw.get("name")
        if not isinstance(name, str) or not name:
            raise llm_error("protocol", f"tool_use block #{index} has no name", retryable=True)
        if len(self.calls) >= self.max_tool_calls:
            raise too_many_calls(self.max_tool_calls)
        block.call_id = call_id if isinstance(call_id, str) and call_id else ""
        block.name = name
        block.call_index = len(self.calls)
        self._grow(len(block.call_id) + len(name))
        self.calls.append(block)
        self.progress += 1
        if not self.tool_events:
            return []
        return [
            LlmToolCallDelta.model_construct(
                request_id=self.request_id,
                index=block.call_index,
                call_id=block.call_id or None,
                name=name,
                arguments_delta="",
            )
        ]

    def _delta(self, event: Mapping[str, Any]) -> list[LlmToolCallDelta]:
        block = self.blocks.get(self._index(event))
        delta = event.get("delta")
        if block is None or not isinstance(delta, Mapping):
            raise llm_error(
                "protocol", "content_block_delta for a block that never started", retryable=True
            )
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                self._grow(len(text))
                self.text.append(text)
                self.progress += 1
            return []
        if kind == "input_json_delta":
            fragment = delta.get("partial_json")
            if block.kind != "tool_use" or not isinstance(fragment, str):
                raise llm_error("protocol", "malformed input_json_delta", retryable=True)
            if not fragment:
                return []
            self._grow(len(fragment))
            block.parts.append(fragment)
            self.progress += 1
            if not self.tool_events:
                return []
            return [
                LlmToolCallDelta.model_construct(
                    request_id=self.request_id,
                    index=block.call_index,
                    call_id=None,
                    name=None,
                    arguments_delta=fragment,
                )
            ]
        if kind in ("thinking_delta", "signature_delta"):
            self.progress += 1
        return []  # thinking, citations ...: not part of Fore's answer

    def arrived(self) -> str:
        return arrived_summary(
            self.events,
            "event",
            text_chars=sum(len(t) for t in self.text),
            calls=len(self.calls),
            input_chars=sum(sum(len(p) for p in c.parts) for c in self.calls),
            tool_input="input",
        )

    @property
    def usage(self) -> Usage:
        return usage_from(self._usage) or Usage()

    def finish(self) -> tuple[AssistantMessage, Usage, str]:
        """The complete answer; a stream without a stop reason is ``incomplete``."""
        if self.stop_reason is None:
            how = "sent message_stop" if self.stopped else "closed"
            raise incomplete_stream(how, "stop_reason", self.arrived())
        reason = finish_reason(self.stop_reason)
        calls = _calls(
            [(c.call_id, c.name, "".join(c.parts)) for c in self.calls],
            self.request_id,
            cut=reason == "length",
        )
        message = AssistantMessage(text="".join(self.text), tool_calls=tuple(calls))
        return message, self.usage, reason


def _calls(raw: Sequence[tuple[str, str, str]], request_id: str, *, cut: bool) -> list[ToolCall]:
    """Assembled calls; a call cut off mid-input (``cut``) is dropped, as for OpenAI."""
    calls = []
    for index, (call_id, name, text) in enumerate(raw):
        call = tool_call(call_id or f"toolu_{request_id}_{index}", name, text)
        if cut and call.arguments_error is not None:
            continue
        calls.append(call)
    return calls


def complete_from_message(
    request_id: str, body: Any, *, max_tool_calls: int = MAX_TOOL_CALLS
) -> tuple[AssistantMessage, Usage, str]:
    """A non-streamed Messages answer as (message, usage, finish reason).

    A body is already capped in bytes; ``max_tool_calls`` bounds it as the
    stream is bounded, so both paths refuse the same answer."""
    if not isinstance(body, Mapping) or body.get("type") != "message":
        if isinstance(body, Mapping) and body.get("type") == "error":
            raise anthropic_error(body.get("error"), where="response body")
        raise llm_error("protocol", "response is not a Messages API message", retryable=True)
    content = body.get("content")
    if not isinstance(content, list):
        raise llm_error("protocol", "response content is not an array", retryable=True)
    reason = finish_reason(body.get("stop_reason"))
    texts: list[str] = []
    raw_calls: list[tuple[str, str, str]] = []
    for index, block in enumerate(content):
        if not isinstance(block, Mapping):
            raise llm_error("protocol", f"content block #{index} is malformed", retryable=True)
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            name = block.get("name")
            if not isinstance(name, str) or not name:
                raise llm_error("protocol", f"tool_use block #{index} has no name", retryable=True)
            if len(raw_calls) >= max_tool_calls:
                raise too_many_calls(max_tool_calls)
            tool_input = block.get("input")
            text = dumps(tool_input) if isinstance(tool_input, Mapping) else dumps(tool_input or {})
            call_id = block.get("id")
            raw_calls.append((call_id if isinstance(call_id, str) else "", name, text))
    calls = _calls(raw_calls, request_id, cut=reason == "length")
    message = AssistantMessage(text="".join(texts), tool_calls=tuple(calls))
    return message, usage_from(body.get("usage")) or Usage(), reason


__all__ = [
    "ANTHROPIC_VERSION",
    "MAX_BREAKPOINTS",
    "STOP_REASONS",
    "AnthropicAssembler",
    "Thinking",
    "anthropic_error",
    "complete_from_message",
    "encode_history",
    "finish_reason",
    "place_breakpoints",
    "request_body",
    "request_payload",
    "to_anthropic_tool_choice",
    "to_anthropic_tools",
    "tool_use_id",
    "usage_from",
]
