"""``OpenAICompatible(stream=False)`` and ``fore run --no-stream``: whole answers on request.

llama-cpp-python's ``chatml-function-calling`` mode answers a *streamed*
``tool_choice: "auto"`` with HTTP 500 whenever the model picks a tool, so a
user of such a server must be able to ask for whole answers. The caller still
gets the text (as one delta) and the events it asked for. Against the mock
server here; ``tests/llm/test_real_server.py`` does it against the real one.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from fore.actors.llm import OpenAICompatible, RetryPolicy
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.models import StreamResult
from fore.actors.llm.script import ScriptFile, ScriptReply
from fore.messages.conversation import UserMessage
from fore.messages.llm import LlmRequest

REPLY = "Three colours: red, green and blue."


def _answer(model: OpenAICompatible, request: LlmRequest) -> tuple[StreamResult, list[Any]]:
    emitted: list[Any] = []

    async def go() -> StreamResult:
        async with httpx.AsyncClient(trust_env=False) as http:
            return await model.stream(request, emitted.append, http)

    return asyncio.run(go()), emitted


def _request(**fields: Any) -> LlmRequest:
    return LlmRequest(
        request_id="r1", session_id="s1", messages=(UserMessage(text="colours?"),), **fields
    )


def test_a_no_stream_endpoint_asks_for_a_whole_answer_and_hands_on_its_text() -> None:
    with MockLlmServer(ScriptFile(replies=(ScriptReply(text=REPLY),) * 3)) as server:
        model = OpenAICompatible(
            base_url=server.base_url, model="m", retry=RetryPolicy(max_retries=0), stream=False
        )
        result, emitted = _answer(model, _request())
        quiet, silent = _answer(model, _request(stream_deltas=False))
        bodies = [r.body for r in server.requests()]
    assert result.message.text == REPLY
    assert emitted == [REPLY]  # one delta, the whole text
    assert quiet.message.text == REPLY
    assert silent == []  # no deltas were asked for: none given
    assert all(isinstance(b, dict) and b["stream"] is False for b in bodies)
    assert all("stream_options" not in b for b in bodies if isinstance(b, dict))


def test_by_default_an_endpoint_streams_as_the_request_says() -> None:
    with MockLlmServer(ScriptFile(replies=(ScriptReply(text=REPLY),) * 2)) as server:
        model = OpenAICompatible(
            base_url=server.base_url, model="m", retry=RetryPolicy(max_retries=0)
        )
        streamed, emitted = _answer(model, _request())
        whole, _ = _answer(model, _request(stream=False))
        bodies = [r.body for r in server.requests()]
    assert streamed.message.text == whole.message.text == REPLY
    assert "".join(e for e in emitted if isinstance(e, str)) == REPLY
    assert [b["stream"] for b in bodies if isinstance(b, dict)] == [True, False]


def test_fore_run_no_stream_sends_whole_answer_requests_and_prints_the_text(
    tmp_path: Path,
) -> None:
    script = ScriptFile(
        replies=(
            ScriptReply.model_validate(
                {"text": "Listing.", "tool_calls": [{"name": "list_directory", "arguments": {}}]}
            ),
            ScriptReply(text=REPLY),
        )
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FORE_BASE_URL", "OPENAI_BASE_URL", "FORE_MODEL", "OPENAI_MODEL")
    }
    with MockLlmServer(script) as server:
        done = subprocess.run(
            [
                sys.executable, "-m", "fore.supervision.cli", "run", "--workspace", str(tmp_path),
                "--base-url", server.base_url, "--model", "m", "--no-stream", "what is here?",
            ],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )  # fmt: skip
        bodies = [r.body for r in server.requests()]
    assert done.returncode == 0, done.stderr
    assert REPLY in done.stdout  # the answer's text is shown though it came whole
    assert "[tool list_directory" in done.stdout
    assert len(bodies) == 2
    assert all(isinstance(b, dict) and b["stream"] is False for b in bodies)
