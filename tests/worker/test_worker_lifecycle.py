"""A run's life and death: cancels that race work under way, early cancels, queued submits.

Regression tests for the audit of issue 5 (G1, G2, G4, G10, G14, G16 and the
missing on_turn_end / max_turns tests). Every test runs a real worker on a
real Runtime; races are forced by holding the blocking lane or a hook on an
event, never by sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pykka
import pytest
from pydantic import BaseModel

import fore.testing
from fore.actors.core.cancel import CancelScope
from fore.actors.llm import FunctionModel, ScriptedModel
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker.hooks import (
    AbortContext,
    Cancel,
    ContinueWithMessages,
    Hooks,
    Pause,
    TurnEndContext,
)
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.testing import RecordingHook
from fore.messages.conversation import AssistantMessage, ToolResult, UserMessage
from fore.messages.llm import LlmRequest
from fore.messages.session import CancelRun, RunStarted, Submit, TurnFinished
from fore.supervision import Runtime
from fore.supervision.session import Session
from tests.llm.test_llm_cancellation import container_sizes

WAIT = 20.0


@pytest.fixture
def narrow() -> Iterator[Runtime]:
    """A runtime whose blocking lane has one thread (a test can hold it)."""
    rt = Runtime(name="worker-lifecycle-narrow", blocking_threads=1)
    try:
        yield rt
    finally:
        assert rt.close(timeout=30)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("print(1)\n")
    return tmp_path


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def drain_lane(rt: Runtime) -> None:
    """Return once everything queued on the (one-thread) blocking lane before now has run."""
    rt.system.blocking.submit(lambda: None).result(WAIT)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def reply(text: str = "", *calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls), **extra}


class Signal:
    """A hook that says it was entered, then waits until released (cleanup always releases)."""

    def __init__(self, name: str = "blocker", result: Any = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.result = result
        self.count = 0
        self.__name__ = name

    def __call__(self, ctx: Any) -> Any:
        self.count += 1
        self.entered.set()
        self.release.wait(WAIT)
        return self.result


@contextmanager
def worker_held(s: Session) -> Iterator[None]:
    """The worker busy in one of its handlers until the block ends: mail sent meanwhile waits."""
    worker = s.worker._actor_weakref()
    assert worker is not None
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(WAIT)

    worker.post(hold)
    assert entered.wait(WAIT)
    try:
        yield
    finally:
        release.set()


class Recorder:
    """A FunctionModel function that records every request and answers ``text``."""

    def __init__(self, text: str = "answer") -> None:
        self.text = text
        self.seen: list[LlmRequest] = []
        self.lock = threading.Lock()

    def __call__(self, request: LlmRequest) -> Any:
        with self.lock:
            self.seen.append(request)
        return self.text

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.seen)


class BigArgs(BaseModel):
    size: int = 5000


def big_tool() -> FunctionTool[BigArgs]:
    def run(args: BigArgs, ctx: ToolContext) -> str:
        return "x" * args.size

    return FunctionTool("big", "a large output", BigArgs, run)


# -- G1: a cancelled run never resumes ----------------------------------------------------


def test_a_cancel_while_file_refs_are_prepared_ends_the_run_for_good(
    narrow: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    on_submit = RecordingHook(name="on_submit")
    on_abort = RecordingHook(name="on_abort")
    hooks.on_prompt_submit(on_submit)
    hooks.on_abort(on_abort)
    model = Recorder("answered after cancel")
    with narrow.open_session(workspace=workspace, model=FunctionModel(model), hooks=hooks) as s:
        gate = threading.Event()
        narrow.system.blocking.submit(gate.wait, WAIT)  # the lane is busy
        try:
            pending = s.worker.ask(Submit(text="look at @app.py"), block=False)
            wait_until(lambda: s.run_state().phase == "preparing")
            s.cancel("user typed")
            turn = pending.get(timeout=WAIT)
        finally:
            gate.set()
        assert turn.status == "cancelled" and turn.error == "user typed"
        assert turn.items == ()
        drain_lane(narrow)  # the preparer has answered; its answer reaches the worker first
        assert s.run_state().status == "idle"
        assert s.history == ()
        assert model.count == 0 and on_submit.count == 0
        # Nothing of it entered history: it never started, so no on_abort (G16).
        assert on_abort.count == 0
        second = s.submit("hello", timeout=WAIT)
        assert second.status == "completed"
        assert s.history == second.items
        assert model.count == 1 and on_submit.count == 1


def test_a_cancel_while_outputs_are_stored_ends_the_run_for_good(
    narrow: Runtime, workspace: Path
) -> None:
    answers = iter([reply("", call("big")), reply("answered after cancel"), reply("fine")])
    seen: list[LlmRequest] = []
    asked_again = threading.Event()

    def fn(request: LlmRequest) -> Any:
        seen.append(request)
        if len(seen) == 2:
            asked_again.set()
        return next(answers)

    def on_abort(ctx: AbortContext) -> None:
        # Gives a wrongly resumed run (the bug) time to ask the model again; a
        # correct run never does, and this bounded wait just runs out.
        on_abort.count += 1  # type: ignore[attr-defined]
        asked_again.wait(1.0)

    on_abort.count = 0  # type: ignore[attr-defined]
    hooks = Hooks()
    hooks.on_abort(on_abort)

    with narrow.open_session(
        workspace=workspace, model=FunctionModel(fn), hooks=hooks, tools=[big_tool()]
    ) as s:
        gate = threading.Event()
        narrow.system.blocking.submit(gate.wait, WAIT)  # the blob store's disk work waits
        try:
            pending = s.worker.ask(Submit(text="make it big"), block=False)
            wait_until(lambda: s.run_state().phase == "storing outputs")
            s.cancel("user typed")
            wait_until(lambda: s.run_state().phase == "on_abort")
        finally:
            gate.set()  # the store answers first, then the on_abort hook runs
        turn = pending.get(timeout=WAIT)
        assert turn.status == "cancelled" and turn.error == "user typed"
        assert on_abort.count == 1  # type: ignore[attr-defined]
        assert len(seen) == 1 and not asked_again.is_set()
        assert pairing_problems(s.history) == []
        assert [type(i).__name__ for i in s.history] == [
            "UserMessage",
            "AssistantMessage",
            "ToolResult",
        ]
        # The next run sees exactly one more request: no orphaned request was sent.
        assert s.submit("again", timeout=WAIT).status == "completed"
        assert len(seen) == 2
        assert [type(i).__name__ for i in s.history][-1] == "AssistantMessage"
        assert s.history[-1].text == "answered after cancel"  # type: ignore[union-attr]


# -- G2: a failing on_abort hook does not stop the others ---------------------------------


def test_a_raising_on_abort_hook_does_not_stop_the_next_one(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def boom(ctx: AbortContext) -> None:
        raise RuntimeError("first on_abort hook fails")

    second = RecordingHook(name="second")
    hooks.on_abort(boom)
    hooks.on_abort(second)
    hooks.pre_llm_request(lambda ctx: Cancel("stop"))
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("x")]), hooks=hooks
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "rejected"
        assert second.count == 1
        assert any("on_abort hook 'boom'" in a.text for a in s.alerts)


def test_a_timed_out_on_abort_hook_does_not_stop_the_next_one(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    hang = Signal("hang")
    second = RecordingHook(name="second")
    hooks.on_abort(hang, timeout=0.2)
    hooks.on_abort(second)
    hooks.pre_llm_request(lambda ctx: Cancel("stop"))
    try:
        with runtime.open_session(
            workspace=workspace, model=ScriptedModel([reply("x")]), hooks=hooks
        ) as s:
            turn = s.submit("go", timeout=WAIT)
            assert turn.status == "rejected"
            assert second.count == 1
            assert any("on_abort hook 'hang'" in a.text and "0.2s" in a.text for a in s.alerts)
    finally:
        hang.release.set()


# -- G4: a cancel that overtakes its submit ------------------------------------------------


def test_a_cancel_that_arrives_before_its_submit_cancels_it_unstarted(
    runtime: Runtime, workspace: Path
) -> None:
    """``Session.cancel`` while its submit still waits behind the worker's current handler:
    the submit's scope is the record of the cancel, so it is answered ``cancelled`` when
    the worker gets it, and never starts."""
    model = Recorder()
    with runtime.open_session(workspace=workspace, model=FunctionModel(model)) as s:
        out: dict[str, Any] = {}
        with worker_held(s):
            thread = threading.Thread(target=lambda: out.update(turn=s.submit("go", timeout=WAIT)))
            thread.start()
            wait_until(lambda: len(s._pending) == 1)
            s.cancel("typed")
        thread.join(WAIT)
        turn = out["turn"]
        assert turn.status == "cancelled" and turn.error == "typed"
        assert turn.items == () and s.history == ()
        assert model.count == 0
        assert not any(isinstance(e, RunStarted) for e in s.drain_events())
        # nothing of the cancel is left behind: the next submit runs
        assert s.submit("next", timeout=WAIT).status == "completed"


def test_a_cancel_run_for_a_submit_not_arrived_yet_is_remembered_nowhere(
    runtime: Runtime, workspace: Path
) -> None:
    """``CancelRun(submit_id=...)`` cancels what the worker has; for a submit it does not have
    it answers False and keeps nothing (the submit's scope is what reaches it early)."""
    model = Recorder()
    with runtime.open_session(workspace=workspace, model=FunctionModel(model)) as s:
        assert s.worker.ask(CancelRun(reason="typed", submit_id="sub-1"), timeout=WAIT) is False
        turn = s.worker.ask(Submit(text="go", submit_id="sub-1"), timeout=WAIT)
        assert turn.status == "completed" and model.count == 1


def test_a_cancel_sent_right_after_its_submit_is_never_lost(
    runtime: Runtime, workspace: Path
) -> None:
    slow = ScriptedModel([reply(" ".join(["w"] * 200))], tokens_per_s=50)
    for _ in range(10):
        with runtime.open_session(workspace=workspace, model=slow) as s:
            scope = CancelScope()
            pending = s.worker.ask(Submit(text="go", scope=scope), block=False)
            scope.cancel("typed")  # wherever the submit is by now
            turn = pending.get(timeout=WAIT)
            assert turn.status == "cancelled"
            assert pairing_problems(s.history) == []


def test_a_storm_of_cancels_for_unknown_submits_leaves_no_state_behind(
    runtime: Runtime, workspace: Path
) -> None:
    """Thousands of cancels naming submits the worker never had: each answered False,
    and the worker holds nothing more afterwards (no table of early cancels to grow)."""
    with runtime.open_session(workspace=workspace, model=FunctionModel(Recorder())) as s:
        assert s.submit("warm up", timeout=WAIT).status == "completed"
        worker = s.worker._actor_weakref()
        before = (container_sizes(worker), container_sizes(worker.state))
        answers = [
            s.worker.ask(CancelRun(reason="typed", submit_id=f"never-{i}"), block=False)
            for i in range(5000)
        ]
        assert {a.get(timeout=WAIT) for a in answers} == {False}
        assert (container_sizes(worker), container_sizes(worker.state)) == before
        assert s.submit("still fine", timeout=WAIT).status == "completed"


def test_a_cancel_naming_another_submit_leaves_the_current_run_alone(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    hold = Signal("hold")
    hooks.pre_llm_request(hold)
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("done")]), hooks=hooks
    ) as s:
        try:
            pending = s.worker.ask(Submit(text="go", submit_id="mine"), block=False)
            assert hold.entered.wait(WAIT)
            assert s.worker.ask(CancelRun(submit_id="someone-else"), timeout=WAIT) is False
        finally:
            hold.release.set()
        assert pending.get(timeout=WAIT).status == "completed"


def test_session_cancel_still_cancels_a_started_run(runtime: Runtime, workspace: Path) -> None:
    release = threading.Event()

    def fn(request: LlmRequest) -> str:
        release.wait(WAIT)
        return "late"

    out: dict[str, Any] = {}
    with runtime.open_session(workspace=workspace, model=FunctionModel(fn)) as s:
        try:
            thread = threading.Thread(target=lambda: out.update(turn=s.submit("go", timeout=WAIT)))
            thread.start()
            wait_until(lambda: s.run_state().phase == "streaming")
            s.cancel("typed")
            thread.join(WAIT)
        finally:
            release.set()
        assert out["turn"].status == "cancelled"


# -- G10: a submit while the previous run is still ending -----------------------------------


def test_a_submit_while_on_abort_runs_is_queued_not_refused(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    cleanup = Signal("cleanup")
    hooks.on_abort(cleanup)
    release = threading.Event()

    def fn(request: LlmRequest) -> str:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text == "a":
            release.wait(WAIT)  # the first run streams until it is cancelled
        return "second"

    model = FunctionModel(fn)
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks) as s:
        try:
            first = s.worker.ask(Submit(text="a"), block=False)
            wait_until(lambda: s.run_state().phase == "streaming")
            s.cancel("typed")
            assert cleanup.entered.wait(WAIT)  # the first run is ending
            second = s.worker.ask(Submit(text="b"), block=False)
            assert s.run_state().phase == "on_abort"
        finally:
            cleanup.release.set()
            release.set()
        assert first.get(timeout=WAIT).status == "cancelled"
        turn = second.get(timeout=WAIT)
        assert turn.status == "completed"
        assert [getattr(i, "text", None) for i in turn.items] == ["b", "second"]
        assert cleanup.count == 1
        assert pairing_problems(s.history) == []


# -- G14: a submit that times out cancels its run -------------------------------------------


def test_a_submit_that_times_out_cancels_its_run(runtime: Runtime, workspace: Path) -> None:
    release = threading.Event()

    def fn(request: LlmRequest) -> str:
        last = request.messages[-1]
        if isinstance(last, UserMessage) and last.text == "slow":
            release.wait(WAIT)
        return "answered"

    hooks = Hooks()
    aborts = RecordingHook(name="aborts")
    hooks.on_abort(aborts)
    with runtime.open_session(workspace=workspace, model=FunctionModel(fn), hooks=hooks) as s:
        try:
            with pytest.raises(pykka.Timeout):
                s.submit("slow", timeout=0.3)
            turn = s.submit("fast", timeout=WAIT)
        finally:
            release.set()
        assert turn.status == "completed"
        assert aborts.count == 1  # the timed-out run had started: it was cancelled once
        kinds = [type(i).__name__ for i in s.history]
        assert kinds == ["UserMessage", "UserMessage", "AssistantMessage"]
        finished = [e.result for e in s.drain_events() if isinstance(e, TurnFinished)]
        assert [r.status for r in finished] == ["cancelled", "completed"]
        assert finished[0].error == "the submit timed out"


# -- G16: on_abort only for runs that started ---------------------------------------------------


def test_a_cancel_during_on_prompt_submit_runs_no_on_abort(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    gate = Signal("gate")
    aborts = RecordingHook(name="aborts")
    hooks.on_prompt_submit(gate)
    hooks.on_abort(aborts)
    model = Recorder()
    with runtime.open_session(workspace=workspace, model=FunctionModel(model), hooks=hooks) as s:
        try:
            pending = s.worker.ask(Submit(text="go"), block=False)
            assert gate.entered.wait(WAIT)
            s.cancel("typed")
            turn = pending.get(timeout=WAIT)
        finally:
            gate.release.set()
        assert turn.status == "cancelled" and turn.items == ()
        assert s.history == ()
        assert aborts.count == 0
        assert s.submit("next", timeout=WAIT).status == "completed"
        assert model.count == 1  # the released hook's answer was ignored


def test_a_failing_on_prompt_submit_hook_runs_no_on_abort(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def broken(ctx: Any) -> None:
        raise ValueError("bad policy")

    aborts = RecordingHook(name="aborts")
    hooks.on_prompt_submit(broken)
    hooks.on_abort(aborts)
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("x")]), hooks=hooks
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "error" and turn.hook_failure is not None
        assert turn.hook_failure.event == "on_prompt_submit"
        assert s.history == () and aborts.count == 0


# -- G17: on_turn_end ending a run; the budget after a resume -------------------------------------


def test_a_raising_on_turn_end_hook_ends_the_run_with_a_typed_error(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def lint(ctx: TurnEndContext) -> Any:
        raise RuntimeError("linter crashed")

    aborts = RecordingHook(name="aborts")
    hooks.on_turn_end(lint)
    hooks.on_abort(aborts)
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel([reply("final answer")]), hooks=hooks
    ) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "error" and turn.error_kind == "hook"
        assert turn.hook_failure is not None
        assert (turn.hook_failure.event, turn.hook_failure.hook) == ("on_turn_end", "lint")
        assert turn.hook_failure.kind == "raised"
        assert "linter crashed" in turn.hook_failure.message
        assert aborts.count == 1
        assert [type(i).__name__ for i in s.history] == ["UserMessage", "AssistantMessage"]


def test_an_on_turn_end_hook_exceeding_its_timeout_is_an_error(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()
    slow = Signal("slow_lint")
    aborts = RecordingHook(name="aborts")
    hooks.on_turn_end(slow, timeout=0.2)
    hooks.on_abort(aborts)
    try:
        with runtime.open_session(
            workspace=workspace, model=ScriptedModel([reply("final")]), hooks=hooks
        ) as s:
            turn = s.submit("go", timeout=WAIT)
            assert turn.status == "error" and turn.hook_failure is not None
            assert turn.hook_failure.kind == "timeout"
            assert turn.hook_failure.event == "on_turn_end"
            assert aborts.count == 1
    finally:
        slow.release.set()


def test_a_cancel_during_on_turn_end_cancels_the_run(narrow: Runtime, workspace: Path) -> None:
    hooks = Hooks()
    retry = Signal("retry", result=ContinueWithMessages([UserMessage(text="again")]))
    aborts = RecordingHook(name="aborts")
    hooks.on_turn_end(retry)
    hooks.on_abort(aborts)
    model = Recorder("final")
    with narrow.open_session(workspace=workspace, model=FunctionModel(model), hooks=hooks) as s:
        try:
            pending = s.worker.ask(Submit(text="go"), block=False)
            assert retry.entered.wait(WAIT)
            s.cancel("typed")
            wait_until(lambda: s.run_state().phase == "on_abort")
        finally:
            retry.release.set()  # its answer comes back, then on_abort runs (one lane thread)
        turn = pending.get(timeout=WAIT)
        assert turn.status == "cancelled" and aborts.count == 1
        drain_lane(narrow)
        assert s.run_state().status == "idle"
        # the released hook's ContinueWithMessages never reached history or the model
        assert [getattr(i, "text", "") for i in s.history] == ["go", "final"]
        assert model.count == 1
        assert pairing_problems(s.history) == []


def test_max_turns_binds_after_a_resume(runtime: Runtime, workspace: Path) -> None:
    hooks = Hooks()
    hooks.pre_tool_call(lambda ctx: Pause("approve?"), tools="list_directory")
    hooks.pre_tool_call(lambda ctx: None, tools="list_directory")
    model = ScriptedModel(
        [
            reply("", call("list_directory")),
            reply("", call("read_file", path="app.py")),
            reply("never asked"),
        ]
    )
    with runtime.open_session(workspace=workspace, model=model, hooks=hooks, max_turns=2) as s:
        paused = s.submit("go", timeout=WAIT)
        assert paused.status == "paused" and paused.turns == 1
        turn = s.resume(timeout=WAIT)
        assert turn.status == "max_turns"
        assert turn.turns == 2
        assert pairing_problems(s.history) == []
        answers = [i for i in s.history if isinstance(i, AssistantMessage)]
        assert len(answers) == 2
        assert [i.name for i in s.history if isinstance(i, ToolResult)] == [
            "list_directory",
            "read_file",
        ]
