"""The controller's speculation record: two typed phases that move only as their tables say.

A speculation's record has a phase (what the controller owes the user:
offer, accept, report) and a teardown phase (what is left of its worker and
overlay). A property test drives records through random moves of both
(allowed or not) and checks that an allowed move is made, that any other
raises and changes nothing, that the queries that replaced the controller's
pointers (``offered``, ``accepting``) always agree with the phases, that a
record never leaves a terminal phase, and the safety rules that tie the two
together: the overlay's removal never starts while Tab may still come or an
apply runs, an apply never starts on a running worker or a removed overlay,
and an abort is reported only once its overlay is gone. An exhaustive walk
checks that from every reachable pair of phases the record can still end.
"""

from __future__ import annotations

import copy
from itertools import pairwise, product

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fore.actors.speculation.states import (
    ALLOWED,
    APPLICABLE,
    OVER,
    TEARDOWN,
    TERMINAL,
    SpecPhase,
    Speculation,
    Teardown,
    accepting,
    offered,
)
from fore.errors import ForeError, SpeculationPhaseError
from fore.messages.speculation import ForkSnapshot, Suggestion

REMOVAL = frozenset({Teardown.REMOVING, Teardown.REMOVED})


def record(number: int) -> Speculation:
    return Speculation(
        id=f"spec-{number}",
        suggestion=Suggestion(
            id=f"sug-{number}", text="go on", source="model", snapshot_version="v1"
        ),
        snapshot=ForkSnapshot(session_id="s", version="v1"),
        config_gen=0,
        started_at=0.0,
    )


def move_allowed(phase: SpecPhase, teardown: Teardown, to: SpecPhase) -> bool:
    """The rules of a phase move, restated (the test's model, not the code's table)."""
    if to not in ALLOWED[phase]:
        return False
    if to is SpecPhase.APPLYING:  # the run is over and the overlay still there
        return teardown in (Teardown.STOPPING, Teardown.SETTLING, Teardown.KEPT)
    if phase is SpecPhase.ABORTING and to is SpecPhase.ENDED:  # reported once removed
        return teardown is Teardown.REMOVED
    return True


def tear_allowed(phase: SpecPhase, teardown: Teardown, to: Teardown) -> bool:
    """The rules of a teardown move, restated."""
    if to not in TEARDOWN[teardown]:
        return False
    if to is Teardown.REMOVING:  # never while Tab may come or an apply runs
        return phase in (
            SpecPhase.INSERTING,
            SpecPhase.ACCEPTED,
            SpecPhase.ABORTING,
            SpecPhase.ENDED,
        )
    return True


def test_every_phase_is_listed_and_the_tables_say_what_the_docs_say() -> None:
    assert set(ALLOWED) == set(SpecPhase)
    assert set(TEARDOWN) == set(Teardown)
    assert frozenset({SpecPhase.ACCEPTED, SpecPhase.ENDED}) == TERMINAL
    assert SpecPhase.OFFERED not in {p for moves in ALLOWED.values() for p in moves}
    assert Teardown.RUNNING not in {t for moves in TEARDOWN.values() for t in moves}
    assert {t for t, moves in TEARDOWN.items() if not moves} == {Teardown.REMOVED}
    assert {Teardown.STOPPING, Teardown.SETTLING, Teardown.KEPT} == APPLICABLE
    assert SpecPhase.APPLYING not in OVER and SpecPhase.ACCEPTING not in OVER
    # OVER is closed: a speculation that is over never needs its overlay again
    assert all(ALLOWED[phase] <= OVER for phase in OVER)


def test_every_reachable_pair_of_phases_can_still_end() -> None:
    """From (OFFERED, RUNNING), every pair the real moves reach can reach a terminal
    phase with the overlay removed: no combination leaves a speculation stuck."""
    start = record(0)
    seen = {(start.phase, start.teardown)}
    todo = [start]
    edges: dict[tuple[SpecPhase, Teardown], set[tuple[SpecPhase, Teardown]]] = {}
    while todo:
        here = todo.pop()
        key = (here.phase, here.teardown)
        for to_phase, to_tear in product(SpecPhase, Teardown):
            for kind in ("move", "tear"):
                nxt = copy.copy(here)
                try:
                    if kind == "move":
                        nxt.move(to_phase)
                    else:
                        nxt.tear(to_tear)
                except SpeculationPhaseError:
                    continue
                pair = (nxt.phase, nxt.teardown)
                edges.setdefault(key, set()).add(pair)
                if pair not in seen:
                    seen.add(pair)
                    todo.append(nxt)
    done = {(p, Teardown.REMOVED) for p in TERMINAL}
    assert done <= seen
    for pair in seen:
        reach, stack = {pair}, [pair]
        while stack:
            for nxt in edges.get(stack.pop(), ()):
                if nxt not in reach:
                    reach.add(nxt)
                    stack.append(nxt)
        assert reach & done, pair
    # and nothing unsafe is reachable at all
    for phase, teardown in seen:
        assert teardown not in REMOVAL or phase in OVER, (phase, teardown)
        assert phase is not SpecPhase.APPLYING or teardown in APPLICABLE, (phase, teardown)


def test_a_move_not_allowed_raises_a_fore_error_and_changes_nothing() -> None:
    spec = record(1)
    with pytest.raises(SpeculationPhaseError, match="offered -> inserting") as caught:
        spec.move(SpecPhase.INSERTING)
    assert isinstance(caught.value, ForeError)
    assert spec.phase is SpecPhase.OFFERED
    with pytest.raises(SpeculationPhaseError, match="teardown running -> removing"):
        spec.tear(Teardown.REMOVING)
    spec.tear(Teardown.STOPPING)
    spec.tear(Teardown.SETTLING)
    spec.tear(Teardown.KEPT)
    with pytest.raises(SpeculationPhaseError, match="cannot go while it is offered"):
        spec.tear(Teardown.REMOVING)  # Tab may still come
    spec.move(SpecPhase.ACCEPTING)
    spec.move(SpecPhase.APPLYING)
    with pytest.raises(SpeculationPhaseError, match="cannot go while it is applying"):
        spec.tear(Teardown.REMOVING)  # never under a running apply
    assert (spec.phase, spec.teardown) == (SpecPhase.APPLYING, Teardown.KEPT)
    spec.move(SpecPhase.INSERTING)
    spec.tear(Teardown.REMOVING)
    fresh = record(2)
    fresh.move(SpecPhase.ACCEPTING)
    with pytest.raises(SpeculationPhaseError, match="no apply with its teardown running"):
        fresh.move(SpecPhase.APPLYING)  # its worker still runs
    fresh.move(SpecPhase.ABORTING, state="aborted")
    assert (fresh.phase, fresh.state) == (SpecPhase.ABORTING, "aborted")
    with pytest.raises(SpeculationPhaseError, match="only once its overlay is removed"):
        fresh.move(SpecPhase.ENDED)


class Records(RuleBasedStateMachine):
    """Random moves of both phases on a few records, against a model of them."""

    @initialize()
    def start(self) -> None:
        self.specs: list[Speculation] = []
        self.model: list[tuple[SpecPhase, Teardown]] = []
        self.walks: list[list[SpecPhase]] = []
        self.tears: list[list[Teardown]] = []

    @rule()
    def new_speculation(self) -> None:
        if len(self.specs) < 4:
            self.specs.append(record(len(self.specs)))
            self.model.append((SpecPhase.OFFERED, Teardown.RUNNING))
            self.walks.append([SpecPhase.OFFERED])
            self.tears.append([Teardown.RUNNING])

    @rule(which=st.integers(0, 3), to=st.sampled_from(SpecPhase))
    def move(self, which: int, to: SpecPhase) -> None:
        if not self.specs:
            return
        index = which % len(self.specs)
        spec = self.specs[index]
        phase, teardown = self.model[index]
        if move_allowed(phase, teardown, to):
            spec.move(to)
            self.model[index] = (to, teardown)
            self.walks[index].append(to)
        else:
            with pytest.raises(SpeculationPhaseError):
                spec.move(to)
        assert (spec.phase, spec.teardown) == self.model[index]

    @rule(which=st.integers(0, 3), to=st.sampled_from(Teardown))
    def tear(self, which: int, to: Teardown) -> None:
        if not self.specs:
            return
        index = which % len(self.specs)
        spec = self.specs[index]
        phase, teardown = self.model[index]
        if tear_allowed(phase, teardown, to):
            spec.tear(to)
            self.model[index] = (phase, to)
            self.tears[index].append(to)
        else:
            with pytest.raises(SpeculationPhaseError):
                spec.tear(to)
        assert (spec.phase, spec.teardown) == self.model[index]

    @invariant()
    def phases_match_the_model(self) -> None:
        assert [(s.phase, s.teardown) for s in self.specs] == self.model

    @invariant()
    def every_walk_follows_its_table_and_terminal_phases_are_final(self) -> None:
        for walk in self.walks:
            for here, nxt in pairwise(walk):
                assert nxt in ALLOWED[here]
                assert here not in TERMINAL
        for walk in self.tears:
            assert walk == sorted(walk, key=list(Teardown).index)  # only ever forwards
            for here, nxt in pairwise(walk):
                assert nxt in TEARDOWN[here]

    @invariant()
    def the_overlay_goes_only_when_nothing_can_use_it(self) -> None:
        for spec in self.specs:
            if spec.teardown in REMOVAL:
                assert spec.phase in OVER  # not offered, accepting, or applying
            if spec.phase is SpecPhase.APPLYING:
                assert spec.teardown in APPLICABLE  # run over, overlay still there

    @invariant()
    def the_queries_agree_with_the_phases(self) -> None:
        first_offered = next((s for s in self.specs if s.phase is SpecPhase.OFFERED), None)
        first_accepting = next(
            (s for s in self.specs if s.phase in (SpecPhase.ACCEPTING, SpecPhase.APPLYING)),
            None,
        )
        assert offered(self.specs) is first_offered
        assert accepting(self.specs) is first_accepting


TestRecords = Records.TestCase
