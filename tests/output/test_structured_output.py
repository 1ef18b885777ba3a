"""Structured output (issue 23, point 4): ``submit(output_type=...)`` ends with a validated value.

Both strategies run end to end: in process on a FunctionModel, and over real
loopback HTTP against the mock server, which treats a JSON-schema response
format as OpenAI does (refusing what OpenAI refuses, answering matching JSON).
Re-asks on invalid answers, retries running out, the turn budget, nested and
non-object types, the provider refusing the format or ``tool_choice:
required``, and structured submits in a speculating session are covered; the
schema functions get property tests over generated pydantic models.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field, ValidationError, create_model, field_validator

from fore import OutputValidationError
from fore.actors.llm import FunctionModel, OpenAICompatible, ScriptedModel
from fore.actors.llm.errors import llm_error
from fore.actors.llm.mock_schema import instance, response_format_problem, strict_problem
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.output import (
    FINAL_ANSWER,
    OutputInterceptor,
    OutputRun,
    OutputTypeError,
    StructuredOutputUnavailable,
    compact_errors,
    output_request,
    start_output,
    strict_schema,
    wire_schema,
)
from fore.actors.output.contract import MAX_ERROR_CHARS
from fore.actors.worker.hooks import Continue, Hooks
from fore.actors.worker.interceptor import Interceptor, Interceptors
from fore.actors.worker.state import SessionState
from fore.messages.conversation import AssistantMessage, ToolResult, UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.llm import LlmRequest
from fore.messages.speculation import SnapshotTaken
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    WAIT,
    Replies,
    overlay_dirs,
    settled,
    spec,
    wait_until,
)

# -- output types ---------------------------------------------------------------------


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class Reading(BaseModel):
    value: float
    unit: Unit


class Station(BaseModel):
    name: str
    readings: list[Reading]
    note: str | None = None


class Forecast(BaseModel):
    """Nested: a model holding a list of models holding a model and an enum."""

    city: str
    stations: list[Station]
    summary: Literal["sunny", "rainy"]


class Positive(BaseModel):
    """A rule the JSON schema cannot express: only validation catches it."""

    n: int

    @field_validator("n")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("n must be positive")
        return value


FORECAST = {
    "city": "Oslo",
    "stations": [
        {"name": "Blindern", "readings": [{"value": 3.5, "unit": "celsius"}], "note": None}
    ],
    "summary": "rainy",
}


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def final(**arguments: Any) -> dict[str, Any]:
    return tool_call(FINAL_ANSWER, **arguments)


def texts(items: Any, kind: type) -> list[str]:
    return [
        getattr(i, "output", None) or getattr(i, "text", "") for i in items if isinstance(i, kind)
    ]


# -- the json_schema strategy, in process ----------------------------------------------------


def test_json_schema_strategy_gives_a_nested_model(runtime: Runtime) -> None:
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> str:
        seen.append(request)
        return json.dumps(FORECAST)

    model = FunctionModel(answer, structured_output="json_schema")
    with runtime.open_session(model=model) as s:
        result = s.submit("forecast?", output_type=Forecast, timeout=WAIT)
    assert result.status == "completed" and result.output_error is None
    assert isinstance(result.output, Forecast)
    assert result.output.stations[0].readings[0].unit is Unit.C
    (request,) = seen
    schema = request.response_schema
    assert schema is not None and schema.name == "Forecast" and schema.strict
    assert strict_problem(schema.json_schema) is None  # OpenAI's strict rules hold
    assert [t.name for t in request.tools] == [
        t.name for t in request.tools if t.name != FINAL_ANSWER
    ]


def test_an_invalid_answer_is_re_asked_with_the_errors_then_accepted(runtime: Runtime) -> None:
    answers = iter(['{"n": -1}', '{"n": 7}'])
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> str:
        seen.append(request)
        return next(answers)

    with runtime.open_session(model=FunctionModel(answer, structured_output="json_schema")) as s:
        result = s.submit("a number", output_type=Positive, timeout=WAIT)
    assert result.status == "completed" and result.output == Positive(n=7)
    assert result.turns == 2
    reask = seen[1].messages[-1]
    assert isinstance(reask, UserMessage)
    assert "n: Value error, n must be positive" in reask.text
    assert "1 attempt" not in reask.text and "2 attempts left" in reask.text
    # the invalid answer and the re-ask are in history, well paired
    kinds = [type(i).__name__ for i in result.items]
    assert kinds == ["UserMessage", "AssistantMessage", "UserMessage", "AssistantMessage"]


def test_retries_run_out_and_output_error_names_the_last_errors(runtime: Runtime) -> None:
    model = FunctionModel(lambda r: '{"n": 0}', structured_output="json_schema")
    with runtime.open_session(model=model) as s:
        result = s.submit("a number", output_type=Positive, max_output_retries=1, timeout=WAIT)
        assert result.status == "completed" and result.output is None
        assert result.turns == 2  # the first answer and one re-ask
        assert result.output_error is not None
        assert "after 2 answers" in result.output_error
        assert "n must be positive" in result.output_error
        with pytest.raises(OutputValidationError) as raised:
            s.ask("again", output_type=Positive, max_output_retries=0, timeout=WAIT)
        assert raised.value.result.turns == 1
        assert "n must be positive" in str(raised.value)


def test_re_asks_count_against_max_turns(runtime: Runtime) -> None:
    model = FunctionModel(lambda r: "not json", structured_output="json_schema")
    with runtime.open_session(model=model) as s:
        result = s.submit(
            "a number", output_type=Positive, max_output_retries=5, max_turns=2, timeout=WAIT
        )
    assert result.status == "max_turns" and result.turns == 2
    assert result.output is None
    assert result.output_error is not None and "the run ended max_turns" in result.output_error
    assert "Invalid JSON" in result.output_error


def test_a_fenced_json_answer_is_accepted(runtime: Runtime) -> None:
    model = FunctionModel(lambda r: '```json\n{"n": 3}\n```', structured_output="json_schema")
    with runtime.open_session(model=model) as s:
        assert s.ask("n?", output_type=Positive, timeout=WAIT) == Positive(n=3)


def test_a_non_object_type_is_wrapped_and_unwrapped(runtime: Runtime) -> None:
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> str:
        seen.append(request)
        return '{"result": [1, 2, 3]}'

    with runtime.open_session(model=FunctionModel(answer, structured_output="json_schema")) as s:
        assert s.ask("numbers", output_type=list[int], timeout=WAIT) == [1, 2, 3]
    schema = seen[0].response_schema
    assert schema is not None and schema.json_schema["required"] == ["result"]


def test_tools_run_before_the_structured_answer(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text("5\n")

    def answer(request: LlmRequest) -> Any:
        if isinstance(request.messages[-1], ToolResult):
            return '{"n": 5}'
        return tool_call("read_file", path="n.txt")

    model = FunctionModel(answer, structured_output="json_schema")
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        result = s.submit("read n", output_type=Positive, timeout=WAIT)
    assert result.output == Positive(n=5) and result.turns == 2


def test_pre_llm_request_hooks_see_the_format_and_a_plain_turn_has_none(
    runtime: Runtime,
) -> None:
    seen: list[Any] = []

    def hook(ctx: Any) -> Continue:
        seen.append(ctx.response_schema)
        return Continue()

    model = FunctionModel(lambda r: '{"n": 1}', structured_output="json_schema")
    hooks = Hooks()
    hooks.add("pre_llm_request", hook)
    with runtime.open_session(model=model, hooks=hooks) as s:
        s.submit("plain", timeout=WAIT)
        assert s.ask("typed", output_type=Positive, timeout=WAIT) == Positive(n=1)
        assert s.submit("plain again", timeout=WAIT).output is None
    assert seen[0] is None and seen[1] is not None and seen[2] is None


# -- the tool strategy, in process -----------------------------------------------------------


def test_tool_strategy_gives_a_nested_model_without_running_the_pool(runtime: Runtime) -> None:
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> Any:
        seen.append(request)
        return final(**FORECAST)

    with runtime.open_session(model=FunctionModel(answer, structured_output="tool")) as s:
        result = s.submit("forecast?", output_type=Forecast, timeout=WAIT)
        events = s.drain_events()
    assert result.status == "completed" and isinstance(result.output, Forecast)
    assert result.turns == 1  # accepted: no further request
    (request,) = seen
    assert request.tool_choice == "required" and request.response_schema is None
    tool = next(t for t in request.tools if t.name == FINAL_ANSWER)
    assert tool.parameters["properties"].keys() == {"city", "stations", "summary"}
    # paired: the call has its result, which the pool never produced
    assert isinstance(result.items[1], AssistantMessage)
    assert texts(result.items, ToolResult) == ["Final answer accepted."]
    assert not [e for e in events if getattr(e, "kind", "") == "tool_started"]


def test_invalid_arguments_get_an_error_result_then_a_valid_call_ends_the_turn(
    runtime: Runtime,
) -> None:
    answers = iter([final(n=-4), final(n=4)])
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> Any:
        seen.append(request)
        return next(answers)

    with runtime.open_session(model=FunctionModel(answer, structured_output="tool")) as s:
        result = s.submit("n", output_type=Positive, timeout=WAIT)
    assert result.output == Positive(n=4) and result.turns == 2
    error = seen[1].messages[-1]
    assert isinstance(error, ToolResult) and error.is_error
    assert "n must be positive" in error.output and f"Call {FINAL_ANSWER} again" in error.output


def test_tool_strategy_retries_run_out(runtime: Runtime) -> None:
    model = FunctionModel(lambda r: final(n=0), structured_output="tool")
    with runtime.open_session(model=model) as s:
        result = s.submit("n", output_type=Positive, max_output_retries=2, timeout=WAIT)
        history = s.history
    assert result.status == "completed" and result.output is None and result.turns == 3
    assert result.output_error is not None and "after 3 answers" in result.output_error
    last = history[-1]
    assert isinstance(last, ToolResult) and "no attempts left" in last.output


def test_other_calls_beside_an_accepted_final_answer_are_not_run(
    runtime: Runtime, tmp_path: Path
) -> None:
    def answer(request: LlmRequest) -> Any:
        return {
            "tool_calls": [
                {"name": "write_file", "arguments": {"path": "x.txt", "content": "no"}},
                {"name": FINAL_ANSWER, "arguments": {"n": 2}},
            ]
        }

    model = FunctionModel(answer, structured_output="tool")
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        result = s.submit("n", output_type=Positive, timeout=WAIT)
    assert result.output == Positive(n=2)
    assert not (tmp_path / "x.txt").exists()
    skipped, accepted = (i for i in result.items if isinstance(i, ToolResult))
    assert skipped.is_error and "final answer was given" in skipped.output
    assert accepted.output == "Final answer accepted."


def test_a_text_answer_is_taken_if_valid_else_the_tool_is_asked_for(runtime: Runtime) -> None:
    answers = iter(["I think it is three.", '{"n": 3}'])
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> Any:
        seen.append(request)
        return next(answers)

    with runtime.open_session(model=FunctionModel(answer, structured_output="tool")) as s:
        assert s.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=3)
    reminder = seen[1].messages[-1]
    assert isinstance(reminder, UserMessage) and FINAL_ANSWER in reminder.text


def test_the_final_answer_tool_avoids_a_session_tool_of_that_name(runtime: Runtime) -> None:
    def final_answer(text: str) -> str:
        """A session tool that happens to have the name."""
        return text

    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> Any:
        seen.append(request)
        return tool_call(f"{FINAL_ANSWER}_2", n=1)

    model = FunctionModel(answer, structured_output="tool")
    with runtime.open_session(model=model, tools=[final_answer]) as s:
        assert s.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=1)
    names = [t.name for t in seen[0].tools]
    assert names.count(FINAL_ANSWER) == 1 and f"{FINAL_ANSWER}_2" in names


def test_public_tool_hooks_never_see_the_final_answer_call(runtime: Runtime) -> None:
    seen: list[str] = []

    def hook(ctx: Any) -> Continue:
        seen.append(ctx.name)
        return Continue()

    model = FunctionModel(lambda r: final(n=1), structured_output="tool")
    hooks = Hooks()
    hooks.add("pre_tool_call", hook)
    hooks.add("post_tool_call", hook)
    with runtime.open_session(model=model, hooks=hooks) as s:
        assert s.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=1)
    assert seen == []


# -- what a provider refuses -----------------------------------------------------------------


def test_auto_falls_back_to_the_tool_when_the_format_is_refused(runtime: Runtime) -> None:
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> Any:
        seen.append(request)
        if request.response_schema is not None:
            raise llm_error(
                "bad_request",
                "response_format 'json_schema' is not supported by this server",
                status=400,
                param="response_format",
            )
        return final(n=9)

    with runtime.open_session(model=FunctionModel(answer)) as s:  # structured_output="auto"
        assert s.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=9)
        assert s.ask("again", output_type=Positive, timeout=WAIT) == Positive(n=9)
        alerts = [a.text for a in s.alerts if a.source == "output"]
    assert [r.response_schema is not None for r in seen] == [True, False, False]
    assert FINAL_ANSWER in [t.name for t in seen[1].tools]
    # the retry cannot be retried: auto plus the reminder; later requests force the tool
    assert [r.tool_choice for r in seen] == ["auto", "auto", "required"]
    assert FINAL_ANSWER in getattr(seen[1].messages[-1], "text", "")
    assert len(alerts) == 1 and "refused the JSON-schema response format" in alerts[0]


def test_a_refused_required_tool_choice_becomes_auto_with_a_reminder(runtime: Runtime) -> None:
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> Any:
        seen.append(request)
        if request.tool_choice == "required":
            raise llm_error(
                "bad_request", "tool_choice 'required' is not supported", param="tool_choice"
            )
        return final(n=2)

    with runtime.open_session(model=FunctionModel(answer, structured_output="tool")) as s:
        assert s.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=2)
    assert [r.tool_choice for r in seen] == ["required", "auto"]
    assert FINAL_ANSWER in getattr(seen[1].messages[-1], "text", "")


class Buggy(BaseModel):
    """A validator with a bug (it raises KeyError, which pydantic does not catch)."""

    n: int

    @field_validator("n")
    @classmethod
    def _lookup(cls, value: int) -> int:
        return {2: 2}[value]


def test_a_validator_that_raises_a_bug_is_a_failed_answer_not_a_crash(runtime: Runtime) -> None:
    answers = iter(['{"n": 1}', '{"n": 2}'])
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> str:
        seen.append(request)
        return next(answers)

    with runtime.open_session(model=FunctionModel(answer, structured_output="json_schema")) as s:
        assert s.ask("n", output_type=Buggy, timeout=WAIT) == Buggy(n=2)
        # the worker lives on; the spent script (StopIteration) is a failed request
        later = s.submit("still alive?", timeout=WAIT)
        assert later.status == "error" and "StopIteration" in (later.error or "")
    assert "validation raised KeyError" in getattr(seen[1].messages[-1], "text", "")


def test_a_type_pydantic_cannot_handle_fails_at_submit(runtime: Runtime) -> None:
    class Opaque:
        pass

    with runtime.open_session(model=FunctionModel(lambda r: "x")) as s:
        with pytest.raises(OutputTypeError, match="Opaque"):
            s.submit("x", output_type=Opaque, timeout=WAIT)
        with pytest.raises(ValueError, match="max_output_retries"):
            s.submit("x", output_type=Positive, max_output_retries=-1, timeout=WAIT)
        assert s.history == ()


def test_a_cancelled_structured_run_reports_why_it_has_no_output(runtime: Runtime) -> None:
    import threading

    gate = threading.Event()

    def answer(request: LlmRequest) -> str:
        gate.wait(WAIT)
        return '{"n": 1}'

    with runtime.open_session(model=FunctionModel(answer, structured_output="json_schema")) as s:
        results: list[Any] = []
        thread = threading.Thread(
            target=lambda: results.append(s.submit("n", output_type=Positive, timeout=WAIT))
        )
        thread.start()
        wait_until(lambda: s.run_state().phase == "streaming")
        s.cancel("changed my mind")
        thread.join(WAIT)
        gate.set()
    (result,) = results
    assert result.status == "cancelled" and result.output is None
    assert result.output_error == "no valid output: the run ended cancelled (changed my mind)"


# -- over HTTP: the mock server as a real server ------------------------------------------------


def mock_model(server: MockLlmServer, **options: Any) -> OpenAICompatible:
    return OpenAICompatible(base_url=server.base_url, api_key="k", model="mock", **options)


def test_json_schema_over_http_the_mock_enforces_the_schema(runtime: Runtime) -> None:
    # Scripted text that is not the schema's JSON: a schema-enforcing server
    # cannot answer it, so the mock answers matching JSON (a minimal instance).
    script = ScriptFile.model_validate({"replies": [{"text": "It will rain in Oslo."}]})
    with MockLlmServer(script) as server, runtime.open_session(model=mock_model(server)) as s:
        result = s.submit("forecast?", output_type=Forecast, timeout=WAIT)
        (recorded,) = server.requests()
    assert result.status == "completed" and isinstance(result.output, Forecast)
    body = recorded.body
    assert isinstance(body, dict)
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["name"] == "Forecast"
    assert "tools" not in body or FINAL_ANSWER not in json.dumps(body["tools"])


def test_json_schema_over_http_re_asks_what_only_validation_catches(runtime: Runtime) -> None:
    script = ScriptFile.model_validate({"replies": [{"text": '{"n": -2}'}, {"text": '{"n": 2}'}]})
    with MockLlmServer(script) as server, runtime.open_session(model=mock_model(server)) as s:
        assert s.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=2)
        second = server.requests()[1].body
    assert isinstance(second, dict)
    assert "n must be positive" in second["messages"][-1]["content"]


def test_tool_strategy_over_http(runtime: Runtime) -> None:
    script = ScriptFile.model_validate(
        {"replies": [final(n=-1), final(**{"n": 6})]}  # invalid, then valid
    )
    with MockLlmServer(script) as server:
        model = mock_model(server, structured_output="tool")
        with runtime.open_session(model=model) as s:
            assert s.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=6)
        first, second = (r.body for r in server.requests())
    assert isinstance(first, dict) and isinstance(second, dict)
    assert first["tool_choice"] == "required" and "response_format" not in first
    assert [t["function"]["name"] for t in first["tools"]][-1] == FINAL_ANSWER
    assert second["messages"][-1]["role"] == "tool"
    assert "n must be positive" in second["messages"][-1]["content"]


def test_the_mock_refuses_what_openai_refuses() -> None:
    good = {
        "name": "Positive",
        "schema": strict_schema(wire_schema(Positive.model_json_schema())[0]),
    }
    assert response_format_problem({"type": "json_schema", "json_schema": good}) is None
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "Missing required parameter"),
        ({"name": "a b", "schema": {}}, "json_schema.name"),
        ({"name": "M", "schema": {"type": 5}}, "Invalid schema"),
        (
            {"name": "M", "strict": True, "schema": Positive.model_json_schema()},
            "'additionalProperties' is required",
        ),
        (
            {
                "name": "M",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "additionalProperties": False,
                },
            },
            "Missing 'a'",
        ),
        ({"name": "M", "strict": True, "schema": {"type": "array"}}, 'type: \\"object\\"'),
    ]
    for spec_, expected in cases:
        fmt: dict[str, Any] = {"type": "json_schema"}
        if spec_:
            fmt["json_schema"] = spec_
        problem = response_format_problem(fmt)
        assert problem is not None, spec_
        assert expected.replace("\\", "") in problem[0], (problem, expected)


def test_the_mock_answers_a_refused_format_with_http_400() -> None:
    import httpx

    script = ScriptFile.model_validate({"replies": [{"text": "{}"}]})
    with MockLlmServer(script) as server:
        response = httpx.post(
            f"{server.base_url}/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "M",
                        "strict": True,
                        "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
                    },
                },
            },
            timeout=WAIT,
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "response_format" and "additionalProperties" in error["message"]


# -- ScriptedModel: both strategies as written -----------------------------------------------


def test_scripted_model_serves_both_strategies(runtime: Runtime) -> None:
    as_json = ScriptedModel([{"text": '{"n": 1}'}], structured_output="json_schema")
    as_tool = ScriptedModel([final(n=2)], structured_output="tool")
    with runtime.open_session(model=as_json) as a, runtime.open_session(model=as_tool) as b:
        assert a.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=1)
        assert b.ask("n", output_type=Positive, timeout=WAIT) == Positive(n=2)


def test_the_capability_flag_is_checked() -> None:
    with pytest.raises(ValueError, match="structured_output"):
        OpenAICompatible(structured_output="xml")  # type: ignore[arg-type]


# -- speculation -------------------------------------------------------------------------------


def test_a_structured_submit_of_the_suggestion_runs_anew_and_applies_nothing(
    runtime: Runtime, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text("x = 1\n")
    edit = tool_call("edit", path="app.py", old_string="x = 1", new_string="x = 2")

    def speculate(request: LlmRequest) -> Any:
        return "Bumped." if isinstance(request.messages[-1], ToolResult) else edit

    with Replies(
        main=["Hello.", "x is 1. Shall I bump it?", '{"n": 1}'],
        suggestion=['{"suggestion": "bump x to 2"}'],
        speculation=[speculate, speculate],
    ) as replies:
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
        with runtime.open_session(workspace=tmp_path, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            assert settled(s) == "completed"
            # The same text, but structured: the speculation was not asked for the
            # value, so it is not accepted; the run is new, with the format.
            result = s.submit("bump x to 2", output_type=Positive, timeout=WAIT)
            assert result.status == "completed" and result.output == Positive(n=1)
            assert (tmp_path / "app.py").read_text() == "x = 1\n"
            wait_until(lambda: overlay_dirs(runtime) == [])
            last_main = replies.seen("main")[-1]
            assert last_main.response_schema is not None


def test_forks_after_a_tool_strategy_turn_never_see_the_final_answer_tool(
    runtime: Runtime, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text("x = 1\n")
    with Replies(
        main=["Hello.", "x is 1.", final(n=5)],
        suggestion=['{"suggestion": "run the tests"}'],
        speculation=["Done."],
    ) as replies:
        model = replies.model
        model.structured_output = "tool"
        with runtime.open_session(
            workspace=tmp_path, model=model, speculation=spec(speculate=True)
        ) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(replies.seen("suggestion")) == 1)
            settled(s)
            replies.queues["suggestion"] = ['{"suggestion": "run the tests"}']
            replies.queues["speculation"] = ["Done."]
            s.drain_events()
            result = s.submit("n?", output_type=Positive, timeout=WAIT)
            assert result.output == Positive(n=5)
            wait_until(lambda: len(replies.seen("suggestion")) == 2)
            settled(s)
            snapshots = [e for e in s.drain_events() if isinstance(e, SnapshotTaken)]
        fork = replies.seen("suggestion")[-1]
        assert FINAL_ANSWER not in [t.name for t in fork.tools]
        assert FINAL_ANSWER in [t.name for t in replies.seen("main")[-1].tools]
        for request in replies.seen("speculation"):
            assert FINAL_ANSWER not in [t.name for t in request.tools]
            assert request.response_schema is None
        assert snapshots
        for event in snapshots:
            assert FINAL_ANSWER not in [t.name for t in event.snapshot.tools]


# -- the schema functions, as properties -------------------------------------------------------

LEAVES: list[Any] = [int, str, float, bool, Unit, Literal["a", "b"], int | None]


@st.composite
def output_types(draw: st.DrawFn, depth: int = 0) -> Any:
    """A pydantic model of random leaves, lists, optionals and nested models."""
    count = draw(st.integers(min_value=0, max_value=4))
    fields: dict[str, Any] = {}
    for i in range(count):
        choice = draw(st.integers(min_value=0, max_value=9 if depth < 2 else 6))
        leaf = LEAVES[choice] if choice < len(LEAVES) else None
        if leaf is not None:
            kind = leaf
        elif choice == 7:
            kind = list[draw(st.sampled_from(LEAVES[:4]))]  # type: ignore[misc]
        else:
            kind = draw(output_types(depth + 1))
            if choice == 9:
                kind = list[kind] | None  # type: ignore[valid-type]
        if draw(st.booleans()) and kind is not None:
            fields[f"f{i}"] = (kind, Field(default=None) if "None" in repr(kind) else ...)
        else:
            fields[f"f{i}"] = (kind, ...)
    return create_model(f"M{depth}_{count}_{draw(st.integers(0, 999))}", **fields)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(output_types(), st.sampled_from(["object", "list"]))
def test_strict_schemas_pass_openais_rules_and_decoded_answers_validate(
    model: Any, shape: str
) -> None:
    output_type = model if shape == "object" else list[model]
    request = output_request(output_type)
    run = OutputRun(request, strategy="json_schema")
    fmt = run.response_schema()
    assert fmt.strict  # these types have no open keys
    problem = response_format_problem(
        {
            "type": "json_schema",
            "json_schema": {"name": fmt.name, "schema": fmt.json_schema, "strict": True},
        }
    )
    assert problem is None, problem
    # What a schema-enforcing decoder could answer validates here too.
    answer = instance(fmt.json_schema)
    Draft202012Validator(fmt.json_schema).validate(answer)
    assert run.check_text(json.dumps(answer)) is None and run.done


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=200))
def test_compact_errors_are_bounded(values: list[str]) -> None:
    many = create_model("Many", items=(list[int], ...))
    try:
        many.model_validate({"items": values})
    except ValidationError as exc:
        text = compact_errors(exc)
        assert len(text) <= MAX_ERROR_CHARS
        assert text.count("\n") <= 8
    else:
        assert all(v.strip().lstrip("+-").isdigit() for v in values)


def test_open_keys_are_not_strict_but_still_validated(runtime: Runtime) -> None:
    class Tags(BaseModel):
        counts: dict[str, int]

    schema = output_request(Tags).json_schema
    assert strict_schema(wire_schema(schema)[0]) is None
    seen: list[LlmRequest] = []

    def answer(request: LlmRequest) -> str:
        seen.append(request)
        return '{"counts": {"a": 1}}'

    with runtime.open_session(model=FunctionModel(answer, structured_output="json_schema")) as s:
        assert s.ask("tags", output_type=Tags, timeout=WAIT) == Tags(counts={"a": 1})
    assert seen[0].response_schema is not None and seen[0].response_schema.strict is False


def test_the_json_schema_strategy_leaves_the_tool_list_byte_identical(
    runtime: Runtime, tmp_path: Path
) -> None:
    """Prefix caches (and fork snapshots) hit: only ``response_format`` is added."""
    script = ScriptFile.model_validate({"replies": [{"text": "plain"}, {"text": '{"n": 1}'}]})
    with MockLlmServer(script) as server:
        with runtime.open_session(workspace=tmp_path, model=mock_model(server)) as s:
            s.submit("plain", timeout=WAIT)
            assert s.ask("typed", output_type=Positive, timeout=WAIT) == Positive(n=1)
        plain, typed = (r.body for r in server.requests())
    assert isinstance(plain, dict) and isinstance(typed, dict)
    assert plain["tools"] and typed["tools"] == plain["tools"]
    assert typed["tool_choice"] == plain["tool_choice"] == "auto"
    assert typed["messages"][: len(plain["messages"])] == plain["messages"]
    assert "response_format" not in plain


def test_a_worker_without_the_output_interceptor_refuses_a_structured_submit() -> None:
    request = output_request(Positive)
    with pytest.raises(StructuredOutputUnavailable, match="no OutputInterceptor"):
        start_output(request, Interceptors([Interceptor()]))
    with pytest.raises(StructuredOutputUnavailable, match="output_type"):
        start_output(request.model_copy(update={"output_type": None}), Interceptors([]))
    chain = Interceptors([Interceptor(), Interceptors([OutputInterceptor(SessionState())])])
    run = start_output(request, chain)
    assert isinstance(run, OutputRun) and run.request is request
    assert start_output(None, Interceptor()) is None


def test_a_speculation_never_runs_the_main_sessions_output_interceptor(runtime: Runtime) -> None:
    """The OutputInterceptor is Fore's machinery, bound to the main session's state:
    a speculation's gate must not treat it as the session's policy and call it. The
    session's policy is carried apart from the machinery (``WorkerConfig.policy``),
    so the gate gets exactly what ``open_session(interceptor=...)`` was given."""

    class Policy(Interceptor):
        pass

    policy = Policy()
    with_policy = runtime.open_session(model=ScriptedModel([]), interceptor=policy)
    without = runtime.open_session(model=ScriptedModel([]))
    try:
        for session, expected in ((with_policy, policy), (without, None)):
            ref = session.worker.ref
            assert ref is not None
            worker = ref._actor_weakref()
            assert worker is not None
            config = worker.config
            assert config.policy is expected
            chain = config.interceptor
            assert isinstance(chain, Interceptors)
            assert any(isinstance(part, OutputInterceptor) for part in chain.parts)
            # the worker still runs the policy, after the machinery
            assert [p for p in chain.parts if isinstance(p, Policy)] == (
                [policy] if expected is not None else []
            )
            assert expected is None or chain.parts[-1] is policy
    finally:
        with_policy.close()
        without.close()
