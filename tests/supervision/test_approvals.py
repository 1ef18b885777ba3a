"""Approvals in normal turns: ``open_session(approval=..., approver=...)`` (issue 24, point 2).

Real sessions on a real runtime: the scripted model asks for real tool calls
on a real temp workspace, the worker judges them with the gate's classifier
and asks the approver on the hook lane. What each test checks is what the
person (the approver) was asked, what ran (the files on disk) and what the
model was told (the tool results in history). Waits are bounded; nothing
asserts on timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.core import ActorCrashed
from fore.actors.llm import ScriptedModel
from fore.actors.worker.approval import (
    ApprovalDecision,
    ApprovalPolicy,
    ApprovalRequest,
    Category,
    Verdict,
    classify,
    narrows_speculation,
    one_line,
    stricter,
    summarize,
    verdict_for,
)
from fore.actors.worker.hooks import Continue, Hooks, ToolCallContext
from fore.actors.worker.interceptor import Interceptor
from fore.messages.conversation import ToolResult, UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import (
    SpeculationConfig,
    SpeculationFinished,
    SpeculationStatusChanged,
    SuggestionReady,
)
from fore.supervision import Runtime, Session

WAIT = 30.0
EDIT = {"path": "app.py", "old_string": "hello", "new_string": "bye"}


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class Person:
    """An approver that answers from a script and records what it was asked (and where)."""

    def __init__(self, *answers: ApprovalDecision | bool) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []
        self.threads: list[str] = []

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision | bool:
        self.asked.append(request)
        self.threads.append(threading.current_thread().name)
        return self.answers.pop(0) if self.answers else ApprovalDecision.DENY


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def turn_with(*calls: dict[str, Any]) -> ScriptedModel:
    """One turn: the model asks for ``calls`` (one answer), then says "done"."""
    return ScriptedModel(
        [
            {"when": {"purpose": "main"}, "text": "", "tool_calls": list(calls)},
            {"when": {"purpose": "main"}, "text": "done"},
        ]
    )


def results(session: Session) -> list[ToolResult]:
    return [item for item in session.history if isinstance(item, ToolResult)]


def run_calls(
    runtime: Runtime,
    workspace: Path,
    mode: ApprovalMode | str,
    person: Person | None,
    *calls: dict[str, Any],
    **options: Any,
) -> list[ToolResult]:
    with runtime.open_session(
        workspace=workspace,
        model=turn_with(*calls),
        approval=mode,
        approver=person,
        **options,
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed", turn
        return results(s)


READS = (
    call("read_file", path="app.py"),
    call("grep", pattern="hello"),
    call("shell", command="ls -la"),
    call("shell", command="git status"),
)
SHELL_WRITE = call("shell", command="touch made.txt")
AN_EDIT = call("edit", **EDIT)


# -- the modes --------------------------------------------------------------------------------


def test_default_asks_for_an_edit_and_a_non_read_only_shell_not_for_reads(
    runtime: Runtime, workspace: Path
) -> None:
    person = Person(ApprovalDecision.ALLOW, ApprovalDecision.ALLOW)
    done = run_calls(runtime, workspace, "default", person, *READS, AN_EDIT, SHELL_WRITE)
    assert [(r.tool, r.category) for r in person.asked] == [
        ("edit", Category.EDIT),
        ("shell", Category.CHANGE),
    ]
    assert person.asked[1].summary == "touch made.txt"
    assert "not provably read-only" in person.asked[1].reason or "writes" in person.asked[1].reason
    assert not any(r.is_error for r in done), [r.output for r in done]
    assert "bye" in (workspace / "app.py").read_text()
    assert (workspace / "made.txt").exists()
    # Asked on the hook lane, never on a dispatcher thread.
    assert all("-hooks" in name for name in person.threads), person.threads


def test_a_refusal_is_a_skipped_result_the_model_reads_and_the_turn_goes_on(
    runtime: Runtime, workspace: Path
) -> None:
    person = Person(False, ApprovalDecision.DENY)
    done = run_calls(runtime, workspace, ApprovalMode.DEFAULT, person, AN_EDIT, SHELL_WRITE)
    assert [r.tool for r in person.asked] == ["edit", "shell"]
    assert [r.is_error for r in done] == [True, True]
    assert done[0].output.startswith("Skipped: the user refused edit app.py")
    assert done[1].output.startswith("Skipped: the user refused shell touch made.txt")
    assert (workspace / "app.py").read_text() == "print('hello')\n"
    assert not (workspace / "made.txt").exists()


def test_auto_edit_does_not_ask_for_edits_but_asks_for_other_changes(
    runtime: Runtime, workspace: Path
) -> None:
    person = Person(ApprovalDecision.DENY)
    done = run_calls(runtime, workspace, "auto-edit", person, AN_EDIT, SHELL_WRITE)
    assert [r.tool for r in person.asked] == ["shell"]
    assert "bye" in (workspace / "app.py").read_text()
    assert not (workspace / "made.txt").exists()
    assert [r.is_error for r in done] == [False, True]


def test_plan_refuses_every_write_without_asking(runtime: Runtime, workspace: Path) -> None:
    person = Person(ApprovalDecision.ALLOW)
    done = run_calls(runtime, workspace, "plan", person, *READS, AN_EDIT, SHELL_WRITE)
    assert person.asked == []
    assert [r.is_error for r in done] == [False] * len(READS) + [True, True]
    assert "approval mode plan allows no changes" in done[-2].output
    assert (workspace / "app.py").read_text() == "print('hello')\n"
    assert not (workspace / "made.txt").exists()


def test_yolo_never_asks(runtime: Runtime, workspace: Path) -> None:
    person = Person()
    done = run_calls(runtime, workspace, ApprovalMode.YOLO, person, AN_EDIT, SHELL_WRITE)
    assert person.asked == []
    assert not any(r.is_error for r in done)
    assert (workspace / "made.txt").exists()


def test_without_an_approver_what_would_ask_is_refused_with_a_clear_reason(
    runtime: Runtime, workspace: Path
) -> None:
    done = run_calls(runtime, workspace, "default", None, call("read_file", path="app.py"), AN_EDIT)
    assert not done[0].is_error
    assert "this session has no approver to ask" in done[1].output


def test_a_session_without_approval_runs_calls_unasked(runtime: Runtime, workspace: Path) -> None:
    with runtime.open_session(workspace=workspace, model=turn_with(SHELL_WRITE)) as s:
        assert s.approval is None
        assert s.submit("go", timeout=WAIT).status == "completed"
    assert (workspace / "made.txt").exists()


# -- the approver's deadline, failures, cancel ---------------------------------------------------


def test_no_answer_within_the_approvers_deadline_is_a_refusal_not_a_failed_run(
    runtime: Runtime, workspace: Path
) -> None:
    release = threading.Event()
    asked = threading.Event()

    def slow(request: ApprovalRequest) -> ApprovalDecision:
        asked.set()
        release.wait(WAIT)  # a person who walked away
        return ApprovalDecision.ALLOW

    policy = ApprovalPolicy(mode=ApprovalMode.DEFAULT, timeout_s=0.2)
    try:
        with runtime.open_session(
            workspace=workspace, model=turn_with(AN_EDIT), approval=policy, approver=slow
        ) as s:
            turn = s.submit("go", timeout=WAIT)
            assert asked.is_set()
            assert turn.status == "completed"  # the model was told, and answered
            (result,) = results(s)
            assert result.output == ("Skipped: no answer to the approval request within 0.2 s")
            assert any(a.source == "approval" and "edit was not run" in a.text for a in s.alerts)
    finally:
        release.set()
    assert (workspace / "app.py").read_text() == "print('hello')\n"  # the late "yes" is ignored


def test_an_approver_that_raises_refuses_the_call(runtime: Runtime, workspace: Path) -> None:
    def broken(request: ApprovalRequest) -> ApprovalDecision:
        raise RuntimeError("the UI is gone")

    done = run_calls(runtime, workspace, "default", broken, AN_EDIT)  # type: ignore[arg-type]
    assert done[0].output.startswith("Skipped: the approver failed")
    assert "the UI is gone" in done[0].output


def test_an_approver_answering_nonsense_refuses_the_call(runtime: Runtime, workspace: Path) -> None:
    done = run_calls(runtime, workspace, "default", lambda r: "yes", AN_EDIT)  # type: ignore[arg-type,return-value]
    assert "must answer an ApprovalDecision or a bool" in done[0].output
    assert (workspace / "app.py").read_text() == "print('hello')\n"


def test_cancel_while_the_person_is_asked_ends_the_run_and_ignores_the_answer(
    runtime: Runtime, workspace: Path
) -> None:
    asked = threading.Event()
    release = threading.Event()

    def waiting(request: ApprovalRequest) -> ApprovalDecision:
        asked.set()
        release.wait(WAIT)
        return ApprovalDecision.ALLOW

    with runtime.open_session(
        workspace=workspace, model=turn_with(AN_EDIT), approval="default", approver=waiting
    ) as s:
        outcome: list[Any] = []
        thread = threading.Thread(target=lambda: outcome.append(s.submit("go", timeout=WAIT)))
        thread.start()
        assert asked.wait(WAIT)
        assert s.run_state().phase == "approval"
        s.cancel("changed my mind")
        thread.join(WAIT)
        assert outcome and outcome[0].status == "cancelled"
        release.set()  # the person answers "yes" -- too late
        (result,) = results(s)
        assert result.is_error and "Cancelled" in result.output
    assert (workspace / "app.py").read_text() == "print('hello')\n"


# -- always --------------------------------------------------------------------------------------


def test_always_stops_asking_for_that_tool_only(runtime: Runtime, workspace: Path) -> None:
    person = Person(ApprovalDecision.ALWAYS, ApprovalDecision.DENY)
    second = call("edit", path="app.py", old_string="bye", new_string="ciao")
    done = run_calls(runtime, workspace, "default", person, AN_EDIT, second, SHELL_WRITE)
    assert [r.tool for r in person.asked] == ["edit", "shell"]
    assert [r.is_error for r in done] == [False, False, True]
    assert "ciao" in (workspace / "app.py").read_text()


class CrashOnce(Interceptor):
    """Crashes the worker actor (a bug in trusted code) on the prompt "crash"."""

    def on_prompt_submit(self, message: UserMessage) -> Any:
        if message.text == "crash":
            raise RuntimeError("interceptor bug")
        return Continue()


def test_always_and_the_mode_survive_a_worker_restart(runtime: Runtime, workspace: Path) -> None:
    model = ScriptedModel(
        [
            {"when": {"contains": "first"}, "tool_calls": [AN_EDIT]},
            {
                "when": {"contains": "second"},
                "tool_calls": [call("write_file", path="n.txt", content="x")],
            },
            {"text": "done"},
        ]
    )
    person = Person(ApprovalDecision.ALWAYS)
    with runtime.open_session(
        workspace=workspace,
        model=model,
        approval="default",
        approver=person,
        interceptor=CrashOnce(),
    ) as s:
        s.submit("first", timeout=WAIT)
        assert s.approval is not None and s.approval.always == frozenset({"edit"})
        with pytest.raises((RuntimeError, ActorCrashed)):
            s.submit("crash", timeout=WAIT)
        s.set_approval_mode("auto-edit")
        turn = s.submit("second", timeout=WAIT)  # a new worker incarnation
        assert turn.status == "completed"
        assert s.approval == ApprovalPolicy(mode=ApprovalMode.AUTO_EDIT, always=frozenset({"edit"}))
    assert len(person.asked) == 1
    assert (workspace / "n.txt").read_text() == "x"


def test_a_policys_always_tools_run_unasked_but_plan_still_refuses_them(
    runtime: Runtime, workspace: Path
) -> None:
    person = Person()
    policy = ApprovalPolicy(mode=ApprovalMode.DEFAULT, always=frozenset({"shell"}))
    run_calls(runtime, workspace, policy, person, SHELL_WRITE)
    assert person.asked == [] and (workspace / "made.txt").exists()
    (workspace / "made.txt").unlink()
    planned = ApprovalPolicy(mode=ApprovalMode.PLAN, always=frozenset({"shell"}))
    done = run_calls(runtime, workspace, planned, person, SHELL_WRITE)
    assert done[0].is_error and not (workspace / "made.txt").exists()


# -- the order: approval, then the public hooks ---------------------------------------------------


def test_approval_comes_before_the_public_pre_tool_call_hooks(
    runtime: Runtime, workspace: Path
) -> None:
    order: list[str] = []

    def hook(ctx: ToolCallContext) -> None:
        order.append(f"hook {ctx.name}")

    def person(request: ApprovalRequest) -> ApprovalDecision:
        order.append(f"asked {request.tool}")
        return ApprovalDecision.DENY if request.tool == "shell" else ApprovalDecision.ALLOW

    hooks = Hooks()
    hooks.pre_tool_call(hook)
    with runtime.open_session(
        workspace=workspace,
        model=turn_with(AN_EDIT, SHELL_WRITE),
        approval="default",
        approver=person,
        hooks=hooks,
    ) as s:
        s.submit("go", timeout=WAIT)
    # A refused call never reaches the hooks.
    assert order == ["asked edit", "hook edit", "asked shell"]


def test_a_hook_that_rewrites_approved_arguments_has_them_judged_again(
    runtime: Runtime, workspace: Path
) -> None:
    def sneaky(ctx: ToolCallContext) -> None:
        if ctx.name == "shell":
            ctx.arguments["command"] = "touch sneaky.txt"

    hooks = Hooks()
    hooks.pre_tool_call(sneaky)
    person = Person(ApprovalDecision.DENY)
    done = run_calls(
        runtime, workspace, "default", person, call("shell", command="ls"), hooks=hooks
    )
    # "ls" needed nobody; what would really run does.
    assert [r.summary for r in person.asked] == ["touch sneaky.txt"]
    assert done[0].is_error and not (workspace / "sneaky.txt").exists()


# -- set_approval_mode ----------------------------------------------------------------------


def test_set_approval_mode_applies_from_the_next_call(runtime: Runtime, workspace: Path) -> None:
    model = ScriptedModel(
        [
            {"when": {"contains": "one"}, "tool_calls": [SHELL_WRITE]},
            {"when": {"contains": "two"}, "tool_calls": [call("shell", command="touch two.txt")]},
            {"text": "done"},
        ]
    )
    person = Person()
    with runtime.open_session(
        workspace=workspace, model=model, approval="yolo", approver=person
    ) as s:
        s.submit("one", timeout=WAIT)
        s.set_approval_mode("plan")
        s.submit("two", timeout=WAIT)
    assert (workspace / "made.txt").exists() and not (workspace / "two.txt").exists()
    assert person.asked == []


def test_set_approval_mode_on_a_session_opened_without_approval_installs_a_policy(
    runtime: Runtime, workspace: Path
) -> None:
    with runtime.open_session(workspace=workspace, model=turn_with(SHELL_WRITE)) as s:
        s.set_approval_mode(ApprovalMode.DEFAULT)
        assert s.approval is not None and s.approval.mode is ApprovalMode.DEFAULT
        s.submit("go", timeout=WAIT)
        assert "no approver to ask" in results(s)[0].output
    assert not (workspace / "made.txt").exists()
    with pytest.raises(ValueError, match="unknown approval mode"):
        Runtime.open_session(runtime, workspace=workspace, model=turn_with(), approval="maybe")


# -- the mode and speculation ----------------------------------------------------------------


def speculating_model(edit: dict[str, Any]) -> ScriptedModel:
    """Two answers, a suggestion, and a speculation that edits then answers."""
    return ScriptedModel(
        [
            {"when": {"purpose": "main", "contains": "hi"}, "text": "Hello."},
            {"when": {"purpose": "main", "contains": "what"}, "text": "It prints hello."},
            {"when": {"purpose": "suggestion"}, "text": '{"suggestion": "make it say bye"}'},
            *[
                {"when": {"purpose": "speculation"}, "tool_calls": [call("edit", **edit)]},
                {"when": {"purpose": "speculation"}, "text": "It says bye now."},
            ]
            * 2,  # a second speculation (after a mode change) does the same
            {"when": {"purpose": "pipelined"}, "text": '{"suggestion": "run it"}'},
        ]
    )


def speculate(
    runtime: Runtime, workspace: Path, mode: str, person: Person | None = None
) -> Session:
    s = runtime.open_session(
        workspace=workspace,
        model=speculating_model(EDIT),
        speculation=SpeculationConfig(enabled=True, suggestion_delay_ms=0),
        approval=mode,
        approver=person or Person(),
    )
    s.submit("hi", timeout=WAIT)
    s.submit("what does it print?", timeout=WAIT)
    return s


def finished(s: Session) -> list[SpeculationFinished]:
    return [e for e in s.drain_events() if isinstance(e, SpeculationFinished)]


def test_the_gate_uses_the_sessions_mode(runtime: Runtime, workspace: Path) -> None:
    with speculate(runtime, workspace, "default") as s:
        wait_for(lambda: s.speculation.state == "boundary", "the speculation to stop at the edit")
        assert s.speculation.boundary_tool == "edit"
    with speculate(runtime, workspace, "auto-edit") as s:
        wait_for(lambda: s.speculation.state == "completed", "the speculation to complete")
        assert s.speculation.files_written == 1


def test_always_for_a_file_tool_lets_a_default_mode_speculation_edit_the_overlay(
    runtime: Runtime, workspace: Path
) -> None:
    person = Person()
    s = runtime.open_session(
        workspace=workspace,
        model=speculating_model(EDIT),
        speculation=SpeculationConfig(enabled=True, suggestion_delay_ms=0),
        approval=ApprovalPolicy(mode=ApprovalMode.DEFAULT, always=frozenset({"edit"})),
        approver=person,
    )
    with s:
        s.submit("hi", timeout=WAIT)
        s.submit("what does it print?", timeout=WAIT)
        wait_for(lambda: s.speculation.state == "completed", "the speculation to complete")
        result = s.accept(timeout=WAIT)
        assert result.outcome == "accepted" and result.files_applied == ("app.py",)
    assert person.asked == []


def test_a_stricter_mode_aborts_the_speculation_and_speculates_again_under_it(
    runtime: Runtime, workspace: Path
) -> None:
    with speculate(runtime, workspace, "auto-edit") as s:
        wait_for(lambda: s.speculation.state == "completed", "the edit in the overlay")
        first = s.speculation.speculation_id
        s.drain_events()
        s.set_approval_mode("default")
        wait_for(
            lambda: s.speculation.speculation_id != first and s.speculation.state == "boundary",
            "a new speculation, stopped before the edit",
        )
        assert s.suggestion == "make it say bye"
        ends = wait_for(lambda: finished(s), "the first speculation's report")
        assert (ends[0].speculation_id, ends[0].outcome) == (first, "aborted")
        assert ends[0].reason == "the approval mode changed to default"
        # Tab now runs the edit for real -- asking (the person says no).
        result = s.accept(timeout=WAIT)
        assert result.outcome == "boundary" and result.files_applied == ()
    assert (workspace / "app.py").read_text() == "print('hello')\n"


def test_a_more_permissive_mode_keeps_the_speculation(runtime: Runtime, workspace: Path) -> None:
    with speculate(runtime, workspace, "auto-edit") as s:
        wait_for(lambda: s.speculation.state == "completed", "the speculation")
        first = s.speculation.speculation_id
        s.drain_events()
        s.set_approval_mode("yolo")
        result = s.accept(timeout=WAIT)
        assert (result.outcome, result.files_applied) == ("accepted", ("app.py",))
        ends = wait_for(lambda: finished(s), "the speculation's report")
        assert (ends[0].speculation_id, ends[0].outcome) == (first, "accepted")


def test_plan_mode_withdraws_the_suggestion_and_stops_suggesting(
    runtime: Runtime, workspace: Path
) -> None:
    with speculate(runtime, workspace, "auto-edit") as s:
        wait_for(lambda: s.suggestion, "the suggestion")
        s.set_approval_mode("plan")
        wait_for(lambda: s.suggestion is None, "the suggestion to go")
        wait_for(lambda: s.speculation.state == "aborted", "the speculation to be aborted")
        assert s.accept(timeout=WAIT).outcome == "no_suggestion"
        s.drain_events()
        s.submit("what does it print now?", timeout=WAIT)
        events = s.drain_events()
        assert not any(isinstance(e, SuggestionReady) for e in events)
        assert s.suggestion is None
    assert (workspace / "app.py").read_text() == "print('hello')\n"


def test_status_events_follow_a_mode_change(runtime: Runtime, workspace: Path) -> None:
    with speculate(runtime, workspace, "auto-edit") as s:
        wait_for(lambda: s.speculation.state == "completed", "the speculation")
        first = s.speculation.speculation_id
        s.drain_events()
        s.set_approval_mode("default")
        wait_for(lambda: s.speculation.state == "boundary", "the new speculation's boundary")
        events = wait_for(
            lambda: [e for e in s.drain_events() if isinstance(e, SpeculationStatusChanged)],
            "status events",
        )
        # completed -> (aborted and restarted in one step) running -> boundary, always shown
        assert [e.status.state for e in events] == ["running", "boundary"]
        assert {e.status.speculation_id for e in events} != {first}
        assert [e.shown for e in events] == ["make it say bye"] * 2
        assert events[-1].status.boundary_tool == "edit"


# -- the pure parts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "category"),
    [
        ("read_file", {"path": "a.py"}, Category.READ),
        ("grep", {"pattern": "x"}, Category.READ),
        ("shell", {"command": "ls -la"}, Category.READ),
        ("shell", {"command": "git status"}, Category.READ),
        ("edit", {"path": "a.py", "old_string": "a", "new_string": "b"}, Category.EDIT),
        ("write_file", {"path": "a.py", "content": ""}, Category.EDIT),
        ("multi_edit", {"edits": []}, Category.EDIT),
        ("shell", {"command": "rm -rf build"}, Category.CHANGE),
        ("shell", {"command": "echo hi > out.txt"}, Category.CHANGE),
        ("shell", {"command": "python3 -m unittest"}, Category.CHANGE),
        ("shell", {"command": "ls $(touch x)"}, Category.CHANGE),
        ("web_fetch", {"url": "http://x"}, Category.CHANGE),
        ("resolve", {"action": "apply", "reason": "r"}, Category.CHANGE),
        ("some_mcp_tool", {}, Category.CHANGE),
    ],
)
def test_calls_are_classified_by_the_gate(
    name: str, arguments: dict[str, Any], category: Category, tmp_path: Path
) -> None:
    assert classify(name, arguments, tmp_path)[0] is category


def test_a_tool_that_declares_itself_read_only_is_a_read() -> None:
    class Lookup:
        read_only = True

    assert classify("lookup", {}, None, Lookup())[0] is Category.READ
    assert classify("lookup", {}, None, object())[0] is Category.CHANGE


def test_the_mode_table() -> None:
    table = {
        (mode, category): verdict_for(mode, category)
        for mode in ApprovalMode
        for category in Category
    }
    assert table == {
        (ApprovalMode.DEFAULT, Category.READ): Verdict.ALLOW,
        (ApprovalMode.DEFAULT, Category.EDIT): Verdict.ASK,
        (ApprovalMode.DEFAULT, Category.CHANGE): Verdict.ASK,
        (ApprovalMode.AUTO_EDIT, Category.READ): Verdict.ALLOW,
        (ApprovalMode.AUTO_EDIT, Category.EDIT): Verdict.ALLOW,
        (ApprovalMode.AUTO_EDIT, Category.CHANGE): Verdict.ASK,
        (ApprovalMode.YOLO, Category.READ): Verdict.ALLOW,
        (ApprovalMode.YOLO, Category.EDIT): Verdict.ALLOW,
        (ApprovalMode.YOLO, Category.CHANGE): Verdict.ALLOW,
        (ApprovalMode.PLAN, Category.READ): Verdict.ALLOW,
        (ApprovalMode.PLAN, Category.EDIT): Verdict.REFUSE,
        (ApprovalMode.PLAN, Category.CHANGE): Verdict.REFUSE,
    }


_RANK = {Verdict.REFUSE: 0, Verdict.ASK: 1, Verdict.ALLOW: 2}

SHELLISH = st.text(alphabet=st.sampled_from(list("ab ./-|>&;$()`'\"\\\n*~")), max_size=30)


@given(
    st.sampled_from(list(ApprovalMode)),
    st.sampled_from(list(ApprovalMode)),
    st.sampled_from(["read_file", "edit", "write_file", "shell", "web_fetch", "mcp_x"]),
    SHELLISH,
)
@settings(max_examples=300, deadline=None)
def test_a_stricter_mode_never_lets_through_what_a_looser_one_stops(
    new: ApprovalMode, old: ApprovalMode, name: str, command: str
) -> None:
    category, _ = classify(name, {"command": command, "path": "a"}, None)
    if stricter(new, old):
        assert _RANK[verdict_for(new, category)] <= _RANK[verdict_for(old, category)]
    if category is not Category.READ and new is not ApprovalMode.YOLO:
        assert verdict_for(new, category) is not Verdict.ALLOW or (
            new is ApprovalMode.AUTO_EDIT and category is Category.EDIT
        )
    if narrows_speculation(new, old):
        assert stricter(new, old)


ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)


@given(ANY_TEXT, st.sampled_from(["shell", "edit", "custom", "multi_edit"]))
@settings(max_examples=300, deadline=None)
def test_a_summary_is_one_bounded_line_without_control_characters(value: str, name: str) -> None:
    for arguments in (
        {"command": value, "path": value},
        {"x": value},
        {"edits": [{"path": value}]},
    ):
        line = summarize(name, arguments)
        assert len(line) <= 120
        assert line.isprintable() or not line
        line.encode("utf-8")
    assert one_line(value).isprintable() or not one_line(value)
