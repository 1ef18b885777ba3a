"""The mock OpenAI-compatible server, exercised over real loopback HTTP.

The clients here are plain ``httpx`` and ``httpx_sse`` -- no mocks -- so what
these tests see is what the LLM gateway's client will see on the wire.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from fore.actors.llm.mock_server import (
    FAULT_KINDS,
    MockLlmControl,
    MockLlmServer,
    MockStats,
    generated_text,
    main,
)
from fore.actors.llm.script import (
    NO_REPLY_TEXT,
    ScriptFile,
    ScriptReply,
    ScriptToolCall,
    ScriptWhen,
    arguments_json,
)

FIXTURE = Path(__file__).parent / "data" / "mock_script_basic.json"


# --------------------------------------------------------------------------- #
# Fixtures and helpers
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def shared_server() -> Iterator[MockLlmServer]:
    with MockLlmServer(stall_s=30.0) as server:
        yield server


@pytest.fixture
def mock(shared_server: MockLlmServer) -> MockLlmServer:
    shared_server.set_script(None)
    shared_server.reset()
    return shared_server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as c:
        yield c


def chat_body(text: str = "hello", *, stream: bool = True, **extra: Any) -> dict[str, Any]:
    return {
        "model": "mock-model",
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
        **extra,
    }


def url(server: MockLlmControl) -> str:
    return server.base_url + "/chat/completions"


def sse_data(
    client: httpx.Client,
    server: MockLlmControl,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> list[str]:
    """The ``data`` of every SSE event, as text (including ``[DONE]``)."""
    with connect_sse(client, "POST", url(server), json=body, headers=headers or {}) as source:
        assert source.response.status_code == 200
        return [event.data for event in source.iter_sse()]


def stream_chunks(
    client: httpx.Client,
    server: MockLlmControl,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """Parsed chunks and whether the stream ended with ``[DONE]``."""
    data = sse_data(client, server, body, headers)
    done = bool(data) and data[-1] == "[DONE]"
    return [json.loads(d) for d in data if d != "[DONE]"], done


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Reassemble a streamed answer the way an OpenAI client does."""
    text = ""
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    fragments: dict[int, int] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            text += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                if "id" in tc:
                    slot["id"] = tc["id"]
                    slot["type"] = tc["type"]
                function = tc.get("function", {})
                if "name" in function:
                    slot["name"] = function["name"]
                if function.get("arguments"):
                    slot["arguments"] += function["arguments"]
                    fragments[tc["index"]] = fragments.get(tc["index"], 0) + 1
            if choice["finish_reason"] is not None:
                finish = choice["finish_reason"]
    return {"text": text, "calls": calls, "finish": finish, "fragments": fragments}


def script_of(*replies: ScriptReply) -> ScriptFile:
    return ScriptFile(replies=replies)


# --------------------------------------------------------------------------- #
# Streaming and non-streaming answers
# --------------------------------------------------------------------------- #


def test_streaming_text_reassembles_to_the_scripted_text(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    text = "Running them now: pytest -q --maxfail=1, as you asked.\n"
    mock.set_script(script_of(ScriptReply(text=text)))
    chunks, done = stream_chunks(client, mock, chat_body())
    assert done
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content_chunks = [c for c in chunks if c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) > 3  # really streamed in pieces
    answer = assemble(chunks)
    assert answer["text"] == text
    assert answer["finish"] == "stop"
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert all(
        c["object"] == "chat.completion.chunk" and c["model"] == "mock-model" for c in chunks
    )
    assert all("usage" not in c for c in chunks)


def test_tool_call_arguments_arrive_split_and_reassemble(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    shell_args = {"command": 'pytest -q -k "not slow"', "timeout_s": 30}
    edit_args = {"path": "src/é.py", "patch": "line1\nline2\t\\end", "nested": {"a": [1, None]}}
    mock.set_script(
        script_of(
            ScriptReply(
                text="Two calls.",
                tool_calls=(
                    ScriptToolCall(name="shell", arguments=shell_args),
                    ScriptToolCall(name="edit", arguments=edit_args, id="call_given_id"),
                    ScriptToolCall(name="noop"),
                ),
            )
        )
    )
    chunks, done = stream_chunks(
        client, mock, chat_body(), headers={"X-Mock-Args-Chunk-Chars": "3"}
    )
    assert done
    answer = assemble(chunks)
    assert answer["text"] == "Two calls."
    assert answer["finish"] == "tool_calls"
    calls = answer["calls"]
    assert sorted(calls) == [0, 1, 2]
    assert calls[0]["name"] == "shell" and json.loads(calls[0]["arguments"]) == shell_args
    assert calls[1]["name"] == "edit" and json.loads(calls[1]["arguments"]) == edit_args
    assert calls[2]["name"] == "noop" and json.loads(calls[2]["arguments"]) == {}
    assert calls[1]["id"] == "call_given_id"
    assert calls[0]["id"].startswith("call_") and calls[0]["id"] != calls[2]["id"]
    assert all(c["type"] == "function" for c in calls.values())
    # Split into many fragments of at most 3 characters.
    assert answer["fragments"][0] == -(-len(arguments_json(shell_args)) // 3)
    for chunk in chunks:
        for tc in chunk["choices"][0]["delta"].get("tool_calls") or []:
            assert len(tc["function"]["arguments"]) <= 3
            # The header delta carries the id and an empty argument string.
            assert ("id" in tc) == (tc["function"].get("arguments") == "")


def test_generated_ids_differ_between_requests(mock: MockLlmServer, client: httpx.Client) -> None:
    call = ScriptToolCall(name="shell")
    mock.set_script(script_of(ScriptReply(tool_calls=(call,)), ScriptReply(tool_calls=(call,))))
    first = assemble(stream_chunks(client, mock, chat_body())[0])["calls"][0]["id"]
    second = assemble(stream_chunks(client, mock, chat_body())[0])["calls"][0]["id"]
    assert first != second


def test_usage_chunk_only_when_asked(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(script_of(ScriptReply(text="a b c"), ScriptReply(text="a b c")))
    chunks, done = stream_chunks(client, mock, chat_body(stream_options={"include_usage": True}))
    assert done
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["completion_tokens"] == 3
    assert usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"

    chunks, done = stream_chunks(client, mock, chat_body(stream_options={"include_usage": False}))
    assert done
    assert all("usage" not in c and c["choices"] for c in chunks)


def test_non_streaming_completion(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(
        script_of(
            ScriptReply(text="Just text."),
            ScriptReply(tool_calls=(ScriptToolCall(name="shell", arguments={"c": "ls"}),)),
        )
    )
    body = client.post(url(mock), json=chat_body(stream=False)).json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "Just text."}
    assert choice["finish_reason"] == "stop"
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 2

    body = client.post(url(mock), json=chat_body(stream=False)).json()
    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "shell"
    assert json.loads(call["function"]["arguments"]) == {"c": "ls"}


def test_max_tokens_cuts_the_answer_as_a_provider_does(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    """Past the cap the text stops, tool calls are dropped, finish_reason is length."""
    long = ScriptReply(text="one two three four five", tool_calls=(ScriptToolCall(name="x"),))
    mock.set_script(script_of(long, long, long, ScriptReply(text="a b")))
    chunks, done = stream_chunks(
        client, mock, chat_body(max_tokens=3, stream_options={"include_usage": True})
    )
    answer = assemble(chunks)
    assert done and answer["text"] == "one two three"
    assert answer["calls"] == {} and answer["finish"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 3

    body = client.post(url(mock), json=chat_body(stream=False, max_tokens=2)).json()
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "one two"}
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2

    # max_completion_tokens wins over max_tokens, as at OpenAI
    body = client.post(
        url(mock), json=chat_body(stream=False, max_tokens=50, max_completion_tokens=1)
    ).json()
    assert body["choices"][0]["message"]["content"] == "one"

    # an answer that fits is untouched
    body = client.post(url(mock), json=chat_body(stream=False, max_tokens=2)).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["message"]["content"] == "a b"


@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True])
def test_a_bad_max_tokens_is_a_400(mock: MockLlmServer, client: httpx.Client, value: Any) -> None:
    response = client.post(url(mock), json=chat_body(stream=False, max_tokens=value))
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "max_tokens"


def test_generated_text_mode_is_deterministic(mock: MockLlmServer, client: httpx.Client) -> None:
    texts = [
        assemble(stream_chunks(client, mock, chat_body("same question"))[0])["text"]
        for _ in range(2)
    ]
    other = assemble(stream_chunks(client, mock, chat_body("another question"))[0])["text"]
    assert texts[0] == texts[1] == generated_text(24, "main\0same question")
    assert len(texts[0].split()) == 24
    assert other != texts[0]


def test_latency_model_is_what_the_server_applies(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    """The pacing the server planned is recorded, so no test needs a clock to check it.

    Header values pace a request; a reply's own ``ttft_ms`` / ``tokens_per_s``
    win over them (``delay_ms`` adds on top); the server-wide defaults apply
    otherwise.
    """
    headers = {"X-Mock-TTFT-Ms": "150", "X-Mock-Tokens-Per-S": "50"}
    data = sse_data(client, mock, chat_body(), headers)
    assert data[-1] == "[DONE]"
    paced = mock.requests()[-1]
    assert paced.ttft_s == pytest.approx(0.15)
    assert paced.token_interval_s == pytest.approx(0.02)

    mock.set_script(script_of(ScriptReply(text="own pace", ttft_ms=5, delay_ms=7)))
    sse_data(client, mock, chat_body(), headers)
    own = mock.requests()[-1]
    assert own.ttft_s == pytest.approx(0.012)
    assert own.token_interval_s == pytest.approx(0.02)

    sse_data(client, mock, chat_body())
    unpaced = mock.requests()[-1]
    assert (unpaced.ttft_s, unpaced.token_interval_s) == (0.0, 0.0)
    refused = client.post(url(mock), json=chat_body(), headers={"X-Mock-Fault": "500"})
    assert refused.status_code == 500
    assert mock.requests()[-1].ttft_s is None


# --------------------------------------------------------------------------- #
# Script consumption over HTTP
# --------------------------------------------------------------------------- #


def test_script_is_consumed_per_session(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(script_of(ScriptReply(text="first"), ScriptReply(text="second")))

    def ask(session: str | None) -> str:
        headers = {"X-Fore-Session": session} if session else {}
        return str(assemble(stream_chunks(client, mock, chat_body(), headers)[0])["text"])

    assert ask("A") == "first"
    assert ask("B") == "first"
    assert ask("A") == "second"
    assert ask(None) == "first"  # the "default" session
    assert ask("A") == NO_REPLY_TEXT
    assert ask("B") == "second"


def test_purpose_and_contains_matching_over_http(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(ScriptFile.from_path(FIXTURE))

    def ask(messages: list[dict[str, Any]], purpose: str | None = None) -> dict[str, Any]:
        headers = {"X-Fore-Purpose": purpose} if purpose else {}
        body = {"model": "m", "messages": messages, "stream": True}
        return assemble(stream_chunks(client, mock, body, headers)[0])

    # "main" is the default purpose; the first reply needs "run the tests".
    assert ask([{"role": "user", "content": "hi"}])["text"] == NO_REPLY_TEXT
    assert ask([{"role": "user", "content": "x"}], "suggestion")["text"] == (
        "Try running the tests."
    )
    answer = ask([{"role": "user", "content": "please run the tests"}])
    assert answer["text"] == "Running them."
    assert json.loads(answer["calls"][0]["arguments"]) == {"command": "pytest -q"}
    # contains looks at the last tool result (list-of-parts content works too).
    tool_turn: list[dict[str, Any]] = [
        {"role": "user", "content": "please run the tests"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "12 passed"}]},
    ]
    assert ask(tool_turn, "pipelined")["text"] == "All 12 tests passed; nothing left to fix."
    assert ask(tool_turn)["text"] == NO_REPLY_TEXT


def test_set_script_over_http_and_back_to_generated(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    script = script_of(ScriptReply(text="from http"))
    response = client.post(mock.root_url + "/mock/script", content=script.to_json())
    assert response.status_code == 200
    assert assemble(stream_chunks(client, mock, chat_body())[0])["text"] == "from http"
    bad = client.post(mock.root_url + "/mock/script", content=b'{"replies": [{"txt": 1}]}')
    assert bad.status_code == 400
    assert "replies[0].txt" in bad.json()["error"]["message"]
    assert client.delete(mock.root_url + "/mock/script").status_code == 200
    assert assemble(stream_chunks(client, mock, chat_body())[0])["text"] == generated_text(
        24, "main\0hello"
    )


# --------------------------------------------------------------------------- #
# Faults
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "case",
    [
        ("500", 500, "server_error"),
        ("529", 529, "overloaded_error"),
        ("401", 401, "invalid_request_error"),
        ("400", 400, "invalid_request_error"),
        ("429", 429, "requests"),
    ],
)
@pytest.mark.parametrize("stream", [True, False])
def test_status_faults(
    mock: MockLlmServer, client: httpx.Client, case: tuple[str, int, str], stream: bool
) -> None:
    fault, status, error_type = case
    response = client.post(
        url(mock),
        json=chat_body(stream=stream),
        headers={"X-Mock-Fault": fault, "X-Mock-Retry-After": "3"},
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == error_type
    assert set(error) == {"message", "type", "param", "code"}
    if fault == "429":
        assert response.headers["retry-after"] == "3"
    else:
        assert "retry-after" not in response.headers
    stats = mock.stats()
    assert stats.faults_served == 1 and stats.faults_by_kind == {fault: 1}


def test_queued_faults_count_session_and_script_is_not_consumed(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    mock.set_script(script_of(ScriptReply(text="the answer")))
    mock.queue_fault("429", count=2, retry_after=0.5, session="s1")
    s1 = {"X-Fore-Session": "s1"}
    other = client.post(url(mock), json=chat_body(stream=False), headers={"X-Fore-Session": "s2"})
    assert other.status_code == 200
    for _ in range(2):
        limited = client.post(url(mock), json=chat_body(stream=False), headers=s1)
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "0.5"
    # The faulted requests did not use the reply: the retry gets it.
    ok = client.post(url(mock), json=chat_body(stream=False), headers=s1)
    assert ok.json()["choices"][0]["message"]["content"] == "the answer"
    assert [r.fault for r in mock.requests()] == [None, "429", "429", None]


def test_faults_endpoint_over_http(mock: MockLlmServer, client: httpx.Client) -> None:
    queued = client.post(mock.root_url + "/mock/faults", json={"fault": 500, "count": 1})
    assert queued.status_code == 200
    assert queued.json()["queued"]["fault"] == "500"
    assert client.post(url(mock), json=chat_body(stream=False)).status_code == 500
    assert client.post(url(mock), json=chat_body(stream=False)).status_code == 200
    bad = client.post(mock.root_url + "/mock/faults", json={"fault": "teapot"})
    assert bad.status_code == 400
    assert "fault" in bad.json()["error"]["message"]
    zero = client.post(mock.root_url + "/mock/faults", json={"fault": "cut", "count": 0})
    assert zero.status_code == 400


def test_malformed_chunk(mock: MockLlmServer, client: httpx.Client) -> None:
    data = sse_data(client, mock, chat_body(), {"X-Mock-Fault": "malformed"})
    bad = []
    for d in data:
        if d == "[DONE]":
            continue
        try:
            json.loads(d)
        except ValueError:
            bad.append(d)
    assert len(bad) == 1
    assert data[-1] == "[DONE]"
    body = client.post(
        url(mock), json=chat_body(stream=False), headers={"X-Mock-Fault": "malformed"}
    )
    assert body.status_code == 200
    with pytest.raises(ValueError):
        json.loads(body.content)


def test_truncated_stream(mock: MockLlmServer, client: httpx.Client) -> None:
    chunks, done = stream_chunks(client, mock, chat_body(), {"X-Mock-Fault": "truncated"})
    assert not done
    assert chunks, "some chunks arrive before the stream ends"
    assert assemble(chunks)["finish"] is None
    assert mock.requests()[-1].outcome == "truncated"


def test_bad_tool_args_never_form_valid_json(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(
        script_of(ScriptReply(tool_calls=(ScriptToolCall(name="shell", arguments={"c": "ls"}),)))
    )
    chunks, done = stream_chunks(client, mock, chat_body(), {"X-Mock-Fault": "bad_tool_args"})
    assert done
    answer = assemble(chunks)
    assert answer["finish"] == "tool_calls"
    with pytest.raises(ValueError):
        json.loads(answer["calls"][0]["arguments"])
    # The faulted request did not use the scripted reply; without any scripted
    # call, one is made up, named after the first offered tool.
    mock.set_script(None)
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {}}}]
    chunks, _ = stream_chunks(
        client, mock, chat_body(tools=tools), {"X-Mock-Fault": "bad_tool_args"}
    )
    call = assemble(chunks)["calls"][0]
    assert call["name"] == "grep"
    with pytest.raises(ValueError):
        json.loads(call["arguments"])


def test_stall_is_seen_as_a_read_timeout_and_then_as_a_disconnect(mock: MockLlmServer) -> None:
    headers = {"X-Mock-Fault": "stall", "X-Mock-Stall-S": "60", "X-Fore-Request-Id": "stalled-1"}
    received: list[str] = []
    timeout = httpx.Timeout(10.0, read=0.3)
    with (
        httpx.Client(timeout=timeout) as slow_client,
        pytest.raises(httpx.ReadTimeout),
        connect_sse(slow_client, "POST", url(mock), json=chat_body(), headers=headers) as src,
    ):
        for event in src.iter_sse():
            received.append(event.data)
    # Headers and the role chunk came, then nothing.
    assert len(received) == 1
    assert json.loads(received[0])["choices"][0]["delta"]["role"] == "assistant"
    stats = mock.wait_for_stats(lambda s: s.disconnects >= 1 and s.in_flight == 0, timeout_s=10)
    assert stats.disconnected_request_ids == ("stalled-1",)
    record = mock.requests()[-1]
    assert (record.fault, record.outcome) == ("stall", "disconnected")


def test_cut_connection_is_a_protocol_error(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(script_of(ScriptReply(text="one two three four five six seven eight")))
    received: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        connect_sse(
            client, "POST", url(mock), json=chat_body(), headers={"X-Mock-Fault": "cut"}
        ) as source,
    ):
        for event in source.iter_sse():
            received.append(event.data)
    assert received and "[DONE]" not in received
    with pytest.raises(httpx.RemoteProtocolError):
        client.post(url(mock), json=chat_body(stream=False), headers={"X-Mock-Fault": "cut"})
    assert [r.outcome for r in mock.requests()] == ["cut", "cut"]
    # The server is fine afterwards.
    assert client.post(url(mock), json=chat_body(stream=False)).status_code == 200


def test_reject_tool_choice_only_when_a_function_is_forced(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]
    forced = {"type": "function", "function": {"name": "shell"}}
    reject = {"X-Mock-Fault": "reject_tool_choice"}
    for choice in ("auto", "required", "none"):
        ok = client.post(
            url(mock), json=chat_body(stream=False, tools=tools, tool_choice=choice), headers=reject
        )
        assert ok.status_code == 200, choice
    refused = client.post(
        url(mock), json=chat_body(stream=True, tools=tools, tool_choice=forced), headers=reject
    )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["param"] == "tool_choice"
    assert error["type"] == "invalid_request_error"
    assert "tool_choice" in error["message"] and "not supported" in error["message"]

    # A queued one waits for a forcing request instead of being used up.
    mock.queue_fault("reject_tool_choice")
    plain = client.post(url(mock), json=chat_body(stream=False, tools=tools))
    assert plain.status_code == 200
    forced_body = chat_body(stream=False, tools=tools, tool_choice=forced)
    assert client.post(url(mock), json=forced_body).status_code == 400
    assert client.post(url(mock), json=forced_body).status_code == 200


def test_reject_forced_tool_choice_server_flag(client: httpx.Client) -> None:
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {}}}]
    forced = {"type": "function", "function": {"name": "shell"}}
    with MockLlmServer(reject_forced_tool_choice=True) as server:
        refused = client.post(url(server), json=chat_body(tools=tools, tool_choice=forced))
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "tool_choice"
        ok = client.post(url(server), json=chat_body(stream=False, tools=tools, tool_choice="auto"))
        assert ok.status_code == 200


@pytest.mark.parametrize("stream", [True, False])
def test_stream_error_sends_a_typed_error_object(
    mock: MockLlmServer, client: httpx.Client, stream: bool
) -> None:
    mock.set_script(script_of(ScriptReply(text="one two three four five six seven eight")))
    headers = {"X-Mock-Fault": "stream_error"}
    if stream:
        data = sse_data(client, mock, chat_body(), headers)
        assert "[DONE]" not in data
        *chunks, last = [json.loads(d) for d in data]
        assert chunks and all("error" not in c for c in chunks)
        error = last["error"]
    else:
        response = client.post(url(mock), json=chat_body(stream=False), headers=headers)
        assert response.status_code == 400
        error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length" in error["message"]
    record = mock.requests()[-1]
    assert (record.fault, record.outcome) == ("stream_error", "error")
    # A faulted request does not use up the reply.
    assert assemble(stream_chunks(client, mock, chat_body())[0])["text"].startswith("one")


def test_linger_holds_the_body_open_after_done(mock: MockLlmServer) -> None:
    headers = {"X-Mock-Fault": "linger", "X-Mock-Stall-S": "60", "X-Fore-Request-Id": "linger-1"}
    received: list[str] = []
    with (
        httpx.Client(timeout=httpx.Timeout(10.0, read=0.3)) as slow_client,
        pytest.raises(httpx.ReadTimeout),
        connect_sse(slow_client, "POST", url(mock), json=chat_body(), headers=headers) as src,
    ):
        for event in src.iter_sse():
            received.append(event.data)
    # The whole answer came, [DONE] included; then the body stayed open.
    assert received[-1] == "[DONE]"
    assert assemble([json.loads(d) for d in received[:-1]])["finish"] == "stop"
    record = mock.requests()[-1]
    assert (record.fault, record.outcome) == ("linger", "completed")
    mock.wait_for_stats(lambda s: s.in_flight == 0, timeout_s=10)
    assert mock.stats().streams_completed == 1


@pytest.mark.parametrize("stream", [True, False])
def test_not_sse_is_a_200_html_page(
    mock: MockLlmServer, client: httpx.Client, stream: bool
) -> None:
    response = client.post(
        url(mock), json=chat_body(stream=stream), headers={"X-Mock-Fault": "not_sse"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "sign in" in response.text
    record = mock.requests()[-1]
    assert (record.fault, record.outcome) == ("not_sse", "error")


def test_every_fault_kind_is_covered_by_the_tests() -> None:
    covered = {"500", "529", "429", "401", "400", "malformed", "truncated", "bad_tool_args"}
    covered |= {"stall", "cut", "reject_tool_choice", "stream_error", "linger", "not_sse"}
    assert set(FAULT_KINDS) == covered


# --------------------------------------------------------------------------- #
# Disconnects, records, stats, bad requests
# --------------------------------------------------------------------------- #


def test_client_disconnect_mid_stream_is_recorded(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    headers = {"X-Mock-Tokens-Per-S": "20", "X-Fore-Request-Id": "req-42"}
    seen = 0
    with connect_sse(client, "POST", url(mock), json=chat_body(), headers=headers) as source:
        for _ in source.iter_sse():
            seen += 1
            if seen == 2:
                break
    stats = mock.wait_for_stats(lambda s: s.disconnects == 1 and s.in_flight == 0, timeout_s=10)
    assert stats.streams_started == 1
    assert stats.streams_completed == 0
    assert stats.disconnected_request_ids == ("req-42",)
    (record,) = mock.requests()
    assert record.outcome == "disconnected"
    assert record.request_id == "req-42"


def test_client_leaving_a_slow_non_streaming_request_is_recorded(mock: MockLlmServer) -> None:
    headers = {"X-Mock-TTFT-Ms": "60000", "X-Fore-Request-Id": "slow-1"}
    with (
        httpx.Client(timeout=httpx.Timeout(10.0, read=0.2)) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        impatient.post(url(mock), json=chat_body(stream=False), headers=headers)
    stats = mock.wait_for_stats(lambda s: s.disconnects == 1 and s.in_flight == 0, timeout_s=10)
    assert stats.disconnected_request_ids == ("slow-1",)
    assert stats.completions == 0
    assert mock.requests()[0].outcome == "disconnected"


def test_recorded_requests_show_exactly_what_was_sent(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    body = chat_body(
        "run it",
        tools=[
            {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}
        ],
        tool_choice={"type": "function", "function": {"name": "shell"}},
        stream_options={"include_usage": True},
        temperature=0.2,
    )
    headers = {
        "X-Fore-Session": "sess-1",
        "X-Fore-Purpose": "speculation",
        "X-Fore-Request-Id": "r-1",
        "Authorization": "Bearer test-key",
    }
    stream_chunks(client, mock, body, headers)
    (record,) = mock.requests()
    assert record.body == body
    assert (record.session, record.purpose, record.request_id) == ("sess-1", "speculation", "r-1")
    assert record.stream is True and record.outcome == "completed" and record.seq == 1
    assert record.headers["authorization"] == "Bearer test-key"

    over_http = client.get(mock.root_url + "/mock/requests").json()["requests"]
    assert over_http[0]["body"]["tool_choice"] == {
        "type": "function",
        "function": {"name": "shell"},
    }
    assert over_http[0]["session"] == "sess-1"


def test_record_ring_is_bounded(client: httpx.Client) -> None:
    with MockLlmServer(record_limit=3) as server:
        for i in range(5):
            client.post(url(server), json=chat_body(f"q{i}", stream=False))
        records = server.requests()
        assert [r.seq for r in records] == [3, 4, 5]
        assert records[0].body == chat_body("q2", stream=False)


def test_stats_reset_and_control_endpoints(mock: MockLlmServer, client: httpx.Client) -> None:
    stream_chunks(client, mock, chat_body())
    client.post(url(mock), json=chat_body(stream=False))
    stats = MockStats.model_validate_json(client.get(mock.root_url + "/mock/stats").content)
    assert stats == mock.stats()
    assert (stats.requests, stats.streams_started, stats.streams_completed) == (2, 1, 1)
    assert (stats.completions, stats.disconnects, stats.in_flight) == (1, 0, 0)
    assert stats.max_in_flight >= 1
    assert client.post(mock.root_url + "/mock/reset").status_code == 200
    assert mock.stats().requests == 0
    assert mock.requests() == ()
    assert client.get(mock.root_url + "/mock/health").json() == {"ok": True}
    assert client.get(mock.base_url + "/models").json()["data"][0]["id"] == "mock"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0]"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
    ],
)
def test_invalid_requests_are_400(
    mock: MockLlmServer, client: httpx.Client, body: dict[str, Any], param: str
) -> None:
    response = client.post(url(mock), json=body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
    assert mock.stats().bad_requests == 1


def test_bad_mock_headers_are_400(mock: MockLlmServer, client: httpx.Client) -> None:
    for headers in (
        {"X-Mock-Fault": "teapot"},
        {"X-Mock-TTFT-Ms": "soon"},
        {"X-Mock-Tokens-Per-S": "0"},
    ):
        response = client.post(url(mock), json=chat_body(), headers=headers)
        assert response.status_code == 400, headers
    not_json = client.post(
        url(mock), content=b"{nope", headers={"content-type": "application/json"}
    )
    assert not_json.status_code == 400


def test_many_concurrent_streams_and_disconnects(mock: MockLlmServer) -> None:
    """1,000 streams held open at once (stalled), the control API still answers, and
    every one of the 1,000 client disconnects is seen."""
    n = 1000

    async def scenario() -> tuple[int, MockStats]:
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=0)
        timeout = httpx.Timeout(90.0)  # generous: slow CI, debug-mode asyncio
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as aclient:
            opened = 0
            stop = asyncio.Event()

            async def one(i: int) -> None:
                nonlocal opened
                headers = {
                    "X-Mock-Fault": "stall",
                    "X-Mock-Stall-S": "600",
                    "X-Fore-Session": f"s{i}",
                }
                async with aclient.stream(
                    "POST", url(mock), json=chat_body(), headers=headers
                ) as r:
                    assert r.status_code == 200
                    opened += 1
                    await stop.wait()

            tasks = [asyncio.create_task(one(i)) for i in range(n)]
            deadline = time.monotonic() + 90
            while mock.stats().in_flight < n and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            # The control endpoint answers while 1,000 streams are open.
            async with httpx.AsyncClient(timeout=30.0) as control:
                response = await control.get(mock.root_url + "/mock/stats")
            during = MockStats.model_validate_json(response.content)
            stop.set()
            await asyncio.gather(*tasks)
            return opened, during

    opened, during = asyncio.run(scenario())
    assert opened == n
    assert during.in_flight == n
    stats = mock.wait_for_stats(lambda s: s.disconnects == n and s.in_flight == 0, timeout_s=90)
    assert stats.max_in_flight == n
    assert stats.faults_by_kind == {"stall": n}


# --------------------------------------------------------------------------- #
# Lifecycle
# --------------------------------------------------------------------------- #


def test_stop_cuts_in_flight_streams_and_leaves_no_thread() -> None:
    errors: list[BaseException] = []
    got_first = threading.Event()
    server = MockLlmServer(stall_s=300.0).start()
    base = server.base_url

    def stalled_client() -> None:
        try:
            with (
                httpx.Client(timeout=30.0) as c,
                connect_sse(
                    c,
                    "POST",
                    base + "/chat/completions",
                    json=chat_body(),
                    headers={"X-Mock-Fault": "stall"},
                ) as source,
            ):
                for _ in source.iter_sse():
                    got_first.set()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=stalled_client)
    thread.start()
    assert got_first.wait(10)
    server_threads = [t for t in threading.enumerate() if t.name == f"mock-llm-{server.port}"]
    assert server_threads
    server.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], httpx.RemoteProtocolError)
    assert not any(t.is_alive() for t in server_threads)
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/models", timeout=2.0)


def test_server_accepts_a_script_path() -> None:
    with MockLlmServer(FIXTURE) as server, httpx.Client(timeout=10) as c:
        answer = assemble(stream_chunks(c, server, chat_body("do run the tests"))[0])
        assert answer["text"] == "Running them."


def test_spawned_subprocess_serves_and_stops() -> None:
    script = script_of(ScriptReply(when=ScriptWhen(purpose="main"), text="from the child"))
    with MockLlmServer.spawn(script, tokens_per_s=1000.0) as server, httpx.Client(timeout=10) as c:
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        chunks, done = stream_chunks(c, server, chat_body())
        assert done and assemble(chunks)["text"] == "from the child"
        server.queue_fault("500")
        assert c.post(server.base_url + "/chat/completions", json=chat_body()).status_code == 500
        stats = server.stats()
        assert (stats.requests, stats.streams_completed, stats.faults_served) == (2, 1, 1)
        assert [r.fault for r in server.requests()] == [None, "500"]
        server.reset()
        assert server.stats().requests == 0
    assert server.returncode == 0


# --------------------------------------------------------------------------- #
# The CLI
# --------------------------------------------------------------------------- #


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fore mock-llm: error:")
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "mentions"),
    [
        (["--port", "abc"], "--port"),
        (["--port", "70000"], "--port"),
        (["--host", "0.0.0.0"], "0.0.0.0"),
        (["--host", "example.com"], "example.com"),
        (["--tokens-per-s", "0"], "--tokens-per-s"),
        (["--ttft-ms", "-5"], "--ttft-ms"),
        (["--log-level", "loud"], "--log-level"),
        (["--bogus"], "--bogus"),
    ],
)
def test_cli_bad_flags_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], mentions: str
) -> None:
    assert main(argv) == 2
    assert mentions in _one_error_line(capsys)


def test_cli_bad_script_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--script", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in _one_error_line(capsys)
    bad = tmp_path / "bad.json"
    bad.write_text('{"replies": [{"when": {"purpose": "nope"}}]}')
    assert main(["--script", str(bad)]) == 2
    assert "replies[0].when.purpose" in _one_error_line(capsys)


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--host", "--port", "--script", "--ttft-ms", "--tokens-per-s"):
        assert flag in out
    assert "--reject-forced-tool-choice" in out and "--generated-words" in out


# --------------------------------------------------------------------------- #
# Strictness: at least as strict as the real servers (issue 20, point 7)
# --------------------------------------------------------------------------- #

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("shell", "read_file")
]


def tool_turn(content: Any = "", call_id: str = "c1", answer_id: str | None = "c1") -> list[Any]:
    """A user message, an assistant tool call, and (unless ``answer_id`` is None) its result."""
    assistant: dict[str, Any] = {
        "role": "assistant",
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": "{}"}}
        ],
    }
    if content is not ...:
        assistant["content"] = content
    turn: list[Any] = [{"role": "user", "content": "run it"}, assistant]
    if answer_id is not None:
        turn.append({"role": "tool", "tool_call_id": answer_id, "content": "ok"})
    return turn


def post(client: httpx.Client, server: MockLlmControl, **body: Any) -> httpx.Response:
    full = {"model": "m", "stream": False, **body}
    full.setdefault("messages", [{"role": "user", "content": "hello"}])
    return client.post(url(server), json=full)


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        (tool_turn(content=None), "messages[1].content must be a string, got null"),
        (tool_turn(content=...), "messages[1].content must be a string"),
        (tool_turn(answer_id="other"), "must be a response to a preceding message"),
        (
            [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1",
             "content": "ok"}],
            "must be a response to a preceding message",
        ),
        (tool_turn(answer_id=None), "unanswered: ['c1']"),
        ([*tool_turn(), {"role": "tool", "tool_call_id": "c1", "content": "again"}],
         "no open call 'c1'"),
    ],
)  # fmt: skip
def test_the_strict_mock_refuses_what_real_servers_refuse(
    mock: MockLlmServer, client: httpx.Client, messages: list[Any], needle: str
) -> None:
    response = post(client, mock, messages=messages)
    assert response.status_code == 400, response.text
    assert needle in response.json()["error"]["message"]
    assert mock.requests()[-1].outcome == "bad_request"


def test_a_well_formed_tool_turn_passes(mock: MockLlmServer, client: httpx.Client) -> None:
    assert post(client, mock, messages=tool_turn()).status_code == 200
    parts = [{"type": "text", "text": "ok"}]
    turn = tool_turn()
    turn[2]["content"] = parts  # an array of text parts is a string's equal
    assert post(client, mock, messages=turn).status_code == 200


def test_a_lenient_mock_lets_through_what_a_lenient_server_does(client: httpx.Client) -> None:
    with MockLlmServer(strict=False) as lenient:
        for messages in (tool_turn(content=None), tool_turn(answer_id=None)):
            assert post(client, lenient, messages=messages).status_code == 200
        assert post(client, lenient, max_tokens=10**6).status_code == 200


def test_max_tokens_above_the_models_output_limit_is_a_400(client: httpx.Client) -> None:
    with MockLlmServer(max_output_tokens=1000) as server:
        assert post(client, server, max_tokens=1000).status_code == 200
        for name in ("max_tokens", "max_completion_tokens"):
            response = post(client, server, **{name: 199_878})
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["param"] == name
            assert f"'{name}' is too large: 199878" in error["message"]


def test_n_above_one_is_a_400(mock: MockLlmServer, client: httpx.Client) -> None:
    assert post(client, mock, n=1).status_code == 200
    response = post(client, mock, n=2)
    assert response.status_code == 400 and response.json()["error"]["param"] == "n"


def test_a_named_tool_choice_forces_that_tool(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(script_of(ScriptReply(text="I would rather talk."), ScriptReply(text="x")))
    forced = {"type": "function", "function": {"name": "read_file"}}
    body = post(client, mock, tools=TOOLS, tool_choice=forced).json()
    message = body["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["read_file"]
    assert not message["content"]
    chunks, done = stream_chunks(client, mock, chat_body(tools=TOOLS, tool_choice=forced))
    assert done and [c["name"] for c in assemble(chunks)["calls"].values()] == ["read_file"]


def test_tool_choice_none_and_required_are_honoured(
    mock: MockLlmServer, client: httpx.Client
) -> None:
    calls = ScriptReply(text="t", tool_calls=(ScriptToolCall(name="shell"),))
    mock.set_script(script_of(calls, ScriptReply(text="just text")))
    none = post(client, mock, tools=TOOLS, tool_choice="none").json()["choices"][0]
    assert not none["message"].get("tool_calls") and none["finish_reason"] == "stop"
    required = post(client, mock, tools=TOOLS, tool_choice="required").json()["choices"][0]
    assert [c["function"]["name"] for c in required["message"]["tool_calls"]] == ["shell"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tool_choice": "auto"}, "tool_choice"),  # without tools
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_object"}}, "messages"),  # no "json" in messages
    ],
)  # fmt: skip
def test_choices_a_server_cannot_honour_are_a_400(
    mock: MockLlmServer, client: httpx.Client, extra: dict[str, Any], param: str
) -> None:
    response = post(client, mock, **extra)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_json_mode_answers_a_json_object(mock: MockLlmServer, client: httpx.Client) -> None:
    mock.set_script(script_of(ScriptReply(text="not json at all"), ScriptReply(text='{"a": 1}')))
    messages = [{"role": "user", "content": "Answer in JSON."}]
    fmt = {"type": "json_object"}
    first = post(client, mock, messages=messages, response_format=fmt).json()
    assert json.loads(first["choices"][0]["message"]["content"]) == {"text": "not json at all"}
    chunks, _ = stream_chunks(
        client, mock, {**chat_body(), "messages": messages, "response_format": fmt}
    )
    assert json.loads(assemble(chunks)["text"]) == {"a": 1}


def test_background_streams_in_ticks_carry_the_same_answer(client: httpx.Client) -> None:
    """``background_tick_ms`` groups a fork's writes; what is sent is unchanged."""
    reply = ScriptReply(text="one two three four five six seven eight", tokens_per_s=200)
    with MockLlmServer(script_of(reply, reply), background_tick_ms=50) as server:
        fork, _ = stream_chunks(client, server, chat_body(), {"X-Fore-Purpose": "speculation"})
        main_turn, _ = stream_chunks(client, server, chat_body())
    assert assemble(fork) == assemble(main_turn)
    assert assemble(fork)["text"] == reply.text
    with pytest.raises(ValueError, match="background_tick_ms"):
        MockLlmServer(background_tick_ms=-1)
