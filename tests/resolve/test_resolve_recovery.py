"""resolve under failure: directives survive unanswered requests, applies are all-or-nothing.

Regression tests for audit findings: a forced request that never got an
answer must not lose its directive; a failing ``reject`` must not consume
the action; a multi-file apply that fails midway must leave the workspace
as it was, so a retry is not "stale". Sessions are real; the filesystem
failures are real structural changes on disk (tests run as root, so
permissions would not stop a write).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import FunctionModel, ScriptedModel, llm_error
from fore.actors.resolve.preview import EditSpec, PreviewApplyFailed, apply_staged, stage
from fore.actors.tools import CancelToken, FunctionTool, ToolContext, WorkspaceFs
from fore.actors.worker.hooks import Cancel, Continue, Hooks, LlmRequestContext
from fore.messages.llm import LlmRequest, NamedToolChoice
from fore.messages.session import Submit, TurnResult
from fore.supervision import Runtime
from tests.resolve.test_resolve import LabelArgs, Producer, call, results

WAIT = 20.0
FORCED = NamedToolChoice(name="resolve")


def scripted(replies: list[Any], seen: list[LlmRequest]) -> Callable[[LlmRequest], Any]:
    pending = list(replies)

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        return pending.pop(0)

    return decide


# -- a forced request that got no answer keeps its directive -------------------------


def test_a_hook_cancelling_the_forced_request_keeps_the_directive(
    runtime: Runtime, tmp_path: Path
) -> None:
    producer = Producer()
    seen: list[LlmRequest] = []
    hooks = Hooks()
    vetoed: list[int] = []

    def veto_once(ctx: LlmRequestContext) -> Any:
        if ctx.tool_choice == FORCED and not vetoed:
            vetoed.append(ctx.turn)
            return Cancel("not yet")
        return Continue()

    hooks.pre_llm_request(veto_once)
    model = FunctionModel(
        scripted(
            [
                {"tool_calls": [call("batch_rename_preview", label="x")]},
                {"tool_calls": [call("resolve", action="apply", reason="ok")]},
                {"text": "done"},
            ],
            seen,
        )
    )
    with runtime.open_session(
        workspace=tmp_path, model=model, hooks=hooks, tools=[producer.tool()]
    ) as s:
        first = s.submit("stage it", timeout=WAIT)
        assert first.status == "rejected" and vetoed == [2]
        assert len(seen) == 1  # the forced request was never sent
        second = s.submit("go on", timeout=WAIT)
        assert second.status == "completed"
        assert seen[1].tool_choice == FORCED  # still forced: the directive was put back
        assert producer.applied == [("x", "ok")]
        assert len(s.pending_actions) == 0


def test_a_user_cancel_during_the_forced_request_keeps_the_directive(
    runtime: Runtime, tmp_path: Path
) -> None:
    producer = Producer()
    seen: list[LlmRequest] = []
    streaming, release = threading.Event(), threading.Event()
    replies = [
        {"tool_calls": [call("batch_rename_preview", label="x")]},
        {"text": "too late"},
        {"tool_calls": [call("resolve", action="discard", reason="no")]},
        {"text": "done"},
    ]

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        if len(seen) == 2:
            streaming.set()
            release.wait(WAIT)
        return replies[len(seen) - 1]

    try:
        with runtime.open_session(
            workspace=tmp_path, model=FunctionModel(decide), tools=[producer.tool()]
        ) as s:
            pending = s._worker.ask(Submit(text="stage it"), block=False)
            assert streaming.wait(WAIT)
            s.cancel("user typed")
            first: TurnResult = pending.get(timeout=WAIT)
            assert first.status == "cancelled"
            release.set()
            second = s.submit("go on", timeout=WAIT)
            assert second.status == "completed"
            assert seen[1].tool_choice == FORCED and seen[2].tool_choice == FORCED
            assert results(second.items)[0].output == "Discarded: x. Reason: no"
            assert len(s.pending_actions) == 0
    finally:
        release.set()


def test_an_llm_failure_on_the_forced_request_keeps_the_directive_uncounted(
    runtime: Runtime, tmp_path: Path
) -> None:
    producer = Producer()
    seen: list[LlmRequest] = []
    replies: list[Any] = [
        {"tool_calls": [call("batch_rename_preview", label="x")]},
        llm_error("server", "upstream down", retryable=False),
        {"tool_calls": [call("resolve", action="apply", reason="ok")]},
        {"text": "done"},
    ]

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        answer = replies[len(seen) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    with runtime.open_session(
        workspace=tmp_path, model=FunctionModel(decide), tools=[producer.tool()]
    ) as s:
        first = s.submit("stage it", timeout=WAIT)
        assert first.status == "error" and first.error_kind == "llm"
        (action,) = s.pending_actions.pending()
        assert action.ignored == 0 and action.forcing  # the model never saw it
        second = s.submit("retry", timeout=WAIT)
        assert second.status == "completed"
        assert seen[2].tool_choice == FORCED
        assert producer.applied == [("x", "ok")]
        assert not any(a.source == "resolve" for a in s.alerts)  # nothing was "ignored"


# -- discard -------------------------------------------------------------------------


def test_a_reject_that_raises_keeps_the_action_pending(runtime: Runtime, tmp_path: Path) -> None:
    attempts: list[str] = []

    def run(args: LabelArgs, ctx: ToolContext) -> str:
        def reject(reason: str) -> str:
            attempts.append(reason)
            if len(attempts) == 1:
                raise OSError("lock file busy")
            return f"cleaned up {args.label}"

        ctx.push_pending_action(label=args.label, apply=lambda reason: "applied", reject=reject)
        return "staged"

    tool = FunctionTool("batch_rename_preview", "stages", LabelArgs, run)
    seen: list[LlmRequest] = []
    model = FunctionModel(
        scripted(
            [
                {"tool_calls": [call("batch_rename_preview", label="plan")]},
                {"tool_calls": [call("resolve", action="discard", reason="first")]},
                {"tool_calls": [call("resolve", action="discard", reason="second")]},
                {"text": "done"},
            ],
            seen,
        )
    )
    with runtime.open_session(workspace=tmp_path, model=model, tools=[tool]) as s:
        turn = s.submit("go", timeout=WAIT)
        _, failed, ok = results(turn.items)
        assert failed.is_error
        assert failed.output == (
            "Discard failed: lock file busy. The preview 'plan' is still pending; "
            "call resolve again to apply or discard it."
        )
        assert seen[2].tool_choice == FORCED  # pushed again, like a failed apply
        assert json.loads(ok.output)["result"] == "cleaned up plan"
        assert attempts == ["first", "second"]
        assert len(s.pending_actions) == 0


def test_a_reject_returning_none_gives_the_default_discard_text(
    runtime: Runtime, tmp_path: Path
) -> None:
    cleaned: list[str] = []

    def run(args: LabelArgs, ctx: ToolContext) -> str:
        ctx.push_pending_action(
            label=args.label,
            apply=lambda reason: "applied",
            reject=cleaned.append,  # returns None
        )
        return "staged"

    tool = FunctionTool("batch_rename_preview", "stages", LabelArgs, run)
    model = ScriptedModel(
        [
            {"tool_calls": [call("batch_rename_preview", label="tmp files")]},
            {"tool_calls": [call("resolve", action="discard", reason="not needed")]},
            {"text": "done"},
        ]
    )
    with runtime.open_session(workspace=tmp_path, model=model, tools=[tool]) as s:
        turn = s.submit("go", timeout=WAIT)
        _, discarded = results(turn.items)
        assert not discarded.is_error
        assert discarded.output == "Discarded: tmp files. Reason: not needed"
        assert cleaned == ["not needed"]


# -- the edit preview, end to end ---------------------------------------------------------


def test_an_edit_preview_is_applied_through_resolve(runtime: Runtime, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello world\n")
    seen: list[LlmRequest] = []
    edit = call("edit", path="a.txt", old_string="world", new_string="there", preview=True)
    model = FunctionModel(
        scripted(
            [
                {"tool_calls": [edit]},
                {"tool_calls": [call("resolve", action="apply", reason="as asked")]},
                {"text": "edited"},
            ],
            seen,
        )
    )
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        turn = s.submit("greet there", timeout=WAIT)
        assert turn.status == "completed"
        preview, applied = results(turn.items)
        assert "-hello world" in preview.output and "+hello there" in preview.output
        assert seen[1].tool_choice == FORCED
        payload = json.loads(applied.output)
        assert payload["result"] == "Applied 1 replacements in 1 files: a.txt."
        assert payload["resolve"]["source_tool"] == "edit"
        assert payload["resolve"]["details"] == {"files": ["a.txt"], "replacements": 1}
        assert len(s.pending_actions) == 0
    assert (tmp_path / "a.txt").read_text() == "hello there\n"
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]  # no staging leftovers


# -- multi-file apply: all or nothing --------------------------------------------------------


class ReshapingFs:
    """The real workspace view; just before a chosen write, the tree changes under it.

    This is what a concurrent process (or a user) does: the staged target
    ``b/y.txt`` stops being writable because ``b`` becomes a file. The
    failure that follows is the real filesystem's.
    """

    def __init__(self, root: Path, when: Callable[[str, int], bool]) -> None:
        self.inner = WorkspaceFs(root)
        self.root = root
        self.when = when
        self.writes: list[str] = []
        self.reshaped = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_bytes(self, path: str, data: bytes) -> None:
        self.writes.append(path)
        if not self.reshaped and self.when(path, len(self.writes)):
            self.reshaped = True
            os.rename(self.root / "b", self.root / "b.moved")
            (self.root / "b").write_text("a file where a directory was\n")
        self.inner.write_bytes(path, data)

    def restore(self) -> None:
        (self.root / "b").unlink()
        os.rename(self.root / "b.moved", self.root / "b")


def two_file_preview(root: Path, when: Callable[[str, int], bool]) -> tuple[Any, ToolContext]:
    (root / "a").mkdir()
    (root / "b").mkdir()
    (root / "a" / "x.txt").write_text("old_name = 1\n")
    (root / "b" / "y.txt").write_text("print(old_name)\n")
    fs = ReshapingFs(root, when)
    ctx = ToolContext(
        fs=fs,
        cancel=CancelToken(),
        deadline=time.monotonic() + WAIT,
        session_id="s",
        call_id="c",
    )
    specs = [
        EditSpec(path=p, old_string="old_name", new_string="new_name")
        for p in ("a/x.txt", "b/y.txt")
    ]
    staged, _diff = stage(ctx, specs)
    return staged, ctx


def hidden_leftovers(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if n.startswith(".")]


def test_a_failure_while_staging_changes_no_file(tmp_path: Path) -> None:
    # the tree changes right after the stale check, before the first staged write
    staged, ctx = two_file_preview(tmp_path, lambda path, n: n == 1)
    fs = ctx.fs
    assert isinstance(fs, ReshapingFs)
    with pytest.raises(PreviewApplyFailed, match=r"Could not stage b/y.txt .*no file was changed"):
        apply_staged(ctx, staged)
    assert (tmp_path / "a" / "x.txt").read_text() == "old_name = 1\n"
    assert hidden_leftovers(tmp_path / "a") == []  # the staged temp was removed
    fs.restore()
    # nothing was written, so the retry is not "stale"
    assert apply_staged(ctx, staged).startswith("Applied 2 replacements in 2 files")
    assert (tmp_path / "a" / "x.txt").read_text() == "new_name = 1\n"
    assert (tmp_path / "b" / "y.txt").read_text() == "print(new_name)\n"


def test_a_failure_midway_through_the_replaces_is_rolled_back(tmp_path: Path) -> None:
    # the tree changes once everything is staged, as the first target is replaced
    staged, ctx = two_file_preview(tmp_path, lambda path, n: path == "a/x.txt")
    fs = ctx.fs
    assert isinstance(fs, ReshapingFs)
    with pytest.raises(PreviewApplyFailed, match=r"Writing b/y.txt failed .*restored"):
        apply_staged(ctx, staged)
    assert "a/x.txt" in fs.writes  # the first target really was replaced, then restored
    assert (tmp_path / "a" / "x.txt").read_text() == "old_name = 1\n"
    assert hidden_leftovers(tmp_path / "a") == []
    fs.restore()
    assert (tmp_path / "b" / "y.txt").read_text() == "print(old_name)\n"
    for name in hidden_leftovers(tmp_path / "b"):  # staged there before b moved away
        (tmp_path / "b" / name).unlink()
    assert apply_staged(ctx, staged).startswith("Applied 2 replacements in 2 files")
    assert (tmp_path / "a" / "x.txt").read_text() == "new_name = 1\n"
    assert (tmp_path / "b" / "y.txt").read_text() == "print(new_name)\n"
