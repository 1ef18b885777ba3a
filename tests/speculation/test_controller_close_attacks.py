"""Attacks: the session or the runtime closes at every phase of a speculation.

``Session.close()`` and ``Runtime.close()`` return only once every overlay is
gone (never removed under an apply), ``Runtime.overlays_left`` stays empty,
every caller is answered; a stored session closed under Tab's apply must not
come back with files its history does not explain (see :mod:`.attacks`).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import ScriptedModel
from fore.actors.speculation.controller import SpeculationController
from fore.actors.speculation.governor import LoadGovernor
from fore.messages.speculation import AcceptResult
from fore.supervision import Runtime
from tests.speculation.attacks import (
    BlockingDeploy,
    Held,
    HeldApply,
    answered_as_accepted,
    bump_replies,
    completed,
    controller_of,
    grep_until_cancelled,
    in_background,
    nothing_left,
    running_speculation,
    session_gone,
    speculation_worker,
    tool_session,
)
from tests.speculation.test_speculation import (
    WAIT,
    main_reply,
    overlay_dirs,
    wait_until,
)
from tests.worker.test_worker_lifecycle import worker_held

PHASES = ("running", "stopping", "settling", "applying", "inserting")


HELD_BY_THE_CLOSE = ("applying", "inserting")


"""Phases the close itself waits out (the apply, or the worker's stop behind the insert)."""


def put_in_phase(
    phase: str,
    rt: Runtime,
    ws: Path,
    stack: contextlib.ExitStack,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, list[tuple[threading.Thread, list[Any]]]]:
    """A session with a speculation in ``phase``, held there until ``stack`` closes.

    Returns the session and the callers (threads) whose answers are due.
    """
    callers: list[tuple[threading.Thread, list[Any]]] = []
    if phase == "applying":
        held = HeldApply(monkeypatch)
        stack.callback(held.release.set)
        s = completed(rt, ws)
        callers.append(in_background(lambda: s.accept(timeout=WAIT)))
        assert held.reached.wait(WAIT)
        return s, callers
    if phase == "inserting":
        s = completed(rt, ws)
        stack.enter_context(worker_held(s))
        callers.append(in_background(lambda: s.accept(timeout=WAIT)))
        wait_until(lambda: (ws / "app.py").read_text() == "x = 2\n")
        wait_until(lambda: len(s.worker._actor_weakref().actor_inbox) > 0)
        return s, callers
    if phase == "settling":
        running = threading.Event()
        s = tool_session(rt, ws, grep_until_cancelled(running))
        assert running.wait(WAIT)
        worker = speculation_worker(s)
        stack.enter_context(Held(rt.tool_pool._actor_weakref()))
        s.keystroke("no")
        wait_until(lambda: worker.has_exited)
        return s, callers
    replies = stack.enter_context(bump_replies())
    replies.hold("speculation")
    s = running_speculation(rt, ws, replies)
    if phase == "stopping":
        stack.enter_context(Held(speculation_worker(s)))
        s.keystroke("no, something else")
        wait_until(lambda: s.speculation.state == "aborted")
    return s, callers


def never_under_an_apply(phase: str, rt: Runtime, controller: SpeculationController) -> None:
    """While Tab's apply is held, the stopped controller has left the overlay alone."""
    if phase != "applying":
        return
    wait_until(lambda: controller.has_exited)
    rt.system.blocking.submit(lambda: None).result(WAIT)  # what it queued before has run
    assert len(overlay_dirs(rt)) == 1


@pytest.mark.parametrize("closer", ["session", "runtime"])
@pytest.mark.parametrize("phase", PHASES)
def test_a_close_at_each_phase_returns_once_every_overlay_is_gone(
    phase: str, closer: str, rt: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Session.close()`` / ``Runtime.close()`` return True only once the overlay is gone
    -- gone while what holds the speculation is still held, except where the close itself
    must wait (an apply, the worker's stop behind an insert) -- every caller is answered,
    and the runtime names nothing in ``overlays_left``."""
    monkeypatch.setattr(SpeculationController, "close_stop_timeout", 0.5)
    monkeypatch.setattr(SpeculationController, "settle_timeout", 0.5)
    with contextlib.ExitStack() as stack:
        s, callers = put_in_phase(phase, rt, ws, stack, monkeypatch)
        controller = controller_of(s)
        close = s.close if closer == "session" else rt.close
        closing, closes = in_background(lambda: close(timeout=WAIT))
        never_under_an_apply(phase, rt, controller)
        if phase not in HELD_BY_THE_CLOSE:
            wait_until(lambda: overlay_dirs(rt) == [])
            if closer == "session":  # (the runtime's close also waits for the held pool)
                closing.join(WAIT)
                assert closes == [True]
    closing.join(WAIT)
    assert closes == [True]
    assert overlay_dirs(rt) == []
    for thread, answers in callers:
        thread.join(WAIT)
        (answer,) = answers
        if phase in HELD_BY_THE_CLOSE:  # past the point of no return: Tab hears what landed
            assert isinstance(answer, AcceptResult), answer
            assert answer.files_applied == ("app.py",)
            # inserting: the worker took the items before it stopped; applying: it was gone
            # when the apply ended, and a session without a store keeps them nowhere
            assert answer.outcome == ("accepted" if phase == "inserting" else "failed"), answer
    assert rt.speculation_governor.running == 0
    if closer == "session":
        nothing_left(rt, s.id)
    else:
        assert rt.overlays_left == ()
        assert s.closed


# -- a stored session closed under an apply ------------------------------------------------


def test_closing_a_stored_session_during_tabs_apply_leaves_no_files_without_history(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user presses Tab and closes the chat while the apply runs; later they resume
    the session. Its stored history must hold the speculation's transcript exactly when
    the files were applied."""
    held = HeldApply(monkeypatch)
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    rt = Runtime(
        name="controller-attacks-store",
        overlay_root=tmp_path / "overlays",
        speculation_governor=LoadGovernor(enabled=False),
        blocking_threads=2,
        store=store,
    )
    try:
        s = completed(rt, ws)
        tab, answers = in_background(lambda: s.accept(timeout=WAIT))
        try:
            assert held.reached.wait(WAIT)
            closing, closes = in_background(lambda: s.close(timeout=WAIT))
            wait_until(lambda: session_gone(rt, s.id))
        finally:
            held.release.set()
        assert held.done.wait(WAIT)
        closing.join(WAIT)
        tab.join(WAIT)
        assert closes == [True]
        (answer,) = answers  # the items are in the store: the Tab is told it was accepted
        nothing_left(rt, s.id)
        resumed = rt.resume_session(s.id, model=ScriptedModel([]))
        answered_as_accepted(answer, resumed, ws)
        resumed.close()
    finally:
        assert rt.close(timeout=30)
    assert rt.overlays_left == ()


def test_closing_while_tab_waits_for_the_boundarys_continuation_answers_it_with_what_landed(
    rt: Runtime, ws: Path
) -> None:
    """ACCEPTED: Tab's accept has landed (files applied, transcript inserted) and its answer
    waits for the boundary's continuation when the session closes. The Tab hears what
    landed -- ``boundary`` with its items, no continuation turn -- not "session closed"."""
    deploy = BlockingDeploy()
    s = tool_session(rt, ws, deploy.tool, main_reply("deployed it"))
    try:
        assert s.speculation is not None
        wait_until(lambda: s.speculation.state == "boundary")
        tab, answers = in_background(lambda: s.accept(timeout=3 * WAIT))
        assert deploy.deploying.wait(WAIT)  # ACCEPTED: the continuation runs the boundary call
        closing, closes = in_background(lambda: s.close(timeout=WAIT))
        wait_until(lambda: answers != [])
    finally:
        deploy.done.set()
    closing.join(WAIT)
    assert closes == [True]
    tab.join(WAIT)
    (answer,) = answers
    assert isinstance(answer, AcceptResult), answer
    assert answer.outcome == "boundary" and answer.turn is None
    assert answer.boundary_tool == "deploy" and answer.items_inserted == len(answer.items) > 0
    nothing_left(rt, s.id)
