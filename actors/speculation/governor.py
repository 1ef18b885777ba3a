"""Speculation only with headroom: a load governor for the whole runtime.

A speculation is work nobody asked for yet. When the process has CPU to
spare it makes the next Tab instant; when it has none, it steals time from
the turns users are waiting for. In one process every actor, both LLM loops
and every tool thread share one GIL, so "no time to spare" shows first as
*waiting*: a message waits before its actor runs, a stream chunk waits before
its loop runs. Measured under ``fore bench`` (2 cores, 200 sessions): with
headroom the 90th percentile of those waits stayed near 2 ms; once
speculative work saturated the process it rose to 9 ms and beyond, and
main-turn latency tripled.

The pressure that matters is the tail: the main-turn p99 is set by the
bursts in which a few dozen turns and speculations peak together, and a
burst shows as a handful of multi-millisecond waits among many short ones.
A p90 over the window stayed at 1-3 ms through such bursts (the governor
admitted every speculation, and with speculation the main-turn p99 was
~10% above a run without it); the window's p99 -- about its worst wait --
crosses 4 ms in them, so new speculations wait out the burst (5-7% of them
were skipped under the default ``fore bench``).

:class:`LoadGovernor` keeps a sliding window of such waits, sampled by
:class:`LoadProbe` every ``interval`` seconds (a message to a probe actor,
a callback on the foreground LLM loop -- about 1.5 s of samples in the
default window), and admits a new speculation only while the window's ``percentile``
stays under ``threshold_ms`` (and fewer than ``max_concurrent`` run). A suggestion is
still offered when speculation is refused; Tab then runs it as a normal
turn. The decision logic is plain code; the probe is the only moving part.

Admission alone cannot help with the speculations already running when a
burst begins, so each of their model requests also waits for headroom
before it is sent (:meth:`LoadGovernor.wait_for_headroom`, up to
``max_defer_s``, on the background LLM loop: nothing blocks): their work
moves out of the burst instead of into it.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fore.actors.core.handlers import handles
from fore.actors.core.logs import get_logger
from fore.actors.core.pooled import ForeActor
from fore.messages.speculation import LoadSample

log = get_logger(__name__)

__all__ = ["LoadGovernor", "LoadProbe"]


@dataclass
class LoadGovernor:
    """Admission control for speculation (thread-safe; see the module docs).

    ``threshold_ms``: the ``percentile`` of recent scheduling waits above which
    no new speculation starts. ``window``: how many samples that looks at.
    ``max_concurrent``: a hard cap on running speculations (``None``: none).
    ``min_samples``: below this many samples the governor admits (no evidence
    of pressure yet).
    """

    threshold_ms: float = 4.0
    percentile: float = 99.0
    window: int = 60
    max_concurrent: int | None = None
    min_samples: int = 10
    enabled: bool = True
    max_defer_s: float = 1.0
    """How long a running speculation's next model request may wait for headroom."""
    defer_poll_s: float = 0.02
    deferred: int = 0
    """Requests that had to wait for headroom (at least one poll)."""
    _waits: deque[float] = field(default_factory=deque, repr=False)
    _running: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    admitted: int = 0
    refused: int = 0

    def record(self, wait_s: float) -> None:
        """One sampled wait (seconds)."""
        with self._lock:
            self._waits.append(wait_s)
            while len(self._waits) > self.window:
                self._waits.popleft()

    def pressure_ms(self) -> float:
        """The ``percentile`` of the window's waits, in ms (0 with too few samples)."""
        with self._lock:
            waits = sorted(self._waits)
        if not waits or len(waits) < self.min_samples:
            return 0.0
        index = min(len(waits) - 1, round(self.percentile / 100 * (len(waits) - 1)))
        return waits[index] * 1000.0

    def try_admit(self) -> str | None:
        """Admit one speculation (``None``), or say why not.

        An admitted speculation must be :meth:`release`-d when it ends.
        """
        if not self.enabled:
            with self._lock:
                self._running += 1
                self.admitted += 1
            return None
        pressure = self.pressure_ms()
        with self._lock:
            if self.max_concurrent is not None and self._running >= self.max_concurrent:
                self.refused += 1
                return f"{self._running} speculations already run (the cap)"
            if pressure > self.threshold_ms:
                self.refused += 1
                return (
                    f"the runtime is busy (p{self.percentile:g} scheduling wait "
                    f"{pressure:.1f} ms > {self.threshold_ms:g} ms)"
                )
            self._running += 1
            self.admitted += 1
            return None

    def busy(self) -> bool:
        """Whether the pressure is over the threshold now (False when disabled)."""
        return self.enabled and self.pressure_ms() > self.threshold_ms

    async def wait_for_headroom(self) -> float:
        """Wait (asynchronously) until :meth:`busy` is False or ``max_defer_s`` passed.

        Returns the seconds waited. A cancelled caller stops waiting at once.
        """
        if not self.busy():
            return 0.0
        started = time.monotonic()
        with self._lock:
            self.deferred += 1
        deadline = started + self.max_defer_s
        while self.busy() and time.monotonic() < deadline:
            await asyncio.sleep(self.defer_poll_s)
        return time.monotonic() - started

    def release(self) -> None:
        """An admitted speculation ended."""
        with self._lock:
            self._running = max(0, self._running - 1)

    @property
    def running(self) -> int:
        with self._lock:
            return self._running


class _ProbeActor(ForeActor):
    """Receives probe ticks; how late each arrives is the actor-side wait."""

    def __init__(self, governor: LoadGovernor) -> None:
        super().__init__()
        self.governor = governor

    @handles(LoadSample)
    def _on_tick(self, tick: LoadSample) -> None:
        self.governor.record(time.monotonic() - tick.sent)


class LoadProbe:
    """Samples scheduling waits into a :class:`LoadGovernor` on the runtime's timer.

    Every ``interval`` seconds: one :class:`~messages.speculation.LoadSample` to a
    probe actor (how long
    an actor waits for a dispatcher thread) and one callback on each given
    event loop (how long a stream chunk waits for its loop). ``call_soon`` are
    the loops' ``call_soon_threadsafe``.
    """

    def __init__(
        self,
        governor: LoadGovernor,
        system: Any,
        *,
        loops: tuple[Callable[..., Any], ...] = (),
        interval: float = 0.05,
    ) -> None:
        self.governor = governor
        self.interval = interval
        self._system = system
        self._loops = loops
        self._closed = False
        with system.activated():
            self._actor = _ProbeActor.start(governor)
        self._timer = system.timer.call_later(interval, self._tick)

    def _tick(self) -> None:
        if self._closed:
            return
        now = time.monotonic()
        try:
            self._actor.tell(LoadSample(sent=now))
            for call_soon in self._loops:
                call_soon(self._loop_sample, now)
        except Exception:  # shutting down: an actor or a loop is already gone
            return
        self._timer = self._system.timer.call_later(self.interval, self._tick)

    def _loop_sample(self, sent: float) -> None:
        self.governor.record(time.monotonic() - sent)

    def close(self) -> None:
        """Stop sampling (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._timer.cancel()
        try:
            self._actor.stop(block=False)
        except Exception:
            pass
