"""Where a session goes: the least-loaded live shard on the machine that has its workspace.

Each shard reports its :class:`ShardLoad` -- the load governor's signal (the
percentile of recent scheduling waits that decides whether the shard's
runtime may speculate, :class:`~fore.actors.speculation.governor.LoadGovernor`)
and how many sessions it hosts. :func:`choose_shard` is the whole policy, as
plain code:

1. only live shards, and only shards on the workspace's machine (a shard serves
   only workspaces on its own filesystem; ``node=None`` means any machine);
2. the lowest **weighted load**: ``(sessions + 1) x (1 + pressure band)``,
   the band being the governor's pressure in steps of ``band_ms`` (the
   governor's default threshold, 4 ms; band 0 is "has headroom"). The
   caller may add sessions not in the report yet (``placed``).
   Below the threshold every shard weighs 1, so an idle cluster fills evenly
   by session count; a shard under pressure takes proportionally fewer new
   sessions (two bands up: a third as many), never none and never all.
   Waits jitter by a millisecond or two from one sample to the next, and a
   shard that is busy opening sessions samples high for a moment; comparing
   raw values, or letting the lowest band win outright, sent a whole burst of
   opens to one shard (measured: 20 of 20 with 2 ms bands; 184 of 200 with
   4 ms bands won outright, the other shard sampling just above 4 ms while
   the sessions opened);
3. then the lowest shard index, so the choice is deterministic.

The pressure a shard is weighed by is its **sustained** pressure
(:func:`sustained_pressure`): the lowest of its last :data:`PRESSURE_WINDOW`
reports (two seconds at the runtime's 0.25 s polls), and none until it has
that many. Sessions live for hours and a spike lasts a poll: a shard that
sampled above the band once -- a GC pause, the burst of opening sessions, a
neighbour's process on its core -- is not a shard to avoid for good. Weighing
raw samples, a burst of 200 opens split 124/76 (and 47/153 in a one-second
burst); the simulation in the unit tests (a spike in one report of three, 20
bursts) goes down to 120/80 with raw reports and stays within 104/96 with
the window. The runtime passes its own session counts (its directory and its
opens in flight), never a shard's report, which lags the opens and closes.

A session stays on its shard for its whole life there; it moves only when the
shard dies (it is then resumed from the store on a live shard, chosen the same
way).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from fore.messages.base import Message

__all__ = [
    "DEFAULT_BAND_MS",
    "PRESSURE_WINDOW",
    "ShardInfo",
    "ShardLoad",
    "choose_shard",
    "pressure_band",
    "sustained_pressure",
    "weighted_load",
]

DEFAULT_BAND_MS = 4.0
"""The governor's default threshold: band 0 is every shard with headroom (module docs)."""
PRESSURE_WINDOW = 8
"""Placement weighs the lowest of a shard's last this many pressure reports (module docs)."""


class ShardInfo(Message):
    """Who a shard is: its index, the process (incarnation) that runs it now, its machine.

    ``incarnation`` changes whenever Ray restarts the shard in a new process:
    the sessions it hosted are then gone from it (they are resumed from the
    store), so a caller that sees a new incarnation knows its session moved.
    """

    index: int = Field(ge=0)
    incarnation: str
    pid: int
    node_id: str
    node_ip: str
    hostname: str


class ShardLoad(Message):
    """One shard's load report (what placement reads; ``fore bench --shards`` prints it)."""

    index: int = Field(ge=0)
    incarnation: str
    node_id: str
    alive: bool = True
    pressure_ms: float = Field(ge=0.0)
    """The governor's percentile of recent scheduling waits (0 with too few samples)."""
    threshold_ms: float = Field(gt=0.0)
    """Above this pressure the shard's runtime does not start new speculations."""
    sessions: int = Field(ge=0)
    running_speculations: int = Field(ge=0, default=0)
    admitted: int = Field(ge=0, default=0)
    """Speculations the shard's governor admitted since the shard started."""
    refused: int = Field(ge=0, default=0)
    """Suggestions it did not speculate on for lack of headroom."""
    deferred: int = Field(ge=0, default=0)
    """Speculative model requests that waited for headroom."""


_LAST_BAND = 1 << 30


def pressure_band(pressure_ms: float, band_ms: float = DEFAULT_BAND_MS) -> int:
    """The band a pressure falls in: ``floor(pressure / band)`` (NaN and negatives: band 0;
    infinity: the last band)."""
    if band_ms <= 0 or not math.isfinite(band_ms):
        raise ValueError(f"band_ms must be a finite number > 0, not {band_ms!r}")
    if math.isnan(pressure_ms) or pressure_ms <= 0:
        return 0
    if math.isinf(pressure_ms):
        return _LAST_BAND
    return min(_LAST_BAND, int(pressure_ms // band_ms))


def choose_shard(
    loads: Sequence[ShardLoad],
    *,
    node: str | None = None,
    placed: Sequence[int] = (),
    band_ms: float = DEFAULT_BAND_MS,
) -> ShardLoad | None:
    """The shard a new session goes to, or ``None`` when no live shard is on ``node``.

    ``node`` is the Ray node id of the machine that has the workspace (``None``:
    any). ``placed[i]`` counts sessions placed on shard ``i`` since its report
    (they are not in its ``sessions`` yet). See the module docs for the order.
    """
    best: ShardLoad | None = None
    best_key: tuple[int, int] | None = None
    for load in loads:
        if not load.alive or (node is not None and load.node_id != node):
            continue
        key = (weighted_load(load, placed, band_ms), load.index)
        if best_key is None or key < best_key:
            best, best_key = load, key
    return best


def weighted_load(
    load: ShardLoad, placed: Sequence[int] = (), band_ms: float = DEFAULT_BAND_MS
) -> int:
    """``(sessions + placed + 1) x (1 + pressure band)``: what placement minimises."""
    extra = placed[load.index] if load.index < len(placed) else 0
    return (load.sessions + extra + 1) * (1 + pressure_band(load.pressure_ms, band_ms))


def sustained_pressure(samples: Sequence[float], window: int = PRESSURE_WINDOW) -> float:
    """The lowest of a shard's last ``window`` pressure reports; 0 (no evidence) while
    it has fewer (NaN ignored).

    A shard is weighed as loaded only when every report of the window says so
    (module docs): a spike, or the first second of a burst of opens, does not
    steer the sessions of the burst away for good.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, not {window!r}")
    if len(samples) < window:
        return 0.0
    values = [p for p in list(samples)[-window:] if not math.isnan(p)]
    return min(values) if values else 0.0
