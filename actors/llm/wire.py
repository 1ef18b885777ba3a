"""The OpenAI Chat Completions wire format, as pure functions.

* conversion of conversation items, tool definitions and tool choice into the
  request body -- deterministic (same items, same bytes), which is what lets
  forked requests share the provider's prefix cache;
* :class:`StreamAssembler`, which turns streamed chunks into Fore events and
  the final assistant message. Tool-call arguments are concatenated as raw
  text and parsed only at the end, so fragments may split anywhere (even
  inside an escape sequence). Anything malformed is a typed protocol error.

What the Anthropic wire shares with this one -- the JSON both write, tool-call
arguments read back, an answer's bounds -- is :mod:`.codec`.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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
from fore.actors.llm.errors import error_from_payload, llm_error
from fore.actors.llm.script import arguments_json
from fore.messages.conversation import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import (
    LlmRequest,
    LlmTextDelta,
    LlmToolCallDelta,
    NamedToolChoice,
    ToolChoice,
    Usage,
)
from fore.messages.tools import ToolDefinition

Json = dict[str, Any]


def to_openai_message(item: Item) -> Json:
    if isinstance(item, SystemMessage):
        return {"role": "system", "content": item.text}
    if isinstance(item, UserMessage):
        return {"role": "user", "content": item.text}
    if isinstance(item, AssistantMessage):
        # Always a string, "" when the turn was only tool calls: OpenAI accepts
        # ``null`` there too, but llama.cpp-class servers answer ``null`` with a
        # 500 (their chat templates concatenate the content), and every server
        # accepts "".
        message: Json = {"role": "assistant", "content": item.text}
        if item.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments_json(call.arguments)},
                }
                for call in item.tool_calls
            ]
        return message
    if isinstance(item, ToolResult):
        return {"role": "tool", "tool_call_id": item.call_id, "content": item.output}
    raise TypeError(f"not a conversation item: {item!r}")


def to_openai_messages(items: Sequence[Item]) -> list[Json]:
    return [to_openai_message(item) for item in items]


_TOOL_WIRE: dict[int, tuple[ToolDefinition, Json]] = {}


def _tool_wire(tool: ToolDefinition) -> Json:
    # Definitions are frozen and built once per registry, so their wire form is
    # built once too (keyed by identity, holding the object so the id stays valid).
    cached = _TOOL_WIRE.get(id(tool))
    if cached is not None and cached[0] is tool:
        return cached[1]
    wire: Json = {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
    if len(_TOOL_WIRE) > 4096:
        _TOOL_WIRE.clear()
    _TOOL_WIRE[id(tool)] = (tool, wire)
    return wire


def to_openai_tools(tools: Sequence[ToolDefinition]) -> list[Json]:
    return [_tool_wire(tool) for tool in tools]


def to_openai_tool_choice(choice: ToolChoice) -> str | Json:
    if isinstance(choice, NamedToolChoice):
        return {"type": "function", "function": {"name": choice.name}}
    return choice


MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
"""The body field that carries a request's output cap. OpenAI's reasoning models
reject ``max_tokens`` and want ``max_completion_tokens``; most other servers know
only ``max_tokens``."""


def request_body(
    request: LlmRequest, model_name: str, *, max_tokens_field: MaxTokensField = "max_tokens"
) -> Json:
    """The JSON body of a chat completion request."""
    tools = to_openai_tools(request.tools) if request.tools else None
    return _body(request, model_name, to_openai_messages(request.messages), tools, max_tokens_field)


def _body(
    request: LlmRequest,
    model_name: str,
    messages: Any,
    tools: Any,
    max_tokens_field: MaxTokensField = "max_tokens",
) -> Json:
    body: Json = {"model": model_name, "messages": messages, "stream": request.stream}
    if request.stream:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = tools
        body["tool_choice"] = to_openai_tool_choice(request.tool_choice)
    if request.max_tokens is not None:
        body[max_tokens_field] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.response_schema is not None:  # structured output (wins over JSON mode)
        schema = request.response_schema
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": schema.name,
                "schema": schema.json_schema,
                "strict": schema.strict,
            },
        }
    elif request.json_response:
        body["response_format"] = {"type": "json_object"}
    return body


class _EncodedCache:
    """Wire JSON of frozen objects (history items, tool definitions) by identity.

    A conversation is re-sent whole on every request, so encoding it costs
    O(history) each time; items are frozen, so each is encoded once and the
    body is spliced from the cached pieces.

    Memory: an entry holds only the JSON and a *weak* reference to its object
    (which guards against a reused ``id``), so the cache never keeps a
    finished session's history alive; and entries leave first-in first-out
    past ``limit`` entries or ``max_bytes`` of JSON, so a few huge tool
    outputs cannot pin hundreds of MB either. A single JSON larger than a
    quarter of ``max_bytes`` is not cached at all.

    Threads: every :class:`~actors.llm.loop.LlmLoop` encodes on its own
    thread, so mutations take a lock; a lookup is one dict ``get`` (atomic
    under the GIL) and stays lock-free.
    """

    def __init__(self, limit: int, max_bytes: int) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[int, tuple[weakref.ref[Any], str]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, obj: object, encode: Callable[[Any], Any]) -> str:
        key = id(obj)
        hit = self._entries.get(key)
        if hit is not None and hit[0]() is obj:
            return hit[1]
        text = dumps(encode(obj))
        size = sys.getsizeof(text)
        if size > self.max_bytes // 4:
            return text
        try:
            ref = weakref.ref(obj)
        except TypeError:  # not weak-referenceable: encode every time
            return text
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= sys.getsizeof(old[1])
            self._entries[key] = (ref, text)
            self.bytes += size
            while len(self._entries) > self.limit or self.bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self.bytes -= sys.getsizeof(evicted)
        return text

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0


_ITEMS = _EncodedCache(limit=65_536, max_bytes=64 * 1024 * 1024)
_TOOLS = _EncodedCache(limit=4_096, max_bytes=16 * 1024 * 1024)


def request_payload(
    request: LlmRequest, model_name: str, *, max_tokens_field: MaxTokensField = "max_tokens"
) -> bytes:
    """The encoded body: exactly ``json.dumps(request_body(...))``, compactly.

    Built from per-item cached JSON, so a long conversation costs only its new
    items to encode.
    """
    # Placeholders: a bare ``"messages":0`` cannot occur inside a JSON string
    # (its quotes would be escaped), so partition finds exactly the key.
    text = dumps(_body(request, model_name, 0, 0, max_tokens_field))
    messages = ",".join(_ITEMS.get(item, to_openai_message) for item in request.messages)
    head, _, tail = text.partition('"messages":0')
    text = f'{head}"messages":[{messages}]{tail}'
    if request.tools:
        tools = ",".join(_TOOLS.get(tool, _tool_wire) for tool in request.tools)
        head, _, tail = text.partition('"tools":0')
        text = f'{head}"tools":[{tools}]{tail}'
    return text.encode()


def usage_from(data: Any) -> Usage | None:
    if not isinstance(data, Mapping):
        return None
    details = data.get("prompt_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, Mapping) else 0
    try:
        prompt = int(data.get("prompt_tokens") or 0)
        completion = int(data.get("completion_tokens") or 0)
        total = int(data.get("total_tokens") or prompt + completion)
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=total,
            cached_tokens=int(cached or 0),
        )
    except (TypeError, ValueError):
        return None


@dataclass
class _PartialCall:
    call_id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


class StreamAssembler:
    """Feeds on decoded stream chunks; yields events; builds the final message.

    Bounded: past ``max_answer_chars`` of text and tool-call arguments, or
    ``max_tool_calls`` calls, a chunk is a non-retryable protocol error.
    ``progress`` counts chunks that carried something (text, arguments, a tool
    call, reasoning, a finish reason): a stream of empty deltas makes none.
    """

    def __init__(
        self,
        request_id: str,
        *,
        text_events: bool = True,
        tool_events: bool = True,
        max_answer_chars: int = MAX_ANSWER_CHARS,
        max_tool_calls: int = MAX_TOOL_CALLS,
    ) -> None:
        self.request_id = request_id
        # Events nobody will receive are not built (one per fragment adds up).
        self.text_events = text_events
        self.tool_events = tool_events
        self.max_answer_chars = max_answer_chars
        self.max_tool_calls = max_tool_calls
        self.text: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.chunks = 0
        self.size = 0
        """Characters of text, arguments, ids and names so far (what the cap bounds)."""
        self.progress = 0
        self._last_index: int | None = None
        self.model: str | None = None
        """The chunks' ``model`` (the model that answered; for telemetry)."""

    def _grow(self, chars: int) -> None:
        self.size += chars
        if self.size > self.max_answer_chars:
            raise answer_too_large(self.max_answer_chars, tool_input="arguments")

    def feed(self, chunk: Any) -> list[LlmTextDelta | LlmToolCallDelta]:
        # Called once per streamed token: decoded JSON objects are dicts, so the
        # checks test for ``dict`` first (an ABC ``isinstance`` costs several
        # times more) and fall back to ``Mapping`` for other callers.
        if type(chunk) is not dict and not isinstance(chunk, Mapping):
            raise llm_error("protocol", "stream chunk is not a JSON object", retryable=True)
        if chunk.get("error") is not None:
            raise error_from_payload(chunk["error"], where="stream")
        self.chunks += 1
        if self.model is None:
            model = chunk.get("model")
            if type(model) is str:
                self.model = model[:200]
        raw_usage = chunk.get("usage")
        if raw_usage:
            usage = usage_from(raw_usage)
            if usage is not None:
                self.usage = usage
        events: list[LlmTextDelta | LlmToolCallDelta] = []
        choices = chunk.get("choices")
        if not choices:
            return events
        if type(choices) is not list:
            raise llm_error("protocol", "stream chunk has malformed choices", retryable=True)
        for choice in choices:
            if type(choice) is not dict and not isinstance(choice, Mapping):
                continue
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if delta:
                if type(delta) is not dict and not isinstance(delta, Mapping):
                    raise llm_error(
                        "protocol", "stream chunk has a malformed delta", retryable=True
                    )
                content = delta.get("content")
                if content and type(content) is str:
                    self._grow(len(content))
                    self.progress += 1
                    self.text.append(content)
                    if self.text_events:
                        events.append(
                            LlmTextDelta.model_construct(request_id=self.request_id, text=content)
                        )
                tool_calls = delta.get("tool_calls")
                if tool_calls:
                    for raw in tool_calls:
                        event = self._tool_delta(raw)
                        if event is not None:
                            events.append(event)
                # Reasoning models stream their thinking first (not kept): progress all
                # the same.
                if delta.get("reasoning_content") or delta.get("reasoning"):
                    self.progress += 1
            reason = choice.get("finish_reason")
            if reason:
                self.progress += 1
                self.finish_reason = str(reason)
        return events

    def _tool_delta(self, raw: Any) -> LlmToolCallDelta | None:
        if not isinstance(raw, Mapping):
            raise llm_error("protocol", "malformed tool call delta", retryable=True)
        call_id = raw.get("id")
        index = raw.get("index")
        if index is None:
            index = self._unindexed(call_id)
        elif not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise llm_error("protocol", "tool call delta without a valid index", retryable=True)
        self._last_index = index
        partial = self.calls.get(index)
        if partial is None:
            if len(self.calls) >= self.max_tool_calls:
                raise too_many_calls(self.max_tool_calls)
            partial = self.calls[index] = _PartialCall()
        if isinstance(call_id, str) and call_id:
            if partial.call_id != call_id:
                self._grow(len(call_id))
            partial.call_id = call_id
        function = raw.get("function") or {}
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str) and name and partial.name is None:
            self._grow(len(name))
            partial.name = name  # sent once; some servers repeat it on every delta
        fragment = function.get("arguments") if isinstance(function, Mapping) else None
        fragment = fragment if isinstance(fragment, str) else ""
        if fragment:
            self._grow(len(fragment))
            partial.arguments.append(fragment)
        self.progress += 1
        if not self.tool_events:
            return None
        return LlmToolCallDelta.model_construct(
            request_id=self.request_id,
            index=index,
            call_id=call_id if isinstance(call_id, str) else None,
            name=name if isinstance(name, str) else None,
            arguments_delta=fragment,
        )

    def _unindexed(self, call_id: Any) -> int:
        """The call an index-less delta belongs to (some servers omit ``index``).

        A delta carrying an ``id`` not seen on the current call starts a new
        call; any other delta continues the call the previous delta was for.
        """
        last = self._last_index
        if isinstance(call_id, str) and call_id:
            current = self.calls.get(last) if last is not None else None
            if current is None or (current.call_id is not None and current.call_id != call_id):
                return max(self.calls, default=-1) + 1
        return 0 if last is None else last

    def arrived(self) -> str:
        """How much of the answer arrived, for an error message."""
        return arrived_summary(
            self.chunks,
            "chunk",
            text_chars=sum(len(t) for t in self.text),
            calls=len(self.calls),
            input_chars=sum(sum(len(a) for a in c.arguments) for c in self.calls.values()),
            tool_input="arguments",
        )

    def finish(self, *, saw_done: bool) -> tuple[AssistantMessage, Usage, str]:
        """The complete answer.

        An answer without a ``finish_reason`` is incomplete -- whether the
        stream just closed or said ``[DONE]`` (llama.cpp's server ends a running
        stream that way when another request takes its slot) -- and a typed,
        retryable ``incomplete`` error that says how much had arrived.

        A ``length`` answer was cut off by the provider: a tool call whose
        arguments were cut mid-way cannot be decoded and is dropped (the reason
        stays ``length``; whoever reads it knows the answer is not whole).
        """
        if self.finish_reason is None:
            how = "sent [DONE]" if saw_done else "closed"
            raise incomplete_stream(how, "finish_reason", self.arrived())
        cut = self.finish_reason == "length"
        calls = []
        for index in sorted(self.calls):
            partial = self.calls[index]
            if not partial.name:
                if cut:
                    continue  # cut off mid-call
                raise llm_error("protocol", f"tool call #{index} has no name", retryable=True)
            call = tool_call(
                partial.call_id or f"call_{self.request_id}_{index}",
                partial.name,
                "".join(partial.arguments),
            )
            if cut and call.arguments_error is not None:
                continue  # cut off mid-call: never offered to the model as a mistake of its own
            calls.append(call)
        message = AssistantMessage(text="".join(self.text), tool_calls=tuple(calls))
        return message, self.usage or Usage(), self.finish_reason


def complete_from_body(request_id: str, body: Any) -> tuple[AssistantMessage, Usage, str]:
    """A non-streaming chat completion body as (message, usage, finish reason)."""
    if not isinstance(body, Mapping) or not isinstance(body.get("choices"), list):
        raise llm_error("protocol", "response is not a chat completion", retryable=True)
    choices = body["choices"]
    if not choices:
        raise llm_error("protocol", "response has no choices", retryable=True)
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, Mapping) else None
    if not isinstance(message, Mapping):
        raise llm_error("protocol", "response choice has no message", retryable=True)
    raw_reason = choice.get("finish_reason")
    cut = raw_reason == "length"
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise llm_error("protocol", "response tool_calls is not an array", retryable=True)
    calls = []
    for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, Mapping) else None
        if not isinstance(function, Mapping) or not function.get("name"):
            if cut:
                continue  # cut off mid-call (see StreamAssembler.finish)
            raise llm_error("protocol", f"tool call #{index} is malformed", retryable=True)
        call = tool_call(
            str(raw.get("id") or f"call_{request_id}_{index}"),
            str(function["name"]),
            str(function.get("arguments") or ""),
        )
        if cut and call.arguments_error is not None:
            continue
        calls.append(call)
    text = message.get("content")
    assistant = AssistantMessage(
        text=text if isinstance(text, str) else "", tool_calls=tuple(calls)
    )
    # A whole JSON body is a complete answer even when a server leaves the reason out.
    reason = str(raw_reason or ("tool_calls" if calls else "stop"))
    return assistant, usage_from(body.get("usage")) or Usage(), reason


__all__ = [
    "StreamAssembler",
    "complete_from_body",
    "request_body",
    "request_payload",
    "to_openai_messages",
    "to_openai_tool_choice",
    "to_openai_tools",
]
