"""``fore bench``'s accounting: every turn, suggestion and speculation in exactly one bucket.

Two levels. The ledger itself (:mod:`bench.report_accounting`) under random
sequences of what users can see and do (hypothesis): whatever the order, each
group's buckets add up to its independently counted total. And short real
runs of the load benchmark (:func:`bench.load.run_load`: the mock server over
real HTTP, sessions, speculations), one that finishes and one cut by
``--duration``: their reports close too, the speculation total is the load
governor's own count of admissions, and the buckets agree with the figures
counted elsewhere in the report. Nothing is timed; ``duration`` only bounds.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.bench.load import run_load
from fore.bench.load_options import LoadOptions
from fore.bench.report_accounting import (
    SPECULATION_BUCKETS,
    SUGGESTION_BUCKETS,
    TURN_BUCKETS,
    Ledger,
    open_bucket,
    speculation_bucket,
)

# -- the ledger, under any order of events --------------------------------------------

USERS = 3
_USER = st.integers(0, USERS - 1)
_SPEC = st.integers(0, 20)
_event = st.one_of(
    st.tuples(st.just("round"), _USER, st.sampled_from(["typed", "tab", "error"])),
    st.tuples(st.just("shown"), _USER, st.integers(0, 30)),
    st.tuples(st.just("typed"), _USER, st.booleans()),
    st.tuples(st.just("tab"), _USER, st.sampled_from(["accepted", "boundary", "x"])),
    st.tuples(st.just("left"), _USER, st.sampled_from(["turns", "deadline", "error"])),
    st.tuples(st.just("seen"), _SPEC, st.none()),
    st.tuples(st.just("ended"), _SPEC, st.sampled_from(["accepted", "aborted", "empty", "?"])),
)


def _replay(events: list[tuple[str, int, object]], planned: int) -> Ledger:
    ledger = Ledger()
    for user in range(USERS):
        ledger.user(user, planned)
    rounds = dict.fromkeys(range(USERS), 0)
    for kind, who, what in events:
        if kind == "round":
            if rounds[who] >= planned:
                continue
            rounds[who] += 1
            ledger.round_began(who)
            if what == "tab":
                ledger.tab_pressed(who)
                ledger.tab_answered(who, "accepted")
            ledger.round_ended(who, what)  # type: ignore[arg-type]
        elif kind == "shown":
            ledger.suggestion_shown(who, f"sug-{what}")
        elif kind == "typed":
            ledger.typed_over(who, at_once=bool(what))
        elif kind == "tab":
            if rounds[who] >= planned:  # a user plays at most its planned rounds
                continue
            rounds[who] += 1
            ledger.tab_pressed(who)
            ledger.round_began(who)
            if what != "x":  # no answer before the end
                ledger.tab_answered(who, str(what))
        elif kind == "left":
            ledger.left(who, what)  # type: ignore[arg-type]
        elif kind == "seen":
            ledger.speculation_seen(f"spec-{who}")
        elif kind == "ended":
            ledger.speculation_ended(f"spec-{who}", str(what), None)
    return ledger


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(_event, max_size=60),
    cut=st.sampled_from([None, "duration", "interrupt"]),
    planned=st.integers(1, 6),
    open_ids=st.lists(st.integers(0, 25), max_size=5),
    extra_admitted=st.integers(0, 3),
)
def test_every_group_closes_whatever_the_order_of_events(
    events: list[tuple[str, int, object]],
    cut: str | None,
    planned: int,
    open_ids: list[int],
    extra_admitted: int,
) -> None:
    ledger = _replay(events, planned)
    ledger.freeze(cut)  # type: ignore[arg-type]
    opened = {f"spec-{i}": "running" for i in open_ids}
    seen = {f"spec-{who}" for kind, who, _ in events if kind in ("seen", "ended")} | set(opened)
    result = ledger.result(opened, admitted=len(seen) + extra_admitted)
    assert result.turns.total == USERS * planned
    assert result.closes, result.as_dict()
    assert result.suggestions.total == len(
        {what for kind, _, what in events if kind == "shown"}
    )  # each suggestion id once, whatever happened to it
    assert result.speculations.buckets["unreported"] == extra_admitted
    assert set(result.turns.buckets) == set(TURN_BUCKETS)
    assert set(result.suggestions.buckets) == set(SUGGESTION_BUCKETS)
    assert set(result.speculations.buckets) == set(SPECULATION_BUCKETS)
    # Asking twice gives the same answer (the report may be rendered more than once).
    assert ledger.result(opened, admitted=len(seen) + extra_admitted) == result


def test_nothing_is_filed_after_the_freeze() -> None:
    ledger = Ledger()
    ledger.user(0, 3)
    ledger.round_began(0)
    ledger.suggestion_shown(0, "sug-1")
    ledger.freeze("interrupt")
    ledger.round_ended(0, "typed")  # the answer came after the run ended
    ledger.suggestion_shown(0, "sug-2")
    ledger.speculation_seen("spec-late")
    result = ledger.result()
    assert result.turns.buckets["in_flight_interrupt"] == 1
    assert result.turns.buckets["not_started_interrupt"] == 2
    assert result.suggestions.buckets["cut_interrupt"] == 1
    assert result.suggestions.total == 1
    assert result.speculations.total == 0
    assert result.closes


def test_buckets_of_reported_ends_and_of_open_speculations() -> None:
    assert speculation_bucket("aborted", True) == "aborted_running"
    assert speculation_bucket("aborted", False) == "aborted_finished"
    assert speculation_bucket("aborted", None) == "aborted_unstarted"
    assert speculation_bucket("empty", None) == "empty"
    assert speculation_bucket("an outcome from the future", None) == "failed"  # never dropped
    assert open_bucket("running") == "open_running"
    assert open_bucket("completed") == "open_finished"
    assert open_bucket("aborted") == "open_ending"
    assert open_bucket(None) == "open_ending"


def test_a_user_leaving_files_its_suggestion_by_why() -> None:
    ledger = Ledger()
    for user, reason in enumerate(("turns", "deadline", "error")):
        ledger.user(user, 1)
        ledger.suggestion_shown(user, f"sug-{user}")
        ledger.left(user, reason)  # type: ignore[arg-type]
        ledger.suggestion_shown(user, f"sug-late-{user}")  # shown after it left
    ledger.freeze(None)
    buckets = ledger.result().suggestions.buckets
    assert buckets["after_last_turn"] == 2
    assert buckets["cut_duration"] == 2
    assert buckets["after_error"] == 2


# -- real runs ----------------------------------------------------------------------------


def _options(**changes: object) -> LoadOptions:
    base = LoadOptions(
        sessions=6,
        turns=4,
        duration=15.0,
        drain_s=1.0,
        think_ms=500.0,
        accept_p=0.6,
        type_during_p=0.5,
        edit_p=0.2,
        ttft_ms=5.0,
        tokens_per_s=3000.0,
        governor=False,  # every suggestion speculated: the counts below are certain
        seed=5,
        progress=False,
    )
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def _check_closes(report: object) -> dict[str, dict[str, int]]:
    acc = report.accounting  # type: ignore[attr-defined]
    for group in ("turns", "suggestions", "speculations"):
        assert acc[group]["accounted"] == acc[group]["total"], (group, acc[group])
        assert sum(acc[group]["buckets"].values()) == acc[group]["total"], group
    assert acc["closes"] is True
    return {g: acc[g]["buckets"] for g in ("turns", "suggestions", "speculations")}


@pytest.mark.slow
def test_a_finished_run_accounts_for_everything() -> None:
    # The run ends when its users have played every turn; the wall-clock bound
    # is only a ceiling, generous so that a loaded machine cannot cut a round.
    report, samples = run_load(_options(duration=120.0))
    buckets = _check_closes(report)
    turns, suggestions, specs = buckets["turns"], buckets["suggestions"], buckets["speculations"]
    assert report.turns_planned == 6 * 4
    assert report.accounting["turns"]["total"] == report.turns_planned
    # Every user played all its turns: nothing cut, nothing left unstarted.
    assert turns["typed"] + turns["tab"] == report.turns == report.turns_planned
    assert report.interrupted is False and report.rounds_cut == 0
    assert turns["not_started_other"] == 0
    # The total of speculations is the governor's own count of admissions, and every
    # one of them was seen: none is "unreported".
    assert report.speculations_started > 0
    assert specs["unreported"] == 0
    # Each session's last suggestion is never acted on: shown after its last turn, and
    # its speculation is still open (running or finished) when the run ends -- these
    # are the ones that used to appear nowhere.
    assert suggestions["after_last_turn"] >= 1
    assert specs["open_running"] + specs["open_finished"] >= 1
    # The buckets agree with what the report counts elsewhere.
    applied = report.accepts.get("accepted", 0) + report.accepts.get("boundary", 0)
    assert specs["accepted"] + specs["boundary"] == applied == len(samples["accept"])
    assert sum(v for k, v in suggestions.items() if k.startswith("tab_")) == turns["tab"]
    assert report.abort_latency_ms["count"] <= specs["aborted_running"]
    assert report.aborts_of_finished <= specs["aborted_finished"]
    assert report.leaks == dict.fromkeys(report.leaks, 0)


@pytest.mark.slow
def test_a_run_cut_by_its_duration_accounts_for_the_turns_it_never_played() -> None:
    report, _ = run_load(_options(turns=200, duration=6.0, drain_s=0.0, seed=8))
    buckets = _check_closes(report)
    turns = buckets["turns"]
    assert report.turns_planned == 6 * 200
    # Far more turns than the time allows: most were never started, and say why.
    assert turns["not_started_duration"] > 0
    assert turns["typed"] + turns["tab"] == report.turns
    assert turns["in_flight_duration"] == report.rounds_cut
    assert turns["not_started_other"] == 0
    assert buckets["speculations"]["unreported"] == 0
    assert report.leaks == dict.fromkeys(report.leaks, 0)
