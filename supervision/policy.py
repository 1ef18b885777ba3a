"""Supervision policy as plain functions: restart decisions, intensity, backoff.

Everything here is pure (given the clock and a random source), so the OTP rules
are unit-tested without starting a single actor; the supervisor actor only
executes the plans these functions return.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from fore.messages.runtime import RestartType, Strategy


def should_restart(restart: RestartType, *, failed: bool) -> bool:
    """OTP: permanent always, transient only after an abnormal exit, temporary never."""
    if restart is RestartType.PERMANENT:
        return True
    if restart is RestartType.TRANSIENT:
        return failed
    return False


def plan_restart(
    strategy: Strategy, order: Sequence[str], failed_id: str
) -> tuple[list[str], list[str]]:
    """Which children to stop (in this order) and then start (in this order).

    ``order`` is the supervisor's start order. Stops go in reverse start order,
    starts in start order, as OTP does.
    """
    if failed_id not in order:
        raise ValueError(f"unknown child {failed_id!r}")
    if strategy is Strategy.ONE_FOR_ONE:
        return [], [failed_id]
    if strategy is Strategy.ONE_FOR_ALL:
        others = [cid for cid in order if cid != failed_id]
        return list(reversed(others)), list(order)
    index = list(order).index(failed_id)
    after = list(order[index + 1 :])
    return list(reversed(after)), [failed_id, *after]


@dataclass
class RestartIntensity:
    """At most ``max_restarts`` restarts within any ``period`` seconds."""

    max_restarts: int = 3
    period: float = 5.0
    _times: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError("max_restarts must be >= 0")
        if self.period <= 0:
            raise ValueError("period must be > 0")

    def record(self, now: float) -> bool:
        """Record one restart at ``now``; False when the intensity is exceeded."""
        self._times.append(now)
        while self._times and self._times[0] <= now - self.period:
            self._times.popleft()
        return len(self._times) <= self.max_restarts


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with jitter between restarts of the same child.

    The n-th consecutive restart waits ``initial * multiplier**(n-1)`` seconds,
    capped at ``maximum``, then scaled by a random factor in
    ``[1 - jitter, 1 + jitter]`` so restarting siblings do not stampede.
    """

    initial: float = 0.05
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0 or self.multiplier < 1:
            raise ValueError("backoff needs initial >= 0, maximum >= 0, multiplier >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        if attempt <= 0 or self.initial == 0:
            return 0.0
        base = min(self.maximum, self.initial * self.multiplier ** (attempt - 1))
        spread = (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return base * spread
