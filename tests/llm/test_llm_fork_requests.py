"""Fork requests (suggestion, speculation, pipelined) as a server sees them.

A server notices that a client left only when it next writes to it: a fork
that is not streamed keeps generating after its abort until it is done (an
aborted speculation held a one-slot llama.cpp server for three minutes). So
forks are streamed by default and an abort closes the stream mid-answer; each
carries a ``max_tokens`` the model accepts -- a suggestion a small one, a
speculation what its budget leaves, never above the model's output limit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import OpenAICompatible
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.models import StreamResult
from fore.actors.llm.script import ScriptFile
from fore.actors.speculation.metered import MeteredModel
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.llm import LlmRequest, Usage
from fore.messages.speculation import SpeculationConfig, TokenBudgetReached
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    overlay_dirs,
    spec,
    suggestion,
    wait_until,
)

LONG_SPECULATION = ScriptFile.model_validate(
    {
        "replies": [
            *TWO_TURNS,
            suggestion("explain at length"),
            {
                "when": {"purpose": "speculation"},
                "text": "word " * 400,
                "tokens_per_s": 20,  # 20 s: still streaming when the user types
            },
        ]
    }
)


def test_forks_are_streamed_and_capped_by_default(runtime: Runtime, tmp_path: Path) -> None:
    assert SpeculationConfig().stream_forks is True
    with MockLlmServer(LONG_SPECULATION) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(workspace=tmp_path, model=model, speculation=spec()) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: s.speculation.state == "running")
            wait_until(lambda: any(r.purpose == "speculation" for r in server.requests()))
            (speculation,) = [r for r in server.requests() if r.purpose == "speculation"]
            # The user types: the abort closes the stream while the server is writing it.
            s.keystroke("no")
            server.wait_for_stats(
                lambda st: speculation.request_id in st.disconnected_request_ids, timeout_s=WAIT
            )
            wait_until(lambda: overlay_dirs(runtime) == [])
        requests = {r.purpose: r for r in server.requests()}
    suggested, speculated = requests["suggestion"], requests["speculation"]
    assert suggested.stream and speculated.stream
    assert isinstance(suggested.body, dict) and isinstance(speculated.body, dict)
    assert suggested.body["max_tokens"] == SpeculationConfig().suggestion_max_tokens == 96
    # What the 200,000-token budget leaves is far above any model's output limit.
    assert speculated.body["max_tokens"] == model.max_output_tokens == 4096
    assert speculated.outcome == "disconnected"


# -- the speculation's cap, unit by unit --


class _Model:
    """A provider whose answers end as told (finish reason, usage)."""

    def __init__(self, finish_reason: str, max_output_tokens: int | None = None) -> None:
        self.name = "m"
        self.retry = None
        self.finish_reason = finish_reason
        if max_output_tokens is not None:
            self.max_output_tokens = max_output_tokens
        self.seen: list[LlmRequest] = []

    async def stream(self, request: LlmRequest, emit: Any, http: Any) -> StreamResult:
        self.seen.append(request)
        usage = Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15)
        return StreamResult(AssistantMessage(text="ok"), usage, self.finish_reason)


class _Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    def tell(self, message: Any) -> None:
        self.messages.append(message)


def _stream(metered: MeteredModel, *, stream: bool = True) -> None:
    request = LlmRequest(
        request_id="r",
        session_id="s",
        purpose="speculation",
        messages=(UserMessage(text="x" * 40),),
        stream=stream,
    )
    asyncio.run(metered.stream(request, lambda event: None, None))  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [True, False])
def test_a_speculation_request_carries_what_its_budget_leaves(stream: bool) -> None:
    inner, inbox = _Model("length"), _Inbox()
    _stream(MeteredModel(inner, inbox, token_budget=1000), stream=stream)
    assert inner.seen[0].max_tokens == 1000 - 10  # the prompt's 40 characters: 10 tokens
    assert any(isinstance(m, TokenBudgetReached) for m in inbox.messages)  # cut at the cap


def test_a_budget_beyond_the_models_limit_leaves_the_cap_to_the_model() -> None:
    """A cut at the model's output limit is not the budget reached."""
    inner, inbox = _Model("length", max_output_tokens=4096), _Inbox()
    _stream(MeteredModel(inner, inbox, token_budget=200_000))
    assert inner.seen[0].max_tokens == 4096  # the model's limit, not 199,990
    assert not any(isinstance(m, TokenBudgetReached) for m in inbox.messages)
    inner, inbox = _Model("length", max_output_tokens=4096), _Inbox()
    _stream(MeteredModel(inner, inbox, token_budget=500))
    assert inner.seen[0].max_tokens == 490
    assert any(isinstance(m, TokenBudgetReached) for m in inbox.messages)


# -- a fork's stream, read in batches, is the same answer --

TOOLS_AND_TEXT = ScriptFile.model_validate(
    {
        "replies": [
            {
                "text": "Let me look at both files first.",
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": "a.py", "note": "line\nbreak"}},
                    {"name": "grep", "arguments": {"pattern": "x = [0-9]+", "path": "."}},
                ],
                "tokens_per_s": 400,
            }
        ]
        * 4
    }
)


@pytest.mark.parametrize("fault", [None, "malformed", "truncated"])
def test_a_background_stream_reads_to_the_same_answer_and_errors(fault: str | None) -> None:
    from tests.llm.test_llm_hostile import ask

    with MockLlmServer(TOOLS_AND_TEXT, tool_args_chunk_chars=3) as server:
        results = []
        for purpose in ("main", "speculation"):
            if fault is not None:
                server.queue_fault(fault)  # type: ignore[arg-type]
            result, events = ask(server.base_url, purpose=purpose)
            streamed = "".join(e for e in events if isinstance(e, str))
            results.append((result, streamed))
    (main, main_text), (fork, fork_text) = results
    if fault is None:
        assert isinstance(main, StreamResult) and isinstance(fork, StreamResult)
        assert fork.message.text == main.message.text and fork.finish_reason == "tool_calls"
        assert [(c.name, c.arguments) for c in fork.message.tool_calls] == [
            (c.name, c.arguments) for c in main.message.tool_calls
        ]
        assert fork_text == main_text == main.message.text
    else:
        assert not isinstance(main, StreamResult) and not isinstance(fork, StreamResult)
        assert fork.error.kind == main.error.kind
        assert fork.error.message.split(":")[0] == main.error.message.split(":")[0]
