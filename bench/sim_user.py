"""The load benchmark's simulated user: when it acts, what it does, what it records.

A :class:`SimUser` per session -- a pooled actor, so the harness adds no
threads -- types a prompt, reads the answer for a think time
(:func:`think_time`; its first action as if found in steady state:
:func:`first_action_delay`), then presses Tab or types over the suggestion,
or types at once while the speculation runs (:data:`TYPE_AT_ONCE_S`).
Everything it observes goes into the :class:`Recorder` (latencies, counts)
and the recorder's :class:`~bench.report_accounting.Ledger` (one bucket per
round, suggestion and speculation). The run driver is :mod:`bench.load`.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pykka import ActorRef

from fore.actors.core import ActorSystem, PooledActor, handles
from fore.bench.load_options import LoadOptions
from fore.bench.report_accounting import Ledger
from fore.bench.workload import USER_PROMPTS
from fore.messages.session import EventBase, Subscribe, TurnResult
from fore.messages.speculation import (
    AcceptResult,
    AcceptSuggestion,
    Keystroke,
    SpeculationFinished,
    SpeculationProgress,
    SpeculationSkipped,
    SubmitPrompt,
    SuggestionReady,
)

THINK_DISTS = ("exp", "lognormal", "uniform", "fixed")
"""Think-time distributions, each with mean ``think_ms`` (see :func:`think_time`)."""

TYPE_AT_ONCE_S = (0.05, 0.25)
"""When a user who types at once (``type_during_p``) presses its first key:
uniformly this many seconds after the answer. The answer's suggestion is
ready some 50-100 ms after it and its speculation then runs for a few
hundred ms here, so most of these keystrokes find it running."""


_LONGEST = {"fixed": 1.0, "uniform": 2.0, "lognormal": 5.0, "exp": 5.0}
"""The longest think time of each distribution, in means (its cap)."""


def think_time(rng: random.Random, dist: str, mean: float) -> float:
    """One think time in seconds with the given ``mean``.

    ``exp``: exponential (memoryless readers), capped at 5x the mean;
    ``lognormal``: sigma 1 (a long right tail: most read quickly, a few
    linger), mu chosen so the mean is ``mean``, capped at 5x; ``uniform``:
    0..2x the mean; ``fixed``: always the mean.
    """
    if mean <= 0:
        return 0.0
    if dist == "fixed":
        return mean
    if dist == "uniform":
        return rng.uniform(0.0, _LONGEST["uniform"] * mean)
    if dist == "lognormal":
        sigma = 1.0
        draw = rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)
        return min(_LONGEST["lognormal"] * mean, draw)
    if dist == "exp":
        return min(_LONGEST["exp"] * mean, rng.expovariate(1 / mean))
    raise ValueError(f"unknown think-time distribution {dist!r}; one of {', '.join(THINK_DISTS)}")


def first_action_delay(rng: random.Random, dist: str, mean: float) -> float:
    """When a user first acts, for a run that starts in steady state.

    Every user of a closed workload alternates a turn and a think time. Seen at
    a random instant of steady state, a user is part-way through a think time
    -- a *long* one more likely than a short one -- so the time left until its
    next action follows the distribution's equilibrium (residual) law: a think
    time drawn in proportion to its length, and a uniform fraction of it.
    Starting every user there makes the action rate flat from the first
    second. Starting them uniformly over one mean think time (what this did
    before) let the first round's arrivals and the early users' second round
    pile up around t = mean: a transient peak of about 1.6x the steady rate,
    where the slowest turns of every run fell. For ``fixed`` this is a uniform
    start over the think time; for ``exp`` (memoryless) the think-time law
    itself.
    """
    if mean <= 0:
        return 0.0
    longest = _LONGEST.get(dist, 0.0) * mean  # an unknown ``dist``: think_time says so
    while True:  # length-biased draw by rejection (acceptance >= 1/5: the caps bound it)
        think = think_time(rng, dist, mean)
        if rng.random() * longest <= think:
            return rng.random() * think


@dataclass
class Recorder:
    """Thread-safe collection of everything the simulated users observe."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rounds: int = 0
    typed_turn_s: list[float] = field(default_factory=list)
    typed_turn_spans: list[tuple[float, float]] = field(default_factory=list)
    """When each typed turn ran (``time.monotonic()``), in ``typed_turn_s``'s order."""
    accept_latency_s: list[float] = field(default_factory=list)
    tab_roundtrip_s: list[float] = field(default_factory=list)
    time_saved_s: list[float] = field(default_factory=list)
    abort_cancel_s: list[float] = field(default_factory=list)
    """Keystroke -> stream closed and tools cancelled (running speculations only)."""
    abort_cleanup_s: list[float] = field(default_factory=list)
    """Keystroke -> overlay removed (running speculations only)."""
    finished_abort_cleanup_s: list[float] = field(default_factory=list)
    """Keystroke -> overlay removed, for speculations that had already finished."""
    suggestions: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    states: dict[str, int] = field(default_factory=dict)
    tab_waited_s: list[float] = field(default_factory=list)
    accepts: dict[str, int] = field(default_factory=dict)
    wasted_tokens: int = 0
    wasted_tokens_estimated: int = 0
    skipped: int = 0
    typed_at_once: int = 0
    errors: list[str] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)

    def add(self, name: str, value: float) -> None:
        with self.lock:
            getattr(self, name).append(value)

    def typed_turn(self, typed: float, answered: float) -> None:
        """A typed turn's latency and its span, under one lock (so the two stay aligned)."""
        with self.lock:
            self.typed_turn_s.append(answered - typed)
            self.typed_turn_spans.append((typed, answered))

    def count(self, table_name: str, key: str) -> None:
        with self.lock:
            counts: dict[str, int] = getattr(self, table_name)
            counts[key] = counts.get(key, 0) + 1


USER_EVENTS = frozenset(
    {"suggestion_ready", "speculation_progress", "speculation_finished", "speculation_skipped"}
)
"""The session events a simulated user reads (``Subscribe(kinds=...)``)."""


class SimUser(PooledActor):
    """One simulated user, driving its session by messages only.

    It files what it sees into the recorder's :class:`~bench.report_accounting.Ledger`
    (rounds, suggestions, speculations), so every one of them is accounted for.
    """

    def __init__(
        self,
        session: Any,
        workspace: Path,
        options: LoadOptions,
        seed: int,
        recorder: Recorder,
        done: threading.Semaphore,
        deadline: float,
        index: int = 0,
    ) -> None:
        super().__init__()
        self.session = session
        self.workspace = workspace
        self.options = options
        self.rng = random.Random(seed)
        self.recorder = recorder
        self.ledger = recorder.ledger
        self.index = index
        self.done = done
        self.deadline = deadline
        self.rounds = 0
        self.finished = False
        self._wake: object | None = None
        """The pending think timer's token (a stale timer finds it changed)."""

    def on_start(self) -> None:
        self.ledger.user(self.index, self.options.turns)
        # Only what it reads (the handlers below): no status events, no worker events.
        self.session.controller.tell(Subscribe(address=self.actor_ref, kinds=USER_EVENTS))
        # Users start as they would be found in steady state, part-way through
        # a think time (first_action_delay); a burst of every session's first
        # prompt in the same instant would measure the stampede, not the runtime.
        delay = first_action_delay(
            self.rng, self.options.think_dist, max(0.2, self.options.think_ms / 1000.0)
        )
        self._after(delay, self._type)

    def _after(self, delay: float, action: Callable[[], None]) -> None:
        token = self._wake = object()
        self.call_after(delay, self._wake_up, token, action)

    def _wake_up(self, token: object, action: Callable[[], None]) -> None:
        if token is self._wake and not self.finished:
            self._wake = None
            action()

    # -- one round -----------------------------------------------------------------

    def _think(self) -> float:
        return think_time(self.rng, self.options.think_dist, self.options.think_ms / 1000.0)

    def _prompt(self) -> str:
        return USER_PROMPTS[(self.rounds + self.rng.randrange(3)) % len(USER_PROMPTS)]

    def _type(self, prompt: str | None = None) -> None:
        """Submit a prompt of the user's own, typed over whatever suggestion is shown.

        ``prompt``: the one it started typing at once (:meth:`_start_typing`).
        """
        at_once = prompt is not None
        if prompt is None:
            prompt = self._prompt()
            self.session.controller.tell(Keystroke(text=prompt[:1]))
        self.ledger.typed_over(self.index, at_once=at_once)
        self.ledger.round_began(self.index)
        typed = time.monotonic()
        self.ask_then(
            self.session.controller,
            SubmitPrompt(text=prompt),
            then=lambda result: self._typed_done(typed, result),
            on_error=self._error,
            timeout=120.0,
        )

    def _start_typing(self, think: float) -> None:
        """Type at once: the keystrokes land while the speculation runs (``type_during_p``).

        The user types its own next prompt -- text that is no prefix of the
        suggestion, so the speculation is aborted now -- and presses Enter
        after its usual think time: it composes instead of reading, so the
        pace of the workload is the same with or without this knob.
        """
        prompt = self._prompt()
        with self.recorder.lock:
            self.recorder.typed_at_once += 1
        self.ledger.typed_over(self.index, at_once=True)
        self.session.controller.tell(Keystroke(text=prompt))
        self._after(think, lambda: self._type(prompt))

    def _typed_done(self, typed: float, result: TurnResult) -> None:
        self.recorder.typed_turn(typed, time.monotonic())
        if result.status != "completed":
            self.recorder.count("accepts", f"typed turn {result.status}")
        self.ledger.round_ended(self.index, "typed" if result.status == "completed" else "error")
        self._round_over()

    def _decide(self) -> None:
        if self.finished:
            return
        if self.ledger.has_pending(self.index) and self.rng.random() < self.options.accept_p:
            if self.rng.random() < self.options.edit_p:
                # the user edits the file the speculation writes: its accept conflicts
                todo = self.workspace / "notes" / "todo.md"
                todo.write_text(f"user edit {self.rng.random()}\n")
            pressed = time.monotonic()
            self.ledger.tab_pressed(self.index)
            self.ledger.round_began(self.index)
            self.ask_then(
                self.session.controller,
                AcceptSuggestion(wait_continuation=True),
                then=lambda result: self._accepted(pressed, result),
                on_error=self._error,
                timeout=120.0,
            )
            return
        self._type()

    def _accepted(self, pressed: float, result: AcceptResult) -> None:
        self.recorder.count("accepts", result.outcome)
        self.ledger.tab_answered(self.index, result.outcome)
        self.ledger.round_ended(self.index, "tab")
        if result.outcome in ("accepted", "boundary"):
            self.recorder.add("accept_latency_s", result.accept_latency_s)
            self.recorder.add("time_saved_s", result.time_saved_s)
            if result.waited_s > 0:
                self.recorder.add("tab_waited_s", result.waited_s)
            if result.outcome == "accepted":
                self.recorder.add("tab_roundtrip_s", time.monotonic() - pressed)
        self._round_over()

    def _round_over(self) -> None:
        self.rounds += 1
        with self.recorder.lock:
            self.recorder.rounds += 1
        if self.rounds >= self.options.turns:
            self._finish("turns")
            return
        # (no draw at all when it is 0: the runs of a seed stay what they were)
        p = self.options.type_during_p
        at_once = p > 0 and self.rng.random() < p
        think = self._think()
        reaction = self.rng.uniform(*TYPE_AT_ONCE_S) if at_once else 0.0
        # A user who would still be thinking at the deadline leaves now: the
        # run's wall time is bounded by ``duration`` plus the rounds in flight.
        if time.monotonic() + reaction + think >= self.deadline:
            self._finish("deadline")
            return
        if at_once:
            self._after(reaction, lambda: self._start_typing(think))
        else:
            self._after(think, self._decide)

    def _error(self, error: BaseException) -> None:
        with self.recorder.lock:
            self.recorder.errors.append(f"{type(error).__name__}: {error}")
        self.ledger.round_ended(self.index, "error")
        self._finish("error")

    def _finish(self, reason: Any) -> None:
        if not self.finished:
            self.finished = True
            self._wake = None
            self.ledger.left(self.index, reason)
            self.done.release()

    # -- what the session tells us --------------------------------------------------------

    @handles(SuggestionReady)
    def _on_suggestion(self, event: SuggestionReady) -> None:
        self.ledger.suggestion_shown(self.index, event.suggestion.id)
        with self.recorder.lock:
            self.recorder.suggestions += 1

    @handles(SpeculationProgress)
    def _on_progress(self, event: SpeculationProgress) -> None:
        self.ledger.speculation_seen(event.speculation_id)

    @handles(SpeculationFinished)
    def _on_finished(self, event: SpeculationFinished) -> None:
        self.ledger.speculation_ended(event.speculation_id, event.outcome, event.was_running)
        recorder = self.recorder
        with recorder.lock:
            recorder.outcomes[event.outcome] = recorder.outcomes.get(event.outcome, 0) + 1
            recorder.states[event.state] = recorder.states.get(event.state, 0) + 1
            if event.outcome in ("aborted", "failed", "conflict", "stale", "empty"):
                recorder.wasted_tokens += event.tokens
                recorder.wasted_tokens_estimated += event.estimated_tokens
            if event.outcome != "aborted" or event.was_running is None:
                return
            if event.was_running:  # the LLM stream and the tools really had to stop
                if event.cancel_latency_s is not None:
                    recorder.abort_cancel_s.append(event.cancel_latency_s)
                if event.cleanup_latency_s is not None:
                    recorder.abort_cleanup_s.append(event.cleanup_latency_s)
            elif event.cleanup_latency_s is not None:  # finished: only its overlay was left
                recorder.finished_abort_cleanup_s.append(event.cleanup_latency_s)

    @handles(SpeculationSkipped)
    def _on_skipped(self, _event: SpeculationSkipped) -> None:
        with self.recorder.lock:
            self.recorder.skipped += 1

    @handles(EventBase)
    def _on_other(self, _event: EventBase) -> None:
        """Other session events are of no interest to the simulated user."""


def start_users(
    system: ActorSystem,
    sessions: list[tuple[Any, Path]],
    options: LoadOptions,
    recorder: Recorder,
    done: threading.Semaphore,
    deadline: float,
) -> list[ActorRef[SimUser]]:
    """One :class:`SimUser` per session (the ``i``-th seeded from the run's seed and
    ``i``), on ``system``; each releases ``done`` when it has finished."""
    with system.activated():
        return [
            SimUser.start(
                session,
                workspace,
                options,
                options.seed * 100_003 + i,
                recorder,
                done,
                deadline,
                i,
            )
            for i, (session, workspace) in enumerate(sessions)
        ]


def users_finished(done: threading.Semaphore) -> int:
    """How many users have finished since the last call: waits up to 0.2 s for one,
    then takes all that are there (so the caller's loop samples about 5 times a second)."""
    if not done.acquire(timeout=0.2):
        return 0
    finished = 1
    while done.acquire(blocking=False):
        finished += 1
    return finished
