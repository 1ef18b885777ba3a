"""Speculation budgets: tokens, time, transcript length and turns each end a speculation
at a boundary named after the budget.

Tokens are counted from each completed request's usage; time and length pause the run
at its next safe point. Ordering comes from events (the ``limit`` progress event, held
replies), never from timing assertions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fore.messages.speculation import SpeculationProgress
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    WAIT,
    Replies,
    call,
    settled,
    spec,
)

MAIN = ["Hello.", "x is 1. Shall I look around?"]
SUGGEST = ['{"suggestion": "look around"}']
LOOK = {"text": "", "tool_calls": [call("list_directory")]}
LOOKING = [LOOK] * 10  # never a final answer: only a budget ends it


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    return tmp_path


def start(s: Any) -> None:
    s.submit("hi", timeout=WAIT)
    s.submit("what is x?", timeout=WAIT)


def test_the_token_budget_ends_the_speculation_at_a_boundary(runtime: Runtime, ws: Path) -> None:
    with Replies(main=MAIN, suggestion=SUGGEST, speculation=LOOKING) as r:
        config = spec(token_budget=1)  # the first completion's usage exceeds it
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            start(s)
            assert settled(s) == "boundary"
            status = s.speculation
            assert status.boundary_reason == "speculation token budget reached"
            assert status.boundary_tool is None
            assert status.tokens > 1
            assert status.turns < len(LOOKING)  # stopped long before the replies ran out


def test_the_time_budget_ends_the_speculation_at_a_boundary(runtime: Runtime, ws: Path) -> None:
    with Replies(main=MAIN, suggestion=SUGGEST, speculation=LOOKING) as r:
        first_turn = r.hold("speculation")
        config = spec(time_budget_s=0.01)
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            start(s)
            # the budget is reported before the held reply is released
            limit = next(
                e
                for e in s.events(timeout=WAIT)
                if isinstance(e, SpeculationProgress) and e.inner == "limit"
            )
            assert limit.detail == "speculation time budget reached"
            first_turn.set()
            assert settled(s) == "boundary"
            assert s.speculation.boundary_reason == "speculation time budget reached"
            assert s.speculation.turns <= 1


def test_the_message_limit_ends_the_speculation_at_a_boundary(runtime: Runtime, ws: Path) -> None:
    with Replies(main=MAIN, suggestion=SUGGEST, speculation=LOOKING) as r:
        config = spec(max_messages=2)  # user message, call, result: over
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            start(s)
            assert settled(s) == "boundary"
            assert s.speculation.boundary_reason == "speculation message limit reached"
            assert s.speculation.turns < len(LOOKING)


def test_the_turn_limit_ends_the_speculation_at_a_boundary(runtime: Runtime, ws: Path) -> None:
    with Replies(main=MAIN, suggestion=SUGGEST, speculation=LOOKING) as r:
        config = spec(max_turns=3)
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            start(s)
            assert settled(s) == "boundary"
            assert s.speculation.boundary_reason == "speculation turn limit reached"
            assert s.speculation.turns == 3
