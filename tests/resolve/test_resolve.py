"""Staged previews and the ``resolve`` tool, through real sessions."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.llm import FunctionModel, OpenAICompatible, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.resolve import (
    MAX_FORCED_ATTEMPTS,
    MAX_REQUEUES,
    NOTHING_PENDING,
    PendingActions,
    Resolve,
    StandingHandler,
)
from fore.actors.resolve.tool import ResolveArgs
from fore.actors.tools import (
    PENDING_STORE_UNAVAILABLE,
    CancelToken,
    FunctionTool,
    ToolContext,
    ToolError,
    WorkspaceFs,
)
from fore.messages.conversation import ToolResult
from fore.messages.llm import LlmRequest, NamedToolChoice
from fore.supervision import Runtime

WAIT = 20.0


class LabelArgs(BaseModel):
    label: str = "rename"


class Producer:
    """A custom tool that stages an action through ctx.push_pending_action."""

    def __init__(self, *, with_reject: bool = False, fail_first_apply: bool = False) -> None:
        self.applied: list[tuple[str, Any]] = []
        self.rejected: list[str] = []
        self.fail_first_apply = fail_first_apply
        self.with_reject = with_reject
        self.lock = threading.Lock()

    def tool(self) -> FunctionTool[LabelArgs]:
        def run(args: LabelArgs, ctx: ToolContext) -> str:
            def apply(reason: str, extra: Any) -> str:
                with self.lock:
                    if self.fail_first_apply:
                        self.fail_first_apply = False
                        raise RuntimeError("disk busy")
                    self.applied.append((args.label, reason))
                return f"applied {args.label}"

            def reject(reason: str) -> str:
                self.rejected.append(args.label)
                return f"cleaned up {args.label}"

            ctx.push_pending_action(
                label=args.label,
                apply=apply,
                reject=reject if self.with_reject else None,
                details={"files": 40},
                source_tool_name="batch_rename_preview",
            )
            return f"Prepared {args.label}. Call resolve to apply or discard."

        return FunctionTool("batch_rename_preview", "stages a rename", LabelArgs, run)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def results(items: Any) -> list[ToolResult]:
    return [i for i in items if isinstance(i, ToolResult)]


# -- the tool itself --


def test_schema_requires_action_and_reason() -> None:
    schema = Resolve().definition().parameters
    assert set(schema["required"]) == {"action", "reason"}  # type: ignore[arg-type]
    assert schema["properties"]["action"]["enum"] == ["apply", "discard"]  # type: ignore[index]
    with pytest.raises(Exception):
        ResolveArgs.model_validate({"action": "apply"})
    with pytest.raises(Exception):
        ResolveArgs.model_validate({"action": "keep", "reason": "x"})


def test_push_pending_action_without_a_store_raises_the_exact_error(tmp_path: Path) -> None:
    ctx = ToolContext(
        fs=WorkspaceFs(tmp_path),
        cancel=CancelToken(),
        deadline=time.monotonic() + 5,
        session_id="s",
        call_id="c",
    )
    with pytest.raises(ToolError) as info:
        ctx.push_pending_action(label="x", apply=lambda reason: None)
    assert str(info.value) == PENDING_STORE_UNAVAILABLE
    assert (
        PENDING_STORE_UNAVAILABLE
        == "Pending action store unavailable for custom tools in this runtime."
    )


def test_nothing_pending_gives_the_exact_error(runtime: Runtime, tmp_path: Path) -> None:
    model = ScriptedModel(
        [{"tool_calls": [call("resolve", action="apply", reason="go")]}, {"text": "ok"}]
    )
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        turn = s.submit("apply it", timeout=WAIT)
        (result,) = results(turn.items)
        assert result.is_error and result.output == NOTHING_PENDING


# -- apply, discard, order --


@pytest.mark.parametrize("with_reject", [False, True])
def test_apply_and_discard(runtime: Runtime, tmp_path: Path, with_reject: bool) -> None:
    producer = Producer(with_reject=with_reject)
    model = ScriptedModel(
        [
            {"tool_calls": [call("batch_rename_preview", label="first")]},
            {"tool_calls": [call("resolve", action="apply", reason="looks right", extra={"k": 1})]},
            {"tool_calls": [call("batch_rename_preview", label="second")]},
            {"tool_calls": [call("resolve", action="discard", reason="wrong files")]},
            {"text": "done"},
        ]
    )
    with runtime.open_session(workspace=tmp_path, model=model, tools=[producer.tool()]) as s:
        turn = s.submit("rename twice", timeout=WAIT)
        _prepared, applied, _prepared2, discarded = results(turn.items)
        payload = json.loads(applied.output)
        assert payload["result"] == "applied first"
        assert payload["resolve"] == {
            "action": "apply",
            "reason": "looks right",
            "source_tool": "batch_rename_preview",
            "label": "first",
            "extra": {"k": 1},
            "details": {"files": 40},
        }
        assert producer.applied == [("first", "looks right")]
        if with_reject:
            assert json.loads(discarded.output)["result"] == "cleaned up second"
            assert producer.rejected == ["second"]
        else:
            assert discarded.output == "Discarded: second. Reason: wrong files"
        assert len(s.pending_actions) == 0


def test_newest_preview_is_served_first_and_two_resolves_consume_one_each(
    runtime: Runtime, tmp_path: Path
) -> None:
    producer = Producer()
    model = ScriptedModel(
        [
            # separate turns: calls of one turn run in parallel, in no defined order
            {"tool_calls": [call("batch_rename_preview", label="older")]},
            {"tool_calls": [call("batch_rename_preview", label="newer")]},
            {
                "tool_calls": [
                    call("resolve", action="apply", reason="one"),
                    call("resolve", action="apply", reason="two"),
                    call("resolve", action="apply", reason="three"),
                ]
            },
            {"text": "done"},
        ]
    )
    with runtime.open_session(workspace=tmp_path, model=model, tools=[producer.tool()]) as s:
        turn = s.submit("go", timeout=WAIT)
        r1, r2, r3 = results(turn.items)[2:]
        assert json.loads(r1.output)["resolve"]["label"] == "newer"
        assert json.loads(r2.output)["resolve"]["label"] == "older"
        assert r3.is_error and r3.output == NOTHING_PENDING
        assert producer.applied == [("newer", "one"), ("older", "two")]


def test_apply_raising_keeps_it_pending_and_a_retry_works(runtime: Runtime, tmp_path: Path) -> None:
    producer = Producer(fail_first_apply=True)
    seen: list[LlmRequest] = []
    replies = iter(
        [
            {"tool_calls": [call("batch_rename_preview", label="x")]},
            {"tool_calls": [call("resolve", action="apply", reason="try")]},
            {"tool_calls": [call("resolve", action="apply", reason="again")]},
            {"text": "done"},
        ]
    )

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        return next(replies)

    with runtime.open_session(
        workspace=tmp_path, model=FunctionModel(decide), tools=[producer.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        _, failed, ok = results(turn.items)
        assert failed.is_error and failed.output == "Apply failed: disk busy"
        assert json.loads(ok.output)["result"] == "applied x"
        # after the failure the directive was pushed again: the next request forced resolve
        assert seen[2].tool_choice == NamedToolChoice(name="resolve")
        assert producer.applied == [("x", "again")]


# -- forcing --


def test_resolve_is_offered_only_while_something_is_pending(
    runtime: Runtime, tmp_path: Path
) -> None:
    producer = Producer()
    seen: list[LlmRequest] = []
    replies = iter(
        [
            {"tool_calls": [call("batch_rename_preview")]},
            {"tool_calls": [call("resolve", action="discard", reason="no")]},
            {"text": "done"},
        ]
    )

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        return next(replies)

    with runtime.open_session(
        workspace=tmp_path, model=FunctionModel(decide), tools=[producer.tool()]
    ) as s:
        s.submit("go", timeout=WAIT)
    names = [{t.name for t in r.tools} for r in seen]
    assert "resolve" not in names[0]
    assert "resolve" in names[1] and seen[1].tool_choice == NamedToolChoice(name="resolve")
    assert any("staged preview is waiting" in getattr(m, "text", "") for m in seen[1].messages)
    assert "resolve" not in names[2] and seen[2].tool_choice == "auto"


def test_an_ignored_forced_turn_is_requeued_at_most_three_times(
    runtime: Runtime, tmp_path: Path
) -> None:
    producer = Producer()
    seen: list[LlmRequest] = []
    replies = iter(
        [{"tool_calls": [call("batch_rename_preview")]}]
        + [{"tool_calls": [call("list_directory")]}] * 5
        + [{"text": "I will not resolve it."}]
    )

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        return next(replies)

    with runtime.open_session(
        workspace=tmp_path, model=FunctionModel(decide), tools=[producer.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed"
        forced = [r.tool_choice == NamedToolChoice(name="resolve") for r in seen]
        # the original forced turn plus MAX_REQUEUES (3) requeued ones, then no more forcing
        assert MAX_REQUEUES == 3 and MAX_FORCED_ATTEMPTS == 4
        assert forced == [False, True, True, True, True, False, False]
        # the reminder stays and resolve stays offered while the action is pending
        assert all(
            any("staged preview" in getattr(m, "text", "") for m in r.messages) for r in seen[1:]
        )
        assert len(s.pending_actions) == 1
        warns = [a for a in s.alerts if a.source == "resolve"]
        assert len(warns) == 1 and warns[0].level == "warn" and "ignored 4" in warns[0].text


def test_a_provider_refusing_forced_choice_falls_back_without_a_loop(
    runtime: Runtime, tmp_path: Path
) -> None:
    producer = Producer()
    script = ScriptFile.model_validate(
        {
            "replies": [
                {"tool_calls": [call("batch_rename_preview", label="plan")]},
                {"tool_calls": [call("resolve", action="apply", reason="fine")]},
                {"text": "applied"},
            ]
        }
    )
    with MockLlmServer(script, reject_forced_tool_choice=True) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(workspace=tmp_path, model=model, tools=[producer.tool()]) as s:
            turn = s.submit("rename", timeout=WAIT)
            assert turn.status == "completed"
            assert producer.applied == [("plan", "fine")]
            bodies = [r.body for r in server.requests()]
            choices = [b.get("tool_choice") for b in bodies if isinstance(b, dict)]
            forced = {"type": "function", "function": {"name": "resolve"}}
            assert choices.count(forced) == 1  # tried once on the wire, never replayed
            assert choices[2] == "auto"  # the fallback, with the reminder
            assert any(
                "staged preview" in (m.get("content") or "")
                for m in bodies[2]["messages"]  # type: ignore[index,union-attr]
            )
            assert any(a.source == "resolve" and a.level == "info" for a in s.alerts)


def test_forced_tool_choice_is_visible_on_the_wire(runtime: Runtime, tmp_path: Path) -> None:
    producer = Producer()
    script = ScriptFile.model_validate(
        {
            "replies": [
                {"tool_calls": [call("batch_rename_preview", label="wire")]},
                {"tool_calls": [call("resolve", action="discard", reason="no")]},
                {"text": "ok"},
            ]
        }
    )
    with MockLlmServer(script) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(workspace=tmp_path, model=model, tools=[producer.tool()]) as s:
            assert s.submit("go", timeout=WAIT).status == "completed"
        second = server.requests()[1].body
        assert isinstance(second, dict)
        assert second["tool_choice"] == {"type": "function", "function": {"name": "resolve"}}
        assert "resolve" in [t["function"]["name"] for t in second["tools"]]


# -- standing handler, isolation --


def test_standing_handler_is_consulted_and_never_consumed(runtime: Runtime, tmp_path: Path) -> None:
    approvals: list[str] = []
    model = ScriptedModel(
        [
            {"tool_calls": [call("resolve", action="apply", reason="plan ok")]},
            {"tool_calls": [call("resolve", action="discard", reason="plan bad")]},
            {"text": "done"},
        ]
    )
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        s.pending_actions.set_standing_handler(
            StandingHandler(
                label="approve plan", apply=lambda reason: approvals.append(reason) or "approved"
            )
        )
        turn = s.submit("go", timeout=WAIT)
        applied, discarded = results(turn.items)
        assert json.loads(applied.output)["result"] == "approved"
        assert discarded.output == "Discarded: approve plan. Reason: plan bad"
        assert approvals == ["plan ok"]
        assert s.pending_actions.standing is not None


def test_two_sessions_never_see_each_others_actions(runtime: Runtime, tmp_path: Path) -> None:
    producer = Producer()
    a_model = ScriptedModel(
        [{"tool_calls": [call("batch_rename_preview", label="mine")]}, {"text": "ok"}]
    )
    b_model = ScriptedModel(
        [{"tool_calls": [call("resolve", action="apply", reason="steal")]}, {"text": "ok"}]
    )
    with (
        runtime.open_session(workspace=tmp_path, model=a_model, tools=[producer.tool()]) as a,
        runtime.open_session(workspace=tmp_path, model=b_model) as b,
    ):
        a.submit("stage", timeout=WAIT)
        turn = b.submit("apply whatever is pending", timeout=WAIT)
        assert results(turn.items)[0].output == NOTHING_PENDING
        assert producer.applied == []
        assert len(a.pending_actions) == 1 and len(b.pending_actions) == 0
        assert isinstance(a.pending_actions, PendingActions)


# -- the built-in producer --


def test_multi_file_preview_applies_atomically(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("old_name = 1\n")
    (tmp_path / "b.py").write_text("print(old_name)\nold_name += 1\n")
    edits = [
        {"path": "a.py", "old_string": "old_name", "new_string": "new_name", "replace_all": True},
        {"path": "b.py", "old_string": "old_name", "new_string": "new_name", "replace_all": True},
    ]
    model = ScriptedModel(
        [
            {"tool_calls": [call("multi_edit", edits=edits, preview=True)]},
            {"tool_calls": [call("resolve", action="apply", reason="rename")]},
            {"text": "renamed"},
        ]
    )
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        turn = s.submit("rename old_name", timeout=WAIT)
        preview, applied = results(turn.items)
        assert "-old_name = 1" in preview.output and "+new_name = 1" in preview.output
        assert "Applied 3 replacements in 2 files" in json.loads(applied.output)["result"]
    assert (tmp_path / "a.py").read_text() == "new_name = 1\n"
    assert (tmp_path / "b.py").read_text() == "print(new_name)\nnew_name += 1\n"


def test_a_stale_preview_writes_nothing(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("x = 2\n")
    edits = [
        {"path": "a.py", "old_string": "x", "new_string": "y"},
        {"path": "b.py", "old_string": "x", "new_string": "y"},
    ]
    replies = [
        {"tool_calls": [call("multi_edit", edits=edits, preview=True)]},
        {"text": "staged"},
        {"tool_calls": [call("resolve", action="apply", reason="go")]},
        {"text": "?"},
    ]
    model = FunctionModel(lambda request: replies.pop(0))
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        s.submit("preview", timeout=WAIT)
        (tmp_path / "b.py").write_text("x = 20\n")  # the user edits one of the files
        turn = s.submit("apply it", timeout=WAIT)
        (failed,) = results(turn.items)
        assert failed.is_error
        assert failed.output.startswith("Apply failed: Preview is stale: b.py changed")
    assert (tmp_path / "a.py").read_text() == "x = 1\n"  # nothing was written
    assert (tmp_path / "b.py").read_text() == "x = 20\n"


def test_edit_with_preview_writes_only_on_apply(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello world\n")
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    call("edit", path="a.txt", old_string="world", new_string="there", preview=True)
                ]
            },
            {"text": "previewed"},
        ]
    )
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        s.submit("preview", timeout=WAIT)
        assert (tmp_path / "a.txt").read_text() == "hello world\n"
        assert len(s.pending_actions) == 1
