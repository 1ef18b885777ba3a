"""A submit's cancel scope: made by its sender before it sends, the one record of its cancel.

``Submit.scope`` is the run's :class:`~actors.core.cancel.CancelScope`. A scope
cancelled before the worker has the submit -- however the cancel and the
submit raced -- answers it ``cancelled`` without starting it: nothing of it in
history, no ``RunStarted``, no model call, no on_abort. Cancelled while the run
is under way, the worker ends the run as ``CancelRun`` would. Every race is
forced by holding the worker in a handler or a hook on an event, never by sleeping.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fore.actors.core.cancel import CancelScope
from fore.actors.llm import FunctionModel
from fore.actors.worker.hooks import Hooks
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.testing import RecordingHook
from fore.messages.llm import LlmRequest
from fore.messages.session import RunStarted, Submit, TurnFinished
from fore.messages.speculation import SpeculationConfig, SubmitPrompt
from fore.supervision import Runtime
from fore.supervision.session import Session
from tests.llm.test_llm_cancellation import container_sizes
from tests.worker.test_worker_lifecycle import WAIT, Recorder, Signal, wait_until, worker_held


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("print(1)\n")
    return tmp_path


def finished(s: Session) -> list[Any]:
    return [e.result for e in s.drain_events() if isinstance(e, TurnFinished)]


def test_a_submit_whose_scope_was_cancelled_first_never_starts(
    runtime: Runtime, workspace: Path
) -> None:
    model = Recorder()
    hooks = Hooks()
    aborts = RecordingHook(name="aborts")
    hooks.on_abort(aborts)
    with runtime.open_session(workspace=workspace, model=FunctionModel(model), hooks=hooks) as s:
        scope = CancelScope()
        scope.cancel("typed")
        turn = s.worker.ask(Submit(text="go", scope=scope), timeout=WAIT)
        assert (turn.status, turn.error, turn.items) == ("cancelled", "typed", ())
        assert s.history == () and model.count == 0 and aborts.count == 0
        events = s.drain_events()
        assert not any(isinstance(e, RunStarted) for e in events)
        assert [e.result.status for e in events if isinstance(e, TurnFinished)] == ["cancelled"]
        assert s.submit("next", timeout=WAIT).status == "completed"  # the session goes on


def test_a_cancel_that_comes_while_its_submit_waits_in_the_mailbox_leaves_no_trace(
    runtime: Runtime, workspace: Path
) -> None:
    model = Recorder()
    with runtime.open_session(workspace=workspace, model=FunctionModel(model)) as s:
        scopes = [CancelScope() for _ in range(20)]
        with worker_held(s):  # every submit waits behind the held handler
            pending = [s.worker.ask(Submit(text="go", scope=c), block=False) for c in scopes]
            for scope in scopes:
                scope.cancel("typed")
        turns = [p.get(timeout=WAIT) for p in pending]
        assert {(t.status, t.error, t.items) for t in turns} == {("cancelled", "typed", ())}
        assert s.history == () and model.count == 0
        assert not any(isinstance(e, RunStarted) for e in s.drain_events())
        assert all(scope.cancel_called for scope in scopes)


def test_cancelling_the_scope_of_a_running_submit_cancels_its_run(
    runtime: Runtime, workspace: Path
) -> None:
    release = threading.Event()

    def fn(request: LlmRequest) -> str:
        release.wait(WAIT)  # streams until the run is cancelled
        return "late"

    hooks = Hooks()
    aborts = RecordingHook(name="aborts")
    hooks.on_abort(aborts)
    with runtime.open_session(workspace=workspace, model=FunctionModel(fn), hooks=hooks) as s:
        try:
            scope = CancelScope()
            pending = s.worker.ask(Submit(text="go", scope=scope), block=False)
            wait_until(lambda: s.run_state().phase == "streaming")
            scope.cancel("typed")
            turn = pending.get(timeout=WAIT)
        finally:
            release.set()
        assert (turn.status, turn.error) == ("cancelled", "typed")
        assert aborts.count == 1  # it had started: on_abort once
        assert [type(i).__name__ for i in s.history] == ["UserMessage"]
        assert pairing_problems(s.history) == []
        wait_until(lambda: scope.settled)  # the LLM stream is closed: no lease left
        assert s.submit("next", timeout=WAIT).status == "completed"


def test_a_submit_queued_behind_an_ending_run_whose_scope_is_cancelled_never_starts(
    runtime: Runtime, workspace: Path
) -> None:
    release = threading.Event()

    def fn(request: LlmRequest) -> str:
        release.wait(WAIT)
        return "answer"

    hooks = Hooks()
    cleanup = Signal("cleanup")
    hooks.on_abort(cleanup)
    with runtime.open_session(workspace=workspace, model=FunctionModel(fn), hooks=hooks) as s:
        try:
            first = s.worker.ask(Submit(text="a"), block=False)
            wait_until(lambda: s.run_state().phase == "streaming")
            s.cancel("typed")
            assert cleanup.entered.wait(WAIT)  # the first run is ending
            scope = CancelScope()
            second = s.worker.ask(Submit(text="b", scope=scope), block=False)
            wait_until(lambda: s.run_state().phase == "on_abort")
            scope.cancel("changed my mind")
        finally:
            cleanup.release.set()
            release.set()
        assert first.get(timeout=WAIT).status == "cancelled"
        turn = second.get(timeout=WAIT)
        assert (turn.status, turn.error, turn.items) == ("cancelled", "changed my mind", ())
        assert [getattr(i, "text", None) for i in s.history] == ["a"]
        assert cleanup.count == 1  # the queued submit never started: no on_abort of its own


def test_a_completed_runs_scope_is_closed_and_a_late_cancel_changes_nothing(
    runtime: Runtime, workspace: Path
) -> None:
    with runtime.open_session(workspace=workspace, model=FunctionModel(Recorder())) as s:
        scope = CancelScope()
        turn = s.worker.ask(Submit(text="go", scope=scope), timeout=WAIT)
        assert turn.status == "completed"
        assert scope.closed and scope.settled and not scope.cancel_called
        s.drain_events()
        scope.cancel("too late")
        assert s.submit("next", timeout=WAIT).status == "completed"
        assert [r.status for r in finished(s)] == ["completed"]  # only the next one's
        assert len(s.history) == 4


@pytest.mark.parametrize("speculation", [False, True])
def test_a_prompt_through_the_front_door_carries_its_scope_to_the_worker(
    runtime: Runtime, workspace: Path, speculation: bool
) -> None:
    """``SubmitPrompt.scope`` reaches the worker's ``Submit`` (the controller passes it on)."""
    model = Recorder()
    config = SpeculationConfig(enabled=speculation, speculate=False)
    with runtime.open_session(
        workspace=workspace, model=FunctionModel(model), speculation=config
    ) as s:
        scope = CancelScope()
        with worker_held(s):
            pending = s.controller.ask(SubmitPrompt(text="go", scope=scope), block=False)
            scope.cancel("typed")
        turn = pending.get(timeout=WAIT)
        assert (turn.status, turn.error, turn.items) == ("cancelled", "typed", ())
        assert s.history == () and model.count == 0


WHEN = st.sampled_from(["before it is sent", "while it waits", "while it streams", "never"])


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=st.lists(WHEN, min_size=1, max_size=6))
# The model function of a run cancelled while it streams may record its request after the
# run was answered, while the next submit runs (its thread is not stopped by the cancel).
@example(plan=["while it streams", "before it is sent"])
@example(plan=["while it streams", "while it waits"])
def test_whenever_a_submits_scope_is_cancelled_the_run_ends_as_the_rule_says(
    runtime: Runtime, workspace: Path, plan: list[str]
) -> None:
    """The rule, for any sequence of submits: a scope cancelled before the worker has the
    submit leaves nothing (no items, no model call, no on_abort); cancelled while the run
    streams, the run ends ``cancelled`` with its prompt in history and on_abort once;
    never cancelled, it completes. History stays well formed, and but for history the
    worker's containers are as they were before the sequence.

    Each submit's prompt is its own, and a model call is counted for the prompt it carries:
    a streaming run's request may reach the model function as late as after its cancel was
    answered (the LLM loop cannot stop a thread that already took the call), so a count
    of all calls taken before and after a later submit would charge that submit with it."""
    model = Recorder()
    holds: dict[str, threading.Event] = {}

    def answer(request: LlmRequest) -> str:
        model(request)  # counted
        hold = holds.get(getattr(request.messages[-1], "text", ""))
        if hold is not None:
            hold.wait(WAIT)
        return "answered"

    def asked(prompt: str) -> int:
        with model.lock:
            return sum(1 for r in model.seen if getattr(r.messages[-1], "text", "") == prompt)

    hooks = Hooks()
    aborts = RecordingHook(name="aborts")
    hooks.on_abort(aborts)
    with runtime.open_session(workspace=workspace, model=FunctionModel(answer), hooks=hooks) as s:
        worker = s.worker._actor_weakref()

        def sizes() -> tuple[dict[str, int], dict[str, int]]:
            state = container_sizes(worker.state)
            state.pop("history", None)
            return container_sizes(worker), state

        before = sizes()
        never_sent: list[str] = []
        for step, when in enumerate(plan):
            prompt = f"{when} ({step})"
            scope = CancelScope()
            aborted, length = aborts.count, len(s.history)
            if when == "before it is sent":
                scope.cancel("typed")
            if when == "while it waits":
                with worker_held(s):
                    pending = s.worker.ask(Submit(text=prompt, scope=scope), block=False)
                    scope.cancel("typed")
            else:
                if when == "while it streams":
                    holds[prompt] = threading.Event()
                pending = s.worker.ask(Submit(text=prompt, scope=scope), block=False)
            if when == "while it streams":
                wait_until(lambda: s.run_state().phase == "streaming")
                scope.cancel("typed")
                holds[prompt].set()
            turn = pending.get(timeout=WAIT)
            if when == "never":
                assert turn.status == "completed"
                assert [type(i).__name__ for i in turn.items] == ["UserMessage", "AssistantMessage"]
                assert asked(prompt) == 1
            elif when == "while it streams":
                assert (turn.status, turn.error) == ("cancelled", "typed")
                assert [type(i).__name__ for i in turn.items] == ["UserMessage"]
                assert aborts.count == aborted + 1
            else:
                assert (turn.status, turn.error, turn.items) == ("cancelled", "typed", ())
                assert (asked(prompt), aborts.count) == (0, aborted)
                never_sent.append(prompt)
            assert len(s.history) == length + len(turn.items)
            assert pairing_problems(s.history) == []
        assert sizes() == before
        assert [asked(prompt) for prompt in never_sent] == [0] * len(never_sent)  # nor late
