"""The load benchmark's think-time distributions: each has the configured mean and its shape.

Seeded, so the checks are exact for this seed (no flakiness), and loose enough that
they hold for any reasonable seed.
"""

from __future__ import annotations

import random
import statistics

import pytest

from fore.bench.sim_user import THINK_DISTS, first_action_delay, think_time


@pytest.mark.parametrize("dist", THINK_DISTS)
def test_every_distribution_has_the_configured_mean(dist: str) -> None:
    rng = random.Random(7)
    samples = [think_time(rng, dist, 2.0) for _ in range(20_000)]
    assert all(0.0 <= s <= 10.0 for s in samples)  # never negative, capped at 5x
    # the caps of exp and lognormal shave a little off the mean
    assert statistics.fmean(samples) == pytest.approx(2.0, rel=0.08)


def test_the_shapes_differ_as_documented() -> None:
    rng = random.Random(7)
    fixed = {think_time(rng, "fixed", 2.0) for _ in range(100)}
    uniform = [think_time(rng, "uniform", 2.0) for _ in range(5_000)]
    lognormal = [think_time(rng, "lognormal", 2.0) for _ in range(5_000)]
    assert fixed == {2.0}
    assert max(uniform) <= 4.0 and min(uniform) >= 0.0
    assert statistics.median(lognormal) < 2.0  # right-skewed: most read quickly


def test_no_think_time_and_unknown_distributions() -> None:
    rng = random.Random(1)
    assert think_time(rng, "exp", 0.0) == 0.0
    with pytest.raises(ValueError, match="unknown think-time distribution"):
        think_time(rng, "poisson", 1.0)


@pytest.mark.parametrize(
    ("dist", "expected_mean"),
    [
        ("fixed", 1.0),  # uniform over the one think time: half of it
        ("uniform", 4 / 3),  # E[T^2] / 2E[T] for T uniform on 0..4
        ("exp", 2.0),  # memoryless: the think-time law itself (less a little for the cap)
    ],
)
def test_first_actions_follow_the_residual_law_of_steady_state(
    dist: str, expected_mean: float
) -> None:
    rng = random.Random(11)
    delays = [first_action_delay(rng, dist, 2.0) for _ in range(20_000)]
    assert all(0.0 <= d <= 10.0 for d in delays)
    assert statistics.fmean(delays) == pytest.approx(expected_mean, rel=0.06)


def test_the_first_action_is_immediate_without_think_time() -> None:
    assert first_action_delay(random.Random(1), "lognormal", 0.0) == 0.0
