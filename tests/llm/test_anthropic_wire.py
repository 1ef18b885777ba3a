"""The Anthropic wire codec (actors/llm/anthropic_wire.py, anthropic_answer.py), pure.

Property tests: any history encodes to a request the mock's strict validator
(a real server's rules: alternating roles, a user turn first, every tool_use
answered in the next turn and no orphan tool_result, at most four cache
breakpoints) accepts; a well-paired history keeps everything it says, with a
turn's consecutive tool results merged into one user turn.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.llm.anthropic_answer import (
    AnthropicAssembler,
    anthropic_error,
    complete_from_message,
    finish_reason,
    usage_from,
)
from fore.actors.llm.anthropic_wire import (
    CONTINUE,
    MAX_BREAKPOINTS,
    OMITTED_START,
    Thinking,
    encode_history,
    request_body,
    request_payload,
    to_anthropic_tool_choice,
    tool_use_id,
)
from fore.actors.llm.errors import LlmException
from fore.actors.llm.mock_anthropic import validate_request
from fore.messages.conversation import (
    AssistantMessage,
    Item,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import NamedToolChoice
from fore.messages.tools import ToolDefinition

TOOLS = (
    ToolDefinition(name="read", description="read a file", parameters={"type": "object"}),
    ToolDefinition(name="resolve", description="apply", parameters={"type": "object"}),
)

texts = st.text(max_size=12)
call_ids = st.sampled_from(["c1", "c2", "c3", "call:4", "functions.read:0", "c1"])


def _call(call_id: str, name: str = "read", **arguments: Any) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


items = st.one_of(
    st.builds(UserMessage, text=texts),
    st.builds(SystemMessage, text=texts),
    st.builds(
        AssistantMessage,
        text=texts,
        tool_calls=st.lists(
            st.builds(_call, call_ids, st.sampled_from(["read", "resolve"])), max_size=3
        ).map(tuple),
    ),
    st.builds(
        ToolResult, call_id=call_ids, name=st.just("read"), output=texts, is_error=st.booleans()
    ),
)


def _body(history: list[Item], **kw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "model": "claude-test",
        "items": history,
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_tokens": 100,
        "stream": True,
    }
    fields.update(kw)
    return request_body(**fields)


@settings(max_examples=400, deadline=None)
@given(st.lists(items, max_size=14), st.booleans())
def test_any_history_is_a_valid_request(history: list[Item], with_tools: bool) -> None:
    body = _body(history, tools=TOOLS if with_tools else ())
    assert validate_request(body) is None, json.dumps(body)[:2000]
    # What is sent is exactly the body (and JSON round-trips it).
    assert json.loads(request_payload(**_fields(history, with_tools))) == body
    markers = json.dumps(body).count('"cache_control"')
    assert markers <= MAX_BREAKPOINTS


def _fields(history: list[Item], with_tools: bool) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "items": history,
        "tools": TOOLS if with_tools else (),
        "tool_choice": "auto",
        "max_tokens": 100,
        "stream": True,
    }


@st.composite
def paired_histories(draw: st.DrawFn) -> list[Item]:
    """Well-formed agent histories: user turns, answers, each call answered after it."""
    history: list[Item] = [SystemMessage(text="You are careful.")]
    for turn in range(draw(st.integers(1, 4))):
        history.append(UserMessage(text=f"prompt {turn} " + draw(texts)))
        for step in range(draw(st.integers(0, 3))):
            n = draw(st.integers(1, 3))
            calls = tuple(_call(f"t{turn}s{step}c{i}", path=draw(texts)) for i in range(n))
            history.append(AssistantMessage(text=draw(texts), tool_calls=calls))
            for call in calls:
                history.append(ToolResult(call_id=call.id, name="read", output=draw(texts)))
            if draw(st.booleans()):
                history.append(SystemMessage(text="reminder " + draw(texts)))
        history.append(AssistantMessage(text="answer " + draw(texts)))
    history.append(UserMessage(text="next prompt"))  # a request ends with the user's turn
    return history


@settings(max_examples=300, deadline=None)
@given(paired_histories())
def test_paired_history_round_trips(history: list[Item]) -> None:
    body = _body(history)
    assert validate_request(body) is None
    messages = body["messages"]
    assert [m["role"] for m in messages] == (["user", "assistant"] * len(messages))[: len(messages)]
    assert body["system"][0]["text"] == "You are careful."
    blocks = [(m["role"], b) for m in messages for b in m["content"]]
    # Every call is a tool_use with its input; every result a tool_result, in order.
    calls = [c for i in history if isinstance(i, AssistantMessage) for c in i.tool_calls]
    uses = [b for r, b in blocks if b["type"] == "tool_use"]
    assert [(u["id"], u["name"], u["input"]) for u in uses] == [
        (c.id, c.name, c.arguments) for c in calls
    ]
    results = [i for i in history if isinstance(i, ToolResult)]
    sent = [b for r, b in blocks if b["type"] == "tool_result"]
    assert [(b["tool_use_id"], b.get("content", "")) for b in sent] == [
        (r.call_id, r.output) for r in results
    ]
    # A turn's results are merged into one user turn that starts with all of them.
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            ids = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
            if ids:
                following = messages[index + 1]["content"]
                assert [b.get("tool_use_id") for b in following[: len(ids)]] == ids
    # Every user prompt and non-empty answer is there, in order.
    said = [b["text"] for _, b in blocks if b["type"] == "text"]
    expected = [
        i.text
        for i in history[1:]
        if isinstance(i, UserMessage | AssistantMessage) and i.text.strip()
    ]
    assert [t for t in said if not t.startswith("<system-reminder>")] == expected


def test_tool_choice_mapping_incl_the_forced_resolve() -> None:
    assert to_anthropic_tool_choice(NamedToolChoice(name="resolve")) == {
        "type": "tool",
        "name": "resolve",
    }
    assert to_anthropic_tool_choice("required") == {"type": "any"}
    assert to_anthropic_tool_choice("auto") == {"type": "auto"}
    assert to_anthropic_tool_choice("none") == {"type": "none"}
    body = _body([UserMessage(text="hi")], tool_choice=NamedToolChoice(name="resolve"))
    assert body["tool_choice"] == {"type": "tool", "name": "resolve"}
    assert validate_request(body) is None
    # Without tools there is nothing to choose: no tool_choice is sent.
    assert "tool_choice" not in _body([UserMessage(text="hi")], tools=())


def test_breakpoints_and_key_order() -> None:
    history: list[Item] = [
        SystemMessage(text="sys"),
        UserMessage(text="one"),
        AssistantMessage(text="a1"),
        UserMessage(text="two"),
    ]
    body = _body(history)
    # Stable parts first, what differs between a request and its forks after them.
    assert list(body) == [
        "model",
        "tools",
        "system",
        "messages",
        "tool_choice",
        "max_tokens",
        "stream",
    ]
    marked = {
        "tool": body["tools"][-1].get("cache_control"),
        "system": body["system"][-1].get("cache_control"),
        "turn_end": body["messages"][1]["content"][-1].get("cache_control"),
        "final": body["messages"][2]["content"][-1].get("cache_control"),
    }
    assert all(m == {"type": "ephemeral"} for m in marked.values()), marked
    assert "cache_control" not in body["tools"][0]
    # A one-shot fork marks the snapshot's end, not its own final message.
    fork = _body(history, cache_final=False)
    assert "cache_control" not in fork["messages"][-1]["content"][-1]
    assert fork["messages"][1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(_body(history, cache=False))
    assert _body(history, cache_ttl="1h")["system"][0]["cache_control"]["ttl"] == "1h"


def test_history_is_made_valid_deterministically() -> None:
    history: list[Item] = [
        AssistantMessage(text="from a trimmed fork"),
        ToolResult(call_id="gone", name="read", output="orphan output"),
        AssistantMessage(text=""),  # an empty answer
        UserMessage(text="next"),
        SystemMessage(text="late system"),
        AssistantMessage(tool_calls=(_call("x.y:1"),)),  # never answered
    ]
    system, messages = encode_history(history)
    assert system == []
    assert messages[0] == {"role": "user", "content": [{"type": "text", "text": OMITTED_START}]}
    user = messages[2]["content"]
    assert user[0]["text"].startswith("[result of tool read (call gone)]")
    assert user[1] == {"type": "text", "text": "next"}
    assert user[2]["text"] == "<system-reminder>\nlate system\n</system-reminder>"
    assert messages[3]["content"][0]["id"] == tool_use_id("x.y:1") == "x_y_1"
    assert messages[4]["content"][0]["tool_use_id"] == "x_y_1"
    assert messages[4]["content"][0]["is_error"] is True
    assert encode_history(history) == (system, messages)
    # A history that ends with an answer gets a user turn after it.
    _, messages = encode_history([UserMessage(text="q"), AssistantMessage(text="a")])
    assert messages[-1]["content"][0]["text"] == CONTINUE


def test_thinking_and_temperature() -> None:
    body = _body([UserMessage(text="q")], max_tokens=4096, thinking=Thinking(2048), temperature=0.3)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "temperature" not in body  # only 1 is allowed with thinking
    assert validate_request(body) is None
    assert _body([UserMessage(text="q")], temperature=1.7)["temperature"] == 1.0
    with pytest.raises(ValueError):
        Thinking(100)


def test_stop_reasons_and_usage() -> None:
    assert finish_reason("max_tokens") == "length"  # -> the worker's cut_off path
    assert finish_reason("end_turn") == "stop"
    assert finish_reason("tool_use") == "tool_calls"
    assert finish_reason("refusal") == "content_filter"
    assert finish_reason("pause_turn") == "pause_turn"
    with pytest.raises(LlmException):
        finish_reason(None)
    usage = usage_from(
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 900,
            "cache_creation_input_tokens": 90,
            "output_tokens": 5,
        }
    )
    assert usage is not None
    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens) == (1000, 900, 90)
    assert usage.uncached_input_tokens == 10 and usage.total_tokens == 1005


def _events(*calls_json: str, stop: str = "tool_use") -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": 3, "cache_read_input_tokens": 7}},
        },
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
    ]
    for n, text in enumerate(calls_json, start=1):
        block = {"type": "tool_use", "id": f"toolu_{n}", "name": "read", "input": {}}
        events.append({"type": "content_block_start", "index": n, "content_block": block})
        for cut in range(0, len(text), 3):
            delta = {"type": "input_json_delta", "partial_json": text[cut : cut + 3]}
            events.append({"type": "content_block_delta", "index": n, "delta": delta})
        events.append({"type": "content_block_stop", "index": n})
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 9}}
    )
    events.append({"type": "message_stop"})
    return events


def test_assembler_builds_calls_and_usage() -> None:
    assembler = AnthropicAssembler("r")
    deltas = []
    for event in _events('{"path": "a.py"}', ""):
        deltas += assembler.feed(event)
    message, usage, reason = assembler.finish()
    assert reason == "tool_calls" and message.text == "Hi"
    assert [(c.id, c.arguments) for c in message.tool_calls] == [
        ("toolu_1", {"path": "a.py"}),
        ("toolu_2", {}),
    ]
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (10, 7, 9)
    assert deltas[0].name == "read" and deltas[0].index == 0
    assert "".join(d.arguments_delta for d in deltas if d.index == 0) == '{"path": "a.py"}'


def test_assembler_cut_off_drops_a_half_call_and_keeps_bad_json_as_error() -> None:
    assembler = AnthropicAssembler("r")
    for event in _events('{"path": "a', stop="max_tokens"):
        assembler.feed(event)
    message, _, reason = assembler.finish()
    assert reason == "length" and message.tool_calls == ()
    assembler = AnthropicAssembler("r")
    for event in _events('{"path": "a'):
        assembler.feed(event)
    (call,) = assembler.finish()[0].tool_calls
    assert call.arguments_error is not None  # the worker hands the model an error result


def test_assembler_incomplete_error_event_and_bounds() -> None:
    assembler = AnthropicAssembler("r")
    for event in _events()[:4]:
        assembler.feed(event)
    with pytest.raises(LlmException) as info:
        assembler.finish()
    assert info.value.error.kind == "incomplete" and info.value.error.retryable
    with pytest.raises(LlmException) as info:
        AnthropicAssembler("r").feed(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        )
    assert info.value.error.kind == "server" and info.value.error.retryable
    with pytest.raises(LlmException) as info:
        AnthropicAssembler("r").feed(
            {"type": "error", "error": {"type": "invalid_request_error", "message": "too long"}}
        )
    assert info.value.error.kind == "bad_request" and not info.value.error.retryable
    small = AnthropicAssembler("r", max_answer_chars=3)
    with pytest.raises(LlmException) as info:
        for event in _events('{"path": "long"}'):
            small.feed(event)
    assert not info.value.error.retryable and "answer limit" in info.value.error.message


def test_error_types_map_to_kinds() -> None:
    kinds = {
        "rate_limit_error": ("rate_limit", True),
        "overloaded_error": ("server", True),
        "api_error": ("server", True),
        "authentication_error": ("auth", False),
        "not_found_error": ("bad_request", False),
        "request_too_large": ("bad_request", False),
    }
    for kind, (expected, retryable) in kinds.items():
        error = anthropic_error({"type": kind, "message": "m"}, where="stream").error
        assert (error.kind, error.retryable) == (expected, retryable), kind


def test_non_streamed_message() -> None:
    body = {
        "type": "message",
        "content": [
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "x"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    message, usage, reason = complete_from_message("r", body)
    assert message.text == "ok" and message.tool_calls[0].arguments == {"path": "x"}
    assert reason == "tool_calls" and usage.total_tokens == 3
    with pytest.raises(LlmException) as info:
        complete_from_message(
            "r", {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}
        )
    assert info.value.error.kind == "server"
