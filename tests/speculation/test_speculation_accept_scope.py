"""A Tab's cancel scope: ``Session.cancel`` calls an accept off wherever the accept is.

The scope is made by whoever starts the accept (``Session.accept`` / ``aaccept``,
a submit of the suggestion's text) and travels with it, so a cancel that
overtakes its Tab in the controller's mailbox -- Ctrl-C rides the control lane,
the Tab the ordinary one -- still calls it off; the run an accept starts (the
continuation after a boundary, or the normal run a Tab becomes) runs under it
too. Hard budgets cancel the speculation's run through its scope, even before
the run has started.

Orderings come from held mailboxes, held replies and held applies, never from
sleeps.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import pytest

import fore.actors.speculation.lifecycle as lifecycle_module
from fore.actors.core import PooledActor
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.worker import Worker
from fore.messages.conversation import ToolResult, UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.session import TurnResult
from fore.messages.speculation import AcceptResult, SpeculationFinished, TokenBudgetReached
from fore.supervision import Runtime, Session
from tests.speculation.attacks import (
    Held,
    HeldApply,
    bump_replies,
    controller_of,
    in_background,
    queued_at,
    queued_kinds,
    running_speculation,
)
from tests.speculation.test_speculation import (
    WAIT,
    Replies,
    call,
    overlay_dirs,
    settled,
    spec,
    wait_until,
)
from tests.speculation.test_speculation_accept import MAIN, SUGGEST, bump

LOOKS = {"text": "", "tool_calls": [call("list_directory")]}
TOUCH = {"text": "", "tool_calls": [call("shell", command="touch SIDE_EFFECT")]}


AND_NOW = "And now, done."
"""The main reply of the turn after the accept."""


LONG = 3 * WAIT
"""The deadline of an accept whose cancel a test checks: longer than the test waits for
its answer, so the accept's own deadline (which calls it off too) cannot answer for it."""


def answer_of(thread: threading.Thread, out: list[Any]) -> Any:
    thread.join(WAIT)
    assert not thread.is_alive(), "no answer"
    (answer,) = out
    if isinstance(answer, BaseException):
        raise answer
    return answer


def texts(s: Session) -> list[str]:
    return [getattr(item, "text", "") for item in s.history]


# -- 1. the cancel that overtakes its Tab ---------------------------------------------------


@pytest.mark.parametrize("speculation", ["running", "finished"])
def test_a_cancel_that_overtakes_its_tab_calls_the_tab_off(
    runtime: Runtime, ws: Path, speculation: str
) -> None:
    """Tab, then Ctrl-C, both queued in the controller's mailbox: the cancel goes first (it
    is urgent), yet the Tab answers ``aborted``: nothing applied, nothing inserted, the
    overlay removed, and the session takes the next prompt."""
    with bump_replies(main=[*MAIN, AND_NOW]) as replies:
        first_turn = replies.hold("speculation")
        s = running_speculation(runtime, ws, replies)
        if speculation == "finished":
            first_turn.set()
            assert settled(s) == "completed"
        s.drain_events()
        controller = controller_of(s)
        with Held(controller):
            thread, out = in_background(lambda: s.accept(timeout=LONG))
            queued_at(controller, "AcceptSuggestion")  # the Tab, queued
            s.cancel("Ctrl-C")
        result: AcceptResult = answer_of(thread, out)
        first_turn.set()  # a running speculation could finish now: nothing may be applied
        assert (result.outcome, result.files_applied, result.items) == ("aborted", (), ())
        report = next(e for e in s.events(timeout=WAIT) if isinstance(e, SpeculationFinished))
        assert report.outcome == "aborted"
        wait_until(lambda: overlay_dirs(runtime) == [])
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert "bump x to 2" not in texts(s)
        assert s.suggestion is None  # the Tab took it, as a Tab called off later does
        turn = s.submit("and now?", timeout=WAIT)
        assert turn.status == "completed" and turn.items[-1].text == AND_NOW
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert pairing_problems(s.history) == []
        assert s.close(timeout=WAIT)


# -- 2. the runs an accept starts --------------------------------------------------------------


@pytest.mark.parametrize("how", ["tab", "typed"])
def test_cancel_reaches_the_continuation_an_accept_started(
    runtime: Runtime, ws: Path, how: str
) -> None:
    """A speculation stopped by its turn limit: Tab continues the turn in the main worker.
    ``Session.cancel`` while the accept waits for that continuation cancels it -- also when
    the accept is a submit of the suggestion's text (its scope is the submit's)."""
    with Replies(
        main=[*MAIN, "Listed.", AND_NOW],
        suggestion=['{"suggestion": "list the files"}'],
        speculation=[LOOKS, LOOKS],
    ) as replies:
        config = spec(max_turns=1)
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            assert settled(s) == "boundary"
            continuation = replies.hold("main")
            if how == "tab":
                thread, out = in_background(lambda: s.accept(timeout=LONG))
            else:
                thread, out = in_background(lambda: s.submit("list the files", timeout=LONG))
            wait_until(lambda: len(replies.seen("main")) == 3)  # the continuation asks
            s.cancel("Ctrl-C")
            answer = answer_of(thread, out)
            continuation.set()
            turn = answer.turn if how == "tab" else answer
            assert isinstance(turn, TurnResult)
            assert (turn.status, turn.error) == ("cancelled", "Ctrl-C")
            if how == "tab":
                assert answer.outcome == "boundary"
            history = s.history
            assert "list the files" in texts(s)  # the accepted items are in history ...
            assert pairing_problems(history) == []  # ... well paired
            assert "Listed." not in texts(s)  # the continuation's answer never came in
            turn = s.submit("and now?", timeout=WAIT)
            assert turn.status == "completed"


@pytest.mark.parametrize("boundary", ["turn limit", "shell"])
def test_a_cancel_during_the_apply_inserts_and_cancels_the_continuation(
    runtime: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch, boundary: str
) -> None:
    """Never files without history: a cancel that comes while the overlay is applied lets
    the apply complete and its items go in, but the turn does not go on -- the calls a
    boundary handed over get ``cancelled`` results and never run."""
    apply = HeldApply(monkeypatch, stage="start")  # a turn limit's overlay has no files
    if boundary == "turn limit":
        config = spec(max_turns=1)
        speculated: list[Any] = [LOOKS, LOOKS]
    else:
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
        speculated = [TOUCH]
    with (
        Replies(
            main=[*MAIN, AND_NOW],
            suggestion=['{"suggestion": "do it"}'],
            speculation=speculated,
        ) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        thread, out = in_background(lambda: s.accept(timeout=LONG))
        try:
            assert apply.reached.wait(WAIT)  # the apply has begun
            s.cancel("Ctrl-C")
        finally:
            apply.release.set()
        result: AcceptResult = answer_of(thread, out)
        assert result.outcome == "boundary"  # applied and inserted
        assert result.turn is not None
        assert (result.turn.status, result.turn.error) == ("cancelled", "Ctrl-C")
        history = s.history
        assert "do it" in texts(s)
        assert pairing_problems(history) == []
        assert len(replies.seen("main")) == 2  # the turn did not go on
        assert not (ws / "SIDE_EFFECT").exists()  # the handed-over call never ran
        if boundary == "shell":
            (cancelled,) = [i for i in history if isinstance(i, ToolResult)]
            assert cancelled.output.startswith("Cancelled: Ctrl-C")
        turn = s.submit("and now?", timeout=WAIT)
        assert turn.status == "completed" and turn.items[-1].text == AND_NOW


# -- 3. a hard budget cancels the run's scope ---------------------------------------------------


class HeldWorker:
    """``Worker.start`` for a speculation, with the new worker's mailbox held first: its
    Submit waits behind the hold until the test releases it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def start(self, config: Any) -> Any:
        ref = Worker.start(config)
        actor = ref._actor_weakref()
        assert isinstance(actor, PooledActor)

        def hold() -> None:
            self.entered.set()
            self.release.wait(WAIT)

        actor.post(hold)
        return ref


def test_a_hard_budget_reached_before_the_run_started_cancels_it_unstarted(
    runtime: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The token budget passes while the speculation's Submit still waits in its worker's
    mailbox: the run's scope is cancelled at once, so the run never starts (no request is
    made) -- no retry once it has started -- and Tab runs the suggestion normally."""
    held = HeldWorker()
    monkeypatch.setattr(lifecycle_module, "Worker", held)
    with Replies(main=[*MAIN, "Bumped for real."], suggestion=SUGGEST, speculation=[bump]) as r:
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            try:
                assert held.entered.wait(WAIT)
                wait_until(lambda: s.speculation.state == "running")
                spec_id = s.speculation.speculation_id
                s.controller.tell(TokenBudgetReached(speculation_id=spec_id, spent=10**9))
                assert s.speculation.state == "running"  # a round trip: the controller has it
            finally:
                held.release.set()
            assert settled(s) == "failed"
            assert s.speculation.reason == "the token budget reached before it started"
            assert r.seen("speculation") == []  # the run never started
            result = s.accept(timeout=WAIT)
            assert result.outcome == "submitted" and result.turn is not None
            assert result.turn.status == "completed"
            assert isinstance(result.turn.items[0], UserMessage)
            assert result.turn.items[-1].text == "Bumped for real."


# -- 4. every ordering of Tab, Ctrl-C, the speculation's end and a busy controller ----------------

STEPS = ("tab", "cancel", "finish", "hold", "release")


def allowed_outcomes(order: tuple[str, ...]) -> set[str]:
    """What the Tab may answer, from the order of the steps alone.

    A cancel before the Tab has nothing to cancel: the Tab is applied. A cancel after it
    calls it off -- for sure if the speculation was still held then (its apply cannot
    have begun), or if the controller was busy from before the Tab until after the
    cancel (it had not even seen the Tab); otherwise the apply may have begun first,
    and an accept applying completes.
    """
    tab, cancel = order.index("tab"), order.index("cancel")
    if cancel < tab:
        return {"accepted"}
    hold, release = order.index("hold"), order.index("release")
    if order.index("finish") > cancel or hold < tab < cancel < release:
        return {"aborted"}
    return {"aborted", "accepted"}


def press_tab(s: Session, held: Held | None) -> tuple[threading.Thread, list[Any]]:
    """``s.accept`` on a thread, once the controller has it queued (``held``) or taken it."""
    controller = controller_of(s)
    tabs = queued_kinds(controller).count("AcceptSuggestion")
    thread, out = in_background(lambda: s.accept(timeout=LONG))
    if held is not None:  # queued behind the hold
        queued_at(controller, "AcceptSuggestion", tabs + 1)
    else:  # taken: waiting for the speculation, or answered
        wait_until(lambda: out or s.speculation.accepting)
    return thread, out


ORDERS = [
    order for order in itertools.permutations(STEPS) if order.index("hold") < order.index("release")
]
"""Every order of the steps (60): few enough to walk them all, every run the same."""


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(order) for order in ORDERS])
def test_any_order_of_tab_and_ctrl_c_never_leaves_files_without_history(
    runtime: Runtime, ws: Path, order: tuple[str, ...]
) -> None:
    """Tab, Ctrl-C, the speculation's end and a busy controller, in every order: the Tab
    answers as the order allows, files are applied exactly when their history is inserted,
    nothing is left behind, and the session takes the next prompt."""
    with bump_replies(main=[*MAIN, AND_NOW]) as replies:
        first_turn = replies.hold("speculation")
        s = running_speculation(runtime, ws, replies)
        held: Held | None = None
        tab: tuple[threading.Thread, list[Any]] | None = None
        try:
            for step in order:
                if step == "tab":
                    tab = press_tab(s, held)
                elif step == "cancel":
                    s.cancel("Ctrl-C")
                elif step == "finish":
                    first_turn.set()
                elif step == "hold":
                    held = Held(controller_of(s))
                elif held is not None:
                    held.release.set()
                    held = None
        finally:
            if held is not None:
                held.release.set()
            first_turn.set()
        assert tab is not None
        result: AcceptResult = answer_of(*tab)
        assert result.outcome in allowed_outcomes(order), (order, result.outcome)
        applied = (ws / "app.py").read_text() == "x = 2\n"
        inserted = "bump x to 2" in texts(s)
        assert applied == inserted == (result.outcome == "accepted")
        assert result.files_applied == (("app.py",) if applied else ())
        wait_until(lambda: overlay_dirs(runtime) == [])
        turn = s.submit("and now?", timeout=WAIT)
        assert turn.status == "completed" and turn.items[-1].text == AND_NOW
        assert pairing_problems(s.history) == []
        assert s.close(timeout=WAIT)
