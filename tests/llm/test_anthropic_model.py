"""``AnthropicModel`` against the mock's ``/v1/messages`` over real HTTP.

Streaming, tools, stop reasons, ``max_tokens``, errors and retries, a cancel
mid-stream (the mock sees the disconnect), and the point of the provider:
a main request and its forks carry byte-identical prompts up to the main
request's last cache breakpoint, so the forks are billed as cache reads.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from fore import AnthropicModel
from fore.actors.llm.errors import LlmException
from fore.actors.llm.mock_anthropic import prompt_blocks, validate_request
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.models import RetryPolicy, StreamResult, Timeouts
from fore.actors.llm.script import ScriptFile
from fore.messages.conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from fore.messages.llm import LlmRequest, NamedToolChoice
from fore.messages.tools import ToolDefinition
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    main_reply,
    overlay_dirs,
    spec,
    suggestion,
    wait_until,
)

LONG_SYSTEM = "You are a careful coding agent. Read before you write. " * 120
"""Long enough (~1,700 tokens) for the API's 1,024-token minimum cacheable prefix."""

TOOL = ToolDefinition(
    name="read_file", description="read", parameters={"type": "object", "properties": {}}
)


def _model(server: MockLlmServer, **kw: Any) -> AnthropicModel:
    kw.setdefault("retry", RetryPolicy(max_retries=2, initial_backoff=0.01, max_backoff=0.05))
    return AnthropicModel(base_url=server.root_url, api_key="k", model="claude-mock", **kw)


def _request(*items: Any, **kw: Any) -> LlmRequest:
    fields: dict[str, Any] = {
        "request_id": "r1",
        "session_id": "s1",
        "messages": items or (UserMessage(text="hello"),),
    }
    fields.update(kw)
    return LlmRequest(**fields)


def _stream(model: AnthropicModel, request: LlmRequest) -> tuple[StreamResult, list[Any]]:
    events: list[Any] = []

    async def go() -> StreamResult:
        async with httpx.AsyncClient() as http:
            return await model.stream(request, events.append, http)

    return asyncio.run(go()), events


def test_streams_text_with_the_real_headers() -> None:
    with MockLlmServer(
        ScriptFile.model_validate({"replies": [{"text": "Hello there."}]})
    ) as server:
        model = _model(server)
        result, events = _stream(model, _request())
        (record,) = server.requests()
    assert result.message.text == "Hello there." == "".join(e for e in events if isinstance(e, str))
    assert result.finish_reason == "stop"
    assert (
        record.headers["x-api-key"] == "k" and record.headers["anthropic-version"] == "2023-06-01"
    )
    assert record.stream and record.outcome == "completed"
    body = record.body
    assert isinstance(body, dict)
    assert body["max_tokens"] == model.max_output_tokens == 8192  # always sent
    assert model.meter.by_purpose()["main"][0] == 1


def test_non_streamed_answer_and_max_tokens_capped() -> None:
    with MockLlmServer(ScriptFile.model_validate({"replies": [{"text": "Whole."}]})) as server:
        model = _model(server, max_output_tokens=1000)
        result, events = _stream(model, _request(stream=False, max_tokens=50_000))
        (record,) = server.requests()
    assert result.message.text == "Whole." and events == []
    assert not record.stream and isinstance(record.body, dict)
    assert record.body["max_tokens"] == 1000


def test_max_tokens_stop_is_cut_off_and_refusal_maps(runtime: Runtime, tmp_path: Path) -> None:
    long_answer = {"replies": [{"text": "word " * 50}]}
    with MockLlmServer(ScriptFile.model_validate(long_answer)) as server:
        result, _ = _stream(_model(server), _request(max_tokens=5))
        assert result.finish_reason == "length"
        # Through a session: the worker's cut_off path, as for any provider.
        model = _model(server, max_output_tokens=5)
        with runtime.open_session(workspace=tmp_path, model=model) as s:
            turn = s.submit("say a lot", timeout=WAIT)
    assert turn.status == "cut_off"


def test_tool_use_round_trip_through_a_session(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("the contents\n")
    script = ScriptFile.model_validate(
        {
            "replies": [
                main_reply(
                    "Reading.",
                    {"name": "read_file", "arguments": {"path": "a.txt"}},
                    {"name": "read_file", "arguments": {"path": "missing.txt"}},
                ),
                main_reply("It says: the contents."),
            ]
        }
    )
    with MockLlmServer(script) as server:
        with runtime.open_session(workspace=tmp_path, model=_model(server)) as s:
            turn = s.submit("what is in a.txt?", timeout=WAIT)
        first, second = (r.body for r in server.requests())
    assert turn.status == "completed"
    assert isinstance(turn.items[-1], AssistantMessage)
    assert turn.items[-1].text == "It says: the contents."
    # The run's usage sums both requests' cache figures: the first wrote the tools'
    # prefix (over 1,024 tokens), the second read it.
    assert turn.usage.cache_write_tokens > 0 and turn.usage.cached_tokens > 0
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["tool_choice"] == {"type": "auto"}
    assert {t["name"] for t in first["tools"]} >= {"read_file"}
    assistant, results = second["messages"][-2:]
    uses = [b for b in assistant["content"] if b["type"] == "tool_use"]
    assert [u["input"] for u in uses] == [{"path": "a.txt"}, {"path": "missing.txt"}]
    # Both results in one user turn, in call order, first in it.
    assert [b["tool_use_id"] for b in results["content"][:2]] == [u["id"] for u in uses]
    assert "the contents" in results["content"][0]["content"]
    assert results["content"][1].get("is_error") is True


def test_forced_tool_choice_and_fork_tool_choice() -> None:
    script = {"replies": [{"text": "t", "tool_calls": [{"name": "read_file"}]}]}
    with MockLlmServer(ScriptFile.model_validate(script)) as server:
        model = _model(server)
        forced = _request(tools=(TOOL,), tool_choice=NamedToolChoice(name="read_file"))
        result, _ = _stream(model, forced)
        assert [c.name for c in result.message.tool_calls] == ["read_file"]
        # A suggestion asks for none: sent auto (the main request's message cache) and
        # the call the model made anyway is dropped.
        fork = _request(tools=(TOOL,), tool_choice="none", purpose="suggestion")
        result, _ = _stream(model, fork)
        assert result.message.tool_calls == () and result.finish_reason == "stop"
        as_asked = _model(server, fork_tool_choice="as_requested")
        _stream(as_asked, fork)
        bodies = [r.body for r in server.requests()]
    assert [b["tool_choice"] for b in bodies if isinstance(b, dict)] == [
        {"type": "tool", "name": "read_file"},
        {"type": "auto"},
        {"type": "none"},
    ]


def test_thinking_is_for_main_requests_only() -> None:
    with MockLlmServer(ScriptFile.model_validate({"replies": [{"text": "ok"}]})) as server:
        model = _model(server, thinking_budget=2048)
        for purpose in ("main", "suggestion", "speculation", "pipelined"):
            _stream(model, _request(purpose=purpose))
        # Within a tool loop history has no thinking blocks to send back: off there too.
        call = ToolCall(id="c1", name="read_file")
        _stream(
            model,
            _request(
                UserMessage(text="go"),
                AssistantMessage(tool_calls=(call,)),
                ToolResult(call_id="c1", name="read_file", output="x"),
                tools=(TOOL,),
            ),
        )
        bodies = [r.body for r in server.requests()]
    assert all(isinstance(b, dict) for b in bodies), bodies  # the mock accepted each
    thinking = [b.get("thinking") for b in bodies if isinstance(b, dict)]
    assert thinking == [{"type": "enabled", "budget_tokens": 2048}, None, None, None, None]


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("429", "rate_limit"),
        ("529", "server"),
        ("500", "server"),
        ("stream_error", "server"),
        ("truncated", "incomplete"),
        ("malformed", "protocol"),
        ("cut", "connection"),
        ("not_sse", "protocol"),
    ],
)
def test_retryable_failures_are_retried(
    runtime: Runtime, tmp_path: Path, fault: str, kind: str
) -> None:
    with MockLlmServer(ScriptFile.model_validate({"replies": [{"text": "fine"}]})) as server:
        # One attempt's typed error, as the loop's retry policy sees it:
        server.queue_fault(fault, retry_after=0.05)  # type: ignore[arg-type]
        with pytest.raises(LlmException) as info:
            _stream(_model(server), _request())
        error = info.value.error
        assert error.kind == kind and error.retryable, error
        if fault == "429":
            assert error.retry_after_s == 0.05
        # Through a session the gateway retries it, and the answer arrives.
        server.reset()
        server.queue_fault(fault, retry_after=0.05)  # type: ignore[arg-type]
        with runtime.open_session(workspace=tmp_path, model=_model(server)) as s:
            turn = s.submit("hello", timeout=WAIT)
        first, second = server.requests()
    assert turn.status == "completed", turn.error
    assert isinstance(turn.items[-1], AssistantMessage) and turn.items[-1].text == "fine"
    assert first.fault == fault and second.fault is None
    if fault == "429":
        assert first.arrived_s is not None and second.arrived_s is not None
        assert second.arrived_s - first.arrived_s >= 0.05  # it waited the retry-after


def test_invalid_request_is_not_retried() -> None:
    with MockLlmServer() as server:
        server.queue_fault("400", count=3)
        with pytest.raises(LlmException) as info:
            _stream(_model(server), _request())
        assert len(server.requests()) == 1
        # A key is required, as by the real API.
        with pytest.raises(LlmException) as auth:
            _stream(AnthropicModel(base_url=server.root_url, api_key=""), _request())
    assert info.value.error.kind == "bad_request" and not info.value.error.retryable
    assert info.value.error.provider_message == "Invalid request (injected by the mock)."
    assert auth.value.error.kind == "auth"


def test_cancel_mid_stream_closes_the_connection(runtime: Runtime, tmp_path: Path) -> None:
    slow = {"replies": [{"text": "word " * 400, "tokens_per_s": 20}]}
    with MockLlmServer(ScriptFile.model_validate(slow)) as server:
        with runtime.open_session(workspace=tmp_path, model=_model(server)) as s:
            box: dict[str, Any] = {}

            def submit() -> None:
                box["result"] = s.submit("talk slowly", timeout=WAIT)

            thread = threading.Thread(target=submit)
            thread.start()
            wait_until(lambda: server.stats().streams_started >= 1)
            s.cancel("the user pressed Ctrl-C")
            thread.join(WAIT)
        stats = server.wait_for_stats(lambda st: st.disconnects >= 1, timeout_s=WAIT)
        records = server.requests()
    assert box["result"].status == "cancelled"
    assert stats.disconnects >= 1
    assert records[-1].outcome == "disconnected"


def test_forks_share_the_main_prefix_byte_for_byte(runtime: Runtime, tmp_path: Path) -> None:
    script = ScriptFile.model_validate(
        {
            "replies": [
                *TWO_TURNS,
                suggestion("bump it"),
                {"when": {"purpose": "speculation"}, "text": "Bumped x to 2."},
                suggestion("run the tests", purpose="pipelined"),
            ]
        }
    )
    with MockLlmServer(script) as server:
        model = _model(server)
        with runtime.open_session(
            workspace=tmp_path, model=model, speculation=spec(), system_prompt=LONG_SYSTEM
        ) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: s.speculation.state in ("completed", "boundary"))
            wait_until(lambda: any(r.purpose == "pipelined" for r in server.requests()))
            wait_until(lambda: "pipelined" in model.meter.by_purpose())
        wait_until(lambda: overlay_dirs(runtime) == [])
        records = server.requests()
    main = [r for r in records if r.purpose == "main"][-1]
    forks = {r.purpose: r for r in records if r.purpose != "main"}
    assert set(forks) == {"suggestion", "speculation", "pipelined"}
    assert isinstance(main.body, dict)
    main_blocks = prompt_blocks(main.body)
    last_mark = max(i for i, b in enumerate(main_blocks) if b.ttl is not None)
    shared = main_blocks[: last_mark + 1]
    for purpose, fork in forks.items():
        assert isinstance(fork.body, dict)
        fork_blocks = prompt_blocks(fork.body)
        # The bytes the cache is keyed by (markers aside) are the main request's, up
        # to its last breakpoint -- and the mock, keyed by them, read them from cache.
        assert [b.data for b in fork_blocks[: len(shared)]] == [b.data for b in shared], purpose
    assert _raw_prefix(main.body) in _raw_prefix(forks["suggestion"].body, full=True)
    # A suggestion writes nothing of its own (its last message is never extended);
    # a speculation marks its last message for its own next turn.
    assert isinstance(forks["speculation"].body, dict) and isinstance(
        forks["suggestion"].body, dict
    )
    assert "cache_control" in forks["speculation"].body["messages"][-1]["content"][-1]
    assert "cache_control" not in forks["suggestion"].body["messages"][-1]["content"][-1]
    usage = model.meter.by_purpose()
    shared_tokens = (sum(len(b.data) for b in shared) + 3) // 4
    for purpose in ("suggestion", "speculation", "pipelined"):
        _, fork_usage = usage[purpose]
        assert fork_usage.cached_tokens >= shared_tokens, (purpose, fork_usage)
    forks_share = model.meter.forks().read_share
    assert forks_share is not None and forks_share >= 0.9


def _raw_prefix(body: Any, *, full: bool = False) -> str:
    """The body's wire bytes from its start through the system prompt (no markers moved
    there): what a byte comparison of two bodies can see directly."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return text if full else text[: text.index(',"messages":')]


# -- a hostile server: the OpenAI client's bounds, reused ------------------------------------


def _hostile(case: str, **options: Any) -> tuple[LlmException, Any]:
    from fore.actors.llm import evloop
    from fore.actors.llm.netio import FastAsyncTransport
    from fore.bench.llm_hostile import CASES, HostileServer

    options.setdefault("retry", RetryPolicy(max_retries=0))
    with HostileServer(CASES[case]) as server:
        model = AnthropicModel(base_url=server.base_url, api_key="k", model="m", **options)
        request = _request(stream=CASES[case].stream)

        async def go() -> StreamResult:
            async with httpx.AsyncClient(transport=FastAsyncTransport()) as http:
                return await model.stream(request, lambda _e: None, http)

        with pytest.raises(LlmException) as info:
            evloop.run(go())
        server.ended()
    return info.value, server


def test_hostile_servers_are_bounded() -> None:
    from fore.actors.llm.body import BodyLimits

    mib = 1024 * 1024
    error, server = _hostile("long_line")
    assert "max_line_bytes" in error.error.message and not error.error.retryable
    assert server.stats.hung_up == [True] and server.stats.sent[0] < 48 * mib
    error, _ = _hostile("stream_gzip_bomb")
    assert "one line of the event stream passed 1 MiB" in error.error.message
    error, _ = _hostile("stream_gzip_bomb_events", limits=BodyLimits(max_stream_bytes=4 * mib))
    assert "max_stream_bytes" in error.error.message
    error, _ = _hostile("error_gzip_bomb")
    assert error.error.kind == "server" and error.error.status == 500
    error, _ = _hostile("body_huge")
    assert "max_body_bytes" in error.error.message
    timeouts = Timeouts(idle=5, no_progress=0.6, total=60)
    error, _ = _hostile("keepalives", timeouts=timeouts)
    assert error.error.kind == "timeout" and error.error.deadline == "no_progress"


def test_a_cancelled_stream_is_billed_its_prompt() -> None:
    """The API bills a prompt once ``message_start`` is out, abort or not: so does the meter."""
    slow = {"replies": [{"text": "word " * 400, "tokens_per_s": 20}]}
    with MockLlmServer(ScriptFile.model_validate(slow)) as server:
        model = _model(server)

        async def go() -> None:
            streamed = asyncio.Event()
            async with httpx.AsyncClient() as http:
                task = asyncio.ensure_future(
                    model.stream(_request(purpose="speculation"), lambda _e: streamed.set(), http)
                )
                await asyncio.wait_for(streamed.wait(), WAIT)  # past message_start
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(go())
        server.wait_for_stats(lambda st: st.disconnects == 1, timeout_s=WAIT)
    ((count, usage),) = model.meter.by_purpose().values()
    assert count == 1 and usage.prompt_tokens > 0


def test_a_paused_turn_is_continued_from_its_text() -> None:
    """``pause_turn``: the answer so far goes back as the final assistant message."""
    sent: list[dict[str, Any]] = []

    def answer(http_request: httpx.Request) -> httpx.Response:
        body = json.loads(http_request.content)
        sent.append(body)
        paused = len(sent) < 3
        data = {
            "type": "message",
            "content": [{"type": "text", "text": f"part {len(sent)} "}],
            "stop_reason": "pause_turn" if paused else "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 2},
        }
        return httpx.Response(
            200,
            headers={"content-type": "application/json"},
            stream=httpx.ByteStream(json.dumps(data).encode()),
        )

    model = AnthropicModel(base_url="http://api.test", api_key="k", thinking_budget=2048)

    async def go() -> StreamResult:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
            return await model.stream(_request(stream=False), lambda _e: None, http)

    result = asyncio.run(go())
    assert result.message.text == "part 1part 2part 3 " and result.finish_reason == "stop"
    assert result.usage.prompt_tokens == 30 and result.usage.completion_tokens == 6
    assert "thinking" in sent[0] and "thinking" not in sent[1]  # a prefill has no thinking
    assert sent[1]["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "part 1", "cache_control": {"type": "ephemeral"}}],
    }
    assert sent[2]["messages"][-1]["content"][0]["text"] == "part 1part 2"
    for body in sent:
        assert validate_request(body) is None
