"""Attacks: the user's keys racing the controller and the speculation's own end.

Tab then a key, a key then Tab, Tab then Ctrl-C, two Tabs, Tab and the run's
answer in either order (completed, boundary, failed), the user editing a file
the speculation wrote (before Tab, while Tab waits, during the apply), a key
while the accepted items are inserted. Each race is made exact by holding the
controller's thread while the messages queue (see :mod:`.attacks`).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fore.messages.conversation import ToolResult
from fore.messages.llm import LlmRequest
from fore.messages.speculation import AcceptResult
from fore.supervision import Runtime
from tests.speculation.attacks import (
    AUTO_EDIT,
    Held,
    HeldApply,
    bump_replies,
    completed,
    controller_of,
    files_match_history,
    history_has_the_speculation,
    in_background,
    nothing_left,
    queued_at,
    queued_kinds,
    run_over,
    running_speculation,
    speculation_worker,
)
from tests.speculation.test_speculation import (
    WAIT,
    call,
    wait_until,
)
from tests.speculation.test_speculation_accept import bump
from tests.worker.test_worker_lifecycle import worker_held

# -- the order of the user's keys ----------------------------------------------------------


def test_a_key_typed_after_tab_does_not_overtake_it(rt: Runtime, ws: Path) -> None:
    """The user presses Tab, then starts typing the next prompt, while the controller is
    busy. The keys must take effect in the order they were pressed: the Tab accepts the
    speculation, and the keystroke after it no longer aborts what is being accepted."""
    s = completed(rt, ws)
    controller = controller_of(s)
    with Held(controller):
        tab, answers = in_background(lambda: s.accept(timeout=WAIT))
        queued_at(controller, "AcceptSuggestion")  # Tab first ...
        s.keystroke("now run the tests")  # ... then a key
    tab.join(WAIT)
    (result,) = answers
    assert isinstance(result, AcceptResult)
    assert result.outcome == "accepted", result
    assert (ws / "app.py").read_text() == "x = 2\n"
    files_match_history(s, ws)
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)


def test_a_key_typed_after_submitting_the_suggestion_does_not_overtake_it(
    rt: Runtime, ws: Path
) -> None:
    """The user types the suggestion's text and presses Enter, then starts typing while
    the controller is busy: the submit takes the accept path (the speculation's work is
    applied), as it would had the key come later."""
    s = completed(rt, ws)
    controller = controller_of(s)
    with Held(controller):
        enter, answers = in_background(lambda: s.submit("bump x to 2", timeout=WAIT))
        queued_at(controller, "SubmitPrompt")  # the submit first ...
        s.keystroke("now run the tests")  # ... then a key
    enter.join(WAIT)
    (turn,) = answers
    assert turn.status == "completed", turn
    assert (ws / "app.py").read_text() == "x = 2\n"
    files_match_history(s, ws)
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)


def test_a_key_typed_before_tab_wins(rt: Runtime, ws: Path) -> None:
    """A key that does not continue the suggestion, then Tab: the key aborts the
    speculation first, and Tab finds nothing on offer."""
    s = completed(rt, ws)
    controller = controller_of(s)
    with Held(controller):
        s.keystroke("no")  # the key first ...
        tab, answers = in_background(lambda: s.accept(timeout=WAIT))
        queued_at(controller, "AcceptSuggestion")  # ... then Tab
    tab.join(WAIT)
    (result,) = answers
    assert result.outcome == "no_suggestion"
    assert (ws / "app.py").read_text() == "x = 1\n"
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)


def test_a_cancel_after_tab_calls_the_tab_off(rt: Runtime, ws: Path) -> None:
    """The user presses Tab, then Ctrl-C (``Session.cancel()``) while the controller is
    busy: the cancel must reach the Tab it follows -- nothing applied, the Tab answers
    ``aborted`` -- rather than overtake it and let it apply afterwards."""
    with bump_replies() as replies:
        model_request = replies.hold("speculation")
        s = running_speculation(rt, ws, replies)
        controller = controller_of(s)
        with Held(controller):
            tab, answers = in_background(lambda: s.accept(timeout=WAIT))
            queued_at(controller, "AcceptSuggestion")  # Tab first ...
            s.cancel()  # ... then Ctrl-C
            model_request.set()
        tab.join(WAIT)
        (result,) = answers
        assert result.outcome == "aborted", result
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert s.close(timeout=WAIT)
    nothing_left(rt)


def test_two_tabs_queued_together_accept_once(rt: Runtime, ws: Path) -> None:
    """A double press: the first Tab accepts; the second is debounced or finds nothing
    on offer, and the transcript goes into history once."""
    s = completed(rt, ws)
    controller = controller_of(s)
    with Held(controller):
        first = in_background(lambda: s.accept(timeout=WAIT))
        queued_at(controller, "AcceptSuggestion")
        second = in_background(lambda: s.accept(timeout=WAIT))
        queued_at(controller, "AcceptSuggestion", 2)
    outcomes = []
    for thread, answers in (first, second):
        thread.join(WAIT)
        (result,) = answers
        outcomes.append(result.outcome)
    assert outcomes[0] == "accepted"
    assert outcomes[1] in ("debounced", "no_suggestion")
    assert (ws / "app.py").read_text() == "x = 2\n"
    assert sum(1 for i in s.history if getattr(i, "text", "") == "Bumped x to 2.") == 1
    assert s.close(timeout=WAIT)  # (the pipelined suggestion's speculation runs meanwhile)
    nothing_left(rt, s.id)


def test_a_keystroke_while_the_items_are_inserted_changes_nothing_accepted(
    rt: Runtime, ws: Path
) -> None:
    """INSERTING: the files are applied and the items are on their way to the (busy)
    worker when the user types. The accept completes; the typing only withdraws the
    pipelined suggestion."""
    s = completed(rt, ws)
    with worker_held(s):
        tab, answers = in_background(lambda: s.accept(timeout=WAIT))
        wait_until(lambda: (ws / "app.py").read_text() == "x = 2\n")
        wait_until(lambda: len(s.worker._actor_weakref().actor_inbox) > 0)  # InsertItems
        assert s.speculation.accepting  # INSERTING
        s.keystroke("something else")
        s.keystroke("")
    tab.join(WAIT)
    (result,) = answers
    assert result.outcome == "accepted", result
    files_match_history(s, ws)
    assert s.suggestion is None  # the user typed: the pipelined suggestion is not shown
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)


# -- Tab and the run's end -----------------------------------------------------------------


@pytest.mark.parametrize("end", ["completed", "boundary", "failed"])
@pytest.mark.parametrize("order", ["tab_first", "end_first"])
def test_tab_racing_the_speculations_own_end(end: str, order: str, rt: Runtime, ws: Path) -> None:
    """Tab and the run's answer both wait in the controller's mailbox, in either order."""

    def speculation(request: LlmRequest) -> Any:
        if end == "failed":
            raise RuntimeError("the model broke")
        if end == "boundary":
            return {"text": "", "tool_calls": [call("shell", command="touch made.txt")]}
        return bump(request)

    main = ["Hello.", "x is 1. Shall I bump it?", "ran it for real", "made it"]
    with bump_replies(main=main, speculation=[speculation] * 3) as replies:
        model_request = replies.hold("speculation")
        s = running_speculation(rt, ws, replies)
        worker = speculation_worker(s)
        controller = controller_of(s)
        with Held(controller):
            if order == "tab_first":
                tab, answers = in_background(lambda: s.accept(timeout=WAIT))
                queued_at(controller, "AcceptSuggestion")
                model_request.set()
                wait_until(lambda: run_over(worker))
            else:
                model_request.set()
                wait_until(lambda: run_over(worker))
                tab, answers = in_background(lambda: s.accept(timeout=WAIT))
                wait_until(lambda: "AcceptSuggestion" in queued_kinds(controller))
        tab.join(WAIT)
        (result,) = answers
        assert isinstance(result, AcceptResult), result
        if end == "completed":
            assert result.outcome == "accepted", result
            assert (ws / "app.py").read_text() == "x = 2\n"
            files_match_history(s, ws)
        elif end == "boundary":
            assert result.outcome == "boundary", result
            assert (ws / "made.txt").exists()  # the boundary call ran for real after Tab
        else:
            # Tab waiting for it: "failed"; Tab after it had failed (no longer offered): a
            # normal turn. Which one depends on the lanes; either way it runs normally.
            assert result.outcome in ("failed", "submitted"), result
            assert result.turn is not None and result.turn.items[-1].text == "ran it for real"
            assert (ws / "app.py").read_text() == "x = 1\n"
        nothing_left(rt, s.id)
        assert s.close(timeout=WAIT)


# -- the user's edit wins ------------------------------------------------------------------


@pytest.mark.parametrize("when", ["before_tab", "while_tab_waits", "while_applying"])
def test_the_users_edit_of_a_file_the_speculation_wrote_wins(
    when: str, rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user edits app.py after the speculation wrote it -- before Tab, while Tab
    waits for the run, or during the apply (after staging, before the re-check): it is
    a conflict, the user's version stays and nothing of the speculation goes in."""
    held = HeldApply(monkeypatch)
    if when != "while_applying":
        held.release.set()
    main = ["Hello.", "x is 1. Shall I bump it?", "ran it on your version"]
    wrote, model_request = threading.Event(), threading.Event()

    def bump_then_wait(request: LlmRequest) -> Any:
        """The speculation edits app.py, then its second request waits for the test."""
        if isinstance(request.messages[-1], ToolResult):
            wrote.set()
            model_request.wait(WAIT)
        return bump(request)

    with bump_replies(main=main, speculation=[bump_then_wait] * 2) as replies:
        replies.held.append(model_request)
        s = rt.open_session(workspace=ws, model=replies.model, speculation=AUTO_EDIT)
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert wrote.wait(WAIT)  # the speculation has written app.py into its overlay
        if when == "before_tab":
            model_request.set()
            wait_until(lambda: s.speculation.state == "completed")
            (ws / "app.py").write_text("x = 42  # the user's\n")
            tab, answers = in_background(lambda: s.accept(timeout=WAIT))
        elif when == "while_tab_waits":
            tab, answers = in_background(lambda: s.accept(timeout=WAIT))
            wait_until(lambda: s.speculation.accepting)
            (ws / "app.py").write_text("x = 42  # the user's\n")
            model_request.set()
        else:
            model_request.set()
            wait_until(lambda: s.speculation.state == "completed")
            tab, answers = in_background(lambda: s.accept(timeout=WAIT))
            assert held.reached.wait(WAIT)  # staged, before the re-check
            (ws / "app.py").write_text("x = 42  # the user's\n")
            held.release.set()
        tab.join(WAIT)
        (result,) = answers
        assert result.outcome == "conflict", result
        assert result.conflicts == ("app.py",)
        assert (ws / "app.py").read_text() == "x = 42  # the user's\n"
        assert not history_has_the_speculation(s)
        nothing_left(rt, s.id)
        assert s.close(timeout=WAIT)
