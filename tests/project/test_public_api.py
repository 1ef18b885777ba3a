"""The public API: what each package exports, and the rules every message obeys."""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

import fore
import fore.lowlevel
import fore.messages
import fore.testing
from fore.messages.base import Message


def _message_modules() -> list[Any]:
    return [
        importlib.import_module(f"fore.messages.{info.name}")
        for info in pkgutil.iter_modules(fore.messages.__path__)
    ]


# Every public name of every message module, for the round-trip tests below.
messages = SimpleNamespace(
    **{
        name: obj
        for module in _message_modules()
        for name, obj in vars(module).items()
        if not name.startswith("_")
    }
)


def message_classes() -> list[type[Message]]:
    found: list[type[Message]] = []
    for module in _message_modules():
        for _, obj in inspect.getmembers(module, inspect.isclass):
            mine = issubclass(obj, Message) and obj.__module__ == module.__name__
            if mine and not obj.__name__.startswith("_"):
                found.append(obj)
    return found


# -- the tiers ------------------------------------------------------------------------------


@pytest.mark.parametrize("tier", [fore, fore.testing, fore.lowlevel], ids=lambda m: m.__name__)
def test_every_name_a_tier_lists_resolves_and_is_documented(tier: Any) -> None:
    for name in tier.__all__:
        value = getattr(tier, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{tier.__name__}.{name} has no docstring"


def test_the_application_tier_is_small() -> None:
    assert len(fore.__all__) <= 60
    assert set(fore.__all__) == {"ForeError", "__version__", *fore._WHERE}
    assert len(set(fore.__all__)) == len(fore.__all__)
    assert issubclass(fore.ToolError, fore.ForeError)


def test_internal_packages_export_nothing() -> None:
    # The grab-bags of the old layout are gone: deep imports inside Fore,
    # the tiers outside it.
    for package in ("fore.actors", "fore.messages"):
        module = importlib.import_module(package)
        public = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and not isinstance(v, ModuleType)
        ]
        assert public == [], f"{package} exports {public}"


def test_every_public_error_is_a_fore_error() -> None:
    import fore.actors.blobs.fs_layout
    import fore.actors.blobs.fs_store
    import fore.actors.core.errors
    import fore.actors.llm.errors
    import fore.actors.tools.paths
    import fore.errors
    import fore.supervision.supervisor

    for module in (
        fore.errors,  # where they are all defined now (tests/project/test_errors.py)
        fore.actors.core.errors,
        fore.actors.blobs.fs_layout,
        fore.actors.blobs.fs_store,
        fore.actors.llm.errors,
        fore.actors.tools.paths,
        fore.supervision.supervisor,
    ):
        for name, obj in vars(module).items():
            mine = inspect.isclass(obj) and obj.__module__ == module.__name__
            if mine and issubclass(obj, BaseException) and not name.startswith("_"):
                assert issubclass(obj, fore.ForeError), f"{module.__name__}.{name}"


@pytest.mark.parametrize("cls", message_classes(), ids=lambda c: c.__name__)
def test_every_message_is_frozen_and_strict(cls: type[Message]) -> None:
    assert cls.model_config.get("frozen") is True
    assert cls.model_config.get("extra") == "forbid"


def test_the_names_the_issues_spell_out_are_importable() -> None:
    from fore import (  # noqa: F401  # noqa: F401
        Abort,
        Alert,
        AlertLevel,
        AssistantMessage,
        Cancel,
        Continue,
        ContinueWithMessages,
        Finish,
        Item,
        Pause,
        Paused,
        Runtime,
        Skip,
        SystemMessage,
        ToolCall,
        ToolResult,
        UserMessage,
        classify_shell_command,
        evaluate_tool_call,
    )
    from fore.messages.blobs import (  # noqa: F401
        Content,
        Inline,
        Stored,
        Structured,
        Text,
        ToolOutput,
    )
    from fore.messages.conversation import FileRef, Paste, TextSegment  # noqa: F401
    from fore.testing import FunctionModel, RecordingHook, ScriptedHook, ScriptedModel  # noqa: F401

    assert callable(ScriptedModel.from_file)


def test_a_bad_field_is_rejected_at_the_sender_naming_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        messages.ToolCall(id="c1", name="", arguments={})
    assert info.value.errors()[0]["loc"] == ("name",)
    with pytest.raises(ValidationError) as info:
        messages.Submit(text="x", max_turns=0)
    assert info.value.errors()[0]["loc"] == ("max_turns",)
    with pytest.raises(ValidationError) as info:
        messages.Alert(level="loud", text="x", source="s")  # type: ignore[arg-type]
    assert info.value.errors()[0]["loc"] == ("level",)
    with pytest.raises(ValidationError):
        messages.UserMessage(text="x", typo=True)  # type: ignore[call-arg]
    item = messages.UserMessage(text="x")
    with pytest.raises(ValidationError):
        item.text = "y"  # type: ignore[misc]


# -- lossless JSON round trips ---------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12)
segments = st.one_of(
    st.builds(messages.TextSegment, text=st.text(max_size=30)),
    st.builds(messages.FileRef, path=st.text(min_size=1, max_size=20)),
    st.builds(messages.Paste, text=st.text(max_size=30)),
)
tool_calls = st.builds(
    messages.ToolCall,
    id=ids,
    name=ids,
    arguments=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)
items = st.one_of(
    st.builds(
        messages.UserMessage,
        text=st.text(max_size=40),
        segments=st.lists(segments, max_size=3).map(tuple),
    ),
    st.builds(
        messages.AssistantMessage,
        text=st.text(max_size=40),
        tool_calls=st.lists(tool_calls, max_size=3).map(tuple),
    ),
    st.builds(messages.SystemMessage, text=st.text(max_size=40)),
    st.builds(
        messages.ToolResult,
        call_id=ids,
        name=ids,
        output=st.text(max_size=40),
        is_error=st.booleans(),
    ),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(items, max_size=6))
def test_conversation_items_round_trip_losslessly(history: list[Any]) -> None:
    adapter: TypeAdapter[list[messages.Item]] = TypeAdapter(list[messages.Item])
    assert adapter.validate_json(adapter.dump_json(history)) == history


@given(
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.sampled_from(["top", "nested", "listed"]),
)
def test_non_finite_numbers_in_tool_arguments_are_refused_naming_where(
    number: float, where: str
) -> None:
    # JSON has no NaN or Infinity (pydantic would write null): such a call
    # could not round-trip, so it is refused with the path to the number.
    cases: dict[str, dict[str, Any]] = {
        "top": {"x": number},
        "nested": {"x": {"deep": {"y": number}}},
        "listed": {"x": [1.5, number]},
    }
    arguments = cases[where]
    with pytest.raises(ValidationError) as info:
        messages.ToolCall(id="c1", name="t", arguments=arguments)
    error = info.value.errors()[0]
    assert error["loc"] == ("arguments",)
    path = {"top": "['x']", "nested": "['x']['deep']['y']", "listed": "['x'][1]"}[where]
    assert f"arguments{path} is not a finite number" in error["msg"]


def test_finite_floats_in_tool_arguments_round_trip_exactly() -> None:
    call = messages.ToolCall(
        id="c1", name="t", arguments={"x": [0.1, -0.0, 1e308, 5e-324, 2.5], "y": {"z": 1e-7}}
    )
    again = messages.ToolCall.model_validate_json(call.model_dump_json())
    assert again == call
    assert again.arguments["x"] == [0.1, -0.0, 1e308, 5e-324, 2.5]


@settings(max_examples=100, deadline=None)
@given(st.lists(items, max_size=4), st.sampled_from(["completed", "paused", "error", "boundary"]))
def test_turn_results_and_events_round_trip(history: list[Any], status: str) -> None:
    result = messages.TurnResult(run_id="r", session_id="s", status=status, items=tuple(history))  # type: ignore[arg-type]
    event = messages.TurnFinished(session_id="s", result=result)
    adapter: TypeAdapter[Any] = TypeAdapter(messages.SessionEvent)
    assert adapter.validate_json(adapter.dump_json(event)) == event


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_blob_contents_round_trip(value: Any) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(messages.ToolOutput)
    for output in (
        messages.Stored(summary="s", content=messages.Structured(value=value)),
        messages.Inline(text=str(value)),
    ):
        assert adapter.validate_json(adapter.dump_json(output)) == output


def test_runtime_messages_round_trip() -> None:
    snapshot = messages.TreeSnapshot(
        id="root",
        strategy="one_for_one",
        status="running",
        children=(
            messages.ChildSnapshot(
                id="w",
                kind="worker",
                actor_class="Worker",
                actor_urn=None,
                status="running",
                restart="permanent",
            ),
        ),
    )
    assert isinstance(snapshot, BaseModel)
    assert messages.TreeSnapshot.model_validate_json(snapshot.model_dump_json()) == snapshot
