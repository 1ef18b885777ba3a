"""OpenTelemetry spans of a session (issue 28), read back with the SDK's in-memory exporter.

Real HTTP to the mock LLM server through ``OpenAICompatible``, real tool calls
on real files: the spans come from the LLM loop's and the tool pool's own
threads, so a parent/child tree that holds here holds across actors.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fore.actors.llm.models import OpenAICompatible, RetryPolicy
from fore.actors.llm.script import ScriptFile
from fore.supervision.runtime import Runtime
from fore.telemetry import Telemetry
from fore.testing import MockLlmServer

TWO_TOOLS = {
    "replies": [
        {
            "when": {"purpose": "main", "contains": "what is in"},
            "text": "Reading both.",
            "tool_calls": [
                {"id": "call_a", "name": "read_file", "arguments": {"path": "a.txt"}},
                {"id": "call_b", "name": "read_file", "arguments": {"path": "b.txt"}},
            ],
        },
        {"when": {"purpose": "main"}, "text": "a.txt says alpha, b.txt says beta."},
    ]
}


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield spans, provider
    provider.shutdown()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "b.txt").write_text("beta\n")
    return ws


def _model(server: MockLlmServer) -> OpenAICompatible:
    return OpenAICompatible(
        base_url=server.base_url, model="mock-1", api_key="k", retry=RetryPolicy(max_retries=0)
    )


def _named(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def _run_two_tools(
    workspace: Path, telemetry: Telemetry | None
) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
    script = ScriptFile.model_validate(TWO_TOOLS)
    with MockLlmServer(script) as server, Runtime(telemetry=telemetry) as rt:
        session = rt.open_session(workspace=workspace, model=_model(server))
        turn = session.submit("what is in a.txt and b.txt?", timeout=60)
        history = session.history
        requests = server.requests()
    return turn, history, requests


def test_a_turn_with_two_tool_calls_is_one_tree(
    exporter: tuple[InMemorySpanExporter, TracerProvider], workspace: Path
) -> None:
    spans_out, provider = exporter
    turn, _history, requests = _run_two_tools(workspace, Telemetry(tracer_provider=provider))
    assert turn.status == "completed"
    spans = spans_out.get_finished_spans()
    [root] = _named(spans, "invoke_agent")
    chats = sorted(_named(spans, "chat "), key=lambda s: s.start_time or 0)
    tools = _named(spans, "execute_tool ")
    assert len(spans) == 5, [s.name for s in spans]
    assert len(chats) == 2 and len(tools) == 2
    # One trace; the turn is the parent of both LLM calls and both tool calls,
    # although they were made on the LLM loop's and the tool pool's threads.
    assert root.parent is None
    for child in (*chats, *tools):
        assert child.context is not None and root.context is not None
        assert child.context.trace_id == root.context.trace_id
        assert child.parent is not None and child.parent.span_id == root.context.span_id
    # The turn's attributes.
    attrs = dict(root.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["fore.purpose"] == "main"
    assert attrs["fore.turn.status"] == "completed"
    assert attrs["fore.turn.llm_calls"] == 2
    assert attrs["fore.run.id"] == turn.run_id
    assert attrs["gen_ai.usage.output_tokens"] == turn.usage.completion_tokens
    # Each LLM call: GenAI semantic conventions, with the server's own usage figures.
    for chat, request, reason in zip(chats, requests, ("tool_calls", "stop"), strict=True):
        a = dict(chat.attributes or {})
        assert chat.name == "chat mock-1"
        assert chat.kind.name == "CLIENT"
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.system"] == a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "mock-1"
        assert a["gen_ai.response.model"] == "mock-1"
        assert a["gen_ai.response.finish_reasons"] == (reason,)
        assert a["gen_ai.usage.input_tokens"] > 0
        assert a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.usage.cache_read.input_tokens"] == 0
        assert a["server.address"] == "127.0.0.1"
        assert a["fore.request.id"] == request.request_id
        assert [e.name for e in chat.events] == ["gen_ai.first_chunk"]  # it was streamed
    assert sum(dict(c.attributes or {})["gen_ai.usage.output_tokens"] for c in chats) == (
        turn.usage.completion_tokens
    )
    # Each tool call: execute_tool, its name and the model's call id.
    by_id = {dict(t.attributes or {})["gen_ai.tool.call.id"]: t for t in tools}
    assert set(by_id) == {"call_a", "call_b"}
    for tool_span in tools:
        a = dict(tool_span.attributes or {})
        assert tool_span.name == "execute_tool read_file"
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["gen_ai.tool.name"] == "read_file"
        assert a["fore.tool.outcome"] == "ok"
        assert tool_span.start_time is not None and tool_span.end_time is not None
        assert tool_span.start_time <= tool_span.end_time
    # The tool spans sit between the two model calls.
    assert all((chats[0].end_time or 0) <= (t.start_time or 0) for t in tools)
    # Sensitive content is off by default.
    for span in spans:
        keys = set(span.attributes or {})
        assert not keys & {
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
            "fore.prompt",
        }, span.name
        assert "alpha" not in json.dumps(dict(span.attributes or {}), default=str)


def test_content_is_captured_only_when_asked_and_clipped(
    exporter: tuple[InMemorySpanExporter, TracerProvider], workspace: Path
) -> None:
    spans_out, provider = exporter
    telemetry = Telemetry(tracer_provider=provider, capture_content=True, max_content_chars=4000)
    turn, _history, _ = _run_two_tools(workspace, telemetry)
    assert turn.status == "completed"
    spans = spans_out.get_finished_spans()
    [root] = _named(spans, "invoke_agent")
    assert dict(root.attributes or {})["fore.prompt"] == "what is in a.txt and b.txt?"
    chats = sorted(_named(spans, "chat "), key=lambda s: s.start_time or 0)
    sent = json.loads(str(dict(chats[1].attributes or {})["gen_ai.input.messages"]))
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    part = sent[2]["parts"][0]
    assert (part["type"], part["id"]) == ("tool_call_response", "call_a")
    assert part["result"].endswith("\talpha")  # read_file numbers its lines
    answer = json.loads(str(dict(chats[1].attributes or {})["gen_ai.output.messages"]))
    assert answer[0]["parts"][0]["content"] == "a.txt says alpha, b.txt says beta."
    assert answer[0]["finish_reason"] == "stop"
    tool_a = next(
        t
        for t in _named(spans, "execute_tool")
        if dict(t.attributes or {})["gen_ai.tool.call.id"] == "call_a"
    )
    a = dict(tool_a.attributes or {})
    assert json.loads(str(a["gen_ai.tool.call.arguments"])) == {"path": "a.txt"}
    assert str(a["gen_ai.tool.call.result"]).endswith("\talpha")

    # A text longer than max_content_chars is cut, and says so.
    spans_out.clear()
    small = Telemetry(tracer_provider=provider, capture_content=True, max_content_chars=10)
    _run_two_tools(workspace, small)
    [root] = _named(spans_out.get_finished_spans(), "invoke_agent")
    prompt = str(dict(root.attributes or {})["fore.prompt"])
    assert prompt.startswith("what is in") and "more characters" in prompt


def test_the_callers_span_is_the_turns_parent(
    exporter: tuple[InMemorySpanExporter, TracerProvider], workspace: Path
) -> None:
    spans_out, provider = exporter
    script = ScriptFile.model_validate({"replies": [{"text": "hi"}]})
    tracer = provider.get_tracer("app")
    with (
        MockLlmServer(script) as server,
        Runtime(telemetry=Telemetry(tracer_provider=provider)) as rt,
    ):
        session = rt.open_session(workspace=workspace, model=_model(server))
        with tracer.start_as_current_span("handle_request") as outer:
            assert session.submit("hello", timeout=60).status == "completed"
    [root] = _named(spans_out.get_finished_spans(), "invoke_agent")
    assert root.parent is not None
    assert root.parent.span_id == outer.get_span_context().span_id


def test_with_tracing_off_no_span_is_made(workspace: Path) -> None:
    """A global SDK provider is installed, but a runtime without ``telemetry=`` never uses it."""
    code = textwrap.dedent(
        f"""
        import sys
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        spans = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        trace.set_tracer_provider(provider)
        from fore import Runtime
        from fore.testing import FunctionModel

        def llm(request):
            if request.messages[-1].kind == "user":
                return {{"tool_calls": [{{"name": "read_file", "arguments": {{"path": "a.txt"}}}}]}}
            return "done"

        with Runtime() as rt:
            s = rt.open_session(workspace={str(workspace)!r}, model=FunctionModel(llm))
            assert s.submit("go", timeout=60).status == "completed"
            assert rt.telemetry is None
        print(len(spans.get_finished_spans()))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


def test_not_installed_costs_nothing_and_asking_for_it_is_one_clear_error(
    workspace: Path,
) -> None:
    """With OpenTelemetry unimportable, Fore runs and never tries to import it; asking for
    telemetry then is a typed error that says what to install."""
    code = textwrap.dedent(
        f"""
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(name)
                return None

        sys.meta_path.insert(0, Block())
        from fore import Runtime
        from fore.telemetry import Telemetry, TelemetryUnavailable
        from fore.testing import FunctionModel

        with Runtime() as rt:
            s = rt.open_session(workspace={str(workspace)!r}, model=FunctionModel(lambda r: "ok"))
            assert s.submit("go", timeout=60).status == "completed"
            assert s.usage.of("main").requests == 1
        assert not any(m.startswith("opentelemetry") for m in sys.modules), "imported"
        try:
            Runtime(telemetry=Telemetry())
        except TelemetryUnavailable as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "Telemetry needs the OpenTelemetry API: pip install 'fore-runtime[otel]'"
    )


def test_metrics_without_traces(workspace: Path) -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry = Telemetry(tracer_provider=provider, meter_provider=meters, traces=False)
    turn, _, _ = _run_two_tools(workspace, telemetry)
    assert turn.status == "completed"
    assert spans.get_finished_spans() == ()
    data = reader.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)

    def one(name: str, **attrs: Any) -> Any:
        [point] = [p for p in points[name] if attrs.items() <= dict(p.attributes).items()]
        return point

    # One main turn, completed; its two model calls, both streamed (time to first chunk).
    turn_point = one("fore.turn.duration", **{"fore.purpose": "main"})
    assert turn_point.count == 1 and dict(turn_point.attributes)["fore.turn.status"] == "completed"
    assert one("gen_ai.client.operation.duration", **{"fore.purpose": "main"}).count == 2
    assert one("gen_ai.client.operation.time_to_first_chunk").count == 2
    # Tool duration by tool: both read_file calls, under the tool's name.
    tool_point = one("gen_ai.execute_tool.duration", **{"gen_ai.tool.name": "read_file"})
    assert tool_point.count == 2 and tool_point.sum > 0
    # Tokens by purpose: what the server reported for the turn.
    out = one("fore.tokens", **{"fore.purpose": "main", "fore.token.type": "output"})
    assert out.value == turn.usage.completion_tokens
    inp = one("fore.tokens", **{"fore.purpose": "main", "fore.token.type": "input"})
    assert inp.value == turn.usage.prompt_tokens
    meters.shutdown()
    provider.shutdown()


def test_anthropic_cache_reads_and_writes_reach_the_spans_and_the_cost(
    exporter: tuple[InMemorySpanExporter, TracerProvider], workspace: Path
) -> None:
    """Issue 27's provider: its cache figures are the spans' and priced at their own rates."""
    from fore.actors.llm.anthropic import AnthropicModel
    from fore.telemetry import ModelPrice

    spans_out, provider = exporter
    price = ModelPrice(input=3, cached_input=0.3, cache_write=3.75, output=15)
    script = ScriptFile.model_validate(TWO_TOOLS)
    with (
        MockLlmServer(script) as server,
        Runtime(telemetry=Telemetry(tracer_provider=provider), prices={"claude-*": price}) as rt,
    ):
        model = AnthropicModel(
            base_url=server.root_url, api_key="k", model="claude-mock", retry=RetryPolicy(0)
        )
        with rt.open_session(workspace=workspace, model=model) as session:
            turn = session.submit("what is in a.txt and b.txt?", timeout=60)
            usage = session.usage.of("main")
    assert turn.status == "completed"
    # The first request wrote the cacheable prefix (the tools), the second read it.
    assert turn.usage.cache_write_tokens > 0 and turn.usage.cached_tokens > 0
    chats = sorted(_named(spans_out.get_finished_spans(), "chat "), key=lambda s: s.start_time or 0)
    attrs = [dict(c.attributes or {}) for c in chats]
    assert [a["gen_ai.system"] for a in attrs] == ["anthropic", "anthropic"]
    assert sum(a.get("gen_ai.usage.cache_creation.input_tokens", 0) for a in attrs) == (
        turn.usage.cache_write_tokens
    )
    assert sum(a["gen_ai.usage.cache_read.input_tokens"] for a in attrs) == turn.usage.cached_tokens
    # Each kind of input at its own rate.
    assert (usage.cached_input_tokens, usage.cache_write_tokens) == (
        turn.usage.cached_tokens,
        turn.usage.cache_write_tokens,
    )
    plain = usage.input_tokens - usage.cached_input_tokens - usage.cache_write_tokens
    expected = (
        plain * 3 + usage.cached_input_tokens * 0.3 + usage.cache_write_tokens * 3.75
    ) / 1e6 + usage.output_tokens * 15 / 1e6
    assert usage.cost_usd == pytest.approx(expected)
