"""The official ``anthropic`` SDK as a client of Fore's mock ``/v1/messages``.

Something we did not write reads what the mock sends: if the mock's events,
bodies, statuses or error objects drifted from the real protocol, the SDK
would fail to parse them or raise the wrong exception class.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile

READ_TOOL = {
    "name": "read",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}

SCRIPT = ScriptFile.model_validate(
    {
        "replies": [
            {"when": {"contains": "weather"}, "text": "Sunny and warm."},
            {
                "when": {"contains": "read it"},
                "text": "Reading.",
                "tool_calls": [{"name": "read", "arguments": {"path": "a.py"}}],
            },
            {"when": {"contains": "print(1)"}, "text": "It prints 1."},
        ]
    }
)


@pytest.fixture(scope="module")
def server() -> Iterator[MockLlmServer]:
    with MockLlmServer(SCRIPT) as server:
        yield server


@pytest.fixture
def client(server: MockLlmServer) -> Iterator[anthropic.Anthropic]:
    server.reset()
    with anthropic.Anthropic(base_url=server.root_url, api_key="test-key", max_retries=0) as c:
        yield c


def test_non_streaming(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="claude-mock",
        max_tokens=256,
        system="You are terse.",
        messages=[{"role": "user", "content": "what is the weather?"}],
    )
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and message.content[0].text == "Sunny and warm."
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


def test_streaming(client: anthropic.Anthropic, server: MockLlmServer) -> None:
    with client.messages.stream(
        model="claude-mock",
        max_tokens=256,
        messages=[{"role": "user", "content": "what is the weather?"}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Sunny and warm." == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    (record,) = server.requests()
    assert record.stream and record.outcome == "completed"
    assert record.headers["anthropic-version"]
    key = record.headers.get("x-api-key") or record.headers["authorization"]
    assert key.endswith("test-key")


def test_tool_use_round_trip(client: anthropic.Anthropic) -> None:
    history: list[anthropic.types.MessageParam] = [{"role": "user", "content": "read it please"}]
    with client.messages.stream(
        model="claude-mock", max_tokens=256, tools=[READ_TOOL], messages=history
    ) as stream:
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "read" and use.input == {"path": "a.py"}
    assert use.id.startswith("toolu_")
    history += [
        {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "print(1)"}],
        },
    ]
    second = client.messages.create(
        model="claude-mock", max_tokens=256, tools=[READ_TOOL], messages=history
    )
    assert second.content[0].text == "It prints 1."  # type: ignore[union-attr]
    # Forcing the tool: the answer is exactly that call.
    forced = client.messages.create(
        model="claude-mock",
        max_tokens=256,
        tools=[READ_TOOL],
        tool_choice={"type": "tool", "name": "read"},
        messages=[{"role": "user", "content": "what is the weather?"}],
    )
    assert [b.type for b in forced.content] == ["tool_use"]


def test_errors_map_to_the_sdk_exception_classes(client: anthropic.Anthropic) -> None:
    kwargs = {"model": "claude-mock", "max_tokens": 16}
    hello = [{"role": "user", "content": "hello"}]
    with pytest.raises(anthropic.RateLimitError) as rate:
        client.messages.create(**kwargs, messages=hello, extra_headers={"x-mock-fault": "429"})  # type: ignore[arg-type]
    assert rate.value.response.headers["retry-after"] == "1"
    assert rate.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        client.messages.create(**kwargs, messages=hello, extra_headers={"x-mock-fault": "529"})  # type: ignore[arg-type]
    assert overloaded.value.status_code == 529
    assert isinstance(overloaded.value, anthropic.InternalServerError)
    with pytest.raises(anthropic.InternalServerError):
        client.messages.create(**kwargs, messages=hello, extra_headers={"x-mock-fault": "500"})  # type: ignore[arg-type]
    # The mock's own strictness: what a real server refuses, as BadRequestError.
    refused = [
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        [{"role": "assistant", "content": "first"}],
        [
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "x"}],
            }
        ],
        [{"role": "system", "content": "x"}],
    ]
    for messages in refused:
        with pytest.raises(anthropic.BadRequestError) as bad:
            client.messages.create(**kwargs, messages=messages)  # type: ignore[arg-type]
        assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="claude-mock", max_tokens=20_000, messages=hello)  # type: ignore[arg-type]
    # max_tokens is required (sent around the SDK's own type check).
    with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
        client.post("/v1/messages", body={"model": "m", "messages": hello}, cast_to=object)
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(**kwargs, messages=hello, extra_headers={"x-mock-fault": "401"})  # type: ignore[arg-type]


def test_mid_stream_error_event(client: anthropic.Anthropic) -> None:
    with (
        pytest.raises(anthropic.APIStatusError, match="overloaded_error"),
        client.messages.stream(
            model="claude-mock",
            max_tokens=64,
            messages=[{"role": "user", "content": "what is the weather?"}],
            extra_headers={"x-mock-fault": "stream_error"},
        ) as stream,
    ):
        for _ in stream:
            pass


def test_cache_usage_as_the_sdk_reads_it(client: anthropic.Anthropic) -> None:
    system = [
        {"type": "text", "text": "A long, stable system prompt. " * 200},
        {"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}},
    ]
    ask = {"role": "user", "content": "what is the weather?"}
    first = client.messages.create(
        model="claude-mock",
        max_tokens=64,
        system=system,  # type: ignore[arg-type]
        messages=[ask],  # type: ignore[list-item]
    )
    second = client.messages.create(
        model="claude-mock",
        max_tokens=64,
        system=system,  # type: ignore[arg-type]
        messages=[ask],  # type: ignore[list-item]
    )
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0
    # Five breakpoints are one too many.
    marked = [{**block, "cache_control": {"type": "ephemeral"}} for block in system] * 3
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
        client.messages.create(model="claude-mock", max_tokens=64, system=marked, messages=[ask])  # type: ignore[arg-type,list-item]
