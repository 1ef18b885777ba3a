"""The LLM layer over real loopback HTTP against the mock server, and offline models.

Requests go through the real gateway actor and event loop to the real
OpenAI-compatible client; faults are injected by the mock server.
"""

from __future__ import annotations

import itertools
import json
import queue
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.core import ActorSystem, PooledActor
from fore.actors.core.cancel import CancelScope
from fore.actors.llm import (
    FunctionModel,
    LlmException,
    LlmGateway,
    LlmLoop,
    OpenAICompatible,
    RetryBudget,
    RetryPolicy,
    ScriptedModel,
    StreamAssembler,
    Timeouts,
    llm_error,
    retry_delay,
)
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile, ScriptReply, ScriptToolCall, stream_plan
from fore.actors.llm.wire import request_body, request_payload, to_openai_messages
from fore.messages.conversation import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import (
    LlmCancelled,
    LlmCompleted,
    LlmError,
    LlmFailed,
    LlmRequest,
    LlmRetrying,
    LlmTextDelta,
    LlmToolCallDelta,
    NamedToolChoice,
)
from fore.messages.tools import ToolDefinition

WAIT = 15.0
_ids = itertools.count()
TERMINAL = (LlmCompleted, LlmFailed, LlmCancelled)

SCRIPT = ScriptFile(
    replies=(
        ScriptReply(text="Running the tests now, then I will report back."),
        ScriptReply(
            text="Checking.",
            tool_calls=(
                ScriptToolCall(name="shell", arguments={"command": 'pytest -q "tests/ü\\\\x"'}),
                ScriptToolCall(name="read_file", arguments={"path": "src/app.py", "limit": 20}),
                ScriptToolCall(name="grep", arguments={"pattern": "\\bdef\\b", "path": "."}),
            ),
        ),
    )
)


class Sink(PooledActor):
    def __init__(self, inbox: queue.Queue[Any]) -> None:
        super().__init__()
        self.inbox = inbox

    def on_receive(self, message: Any) -> None:
        self.inbox.put(message)


class Harness:
    def __init__(self, system: ActorSystem, loop: LlmLoop) -> None:
        self.inbox: queue.Queue[Any] = queue.Queue()
        with system.activated():
            self.sink = Sink.start(self.inbox)
            self.gateway = LlmGateway.start(loop)

    def request(self, model: Any, **fields: Any) -> str:
        rid = fields.pop("request_id", f"r{next(_ids)}")
        fields.setdefault("session_id", "s1")
        fields.setdefault("messages", (UserMessage(text="hello"),))
        self.gateway.tell(LlmRequest(request_id=rid, model=model, reply_to=self.sink, **fields))
        return rid

    def events(self, rid: str, timeout: float = WAIT) -> list[Any]:
        """Every event of one request up to and including its terminal event."""
        collected: list[Any] = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.inbox.get(timeout=max(0.01, deadline - time.monotonic()))
            if getattr(message, "request_id", None) != rid:
                continue
            collected.append(message)
            if isinstance(message, TERMINAL):
                return collected

    def quiet(self, rid: str, seconds: float = 0.3) -> list[Any]:
        """Events of ``rid`` arriving in the next ``seconds`` (used to prove silence)."""
        end = time.monotonic() + seconds
        late = []
        while (remaining := end - time.monotonic()) > 0:
            try:
                message = self.inbox.get(timeout=remaining)
            except queue.Empty:
                break
            if getattr(message, "request_id", None) == rid:
                late.append(message)
        return late


@pytest.fixture(scope="module")
def server() -> Iterator[MockLlmServer]:
    with MockLlmServer(SCRIPT, tool_args_chunk_chars=1) as srv:
        yield srv


@pytest.fixture
def harness(server: MockLlmServer) -> Iterator[Harness]:
    server.reset()
    server.set_script(SCRIPT)
    system = ActorSystem(name="llm-test")
    loop = LlmLoop()
    try:
        yield Harness(system, loop)
    finally:
        assert loop.close()
        system.shutdown()


def http_model(server: MockLlmServer, **options: Any) -> OpenAICompatible:
    options.setdefault("retry", RetryPolicy(max_retries=2, initial_backoff=0.01, max_backoff=0.05))
    return OpenAICompatible(base_url=server.base_url, api_key="test-key", model="mock", **options)


def session(name: str) -> dict[str, str]:
    return {"session_id": f"{name}-{next(_ids)}"}


# -- streaming --


def test_streaming_text_arrives_as_deltas_and_completes(
    harness: Harness, server: MockLlmServer
) -> None:
    rid = harness.request(http_model(server), **session("text"))
    events = harness.events(rid)
    deltas = [e.text for e in events if isinstance(e, LlmTextDelta)]
    done = events[-1]
    assert isinstance(done, LlmCompleted)
    assert deltas  # unpaced tokens may be coalesced into few messages
    assert "".join(deltas) == done.message.text == SCRIPT.replies[0].text
    assert done.finish_reason == "stop"
    assert done.usage.completion_tokens > 0 and done.usage.total_tokens >= done.usage.prompt_tokens


@pytest.fixture
def loop_harness(server: MockLlmServer) -> Iterator[Any]:
    """A harness on a loop built by the test (``make(**LlmLoop options)``)."""
    server.reset()
    server.set_script(SCRIPT)
    system = ActorSystem(name="llm-test-loop")
    loops: list[LlmLoop] = []

    def make(**options: Any) -> Harness:
        loops.append(LlmLoop(**options))
        return Harness(system, loops[-1])

    try:
        yield make
    finally:
        for loop in loops:
            assert loop.close()
        system.shutdown()


def test_without_coalescing_every_streamed_token_is_one_delta(
    loop_harness: Any, server: MockLlmServer
) -> None:
    reply = ScriptReply(text="one two three four five six", tokens_per_s=200)
    server.set_script(ScriptFile(replies=(reply,)))
    harness = loop_harness(coalesce_ms=0)
    events = harness.events(harness.request(http_model(server), **session("paced")))
    deltas = [e.text for e in events if isinstance(e, LlmTextDelta)]
    assert deltas == list(stream_plan(reply).chunks)  # exactly the server's chunks, in order
    assert "".join(deltas) == events[-1].message.text


def test_coalescing_merges_deltas_and_flushes_before_the_terminal_event(
    loop_harness: Any, server: MockLlmServer
) -> None:
    """With a window longer than the stream, text after the first delta waits for the end.

    The first delta goes out at once (nothing was sent in the window before
    it); the rest is buffered and flushed, in one message, just before
    ``LlmCompleted`` -- so no text is ever lost or reordered.
    """
    reply = ScriptReply(text="one two three four five six")
    server.set_script(ScriptFile(replies=(reply,)))
    harness = loop_harness(coalesce_ms=600_000)
    events = harness.events(harness.request(http_model(server), **session("coalesced")))
    chunks = stream_plan(reply).chunks
    assert [type(e) for e in events] == [LlmTextDelta, LlmTextDelta, LlmCompleted]
    assert [events[0].text, events[1].text] == [chunks[0], "".join(chunks[1:])]


def test_parallel_tool_calls_reassemble_from_one_char_fragments(
    harness: Harness, server: MockLlmServer
) -> None:
    sid = session("tools")
    harness.events(harness.request(http_model(server), **sid))
    rid = harness.request(http_model(server), **sid)
    events = harness.events(rid)
    done = events[-1]
    assert isinstance(done, LlmCompleted)
    calls = done.message.tool_calls
    assert [c.name for c in calls] == ["shell", "read_file", "grep"]
    assert [dict(c.arguments) for c in calls] == [
        dict(t.arguments) for t in SCRIPT.replies[1].tool_calls
    ]
    assert len({c.id for c in calls}) == 3
    fragments = [e for e in events if isinstance(e, LlmToolCallDelta) and e.arguments_delta]
    assert all(len(f.arguments_delta) == 1 for f in fragments)
    assert done.finish_reason == "tool_calls"


def test_forced_tool_choice_and_usage_option_reach_the_wire(
    harness: Harness, server: MockLlmServer
) -> None:
    tool = ToolDefinition(name="resolve", description="d", parameters={"type": "object"})
    rid = harness.request(
        http_model(server),
        tools=(tool,),
        tool_choice=NamedToolChoice(name="resolve"),
        purpose="main",
        **session("wire"),
    )
    assert isinstance(harness.events(rid)[-1], LlmCompleted)
    (recorded,) = [r for r in server.requests() if r.request_id == rid]
    body = recorded.body
    assert isinstance(body, dict)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "resolve"}}
    assert body["stream_options"] == {"include_usage": True}
    assert body["tools"][0]["function"]["name"] == "resolve"
    assert recorded.purpose == "main"
    assert recorded.headers["authorization"] == "Bearer test-key"


def test_non_streaming_request(harness: Harness, server: MockLlmServer) -> None:
    rid = harness.request(http_model(server), stream=False, **session("nostream"))
    events = harness.events(rid)
    assert len(events) == 1
    assert isinstance(events[0], LlmCompleted)
    assert events[0].message.text == SCRIPT.replies[0].text


# -- faults --


def test_server_error_is_retried_then_succeeds(harness: Harness, server: MockLlmServer) -> None:
    sid = session("retry")
    server.queue_fault("500", count=1, session=sid["session_id"])
    events = harness.events(harness.request(http_model(server), **sid))
    retries = [e for e in events if isinstance(e, LlmRetrying)]
    assert len(retries) == 1 and "server" in retries[0].reason
    assert isinstance(events[-1], LlmCompleted)
    assert events[-1].attempts == 2


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("500", "server"),
        ("malformed", "protocol"),
        ("truncated", "incomplete"),
        ("cut", "connection"),
    ],
)
def test_persistent_retryable_faults_end_as_typed_errors(
    harness: Harness, server: MockLlmServer, fault: str, kind: str
) -> None:
    sid = session(fault)
    server.queue_fault(fault, count=10, session=sid["session_id"])  # type: ignore[arg-type]
    events = harness.events(harness.request(http_model(server), **sid))
    failed = events[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == kind
    assert failed.attempts == 3  # the first try and max_retries=2 retries
    assert sum(isinstance(e, LlmRetrying) for e in events) == 2


@pytest.mark.parametrize(("fault", "kind"), [("401", "auth"), ("400", "bad_request")])
def test_non_retryable_faults_fail_at_once(
    harness: Harness, server: MockLlmServer, fault: str, kind: str
) -> None:
    sid = session(fault)
    server.queue_fault(fault, count=1, session=sid["session_id"])  # type: ignore[arg-type]
    events = harness.events(harness.request(http_model(server), **sid))
    assert len(events) == 1
    failed = events[0]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == kind and not failed.error.retryable
    assert failed.error.status == int(fault)
    assert failed.error.provider_message  # the provider's own words are kept


@pytest.mark.parametrize(
    ("fault", "kind", "status"), [("429", "rate_limit", 429), ("500", "server", 500)]
)
def test_retryable_status_errors_keep_the_provider_message(
    harness: Harness, server: MockLlmServer, fault: str, kind: str, status: int
) -> None:
    sid = session(f"keep-{fault}")
    server.queue_fault(fault, count=1, retry_after=0, session=sid["session_id"])  # type: ignore[arg-type]
    model = http_model(server, retry=RetryPolicy(max_retries=0))
    (failed,) = harness.events(harness.request(model, **sid))
    assert isinstance(failed, LlmFailed)
    assert (failed.error.kind, failed.error.status, failed.error.retryable) == (kind, status, True)
    assert failed.error.provider_message is not None
    assert "injected by the mock" in failed.error.provider_message
    assert failed.error.provider_message in failed.error.message


def test_rate_limit_honours_retry_after(harness: Harness, server: MockLlmServer) -> None:
    sid = session("429")
    server.queue_fault("429", count=1, retry_after=0.2, session=sid["session_id"])
    events = harness.events(harness.request(http_model(server), **sid))
    (retry,) = [e for e in events if isinstance(e, LlmRetrying)]
    assert retry.delay_s == pytest.approx(0.2)
    assert "rate_limit" in retry.reason
    assert isinstance(events[-1], LlmCompleted)


def test_rejected_forced_tool_choice_is_a_bad_request_naming_the_param(
    harness: Harness, server: MockLlmServer
) -> None:
    sid = session("reject")
    server.queue_fault("reject_tool_choice", count=1, session=sid["session_id"])
    tool = ToolDefinition(name="resolve", description="d", parameters={"type": "object"})
    events = harness.events(
        harness.request(
            http_model(server), tools=(tool,), tool_choice=NamedToolChoice(name="resolve"), **sid
        )
    )
    failed = events[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "bad_request" and failed.error.param == "tool_choice"


def test_stall_hits_the_idle_timeout(harness: Harness, server: MockLlmServer) -> None:
    sid = session("stall")
    server.queue_fault("stall", count=5, stall_s=10, session=sid["session_id"])
    model = http_model(
        server,
        timeouts=Timeouts(connect=2, first_byte=0.3, idle=0.3),
        retry=RetryPolicy(max_retries=0),
    )
    failed = harness.events(harness.request(model, **sid))[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "timeout"


def test_unreachable_endpoint_is_a_connection_error(harness: Harness, refused_port: int) -> None:
    model = OpenAICompatible(
        base_url=f"http://127.0.0.1:{refused_port}/v1",
        api_key="k",
        retry=RetryPolicy(max_retries=0),
    )
    failed = harness.events(harness.request(model))[-1]
    assert isinstance(failed, LlmFailed)
    assert failed.error.kind == "connection"


# -- cancellation --


def test_cancel_mid_stream_closes_the_connection_with_one_cancelled_event(
    harness: Harness, server: MockLlmServer
) -> None:
    slow = ScriptFile(replies=(ScriptReply(text=" ".join(["word"] * 200), tokens_per_s=20),))
    server.set_script(slow)
    sid = session("cancel")
    scope = CancelScope()
    rid = harness.request(http_model(server), scope=scope, **sid)
    first = harness.inbox.get(timeout=WAIT)
    while getattr(first, "request_id", None) != rid:
        first = harness.inbox.get(timeout=WAIT)
    assert isinstance(first, LlmTextDelta)
    scope.cancel("user typed")  # the request's scope: no message, no id
    events = harness.events(rid)
    cancelled = [e for e in events if isinstance(e, LlmCancelled)]
    assert len(cancelled) == 1 and cancelled[0].reason == "user typed"
    assert not any(isinstance(e, LlmCompleted | LlmFailed) for e in events)
    assert harness.quiet(rid) == []  # nothing after the cancelled event
    server.wait_for_stats(lambda s: rid in s.disconnected_request_ids, timeout_s=WAIT)


def test_cancel_after_completion_is_a_no_op(harness: Harness, server: MockLlmServer) -> None:
    scope = CancelScope()
    rid = harness.request(http_model(server), scope=scope, **session("late"))
    assert isinstance(harness.events(rid)[-1], LlmCompleted)
    scope.cancel("too late")
    assert harness.quiet(rid) == []


# -- offline models --


def test_scripted_model_matches_purpose_and_contains_per_session(harness: Harness) -> None:
    model = ScriptedModel(
        [
            {"when": {"purpose": "suggestion"}, "text": '{"suggestion": "run the tests"}'},
            {"when": {"contains": "failing"}, "text": "Fixing the failing test."},
            {"text": "Hello!"},
        ]
    )
    first = harness.events(harness.request(model, session_id="a"))[-1]
    suggestion = harness.events(harness.request(model, session_id="a", purpose="suggestion"))[-1]
    fixing = harness.events(
        harness.request(model, session_id="a", messages=(UserMessage(text="one failing test"),))
    )[-1]
    exhausted = harness.events(harness.request(model, session_id="a"))[-1]
    other_session = harness.events(harness.request(model, session_id="b"))[-1]
    assert first.message.text == "Hello!"
    assert suggestion.message.text == '{"suggestion": "run the tests"}'
    assert fixing.message.text == "Fixing the failing test."
    assert exhausted.message.text == "(no scripted reply)"
    assert other_session.message.text == "Hello!"


def test_scripted_model_contains_matches_the_last_tool_result(harness: Harness) -> None:
    model = ScriptedModel(
        [
            {"when": {"contains": "run the tests"}, "text": "Running them."},
            {"when": {"contains": "3 failed"}, "text": "Three tests fail; fixing."},
            {"text": "fallback"},
        ]
    )
    call = ToolCall(id="c1", name="shell", arguments={"command": "pytest -q"})
    after_tool = (
        UserMessage(text="run the tests"),
        AssistantMessage(text="", tool_calls=(call,)),
        ToolResult(call_id="c1", name="shell", output="===== 3 failed, 12 passed ====="),
    )
    # The last input is the tool result, not the (matching) user message before it.
    reply = harness.events(harness.request(model, session_id="tr", messages=after_tool))[-1]
    assert reply.message.text == "Three tests fail; fixing."
    user_last = harness.events(
        harness.request(model, session_id="tr", messages=(UserMessage(text="run the tests"),))
    )[-1]
    assert user_last.message.text == "Running them."


def test_scripted_model_streams_tool_calls_with_generated_ids(harness: Harness) -> None:
    model = ScriptedModel([SCRIPT.replies[1]], arg_chunk_size=3)
    events = harness.events(harness.request(model))
    done = events[-1]
    assert [c.name for c in done.message.tool_calls] == ["shell", "read_file", "grep"]
    assert all(c.id.startswith("call_") for c in done.message.tool_calls)
    pieces: dict[int, str] = {}
    for e in events:
        if isinstance(e, LlmToolCallDelta):
            pieces[e.index] = pieces.get(e.index, "") + e.arguments_delta
    assert [json.loads(pieces[i]) for i in range(3)] == [
        dict(c.arguments) for c in done.message.tool_calls
    ]


def test_scripted_model_from_file(tmp_path: Any, harness: Harness) -> None:
    path = tmp_path / "script.json"
    path.write_text(SCRIPT.to_json())
    model = ScriptedModel.from_file(path)
    assert harness.events(harness.request(model))[-1].message.text == SCRIPT.replies[0].text


def test_function_model_sees_each_request_and_can_fail_typed(harness: Harness) -> None:
    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        if request.purpose == "speculation":
            raise llm_error("rate_limit", "slow down", retryable=False)
        return {"text": f"you said {request.messages[-1].text}", "tool_calls": []}

    model = FunctionModel(decide)
    tool = ToolDefinition(name="t", description="d", parameters={"type": "object"})
    ok = harness.events(harness.request(model, tools=(tool,), tool_choice="required"))[-1]
    failed = harness.events(harness.request(model, purpose="speculation"))[-1]
    assert ok.message.text == "you said hello"
    assert isinstance(failed, LlmFailed) and failed.error.kind == "rate_limit"
    assert seen[0].tools == (tool,) and seen[0].tool_choice == "required"
    assert seen[1].purpose == "speculation"


def test_gateway_rejects_a_request_without_a_model(harness: Harness) -> None:
    with pytest.raises(ValueError, match="model"):
        harness.gateway.ask(
            LlmRequest(request_id="x", session_id="s", messages=(), reply_to=harness.sink),
            timeout=WAIT,
        )


# -- pure parts --


FINISHED = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
"""The chunk that ends a complete answer (one without a finish reason is incomplete)."""


def _chunks_for(arguments: list[str], cuts: list[list[int]]) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    for index, (text, points) in enumerate(zip(arguments, cuts, strict=True)):
        chunks.append(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": f"call_{index}",
                                    "type": "function",
                                    "function": {"name": f"tool{index}", "arguments": ""},
                                }
                            ]
                        },
                    }
                ]
            }
        )
        bounds = [0, *sorted(set(points)), len(text)]
        for a, b in itertools.pairwise(bounds):
            if a == b:
                continue
            chunks.append(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {"index": index, "function": {"arguments": text[a:b]}}
                                ]
                            },
                        }
                    ]
                }
            )
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return chunks


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(), max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    args=st.lists(
        st.dictionaries(st.text(max_size=8), json_values, max_size=4), min_size=1, max_size=3
    ),
    data=st.data(),
)
def test_tool_arguments_reassemble_whatever_the_split(
    args: list[dict[str, Any]], data: Any
) -> None:
    """Arguments cut at any character offsets (inside escapes too) reassemble exactly."""
    texts = [json.dumps(a) for a in args]  # ASCII escapes: cuts land inside \\uXXXX too
    cuts = [data.draw(st.lists(st.integers(0, len(t)), max_size=len(t))) for t in texts]
    chunks = _chunks_for(texts, cuts)
    interleave = data.draw(st.booleans())
    if interleave:  # fragments of different calls interleaved (keeping each call's order)
        rng = random.Random(data.draw(st.integers()))
        per_call: dict[int, list[dict[str, Any]]] = {}
        for c in chunks[:-1]:
            per_call.setdefault(c["choices"][0]["delta"]["tool_calls"][0]["index"], []).append(c)
        mixed = []
        while any(per_call.values()):
            key = rng.choice([k for k, v in per_call.items() if v])
            mixed.append(per_call[key].pop(0))
        chunks = [*mixed, chunks[-1]]
    assembler = StreamAssembler("r")
    for chunk in chunks:
        assembler.feed(chunk)
    message, _usage, reason = assembler.finish(saw_done=True)
    assert [dict(c.arguments) for c in message.tool_calls] == args
    assert reason == "tool_calls"


def test_assembler_rejects_truncated_and_broken_streams() -> None:
    assembler = StreamAssembler("r")
    assembler.feed({"choices": [{"index": 0, "delta": {"content": "half"}}]})
    with pytest.raises(LlmException) as info:
        assembler.finish(saw_done=False)
    assert info.value.error.kind == "incomplete"
    broken = StreamAssembler("r")
    broken.feed(_chunks_for(['{"a": 1'], [[]])[0])
    broken.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1'}}]},
                }
            ]
        }
    )
    broken.feed(FINISHED)
    # Arguments that never form JSON do not fail the answer: the call carries why
    # (the worker decides; see tests/worker/test_worker_hostile_model.py).
    message, _usage, _reason = broken.finish(saw_done=True)
    assert message.tool_calls[0].arguments == {}
    assert "not valid JSON" in (message.tool_calls[0].arguments_error or "")
    with pytest.raises(LlmException):
        StreamAssembler("r").feed(["not", "an", "object"])


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_tool_arguments_are_unusable_arguments(number: str) -> None:
    """JSON has no NaN or infinity (Python's json accepts them); ``ToolCall`` refuses them.

    A model that streams one gets its call back with an ``arguments_error``
    naming the number (the worker hands it an error result), not a validation
    error from deep inside the worker.
    """
    assembler = StreamAssembler("r")
    assembler.feed(
        {
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1",
                                "function": {"name": "t", "arguments": f'{{"x": {number}}}'},
                            }
                        ]
                    },
                }
            ]
        }
    )
    assembler.feed(FINISHED)
    message, _usage, _reason = assembler.finish(saw_done=True)
    call = message.tool_calls[0]
    assert call.arguments == {}
    assert number in (call.arguments_error or "")


def test_request_body_is_deterministic_and_complete() -> None:
    items = (
        SystemMessage(text="be brief"),
        UserMessage(text="hi"),
        AssistantMessage(
            text="", tool_calls=(ToolCall(id="c1", name="t", arguments={"b": 1, "a": "é"}),)
        ),
        ToolResult(call_id="c1", name="t", output="ok"),
    )
    request = LlmRequest(
        request_id="r", session_id="s", messages=items, max_tokens=50, json_response=True
    )
    first = json.dumps(request_body(request, "m"), ensure_ascii=False, separators=(",", ":"))
    second = json.dumps(request_body(request, "m"), ensure_ascii=False, separators=(",", ":"))
    assert first == second
    wire = to_openai_messages(items)
    assert wire[2]["content"] == ""  # not null: llama.cpp-class servers answer null with 500
    assert wire[2]["tool_calls"][0]["function"]["arguments"] == '{"b":1,"a":"é"}'
    assert wire[3] == {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    body = request_body(request, "m")
    assert body["max_tokens"] == 50 and body["response_format"] == {"type": "json_object"}


_text = st.text(max_size=30)
_args = st.dictionaries(
    st.text(max_size=8), st.one_of(st.integers(), _text, st.booleans()), max_size=3
)
_items = st.lists(
    st.one_of(
        st.builds(SystemMessage, text=_text),
        st.builds(UserMessage, text=_text),
        st.builds(
            AssistantMessage,
            text=_text,
            tool_calls=st.lists(
                st.builds(ToolCall, id=st.just("c1"), name=st.just("t"), arguments=_args),
                max_size=2,
            ).map(tuple),
        ),
        st.builds(ToolResult, call_id=st.just("c1"), name=st.just("t"), output=_text),
    ),
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    items=_items,
    model_name=st.text(max_size=20),
    with_tools=st.booleans(),
    max_tokens=st.one_of(st.none(), st.integers(1, 100)),
    json_response=st.booleans(),
    stream=st.booleans(),
)
def test_request_payload_is_the_dict_body_encoded(
    *,
    items: list[Any],
    model_name: str,
    with_tools: bool,
    max_tokens: int | None,
    json_response: bool,
    stream: bool,
) -> None:
    """The spliced, per-item-cached payload is byte for byte the plain encoding.

    Model names full of quotes and ``"messages":0`` must not confuse the splice.
    """
    tools = (
        (ToolDefinition(name="t", description='a "tool"', parameters={"type": "object"}),)
        if with_tools
        else ()
    )
    request = LlmRequest(
        request_id="r",
        session_id="s",
        messages=tuple(items),
        tools=tools,
        max_tokens=max_tokens,
        json_response=json_response,
        stream=stream,
    )
    expected = json.dumps(
        request_body(request, model_name), ensure_ascii=False, separators=(",", ":")
    ).encode()
    assert request_payload(request, model_name) == expected
    assert request_payload(request, model_name) == expected  # from the cache, too
    tricky = '"messages":0,"tools":0' + model_name
    assert (
        request_payload(request, tricky)
        == json.dumps(
            request_body(request, tricky), ensure_ascii=False, separators=(",", ":")
        ).encode()
    )


def test_retry_delay_policy() -> None:
    rng = random.Random(1)
    policy = RetryPolicy(
        max_retries=2, initial_backoff=1.0, max_backoff=4.0, jitter=0.0, max_total_wait=10
    )
    err = LlmError(kind="server", message="x", retryable=True)
    assert retry_delay(policy, err, 1, 0.0, rng) == 1.0
    assert retry_delay(policy, err, 2, 0.0, rng) == 2.0
    assert retry_delay(policy, err, 3, 0.0, rng) is None  # out of retries
    assert retry_delay(policy, err, 1, 9.5, rng) is None  # out of total wait budget
    honoured = LlmError(kind="rate_limit", message="x", retryable=True, retry_after_s=3.0)
    assert retry_delay(policy, honoured, 1, 0.0, rng) == 3.0
    assert retry_delay(policy, LlmError(kind="auth", message="x"), 1, 0.0, rng) is None


def test_retry_budget_bounds_retries() -> None:
    budget = RetryBudget(initial=2, per_request=0.5, cap=3)
    assert budget.spend() and budget.spend()
    assert not budget.spend()
    budget.earn()
    budget.earn()
    assert budget.spend()
