"""Main-turn latency with speculation on vs off, compared at the same load.

Why the raw p99 ratio is not the whole answer. Under ``fore bench`` the
slowest main turns are the ones that run while many other main turns are in
flight: one process, one GIL, and a few dozen users whose rounds line up
(measured here: a typed turn's p90 grew from ~325 ms with 0-4 other main
turns in flight to ~530 ms with 20-24, in both arms alike). The simulated
users are a closed loop -- each reads an answer, then acts -- so the two arms
do not see the same arrivals: with speculation a Tab lands at once instead of
after a whole turn, that user comes back sooner, and the typed turns line up
differently. A p99 is set by a handful of turns in the worst such burst, so
the arms' p99s differ by how their bursts happened to fall as much as by what
speculation costs a turn.

So next to the raw ratio (the verdict, unchanged) the comparison reports the
ratio **at matched load**: each typed turn is tagged with how many other
typed turns of its run were in flight at some moment of it
(:func:`overlapping`), the turns of both arms are put in strata of equal load
(``width`` turns wide), and the per-stratum ratios of a quantile are combined
-- a geometric mean weighted by the smaller arm's count in the stratum
(:func:`matched_ratio`). Strata with fewer than ``min_n`` turns in either arm
are left out: their quantiles are noise. The result is what speculation costs
a main turn when both arms carry the same main-turn load; the raw ratio's
excess over it is the load that speculation's users brought with them.

Plain functions over plain numbers; ``tests/bench/test_matched_load.py``
checks them against brute force and against their invariants.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from fore.bench._common import percentile

__all__ = ["matched_ratio", "overlapping"]


def overlapping(spans: Sequence[tuple[float, float]]) -> list[int]:
    """For each ``(start, end)`` span, how many of the others overlap it (share a moment).

    Spans that only touch (one ends when the other starts) do not overlap.
    O(n log n): the others overlapping a span are those started before it ends,
    less those ended before (or as) it starts.
    """
    starts = sorted(start for start, _ in spans)
    ends = sorted(end for _, end in spans)
    return [
        bisect.bisect_left(starts, end) - bisect.bisect_right(ends, start) - 1
        for start, end in spans
    ]


def matched_ratio(
    on: Sequence[tuple[int, float]],
    off: Sequence[tuple[int, float]],
    *,
    q: float = 90.0,
    width: int = 5,
    min_n: int = 20,
) -> float:
    """The on/off ratio of the latencies' ``q``-th percentile at matched load (see the
    module docs).

    ``on`` / ``off``: ``(load, latency)`` per turn, load from :func:`overlapping`.
    NaN when no stratum has ``min_n`` turns in both arms.
    """
    if width < 1 or min_n < 1 or not 0.0 <= q <= 100.0:
        raise ValueError("width and min_n must be >= 1, q within 0..100")
    strata: dict[int, tuple[list[float], list[float]]] = {}
    for arm, turns in ((0, on), (1, off)):
        for load, latency in turns:
            strata.setdefault(load // width, ([], []))[arm].append(latency)
    weighted = weights = 0.0
    for on_latencies, off_latencies in strata.values():
        count = min(len(on_latencies), len(off_latencies))
        if count < min_n:
            continue
        on_q, off_q = percentile(on_latencies, q), percentile(off_latencies, q)
        if on_q <= 0 or off_q <= 0:
            continue
        weighted += count * math.log(on_q / off_q)
        weights += count
    return math.exp(weighted / weights) if weights else math.nan
