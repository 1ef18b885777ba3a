"""A hostile server speaking the Messages API's event shapes, against ``AnthropicModel``.

``tests/llm/test_anthropic_model.py`` covers the transport-level cases of
``bench/llm_hostile`` (long lines, gzip bombs, huge bodies, keep-alives);
these are the cases whose payload is Anthropic-shaped: a million
``tool_use`` blocks, ``ping`` events forever, text that never stops, a
``message_stop`` with no stop reason, a gzip-bombed non-streamed body, and
(a property) any sequence of decoded events at all -- each ends as a typed
:class:`LlmException` with a one-line message, never another exception.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fore import AnthropicModel
from fore.actors.llm.anthropic_answer import AnthropicAssembler
from fore.actors.llm.body import BodyLimits
from fore.actors.llm.errors import LlmException, error_from_status
from fore.actors.llm.models import RetryPolicy, StreamResult, Timeouts
from fore.bench.llm_hostile import CASES, Case, HostileServer, _paced
from fore.messages.conversation import UserMessage
from fore.messages.llm import LlmRequest

_SSE = (("Content-Type", "text/event-stream"),)


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


_START = _event(
    {
        "type": "message_start",
        "message": {"type": "message", "role": "assistant", "usage": {"input_tokens": 5}},
    }
)


def _tool_blocks() -> Iterator[bytes]:
    yield _START
    for i in range(1_000_000):
        yield _event(
            {
                "type": "content_block_start",
                "index": i,
                "content_block": {"type": "tool_use", "id": f"toolu_{i}", "name": "t", "input": {}},
            }
        )


def _text_forever() -> Iterator[bytes]:
    yield _START
    yield _event({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    yield from _paced(
        _event(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "word "},
            }
        ),
        0.05,
        600,
    )


def _stop_without_reason() -> Iterator[bytes]:
    yield _START
    yield _event({"type": "content_block_start", "index": 0, "content_block": {"type": "text"}})
    yield _event(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "The answer is"},
        }
    )
    yield _event({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 3}})
    yield _event({"type": "message_stop"})


HOSTILE = {
    case.name: case
    for case in (
        Case("many_tool_use", "a million tool_use blocks", "200 OK", _SSE, _tool_blocks),
        Case(
            "pings",
            "a ping event every 0.1 s, forever",
            "200 OK",
            _SSE,
            lambda: itertools.chain([_START], _paced(_event({"type": "ping"}), 0.1, 600)),
            timed=True,
        ),
        Case("endless_text", "a word every 0.05 s", "200 OK", _SSE, _text_forever, timed=True),
        Case(
            "no_stop_reason", "message_stop, no stop_reason", "200 OK", _SSE, _stop_without_reason
        ),
        CASES["body_gzip_bomb"],
    )
}


def _failed(case: Case, **options: Any) -> tuple[LlmException, HostileServer]:
    from fore.actors.llm import evloop
    from fore.actors.llm.netio import FastAsyncTransport

    options.setdefault("retry", RetryPolicy(max_retries=0))
    with HostileServer(case) as server:
        model = AnthropicModel(base_url=server.base_url, api_key="k", model="m", **options)
        request = LlmRequest(
            request_id="r1",
            session_id="s1",
            messages=(UserMessage(text="hello"),),
            stream=case.stream,
        )

        async def go() -> StreamResult:
            async with httpx.AsyncClient(transport=FastAsyncTransport()) as http:
                return await model.stream(request, lambda _e: None, http)

        with pytest.raises(LlmException) as info:
            evloop.run(go())
        server.ended()
    assert "\n" not in info.value.error.message  # one line, whatever the server sent
    return info.value, server


def test_a_million_tool_use_blocks_stop_at_the_tool_call_limit() -> None:
    error, server = _failed(HOSTILE["many_tool_use"], limits=BodyLimits(max_tool_calls=500))
    assert "more than 500 tool calls" in error.error.message and not error.error.retryable
    assert server.stats.hung_up == [True]


def test_pings_forever_end_at_the_no_progress_deadline() -> None:
    """``ping`` keeps the idle timeout happy forever, and says nothing."""
    timeouts = Timeouts(idle=5, no_progress=0.6, total=60)
    error, server = _failed(HOSTILE["pings"], timeouts=timeouts)
    assert error.error.kind == "timeout" and error.error.deadline == "no_progress"
    assert server.stats.hung_up == [True]


def test_text_that_never_stops_ends_at_the_overall_deadline() -> None:
    error, server = _failed(
        HOSTILE["endless_text"], timeouts=Timeouts(idle=5, no_progress=5, total=1.0)
    )
    assert error.error.kind == "timeout" and error.error.deadline == "total"
    assert server.stats.hung_up == [True]


def test_message_stop_without_a_stop_reason_is_incomplete() -> None:
    error, _ = _failed(HOSTILE["no_stop_reason"])
    assert error.error.kind == "incomplete" and error.error.retryable
    assert "sent message_stop without a stop_reason" in error.error.message


def test_a_gzip_bombed_body_is_refused_at_the_body_limit() -> None:
    error, _ = _failed(HOSTILE["body_gzip_bomb"])
    assert error.error.kind == "protocol" and not error.error.retryable
    assert "max_body_bytes" in error.error.message


def test_a_non_streamed_body_of_many_tool_calls_stops_at_the_same_limit() -> None:
    """Within the body's byte cap, still past the tool-call limit: refused as a stream is."""
    import asyncio

    calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": "t", "input": {}} for i in range(600)]
    body = {"type": "message", "content": calls, "stop_reason": "tool_use", "usage": {}}

    def answer(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-type": "application/json"},
            stream=httpx.ByteStream(json.dumps(body).encode()),
        )

    model = AnthropicModel(
        base_url="http://api.test",
        api_key="k",
        limits=BodyLimits(max_tool_calls=500),
        retry=RetryPolicy(max_retries=0),
    )
    request = LlmRequest(
        request_id="r1", session_id="s1", messages=(UserMessage(text="hi"),), stream=False
    )

    async def go() -> StreamResult:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            return await model.stream(request, lambda _e: None, http)

    with pytest.raises(LlmException) as info:
        asyncio.run(go())
    assert "more than 500 tool calls" in info.value.error.message
    assert not info.value.error.retryable


# -- any decoded events: a typed error or an answer, nothing else ---------------------------

_scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=6)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_kinds = st.sampled_from(
    [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
        "mystery",
    ]
)
_blocks = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "thinking", "server_tool_use"])},
    optional={"id": _json, "name": st.sampled_from(["read", "", 3]), "text": _json},
)
_deltas = st.fixed_dictionaries(
    {"type": st.sampled_from(["text_delta", "input_json_delta", "thinking_delta", "x"])},
    optional={"text": _json, "partial_json": _json | st.just('{"a": 1}')},
)
_events = st.one_of(
    _json,
    st.fixed_dictionaries(
        {"type": _kinds},
        optional={
            "index": st.integers(-1, 3) | _json,
            "content_block": _blocks | _json,
            "delta": _deltas | st.fixed_dictionaries({"stop_reason": _json}) | _json,
            "usage": st.dictionaries(
                st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens"]),
                _json | st.integers(-(2**70), 2**70),
            ),
            "message": st.fixed_dictionaries({"usage": _json}) | _json,
            "error": _json,
        },
    ),
)


_FOUR_CALLS = [
    {"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "name": "t"}}
    for i in range(4)
]


@settings(max_examples=300, deadline=None)
@given(st.lists(_events, max_size=12))
@example(_FOUR_CALLS)
@example([*_FOUR_CALLS[:1], {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}])
@example([{"type": "error", "error": {"type": "api_error", "message": "a\nb" * 50_000}}])
def test_any_events_end_in_an_answer_or_a_typed_error(events: list[Any]) -> None:
    assembler = AnthropicAssembler("r", max_answer_chars=64, max_tool_calls=3)
    try:
        for event in events:
            for delta in assembler.feed(event):
                assert delta.index < 3
        message, usage, _reason = assembler.finish()
    except LlmException as error:
        message = error.error.message
        assert message and "\n" not in message and len(message) < 1000  # one readable line
        return
    assert len(message.tool_calls) <= 3 and len(message.text) <= 64
    assert min(usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) >= 0


def test_a_flood_of_an_error_message_is_one_short_line() -> None:
    """Both providers' error bodies (``{"error": {"message": ...}}``) and error events."""
    flood = "line\n\x1b[31m" * 100_000
    body = json.dumps({"type": "error", "error": {"type": "api_error", "message": flood}})
    error = error_from_status(529, body.encode(), {}).error
    assert error.kind == "server" and error.status == 529
    assert error.provider_message is not None and len(error.provider_message) == 500
    assert "\n" not in error.message and "\x1b" not in error.message
    openai = json.dumps({"error": {"message": flood, "param": flood}}).encode()
    error = error_from_status(400, openai, {}).error
    assert len(error.message) < 600 and error.param is not None and len(error.param) == 500
