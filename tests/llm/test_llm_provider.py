"""The OpenAI-compatible provider's edges, over real loopback HTTP against the mock server.

Timeouts (first byte vs idle vs a non-streaming deadline), configuration from
the environment reaching the wire, the loop-wide retry budget, errors sent
inside a 200 response, a body left open after ``[DONE]``, index-less tool-call
deltas, and the memory bound of the request encoding cache.
"""

from __future__ import annotations

import gc
import itertools
import json
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from fore.actors.core import ActorSystem
from fore.actors.llm import (
    LlmException,
    LlmLoop,
    OpenAICompatible,
    RetryBudget,
    RetryPolicy,
    StreamAssembler,
    Timeouts,
)
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile, ScriptReply
from fore.actors.llm.wire import _ITEMS, _EncodedCache, request_body, request_payload
from fore.messages.conversation import ToolResult, UserMessage
from fore.messages.llm import LlmCompleted, LlmFailed, LlmRequest, LlmRetrying
from tests.llm.test_llm_gateway import Harness

_ids = itertools.count()
REPLY = "The answer, in a few words."
ENV_VARS = (
    "FORE_BASE_URL",
    "OPENAI_BASE_URL",
    "FORE_API_KEY",
    "OPENAI_API_KEY",
    "FORE_MODEL",
    "OPENAI_MODEL",
    "FORE_EXTRA_HEADERS",
)


@pytest.fixture(scope="module")
def server() -> Iterator[MockLlmServer]:
    with MockLlmServer(ScriptFile(replies=(ScriptReply(text=REPLY),) * 50)) as srv:
        yield srv


@pytest.fixture
def make(server: MockLlmServer) -> Iterator[Any]:
    """``make(**LlmLoop options) -> Harness`` on a fresh loop; the server is reset."""
    server.reset()
    system = ActorSystem(name="llm-provider-test")
    loops: list[LlmLoop] = []

    def build(**options: Any) -> Harness:
        loops.append(LlmLoop(**options))
        return Harness(system, loops[-1])

    try:
        yield build
    finally:
        for loop in loops:
            assert loop.close()
        system.shutdown()


@pytest.fixture
def harness(make: Any) -> Harness:
    return make()  # type: ignore[no-any-return]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def model(server: MockLlmServer, **options: Any) -> OpenAICompatible:
    options.setdefault("retry", RetryPolicy(max_retries=0))
    return OpenAICompatible(base_url=server.base_url, api_key="k", model="mock", **options)


def sid(name: str) -> str:
    return f"{name}-{next(_ids)}"


def recorded(server: MockLlmServer, rid: str) -> Any:
    (record,) = [r for r in server.requests() if r.request_id == rid]
    return record


# -- timeouts --


def test_slow_first_token_is_governed_by_first_byte_not_idle(
    harness: Harness, server: MockLlmServer
) -> None:
    """A model that thinks for 2.5 s before streaming is fine with idle=1, first_byte=30."""
    slow_start = model(
        server,
        timeouts=Timeouts(connect=5, first_byte=30, idle=1),
        headers={"X-Mock-TTFT-Ms": "2500"},
    )
    rid = harness.request(slow_start, session_id=sid("ttft"))
    events = harness.events(rid)
    assert isinstance(events[-1], LlmCompleted), events[-1]
    assert events[-1].message.text == REPLY
    assert recorded(server, rid).ttft_s == pytest.approx(2.5)


def test_stall_after_the_first_chunk_hits_the_idle_timeout(
    harness: Harness, server: MockLlmServer
) -> None:
    session = sid("stall")
    server.queue_fault("stall", count=1, stall_s=30, session=session)
    stalls = model(server, timeouts=Timeouts(connect=5, first_byte=10, idle=0.3))
    failed = harness.events(harness.request(stalls, session_id=session))[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "timeout" and failed.error.retryable
    assert "idle" in failed.error.message


def test_no_first_token_within_first_byte_is_a_timeout(
    harness: Harness, server: MockLlmServer
) -> None:
    silent = model(
        server,
        timeouts=Timeouts(connect=5, first_byte=0.3, idle=10),
        headers={"X-Mock-TTFT-Ms": "60000"},
    )
    failed = harness.events(harness.request(silent, session_id=sid("first-byte")))[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "timeout"
    assert "first byte" in failed.error.message


def test_non_streaming_answer_has_its_own_overall_deadline(
    harness: Harness, server: MockLlmServer
) -> None:
    """A whole answer arrives at once: neither first_byte nor idle may cut it short."""
    patient = model(
        server,
        timeouts=Timeouts(connect=5, first_byte=0.3, idle=0.3, total=10),
        headers={"X-Mock-TTFT-Ms": "1000"},
    )
    done = harness.events(harness.request(patient, session_id=sid("total"), stream=False))[-1]
    assert isinstance(done, LlmCompleted) and done.message.text == REPLY

    impatient = model(
        server,
        timeouts=Timeouts(connect=5, first_byte=10, idle=10, total=0.3),
        headers={"X-Mock-TTFT-Ms": "60000"},
    )
    failed = harness.events(harness.request(impatient, session_id=sid("total"), stream=False))[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "timeout" and "complete answer" in failed.error.message


# -- configuration reaching the wire --


@pytest.mark.parametrize("prefix", ["FORE", "OPENAI"])
def test_environment_configures_url_key_and_model(
    harness: Harness, server: MockLlmServer, clean_env: pytest.MonkeyPatch, prefix: str
) -> None:
    clean_env.setenv(f"{prefix}_BASE_URL", server.base_url)
    clean_env.setenv(f"{prefix}_API_KEY", f"{prefix.lower()}-secret")
    clean_env.setenv(f"{prefix}_MODEL", f"{prefix.lower()}-model-7b")
    configured = OpenAICompatible(retry=RetryPolicy(max_retries=0))
    rid = harness.request(configured, session_id=sid("env"))
    assert isinstance(harness.events(rid)[-1], LlmCompleted)
    record = recorded(server, rid)
    assert record.headers["authorization"] == f"Bearer {prefix.lower()}-secret"
    assert record.body["model"] == f"{prefix.lower()}-model-7b"


def test_fore_variables_win_over_openai_ones(
    harness: Harness, server: MockLlmServer, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("FORE_BASE_URL", server.base_url)
    clean_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    clean_env.setenv("FORE_API_KEY", "fore-key")
    clean_env.setenv("OPENAI_API_KEY", "openai-key")
    clean_env.setenv("FORE_MODEL", "fore-model")
    clean_env.setenv("OPENAI_MODEL", "openai-model")
    rid = harness.request(OpenAICompatible(), session_id=sid("precedence"))
    assert isinstance(harness.events(rid)[-1], LlmCompleted)
    record = recorded(server, rid)
    assert record.headers["authorization"] == "Bearer fore-key"
    assert record.body["model"] == "fore-model"


def test_extra_headers_from_the_environment_and_arguments_reach_the_wire(
    harness: Harness, server: MockLlmServer, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("FORE_EXTRA_HEADERS", json.dumps({"X-Team": "core", "X-Override": "env"}))
    configured = model(server, headers={"X-Override": "argument", "HTTP-Referer": "fore"})
    rid = harness.request(configured, session_id=sid("headers"))
    assert isinstance(harness.events(rid)[-1], LlmCompleted)
    headers = recorded(server, rid).headers
    assert headers["x-team"] == "core"
    assert headers["x-override"] == "argument"  # explicit arguments win over the environment
    assert headers["http-referer"] == "fore"
    assert headers["x-fore-request-id"] == rid


def test_malformed_extra_headers_variable_is_a_clear_error(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("FORE_EXTRA_HEADERS", "X-Team: core")
    with pytest.raises(ValueError, match="FORE_EXTRA_HEADERS"):
        OpenAICompatible(base_url="http://127.0.0.1:9/v1")


# -- the loop-wide retry budget --


def test_an_empty_retry_budget_stops_retrying_with_the_typed_error(
    make: Any, server: MockLlmServer
) -> None:
    harness = make(retry_budget=RetryBudget(initial=1, per_request=0, cap=1))
    eager = model(server, retry=RetryPolicy(max_retries=5, initial_backoff=0.01, max_backoff=0.02))
    first, second = sid("budget"), sid("budget")
    server.queue_fault("500", count=10, session=first)
    server.queue_fault("500", count=10, session=second)

    events = harness.events(harness.request(eager, session_id=first))
    assert sum(isinstance(e, LlmRetrying) for e in events) == 1  # the only token
    failed = events[-1]
    assert isinstance(failed, LlmFailed) and failed.attempts == 2
    assert failed.error.kind == "server" and failed.error.status == 500
    assert "retry budget" in failed.error.message
    assert failed.error.provider_message and "injected by the mock" in failed.error.provider_message

    (at_once,) = harness.events(harness.request(eager, session_id=second))
    assert isinstance(at_once, LlmFailed) and at_once.attempts == 1
    assert at_once.error.kind == "server"
    sessions = [r.session for r in server.requests()]
    assert (sessions.count(first), sessions.count(second)) == (2, 1)


# -- errors and oddities inside a 200 response --


def test_in_stream_context_length_error_is_a_bad_request_not_retried(
    harness: Harness, server: MockLlmServer
) -> None:
    session = sid("stream-error")
    server.queue_fault("stream_error", count=5, session=session)
    eager = model(server, retry=RetryPolicy(max_retries=3, initial_backoff=0.01))
    events = harness.events(harness.request(eager, session_id=session))
    failed = events[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "bad_request" and not failed.error.retryable
    assert failed.attempts == 1 and not any(isinstance(e, LlmRetrying) for e in events)
    assert failed.error.provider_message and "maximum context length" in (
        failed.error.provider_message
    )
    assert failed.error.param == "messages"


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (
            {"type": "invalid_request_error", "code": "context_length_exceeded"},
            "bad_request",
            False,
        ),
        ({"type": "requests", "code": "rate_limit_exceeded"}, "rate_limit", True),
        ({"type": "insufficient_quota", "code": "insufficient_quota"}, "rate_limit", False),
        ({"code": 429, "message": "Rate limit exceeded: free-models-per-day"}, "rate_limit", True),
        ({"code": "400", "message": "bad"}, "bad_request", False),
        ({"code": 502, "message": "Provider returned error"}, "server", True),
        ({"type": "overloaded_error", "message": "Overloaded"}, "server", True),
        ({"type": "authentication_error"}, "auth", False),
        ({"message": "something odd happened"}, "server", True),
        ("a bare string", "server", True),
    ],
)
def test_in_stream_errors_are_typed_by_type_and_code(
    error: Any, kind: str, retryable: bool
) -> None:
    assembler = StreamAssembler("r")
    assembler.feed({"choices": [{"index": 0, "delta": {"content": "partial"}}]})
    with pytest.raises(LlmException) as info:
        assembler.feed({"error": error})
    assert (info.value.error.kind, info.value.error.retryable) == (kind, retryable)
    expected = error.get("message") if isinstance(error, dict) else error
    assert info.value.error.provider_message == expected


def test_a_body_left_open_after_done_does_not_spoil_a_complete_answer(
    harness: Harness, server: MockLlmServer
) -> None:
    session = sid("linger")
    server.queue_fault("linger", count=1, stall_s=60, session=session)
    patient = model(server, timeouts=Timeouts(connect=5, first_byte=10, idle=2, after_done=0.1))
    rid = harness.request(patient, session_id=session)
    done = harness.events(rid)[-1]
    assert isinstance(done, LlmCompleted), done
    assert done.message.text == REPLY and done.attempts == 1
    # That connection could not be reused, so it was closed: the server sees the client leave.
    server.wait_for_stats(lambda s: s.in_flight == 0, timeout_s=15)
    assert recorded(server, rid).outcome == "completed"


def test_connections_are_reused_when_the_server_ends_the_body(
    harness: Harness, server: MockLlmServer
) -> None:
    session = sid("reuse")  # one session: one client shard, one pool
    # A generous after_done, so even a starved test machine reads the end of the body.
    steady = model(server, timeouts=Timeouts(after_done=10))
    first = harness.request(steady, session_id=session)
    assert isinstance(harness.events(first)[-1], LlmCompleted)
    second = harness.request(steady, session_id=session)
    assert isinstance(harness.events(second)[-1], LlmCompleted)
    assert recorded(server, first).peer == recorded(server, second).peer


@pytest.mark.parametrize("stream", [True, False])
def test_a_200_that_is_not_the_answer_keeps_the_body_in_the_error(
    harness: Harness, server: MockLlmServer, stream: bool
) -> None:
    session = sid("not-sse")
    server.queue_fault("not_sse", count=1, session=session)
    failed = harness.events(harness.request(model(server), session_id=session, stream=stream))[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "protocol"
    assert "text/html" in failed.error.message
    assert failed.error.provider_message and "Please sign in" in failed.error.provider_message


# -- tool-call deltas without an index --


def _tool_chunk(call: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}


def test_tool_call_deltas_without_index_start_a_new_call_on_a_new_id() -> None:
    assembler = StreamAssembler("r")
    for call in (
        {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}},
        {"function": {"arguments": '{"path": '}},
        {"function": {"arguments": '"a.py"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "grep", "arguments": '{"p'}},
        {"id": "call_b", "function": {"arguments": '": "x"}'}},  # id repeated: same call
    ):
        assembler.feed(_tool_chunk(call))
    assembler.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    message, _, _ = assembler.finish(saw_done=True)
    assert [(c.id, c.name, dict(c.arguments)) for c in message.tool_calls] == [
        ("call_a", "read", {"path": "a.py"}),
        ("call_b", "grep", {"p": "x"}),
    ]


# -- the request encoding cache --


def test_encode_cache_does_not_keep_items_alive() -> None:
    item = ToolResult(call_id="c1", name="shell", output="x" * 100_000)
    request = LlmRequest(request_id="r", session_id="s", messages=(UserMessage(text="hi"), item))
    expected = json.dumps(request_body(request, "m"), ensure_ascii=False, separators=(",", ":"))
    assert request_payload(request, "m").decode() == expected
    alive = weakref.ref(item)
    del item, request
    gc.collect()
    assert alive() is None  # the session's history dies with the session


def test_encode_cache_is_bounded_by_bytes_as_well_as_count() -> None:
    assert _ITEMS.max_bytes <= 64 * 1024 * 1024
    cache = _EncodedCache(limit=1000, max_bytes=1024 * 1024)
    items = [ToolResult(call_id=f"c{i}", name="t", output=str(i) * 100_000) for i in range(40)]
    texts = [cache.get(item, _wire) for item in items]
    assert cache.bytes <= cache.max_bytes
    assert 0 < len(cache) < len(items)
    assert cache.get(items[-1], _wire) is texts[-1]  # the newest are still cached
    assert cache.get(items[0], _wire) == texts[0]  # the oldest left: encoded again, same JSON
    huge = ToolResult(call_id="h", name="t", output="y" * 600_000)  # > max_bytes / 4
    assert json.loads(cache.get(huge, _wire))["content"] == huge.output
    assert cache.bytes <= cache.max_bytes


def test_encode_cache_is_consistent_under_several_threads() -> None:
    """Several LlmLoops encode concurrently: the accounting must stay exact."""
    cache = _EncodedCache(limit=64, max_bytes=256 * 1024)
    items = [ToolResult(call_id=f"c{i}", name="t", output=f"{i}:" * (i * 50)) for i in range(200)]
    errors: list[str] = []

    def work(seed: int) -> None:
        for step in range(3000):
            item = items[(seed * 7919 + step * 31) % len(items)]
            if json.loads(cache.get(item, _wire))["content"] != item.output:
                errors.append(item.call_id)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(cache) <= cache.limit and cache.bytes <= cache.max_bytes
    entries = list(cache._entries.values())
    assert cache.bytes == sum(sys.getsizeof(text) for _, text in entries)


def _wire(item: ToolResult) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": item.call_id, "content": item.output}
