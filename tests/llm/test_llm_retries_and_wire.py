"""The LLM layer's retry contract and wire robustness, over real loopback HTTP.

Regression tests for the audit of issue 4: streamed text of a failed attempt
is declared void (G12, at the gateway and at the session), the retry really
waits the advertised ``Retry-After`` (from the mock server's arrival records),
an SSE body split at *every* byte boundary (a raw-socket server writing one
byte per ``send``) still assembles, and the offline models keep bounded,
forgettable per-session state on their own threads (G9, G15).
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fore.actors.core import ActorSystem
from fore.actors.llm import (
    FunctionModel,
    LlmLoop,
    OpenAICompatible,
    RetryPolicy,
    ScriptedModel,
)
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile, ScriptReply
from fore.messages.conversation import AssistantMessage
from fore.messages.llm import (
    LlmCancelled,
    LlmCompleted,
    LlmFailed,
    LlmRequest,
    LlmRetrying,
    LlmTextDelta,
)
from fore.messages.session import LlmRetried, TextDelta, TurnFinished
from fore.supervision import Runtime
from tests.llm.test_llm_gateway import Harness as GatewayHarness

WAIT = 20.0
TERMINAL = (LlmCompleted, LlmFailed, LlmCancelled)
_ids = itertools.count()
LONG = " ".join(f"word{i}" for i in range(60))


class Harness(GatewayHarness):
    """The gateway tests' harness; each request gets a session of its own unless named."""

    def request(self, model: Any, **fields: Any) -> str:
        rid = fields.setdefault("request_id", f"r{next(_ids)}")
        fields.setdefault("session_id", f"s{rid}")
        return super().request(model, **fields)


@pytest.fixture
def harness() -> Iterator[Harness]:
    system = ActorSystem(name="llm-retries-test")
    loop = LlmLoop()
    try:
        yield Harness(system, loop)
    finally:
        assert loop.close()
        system.shutdown()


@pytest.fixture(scope="module")
def server() -> Iterator[MockLlmServer]:
    with MockLlmServer(ScriptFile(replies=(ScriptReply(text=LONG),))) as srv:
        yield srv


def http_model(base_url: str, **options: Any) -> OpenAICompatible:
    options.setdefault("retry", RetryPolicy(max_retries=2, initial_backoff=0.01, max_backoff=0.05))
    return OpenAICompatible(base_url=base_url, api_key="test-key", model="mock", **options)


# -- G12: a retry voids what the failed attempt streamed ---------------------------------------


def test_a_retry_after_a_cut_stream_says_how_much_text_is_void(
    harness: Harness, server: MockLlmServer
) -> None:
    server.reset()
    session = f"cut-{next(_ids)}"
    server.queue_fault("cut", count=1, session=session)
    events = harness.events(harness.request(http_model(server.base_url), session_id=session))
    (retry,) = [i for i, e in enumerate(events) if isinstance(e, LlmRetrying)]
    before = "".join(e.text for e in events[:retry] if isinstance(e, LlmTextDelta))
    after = "".join(e.text for e in events[retry:] if isinstance(e, LlmTextDelta))
    assert before  # the cut attempt had streamed part of the answer
    assert events[retry].discarded_chars == len(before)
    done = events[-1]
    assert isinstance(done, LlmCompleted) and done.attempts == 2
    assert after == done.message.text == LONG  # the retry streams the answer from the start


def test_a_session_subscriber_can_rebuild_the_answer_after_a_retry(
    server: MockLlmServer, tmp_path: Path
) -> None:
    server.reset()
    with Runtime(name="llm-retry-session") as rt:
        model = http_model(server.base_url)
        with rt.open_session(workspace=tmp_path, model=model) as s:
            server.queue_fault("cut", count=1, session=s.id)
            turn = s.submit("talk", timeout=WAIT)
            assert turn.status == "completed"
            text = ""
            retried = []
            for event in s.drain_events():
                if isinstance(event, TextDelta):
                    text += event.text
                elif isinstance(event, LlmRetried):
                    retried.append(event)
                    assert event.discard_streamed_text and event.discard_chars > 0
                    text = text[: len(text) - event.discard_chars]
                elif isinstance(event, TurnFinished):
                    break
            assert len(retried) == 1
            answer = turn.items[-1]
            assert isinstance(answer, AssistantMessage)
            assert text == answer.text == LONG


# -- Retry-After is waited, as the server saw it --------------------------------------------------


def test_the_retry_arrives_no_sooner_than_retry_after(
    harness: Harness, server: MockLlmServer
) -> None:
    server.reset()
    session = f"429-{next(_ids)}"
    server.queue_fault("429", count=1, retry_after=0.3, session=session)
    events = harness.events(harness.request(http_model(server.base_url), session_id=session))
    assert isinstance(events[-1], LlmCompleted)
    first, second = [r for r in server.requests() if r.session == session]
    assert first.fault == "429" and second.fault is None
    assert first.arrived_s is not None and second.arrived_s is not None
    # A lower bound from the server's own arrival records: the client waited.
    assert second.arrived_s - first.arrived_s >= 0.3 - 0.01


# -- an SSE body split at every byte ---------------------------------------------------------------


def sse_body() -> bytes:
    """A streamed answer with multi-byte text, escapes and two parallel tool calls."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "raw",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    events: list[dict[str, Any]] = [
        chunk({"role": "assistant", "content": "Grüße 👋 "}),
        chunk({"content": '"quoted" \\ and\nnew line'}),
        chunk(call(0, id="call_a", type="function", function={"name": "shell", "arguments": ""})),
        chunk(call(0, function={"arguments": '{"command": "echo \\u00fc '})),
        chunk(call(1, id="call_b", type="function", function={"name": "read_file"})),
        chunk(call(0, function={"arguments": '\\"ß\\""}'})),
        chunk(call(1, function={"arguments": '{"path": "dir/ä.txt"}'})),
        chunk({}, finish="tool_calls"),
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "raw",
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
        },
    ]
    parts = [b"data: " + json.dumps(e, ensure_ascii=False).encode() + b"\n\n" for e in events]
    return b"".join(parts) + b"data: [DONE]\n\n"


class ByteServer:
    """A one-shot HTTP server on 127.0.0.1 that writes its SSE answer one byte per send."""

    def __init__(self, *, chunked: bool) -> None:
        self.chunked = chunked
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.request = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.settimeout(WAIT)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += conn.recv(65536)
            self.request = body
            payload = sse_body()
            framing = (
                b"Transfer-Encoding: chunked\r\n"
                if self.chunked
                else b"Content-Length: %d\r\n" % len(payload)
            )
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                + framing
                + b"Connection: close\r\n\r\n"
            )
            for i in range(len(payload)):
                byte = payload[i : i + 1]
                conn.sendall(b"1\r\n" + byte + b"\r\n" if self.chunked else byte)
                time.sleep(0)  # let the client read what is there: splits land anywhere
            if self.chunked:
                conn.sendall(b"0\r\n\r\n")
        self.listener.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_sse_body_written_one_byte_at_a_time_assembles(harness: Harness, chunked: bool) -> None:
    raw = ByteServer(chunked=chunked)
    events = harness.events(harness.request(http_model(raw.base_url, retry=RetryPolicy(0))))
    raw.thread.join(WAIT)
    done = events[-1]
    assert isinstance(done, LlmCompleted), done
    text = "".join(e.text for e in events if isinstance(e, LlmTextDelta))
    assert text == done.message.text == 'Grüße 👋 "quoted" \\ and\nnew line'
    calls = done.message.tool_calls
    assert [(c.id, c.name) for c in calls] == [("call_a", "shell"), ("call_b", "read_file")]
    assert dict(calls[0].arguments) == {"command": 'echo ü "ß"'}
    assert dict(calls[1].arguments) == {"path": "dir/ä.txt"}
    assert (done.usage.prompt_tokens, done.usage.total_tokens) == (5, 12)
    assert json.loads(raw.request)["stream"] is True


# -- G9: offline models forget a session; FunctionModel keeps a bounded record ------------------


def test_scripted_model_forget_lets_a_session_id_start_afresh(harness: Harness) -> None:
    model = ScriptedModel([{"text": "hello"}])
    first = harness.events(harness.request(model, session_id="same"))[-1]
    again = harness.events(harness.request(model, session_id="same"))[-1]
    assert first.message.text == "hello" and again.message.text == "(no scripted reply)"
    model.forget("same")
    fresh = harness.events(harness.request(model, session_id="same"))[-1]
    assert fresh.message.text == "hello"


def test_function_model_requests_are_bounded_and_forgettable(harness: Harness) -> None:
    model = FunctionModel(lambda request: "ok", keep_requests=3)
    for session in ["a", "a", "b", "a", "b"]:
        done = harness.events(harness.request(model, session_id=session))[-1]
        assert isinstance(done, LlmCompleted)
    assert [r.session_id for r in model.requests] == ["b", "a", "b"]  # the newest three
    model.forget("b")
    assert [r.session_id for r in model.requests] == ["a"]
    model.close()


# -- G15: FunctionModel runs fn on its own bounded executor ----------------------------------------


def test_function_model_fn_runs_on_its_own_threads_and_blocking_fns_do_not_starve(
    harness: Harness,
) -> None:
    """Seven fns that each wait for all seven at once: the loop's default executor
    (min(32, cpus + 4) threads) may be smaller; the model's own executor is not."""
    barrier = threading.Barrier(7)
    names: list[str] = []
    lock = threading.Lock()

    def fn(request: LlmRequest) -> str:
        with lock:
            names.append(threading.current_thread().name)
        barrier.wait(WAIT)
        return "ok"

    model = FunctionModel(fn, max_workers=8)
    rids = {harness.request(model) for _ in range(7)}
    ends: dict[str, Any] = {}
    while len(ends) < len(rids):
        message = harness.inbox.get(timeout=WAIT)
        if isinstance(message, TERMINAL) and message.request_id in rids:
            ends[message.request_id] = message
    assert all(isinstance(end, LlmCompleted) for end in ends.values())
    assert all(name.startswith("fore-function-model") for name in names)
    model.close()
