"""Attacks: the speculation controller crashes (its supervisor restarts it) at every phase.

Running, stopping (its worker stuck), settling (the pool busy), Tab waiting,
applying, inserting: after each, every overlay is gone (never while an apply
runs), the Tab and any held submit got an answer, the governor's slot is back,
no speculation worker is left, no file is applied without its history, and the
restarted controller serves the session as before (see :mod:`.attacks`).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fore.actors.core.logs import capture_logs
from fore.actors.llm import ScriptedModel
from fore.actors.speculation.controller import SpeculationController
from fore.messages.speculation import AcceptResult
from fore.supervision import Runtime
from tests.speculation.attacks import (
    AUTO_EDIT,
    BlockingDeploy,
    Held,
    HeldApply,
    answered_as_accepted,
    bump_replies,
    completed,
    controller_of,
    crash_controller,
    files_match_history,
    grep_until_cancelled,
    history_has_the_speculation,
    in_background,
    nothing_left,
    running_speculation,
    speculation_worker,
    tool_session,
)
from tests.speculation.test_speculation import (
    WAIT,
    main_reply,
    overlay_dirs,
    settled,
    wait_until,
)
from tests.speculation.test_speculation_accept import bump
from tests.worker.test_worker_lifecycle import worker_held

# -- what a crash lets go ------------------------------------------------------------------


def test_a_controller_crash_while_the_speculation_runs_lets_it_go_and_the_session_goes_on(
    rt: Runtime, ws: Path
) -> None:
    """RUNNING: the speculation's model request is in flight when the controller crashes.
    The crashed incarnation stops its worker and removes its overlay; the restarted one
    has no record of it and serves the session as before: turns, suggestions, Tab."""
    with bump_replies(
        main=["Hello.", "x is 1. Shall I bump it?", "fine", "x is 1."],
        suggestion=['{"suggestion": "bump x to 2"}'] * 3,
        speculation=[bump] * 4,
    ) as replies:
        model_request = replies.hold("speculation")
        s = running_speculation(rt, ws, replies)
        actors = len(rt.system.registry)  # the session's and the runtime's, and one speculation
        crash_controller(s)
        # the crashed incarnation let its speculation go: worker, slot, overlay
        nothing_left(rt, s.id)
        assert len(rt.system.registry) == actors - 1  # a new controller, no speculation
        model_request.set()  # the model answers a request nobody waits for any more
        assert (ws / "app.py").read_text() == "x = 1\n"
        # the restarted controller serves the session: a turn, a new suggestion, a Tab
        assert s.submit("go on", timeout=WAIT).items[-1].text == "fine"
        assert s.submit("what is x now?", timeout=WAIT).status == "completed"
        wait_until(lambda: s.speculation.state == "completed")
        result = s.accept(timeout=WAIT)
        assert result.outcome == "accepted", result
        assert (ws / "app.py").read_text() == "x = 2\n"
        files_match_history(s, ws)
        assert s.close(timeout=WAIT)
    nothing_left(rt)


def test_a_controller_crash_while_the_speculation_worker_is_stuck_kills_it(
    rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STOPPING: the worker's thread is stuck in a handler, so StopNow waits behind it; the
    controller crashes then. Its let-go kills the worker at its deadline and removes the
    overlay -- and the user's next turn does not wait for any of it."""
    monkeypatch.setattr(SpeculationController, "close_stop_timeout", 0.5)
    monkeypatch.setattr(SpeculationController, "settle_timeout", 0.5)
    with bump_replies(main=["Hello.", "x is 1. Shall I bump it?", "next turn"]) as replies:
        replies.hold("speculation")
        s = running_speculation(rt, ws, replies)
        worker = speculation_worker(s)
        with Held(worker):
            s.keystroke("no, something else")  # the abort: StopNow waits behind the hold
            wait_until(lambda: s.speculation.state == "aborted")
            crash_controller(s)
            # the next turn runs while the speculation's worker is still stuck
            assert s.submit("next", timeout=WAIT).items[-1].text == "next turn"
            wait_until(lambda: worker.has_exited)  # killed at the deadline
            nothing_left(rt, s.id)
        assert s.close(timeout=WAIT)


def test_a_controller_crash_while_the_tool_calls_settle_removes_the_overlay_after_them(
    rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SETTLING: the worker has exited, but the pool has not yet reported its cancelled
    call (the pool is busy); the controller crashes then. The overlay is removed only
    once the call is reported, and while the tool ran it could still see the overlay."""
    # The let-go's deadline (10 s) is not what this tests: on a loaded machine the hold
    # below can outlast it, and then the overlay goes at the deadline, as it should.
    monkeypatch.setattr(SpeculationController, "settle_timeout", 120.0)
    running = threading.Event()
    overlay_at_end: list[bool] = []
    tool = grep_until_cancelled(running, lambda: overlay_at_end.append(bool(overlay_dirs(rt))))
    s = tool_session(rt, ws, tool)
    assert running.wait(WAIT)
    worker = speculation_worker(s)
    with Held(rt.tool_pool._actor_weakref()):  # the pool cannot process the cancel yet
        s.keystroke("no")
        wait_until(lambda: worker.has_exited)
        crash_controller(s)
        assert len(overlay_dirs(rt)) == 1  # still settling: the call is not reported
    nothing_left(rt, s.id)
    assert overlay_at_end == [True]
    assert s.close(timeout=WAIT)


def test_a_controller_crash_whose_tool_call_never_settles_removes_the_overlay_at_the_deadline(
    rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SETTLING past the let-go's deadline: the pool holds the cancelled call's report
    longer than ``settle_timeout``. The overlay goes at the deadline all the same, and the
    log says which lease it stopped waiting for."""
    monkeypatch.setattr(SpeculationController, "settle_timeout", 0.5)
    running = threading.Event()
    tool = grep_until_cancelled(running)
    s = tool_session(rt, ws, tool)
    assert running.wait(WAIT)
    worker = speculation_worker(s)
    with capture_logs() as logs, Held(rt.tool_pool._actor_weakref()):
        s.keystroke("no")
        wait_until(lambda: worker.has_exited)
        crash_controller(s)
        wait_until(lambda: overlay_dirs(rt) == [])  # while the call is still unreported
        deadline = [e for e in logs if e["event"] == "speculation_cleanup_deadline"]
        assert [e["waiting"] for e in deadline] == [["tools"]]
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)


def test_a_controller_crash_while_tab_waits_for_the_run_applies_nothing(
    rt: Runtime, ws: Path
) -> None:
    """ACCEPTING: Tab waits for the running speculation when the controller crashes. The
    Tab is answered (not with an accept), the run is let go, nothing is applied."""
    with bump_replies(main=["Hello.", "x is 1. Shall I bump it?", "later"]) as replies:
        model_request = replies.hold("speculation")
        s = running_speculation(rt, ws, replies)
        tab, answers = in_background(lambda: s.accept(timeout=WAIT))
        wait_until(lambda: s.speculation.accepting)  # ACCEPTING: Tab waits for the run
        crash_controller(s)
        model_request.set()
        tab.join(WAIT)
        (answer,) = answers
        assert not isinstance(answer, AcceptResult) or answer.outcome != "accepted"
        nothing_left(rt, s.id)
        assert (ws / "app.py").read_text() == "x = 1\n"
        files_match_history(s, ws)
        assert s.submit("go on", timeout=WAIT).items[-1].text == "later"
        assert s.close(timeout=WAIT)


# -- never files without history -----------------------------------------------------------


def test_a_controller_crash_during_tabs_apply_leaves_no_files_without_history(
    rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """APPLYING: Tab's apply is held on the blocking lane when the controller crashes.
    The overlay stays under the apply; once it is done both the files and the
    transcript are in, and the Tab is answered with what landed (not the crash)."""
    held = HeldApply(monkeypatch)
    s = completed(rt, ws)
    thread, answers = in_background(lambda: s.accept(timeout=WAIT))
    try:
        assert held.reached.wait(WAIT)  # APPLYING: the apply runs on the lane
        crash_controller(s)
        # the overlay stays while the apply runs
        assert len(overlay_dirs(rt)) == 1
    finally:
        held.release.set()
    assert held.done.wait(WAIT)
    thread.join(WAIT)
    (answer,) = answers  # the Tab got one answer: the truth
    wait_until(lambda: history_has_the_speculation(s))
    answered_as_accepted(answer, s, ws)
    nothing_left(rt, s.id)
    # the session goes on after the restart
    assert s.submit("and now?", timeout=WAIT).status == "completed"
    files_match_history(s, ws)
    s.close()


def test_a_controller_crash_while_the_items_are_inserted_keeps_files_and_history_together(
    rt: Runtime, ws: Path
) -> None:
    """INSERTING: the apply is done and InsertItems waits at the (busy) main worker. The
    Tab is answered once the worker has the items, with what landed (not the crash)."""
    s = completed(rt, ws)
    with worker_held(s):
        thread, answers = in_background(lambda: s.accept(timeout=WAIT))
        wait_until(lambda: (ws / "app.py").read_text() == "x = 2\n")
        wait_until(lambda: len(s.worker._actor_weakref().actor_inbox) > 0)
        crash_controller(s)
        assert answers == []  # not before the worker has the items
    thread.join(WAIT)
    (answer,) = answers
    answered_as_accepted(answer, s, ws)
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)


def test_a_submit_held_behind_an_apply_still_runs_after_a_controller_crash(
    rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user submits a new prompt while Tab's apply runs (the submit is held until the
    accept's items are in); the controller crashes then. The session is alive (its
    controller was restarted), so the user's prompt must still run -- after the accept's
    items, never before them."""
    held = HeldApply(monkeypatch)
    s = completed(rt, ws, main_reply("ran your prompt"))
    tab, _answers = in_background(lambda: s.accept(timeout=WAIT))
    try:
        assert held.reached.wait(WAIT)
        prompt, results = in_background(lambda: s.submit("and the docs?", timeout=WAIT))
        wait_until(lambda: controller_of(s)._held != [])
        crash_controller(s)
    finally:
        held.release.set()
    tab.join(WAIT)
    prompt.join(WAIT)
    (result,) = results
    assert not isinstance(result, Exception), result
    assert result.items[-1].text == "ran your prompt"
    files_match_history(s, ws)
    assert s.close(timeout=WAIT)
    nothing_left(rt, s.id)


# -- what a restarted controller must remember ---------------------------------------------


@pytest.mark.parametrize(
    "crash",
    [
        pytest.param(False, id="no_crash"),
        pytest.param(True, id="after_a_crash"),
    ],
)
def test_a_narrowed_approval_mode_holds_for_speculation(crash: bool, rt: Runtime, ws: Path) -> None:
    """The session speculated edits (auto-edit); the user narrows the mode to default,
    where an edit asks first. A speculation must then stop at its edit (a boundary),
    never hold it for Tab to apply without asking -- also after its controller restarted."""
    main = ["Hello.", "x is 1. Shall I bump it?", "bumped"]
    with bump_replies(main=main) as replies:
        s = rt.open_session(workspace=ws, model=replies.model, speculation=AUTO_EDIT)
        s.set_approval_mode("default")
        assert s.speculation.state is not None  # (the controller has handled it)
        if crash:
            crash_controller(s)
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        status = s.speculation
        assert status.files_written == 0 and status.boundary_tool == "edit"
        assert s.close(timeout=WAIT)
    nothing_left(rt)


def test_a_crashed_controllers_own_callbacks_never_run_on_the_restarted_one(
    rt: Runtime, ws: Path
) -> None:
    """A continuation the controller posted to itself (a blocking result, a timer, an
    ask's answer) is queued behind the message that crashes it. It acts on the dead
    incarnation's state, so it goes with it: the restarted controller never runs it,
    while the mail sent to the session is carried over and answered."""
    s = rt.open_session(
        workspace=ws, model=ScriptedModel([main_reply("Hello.")]), speculation=AUTO_EDIT
    )
    old = controller_of(s)
    ran: list[str] = []

    def boom() -> None:
        raise RuntimeError("controller bug (test)")

    with Held(old):
        assert old.post(lambda: ran.append("the dead incarnation's callback"))
        prompt, results = in_background(lambda: s.submit("hi", timeout=WAIT))
        wait_until(lambda: len(old.actor_inbox) >= 2)
        assert old.post_urgent(boom)  # (control lane: ahead of the queued mail)
    wait_until(lambda: old.has_exited)
    prompt.join(WAIT)
    (result,) = results  # the session's mail was carried over to the new incarnation
    assert not isinstance(result, Exception) and result.items[-1].text == "Hello."
    assert controller_of(s) is not old
    assert ran == []
    assert s.close(timeout=WAIT)


def test_a_controller_crash_while_tab_waits_for_the_boundarys_continuation_answers_it(
    rt: Runtime, ws: Path
) -> None:
    """ACCEPTED: Tab on a speculation that stopped at a boundary has applied its files and
    inserted its transcript, and its answer waits for the continuation (the boundary call
    run for real) when the controller crashes. The accept has landed: the Tab is answered
    ``boundary`` then -- with its items, without the continuation's end -- not with the
    crash and not at its deadline; the continuation runs on and the session goes on."""
    deploy = BlockingDeploy()
    s = tool_session(rt, ws, deploy.tool, main_reply("deployed it"), main_reply("after the crash"))
    try:
        assert settled(s) == "boundary"
        # the caller's own deadline is three times the test's: it must not be the answer
        tab, answers = in_background(lambda: s.accept(timeout=3 * WAIT))
        assert deploy.deploying.wait(WAIT)  # ACCEPTED: the continuation runs the boundary call
        assert answers == []  # the Tab waits for it
        crash_controller(s)
        wait_until(lambda: answers != [])
        assert (
            deploy.deploying.is_set() and not deploy.done.is_set()
        )  # answered while it still runs
    finally:
        deploy.done.set()
    tab.join(WAIT)
    (answer,) = answers
    assert isinstance(answer, AcceptResult), answer
    assert answer.outcome == "boundary" and answer.turn is None
    assert answer.boundary_tool == "deploy" and answer.items_inserted == len(answer.items) > 0
    # the continuation ran on: its answer is in the history, then the next turn's
    wait_until(lambda: s.history[-1].text == "deployed it")
    assert s.submit("go on", timeout=WAIT).items[-1].text == "after the crash"
    assert not controller_of(s)._continuations
    nothing_left(rt, s.id)
    assert s.close(timeout=WAIT)
