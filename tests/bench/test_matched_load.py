"""bench.matched_load: main-turn latency compared at matched load.

``overlapping`` against a brute-force count; ``matched_ratio`` against its
invariants: the same turns give 1, a latency scaled in one arm gives the
scale, and moving one arm's turns to heavier strata -- with the same latency
at each load -- changes the raw ratio but not the matched one.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.bench.matched_load import matched_ratio, overlapping

spans = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 20)).map(
        lambda sl: (float(sl[0]), float(sl[0] + sl[1]))
    ),
    max_size=40,
)


@given(spans)
def test_overlapping_counts_the_others_sharing_a_moment(turns: list[tuple[float, float]]) -> None:
    expected = [
        sum(1 for j, (s2, e2) in enumerate(turns) if j != i and s2 < e and e2 > s)
        for i, (s, e) in enumerate(turns)
    ]
    assert overlapping(turns) == expected


def test_turns_that_only_touch_do_not_overlap() -> None:
    assert overlapping([(0.0, 1.0), (1.0, 2.0), (0.5, 1.5)]) == [1, 1, 2]
    assert overlapping([]) == []


def _turns(rng: random.Random, n: int, loads: range, scale: float = 1.0) -> list[tuple[int, float]]:
    """Turns whose latency grows with load (0.3 s + 10 ms per turn in flight), with noise."""
    out = []
    for _ in range(n):
        load = rng.choice(loads)
        out.append((load, scale * (0.3 + 0.01 * load) * rng.uniform(0.9, 1.1)))
    return out


def test_the_same_turns_compare_as_equal() -> None:
    turns = _turns(random.Random(1), 2000, range(0, 25))
    assert matched_ratio(turns, turns) == pytest.approx(1.0)


@given(st.floats(0.5, 2.0), st.integers(0, 10_000))
def test_a_latency_scaled_in_one_arm_shows_as_that_scale(scale: float, seed: int) -> None:
    rng = random.Random(seed)
    off = _turns(rng, 1500, range(0, 25))
    on = [(load, latency * scale) for load, latency in off]
    assert matched_ratio(on, off) == pytest.approx(scale)


def test_more_load_in_one_arm_moves_the_raw_ratio_not_the_matched_one() -> None:
    """The on arm's turns run at heavier loads (its users came back sooner), each at the
    same latency for its load as the off arm's: the raw p90 ratio is well above 1, the
    matched one stays near it."""
    rng = random.Random(7)
    off = _turns(rng, 4000, range(0, 20))
    on = _turns(rng, 4000, range(5, 25))

    def p90(turns: list[tuple[int, float]]) -> float:
        ordered = sorted(latency for _, latency in turns)
        return ordered[int(0.9 * len(ordered))]

    assert p90(on) / p90(off) > 1.08
    assert matched_ratio(on, off) == pytest.approx(1.0, abs=0.02)


def test_thin_strata_are_left_out_and_no_common_stratum_is_nan() -> None:
    off = [(0, 0.3)] * 30
    on = [(0, 0.33)] * 30 + [(40, 9.0)] * 5  # the 5 heavy turns have no stratum in off
    assert matched_ratio(on, off) == pytest.approx(1.1)
    assert math.isnan(matched_ratio([(40, 1.0)] * 30, off))
    assert math.isnan(matched_ratio([], []))
    with pytest.raises(ValueError):
        matched_ratio(on, off, width=0)
