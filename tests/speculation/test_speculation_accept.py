"""Accepting a speculation: Tab while it runs, typing while Tab waits, the pipelined
suggestion arriving late, continuing after a limit boundary, suggestions made during an
accept, and submitting the suggestion inside the accept debounce.

Real sessions on a FunctionModel whose replies a test can hold (``Replies.hold``):
ordering comes from events the test releases, never from sleeps or timings.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pykka
import pytest

from fore.actors.llm import ScriptedModel
from fore.actors.worker.state import pairing_problems
from fore.messages.conversation import ToolResult
from fore.messages.gate import ApprovalMode
from fore.messages.llm import LlmRequest
from fore.messages.speculation import AcceptResult, SpeculationFinished
from fore.supervision import Runtime
from tests.overlay.test_overlay_apply_failures import free_inodes, small_tmpfs
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    Replies,
    bump_script,
    call,
    main_reply,
    overlay_dirs,
    settled,
    spec,
    suggestion,
    wait_until,
)
from tests.worker.test_worker_lifecycle import worker_held

MAIN = ["Hello.", "x is 1. Shall I bump it?"]
SUGGEST = ['{"suggestion": "bump x to 2"}']
EDIT = {
    "text": "",
    "tool_calls": [call("edit", path="app.py", old_string="x = 1", new_string="x = 2")],
}


def last_text(request: LlmRequest) -> str:
    return str(getattr(request.messages[-1], "text", ""))


def bump(request: LlmRequest) -> Any:
    """The speculation of "bump x to 2": edit, then say so."""
    if isinstance(request.messages[-1], ToolResult):
        return "Bumped x to 2."
    return EDIT


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("alpha\n")
    return tmp_path


def accept_in_background(s: Any) -> tuple[threading.Thread, list[AcceptResult]]:
    results: list[AcceptResult] = []
    thread = threading.Thread(target=lambda: results.append(s.accept(timeout=WAIT)))
    thread.start()
    return thread, results


def finished(events: list[Any]) -> list[SpeculationFinished]:
    return [e for e in events if isinstance(e, SpeculationFinished)]


def test_tab_while_the_speculation_runs_waits_then_applies(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(main=MAIN, suggestion=SUGGEST, speculation=[bump, bump]) as replies:
        first_turn = replies.hold("speculation")
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(replies.seen("speculation")) == 1)
            thread, results = accept_in_background(s)
            wait_until(lambda: s.speculation.accepting)  # Tab is waiting for the run
            assert s.speculation.state == "running"
            assert (ws / "app.py").read_text() == "x = 1\n"
            first_turn.set()
            thread.join(WAIT)
            (result,) = results
            assert result.outcome == "accepted"
            assert result.files_applied == ("app.py",)
            assert (ws / "app.py").read_text() == "x = 2\n"
            assert s.history[-1].text == "Bumped x to 2."
            assert s.speculation.state == "accepted"
            assert not s.speculation.accepting
            assert not [r for r in replies.seen("main") if last_text(r) == "bump x to 2"]


def test_typing_while_tab_waits_does_not_abort_the_accepted_speculation(
    runtime: Runtime, ws: Path
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(main=MAIN, suggestion=SUGGEST, speculation=[bump, bump]) as replies:
        first_turn = replies.hold("speculation")
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(replies.seen("speculation")) == 1)
            s.drain_events()
            thread, results = accept_in_background(s)
            wait_until(lambda: s.speculation.accepting)
            s.keystroke("something else entirely")  # the user types while Tab waits
            first_turn.set()
            thread.join(WAIT)
            (result,) = results
            assert result.outcome == "accepted"
            assert (ws / "app.py").read_text() == "x = 2\n"
            wait_until(lambda: overlay_dirs(runtime) == [])
            reports = finished(s.drain_events())
            assert [r.outcome for r in reports] == ["accepted"]  # exactly one, not "failed"
            # the prompt did not also run normally
            assert not [r for r in replies.seen("main") if last_text(r) == "bump x to 2"]
            prompts = [i for i in s.history if getattr(i, "text", "") == "bump x to 2"]
            assert len(prompts) == 1  # inserted once


def test_completion_does_not_wait_for_the_pipelined_suggestion(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(
        main=MAIN,
        suggestion=SUGGEST,
        speculation=[bump, bump, "All tests pass."],
        pipelined=['{"suggestion": "run the tests"}'],
    ) as replies:
        slow_pipelined = replies.hold("pipelined")
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            # the transcript is done: completed, although the pipelined reply is held
            assert settled(s) == "completed"
            wait_until(lambda: len(replies.seen("pipelined")) == 1)
            assert s.speculation.next_suggestion is None
            result = s.accept(timeout=WAIT)  # applies at once
            assert result.outcome == "accepted" and result.next_suggestion is None
            assert (ws / "app.py").read_text() == "x = 2\n"
            assert s.speculation.state == "accepted"
            assert s.suggestion is None
            # the accepted speculation is cleaned up (its worker and overlay gone) first
            wait_until(lambda: overlay_dirs(runtime) == [])
            assert s.speculation.state == "accepted"  # a round trip through the supervisor
            slow_pipelined.set()  # it arrives after the accept: it becomes current then ...
            wait_until(lambda: s.suggestion == "run the tests")
            # ... and is speculated too (Tab-Tab-Tab goes on)
            wait_until(
                lambda: any(last_text(r) == "run the tests" for r in replies.seen("speculation"))
            )
            assert settled(s) == "completed"
            assert s.speculation.suggestion == "run the tests"


def test_a_late_pipelined_suggestion_is_dropped_once_the_user_typed(
    runtime: Runtime, ws: Path
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(
        main=MAIN,
        suggestion=SUGGEST,
        speculation=[bump, bump],
        pipelined=['{"suggestion": "run the tests"}'],
    ) as replies:
        slow_pipelined = replies.hold("pipelined")
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            settled(s)
            wait_until(lambda: len(replies.seen("pipelined")) == 1)
            assert s.accept(timeout=WAIT).outcome == "accepted"
            s.keystroke("my own next step")
            slow_pipelined.set()
            # a later marker: a normal turn's end, after which the late reply is long handled
            s.submit("my own next step", timeout=WAIT)
            assert s.suggestion is None
            speculated = [last_text(r) for r in replies.seen("speculation")]
            assert "run the tests" not in speculated


# -- boundaries that stopped between turns --


@pytest.mark.parametrize("limit", ["turn limit", "message limit"])
def test_tab_on_a_limit_boundary_continues_the_turn(runtime: Runtime, ws: Path, limit: str) -> None:
    config = (
        spec(max_turns=1)
        if limit == "turn limit"
        else spec(max_messages=2)  # user + call + result = 3 items
    )
    looks = {"text": "", "tool_calls": [call("list_directory")]}
    with (
        Replies(
            main=[*MAIN, "Listed: app.py and notes.txt."],
            suggestion=['{"suggestion": "list the files"}'],
            speculation=[looks, looks, looks],
        ) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        assert limit in (s.speculation.boundary_reason or "")
        result = s.accept(timeout=WAIT)
        assert result.outcome == "boundary"
        assert isinstance(result.items[-1], ToolResult)  # it stopped between turns
        # the real worker continued the turn through the normal flow
        assert result.turn is not None and result.turn.status == "completed"
        history = s.history
        assert history[-1].text == "Listed: app.py and notes.txt."
        assert pairing_problems(history) == []
        continued = replies.seen("main")[-1]
        assert isinstance(continued.messages[-1], ToolResult)  # no new user message


# -- suggestions made while an accept runs --


@pytest.mark.parametrize("how", ["no speculation", "conflict"])
def test_a_type_hint_after_a_normal_or_conflict_run_is_offered(
    runtime: Runtime, ws: Path, how: str
) -> None:
    hinted = main_reply("x is 5 already. Type `yes` to keep it.")
    if how == "no speculation":
        script = [*TWO_TURNS, {"when": {"purpose": "suggestion"}, "text": SUGGEST[0]}, hinted]
        config = spec(speculate=False)
    else:
        script = bump_script(hinted)
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.suggestion == "bump x to 2")
        if how == "conflict":
            settled(s)
            (ws / "app.py").write_text("x = 5\n")
        result = s.accept(timeout=WAIT)
        assert result.outcome == ("submitted" if how == "no speculation" else "conflict")
        assert result.turn is not None and result.turn.items[-1].text == hinted["text"]
        # the hint in the normal run's answer is the next suggestion
        wait_until(lambda: s.suggestion == "yes")


def test_submitting_the_suggestion_inside_the_accept_debounce_runs_it(
    runtime: Runtime, ws: Path
) -> None:
    """The debounce swallows a double Tab; an explicit submit is never a double press.

    Tab-Tab within the debounce: the second is ``debounced``. Submitting the
    (pipelined) suggestion's text at that moment takes the accept path.
    """
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT, accept_debounce_ms=3_600_000)
    with (
        Replies(
            main=MAIN,
            suggestion=SUGGEST,
            speculation=[bump, bump, "Tests pass."],
            pipelined=['{"suggestion": "run the tests"}'],
        ) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        wait_until(lambda: s.speculation.next_suggestion == "run the tests")
        assert s.accept(timeout=WAIT).outcome == "accepted"
        assert s.suggestion == "run the tests"
        assert s.accept(timeout=WAIT).outcome == "debounced"
        turn = s.submit("run the tests", timeout=WAIT)
        assert turn.status == "completed" and turn.error is None
        assert turn.items[-1].text == "Tests pass."


# -- a different submit, or a caller that gives up, while Tab waits --


def test_a_different_submit_while_tab_waits_calls_the_accept_off(
    runtime: Runtime, ws: Path
) -> None:
    """Never files without history: the user moved on, so the speculation is aborted
    (nothing applied), the accept says so, and the new prompt runs normally."""
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(
        main=[*MAIN, "Something else, done."], suggestion=SUGGEST, speculation=[bump, bump]
    ) as replies:
        first_turn = replies.hold("speculation")
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(replies.seen("speculation")) == 1)
            s.drain_events()
            thread, results = accept_in_background(s)
            wait_until(lambda: s.speculation.accepting)
            turn = s.submit("something else", timeout=WAIT)  # while Tab waits
            first_turn.set()
            thread.join(WAIT)
            (result,) = results
            assert result.outcome == "aborted" and result.files_applied == ()
            assert turn.status == "completed" and turn.items[-1].text == "Something else, done."
            assert (ws / "app.py").read_text() == "x = 1\n"  # nothing applied ...
            texts = [getattr(i, "text", "") for i in s.history]
            assert "bump x to 2" not in texts  # ... and nothing inserted
            assert pairing_problems(s.history) == []
            report = next(e for e in s.events(timeout=WAIT) if isinstance(e, SpeculationFinished))
            assert report.outcome == "aborted" and report.was_running is True
            wait_until(lambda: overlay_dirs(runtime) == [])


def test_an_accept_whose_caller_gave_up_is_aborted_not_applied_later(
    runtime: Runtime, ws: Path
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(main=MAIN, suggestion=SUGGEST, speculation=[bump, bump]) as replies:
        first_turn = replies.hold("speculation")
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(replies.seen("speculation")) == 1)
            s.drain_events()
            # The speculation is held: the caller gives up at its deadline. The
            # supervisor gives up on the accept at that same deadline, so the
            # caller sees either its own timeout or the supervisor's "aborted",
            # whichever comes first; what matters is what happens afterwards.
            try:
                gave_up = s.accept(timeout=0.2)
            except pykka.Timeout:
                pass
            else:
                assert gave_up.outcome == "aborted" and gave_up.files_applied == ()
            wait_until(lambda: s.speculation.state == "aborted")
            first_turn.set()  # the speculation could now finish: it must not be applied
            report = next(e for e in s.events(timeout=WAIT) if isinstance(e, SpeculationFinished))
            wait_until(lambda: overlay_dirs(runtime) == [])
            assert (ws / "app.py").read_text() == "x = 1\n"
            assert "bump x to 2" not in [getattr(i, "text", "") for i in s.history]
            assert report.outcome == "aborted"
            assert "stopped waiting" in (report.reason or "")


# -- the user's edits after the speculation started (issue 19, point 3) --

READ_APP = {"text": "", "tool_calls": [call("read_file", path="app.py")]}
REWRITE = {
    "text": "",
    "tool_calls": [call("write_file", path="app.py", content="x = 2\n")],
}
CAT_APP = {"text": "", "tool_calls": [call("shell", command="cat app.py")]}


def read_then_answer(request: LlmRequest) -> Any:
    """The main turn reads app.py, then answers."""
    if isinstance(request.messages[-1], ToolResult):
        return "x is 1. Shall I set it to 2?"
    return READ_APP


@pytest.mark.parametrize("how", ["from history", "after shell cat"])
def test_a_user_edit_after_the_start_is_never_overwritten_by_tab(
    runtime: Runtime, ws: Path, how: str
) -> None:
    """The main turn read app.py; the speculation starts; the user edits app.py; the
    speculation then rewrites it -- from history, or after reading it with ``shell
    cat`` (which the overlay does not see). Tab must not replace the user's edit."""
    user_edited = threading.Event()
    speculation_waits = threading.Event()

    def rewrite(request: LlmRequest) -> Any:
        speculation_waits.set()
        user_edited.wait(WAIT)  # the user edits while the speculation works
        return REWRITE

    first = CAT_APP if how == "after shell cat" else rewrite
    replies_after = [rewrite, "Set x to 2."] if how == "after shell cat" else ["Set x to 2."]
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with (
        Replies(
            main=["Hello.", read_then_answer, read_then_answer, "Done as asked."],
            suggestion=['{"suggestion": "set x to 2"}'],
            speculation=[first, *replies_after],
        ) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert speculation_waits.wait(WAIT)
        (ws / "app.py").write_text("x = 1  # the user's comment\n")
        user_edited.set()
        assert settled(s) == "completed"
        result = s.accept(timeout=WAIT)
        assert result.outcome == "conflict", result
        assert result.conflicts == ("app.py",)
        assert result.files_applied == ()
        assert (ws / "app.py").read_text() == "x = 1  # the user's comment\n"
        if how == "after shell cat":
            cat = [i for i in replies.seen("speculation")[1].messages if isinstance(i, ToolResult)]
            assert "x = 1" in cat[-1].output  # it did read the file first
        wait_until(lambda: overlay_dirs(runtime) == [])


# -- a failed apply (issue 19, point 4) --


def fail_syscalls(monkeypatch: pytest.MonkeyPatch, *points: str) -> None:
    """Make these changes of the next applies fail (``syscall:path``)."""
    from fore.actors.overlay import apply as apply_module

    def fault(syscall: str, rel: str) -> None:
        if f"{syscall}:{rel}" in points:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(apply_module, "SYSCALL_FAULT", fault)


def edit_both(request: LlmRequest) -> Any:
    if isinstance(request.messages[-1], ToolResult):
        return "Bumped both."
    return {
        "text": "",
        "tool_calls": [
            call("write_file", path="app.py", content="x = 2\n"),
            call("write_file", path="notes.txt", content="beta\n"),
        ],
    }


def test_a_failed_apply_is_rolled_back_and_the_suggestion_runs_normally(
    runtime: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with (
        Replies(
            main=[*MAIN, "Ran it normally."],
            suggestion=SUGGEST,
            speculation=[edit_both, edit_both],
        ) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        fail_syscalls(monkeypatch, "replace:notes.txt")  # after app.py was replaced
        result = s.accept(timeout=WAIT)
        assert result.outcome == "failed"
        assert result.files_applied == ()  # rolled back: nothing changed ...
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert (ws / "notes.txt").read_text() == "alpha\n"
        assert [p for p in os.listdir(ws) if ".fore-" in p] == []
        # ... so the suggestion ran as a normal turn on the intact tree
        assert result.turn is not None and result.turn.items[-1].text == "Ran it normally."
        wait_until(lambda: overlay_dirs(runtime) == [])


def test_a_half_applied_tree_is_reported_and_never_built_upon(
    runtime: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apply fails and so does undoing app.py: the accept says exactly that app.py
    changed, raises an error alert, and does not run the suggestion on top."""
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with (
        Replies(
            main=[*MAIN, "Ran it normally."],
            suggestion=SUGGEST,
            speculation=[edit_both, edit_both],
        ) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        fail_syscalls(monkeypatch, "replace:notes.txt", "restore:app.py")
        result = s.accept(timeout=WAIT)
        assert result.outcome == "failed"
        assert result.files_applied == ("app.py",)
        assert (ws / "app.py").read_text() == "x = 2\n"
        assert (ws / "notes.txt").read_text() == "alpha\n"
        assert [p for p in os.listdir(ws) if ".fore-" in p] == []
        assert result.turn is None
        assert not [r for r in replies.seen("main") if last_text(r) == "bump x to 2"]
        assert any(a.level == "error" and "app.py" in a.text for a in s.alerts)
        wait_until(lambda: overlay_dirs(runtime) == [])


@pytest.mark.parametrize("room", [2, 3])
def test_a_full_disk_during_the_accept_leaves_the_tree_as_it_was(
    runtime: Runtime, tmp_path: Path, room: int
) -> None:
    """No fault seam: a 64-inode tmpfs runs out during the apply. With room for the
    two staged copies only, the link keeping app.py fails before the commit point
    (before this fix: the new directory failed after it, the speculator crashed on
    the failure and the tree stayed half-applied); with room for the link too, the
    new directory fails after the commit point and the apply is rolled back.
    Either way Tab answers ``failed`` with nothing changed and nothing left over."""
    with small_tmpfs(tmp_path / "tiny") as mount:
        ws = mount / "ws"
        ws.mkdir()
        (ws / "app.py").write_text("x = 1\n")

        def create_and_edit(request: LlmRequest) -> Any:
            if isinstance(request.messages[-1], ToolResult):
                return "Done."
            return {
                "text": "",
                "tool_calls": [
                    call("write_file", path="0new/x.txt", content="x\n"),
                    call("write_file", path="app.py", content="x = 2\n"),
                ],
            }

        config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
        with (
            Replies(
                main=[*MAIN, "Ran it normally."],
                suggestion=SUGGEST,
                speculation=[create_and_edit, create_and_edit],
            ) as replies,
            runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s,
        ):
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            assert settled(s) == "completed"
            # Staging copies two files and keeps app.py by a link (a tmpfs counts
            # links too): leave ``room`` for them, none for the new directory.
            filler = 0
            while free_inodes(mount) > room:
                (ws / f".filler{filler}").write_bytes(b"")
                filler += 1
            result = s.accept(timeout=WAIT)
            assert result.outcome == "failed"
            assert result.files_applied == ()
            assert (ws / "app.py").read_text() == "x = 1\n"
            assert not (ws / "0new").exists()
            assert [p for p in os.listdir(ws) if ".fore-" in p] == []
            wait_until(lambda: overlay_dirs(runtime) == [])


def test_ctrl_c_cancels_a_tabs_normal_run_even_before_the_worker_has_it(
    runtime: Runtime, ws: Path
) -> None:
    """Tab with no speculation submits the suggestion as a normal run, under a child of the
    accept's scope: a cancel that comes while that submit still waits for the worker ends
    it unstarted (the scope is the record; nobody remembers submit ids)."""
    model = ScriptedModel([*TWO_TURNS, suggestion("bump x to 2"), main_reply("never asked")])
    with runtime.open_session(workspace=ws, model=model, speculation=spec(speculate=False)) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.suggestion == "bump x to 2")
        worker = s.worker._actor_weakref()
        out: dict[str, AcceptResult] = {}
        with worker_held(s):  # the Tab's submit waits in the worker's mailbox
            tab = threading.Thread(target=lambda: out.update(result=s.accept(timeout=WAIT)))
            tab.start()
            wait_until(lambda: len(worker.actor_inbox) == 1)
            (scope,) = s._pending  # the accept's
            s.cancel("Ctrl-C")
            assert scope.cancel_called
        tab.join(WAIT)
        result = out["result"]
        assert result.outcome == "submitted" and result.turn is not None
        assert (result.turn.status, result.turn.error, result.turn.items) == (
            "cancelled",
            "Ctrl-C",
            (),
        )
        assert len(s.history) == 4  # the two turns: nothing of the Tab's run
        assert not s._pending
