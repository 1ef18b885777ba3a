"""The worker's promises under hostile hooks: pairing, masking, on_abort once, typed errors.

Each test is a regression test for an audit finding; every one runs a real
worker on a real Runtime with the scripted model (or a FunctionModel), and
synchronises on events, never on wall-clock time.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.llm import FunctionModel, ScriptedModel, llm_error
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker.hooks import (
    Abort,
    AbortContext,
    Cancel,
    Continue,
    Hooks,
    LlmRequestContext,
    Pause,
    PostToolCallContext,
    PromptContext,
    ToolCallContext,
)
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.testing import RecordingHook
from fore.messages.conversation import AssistantMessage, ToolResult, UserMessage
from fore.messages.llm import LlmRequest
from fore.messages.session import (
    HookFailure,
    RunStarted,
    Submit,
    ToolStarted,
    TurnFinished,
    TurnResult,
)
from fore.supervision import Runtime

WAIT = 20.0


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def results(items: Any) -> list[ToolResult]:
    return [i for i in items if isinstance(i, ToolResult)]


class Args(BaseModel):
    n: int = 0


class Secrets:
    """A tool whose output holds a secret, recording the call ids it really ran with."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def tool(self) -> FunctionTool[Args]:
        def run(args: Args, ctx: ToolContext) -> str:
            with self.lock:
                self.ran.append((ctx.call_id, args.n))
            return f"SECRET={args.n}"

        return FunctionTool("env", "prints a secret", Args, run)


class Signal:
    """A hook that says it was entered, then waits until released (cleanup always releases)."""

    def __init__(self, name: str = "blocker") -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[Any] = []
        self.__name__ = name

    def __call__(self, ctx: Any) -> Any:
        self.calls.append(ctx)
        self.entered.set()
        self.release.wait(WAIT)
        return None


class Notify:
    """An on_abort hook that records its inputs and sets an event."""

    def __init__(self, name: str = "notify") -> None:
        self.calls: list[AbortContext] = []
        self.done = threading.Event()
        self.__name__ = name

    def __call__(self, ctx: AbortContext) -> None:
        self.calls.append(ctx)
        self.done.set()


# -- 1. the call id and tool name are not the hooks' to change -----------------------


@pytest.mark.parametrize(("field", "value"), [("call_id", "forged"), ("name", "shell")])
def test_a_hook_cannot_rename_the_call_so_pairing_holds(
    runtime: Runtime, workspace: Path, field: str, value: str
) -> None:
    secrets = Secrets()
    hooks = Hooks()

    def forge(ctx: ToolCallContext) -> Any:
        setattr(ctx, field, value)
        return Continue()

    hooks.pre_tool_call(forge)
    model = ScriptedModel([reply("", call("env", n=1)), reply("never")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[secrets.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "error"
        assert turn.hook_failure is not None
        assert (turn.hook_failure.event, turn.hook_failure.hook) == ("pre_tool_call", "forge")
        assert "read-only" in turn.hook_failure.message
        assert secrets.ran == []  # nothing ran under a forged identity
        assert pairing_problems(s.history) == []
        assert all(r.call_id != "forged" for r in results(s.history))


def test_rewritten_arguments_run_under_the_models_own_call_id(
    runtime: Runtime, workspace: Path
) -> None:
    secrets = Secrets()
    hooks = Hooks()

    def replace_all(ctx: ToolCallContext) -> Any:
        ctx.arguments = {"n": ctx.arguments["n"] * 10}  # replacing the dict is allowed too
        return Continue()

    hooks.pre_tool_call(replace_all)
    model = ScriptedModel([reply("", call("env", n=4)), reply("done")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[secrets.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed"
        (asked,) = next(i for i in turn.items if isinstance(i, AssistantMessage)).tool_calls
        assert secrets.ran == [(asked.id, 40)]
        (result,) = results(turn.items)
        assert result.call_id == asked.id and result.output == "SECRET=40"
        assert pairing_problems(s.history) == []


def test_arguments_a_tool_cannot_take_are_a_typed_hook_error_not_a_crash(
    runtime: Runtime, workspace: Path
) -> None:
    secrets = Secrets()
    hooks = Hooks()

    def poison(ctx: ToolCallContext) -> Any:
        ctx.arguments["n"] = object()  # not JSON
        return Continue()

    spec = hooks.pre_tool_call(poison)
    model = ScriptedModel([reply("", call("env", n=1)), reply("after")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[secrets.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "error" and turn.error_kind == "hook"
        assert turn.hook_failure is not None
        assert turn.hook_failure.kind == "invalid_arguments"
        assert turn.hook_failure.hook == "poison"
        assert secrets.ran == [] and pairing_problems(s.history) == []
        hooks.remove(spec)
        assert s.submit("the worker is alive", timeout=WAIT).status == "completed"


# -- 2. results that did not pass their post hooks never enter history raw ------------


def mask(ctx: PostToolCallContext) -> Any:
    ctx.result.output = ctx.result.output.replace("SECRET", "***")
    return Continue()


def test_a_post_hook_abort_withholds_the_later_raw_results(
    runtime: Runtime, workspace: Path
) -> None:
    secrets = Secrets()
    hooks = Hooks()
    aborts = RecordingHook(name="aborts")

    def mask_then_abort(ctx: PostToolCallContext) -> Any:
        mask(ctx)
        return Abort("leak found") if ctx.meta.index == 0 else Continue()

    hooks.post_tool_call(mask_then_abort)
    hooks.on_abort(aborts)
    model = ScriptedModel([reply("", call("env", n=1), call("env", n=2)), reply("never")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[secrets.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "aborted" and turn.error == "leak found"
        assert sorted(n for _, n in secrets.ran) == [1, 2]  # both really ran
        first, second = results(turn.items)
        assert first.output == "***=1"  # the aborting hook saw and masked it
        assert second.is_error and second.output.startswith("Aborted: leak found")
        assert "withheld" in second.output
        assert not any("SECRET" in r.output for r in results(s.history))
        assert pairing_problems(s.history) == []
        assert aborts.count == 1


def test_a_failing_post_hook_withholds_the_result_it_failed_on(
    runtime: Runtime, workspace: Path
) -> None:
    secrets = Secrets()
    hooks = Hooks()
    hooks.post_tool_call(mask)

    def audit(ctx: PostToolCallContext) -> Any:
        raise RuntimeError("audit log unreachable")

    hooks.post_tool_call(audit)
    model = ScriptedModel([reply("", call("env", n=1), call("env", n=2)), reply("never")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[secrets.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "error"
        assert turn.hook_failure == HookFailure(
            event="post_tool_call",
            hook="audit",
            kind="raised",
            message="raised RuntimeError: audit log unreachable",
        )
        outputs = [r.output for r in results(turn.items)]
        assert all(o.startswith("Aborted: post_tool_call hook 'audit'") for o in outputs)
        assert not any("SECRET" in o or "***" in o for o in outputs)
        assert pairing_problems(s.history) == []


def test_a_cancel_during_post_hooks_withholds_unprocessed_results(
    runtime: Runtime, workspace: Path
) -> None:
    secrets = Secrets()
    hooks = Hooks()
    blocker = Signal("slow_mask")
    hooks.post_tool_call(blocker)
    hooks.post_tool_call(mask)
    aborts = RecordingHook(name="aborts")
    hooks.on_abort(aborts)
    model = ScriptedModel([reply("", call("env", n=1), call("env", n=2)), reply("never")])
    try:
        with runtime.open_session(
            workspace=workspace, model=model, hooks=hooks, tools=[secrets.tool()]
        ) as s:
            pending = s._worker.ask(Submit(text="go"), block=False)
            assert blocker.entered.wait(WAIT)  # the first result is in its post hooks
            s.cancel("user stopped it")
            turn: TurnResult = pending.get(timeout=WAIT)
            assert turn.status == "cancelled"
            assert len(secrets.ran) == 2
            outputs = [r.output for r in results(turn.items)]
            assert len(outputs) == 2
            assert all(o.startswith("Cancelled: user stopped it") for o in outputs)
            assert not any("SECRET" in o for o in outputs)
            assert pairing_problems(s.history) == []
            assert aborts.count == 1
    finally:
        blocker.release.set()


# -- 4. a hook's condition is user code: off the dispatcher, under the deadline -----------


def test_a_condition_runs_on_the_hook_lane(runtime: Runtime, workspace: Path) -> None:
    threads: list[str] = []
    hooks = Hooks()
    recorded = RecordingHook(Continue(), name="recorded")

    def when(ctx: ToolCallContext) -> bool:
        threads.append(threading.current_thread().name)
        return bool(ctx.arguments.get("n"))

    hooks.pre_tool_call(recorded, when=when)
    model = ScriptedModel([reply("", call("env", n=0), call("env", n=3)), reply("ok")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[Secrets().tool()]
    ) as s:
        assert s.submit("go", timeout=WAIT).status == "completed"
    assert [c.arguments["n"] for c in recorded.calls] == [3]
    assert len(threads) == 2
    assert all("-hooks" in name and "dispatch" not in name for name in threads)


def test_a_hanging_condition_is_a_hook_timeout(runtime: Runtime, workspace: Path) -> None:
    release = threading.Event()
    hooks = Hooks()

    def stuck(ctx: ToolCallContext) -> bool:
        release.wait(WAIT)
        return True

    def guarded(ctx: ToolCallContext) -> Any:
        return Continue()

    hooks.pre_tool_call(guarded, when=stuck, timeout=0.2)
    aborts = RecordingHook(name="aborts")
    hooks.on_abort(aborts)
    model = ScriptedModel([reply("", call("env", n=1)), reply("never")])
    try:
        with runtime.open_session(
            workspace=workspace, model=model, hooks=hooks, tools=[Secrets().tool()]
        ) as s:
            turn = s.submit("go", timeout=WAIT)
            assert turn.status == "error" and turn.error_kind == "hook"
            assert turn.hook_failure is not None
            assert turn.hook_failure.kind == "timeout"
            assert (turn.hook_failure.event, turn.hook_failure.hook) == ("pre_tool_call", "guarded")
            assert pairing_problems(s.history) == []
            assert aborts.count == 1
    finally:
        release.set()


def test_a_raising_condition_is_a_typed_hook_error(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()

    def broken(ctx: LlmRequestContext) -> bool:
        raise KeyError("missing setting")

    hooks.pre_llm_request(lambda ctx: Continue(), when=broken, name="needs_setting")
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("x")]), hooks=hooks
    ) as s:
        turn = s.submit("go", timeout=WAIT)
    assert turn.status == "error"
    assert turn.hook_failure is not None
    assert turn.hook_failure.kind == "condition"
    assert (turn.hook_failure.event, turn.hook_failure.hook) == ("pre_llm_request", "needs_setting")
    assert "missing setting" in turn.hook_failure.message


# -- 5. on_abort exactly once for every run that started and ended early -----------------


def test_an_interrupted_paused_run_gets_on_abort_once_before_the_next_run(
    runtime: Runtime, workspace: Path
) -> None:
    aborts = Notify()
    hooks = Hooks()
    hooks.pre_tool_call(lambda ctx: Pause("approve?"), tools="env")
    hooks.on_abort(aborts)
    model = ScriptedModel([reply("", call("env", n=1)), reply("fine")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[Secrets().tool()]
    ) as s:
        paused = s.submit("go", timeout=WAIT)
        assert paused.status == "paused"
        s.drain_events()
        after = s.submit("never mind", timeout=WAIT)
        assert after.status == "completed"
        assert len(aborts.calls) == 1
        assert aborts.calls[0].status == "interrupted"
        events = s.drain_events()
        ends = [e for e in events if isinstance(e, TurnFinished | RunStarted)]
        # the interrupted run ends (after its on_abort) before the new one starts
        assert isinstance(ends[0], TurnFinished) and ends[0].result.status == "interrupted"
        assert isinstance(ends[1], RunStarted) and ends[1].run_id == after.run_id
        assert [r.output for r in results(s.history)] == ["Interrupted by user"]
        assert pairing_problems(s.history) == []


def test_closing_a_session_with_a_paused_run_runs_on_abort_once(
    runtime: Runtime, workspace: Path
) -> None:
    first, last = RecordingHook(name="first"), Notify("last")
    hooks = Hooks()
    hooks.pre_tool_call(lambda ctx: Pause("approve?"))
    hooks.on_abort(first)
    hooks.on_abort(last)
    model = ScriptedModel([reply("", call("env", n=1))])
    s = runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[Secrets().tool()]
    )
    assert s.submit("go", timeout=WAIT).status == "paused"
    s.close()
    assert last.done.wait(WAIT)  # runs in order, so "first" ran before
    assert first.count == 1 and len(last.calls) == 1
    assert (first.calls[0].status, first.calls[0].reason) == ("cancelled", "session closed")


def test_closing_a_session_mid_tool_runs_on_abort_once(runtime: Runtime, workspace: Path) -> None:
    aborts = Notify()
    hooks = Hooks()
    hooks.on_abort(aborts)
    started = threading.Event()

    def wait_for_cancel(args: Args, ctx: ToolContext) -> str:
        cancelled = threading.Event()
        ctx.cancel.on_cancel(lambda reason: cancelled.set())
        started.set()
        cancelled.wait(WAIT)
        return "stopped"

    tool = FunctionTool("slow", "waits until cancelled", Args, wait_for_cancel)
    model = ScriptedModel([reply("", call("slow")), reply("never")])
    s = runtime.open_session(workspace=workspace, model=model, hooks=hooks, tools=[tool])
    pending = s._worker.ask(Submit(text="go"), block=False)
    assert started.wait(WAIT)
    s.close()
    turn: TurnResult = pending.get(timeout=WAIT)
    assert turn.status == "cancelled" and turn.error == "session closed"
    assert aborts.done.wait(WAIT)
    assert len(aborts.calls) == 1 and aborts.calls[0].status == "cancelled"
    assert pairing_problems(turn.items) == []


def test_closing_during_on_abort_runs_the_remaining_hooks_once(
    runtime: Runtime, workspace: Path
) -> None:
    blocker, after = Signal("cleanup"), Notify("notify")
    hooks = Hooks()
    hooks.on_abort(blocker)
    hooks.on_abort(after)
    asked, release = threading.Event(), threading.Event()
    model = FunctionModel(lambda r: asked.set() or (release.wait(WAIT) and "late"))
    s = runtime.open_session(workspace=workspace, model=model, hooks=hooks)
    try:
        pending = s._worker.ask(Submit(text="go"), block=False)
        assert asked.wait(WAIT)  # the run is streaming (a cancel overtakes queued mail)
        s.cancel("stop")
        assert blocker.entered.wait(WAIT)  # on_abort is under way
        s.close()
        turn: TurnResult = pending.get(timeout=WAIT)
        assert turn.status == "cancelled" and turn.error == "stop"  # the status it was ending with
        blocker.release.set()
        assert after.done.wait(WAIT)
        assert len(blocker.calls) == 1 and len(after.calls) == 1
        assert after.calls[0].status == "cancelled"
    finally:
        blocker.release.set()
        release.set()


def test_a_submit_cancelled_at_on_prompt_submit_never_started_so_no_on_abort(
    runtime: Runtime, workspace: Path
) -> None:
    aborts = RecordingHook(name="aborts")
    hooks = Hooks()
    hooks.on_prompt_submit(lambda ctx: Cancel("not now"))
    hooks.on_abort(aborts)
    with runtime.open_session(workspace=workspace, model=ScriptedModel([]), hooks=hooks) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "rejected" and turn.items == ()
        # an on_abort hook would run on the blocking lane before TurnFinished; none did
        assert aborts.count == 0


def test_a_pre_llm_request_cancel_ends_a_started_run_with_one_on_abort(
    runtime: Runtime, workspace: Path
) -> None:
    asked: list[LlmRequest] = []
    aborts = RecordingHook(name="aborts")
    hooks = Hooks()

    def budget(ctx: LlmRequestContext) -> Any:
        return Cancel("over budget") if ctx.turn == 2 else Continue()

    hooks.pre_llm_request(budget)
    hooks.on_abort(aborts)
    model = FunctionModel(
        lambda r: asked.append(r) or (reply("", call("env", n=1)) if len(asked) == 1 else "x")
    )
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[Secrets().tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "rejected" and turn.error == "over budget"
        assert len(asked) == 1  # the second request was never sent
        assert [type(i).__name__ for i in turn.items] == [
            "UserMessage",
            "AssistantMessage",
            "ToolResult",
        ]
        assert aborts.count == 1 and aborts.calls[0].status == "rejected"
        assert turn.error_kind is None and turn.hook_failure is None  # not an error


def test_a_submit_cancelled_while_queued_behind_an_interrupted_run(
    runtime: Runtime, workspace: Path
) -> None:
    blocker = Signal("cleanup")
    hooks = Hooks()
    hooks.pre_tool_call(lambda ctx: Pause("approve?"))
    hooks.on_abort(blocker)
    asked: list[LlmRequest] = []
    model = FunctionModel(lambda r: asked.append(r) or reply("", call("env", n=1)))
    try:
        with runtime.open_session(
            workspace=workspace, model=model, hooks=hooks, tools=[Secrets().tool()]
        ) as s:
            assert s.submit("go", timeout=WAIT).status == "paused"
            queued = s._worker.ask(Submit(text="next"), block=False)
            assert blocker.entered.wait(WAIT)  # the paused run's on_abort is running
            s.cancel("changed my mind")
            blocker.release.set()
            turn: TurnResult = queued.get(timeout=WAIT)
            assert turn.status == "cancelled" and turn.items == ()
            assert len(asked) == 1 and len(blocker.calls) == 1  # the queued run never started
            assert pairing_problems(s.history) == []
    finally:
        blocker.release.set()


# -- 6. typed failures in TurnResult ----------------------------------------------------


def test_turn_results_say_which_hook_failed_and_how(runtime: Runtime, workspace: Path) -> None:
    release = threading.Event()
    hooks = Hooks()

    def slow(ctx: PromptContext) -> Any:
        release.wait(WAIT)

    spec = hooks.on_prompt_submit(slow, timeout=0.2)
    try:
        with runtime.open_session(
            workspace=workspace, model=ScriptedModel([reply("fine")]), hooks=hooks
        ) as s:
            turn = s.submit("go", timeout=WAIT)
            assert turn.status == "error" and turn.error_kind == "hook"
            assert turn.hook_failure == HookFailure(
                event="on_prompt_submit",
                hook="slow",
                kind="timeout",
                message=turn.hook_failure.message,
            )
            assert "0.2s" in turn.hook_failure.message
            assert turn.error and "on_prompt_submit hook 'slow'" in turn.error  # still for humans
            hooks.remove(spec)
            hooks.pre_llm_request(lambda ctx: Pause(), name="wrong")
            turn = s.submit("again", timeout=WAIT)
            assert turn.hook_failure is not None
            assert (turn.hook_failure.event, turn.hook_failure.kind) == (
                "pre_llm_request",
                "invalid_result",
            )
            assert turn.hook_failure.hook == "wrong"
    finally:
        release.set()


def test_a_turn_result_tells_an_llm_failure_from_a_hook_failure(
    runtime: Runtime, workspace: Path
) -> None:
    def fail(request: LlmRequest) -> Any:
        raise llm_error("auth", "bad key", retryable=False)

    with runtime.open_session(workspace=workspace, model=FunctionModel(fail)) as s:
        turn = s.submit("hi", timeout=WAIT)
        assert turn.status == "error" and turn.error_kind == "llm"
        assert turn.hook_failure is None
    with runtime.open_session(workspace=workspace, model=ScriptedModel([reply("ok")])) as s:
        turn = s.submit("hi", timeout=WAIT)
        assert turn.status == "completed"
        assert turn.error is None and turn.error_kind is None and turn.hook_failure is None


# -- 8. more of the seed's behaviours ------------------------------------------------------


def test_post_tool_call_hooks_run_per_result_in_call_order(
    runtime: Runtime, workspace: Path
) -> None:
    order: list[str] = []
    lock = threading.Lock()
    hooks = Hooks()

    def named(label: str) -> Any:
        def hook(ctx: PostToolCallContext) -> None:
            with lock:
                order.append(f"{label}:{ctx.arguments['n']}")

        hook.__name__ = label
        return hook

    hooks.post_tool_call(named("A"))
    hooks.post_tool_call(named("B"))
    model = ScriptedModel(
        [reply("", call("env", n=0), call("env", n=1), call("env", n=2)), reply("done")]
    )
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[Secrets().tool()]
    ) as s:
        assert s.submit("go", timeout=WAIT).status == "completed"
        started = [e.call_id for e in s.drain_events() if isinstance(e, ToolStarted)]
    assert len(started) == 3
    assert order == ["A:0", "B:0", "A:1", "B:1", "A:2", "B:2"]


def test_an_on_prompt_submit_hook_may_rewrite_the_prompt(runtime: Runtime, workspace: Path) -> None:
    seen: list[LlmRequest] = []
    hooks = Hooks()

    def sanitize(ctx: PromptContext) -> Any:
        ctx.text = ctx.text.replace("hunter2", "[password]")
        return Continue()

    hooks.on_prompt_submit(sanitize)
    model = FunctionModel(lambda r: seen.append(r) or "ok")
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("my password is hunter2", timeout=WAIT)
        user = turn.items[0]
        assert isinstance(user, UserMessage) and user.text == "my password is [password]"
        assert seen[0].messages[0].text == "my password is [password]"
        assert not any("hunter2" in getattr(i, "text", "") for i in s.history)


def test_the_typed_failure_names_every_hook_event() -> None:
    from typing import get_args

    from fore.actors.worker.hooks import HookEvent
    from fore.messages.session import HookEventName

    assert set(get_args(HookEventName)) == {event.value for event in HookEvent}
