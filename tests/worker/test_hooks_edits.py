"""What hooks may change, checked: invalid edits are typed hook errors, never crashes.

Regression tests for the audit of issue 5: G3 (every hook edit validated),
G6 (recording hooks do not deep-copy tools), G7 (a retried request counts and
passes the hooks), G8 (resume messages at a tool-call pause). Real worker,
real Runtime, scripted or function models.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.llm import FunctionModel, ScriptedModel, llm_error
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker.hooks import (
    Cancel,
    ContinueWithMessages,
    Hooks,
    LlmRequestContext,
    Pause,
    Paused,
    PostToolCallContext,
    PromptContext,
    ToolCallContext,
    ToolOutcome,
    TurnEndContext,
)
from fore.actors.worker.interceptor import Interceptor, RetryRequest
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.testing import RecordingHook, ScriptedHook
from fore.messages.conversation import (
    AssistantMessage,
    Paste,
    SystemMessage,
    TextSegment,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import LlmError, LlmRequest, NamedToolChoice
from fore.messages.session import TurnResult
from fore.supervision import Runtime

WAIT = 20.0


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def failed_at(turn: TurnResult, event: str, hook: str, kind: str) -> str:
    assert turn.status == "error" and turn.error_kind == "hook", turn
    failure = turn.hook_failure
    assert failure is not None
    assert (failure.event, failure.hook, failure.kind) == (event, hook, kind)
    return failure.message


# -- G3: pre_llm_request -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda ctx: setattr(ctx, "tool_choice", "forced"), "ctx.tool_choice"),
        (lambda ctx: ctx.messages.append({"role": "user", "content": "x"}), "ctx.messages[1]"),
        (lambda ctx: ctx.messages.insert(0, "a plain string"), "ctx.messages[0]"),
        (lambda ctx: setattr(ctx, "messages", None), "ctx.messages"),
        (lambda ctx: ctx.tools.append("shell"), "ctx.tools["),
        (lambda ctx: setattr(ctx, "model_name", 42), "ctx.model_name"),
    ],
)
def test_an_invalid_request_edit_is_a_typed_hook_error(
    runtime: Runtime, workspace: Path, edit: Any, field: str
) -> None:
    def bad(ctx: LlmRequestContext) -> None:
        edit(ctx)

    hooks = Hooks()
    spec = hooks.pre_llm_request(bad)
    model = ScriptedModel([reply("never"), reply("after")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("go", timeout=WAIT)
        message = failed_at(turn, "pre_llm_request", "bad", "invalid_edit")
        assert field in message
        assert [type(i).__name__ for i in s.history] == ["UserMessage"]  # history is untouched
        hooks.remove(spec)
        assert s.submit("again", timeout=WAIT).status == "completed"  # the worker lives on


def test_a_valid_request_edit_reaches_the_model(runtime: Runtime, workspace: Path) -> None:
    seen: list[LlmRequest] = []

    def edit(ctx: LlmRequestContext) -> None:
        ctx.messages.insert(0, SystemMessage(text="be brief"))
        ctx.tool_choice = NamedToolChoice(name="read_file")

    hooks = Hooks()
    hooks.pre_llm_request(edit)

    def answer(request: LlmRequest) -> str:
        seen.append(request)
        return "ok"

    model = FunctionModel(answer)
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        assert s.submit("go", timeout=WAIT).status == "completed"
        assert isinstance(seen[0].messages[0], SystemMessage)
        assert seen[0].tool_choice == NamedToolChoice(name="read_file")
        assert [type(i).__name__ for i in s.history] == ["UserMessage", "AssistantMessage"]


# -- G3: post_tool_call ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda ctx: setattr(ctx, "result", "masked"), "ctx.result"),
        (lambda ctx: setattr(ctx.result, "output", None), "ctx.result.output"),
        (lambda ctx: setattr(ctx.result, "is_error", "no"), "ctx.result.is_error"),
    ],
)
def test_an_invalid_result_edit_is_a_typed_hook_error(
    runtime: Runtime, workspace: Path, edit: Any, field: str
) -> None:
    def mask(ctx: PostToolCallContext) -> None:
        edit(ctx)

    hooks = Hooks()
    hooks.post_tool_call(mask)
    model = ScriptedModel([reply("", call("read_file", path="notes.txt")), reply("never")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("go", timeout=WAIT)
        message = failed_at(turn, "post_tool_call", "mask", "invalid_edit")
        assert message.startswith(f"left {field} invalid")
        history = s.history
        assert pairing_problems(history) == []
        (result,) = [i for i in history if isinstance(i, ToolResult)]
        assert "alpha" not in result.output  # withheld: never committed raw


def test_a_replaced_result_object_is_accepted(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()
    hooks.post_tool_call(lambda ctx: setattr(ctx, "result", ToolOutcome("[masked]", False)))
    model = ScriptedModel([reply("", call("read_file", path="notes.txt")), reply("done")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        assert s.submit("go", timeout=WAIT).status == "completed"
        (result,) = [i for i in s.history if isinstance(i, ToolResult)]
        assert result.output == "[masked]"


# -- G3: on_prompt_submit ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda ctx: setattr(ctx, "text", None), "ctx.text"),
        (lambda ctx: setattr(ctx, "text", b"bytes"), "ctx.text"),
        (lambda ctx: setattr(ctx, "segments", "text"), "ctx.segments"),
        (lambda ctx: setattr(ctx, "segments", ({"kind": "text", "text": "x"},)), "ctx.segments[0]"),
    ],
)
def test_an_invalid_prompt_edit_is_a_typed_hook_error(
    runtime: Runtime, workspace: Path, edit: Any, field: str
) -> None:
    def rewrite(ctx: PromptContext) -> None:
        edit(ctx)

    hooks = Hooks()
    hooks.on_prompt_submit(rewrite)
    model = ScriptedModel([reply("never")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("go", timeout=WAIT)
        message = failed_at(turn, "on_prompt_submit", "rewrite", "invalid_edit")
        assert message.startswith(f"left {field} invalid")
        assert s.history == ()  # nothing the provider would reject on every later request


def test_prompt_text_and_segment_edits_are_applied(runtime: Runtime, workspace: Path) -> None:
    def rewrite(ctx: PromptContext) -> None:
        ctx.text = "redacted prompt"
        ctx.segments = (TextSegment(text="redacted "), Paste(text="prompt"))

    hooks = Hooks()
    hooks.on_prompt_submit(rewrite)
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("ok")]), hooks=hooks
    ) as s:
        assert s.submit("secret prompt", timeout=WAIT).status == "completed"
        user = s.history[0]
        assert isinstance(user, UserMessage)
        assert user.text == "redacted prompt"
        assert user.segments == (TextSegment(text="redacted "), Paste(text="prompt"))


def test_a_cancel_needs_no_valid_edit(runtime: Runtime, workspace: Path) -> None:
    def refuse(ctx: PromptContext) -> Cancel:
        ctx.text = None  # type: ignore[assignment]
        return Cancel("empty")

    hooks = Hooks()
    hooks.on_prompt_submit(refuse)
    with runtime.open_session(workspace=workspace, model=ScriptedModel([]), hooks=hooks) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "rejected" and turn.error == "empty"


# -- G3: on_turn_end and resume messages must keep history valid -----------------------------


@pytest.mark.parametrize(
    "messages",
    [
        ["fix it"],
        [ToolResult(call_id="ghost", name="shell", output="x")],
        [AssistantMessage(text="", tool_calls=(ToolCall(id="c1", name="shell"),))],
    ],
)
def test_continue_with_messages_that_break_history_is_an_invalid_result(
    runtime: Runtime, workspace: Path, messages: list[Any]
) -> None:
    def lint(ctx: TurnEndContext) -> ContinueWithMessages:
        return ContinueWithMessages(messages)

    hooks = Hooks()
    hooks.on_turn_end(lint)
    model = ScriptedModel([reply("answer"), reply("never")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        turn = s.submit("go", timeout=WAIT)
        failed_at(turn, "on_turn_end", "lint", "invalid_result")
        assert [type(i).__name__ for i in s.history] == ["UserMessage", "AssistantMessage"]
        assert pairing_problems(s.history) == []


def test_resume_with_unpaired_messages_is_refused(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()
    hooks.on_turn_end(ScriptedHook([Paused("lint")], then=None))
    model = ScriptedModel([reply("first"), reply("second")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        assert s.submit("go", timeout=WAIT).status == "paused"
        with pytest.raises(ValueError, match="without its call"):
            s.resume([ToolResult(call_id="ghost", name="shell", output="x")], timeout=WAIT)
        assert s.run_state().status == "paused"  # still resumable
        assert s.resume([UserMessage(text="lint: ok")], timeout=WAIT).status == "completed"
        assert pairing_problems(s.history) == []


# -- G6: recording hooks and tools holding locks ----------------------------------------------


class NArgs(BaseModel):
    n: int = 0


class Stateful:
    """A tool's state guarded by a lock (the seed's ``Arc<Mutex<..>>`` access)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs = 0

    def tool(self) -> FunctionTool[NArgs]:
        def run(args: NArgs, ctx: ToolContext) -> str:
            with self.lock:
                self.runs += 1
            return "ok"

        tool = FunctionTool("stateful", "has state", NArgs, run)
        tool.state = self  # type: ignore[attr-defined]
        return tool


def test_recording_and_scripted_hooks_share_the_tool_instead_of_copying_it(
    runtime: Runtime, workspace: Path
) -> None:
    state = Stateful()
    recorder = RecordingHook(name="rec")
    scripted = ScriptedHook([None], name="scripted")
    post = RecordingHook(name="post")
    hooks = Hooks()
    hooks.pre_tool_call(recorder)
    hooks.pre_tool_call(scripted)
    hooks.post_tool_call(post)
    model = ScriptedModel([reply("", call("stateful", n=1)), reply("done")])
    with runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[state.tool()]
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed", turn.hook_failure
    assert state.runs == 1
    (seen,) = recorder.calls
    assert isinstance(seen, ToolCallContext)
    assert seen.tool.state is state  # shared, not copied
    assert seen.arguments == {"n": 1}
    assert scripted.seen[0].tool is seen.tool
    assert post.calls[0].result.output == "ok"


def test_a_snapshot_does_not_change_with_later_edits(runtime: Runtime, workspace: Path) -> None:
    recorder = RecordingHook(name="rec")
    hooks = Hooks()
    hooks.pre_tool_call(recorder)
    hooks.pre_tool_call(lambda ctx: ctx.arguments.update(path="other.txt"))
    model = ScriptedModel([reply("", call("read_file", path="notes.txt")), reply("done")])
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        s.submit("go", timeout=WAIT)
    assert recorder.calls[0].arguments == {"path": "notes.txt"}


# -- G7: the interceptor's RetryRequest is an LLM call like any other ---------------------------


class RetryOnce(Interceptor):
    """Retries a failed request once, with ``tool_choice`` relaxed (like ``resolve``)."""

    def __init__(self) -> None:
        self.errors: list[LlmError] = []

    def on_llm_error(self, ctx: LlmRequestContext, error: LlmError) -> RetryRequest | None:
        self.errors.append(error)
        return RetryRequest(dataclasses.replace(ctx, tool_choice="auto"))


def failing_first() -> tuple[list[LlmRequest], Any]:
    seen: list[LlmRequest] = []

    def fn(request: LlmRequest) -> str:
        seen.append(request)
        if len(seen) == 1:
            raise llm_error("bad_request", "tool_choice not supported", retryable=False)
        return "ok"

    return seen, fn


def test_a_retried_request_counts_against_max_turns(runtime: Runtime, workspace: Path) -> None:
    seen, fn = failing_first()
    with runtime.open_session(
        workspace=workspace, model=FunctionModel(fn), interceptor=RetryOnce(), max_turns=1
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "max_turns"
        assert turn.turns == 1 and len(seen) == 1


def test_a_retried_request_passes_the_pre_llm_request_hooks_once_each(
    runtime: Runtime, workspace: Path
) -> None:
    seen, fn = failing_first()
    hooks = Hooks()
    recorder = RecordingHook(name="rec")
    hooks.pre_llm_request(recorder)
    hooks.pre_llm_request(lambda ctx: ctx.messages.insert(0, SystemMessage(text="policy")))
    interceptor = RetryOnce()
    with runtime.open_session(
        workspace=workspace, model=FunctionModel(fn), interceptor=interceptor, hooks=hooks
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed" and turn.turns == 2
    assert len(interceptor.errors) == 1
    assert recorder.count == 2  # the retry went through the hooks
    assert [c.turn for c in recorder.calls] == [1, 2]
    assert recorder.calls[1].tool_choice == "auto"
    for request in seen:
        # each request got the hook's edit exactly once (never stacked on the retry)
        policies = [m for m in request.messages if getattr(m, "text", "") == "policy"]
        assert len(policies) == 1


def test_a_hook_can_cancel_a_retried_request(runtime: Runtime, workspace: Path) -> None:
    seen, fn = failing_first()
    hooks = Hooks()
    hooks.pre_llm_request(ScriptedHook([None, Cancel("no retries")]))
    with runtime.open_session(
        workspace=workspace, model=FunctionModel(fn), interceptor=RetryOnce(), hooks=hooks
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "rejected" and turn.error == "no retries"
        assert len(seen) == 1


# -- G8: resume messages at a tool-call pause --------------------------------------------------


def test_resume_messages_at_a_tool_pause_follow_the_batch_results(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    hooks.pre_tool_call(ScriptedHook([Pause("ok?")], then=None), tools="list_directory")
    seen: list[LlmRequest] = []

    def fn(request: LlmRequest) -> Any:
        seen.append(request)
        if len(seen) == 1:
            return reply("", call("read_file", path="notes.txt"), call("list_directory"))
        return "done"

    with runtime.open_session(workspace=workspace, model=FunctionModel(fn), hooks=hooks) as s:
        assert s.submit("go", timeout=WAIT).status == "paused"
        turn = s.resume([UserMessage(text="APPROVED with a note")], timeout=WAIT)
        assert turn.status == "completed"
        kinds = [type(i).__name__ for i in s.history]
        assert kinds == [
            "UserMessage",
            "AssistantMessage",
            "ToolResult",
            "ToolResult",
            "UserMessage",
            "AssistantMessage",
        ]
        assert s.history[4].text == "APPROVED with a note"  # type: ignore[union-attr]
        assert pairing_problems(s.history) == []
        last = seen[-1].messages[-1]
        assert isinstance(last, UserMessage) and last.text == "APPROVED with a note"
