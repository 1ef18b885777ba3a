"""The speculation load benchmark (``fore bench``): the main job.

N sessions in this one process, each on its own generated workspace, all
talking to the built-in mock LLM server (a child process on 127.0.0.1, real
HTTP, a latency model). A simulated user per session -- a pooled actor, so
the harness adds no threads -- types a prompt, reads the answer (think time
drawn from ``think_dist`` -- exponential, lognormal, uniform or fixed -- with
mean ``think_ms``), then presses Tab on the suggestion with probability
``accept_p`` or types something else. With probability ``type_during_p`` it
does not read at all but starts typing its next prompt at once (within
:data:`TYPE_AT_ONCE_S` of the answer), which is while the speculation of the
answer's suggestion typically runs: that is what abort latency is measured
on; it presses Enter after its usual think time, so the workload's pace does
not depend on the knob. It is bounded by ``turns`` per session and stops by
itself.

**Wall time.** ``duration`` bounds the whole run -- opening the sessions, the
users' rounds, a short drain, closing everything -- not just the rounds: the
users get what is left after setup, the drain (rounds in flight at their
deadline may finish within ``drain_s``; any still running then are cut and
counted) and a reserve for the teardown (about what opening took). So the
default run (200 sessions, 100 s) ends in well under two minutes.

**Accounting.** Every planned round, every suggestion shown and every
speculation admitted ends in exactly one named bucket
(:mod:`bench.report_accounting`): what the users saw is filed as it happens;
when the run ends the ledger is frozen and each session's current
speculation is read, so the ones still running or unused at the end are
counted as such rather than lost.

**Ctrl-C** ends the rounds, not the process: the sessions are closed, then
the runtime, and only then the mock server (which is spawned with SIGINT
blocked, so the terminal's Ctrl-C does not kill it first), and the report of
what finished is returned with ``interrupted`` set. A second Ctrl-C gives up
on the orderly teardown (quietly).

Reported: sessions, turns, suggestions, speculations by outcome; accept
latency (Tab -> files applied and history inserted); abort latency, timed
from the keystroke to the reaper's confirmations that the LLM stream closed
and the tool calls were cancelled (``SpeculationFinished.abort_steps``), only
over speculations that were still running when the abort reached them --
aborts of finished speculations have nothing to cancel and are counted
separately, with their keystroke -> overlay-removed time; time saved per
accepted turn; tokens spent on discarded speculations, including streams an
abort cancelled (estimated at ~4 characters per token when no usage arrived;
:mod:`actors.speculation.metered`); main-turn latency (and, with ``compare``,
the same workload without speculation, over interleaved pairs of runs:
:func:`run_comparison`); RSS per session, peak OS threads and
file descriptors; setup / run / teardown / total wall time; a timeline of
running speculations and governor skips (sampled with the progress bar, a few
numbers every 0.2 s); and leaks after shutdown -- all of which must be zero:
overlays of a session still on disk when its ``Session.close()`` returned (or
a close that timed out), overlay directories on disk when ``Runtime.close()``
returned, threads, file descriptors, live actors, and an unclean
``Runtime.close()``.
"""

from __future__ import annotations

import gc
import json
import math
import random
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil
from pykka import ActorRef
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fore.actors.core import ActorSystem, PooledActor, handles
from fore.actors.llm import AnthropicModel, OpenAICompatible, RetryPolicy, evloop
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.telemetry.usage import usage_json
from fore.bench._common import console, percentile
from fore.bench.report_accounting import Accounting, Ledger
from fore.bench.report_cache import cache_summary
from fore.bench.workload import USER_PROMPTS, make_workspace, script
from fore.errors import BenchSetupError
from fore.messages.gate import ApprovalMode
from fore.messages.session import EventBase, Subscribe, TurnResult
from fore.messages.speculation import (
    AcceptResult,
    AcceptSuggestion,
    GetSpeculation,
    Keystroke,
    SpeculationConfig,
    SpeculationFinished,
    SpeculationProgress,
    SpeculationSkipped,
    SubmitPrompt,
    SuggestionReady,
)
from fore.messages.usage import ModelPrice, UsageSummary
from fore.supervision import Runtime

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["BenchSetupError"]

THINK_DISTS = ("exp", "lognormal", "uniform", "fixed")
"""Think-time distributions, each with mean ``think_ms`` (see :func:`think_time`)."""

TYPE_AT_ONCE_S = (0.05, 0.25)
"""When a user who types at once (``type_during_p``) presses its first key:
uniformly this many seconds after the answer. The answer's suggestion is
ready some 50-100 ms after it and its speculation then runs for a few
hundred ms here, so most of these keystrokes find it running."""

TIMELINE_POINTS = 2_000
"""The timeline keeps at most this many samples (every other one is dropped
when it fills: a long run is sampled more coarsely, never unboundedly)."""


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
class LoadOptions:
    sessions: int = 200
    turns: int = 4
    duration: float = 100.0
    """Wall-clock bound of the whole run, setup and teardown included (module docs)."""
    accept_p: float = 0.7
    think_ms: float = 10_000.0
    """Mean time a user reads an answer before acting.

    Ten seconds is a quick reader of a coding agent's answer; at 5 s the 200
    default sessions keep this 2-core machine saturated (see the issue note).
    """
    think_dist: str = "exp"
    """How think times are distributed around ``think_ms`` (:data:`THINK_DISTS`)."""
    type_during_p: float = 0.8
    """Probability that a user, instead of reading the answer, starts typing its
    next prompt at once -- while the speculation runs (:data:`TYPE_AT_ONCE_S`) --
    and presses Enter after its think time (:meth:`SimUser._start_typing`).

    Only a keystroke that finds the speculation still running measures abort
    latency, and a session acts on just two suggestions in a default run (the
    first answer has none, the last one's is never acted on): ~400 in all,
    less what the governor skips. About three in four of these keystrokes
    find the speculation running. Measured on a default run: 0.75 gave 249
    aborts of running speculations with no governor skips, and 187 with the
    governor skipping 23% of suggestions on a machine loaded by other work;
    0.8 gave 265 without skips and 233 with the governor skipping 10%, and
    leaves a fifth of the suggestions to be read and accepted with ``accept_p``."""
    drain_s: float = 5.0
    """After the users' deadline, rounds in flight get this long to finish."""
    edit_p: float = 0.05
    ttft_ms: float = 40.0
    tokens_per_s: float = 400.0
    speculation: bool = True
    governor: bool = True
    """Speculate only with headroom (the runtime's default); off: speculate always."""
    seed: int = 1
    progress: bool = True
    price: tuple[float, float, float] = (3.0, 15.0, 0.3)
    """The mock model's price, USD per million input / output / cached input tokens
    (``--price``): the report's costs, waste in money included (issue 28)."""
    shards: int = 0
    """Ray shards hosting the sessions (``fore bench --shards N``, :mod:`bench.load_ray`);
    0: the sessions are in this process."""
    provider: str = "openai"
    """The mock's wire protocol the sessions speak: ``openai`` (Chat Completions) or
    ``anthropic`` (Messages, with prompt caching: the report's "prompt cache" rows)."""
    store: str | None = None
    """``"sqlite"``: every session in a SQLite session store (a file of the run's temp
    directory), each turn written ahead of its report (``fore bench --store sqlite``)."""


@dataclass
class Recorder:
    """Thread-safe collection of everything the simulated users observe."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rounds: int = 0
    typed_turn_s: list[float] = field(default_factory=list)
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

    def count(self, table_name: str, key: str) -> None:
        with self.lock:
            counts: dict[str, int] = getattr(self, table_name)
            counts[key] = counts.get(key, 0) + 1


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
        self.session.controller.tell(Subscribe(address=self.actor_ref))
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
        self.recorder.add("typed_turn_s", time.monotonic() - typed)
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


@dataclass
class LoadReport:
    options: dict[str, Any]
    sessions: int
    turns: int
    suggestions: int
    speculations_started: int
    """Speculations the runtime admitted (the load governor's count)."""
    speculations_skipped: int
    speculations: dict[str, int]
    speculation_states: dict[str, int]
    accepts: dict[str, int]
    tab_waited_ms: dict[str, float]
    accept_latency_ms: dict[str, float]
    abort_latency_ms: dict[str, float]
    """Keystroke -> LLM stream closed and tool calls cancelled, over running speculations."""
    abort_cleanup_ms: dict[str, float]
    """Keystroke -> overlay removed, over the same running speculations."""
    aborts_of_finished: int
    """Aborts of speculations that had already finished (nothing left to cancel)."""
    abort_finished_cleanup_ms: dict[str, float]
    """Their keystroke -> overlay removed."""
    time_saved_ms_mean: float
    wasted_tokens: int
    """Tokens of aborted, failed, conflicting, stale and empty speculations (estimates included)."""
    wasted_tokens_estimated: int
    """Of those: estimated for streams cancelled before their usage arrived."""
    main_turn_ms: dict[str, float]
    rss_per_session_kib: float
    peak_threads: int
    peak_fds: int
    wall_s: float
    """The users' rounds (from the first user's start to the last one's end or the cut)."""
    setup_s: float
    teardown_s: float
    wall_total_s: float
    """Everything: starting the mock server, opening and closing the sessions, the rounds."""
    rounds_cut: int
    """Users still in a round when the drain ended (their sessions were closed under them)."""
    leaks: dict[str, int]
    errors: list[str]
    turns_planned: int = 0
    """Sessions x turns: every one is in a bucket of ``accounting["turns"]``."""
    typed_at_once: int = 0
    """Rounds in which the user typed at once, while the speculation ran (``type_during_p``)."""
    accounting: dict[str, Any] = field(default_factory=dict)
    """Every turn, suggestion and speculation in one bucket (:class:`Accounting`)."""
    timeline: dict[str, list[float]] = field(default_factory=dict)
    """Sampled during the rounds: ``t_s`` (since the users started), ``running``
    (speculations running), ``skipped`` and ``admitted`` (cumulative), ``rounds``
    (cumulative)."""
    interrupted: bool = False
    """Ctrl-C ended the run: the figures are of what finished before it."""
    shard_loads: list[dict[str, Any]] = field(default_factory=list)
    """With ``--shards N``: each shard's load at the end of the rounds (:mod:`bench.load_ray`)."""
    tab_roundtrip_ms: dict[str, float] = field(default_factory=dict)
    """With ``--shards N``: Tab pressed here -> the accept answered here (continuation included),
    through Ray."""
    cache: dict[str, Any] = field(default_factory=dict)
    """Prompt-cache figures by purpose (``--provider anthropic``; :mod:`bench.report_cache`)."""
    usage: dict[str, Any] = field(default_factory=dict)
    """What the provider reported, by purpose, priced at ``options["price"]`` (issue 28)."""
    wasted_cost_usd: float = 0.0
    """``wasted_tokens`` in money, at the run's own cost per speculation token."""


def _model_price(price: tuple[float, float, float]) -> ModelPrice:
    return ModelPrice(input=price[0], output=price[1], cached_input=price[2])


def wasted_cost(usage: UsageSummary, wasted_tokens: int) -> float:
    """The waste in money: its tokens at what a speculation token cost in this run.

    A discarded speculation's tokens are only known in total (and partly
    estimated, for streams cancelled before their usage came), not split into
    input, cached and output; the run's own blend of those, over every
    speculation request the provider reported, prices them -- or, when every
    speculation was cut off before its usage came, the whole run's blend.
    """
    spent = usage.of("speculation")
    if spent.total_tokens == 0:
        spent = usage.total
    tokens = spent.total_tokens
    return 0.0 if tokens == 0 else wasted_tokens * spent.cost_usd / tokens


def count_overlay_dirs(rt: Runtime) -> int:
    """Overlay directories of this process on disk (its journal directory aside).

    Counted from the disk, not from what the runtime believes: a leak is
    whatever is still there right after ``close()`` returned.
    """
    process_dir = rt.overlays.process_dir
    try:
        return sum(1 for p in process_dir.iterdir() if p != rt.overlays.journal_dir)
    except FileNotFoundError:
        return 0


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0, "p50": math.nan, "p95": math.nan, "p99": math.nan}
    return {
        "count": len(values),
        "p50": percentile(values, 50) * 1e3,
        "p95": percentile(values, 95) * 1e3,
        "p99": percentile(values, 99) * 1e3,
    }


class _Interrupts:
    """Ctrl-C during a run: the first one asks the run to stop, a second one gives up.

    Installed only on the main thread (signal handlers live there); elsewhere
    a Ctrl-C is whatever the caller makes of it.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.gave_up = False
        """A second Ctrl-C: the orderly teardown was abandoned."""
        self._previous: Any = None
        self._installed = False

    def _handle(self, _signum: int, _frame: Any) -> None:
        if self.requested.is_set():
            self.gave_up = True
            raise KeyboardInterrupt
        self.requested.set()

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False


def _spawn_server(options: LoadOptions) -> Any:
    """The mock LLM server, spawned with SIGINT blocked so that it outlives a Ctrl-C.

    A Ctrl-C in a terminal goes to the whole foreground process group: the
    mock server would die at once, before the runtime could close its
    sessions, and every request still in flight would log a connection error.
    A child inherits its parent's blocked-signal mask through ``exec``; the
    server blocks SIGINT for good then (it still stops on SIGTERM, which is
    how :meth:`stop` ends it), and this thread's mask is restored at once (a
    Ctrl-C that arrived meanwhile is delivered then, not lost).
    """
    script_file = ScriptFile.model_validate(script(options.turns))
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return MockLlmServer.spawn(
            script_file,
            ttft_ms=options.ttft_ms,
            tokens_per_s=options.tokens_per_s,
            # The mock shares the machine: fork streams written per 50 ms tick, not per
            # token (see MockSettings.background_tick_ms).
            background_tick_ms=50.0,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class _Timeline:
    """A few numbers every sample (~0.2 s): cheap, and bounded by :data:`TIMELINE_POINTS`."""

    def __init__(self) -> None:
        self.columns: dict[str, list[float]] = {
            k: [] for k in ("t_s", "running", "skipped", "admitted", "rounds")
        }
        self._stride = 1
        self._calls = 0

    def sample(self, t: float, governor: LoadGovernor, rounds: int) -> None:
        self._calls += 1
        if self._calls % self._stride:
            return
        for key, value in (
            ("t_s", t),
            ("running", governor.running),
            ("skipped", governor.refused),
            ("admitted", governor.admitted),
            ("rounds", rounds),
        ):
            self.columns[key].append(float(value))
        if len(self.columns["t_s"]) >= TIMELINE_POINTS:
            for values in self.columns.values():
                del values[1::2]
            self._stride *= 2


def open_user_session(
    rt: Any, root: Path, i: int, model: Any, config: SpeculationConfig
) -> tuple[Any, Path]:
    """The ``i``-th user's session on ``rt`` (a :class:`~supervision.Runtime` or a
    :class:`~fore.distributed.RayRuntime`), in a fresh workspace under ``root``."""
    workspace = make_workspace(root / "ws" / f"s{i:05d}")
    session = rt.open_session(
        workspace=workspace,
        model=model,
        speculation=config,
        system_prompt="You are a careful coding agent.",
    )
    return session, workspace


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


def freeze_ledger(
    ledger: Ledger, options: LoadOptions, played: int, *, interrupted: bool, rounds_cut: int
) -> None:
    """The run has ended: the users never started (Ctrl-C while opening) are filed
    as unplayed, and the ledger takes nothing more."""
    for i in range(played, options.sessions):
        ledger.user(i, options.turns)
    ledger.freeze("interrupt" if interrupted else "duration" if rounds_cut else None)


def _open_states(sessions: list[tuple[Any, Path]], deadline_s: float = 5.0) -> dict[str, Any]:
    """Each session's current speculation id -> its state, asked of all at once."""
    futures = []
    for session, _ in sessions:
        try:
            futures.append(session.controller.ask(GetSpeculation(), block=False))
        except Exception:  # a session that is gone has nothing open
            continue
    until = time.monotonic() + deadline_s
    states: dict[str, Any] = {}
    for future in futures:
        try:
            status, _text = future.get(timeout=max(0.01, until - time.monotonic()))
        except Exception:
            continue
        if status.speculation_id is not None:
            states[status.speculation_id] = status.state
    return states


def run_load(options: LoadOptions) -> tuple[LoadReport, dict[str, list[float]]]:
    """Run the workload once; returns the report and the raw latency samples (seconds).

    Raises :class:`BenchSetupError` (one clear line) when it cannot start. A
    Ctrl-C ends the rounds early and still returns (``report.interrupted``).
    """
    if options.think_dist not in THINK_DISTS:
        raise BenchSetupError(f"unknown think-time distribution {options.think_dist!r}")
    with _Interrupts() as interrupts:
        if options.shards:  # --shards N: the sessions on Ray shards (bench/load_ray.py)
            from fore.bench.load_ray import run_load_ray

            return run_load_ray(options, interrupts)
        return _run(options, interrupts)


def _run(
    options: LoadOptions, interrupts: _Interrupts
) -> tuple[LoadReport, dict[str, list[float]]]:
    begun = time.monotonic()
    try:
        root = Path(tempfile.mkdtemp(prefix="fore-bench-"))
    except OSError as exc:
        raise BenchSetupError(f"cannot create a temp directory: {exc.strerror or exc}") from None
    recorder = Recorder()
    try:
        server = _spawn_server(options)
    except Exception as exc:
        shutil.rmtree(root, ignore_errors=True)
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise BenchSetupError(f"cannot start the mock LLM server: {detail}") from None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    process = psutil.Process()
    try:
        threads_before = {t.ident for t in threading.enumerate()}
        # libuv's process-wide signal pipe is made by the first event loop of
        # the process and lives as long as it: part of the process, not of a run.
        evloop.new_event_loop().close()
        fds_before = process.num_fds()
        # The runtime starts with a full collection (actors.core.tuning): the
        # baseline is taken after one too, or the setup's garbage (the parsed
        # script, say) would be freed inside the measurement and the RSS per
        # session come out negative.
        gc.collect()
        rss_before = process.memory_info().rss
        governor = LoadGovernor(enabled=options.governor)
        rt = Runtime(
            name="bench",
            overlay_root=root / "overlays",
            blob_dir=root / "blobs",
            speculation_governor=governor,
            # The benchmark owns its process: the GC and GIL settings that a
            # many-session service would choose (actors/core/tuning.py).
            tune_process=True,
            store=f"sqlite:///{root / 'sessions.db'}" if options.store == "sqlite" else None,
            prices={"*": _model_price(options.price)},
        )
        model = _bench_model(options.provider, server)
        config = SpeculationConfig(
            enabled=True, speculate=options.speculation, approval_mode=ApprovalMode.AUTO_EDIT
        )
        done = threading.Semaphore(0)
        users: list[ActorRef[SimUser]] = []
        peak_threads = threading.active_count()
        peak_fds = process.num_fds()
        peak_rss = process.memory_info().rss
        total_rounds = options.sessions * options.turns
        progress = Progress(
            TextColumn("[bold]fore bench[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=not options.progress,
            transient=True,
        )
        sessions: list[tuple[Any, Path]] = []
        rounds_cut = 0
        timeline = _Timeline()
        started = time.monotonic()
        with progress:
            opening = progress.add_task("opening sessions", total=options.sessions)
            for i in range(options.sessions):
                if interrupts.requested.is_set():
                    break
                sessions.append(open_user_session(rt, root, i, model, config))
                progress.advance(opening)
            progress.remove_task(opening)
            started = time.monotonic()
            setup = started - begun
            # The users get what the wall-clock bound leaves after setup, the
            # drain, and a teardown about as long as the setup (module docs).
            window = options.duration - setup - options.drain_s - max(2.0, setup)
            deadline = started + max(1.0, window)
            hard_stop = deadline + options.drain_s
            task = progress.add_task(
                "speculation" if options.speculation else "no speculation", total=total_rounds
            )
            if not interrupts.requested.is_set():
                users = start_users(rt.system, sessions, options, recorder, done, deadline)
            finished = 0
            while finished < len(users):
                finished += users_finished(done)
                progress.update(task, completed=recorder.rounds)
                timeline.sample(time.monotonic() - started, governor, recorder.rounds)
                peak_threads = max(peak_threads, threading.active_count())
                peak_fds = max(peak_fds, process.num_fds())
                peak_rss = max(peak_rss, process.memory_info().rss)
                if interrupts.requested.is_set() or time.monotonic() > hard_stop:
                    rounds_cut = len(users) - finished  # their sessions close under them
                    break
        wall = time.monotonic() - started
        interrupted = interrupts.requested.is_set()
        # The run has ended: what is open now is counted as open (the ledger
        # takes nothing more), then each session says what it still runs.
        ledger = recorder.ledger
        freeze_ledger(
            ledger, options, len(sessions), interrupted=interrupted, rounds_cut=rounds_cut
        )
        accounting = ledger.result(_open_states(sessions), admitted=governor.admitted)
        closing = time.monotonic()
        for user in users:
            user.stop()
        # Each close returns only once the session's overlays are gone: count
        # any still on disk at that moment (and any close that says it timed out).
        session_overlays = 0
        for session, _ in sessions:
            closed_cleanly = session.close()
            left = len(rt.overlays.outstanding(session.id))
            session_overlays += left if left or closed_cleanly else 1
        usage = rt.usage  # every session's, closed ones included (issue 28)
        clean = rt.close(timeout=60)
        teardown = time.monotonic() - closing
        overlays_left = count_overlay_dirs(rt)
        leaked_threads = [t for t in threading.enumerate() if t.ident not in threads_before]
        leaks = {
            "session_overlays": session_overlays,
            "overlay_dirs": overlays_left,
            "threads": len(leaked_threads),
            "file_descriptors": max(0, process.num_fds() - fds_before),
            "live_actors": len(rt.system.registry),
            "unclean_shutdown": 0 if clean else 1,
        }
        report = _report(
            options, recorder, accounting, governor, timeline, leaks, interrupted=interrupted
        )
        report.rss_per_session_kib = (peak_rss - rss_before) / max(1, len(sessions)) / 1024
        report.peak_threads = peak_threads
        report.peak_fds = peak_fds
        report.wall_s = wall
        report.setup_s = setup
        report.teardown_s = teardown
        report.wall_total_s = time.monotonic() - begun
        report.rounds_cut = rounds_cut
        report.usage = usage_json(usage)
        report.wasted_cost_usd = wasted_cost(usage, report.wasted_tokens)
        report.cache = cache_summary(options.provider, getattr(model, "meter", None))
        if leaked_threads:
            report.errors.append(
                "leaked threads: " + ", ".join(t.name for t in leaked_threads[:10])
            )
        if rt.overlays_left:
            report.errors.append(
                "overlays left: " + "; ".join(str(o) for o in rt.overlays_left[:10])
            )
        samples = {
            "accept": recorder.accept_latency_s,
            "abort_cancel": recorder.abort_cancel_s,
            "abort_cleanup": recorder.abort_cleanup_s,
            "main_turn": recorder.typed_turn_s,
        }
        return report, samples
    finally:
        if interrupts.gave_up:
            # The sessions may still be running: with the server gone their
            # requests fail, and nobody wants those lines after a second Ctrl-C.
            from fore.actors.core.logs import configure_logging

            configure_logging(level="critical")
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _bench_model(provider: str, server: Any) -> Any:
    """The sessions' model: the mock over ``provider``'s wire protocol (issue 27)."""
    retry = RetryPolicy(max_retries=2, initial_backoff=0.05, max_backoff=0.5)
    if provider == "anthropic":
        return AnthropicModel(base_url=server.root_url, api_key="bench", model="mock", retry=retry)
    return OpenAICompatible(base_url=server.base_url, api_key="bench", model="mock", retry=retry)


def _report(
    options: LoadOptions,
    recorder: Recorder,
    accounting: Accounting,
    governor: LoadGovernor,
    timeline: _Timeline,
    leaks: dict[str, int],
    *,
    interrupted: bool,
) -> LoadReport:
    """The report's figures from what was recorded (the wall times are set by the caller)."""
    return LoadReport(
        options=asdict(options),
        sessions=options.sessions,
        turns=recorder.rounds,
        suggestions=accounting.suggestions.total,
        speculations_started=accounting.speculations.total,
        speculations_skipped=recorder.skipped,
        speculations=dict(sorted(recorder.outcomes.items())),
        speculation_states=dict(sorted(recorder.states.items())),
        accepts=dict(sorted(recorder.accepts.items())),
        tab_waited_ms=_quantiles(recorder.tab_waited_s),
        accept_latency_ms=_quantiles(recorder.accept_latency_s),
        abort_latency_ms=_quantiles(recorder.abort_cancel_s),
        abort_cleanup_ms=_quantiles(recorder.abort_cleanup_s),
        aborts_of_finished=len(recorder.finished_abort_cleanup_s),
        abort_finished_cleanup_ms=_quantiles(recorder.finished_abort_cleanup_s),
        time_saved_ms_mean=(
            sum(recorder.time_saved_s) / len(recorder.time_saved_s) * 1e3
            if recorder.time_saved_s
            else 0.0
        ),
        wasted_tokens=recorder.wasted_tokens,
        wasted_tokens_estimated=recorder.wasted_tokens_estimated,
        main_turn_ms=_quantiles(recorder.typed_turn_s),
        rss_per_session_kib=0.0,
        peak_threads=0,
        peak_fds=0,
        wall_s=0.0,
        setup_s=0.0,
        teardown_s=0.0,
        wall_total_s=0.0,
        rounds_cut=0,
        leaks=leaks,
        errors=recorder.errors[:20],
        turns_planned=accounting.turns.total,
        typed_at_once=recorder.typed_at_once,
        accounting=accounting.as_dict(),
        timeline=timeline.columns,
        interrupted=interrupted,
    )


@dataclass
class Comparison:
    """Main-turn latency with speculation on vs off, over interleaved pairs of runs.

    One pair of runs cannot tell a few per cent apart at the p99: the p99 of a
    default run's ~540 typed turns is its 5-6 slowest, which a single burst of
    load sets, and two runs of the *same* arm differed by up to 8% at the p99
    here. So ``--compare --pairs N`` runs N pairs, each pair on its own seed
    (``seed``, ``seed + 1``, ...; both arms of a pair see the same workload),
    alternating the order (on/off, off/on, ...) so that a drift of the
    machine falls on both arms alike, and pools each arm's turns. The pooled
    ratio is the verdict; each pair's ratio shows the spread. A Ctrl-C keeps
    the pairs that finished.
    """

    pairs: list[dict[str, float]]
    """Per pair: ``seed``, ``on_p50``, ``off_p50``, ``on_p99``, ``off_p99``, ``p99_ratio`` (ms)."""
    on_ms: dict[str, float]
    """Quantiles over every typed turn of every run with speculation."""
    off_ms: dict[str, float]
    on_turns_s: list[float] = field(default_factory=list, repr=False)
    """The pooled typed-turn latencies themselves (seconds), for the plot."""
    off_turns_s: list[float] = field(default_factory=list, repr=False)

    @staticmethod
    def _ratio(on: float, off: float) -> float:
        return on / off if off and math.isfinite(off) else math.nan

    @property
    def p50_ratio(self) -> float:
        return self._ratio(self.on_ms["p50"], self.off_ms["p50"])

    @property
    def p99_ratio(self) -> float:
        return self._ratio(self.on_ms["p99"], self.off_ms["p99"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "on_ms": self.on_ms,
            "off_ms": self.off_ms,
            "p50_ratio": self.p50_ratio,
            "p99_ratio": self.p99_ratio,
        }


def run_comparison(
    options: LoadOptions, pairs: int = 1, *, arm: str = "speculation"
) -> tuple[list[LoadReport], list[LoadReport], Comparison | None, dict[str, list[float]]]:
    """``pairs`` interleaved pairs of runs, speculation on and off (see :class:`Comparison`).

    ``arm="store"`` compares the same workload with a SQLite session store
    ("on") and without one ("off") instead (``fore bench --store sqlite``).

    Returns the reports with and without speculation (in run order), the
    comparison over the pairs that finished (``None`` if Ctrl-C came before
    the first did), and the raw samples of the first run with speculation.
    """
    if pairs < 1:
        raise ValueError("pairs must be at least 1")
    on_reports: list[LoadReport] = []
    off_reports: list[LoadReport] = []
    on_turns: list[float] = []
    off_turns: list[float] = []
    first_samples: dict[str, list[float]] = {}
    rows = []
    for index in range(pairs):
        seed = options.seed + index
        order = (True, False) if index % 2 == 0 else (False, True)
        quantiles: dict[bool, dict[str, float]] = {}
        turns: dict[bool, list[float]] = {}
        for speculation in order:
            if arm == "store":
                varied = replace(options, store="sqlite" if speculation else None, seed=seed)
            else:
                varied = replace(options, speculation=speculation, seed=seed)
            report, samples = run_load(varied)
            (on_reports if speculation else off_reports).append(report)
            if speculation:
                first_samples = first_samples or samples
            if report.interrupted:
                break
            quantiles[speculation] = report.main_turn_ms
            turns[speculation] = samples["main_turn"]
        if len(quantiles) < 2:  # interrupted: this pair is incomplete, and the last
            break
        on_turns += turns[True]
        off_turns += turns[False]
        on, off = quantiles[True], quantiles[False]
        rows.append(
            {
                "seed": seed,
                "on_p50": on["p50"],
                "off_p50": off["p50"],
                "on_p99": on["p99"],
                "off_p99": off["p99"],
                "p99_ratio": Comparison._ratio(on["p99"], off["p99"]),
            }
        )
    comparison = None
    if rows:
        comparison = Comparison(
            rows, _quantiles(on_turns), _quantiles(off_turns), on_turns, off_turns
        )
    return on_reports, off_reports, comparison, first_samples


def leaks_total(report: LoadReport) -> int:
    return sum(report.leaks.values())


def report_json(
    report: LoadReport,
    compare: LoadReport | None = None,
    comparison: Comparison | None = None,
    verdict: list[dict[str, Any]] | None = None,
) -> str:
    """The JSON report: the (first) run with speculation, the (first) run without, the
    pooled comparison (``main_turn_p99_ratio`` is its verdict) and each target's verdict."""
    data: dict[str, Any] = {"speculation": asdict(report)}
    if compare is not None:
        data["no_speculation"] = asdict(compare)
    if comparison is not None:
        data["comparison"] = comparison.as_dict()
        data["main_turn_p99_ratio"] = comparison.p99_ratio
    if verdict is not None:
        data["verdict"] = verdict
    return json.dumps(_finite(data), indent=2, allow_nan=False, default=str)


def _finite(value: Any) -> Any:
    """The report with every NaN (a quantile of no samples) as ``null``: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
