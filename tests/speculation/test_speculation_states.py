"""The controller's speculation record: a typed phase that moves only as ALLOWED says.

A property test drives records through random moves (allowed or not) and
checks that an allowed move is made, that any other raises and changes
nothing, that the queries that replaced the controller's pointers
(``offered``, ``accepting``) always agree with the phases, and that a record
never leaves a terminal phase.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, cast

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fore.actors.speculation.states import (
    ALLOWED,
    TERMINAL,
    SpecPhase,
    Speculation,
    accepting,
    offered,
)
from fore.errors import ForeError, SpeculationPhaseError
from fore.messages.speculation import ForkSnapshot, Suggestion


def record(number: int) -> Speculation:
    return Speculation(
        id=f"spec-{number}",
        child_id=f"speculator:spec-{number}",
        suggestion=Suggestion(
            id=f"sug-{number}", text="go on", source="model", snapshot_version="v1"
        ),
        snapshot=ForkSnapshot(session_id="s", version="v1"),
        config_gen=0,
        started_at=0.0,
        handle=cast(Any, None),  # the pure transition logic never sends to it
    )


def test_every_phase_is_listed_and_every_walk_can_end() -> None:
    assert set(ALLOWED) == set(SpecPhase)
    assert frozenset({SpecPhase.ACCEPTED, SpecPhase.ENDED}) == TERMINAL
    for phase in SpecPhase:  # from anywhere a terminal phase is reachable
        seen, todo = {phase}, [phase]
        while todo:
            for nxt in ALLOWED[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert seen & TERMINAL, phase
    assert SpecPhase.OFFERED not in {p for moves in ALLOWED.values() for p in moves}


def test_a_move_not_allowed_raises_a_fore_error_and_changes_nothing() -> None:
    spec = record(1)
    with pytest.raises(SpeculationPhaseError, match="offered -> inserting") as caught:
        spec.move(SpecPhase.INSERTING)
    assert isinstance(caught.value, ForeError)
    assert spec.phase is SpecPhase.OFFERED
    spec.move(SpecPhase.ABORTING, state="aborted")
    assert (spec.phase, spec.state) == (SpecPhase.ABORTING, "aborted")


class Records(RuleBasedStateMachine):
    """Random moves on a few records, against a model of their phases."""

    @initialize()
    def start(self) -> None:
        self.specs: list[Speculation] = []
        self.model: list[SpecPhase] = []
        self.walks: list[list[SpecPhase]] = []

    @rule()
    def new_speculation(self) -> None:
        if len(self.specs) < 4:
            self.specs.append(record(len(self.specs)))
            self.model.append(SpecPhase.OFFERED)
            self.walks.append([SpecPhase.OFFERED])

    @rule(which=st.integers(0, 3), to=st.sampled_from(SpecPhase))
    def move(self, which: int, to: SpecPhase) -> None:
        if not self.specs:
            return
        index = which % len(self.specs)
        spec = self.specs[index]
        before = spec.phase
        if to in ALLOWED[before]:
            spec.move(to)
            self.model[index] = to
            self.walks[index].append(to)
        else:
            with pytest.raises(SpeculationPhaseError):
                spec.move(to)
        assert spec.phase is self.model[index]

    @invariant()
    def phases_match_the_model(self) -> None:
        assert [s.phase for s in self.specs] == self.model

    @invariant()
    def every_walk_follows_allowed_and_terminal_phases_are_final(self) -> None:
        for walk in self.walks:
            for here, nxt in pairwise(walk):
                assert nxt in ALLOWED[here]
                assert here not in TERMINAL

    @invariant()
    def the_queries_agree_with_the_phases(self) -> None:
        first_offered = next((s for s in self.specs if s.phase is SpecPhase.OFFERED), None)
        first_accepting = next((s for s in self.specs if s.phase is SpecPhase.ACCEPTING), None)
        assert offered(self.specs) is first_offered
        assert accepting(self.specs) is first_accepting


TestRecords = Records.TestCase
