"""What real servers do that the first mock did not: the client copes with each.

Found against llama-cpp-python's server (issue 20): an assistant message with
tool calls and ``content: null`` is a 500 there; a speculation's ``max_tokens``
above the model's output limit is refused by providers; OpenAI's reasoning
models want ``max_completion_tokens``; a stream can end with a bare ``[DONE]``
and no finish reason; ``finish_reason: length`` means the answer was cut;
grammar-constrained tool arguments carry raw newlines inside strings; and the
errors a user sees for a wrong base URL or a dead port must say what is wrong.

Over real loopback HTTP, against the (strict) mock server or a raw server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import LlmException, OpenAICompatible, RetryPolicy, StreamResult
from fore.actors.llm.codec import parse_arguments
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.llm.wire import StreamAssembler, request_body, to_openai_message
from fore.bench.llm_hostile import CASES, Case, HostileServer, sse_chunk
from fore.messages.conversation import AssistantMessage, ToolCall, ToolResult, UserMessage
from fore.messages.llm import LlmRequest
from fore.supervision import Runtime
from tests.llm.test_llm_hostile import ask

WAIT = 60.0

TOOL_TURN = ScriptFile.model_validate(
    {
        "replies": [
            {"when": {"purpose": "main", "contains": "look"}, "tool_calls": [
                {"name": "list_directory", "arguments": {}}
            ]},
            {"when": {"purpose": "main"}, "text": "There is one file."},
        ]
    }
)  # fmt: skip


def model_for(server: Any, **options: Any) -> OpenAICompatible:
    options.setdefault("retry", RetryPolicy(max_retries=0))
    return OpenAICompatible(base_url=server.base_url, api_key="k", model="mock", **options)


# -- 1: an assistant turn of only tool calls --


def test_a_tool_only_assistant_message_is_sent_with_empty_content_not_null() -> None:
    message = AssistantMessage(text="", tool_calls=(ToolCall(id="c1", name="t", arguments={}),))
    assert to_openai_message(message)["content"] == ""


def test_a_tool_using_turn_completes_against_a_server_that_refuses_null_content(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Turn 2 of a tool loop carries the tool-only assistant message; the strict mock
    refuses ``content: null`` there (as llama.cpp-class servers do, with a 500)."""
    (tmp_path / "a.txt").write_text("x")
    with MockLlmServer(TOOL_TURN) as server:
        with runtime.open_session(workspace=tmp_path, model=model_for(server)) as s:
            result = s.submit("look around", timeout=WAIT)
        requests = server.requests()
    assert result.status == "completed", result.error
    assert [r.outcome for r in requests] == ["completed", "completed"]
    second = requests[1].body
    assert isinstance(second, dict)
    assistant = [m for m in second["messages"] if m["role"] == "assistant"]
    assert assistant[-1]["content"] == "" and assistant[-1]["tool_calls"]


# -- 3: the output cap and its field name --


def request(**fields: Any) -> LlmRequest:
    fields.setdefault("messages", (UserMessage(text="hi"),))
    return LlmRequest(request_id="r1", session_id="s1", **fields)


def test_max_tokens_never_exceeds_the_models_output_limit() -> None:
    model = OpenAICompatible(base_url="http://127.0.0.1:1/v1", model="m", max_output_tokens=512)
    assert model.shape(request(max_tokens=199_878)).max_tokens == 512
    assert model.shape(request(max_tokens=100)).max_tokens == 100
    assert model.shape(request()).max_tokens is None  # no cap asked, none sent
    default = OpenAICompatible(base_url="http://127.0.0.1:1/v1", model="m")
    assert default.shape(request(max_tokens=199_878)).max_tokens == 4096


def test_a_budget_sized_max_tokens_is_accepted_by_a_server_with_an_output_limit() -> None:
    """The strict mock refuses max_tokens above its model's limit (16,384), as providers do."""
    with MockLlmServer(max_output_tokens=16_384) as server:
        done = _ask_with(server, request(max_tokens=199_878))
        (record,) = server.requests()
    assert isinstance(done, StreamResult), done
    assert isinstance(record.body, dict) and record.body["max_tokens"] == 4096
    with MockLlmServer(max_output_tokens=16_384) as server:  # what it refuses
        refused = _ask_with(server, request(max_tokens=199_878), max_output_tokens=200_000)
    assert isinstance(refused, LlmException) and refused.error.status == 400
    assert "'max_tokens' is too large: 199878" in refused.error.message


def _ask_with(server: Any, req: LlmRequest, **options: Any) -> StreamResult | LlmException:
    import httpx

    from fore.actors.llm import evloop
    from fore.actors.llm.netio import FastAsyncTransport

    model = model_for(server, **options)

    async def go() -> StreamResult:
        async with httpx.AsyncClient(transport=FastAsyncTransport()) as http:
            return await model.stream(req, lambda event: None, http)

    try:
        return evloop.run(go())
    except LlmException as exc:
        return exc


def test_the_output_cap_can_travel_as_max_completion_tokens() -> None:
    with MockLlmServer() as server:
        done = _ask_with(server, request(max_tokens=50), max_tokens_field="max_completion_tokens")
        (record,) = server.requests()
    assert isinstance(done, StreamResult), done
    assert isinstance(record.body, dict)
    assert record.body["max_completion_tokens"] == 50 and "max_tokens" not in record.body
    body = request_body(request(max_tokens=7), "m", max_tokens_field="max_completion_tokens")
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body


def test_the_output_cap_options_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORE_MAX_OUTPUT_TOKENS", "1000")
    monkeypatch.setenv("FORE_MAX_TOKENS_FIELD", "max_completion_tokens")
    model = OpenAICompatible(base_url="http://127.0.0.1:1/v1", model="m")
    assert (model.max_output_tokens, model.max_tokens_field) == (1000, "max_completion_tokens")
    monkeypatch.setenv("FORE_MAX_TOKENS_FIELD", "max_tokenz")
    with pytest.raises(ValueError, match="max_tokens_field"):
        OpenAICompatible(base_url="http://127.0.0.1:1/v1", model="m")


# -- 4: incomplete and cut-off answers --


def test_done_without_a_finish_reason_is_an_incomplete_answer() -> None:
    with HostileServer(CASES["done_without_finish"]) as server:
        result, _ = ask(server.base_url)
    assert isinstance(result, LlmException)
    assert result.error.kind == "incomplete" and result.error.retryable
    assert "sent [DONE] without a finish_reason" in result.error.message
    assert "13 characters of text" in result.error.message  # how much arrived


def test_a_truncated_stream_says_how_much_arrived() -> None:
    with MockLlmServer(generated_words=40) as server:
        server.queue_fault("truncated")
        done = _ask_with(server, request())
    assert isinstance(done, LlmException)
    assert done.error.kind == "incomplete"
    message = done.error.message
    assert "stream ended before the answer was complete (it closed" in message
    assert "chunks" in message and "characters of text" in message


CUT_OFF = Case(
    "cut_off",
    "an answer the server cut at its output limit",
    "200 OK",
    (("Content-Type", "text/event-stream"),),
    lambda: iter(
        [
            sse_chunk({"role": "assistant", "content": "The first half of"}),
            sse_chunk({}, "length"),
            b"data: [DONE]\n\n",
        ]
    ),
)


def test_a_cut_off_answer_ends_the_turn_cut_off_with_its_text_kept(
    runtime: Runtime, tmp_path: Path
) -> None:
    with (
        HostileServer(CUT_OFF) as server,
        runtime.open_session(workspace=tmp_path, model=model_for(server)) as s,
    ):
        result = s.submit("explain", timeout=WAIT)
        history = s.history
    assert result.status == "cut_off"
    assert result.error is not None and "cut off" in result.error
    assert isinstance(history[-1], AssistantMessage)
    assert history[-1].text == "The first half of"


def test_a_cut_off_answer_is_not_exit_0_of_fore_run(tmp_path: Path) -> None:
    with HostileServer(CUT_OFF) as server:
        done = subprocess.run(
            [sys.executable, "-m", "fore.supervision.cli", "run", "--workspace", str(tmp_path),
             "--base-url", server.base_url, "--model", "m", "explain"],
            capture_output=True, text=True, timeout=WAIT, check=False,
            env={k: v for k, v in os.environ.items() if not k.startswith(("FORE_", "OPENAI_"))},
        )  # fmt: skip
    assert done.returncode == 6, (done.stdout, done.stderr)
    assert "[turn cut_off after 1 LLM calls]" in done.stdout
    assert "fore run: incomplete answer: the model's answer was cut off" in done.stderr


def test_tool_calls_cut_mid_way_are_dropped_and_the_answer_stays_length() -> None:
    assembler = StreamAssembler("r")
    assembler.feed(
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "t", "arguments": '{"x": 1}'}},
            {"index": 1, "id": "b", "function": {"name": "t", "arguments": '{"x": "unfini'}},
        ]}}]}
    )  # fmt: skip
    assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    message, _, reason = assembler.finish(saw_done=True)
    assert reason == "length"
    assert [c.id for c in message.tool_calls] == ["a"]


# -- 5: raw newlines in tool arguments --


def test_tool_arguments_with_a_raw_newline_inside_a_string_are_accepted() -> None:
    assert parse_arguments('{"text": "line one\nline two\ttab"}', "write") == {
        "text": "line one\nline two\ttab"
    }
    assembler = StreamAssembler("r")
    assembler.feed(
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "write", "arguments": '{"body": "a\n'}},
        ]}}]}
    )  # fmt: skip
    assembler.feed(
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": 'b"}'}},
        ]}}], }
    )  # fmt: skip
    assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    message, _, _ = assembler.finish(saw_done=True)
    assert message.tool_calls[0].arguments == {"body": "a\nb"}


# -- 8: errors that say what is wrong --


def test_a_base_url_without_v1_gets_a_404_that_says_what_was_meant() -> None:
    with MockLlmServer() as server:
        done = _ask_with(_Root(server.root_url), request())
    assert isinstance(done, LlmException)
    assert done.error.status == 404
    assert f"did you mean {server.root_url}/v1 ?" in done.error.message
    assert f"POST {server.root_url}/chat/completions" in done.error.message


class _Root:
    def __init__(self, url: str) -> None:
        self.base_url = url


def test_a_refused_connection_says_so_without_transport_internals(refused_port: int) -> None:
    port = refused_port
    done = _ask_with(_Root(f"http://127.0.0.1:{port}/v1"), request())
    assert isinstance(done, LlmException)
    assert done.error.kind == "connection"
    assert done.error.message == (
        f"cannot connect to http://127.0.0.1:{port}/v1: connection refused"
        " (is the server running and listening on that port?)"
    )


# -- the mock refuses what real servers refuse (and honours what they honour) --


def test_the_strict_mock_refuses_an_orphan_tool_result_a_history_never_holds(
    runtime: Runtime, tmp_path: Path
) -> None:
    body = request(
        messages=(
            UserMessage(text="hi"),
            ToolResult(call_id="nobody", name="t", output="?"),
        )
    )
    with MockLlmServer() as server:
        done = _ask_with(server, body)
    assert isinstance(done, LlmException) and done.error.status == 400
    assert "must be a response to a preceding message with 'tool_calls'" in done.error.message


def test_json_mode_answers_json() -> None:
    with MockLlmServer() as server:
        done = _ask_with(
            server, request(messages=(UserMessage(text="answer in json"),), json_response=True)
        )
    assert isinstance(done, StreamResult), done
    assert isinstance(json.loads(done.message.text), dict)
