"""Reading an Anthropic Messages API answer, as pure functions.

* :class:`AnthropicAssembler` turns streamed events (``message_start``,
  ``content_block_*``, ``message_delta``, ``ping``, ``error``) into Fore's
  events and the final message, bounded like the OpenAI assembler;
* :func:`complete_from_message` reads a non-streamed answer;
* :func:`anthropic_error` types an ``error`` object by its ``type``, as its
  HTTP status would; :func:`usage_from` counts the whole prompt (cached,
  written and uncached); :data:`STOP_REASONS` maps ``stop_reason`` to Fore's
  ``finish_reason``.

What :class:`~actors.llm.anthropic.AnthropicModel` sends is
:mod:`.anthropic_wire`; what both wires share (arguments read back, an
answer's bounds) is :mod:`.codec`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fore.actors.llm.codec import (
    MAX_ANSWER_CHARS,
    MAX_TOOL_CALLS,
    answer_too_large,
    arrived_summary,
    dumps,
    incomplete_stream,
    too_many_calls,
    tool_call,
)
from fore.actors.llm.errors import LlmException, error_from_payload, llm_error
from fore.messages.conversation import AssistantMessage, ToolCall
from fore.messages.llm import LlmToolCallDelta, Usage

__all__ = [
    "STOP_REASONS",
    "AnthropicAssembler",
    "anthropic_error",
    "complete_from_message",
    "finish_reason",
    "usage_from",
]

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
