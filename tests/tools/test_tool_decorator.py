"""``@tool``: typed functions as tools; sessions taking them; built-ins by name (issue 23.1, .5).

Unit tests go through ``invoke_tool`` (as the pool does); the session tests run
a real Runtime with a ``FunctionModel`` that calls the tools and reports what
it saw.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from fore.actors.llm import FunctionModel
from fore.actors.tools.base import (
    FunctionTool,
    Tool,
    ToolArgs,
    ToolContext,
    ToolRegistry,
    invoke_tool,
)
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.decorator import DecoratedTool, ToolDefinitionError, make_tool, tool
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.noworkspace import NO_WORKSPACE, NoWorkspace
from fore.messages.conversation import ToolCall, ToolResult
from fore.messages.llm import LlmRequest
from fore.messages.speculation import SpeculationConfig
from fore.supervision import Runtime

pytestmark = pytest.mark.runtime(blobs=False)

WAIT = 30.0


def ctx_for(fs: Any = None, session_id: str = "s1") -> ToolContext:
    return ToolContext(
        fs=fs if fs is not None else NoWorkspace(),
        cancel=CancelToken(),
        deadline=time.monotonic() + 30,
        session_id=session_id,
        call_id="c1",
    )


def run(t: Tool[Any], context: ToolContext | None = None, /, **arguments: Any) -> tuple[str, str]:
    result = invoke_tool(
        ToolRegistry([t]), ToolCall(id="c1", name=t.name, arguments=arguments), context or ctx_for()
    )
    return result.outcome, result.output


# -- the schema and the descriptions ------------------------------------------------------


class Location(BaseModel):
    lat: float
    lon: float


@tool
def get_weather(
    city: str,
    days: Annotated[int, Field(ge=1, le=7)] = 1,
    unit: Literal["c", "f"] = "c",
    near: Location | None = None,
) -> str:
    """Forecast for a city.

    Uses the national weather service.

    Args:
        city: The city's name, e.g. "Paris".
        days: How many days ahead.
        unit: Celsius or Fahrenheit.
    """
    where = f" near {near.lat},{near.lon}" if near else ""
    return f"{city}: sunny for {days} day(s) in {unit}{where}"


def test_the_schema_comes_from_the_type_hints() -> None:
    definition = get_weather.definition()
    assert definition.name == "get_weather"
    schema = definition.parameters
    assert schema["required"] == ["city"]
    assert schema["additionalProperties"] is False
    props: Any = schema["properties"]
    assert props["city"]["type"] == "string"
    assert props["days"] == {
        "default": 1,
        "description": "How many days ahead.",
        "maximum": 7,
        "minimum": 1,
        "title": "Days",
        "type": "integer",
    }
    assert props["unit"]["enum"] == ["c", "f"]
    assert "$ref" in json.dumps(props["near"])  # a pydantic model parameter
    assert "Location" in schema["$defs"]  # type: ignore[operator]


def test_descriptions_come_from_the_docstring() -> None:
    definition = get_weather.definition()
    assert definition.description == "Forecast for a city.\n\nUses the national weather service."
    props: Any = definition.parameters["properties"]
    assert props["city"]["description"] == 'The city\'s name, e.g. "Paris".'
    assert props["unit"]["description"] == "Celsius or Fahrenheit."
    assert "description" not in props["near"]  # not documented: no description


def numpy_style(path: str, count: int) -> str:
    """Count things.

    Parameters
    ----------
    path : str
        Where to look.
    count : int
        How many.
    """
    return path * count


def sphinx_style(path: str, count: int) -> str:
    """Count things.

    :param path: Where to look.
    :param count: How many.
    """
    return path * count


def google_style(path: str, count: int) -> str:
    """Count things.

    Args:
        path (str): Where to look.
        count: How many.
    """
    return path * count


@pytest.mark.parametrize("fn", [numpy_style, sphinx_style, google_style])
def test_numpy_sphinx_and_google_docstrings(fn: Any) -> None:
    definition = tool(fn).definition()
    props: Any = definition.parameters["properties"]
    assert definition.description == "Count things."
    assert props["path"]["description"] == "Where to look."
    assert props["count"]["description"] == "How many."


def test_an_annotated_description_wins_over_the_docstring() -> None:
    @tool
    def f(x: Annotated[int, Field(description="from Field")]) -> int:
        """Doc.

        Args:
            x: from the docstring
        """
        return x

    assert f.definition().parameters["properties"]["x"]["description"] == "from Field"  # type: ignore[index,call-overload]


# -- both forms, options, still a function --------------------------------------------


def test_both_forms_and_the_options() -> None:
    @tool(name="lookup", description="Look a thing up.", read_only=True, timeout=5, exclusive=True)
    def find(thing: str) -> str:
        return thing.upper()

    assert isinstance(find, Tool) and isinstance(find, DecoratedTool)
    assert (find.name, find.description, find.read_only, find.timeout, find.exclusive) == (
        "lookup",
        "Look a thing up.",
        True,
        5.0,
        True,
    )
    assert isinstance(get_weather, Tool)
    assert get_weather.read_only is False and get_weather.timeout is None


def test_the_decorated_object_is_still_the_function() -> None:
    assert get_weather("Oslo", days=2) == "Oslo: sunny for 2 day(s) in c"
    assert get_weather.__name__ == "get_weather"
    assert get_weather.__doc__ is not None and "Forecast" in get_weather.__doc__
    assert get_weather.__wrapped__ is get_weather.fn  # type: ignore[attr-defined]


def test_a_call_validates_and_maps_arguments() -> None:
    assert run(get_weather, city="Rome", days=3, near={"lat": 1.5, "lon": 2}) == (
        "ok",
        "Rome: sunny for 3 day(s) in c near 1.5,2.0",
    )


def test_invalid_arguments_are_a_compact_error_the_model_sees() -> None:
    outcome, output = run(get_weather, city=7, days=9, unit="k", extra=True)
    assert outcome == "invalid"
    assert output.startswith("Invalid arguments for get_weather: ")
    assert "city: Input should be a valid string" in output
    assert "days: Input should be less than or equal to 7" in output
    assert "unit: Input should be 'c' or 'f'" in output
    assert "extra: Extra inputs are not permitted" in output
    assert "\n" not in output  # one line, no pydantic URL
    outcome, output = run(get_weather)
    assert (outcome, output) == (
        "invalid",
        "Invalid arguments for get_weather: city: Field required",
    )


def test_the_context_parameter_receives_the_context_and_is_not_in_the_schema() -> None:
    seen: list[ToolContext] = []

    @tool
    def whoami(prefix: str, ctx: ToolContext) -> str:
        seen.append(ctx)
        return f"{prefix}{ctx.session_id}/{ctx.call_id}"

    assert set(whoami.definition().parameters["properties"]) == {"prefix"}  # type: ignore[arg-type]
    context = ctx_for(session_id="sess-9")
    assert run(whoami, context, prefix=">") == ("ok", ">sess-9/c1")
    assert seen == [context]
    assert run(whoami, context, prefix=">", ctx="x")[0] == "invalid"  # not an argument


def test_parameters_named_like_model_attributes_work() -> None:
    @tool
    def odd(json: str, schema: int, copy: bool = False, _private: str = "p") -> str:
        return f"{json}|{schema}|{copy}|{_private}"

    assert set(odd.definition().parameters["properties"]) == {  # type: ignore[arg-type]
        "json",
        "schema",
        "copy",
        "_private",
    }
    assert run(odd, json="j", schema=2, _private="q") == ("ok", "j|2|False|q")


def test_positional_only_parameters_are_passed_positionally() -> None:
    @tool
    def pos(a: int, /, b: int, *, c: int = 0) -> int:
        return a * 100 + b * 10 + c

    assert run(pos, a=1, b=2, c=3) == ("ok", "123")


@dataclasses.dataclass
class Reading:
    at: datetime.date
    values: set[int]


def test_return_values_become_json() -> None:
    @tool
    def structured() -> dict[str, Any]:
        return {"a": [1, 2], "b": None}

    @tool
    def model() -> Location:
        return Location(lat=1, lon=2)

    @tool
    def dataclass_value() -> Reading:
        return Reading(at=datetime.date(2024, 1, 2), values={3})

    assert run(structured) == ("ok", '{"a": [1, 2], "b": null}')
    assert run(model) == ("ok", '{"lat":1.0,"lon":2.0}')
    assert run(dataclass_value) == ("ok", '{"at": "2024-01-02", "values": [3]}')


def test_exceptions_are_error_results() -> None:
    @tool
    def boom(x: int) -> int:
        raise RuntimeError(f"bad {x}")

    assert run(boom, x=1) == ("error", "boom failed: RuntimeError: bad 1")


def test_writes_orders_calls_by_path() -> None:
    @tool(writes=lambda path, text: [path])
    def save(path: str, text: str, ctx: ToolContext) -> str:
        return "saved"

    args = save.args_model.model_validate({"path": "a.txt", "text": "x"})
    assert save.write_paths(args) == frozenset({"a.txt"})


# -- bad definitions fail at decoration, naming the parameter ---------------------------


def test_an_unsupported_annotation_fails_at_decoration_naming_the_parameter() -> None:
    with pytest.raises(ToolDefinitionError, match=r"parameter 'lock' has an unsupported type"):

        @tool
        def locked(path: str, lock: threading.Lock) -> None: ...

    with pytest.raises(ToolDefinitionError, match=r"parameter 'callback' has an unsupported"):

        @tool
        def hook(callback: Any.__class__) -> None: ...


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(a, b: int) -> None: ...", r"parameter 'a' has no type annotation"),
        ("def f(*items: int) -> None: ...", r"parameter \*items is not supported"),
        ("def f(**options: int) -> None: ...", r"parameter \*\*options is not supported"),
        ("def f(a: 'NoSuchType') -> None: ...", r"type hints cannot be resolved"),
        ("def f(a: int):\n    yield a", r"a generator cannot be a tool"),
        (
            "def f(a: ToolContext, b: ToolContext) -> None: ...",
            r"only one parameter may take the ToolContext",
        ),
    ],
)
def test_bad_functions_fail_at_decoration(source: str, message: str) -> None:
    namespace: dict[str, Any] = {"ToolContext": ToolContext}
    exec(source, namespace)
    with pytest.raises(ToolDefinitionError, match=message):
        tool(namespace["f"])


def test_a_name_a_provider_would_refuse_fails_at_decoration() -> None:
    with pytest.raises(ToolDefinitionError, match="not a valid tool name"):
        tool(lambda x: x)
    with pytest.raises(ToolDefinitionError, match="not a valid tool name"):
        tool(name="has space")(numpy_style)
    with pytest.raises(ToolDefinitionError, match="timeout must be a positive number"):
        tool(timeout=0)(numpy_style)


# -- sessions take functions next to Tool instances -----------------------------------------


class EchoArgs(ToolArgs):
    text: str


def echo_tool() -> FunctionTool[EchoArgs]:
    return FunctionTool("echo", "Echo.", EchoArgs, lambda args, _ctx: args.text)


def plain_double(n: int) -> int:
    """Double a number (not decorated: open_session decorates it)."""
    return 2 * n


def results_of(request: LlmRequest) -> list[ToolResult]:
    return [item for item in request.messages if isinstance(item, ToolResult)]


def calling(*calls: tuple[str, dict[str, Any]]) -> FunctionModel:
    """A model that makes ``calls`` once, then answers with what each call returned."""

    def decide(request: LlmRequest) -> Any:
        results = results_of(request)
        if not results:
            return {
                "text": "",
                "tool_calls": [{"name": name, "arguments": args} for name, args in calls],
            }
        return " | ".join(f"{r.name}:{'ERR ' if r.is_error else ''}{r.output}" for r in results)

    return FunctionModel(decide)


def answer(session: Any, prompt: str = "go") -> str:
    turn = session.submit(prompt, timeout=WAIT)
    assert turn.status == "completed", turn
    return str(turn.items[-1].text)


def test_a_session_takes_decorated_and_plain_functions_next_to_tools(
    runtime: Runtime, tmp_path: Path
) -> None:
    model = calling(
        ("get_weather", {"city": "Lima"}),
        ("plain_double", {"n": 21}),
        ("echo", {"text": "hi"}),
        ("get_weather", {"city": 5}),
    )
    session = runtime.open_session(
        workspace=tmp_path, model=model, tools=[get_weather, plain_double, echo_tool()]
    )
    try:
        assert answer(session) == (
            "get_weather:Lima: sunny for 1 day(s) in c | plain_double:42 | echo:hi | "
            "get_weather:ERR Invalid arguments for get_weather: city: Input should be a valid "
            "string"
        )
        sent = {d.name: d for d in model.requests[0].tools}
        assert sent["plain_double"].description == (
            "Double a number (not decorated: open_session decorates it)."
        )
        assert sent["get_weather"] == get_weather.definition()
    finally:
        session.close()


def test_a_tool_class_or_other_object_is_refused_clearly(runtime: Runtime, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="pass an instance"):
        runtime.open_session(workspace=tmp_path, model=calling(), tools=[FunctionTool])
    with pytest.raises(TypeError, match="not a tool: 42"):
        runtime.open_session(workspace=tmp_path, model=calling(), tools=[42])  # type: ignore[list-item]


def test_a_tool_timeout_replaces_the_session_call_timeout(runtime: Runtime, tmp_path: Path) -> None:
    @tool(timeout=0.3)
    def stuck(ctx: ToolContext) -> str:
        ctx.cancel.wait(WAIT)  # returns when the pool cancels it at the tool's deadline
        return "late"

    session = runtime.open_session(
        workspace=tmp_path, model=calling(("stuck", {})), tools=[stuck], call_timeout=600
    )
    try:
        assert answer(session) == "stuck:ERR stuck timed out after 0.3s"
    finally:
        session.close()


# -- built-ins by name, and sessions without a workspace --------------------------------------


def tool_names(request: LlmRequest) -> set[str]:
    return {definition.name for definition in request.tools}


def test_builtins_are_chosen_by_name(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("needle\n")
    model = calling(("grep", {"pattern": "needle"}), ("shell", {"command": "true"}))
    session = runtime.open_session(
        workspace=tmp_path, model=model, builtin=("read_file", "grep"), tools=[plain_double]
    )
    try:
        text = answer(session)
        assert text.startswith("grep:a.txt:1: needle | shell:ERR Unknown tool 'shell'")
        assert tool_names(model.requests[0]) == {"read_file", "grep", "plain_double"}
    finally:
        session.close()


def test_all_or_nothing_builtins_are_unchanged(runtime: Runtime, tmp_path: Path) -> None:
    names: dict[bool, set[str]] = {}
    for builtin in (True, False):
        model = calling()
        session = runtime.open_session(workspace=tmp_path, model=model, builtin=builtin)
        try:
            answer(session)
            names[builtin] = tool_names(model.requests[0])
        finally:
            session.close()
    assert names[True] >= {
        "read_file",
        "write_file",
        "edit",
        "multi_edit",
        "list_directory",
        "glob",
        "grep",
        "shell",
    }
    assert names[False] == {"multi_edit"}  # as before: kept for previews


def test_unknown_builtin_names_are_refused(runtime: Runtime, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown built-in tool\(s\) 'grepp'; the built-ins are"):
        runtime.open_session(workspace=tmp_path, model=calling(), builtin=("grepp",))
    with pytest.raises(TypeError, match="not one string"):
        runtime.open_session(workspace=tmp_path, model=calling(), builtin="grep")  # type: ignore[arg-type]


def test_a_session_without_a_workspace(runtime: Runtime) -> None:
    @tool
    def peek(path: str, ctx: ToolContext) -> str:
        return ctx.fs.read_bytes(path).decode()

    model = calling(("get_weather", {"city": "Quito"}), ("peek", {"path": "/etc/hostname"}))
    session = runtime.open_session(model=model, tools=[get_weather, peek])
    try:
        assert answer(session, "what about @notes.txt?") == (
            f"get_weather:Quito: sunny for 1 day(s) in c | peek:ERR {NO_WORKSPACE}"
        )
        assert tool_names(model.requests[0]) == {"get_weather", "peek"}
        assert not session.alerts  # "@notes.txt" is just text: no file reference to resolve
    finally:
        session.close()


def test_what_needs_a_workspace_says_so(runtime: Runtime) -> None:
    with pytest.raises(ValueError, match="built-in tools need a workspace"):
        runtime.open_session(model=calling(), builtin=True)
    with pytest.raises(ValueError, match="built-in tools need a workspace"):
        runtime.open_session(model=calling(), builtin=("grep",))
    with pytest.raises(ValueError, match="speculation needs a workspace"):
        runtime.open_session(model=calling(), speculation=SpeculationConfig(enabled=True))


def test_make_tool_wraps_someone_elses_function(tmp_path: Path) -> None:
    t = make_tool(numpy_style, name="count_things", read_only=True)
    assert t.name == "count_things" and t.read_only
    assert run(t, ctx_for(WorkspaceFs(tmp_path)), path="ab", count=2) == ("ok", "abab")
    assert make_tool(t).fn is numpy_style  # re-wrapping a tool wraps its function


# -- read_only: a speculation may run the tool ----------------------------------------------


def speculate_call(
    rt: Runtime, workspace: Path, tools: list[Any], *calls: dict[str, Any], **config: Any
) -> Any:
    """Run a session whose speculation makes ``calls``; its finished speculation status."""
    from fore.actors.llm import ScriptedModel
    from tests.speculation.test_speculation import TWO_TURNS, settled, spec, speculated, suggestion

    script = [*TWO_TURNS, suggestion("look it up"), speculated("", *calls), speculated("Done.")]
    with rt.open_session(
        workspace=workspace, model=ScriptedModel(script), tools=tools, speculation=spec(**config)
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        return s.speculation


def test_a_read_only_tool_runs_in_a_speculation(runtime: Runtime, tmp_path: Path) -> None:
    ran: list[str] = []

    @tool(read_only=True)
    def lookup(key: str) -> str:
        ran.append(key)
        return key.upper()

    status = speculate_call(
        runtime, tmp_path, [lookup], {"name": "lookup", "arguments": {"key": "k"}}
    )
    assert status.state == "completed", status
    assert ran == ["k"]


def test_an_undeclared_tool_is_a_boundary_in_a_speculation(
    runtime: Runtime, tmp_path: Path
) -> None:
    ran: list[str] = []

    @tool
    def lookup(key: str) -> str:
        ran.append(key)
        return key

    status = speculate_call(
        runtime, tmp_path, [lookup], {"name": "lookup", "arguments": {"key": "k"}}
    )
    assert status.state == "boundary" and status.boundary_tool == "lookup"
    assert "unknown or custom tool" in (status.boundary_reason or "")
    assert ran == []


def test_a_read_only_tool_after_a_speculative_write_is_a_boundary(
    runtime: Runtime, tmp_path: Path
) -> None:
    from fore.messages.gate import ApprovalMode

    (tmp_path / "app.py").write_text("x = 1\n")
    ran: list[str] = []

    @tool(read_only=True)
    def lookup(key: str) -> str:
        ran.append(key)
        return key

    status = speculate_call(
        runtime,
        tmp_path,
        [lookup],
        {"name": "write_file", "arguments": {"path": "new.txt", "content": "n"}},
        {"name": "lookup", "arguments": {"key": "k"}},
        approval_mode=ApprovalMode.YOLO,
    )
    assert status.state == "boundary" and status.boundary_tool == "lookup"
    assert "no longer matches" in (status.boundary_reason or "")
    assert ran == []
