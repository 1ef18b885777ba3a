"""A run's status is its phase alone, and the worker only makes the moves the table allows.

The table (``actors/worker/run_state.py``) is checked on its own -- its shape,
and a property test that :class:`RunProgress` accepts exactly its moves and
derives ``ended`` / ``aborted`` from the phase -- and then against a real
worker: runs through hooks, a pause, tools, stored outputs, a cancel and a
session close record every move they make, and each one is in the table
(the worker raises on any other, so every worker test checks it too).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from fore.actors.llm import ScriptedModel
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker import run_state
from fore.actors.worker.hooks import Hooks, Pause, ToolCallContext
from fore.actors.worker.run_state import (
    ALLOWED,
    PHASES,
    Ending,
    PhaseError,
    RunPhase,
    RunProgress,
    check_move,
)
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.testing import RecordingHook
from fore.messages.session import Submit
from fore.supervision import Runtime

WAIT = 20.0

Move = tuple[RunPhase, RunPhase]


# -- the table -----------------------------------------------------------------------


def reachable(start: RunPhase) -> set[RunPhase]:
    seen = {start}
    todo = [start]
    while todo:
        for nxt in ALLOWED[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_table_names_every_phase_and_only_phases() -> None:
    assert set(ALLOWED) == set(PHASES)
    for targets in ALLOWED.values():
        assert targets <= set(PHASES)


def test_ended_is_final_and_on_abort_only_ends() -> None:
    assert ALLOWED["ended"] == frozenset()
    assert ALLOWED["on_abort"] == frozenset({"ended"})


def test_every_phase_is_reachable_and_every_run_can_end() -> None:
    assert reachable("starting") == set(PHASES)
    for phase in PHASES:
        if phase != "ended":
            assert "ended" in ALLOWED[phase], phase


def test_on_abort_follows_every_phase_that_has_the_user_message_in_history() -> None:
    # preparing: nothing of the run is in history yet, so it never gets on_abort.
    never = {"preparing", "on_abort", "ended"}
    for phase in PHASES:
        assert ("on_abort" in ALLOWED[phase]) == (phase not in never), phase


def test_a_run_never_goes_back_to_its_start() -> None:
    for phase in PHASES:
        assert "starting" not in ALLOWED[phase]
        if phase != "starting":
            assert "preparing" not in ALLOWED[phase], phase
        if phase != "preparing":
            assert "on_prompt_submit" not in ALLOWED[phase], phase
    # The request is sent only after its pre_llm_request hooks.
    assert [p for p in PHASES if "streaming" in ALLOWED[p]] == ["pre_llm_request"]


def test_check_move_refuses_what_the_table_does_not_list() -> None:
    check_move("starting", "preparing")
    with pytest.raises(PhaseError, match="'ended' to 'starting'"):
        check_move("ended", "starting")
    with pytest.raises(PhaseError):
        check_move("on_abort", "tools")


# -- RunProgress follows the table (property) ---------------------------------------------

_STATUS = st.sampled_from(["aborted", "cancelled", "error", "interrupted", "rejected"])
_STEP = st.one_of(
    st.tuples(st.just("phase"), st.sampled_from(PHASES)),
    st.tuples(st.just("begin_ending"), _STATUS),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=30))
def test_run_progress_accepts_exactly_the_tables_moves(steps: list[tuple[str, str]]) -> None:
    run = RunProgress()
    phase: RunPhase = "starting"
    ending: Ending | None = None
    for kind, value in steps:
        if kind == "phase":
            new: RunPhase = value  # type: ignore[assignment]
            legal = new != "on_abort" and new in ALLOWED[phase]
            if legal:
                run.phase = new
                phase = new
            else:
                with pytest.raises(PhaseError):
                    run.phase = new
        else:
            legal = "on_abort" in ALLOWED[phase]
            if legal:
                run.begin_ending(value, f"because {value}")  # type: ignore[arg-type]
                phase = "on_abort"
                ending = Ending(value, f"because {value}")  # type: ignore[arg-type]
            else:
                with pytest.raises(PhaseError):
                    run.begin_ending(value, "late")  # type: ignore[arg-type]
        # The status is kept once: everything else is read from the phase.
        assert run.phase == phase
        assert run.ended == (phase == "ended")
        assert run.aborted == (phase == "on_abort")
        assert run.ending == ending
        assert not (run.ended and run.aborted)


_SAVE_STEP = st.one_of(
    _STEP,
    st.tuples(st.just("save_end"), _STATUS),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_SAVE_STEP, max_size=30))
def test_liveness_and_the_final_ending_are_read_from_the_record(
    steps: list[tuple[str, str]],
) -> None:
    """``live``, ``closing`` and ``final`` are derived, never kept beside the phase."""
    run = RunProgress()
    saved: Ending | None = None
    for kind, value in steps:
        before = run.phase
        try:
            if kind == "phase":
                run.phase = value  # type: ignore[assignment]
            elif kind == "begin_ending":
                run.begin_ending(value, value)  # type: ignore[arg-type]
            else:
                run.save_end(Ending(value, value))  # type: ignore[arg-type]
                saved = Ending(value, value)  # type: ignore[arg-type]
                # Its end is being saved: to saving where the table allows it.
                if before != "saving" and "saving" in ALLOWED[before]:
                    assert run.phase == "saving"
                else:
                    assert run.phase == before
        except PhaseError:
            continue
        ended = run.phase == "ended"
        closing = not ended and (run.phase == "on_abort" or saved is not None)
        assert run.end_save == saved
        assert run.closing == closing
        assert run.live == (not ended and not closing)
        assert run.final == (saved or run.ending)


# -- the worker's moves -------------------------------------------------------------------


@pytest.fixture
def moves(monkeypatch: pytest.MonkeyPatch) -> list[Move]:
    """Every phase move any run makes while the test runs (each still checked)."""
    seen: list[Move] = []
    lock = threading.Lock()
    check = run_state.check_move

    def recording(old: RunPhase, new: RunPhase) -> None:
        with lock:
            seen.append((old, new))
        check(old, new)

    monkeypatch.setattr(run_state, "check_move", recording)
    return seen


class BigArgs(BaseModel):
    size: int = 5000


def big_tool() -> FunctionTool[BigArgs]:
    def run(args: BigArgs, ctx: ToolContext) -> str:
        return "x" * args.size

    return FunctionTool("big", "a large output", BigArgs, run)


def reply(text: str = "", *calls: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def test_a_run_through_hooks_a_pause_tools_and_stored_outputs_moves_by_the_table(
    runtime: Runtime, tmp_path: Path, moves: list[Move]
) -> None:
    hooks = Hooks()
    paused_once: list[str] = []

    def pause_first(ctx: ToolCallContext) -> Pause | None:
        if not paused_once:
            paused_once.append(ctx.call_id)
            return Pause("look first")
        return None

    hooks.on_prompt_submit(RecordingHook(name="submit"))
    hooks.pre_llm_request(RecordingHook(name="request"))
    hooks.pre_tool_call(pause_first)
    hooks.post_tool_call(RecordingHook(name="post"))
    hooks.on_turn_end(RecordingHook(name="end"))
    model = ScriptedModel([reply("", {"name": "big", "arguments": {}}), reply("done")])
    with runtime.open_session(
        workspace=tmp_path, model=model, hooks=hooks, tools=[big_tool()]
    ) as s:
        first = s.submit("go", timeout=WAIT)
        assert first.status == "paused"
        assert s.run_state().phase == "paused"
        turn = s.resume(timeout=WAIT)
        assert turn.status == "completed"
        assert pairing_problems(s.history) == []
    assert all(new in ALLOWED[old] for old, new in moves)
    assert [new for _, new in moves] == [
        "preparing",
        "on_prompt_submit",
        "pre_llm_request",
        "streaming",
        "pre_tool_call",
        "paused",
        "pre_tool_call",  # resumed at the call
        "pre_tool_call",  # its hooks, after the one that paused
        "tools",
        "post_tool_call",
        "storing outputs",
        "pre_llm_request",
        "streaming",
        "on_turn_end",
        "ended",
    ]


def test_a_cancelled_run_ends_through_on_abort(
    runtime: Runtime, tmp_path: Path, moves: list[Move]
) -> None:
    entered = threading.Event()
    release = threading.Event()

    def hold(ctx: Any) -> None:
        entered.set()
        release.wait(WAIT)

    hooks = Hooks()
    hooks.pre_llm_request(hold)
    on_abort = RecordingHook(name="on_abort")
    hooks.on_abort(on_abort)
    with runtime.open_session(
        workspace=tmp_path, model=ScriptedModel([reply("x")]), hooks=hooks
    ) as s:
        pending = s.worker.ask(Submit(text="go"), block=False)
        try:
            assert entered.wait(WAIT)
            s.cancel("user typed")
        finally:
            release.set()
        turn = pending.get(timeout=WAIT)
        assert turn.status == "cancelled"
        assert on_abort.count == 1
    assert moves[-2:] == [("pre_llm_request", "on_abort"), ("on_abort", "ended")]


def test_a_session_closed_under_a_run_ends_it_through_on_abort(
    runtime: Runtime, tmp_path: Path, moves: list[Move]
) -> None:
    """The close path (``_abort_detached``) once set its flag without the phase."""
    entered = threading.Event()
    release = threading.Event()

    def hold(ctx: Any) -> None:
        entered.set()
        release.wait(WAIT)

    hooks = Hooks()
    hooks.on_turn_end(hold)
    on_abort = RecordingHook(name="on_abort")
    hooks.on_abort(on_abort)
    s = runtime.open_session(workspace=tmp_path, model=ScriptedModel([reply("x")]), hooks=hooks)
    try:
        pending = s.worker.ask(Submit(text="go"), block=False)
        assert entered.wait(WAIT)
        assert s.close(timeout=WAIT)
        turn = pending.get(timeout=WAIT)
    finally:
        release.set()
    assert turn.status == "cancelled" and turn.error == "session closed"
    assert moves[-2:] == [("on_turn_end", "on_abort"), ("on_abort", "ended")]
    # Its on_abort hook runs detached, once, after the worker stopped.
    deadline = time.monotonic() + WAIT
    while on_abort.count == 0:
        assert time.monotonic() < deadline, "the detached on_abort hook never ran"
        time.sleep(0.005)
    assert on_abort.count == 1
