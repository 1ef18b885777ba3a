"""An empty speculation -- an answer with no text and no tool calls -- is nothing to accept.

Real servers do send empty answers (a small model, a stop token first). Such a
speculation must not be offered as a finished one and "accepted" with time
saved: there is nothing in it. It ends as its own outcome (``empty``), and Tab
submits the suggestion as a normal turn -- also when Tab waited for it.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.speculation import SpeculationFinished
from fore.supervision import Runtime
from tests.speculation.test_speculation import WAIT, Replies, spec, wait_until

MAIN = ["Hello.", "x is 1. Shall I bump it?", "Bumped it for real."]
SUGGEST = ['{"suggestion": "bump x to 2"}']


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    return tmp_path


def outcomes(s: Any) -> list[str]:
    """The speculation outcomes reported, once one has been (events drained)."""
    seen: list[Any] = []

    def reported() -> bool:
        seen.extend(e for e in s.drain_events() if isinstance(e, SpeculationFinished))
        return bool(seen)

    wait_until(reported)
    return [e.outcome for e in seen]


def ends_normally(s: Any, replies: Replies) -> None:
    """The suggestion ran as an ordinary main turn, answered, with no empty answer inserted."""
    main = replies.seen("main")
    assert isinstance(main[-1].messages[-1], UserMessage)
    assert main[-1].messages[-1].text == "bump x to 2"
    history = s.history
    assert history[-1] == AssistantMessage(text="Bumped it for real.")
    assert not [i for i in history if isinstance(i, AssistantMessage) and not i.text]


@pytest.mark.parametrize("empty", ["", "  \n"])
def test_an_empty_speculation_is_not_offered_and_tab_runs_the_prompt(
    runtime: Runtime, ws: Path, empty: str
) -> None:
    with (
        Replies(main=MAIN, suggestion=SUGGEST, speculation=[empty]) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=spec()) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.speculation.state not in ("idle", "running"))
        assert s.speculation.state == "empty"
        result = s.accept(timeout=WAIT)
        assert result.outcome == "submitted"  # a normal turn, nothing was accepted
        assert result.time_saved_s == 0.0
        assert result.turn is not None and result.turn.status == "completed"
        ends_normally(s, replies)
        assert outcomes(s) == ["empty"]


def test_tab_waiting_for_a_speculation_that_ends_empty_runs_the_prompt(
    runtime: Runtime, ws: Path
) -> None:
    with (
        Replies(main=MAIN, suggestion=SUGGEST, speculation=[""]) as replies,
        runtime.open_session(workspace=ws, model=replies.model, speculation=spec()) as s,
    ):
        held = replies.hold("speculation")
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: len(replies.seen("speculation")) == 1)
        results: list[Any] = []
        thread = threading.Thread(target=lambda: results.append(s.accept(timeout=WAIT)))
        thread.start()
        wait_until(lambda: s.speculation.accepting)
        held.set()
        thread.join(WAIT)
        (result,) = results
        assert result.outcome == "submitted"
        assert result.time_saved_s == 0.0
        ends_normally(s, replies)
        assert outcomes(s) == ["empty"]
