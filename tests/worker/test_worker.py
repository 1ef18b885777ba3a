"""The worker: the agent loop, hooks, interceptor, pause/resume, cancel.

Every test runs a real worker on a real Runtime with the scripted model, a
FunctionModel or the mock server; tools touch real temp directories.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.core import ActorCrashed
from fore.actors.llm import FunctionModel, OpenAICompatible, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker.hooks import (
    Abort,
    Cancel,
    Continue,
    ContinueWithMessages,
    Finish,
    Hooks,
    LlmRequestContext,
    Pause,
    Paused,
    PostToolCallContext,
    PromptContext,
    Skip,
    ToolCallContext,
    TurnEndContext,
)
from fore.actors.worker.interceptor import ContinueWith, Interceptor
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.testing import RecordingHook, ScriptedHook
from fore.messages.conversation import (
    AssistantMessage,
    SystemMessage,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import LlmRequest
from fore.messages.session import (
    Submit,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnResult,
)
from fore.supervision import Runtime

WAIT = 20.0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("print('hello')\n")
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    return tmp_path


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def reply(text: str = "", *calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls), **extra}


def results(turn: TurnResult) -> list[ToolResult]:
    return [i for i in turn.items if isinstance(i, ToolResult)]


class Counter:
    """A tool that counts how often it really ran."""

    def __init__(self) -> None:
        self.runs = 0
        self.args: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def tool(self, name: str = "count") -> FunctionTool[Any]:
        class Args(BaseModel):
            label: str = ""
            value: int = 0

        def run(args: Args, ctx: ToolContext) -> str:
            with self.lock:
                self.runs += 1
                self.args.append(args.model_dump())
            return f"counted {args.label}"

        return FunctionTool(name, "counts", Args, run)


# -- the loop --


def test_a_turn_with_parallel_tools_then_an_answer(runtime: Runtime, workspace: Path) -> None:
    model = ScriptedModel(
        [
            reply(
                "Looking.", call("read_file", path="app.py"), call("shell", command="python app.py")
            ),
            reply("It prints hello."),
        ]
    )
    with runtime.open_session(workspace=workspace, model=model) as s:
        turn = s.submit("what does app.py do?", timeout=WAIT)
        assert turn.status == "completed"
        kinds = [type(i).__name__ for i in turn.items]
        assert kinds == [
            "UserMessage",
            "AssistantMessage",
            "ToolResult",
            "ToolResult",
            "AssistantMessage",
        ]
        read, shell = results(turn)
        assert "print('hello')" in read.output
        assert "hello" in shell.output and "exit code: 0" in shell.output
        assert s.history == turn.items
        assert pairing_problems(s.history) == []
        assert turn.turns == 2


def test_three_slow_tools_overlap(runtime: Runtime, workspace: Path) -> None:
    barrier = threading.Barrier(3, timeout=WAIT)

    class Args(BaseModel):
        n: int

    def meet(args: Args, ctx: ToolContext) -> str:
        barrier.wait()  # only returns if all three run at the same time
        return f"met {args.n}"

    model = ScriptedModel([reply("", *(call("meet", n=i) for i in range(3))), reply("done")])
    tool = FunctionTool("meet", "waits for its siblings", Args, meet)
    with runtime.open_session(workspace=workspace, model=model, tools=[tool]) as s:
        turn = s.submit("go", timeout=WAIT)
        assert [r.output for r in results(turn)] == ["met 0", "met 1", "met 2"]
        events = [e for e in s.drain_events() if isinstance(e, ToolStarted | ToolFinished)]
        first_finish = next(i for i, e in enumerate(events) if isinstance(e, ToolFinished))
        assert sum(isinstance(e, ToolStarted) for e in events[:first_finish]) == 3


def test_system_prompt_and_request_content_reach_the_model(
    runtime: Runtime, workspace: Path
) -> None:
    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        return "ok"

    with runtime.open_session(
        workspace=workspace, model=FunctionModel(decide), system_prompt="You are terse."
    ) as s:
        s.submit("hi", timeout=WAIT)
    (request,) = seen
    assert request.messages[0] == SystemMessage(text="You are terse.")
    assert request.messages[1] == UserMessage(text="hi", segments=request.messages[1].segments)
    assert {t.name for t in request.tools} >= {"read_file", "edit", "shell", "grep"}


def test_submit_while_running_is_refused(runtime: Runtime, workspace: Path) -> None:
    release = threading.Event()
    model = FunctionModel(lambda r: release.wait(WAIT) and "late")
    with runtime.open_session(workspace=workspace, model=model) as s:
        first = s._worker.ask(Submit(text="a"), block=False)
        with pytest.raises(Exception, match="busy"):
            s.submit("b", timeout=WAIT)
        release.set()
        assert first.get(timeout=WAIT).status == "completed"


# -- the seed's hook examples --


def test_input_validator_cancels_an_empty_prompt(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()

    def input_validator(ctx: PromptContext) -> Any:
        return Cancel("Empty input") if not ctx.text.strip() else Continue()

    hooks.on_prompt_submit(input_validator)
    model = ScriptedModel([reply("hello")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("   ", timeout=WAIT)
        assert turn.status == "rejected" and turn.error == "Empty input"
        assert turn.items == () and s.history == ()
        assert s.submit("real question", timeout=WAIT).status == "completed"


def test_timestamp_hook_edits_the_request_copy_not_history(
    runtime: Runtime, workspace: Path
) -> None:
    seen: list[LlmRequest] = []

    def decide(request: LlmRequest) -> Any:
        seen.append(request)
        return "ok"

    hooks = Hooks()

    def timestamp_hook(ctx: LlmRequestContext) -> Any:
        ctx.messages.insert(0, UserMessage(text="[2026-11-22T00:00:00Z]"))
        return Continue()

    hooks.pre_llm_request(timestamp_hook)
    with runtime.open_session(workspace=workspace, model=FunctionModel(decide), hooks=hooks) as s:
        s.submit("hi", timeout=WAIT)
        assert seen[0].messages[0] == UserMessage(text="[2026-11-22T00:00:00Z]")
        assert all(getattr(i, "text", "") != "[2026-11-22T00:00:00Z]" for i in s.history)


def test_tool_blocker_skips_a_call_and_later_hooks(runtime: Runtime, workspace: Path) -> None:
    counter = Counter()
    hooks = Hooks()
    blocked = {"shell"}
    later = RecordingHook(Continue(), name="later")

    def tool_blocker(ctx: ToolCallContext) -> Any:
        return Skip("shell is blocked") if ctx.name in blocked else Continue()

    hooks.pre_tool_call(tool_blocker)
    hooks.pre_tool_call(later)
    model = ScriptedModel(
        [reply("", call("shell", command="rm -rf x"), call("count", label="a")), reply("ok")]
    )
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[counter.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        shell, count = results(turn)
        assert shell.is_error and shell.output == "Skipped: shell is blocked"
        assert count.output == "counted a" and counter.runs == 1
        assert [c.name for c in later.calls] == [
            "count"
        ]  # the skipped call's later hooks did not run
        assert pairing_problems(s.history) == []


def test_result_formatter_and_argument_rewrite(runtime: Runtime, workspace: Path) -> None:
    counter = Counter()
    hooks = Hooks()

    def sanitize(ctx: ToolCallContext) -> Any:
        ctx.arguments["label"] = ctx.arguments["label"].upper()
        ctx.arguments["value"] = 42
        return Continue()

    def result_formatter(ctx: PostToolCallContext) -> Any:
        if not ctx.result.is_error:
            ctx.result.output = f"[OK] {ctx.result.output}"
        return Continue()

    hooks.pre_tool_call(sanitize)
    hooks.post_tool_call(result_formatter)
    model = ScriptedModel([reply("", call("count", label="abc")), reply("done")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[counter.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert counter.args == [{"label": "ABC", "value": 42}]
        assert results(turn)[0].output == "[OK] counted ABC"
        # the model's own call stays as it was asked
        assistant = next(i for i in turn.items if isinstance(i, AssistantMessage))
        assert assistant.tool_calls[0].arguments == {"label": "abc"}


def test_json_validator_retries_until_valid(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()

    def json_validator(ctx: TurnEndContext) -> Any:
        try:
            json.loads(ctx.final_text)
        except ValueError:
            return ContinueWithMessages(
                [UserMessage(text="Invalid JSON. Please fix and try again.")]
            )
        return Finish()

    hooks.on_turn_end(json_validator)
    model = ScriptedModel([reply("not json"), reply('{"ok": true}')])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("answer in JSON", timeout=WAIT)
        assert turn.status == "completed" and turn.turns == 2
        texts = [getattr(i, "text", "") for i in turn.items]
        assert texts == [
            "answer in JSON",
            "not json",
            "Invalid JSON. Please fix and try again.",
            '{"ok": true}',
        ]


def test_counting_hook_sees_every_call(runtime: Runtime, workspace: Path) -> None:
    counted = []
    lock = threading.Lock()
    hooks = Hooks()

    def counting_hook(ctx: ToolCallContext) -> None:
        with lock:
            counted.append(ctx.name)

    hooks.pre_tool_call(counting_hook)
    model = ScriptedModel(
        [
            reply("", call("list_directory"), call("glob", pattern="*.py")),
            reply("", call("grep", pattern="alpha")),
            reply("x"),
        ]
    )
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        s.submit("go", timeout=WAIT)
    assert counted == ["list_directory", "glob", "grep"]


# -- order, priority, conditions --


def test_hooks_run_by_priority_then_registration_order(runtime: Runtime, workspace: Path) -> None:
    order: list[str] = []
    hooks = Hooks()

    def named(name: str) -> Any:
        def hook(ctx: Any) -> None:
            order.append(name)

        hook.__name__ = name
        return hook

    for event in ("on_prompt_submit", "pre_llm_request", "on_turn_end"):
        hooks.add(event, named(f"{event}:A"))
        hooks.add(event, named(f"{event}:B"))
        hooks.add(event, named(f"{event}:urgent"), priority=10)
        hooks.add(event, named(f"{event}:C"))
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("hi")]), hooks=hooks
    ) as s:
        s.submit("go", timeout=WAIT)
    expected = []
    for event in ("on_prompt_submit", "pre_llm_request", "on_turn_end"):
        expected += [f"{event}:urgent", f"{event}:A", f"{event}:B", f"{event}:C"]
    assert order == expected


def test_tool_pattern_and_condition_select_hooks(runtime: Runtime, workspace: Path) -> None:
    only_shell = RecordingHook(Continue(), name="only_shell")
    only_big = RecordingHook(Continue(), name="only_big")
    hooks = Hooks()
    hooks.pre_tool_call(only_shell, tools="sh*")
    hooks.pre_tool_call(only_big, when=lambda ctx: ctx.arguments.get("limit", 0) > 10)
    model = ScriptedModel(
        [
            reply(
                "",
                call("shell", command="true"),
                call("read_file", path="app.py", limit=5),
                call("read_file", path="app.py", limit=50),
            ),
            reply("ok"),
        ]
    )
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        s.submit("go", timeout=WAIT)
    assert [c.name for c in only_shell.calls] == ["shell"]
    assert [c.arguments["limit"] for c in only_big.calls] == [50]


# -- abort and errors --


@pytest.mark.parametrize("event", ["pre_tool_call", "post_tool_call"])
def test_abort_ends_the_run_with_paired_history_and_one_on_abort(
    runtime: Runtime, workspace: Path, event: str
) -> None:
    counter = Counter()
    aborts = RecordingHook(name="aborts")
    hooks = Hooks()
    hooks.add(event, lambda ctx: Abort("policy says no") if ctx.name == "count" else Continue())
    hooks.on_abort(aborts)
    model = ScriptedModel(
        [
            reply("", call("list_directory"), call("count", label="x"), call("glob", pattern="*")),
            reply("never"),
        ]
    )
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[counter.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "aborted" and turn.error == "policy says no"
        assert pairing_problems(s.history) == []
        assert aborts.count == 1 and aborts.calls[0].status == "aborted"
        outputs = [r.output for r in results(turn)]
        if event == "pre_tool_call":  # nothing ran
            assert counter.runs == 0
            assert all(o.startswith("Aborted: policy says no") for o in outputs)
        else:  # everything ran; results are kept
            assert counter.runs == 1
            assert "counted x" in outputs
        assert not any(isinstance(i, AssistantMessage) and i.text == "never" for i in s.history)


def test_a_result_the_event_does_not_allow_is_a_typed_error(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def wrong(ctx: LlmRequestContext) -> Any:
        return Skip()

    hooks.pre_llm_request(wrong)
    aborts = RecordingHook()
    hooks.on_abort(aborts)
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("x")]), hooks=hooks
    ) as s:
        turn = s.submit("go", timeout=WAIT)
    assert turn.status == "error"
    assert "pre_llm_request hook 'wrong'" in (turn.error or "")
    assert aborts.count == 1


def test_a_raising_hook_is_an_error_naming_event_and_hook(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def explode(ctx: ToolCallContext) -> Any:
        raise ValueError("bad policy file")

    hooks.pre_tool_call(explode)
    aborts = RecordingHook()
    hooks.on_abort(aborts)
    model = ScriptedModel([reply("", call("list_directory")), reply("never")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "error"
        assert "pre_tool_call hook 'explode'" in (turn.error or "") and "bad policy file" in (
            turn.error or ""
        )
        assert pairing_problems(s.history) == []
        assert aborts.count == 1
        assert any("explode" in a.text for a in s.alerts)


def test_a_hook_exceeding_its_timeout_is_an_error_not_a_hang(
    runtime: Runtime, workspace: Path
) -> None:
    release = threading.Event()
    hooks = Hooks()

    def slow(ctx: PromptContext) -> Any:
        release.wait(WAIT)
        return Continue()

    hooks.on_prompt_submit(slow, timeout=0.2)
    try:
        with runtime.open_session(
            workspace=workspace, model=ScriptedModel([reply("x")]), hooks=hooks
        ) as s:
            turn = s.submit("go", timeout=WAIT)
            assert turn.status == "error"
            assert "on_prompt_submit hook 'slow'" in (turn.error or "")
            assert "0.2s" in (turn.error or "")
    finally:
        release.set()


def test_continue_with_messages_is_bounded_by_max_turns(runtime: Runtime, workspace: Path) -> None:
    calls: list[int] = []
    hooks = Hooks()
    hooks.on_turn_end(lambda ctx: ContinueWithMessages([UserMessage(text="again")]))
    aborts = RecordingHook()
    hooks.on_abort(aborts)
    model = FunctionModel(lambda r: calls.append(1) or "still not done")
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks, max_turns=4) as s:
        turn = s.submit("loop forever", timeout=WAIT)
        assert turn.status == "max_turns"
        assert len(calls) == 4 and turn.turns == 4
        assert aborts.count == 1
        assert s.submit("fresh budget", max_turns=2, timeout=WAIT).turns == 2


# -- pause and resume --


def test_pause_on_a_tool_call_and_resume_without_rerunning_finished_calls(
    runtime: Runtime, workspace: Path
) -> None:
    counter = Counter()
    approvals = ScriptedHook([Pause("needs approval")], then=Continue(), name="approve")
    after = RecordingHook(Continue(), name="after")
    hooks = Hooks()
    hooks.pre_tool_call(approvals, tools="danger")
    hooks.pre_tool_call(after, tools="danger")
    danger = Counter()
    model = ScriptedModel(
        [
            reply("", call("count", label="first")),
            reply("", call("count", label="second"), call("danger", label="boom")),
            reply("all done"),
        ]
    )
    with runtime.open_session(
        workspace=workspace,
        model=model,
        hooks=hooks,
        tools=[counter.tool(), danger.tool("danger")],
        max_turns=3,
    ) as s:
        paused = s.submit("go", timeout=WAIT)
        assert paused.status == "paused" and paused.error == "needs approval"
        assert counter.runs == 1 and danger.runs == 0  # nothing of the paused turn ran
        assert s.run_state().status == "paused"
        assert after.count == 0
        done = s.resume(timeout=WAIT)
        assert done.status == "completed"
        assert counter.runs == 2 and danger.runs == 1  # the first turn's call never ran again
        assert (
            approvals.seen and len(approvals.seen) == 1
        )  # resume continued *after* the pausing hook
        assert after.count == 1
        assert done.turns == 3  # the budget is kept across pause/resume
        assert pairing_problems(s.history) == []


def test_turn_end_pause_and_resume_with_messages(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()
    hooks.on_turn_end(ScriptedHook([Paused("lint running")], then=Finish()))
    model = ScriptedModel([reply("first answer"), reply("second answer")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        assert s.submit("go", timeout=WAIT).status == "paused"
        done = s.resume([UserMessage(text="lint: 2 warnings")], timeout=WAIT)
        assert done.status == "completed"
        assert [getattr(i, "text", "") for i in s.history][-2:] == [
            "lint: 2 warnings",
            "second answer",
        ]


def test_a_new_submit_while_paused_interrupts_open_calls(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()
    hooks.pre_tool_call(lambda ctx: Pause("wait") if ctx.name == "shell" else Continue())
    model = ScriptedModel(
        [reply("", call("list_directory"), call("shell", command="ls")), reply("fine")]
    )
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        assert s.submit("go", timeout=WAIT).status == "paused"
        after = s.submit("never mind", timeout=WAIT)
        assert after.status == "completed"
        history = s.history
        assert pairing_problems(history) == []
        interrupted = [i for i in history if isinstance(i, ToolResult)]
        assert [r.output for r in interrupted] == ["Interrupted by user", "Interrupted by user"]


def test_resume_without_a_paused_run_is_an_error(runtime: Runtime, workspace: Path) -> None:
    with (
        runtime.open_session(workspace=workspace, model=ScriptedModel([])) as s,
        pytest.raises(RuntimeError, match="no paused run"),
    ):
        s.resume(timeout=WAIT)


# -- the interceptor --


class Attach(Interceptor):
    def __init__(self) -> None:
        self.cancelled = 0

    def on_prompt_submit(self, message: UserMessage) -> Any:
        return ContinueWith(
            [SystemMessage(text="[File: a]\nA"), SystemMessage(text="[File: b]\nB")]
        )

    def on_submit_cancelled(self) -> None:
        self.cancelled += 1


def test_interceptor_items_land_right_after_the_user_message(
    runtime: Runtime, workspace: Path
) -> None:
    seen: list[LlmRequest] = []
    model = FunctionModel(lambda r: seen.append(r) or "ok")
    with runtime.open_session(workspace=workspace, model=model, interceptor=Attach()) as s:
        turn = s.submit("look", timeout=WAIT)
        assert [type(i).__name__ for i in turn.items] == [
            "UserMessage",
            "SystemMessage",
            "SystemMessage",
            "AssistantMessage",
        ]
        assert [i.text for i in turn.items[1:3]] == ["[File: a]\nA", "[File: b]\nB"]
        assert [getattr(m, "text", "") for m in seen[0].messages] == [
            "look",
            "[File: a]\nA",
            "[File: b]\nB",
        ]


def test_a_hook_cancel_drops_the_interceptors_items(runtime: Runtime, workspace: Path) -> None:
    interceptor = Attach()
    hooks = Hooks()
    hooks.on_prompt_submit(lambda ctx: Cancel("no"))
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([]), interceptor=interceptor, hooks=hooks
    ) as s:
        assert s.submit("look", timeout=WAIT).status == "rejected"
        assert s.history == () and interceptor.cancelled == 1


# -- cancel --


def test_cancel_mid_stream(runtime: Runtime, workspace: Path) -> None:
    model = ScriptedModel([reply(" ".join(["word"] * 100), tokens_per_s=20)])
    aborts = RecordingHook()
    hooks = Hooks()
    hooks.on_abort(aborts)
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        pending = s._worker.ask(Submit(text="talk"), block=False)
        for event in s.events(timeout=WAIT):
            if isinstance(event, TextDelta):
                break
        s.cancel("user typed")
        turn = pending.get(timeout=WAIT)
        assert turn.status == "cancelled" and turn.error == "user typed"
        assert [type(i).__name__ for i in s.history] == ["UserMessage"]  # no partial answer
        assert aborts.count == 1


def test_cancel_mid_tool_kills_it_and_keeps_history_paired(
    runtime: Runtime, workspace: Path
) -> None:
    model = ScriptedModel(
        [
            reply("", call("shell", command="echo $$ > pid; sleep 60"), call("list_directory")),
            reply("never"),
        ]
    )
    aborts = RecordingHook()
    hooks = Hooks()
    hooks.on_abort(aborts)
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        pending = s._worker.ask(Submit(text="go"), block=False)
        pidfile = workspace / "pid"
        deadline = time.monotonic() + WAIT
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        pgid = int(pidfile.read_text())
        s.cancel()
        turn = pending.get(timeout=WAIT)
        assert turn.status == "cancelled"
        assert pairing_problems(s.history) == []
        shell_result = results(turn)[0]
        assert shell_result.is_error and shell_result.output.startswith("Cancelled")
        deadline = time.monotonic() + WAIT
        while True:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, "the cancelled command's process group survived"
            time.sleep(0.01)
        assert aborts.count == 1


# -- failures --


class Crashing(Interceptor):
    """Crashes the worker actor itself (a bug in trusted code) on a magic prompt."""

    def on_prompt_submit(self, message: UserMessage) -> Any:
        if message.text == "crash":
            raise RuntimeError("interceptor bug")
        return Continue()


def test_a_crashing_worker_restarts_keeping_history(runtime: Runtime, workspace: Path) -> None:
    model = ScriptedModel([reply("first"), reply("after restart")])
    with runtime.open_session(workspace=workspace, model=model, interceptor=Crashing()) as s:
        assert s.submit("hello", timeout=WAIT).status == "completed"
        with pytest.raises((RuntimeError, ActorCrashed)):
            s.submit("crash", timeout=WAIT)
        turn = s.submit("again", timeout=WAIT)
        assert turn.status == "completed"
        texts = [getattr(i, "text", "") for i in s.history]
        assert texts == ["hello", "first", "again", "after restart"]


def test_a_run_the_worker_crashes_under_ends_with_one_turn_finished(
    runtime: Runtime, workspace: Path
) -> None:
    """A waiter that reads events learns of the crashed run's end at once: one
    ``TurnFinished`` (status ``error``, kind ``worker``), before the submit is answered
    with the failure; the restarted worker reports nothing more for it."""
    model = ScriptedModel([reply("after restart")])
    with runtime.open_session(workspace=workspace, model=model, interceptor=Crashing()) as s:
        with pytest.raises((RuntimeError, ActorCrashed)):
            s.submit("crash", timeout=WAIT)
        assert s.submit("again", timeout=WAIT).status == "completed"
        ends = [e.result for e in s.drain_events() if isinstance(e, TurnFinished)]
        assert [(r.status, r.error_kind) for r in ends] == [
            ("error", "worker"),
            ("completed", None),
        ]
        assert "interceptor bug" in (ends[0].error or "")
        assert ends[0].run_id != ends[1].run_id


def test_an_llm_failure_ends_the_run_with_an_error_and_alert(
    runtime: Runtime, workspace: Path
) -> None:
    from fore.actors.llm import llm_error

    def fail(request: LlmRequest) -> Any:
        raise llm_error("auth", "bad key", retryable=False)

    with runtime.open_session(workspace=workspace, model=FunctionModel(fail)) as s:
        turn = s.submit("hi", timeout=WAIT)
        assert turn.status == "error" and "auth" in (turn.error or "")
        assert any(a.source == "llm" for a in s.alerts)


# -- over the mock server --


def test_a_session_over_real_http(runtime: Runtime, workspace: Path) -> None:
    script = ScriptFile.model_validate(
        {
            "replies": [
                reply("Reading.", call("read_file", path="notes.txt")),
                {"when": {"contains": "beta"}, "text": "It mentions beta."},
            ]
        }
    )
    with MockLlmServer(script) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(workspace=workspace, model=model) as s:
            turn = s.submit("what is in notes.txt?", timeout=WAIT)
            assert turn.status == "completed"
            assert turn.items[-1].text == "It mentions beta."
            sent = server.requests()
            assert len(sent) == 2
            body = sent[1].body
            assert isinstance(body, dict)
            assert body["messages"][-1]["role"] == "tool"
            assert sent[0].session == s.id and sent[0].purpose == "main"
