"""Spans and metrics of suggestions, speculation and Tab (issue 28).

Each speculation's span records its one outcome (the same figures as its
``SpeculationFinished`` event); its worker's run is its child, with its own
model and tool spans; Tab has a span of its own. Read back with the
OpenTelemetry SDK's in-memory span exporter and metric reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fore.actors.llm import OpenAICompatible, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.speculation.governor import LoadGovernor
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import SpeculationFinished, SpeculationSkipped
from fore.supervision import Runtime
from fore.telemetry import Telemetry
from fore.testing import wait_until
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    bump_script,
    first_of,
    settled,
    spec,
    suggestion,
)


class Otel:
    """An SDK tracer provider and meter provider with in-memory readers."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def telemetry(self) -> Telemetry:
        return Telemetry(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def finished(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, name: str) -> list[Any]:
        """Every data point of the metric ``name`` (each with ``attributes``)."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        if data is None:
            return found
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def otel() -> Iterator[Otel]:
    o = Otel()
    yield o
    o.close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    return tmp_path


def _runtime(tmp_path: Path, otel: Otel, governor: LoadGovernor | None = None) -> Runtime:
    return Runtime(
        overlay_root=tmp_path / "overlays",
        speculation_governor=governor or LoadGovernor(enabled=False),
        telemetry=otel.telemetry(),
    )


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _parent_is(child: ReadableSpan, parent: ReadableSpan) -> bool:
    assert parent.context is not None
    return child.parent is not None and child.parent.span_id == parent.context.span_id


def test_an_accepted_speculation_and_its_tab(otel: Otel, ws: Path, tmp_path: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with _runtime(tmp_path, otel) as rt:
        s = rt.open_session(workspace=ws, model=ScriptedModel(bump_script()), speculation=config)
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        result = s.accept(timeout=WAIT)
        assert result.outcome == "accepted"
        event = first_of(s, SpeculationFinished)
        s.close()
    assert event.outcome == "accepted"
    # When the pipelined suggestion came before the close, Tab made it current and its
    # speculation started: the session's close ended that one before it had an outcome.
    speculation, *later = sorted(otel.finished("fore.speculation"), key=lambda s: s.start_time or 0)
    assert [_attrs(c)["fore.speculation.outcome"] for c in later] in ([], ["closed"], ["aborted"])
    a = _attrs(speculation)
    assert a["fore.speculation.outcome"] == "accepted"
    assert a["fore.speculation.state"] == "completed"
    assert a["fore.speculation.tokens"] == event.tokens > 0
    assert a["fore.speculation.tool_calls"] == 1
    assert a["fore.speculation.files_written"] == 1
    assert a["fore.speculation.time_saved_s"] == pytest.approx(result.time_saved_s)
    assert result.time_saved_s > 0
    assert speculation.parent is None
    # Its worker's run is its child; that run's model and tool calls are the run's.
    turns = otel.finished("invoke_agent")
    [spec_turn] = [t for t in turns if _parent_is(t, speculation)]
    assert _attrs(spec_turn)["fore.purpose"] == "speculation"
    spec_chats = [c for c in otel.finished("chat ") if _parent_is(c, spec_turn)]
    assert len(spec_chats) == 2
    assert all(_attrs(c)["fore.purpose"] == "speculation" for c in spec_chats)
    [edit] = otel.finished("execute_tool edit")
    assert _parent_is(edit, spec_turn)
    # Two main turns, each a root with its own calls; suggestions are requests of their own.
    mains = [t for t in turns if _attrs(t)["fore.purpose"] == "main"]
    assert len(mains) == 2 and all(t.parent is None for t in mains)
    purposes = sorted(str(_attrs(c)["fore.purpose"]) for c in otel.finished("chat "))
    assert purposes.count("main") == 2 and purposes.count("suggestion") == 1
    assert {"pipelined", "speculation"} <= set(purposes)
    # Tab.
    [accept] = otel.finished("fore.accept")
    a = _attrs(accept)
    assert a["fore.accept.outcome"] == "accepted"
    assert a["fore.accept.files_applied"] == 1
    assert a["fore.accept.latency_s"] == pytest.approx(result.accept_latency_s)
    # Metrics: outcomes, accept latency, turns by purpose, tools by name, tokens by purpose.
    outcomes = {
        p.attributes["fore.speculation.outcome"]: p.value
        for p in otel.points("fore.speculation.outcomes")
    }
    assert outcomes["accepted"] == 1
    [accepted] = otel.points("fore.speculation.accept.duration")
    assert accepted.count == 1 and accepted.sum == pytest.approx(result.accept_latency_s)
    turn_points = {
        (p.attributes["fore.purpose"], p.attributes["fore.turn.status"]): p.count
        for p in otel.points("fore.turn.duration")
    }
    assert turn_points[("main", "completed")] == 2
    assert turn_points[("speculation", "completed")] >= 1  # the pipelined one may finish too
    tools = {
        p.attributes["gen_ai.tool.name"]: p.count
        for p in otel.points("gen_ai.execute_tool.duration")
    }
    assert tools["edit"] >= 1
    tokens = {
        (p.attributes["fore.purpose"], p.attributes["fore.token.type"]): p.value
        for p in otel.points("fore.tokens")
    }
    for purpose in ("main", "suggestion", "speculation", "pipelined"):
        assert tokens[(purpose, "input")] > 0 and tokens[(purpose, "output")] > 0
    ttft = otel.points("gen_ai.client.operation.time_to_first_chunk")
    assert {p.attributes["fore.purpose"] for p in ttft} >= {"main"}


def test_an_aborted_speculation_records_its_outcome_and_abort_latency(
    otel: Otel, ws: Path, tmp_path: Path
) -> None:
    script = ScriptFile.model_validate(
        {
            "replies": [
                *TWO_TURNS,
                suggestion("watch the file"),
                {
                    "when": {"purpose": "speculation"},
                    "text": "Watching. " + "word " * 200,
                    "tokens_per_s": 5,
                },
            ]
        }
    )
    with MockLlmServer(script) as server, _runtime(tmp_path, otel) as rt:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT, stream_forks=True)
        s = rt.open_session(workspace=ws, model=model, speculation=config)
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: any(r.purpose == "speculation" for r in server.requests()), WAIT)
        s.keystroke("no, something else")
        event = first_of(s, SpeculationFinished)
        s.close()
    assert event.outcome == "aborted"
    [speculation] = otel.finished("fore.speculation")
    a = _attrs(speculation)
    assert a["fore.speculation.outcome"] == "aborted"
    assert a["fore.speculation.was_running"] is True
    assert a["fore.speculation.cancel_latency_s"] == event.cancel_latency_s
    assert a["fore.speculation.estimated_tokens"] == event.estimated_tokens > 0
    # The cancelled stream's span says so, under the speculation's run.
    [spec_chat] = [c for c in otel.finished("chat ") if _attrs(c)["fore.purpose"] == "speculation"]
    assert _attrs(spec_chat)["error.type"] == "cancelled"
    [spec_turn] = [
        t for t in otel.finished("invoke_agent") if _attrs(t)["fore.purpose"] == "speculation"
    ]
    assert _parent_is(spec_turn, speculation) and _parent_is(spec_chat, spec_turn)
    assert _attrs(spec_turn)["fore.turn.status"] == "cancelled"
    [outcome] = otel.points("fore.speculation.outcomes")
    assert dict(outcome.attributes) == {"fore.speculation.outcome": "aborted"}
    [abort] = otel.points("fore.speculation.abort.duration")
    assert abort.count == 1 and abort.sum == pytest.approx(event.cancel_latency_s)


def test_governor_skips_are_counted_by_reason(otel: Otel, ws: Path, tmp_path: Path) -> None:
    capped = LoadGovernor(max_concurrent=0)  # every suggestion is refused: the cap
    with _runtime(tmp_path, otel, capped) as rt:
        s = rt.open_session(
            workspace=ws,
            model=ScriptedModel([*TWO_TURNS, suggestion("bump x to 2")]),
            speculation=spec(approval_mode=ApprovalMode.AUTO_EDIT),
        )
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        first_of(s, SpeculationSkipped)
        s.close()
    [point] = otel.points("fore.speculation.skipped")
    assert dict(point.attributes) == {"fore.skip.reason": "cap"} and point.value == 1
    assert otel.finished("fore.speculation") == []
