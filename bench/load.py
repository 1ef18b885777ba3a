"""The speculation load benchmark (``fore bench``): the main job.

N sessions in this one process, each on its own generated workspace, all
talking to the built-in mock LLM server (a child process on 127.0.0.1, real
HTTP, a latency model). A simulated user per session -- a pooled actor, so
the harness adds no threads -- types a prompt, reads the answer (think time
drawn from ``think_dist`` -- exponential, lognormal, uniform or fixed -- with
mean ``think_ms``), then presses Tab on the suggestion with probability
``accept_p`` or types something else, sometimes while the speculation is
still running. It is bounded by ``turns`` per session and stops by itself.

**Wall time.** ``duration`` bounds the whole run -- opening the sessions, the
users' rounds, a short drain, closing everything -- not just the rounds: the
users get what is left after setup, the drain (rounds in flight at their
deadline may finish within ``drain_s``; any still running then are cut and
counted) and a reserve for the teardown (about what opening took). So the
default run (200 sessions, 100 s) ends in well under two minutes.

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
file descriptors; setup / run / teardown / total wall time; and leaks after
shutdown -- all of which must be zero: overlays of a session still on disk
when its ``Session.close()`` returned (or a close that timed out), overlay
directories on disk when ``Runtime.close()`` returned, threads, file
descriptors, live actors, and an unclean ``Runtime.close()``.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from actors.core import PooledActor, handles
from actors.llm import OpenAICompatible, RetryPolicy, evloop
from actors.llm.mock_server import MockLlmServer
from actors.llm.script import ScriptFile
from actors.speculation.governor import LoadGovernor
from bench._common import console, percentile, table
from bench.workload import USER_PROMPTS, make_workspace, script
from messages.gate import ApprovalMode
from messages.session import EventBase, Subscribe, TurnResult
from messages.speculation import (
    AcceptResult,
    AcceptSuggestion,
    Keystroke,
    SpeculationConfig,
    SpeculationFinished,
    SpeculationProgress,
    SpeculationSkipped,
    SubmitPrompt,
    SuggestionReady,
)
from supervision import Runtime

THINK_DISTS = ("exp", "lognormal", "uniform", "fixed")
"""Think-time distributions, each with mean ``think_ms`` (see :func:`think_time`)."""


class BenchSetupError(RuntimeError):
    """The benchmark could not start (the mock server, the temp directory ...)."""


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
    speculations: set[str] = field(default_factory=set)
    outcomes: dict[str, int] = field(default_factory=dict)
    states: dict[str, int] = field(default_factory=dict)
    tab_waited_s: list[float] = field(default_factory=list)
    accepts: dict[str, int] = field(default_factory=dict)
    wasted_tokens: int = 0
    wasted_tokens_estimated: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, name: str, value: float) -> None:
        with self.lock:
            getattr(self, name).append(value)

    def count(self, table_name: str, key: str) -> None:
        with self.lock:
            counts: dict[str, int] = getattr(self, table_name)
            counts[key] = counts.get(key, 0) + 1


class SimUser(PooledActor):
    """One simulated user, driving its session by messages only."""

    def __init__(
        self,
        session: Any,
        workspace: Path,
        options: LoadOptions,
        seed: int,
        recorder: Recorder,
        done: threading.Semaphore,
        deadline: float,
    ) -> None:
        super().__init__()
        self.session = session
        self.workspace = workspace
        self.options = options
        self.rng = random.Random(seed)
        self.recorder = recorder
        self.done = done
        self.deadline = deadline
        self.rounds = 0
        self.suggestion: str | None = None
        self.finished = False

    def on_start(self) -> None:
        self.session.supervisor.tell(Subscribe(address=self.actor_ref))
        # Users start as they would be found in steady state, part-way through
        # a think time (first_action_delay); a burst of every session's first
        # prompt in the same instant would measure the stampede, not the runtime.
        delay = first_action_delay(
            self.rng, self.options.think_dist, max(0.2, self.options.think_ms / 1000.0)
        )
        self.call_after(delay, self._type)

    # -- one round -----------------------------------------------------------------

    def _think(self) -> float:
        return think_time(self.rng, self.options.think_dist, self.options.think_ms / 1000.0)

    def _type(self) -> None:
        prompt = USER_PROMPTS[(self.rounds + self.rng.randrange(3)) % len(USER_PROMPTS)]
        self.suggestion = None
        self.session.supervisor.tell(Keystroke(text=prompt[:1]))
        typed = time.monotonic()
        self.ask_then(
            self.session.supervisor,
            SubmitPrompt(text=prompt),
            then=lambda result: self._typed_done(typed, result),
            on_error=self._error,
            timeout=120.0,
        )

    def _typed_done(self, typed: float, result: TurnResult) -> None:
        self.recorder.add("typed_turn_s", time.monotonic() - typed)
        if result.status != "completed":
            self.recorder.count("accepts", f"typed turn {result.status}")
        self._round_over()

    def _decide(self) -> None:
        if self.finished:
            return
        if self.suggestion is not None and self.rng.random() < self.options.accept_p:
            if self.rng.random() < self.options.edit_p:
                # the user edits the file the speculation writes: its accept conflicts
                todo = self.workspace / "notes" / "todo.md"
                todo.write_text(f"user edit {self.rng.random()}\n")
            pressed = time.monotonic()
            self.suggestion = None
            self.ask_then(
                self.session.supervisor,
                AcceptSuggestion(wait_continuation=True),
                then=lambda result: self._accepted(pressed, result),
                on_error=self._error,
                timeout=120.0,
            )
            return
        self._type()

    def _accepted(self, pressed: float, result: AcceptResult) -> None:
        self.recorder.count("accepts", result.outcome)
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
        think = self._think()
        # A user who would still be thinking at the deadline leaves now: the
        # run's wall time is bounded by ``duration`` plus the rounds in flight.
        if self.rounds >= self.options.turns or time.monotonic() + think >= self.deadline:
            self._finish()
            return
        self.call_after(think, self._decide)

    def _error(self, error: BaseException) -> None:
        with self.recorder.lock:
            self.recorder.errors.append(f"{type(error).__name__}: {error}")
        self._finish()

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.done.release()

    # -- what the session tells us --------------------------------------------------------

    @handles(SuggestionReady)
    def _on_suggestion(self, event: SuggestionReady) -> None:
        self.suggestion = event.suggestion.text
        with self.recorder.lock:
            self.recorder.suggestions += 1

    @handles(SpeculationProgress)
    def _on_progress(self, event: SpeculationProgress) -> None:
        with self.recorder.lock:
            self.recorder.speculations.add(event.speculation_id)

    @handles(SpeculationFinished)
    def _on_finished(self, event: SpeculationFinished) -> None:
        recorder = self.recorder
        with recorder.lock:
            recorder.speculations.add(event.speculation_id)
            recorder.outcomes[event.outcome] = recorder.outcomes.get(event.outcome, 0) + 1
            recorder.states[event.state] = recorder.states.get(event.state, 0) + 1
            if event.outcome in ("aborted", "failed", "conflict", "stale"):
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
    """Tokens of aborted, failed, conflicting and stale speculations (estimates included)."""
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


def run_load(options: LoadOptions) -> tuple[LoadReport, dict[str, list[float]]]:
    """Run the workload once; returns the report and the raw latency samples.

    Raises :class:`BenchSetupError` (one clear line) when it cannot start.
    """
    if options.think_dist not in THINK_DISTS:
        raise BenchSetupError(f"unknown think-time distribution {options.think_dist!r}")
    begun = time.monotonic()
    try:
        root = Path(tempfile.mkdtemp(prefix="fore-bench-"))
    except OSError as exc:
        raise BenchSetupError(f"cannot create a temp directory: {exc.strerror or exc}") from None
    recorder = Recorder()
    try:
        script_file = ScriptFile.model_validate(script(options.turns))
        server = MockLlmServer.spawn(
            script_file,
            ttft_ms=options.ttft_ms,
            tokens_per_s=options.tokens_per_s,
            # The mock shares the machine: fork streams written per 50 ms tick, not per
            # token (see MockSettings.background_tick_ms).
            background_tick_ms=50.0,
        )
    except Exception as exc:
        shutil.rmtree(root, ignore_errors=True)
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise BenchSetupError(f"cannot start the mock LLM server: {detail}") from None
    process = psutil.Process()
    try:
        threads_before = {t.ident for t in threading.enumerate()}
        # libuv's process-wide signal pipe is made by the first event loop of
        # the process and lives as long as it: part of the process, not of a run.
        evloop.new_event_loop().close()
        fds_before = process.num_fds()
        rss_before = process.memory_info().rss
        rt = Runtime(
            name="bench",
            overlay_root=root / "overlays",
            blob_dir=root / "blobs",
            speculation_governor=LoadGovernor(enabled=options.governor),
        )
        model = OpenAICompatible(
            base_url=server.base_url,
            api_key="bench",
            model="mock",
            retry=RetryPolicy(max_retries=2, initial_backoff=0.05, max_backoff=0.5),
        )
        config = SpeculationConfig(
            enabled=True, speculate=options.speculation, approval_mode=ApprovalMode.AUTO_EDIT
        )
        done = threading.Semaphore(0)
        users = []
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
        sessions = []
        rounds_cut = 0
        with progress:
            opening = progress.add_task("opening sessions", total=options.sessions)
            for i in range(options.sessions):
                workspace = make_workspace(root / "ws" / f"s{i:05d}")
                session = rt.open_session(
                    workspace=workspace,
                    model=model,
                    speculation=config,
                    system_prompt="You are a careful coding agent.",
                )
                sessions.append((session, workspace))
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
            with rt.system.activated():
                for i, (session, workspace) in enumerate(sessions):
                    users.append(
                        SimUser.start(
                            session,
                            workspace,
                            options,
                            options.seed * 100_003 + i,
                            recorder,
                            done,
                            deadline,
                        )
                    )
            finished = 0
            while finished < len(users):
                if done.acquire(timeout=0.2):
                    finished += 1
                    while done.acquire(blocking=False):
                        finished += 1
                progress.update(task, completed=recorder.rounds)
                peak_threads = max(peak_threads, threading.active_count())
                peak_fds = max(peak_fds, process.num_fds())
                peak_rss = max(peak_rss, process.memory_info().rss)
                if time.monotonic() > hard_stop:
                    rounds_cut = len(users) - finished  # their sessions close under them
                    break
        wall = time.monotonic() - started
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
        samples = {
            "accept": recorder.accept_latency_s,
            "abort_cancel": recorder.abort_cancel_s,
            "abort_cleanup": recorder.abort_cleanup_s,
            "main_turn": recorder.typed_turn_s,
        }
        report = LoadReport(
            options=asdict(options),
            sessions=options.sessions,
            turns=recorder.rounds,
            suggestions=recorder.suggestions,
            speculations_started=len(recorder.speculations),
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
            rss_per_session_kib=(peak_rss - rss_before) / max(1, options.sessions) / 1024,
            peak_threads=peak_threads,
            peak_fds=peak_fds,
            wall_s=wall,
            setup_s=setup,
            teardown_s=teardown,
            wall_total_s=time.monotonic() - begun,
            rounds_cut=rounds_cut,
            leaks=leaks,
            errors=recorder.errors[:20],
        )
        if leaked_threads:
            report.errors.append(
                "leaked threads: " + ", ".join(t.name for t in leaked_threads[:10])
            )
        if rt.overlays_left:
            report.errors.append(
                "overlays left: " + "; ".join(str(o) for o in rt.overlays_left[:10])
            )
        return report, samples
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


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
    ratio is the verdict; each pair's ratio shows the spread.
    """

    pairs: list[dict[str, float]]
    """Per pair: ``seed``, ``on_p50``, ``off_p50``, ``on_p99``, ``off_p99``, ``p99_ratio`` (ms)."""
    on_ms: dict[str, float]
    """Quantiles over every typed turn of every run with speculation."""
    off_ms: dict[str, float]

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
    options: LoadOptions, pairs: int = 1
) -> tuple[list[LoadReport], list[LoadReport], Comparison, dict[str, list[float]]]:
    """``pairs`` interleaved pairs of runs, speculation on and off (see :class:`Comparison`).

    Returns the reports with and without speculation (in run order), the
    comparison, and the raw samples of the first run with speculation.
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
        for speculation in order:
            report, samples = run_load(replace(options, speculation=speculation, seed=seed))
            turns = samples["main_turn"]
            quantiles[speculation] = report.main_turn_ms
            if speculation:
                on_reports.append(report)
                on_turns += turns
                first_samples = first_samples or samples
            else:
                off_reports.append(report)
                off_turns += turns
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
    comparison = Comparison(rows, _quantiles(on_turns), _quantiles(off_turns))
    return on_reports, off_reports, comparison, first_samples


def print_report(report: LoadReport, comparison: Comparison | None = None) -> None:
    def q(d: dict[str, float]) -> str:
        return f"{d['p50']:.2f} / {d['p95']:.2f} / {d['p99']:.2f} ms (n={d['count']:.0f})"

    spec = report.speculations
    table(
        f"fore bench: {report.sessions} sessions, {report.turns} turns in {report.wall_s:.1f} s",
        ["measurement", "value"],
        [
            [
                "wall time: total (setup / rounds / teardown)",
                f"{report.wall_total_s:.1f} s ({report.setup_s:.1f} / {report.wall_s:.1f} / "
                f"{report.teardown_s:.1f} s)"
                + (f"; {report.rounds_cut} users cut at the deadline" if report.rounds_cut else ""),
            ],
            ["suggestions shown", report.suggestions],
            ["speculations started", report.speculations_started],
            ["suggestions not speculated (no headroom)", report.speculations_skipped],
            [
                "speculations reached: completed / boundary / failed / still running",
                " / ".join(
                    str(report.speculation_states.get(k, 0))
                    for k in ("completed", "boundary", "failed", "running")
                ),
            ],
            [
                "speculations ended: accepted / accepted at boundary / aborted / failed / conflict",
                " / ".join(
                    str(spec.get(k, 0))
                    for k in ("accepted", "boundary", "aborted", "failed", "conflict")
                ),
            ],
            ["Tabs by outcome", ", ".join(f"{k} {v}" for k, v in report.accepts.items()) or "-"],
            [
                "accept latency p50 / p95 / p99 (Tab → files applied, history inserted)",
                q(report.accept_latency_ms),
            ],
            ["Tab while still running: waited p50 / p95 / p99", q(report.tab_waited_ms)],
            [
                "abort latency p50 / p95 / p99 (keystroke → stream closed, tools cancelled;"
                " running speculations)",
                q(report.abort_latency_ms),
            ],
            ["  keystroke → overlay removed p50 / p95 / p99", q(report.abort_cleanup_ms)],
            [
                "aborts of finished speculations: keystroke → overlay removed",
                q(report.abort_finished_cleanup_ms),
            ],
            ["time saved per accepted turn (mean)", f"{report.time_saved_ms_mean:.1f} ms"],
            [
                "tokens spent on discarded speculations (of which estimated)",
                f"{report.wasted_tokens} ({report.wasted_tokens_estimated})",
            ],
            ["main-turn latency p50 / p95 / p99 (typed prompts)", q(report.main_turn_ms)],
            ["RSS per session", f"{report.rss_per_session_kib:.1f} KiB"],
            [
                "peak OS threads / open file descriptors",
                f"{report.peak_threads} / {report.peak_fds}",
            ],
            ["leaks after shutdown", ", ".join(f"{k} {v}" for k, v in report.leaks.items())],
        ],
    )
    if comparison is not None:
        on, off = comparison.on_ms, comparison.off_ms
        count = len(comparison.pairs)
        rows: list[list[Any]] = []
        if count > 1:
            rows += [
                [f"p99, pair {i + 1} (seed {p['seed']})", p["on_p99"], p["off_p99"], p["p99_ratio"]]
                for i, p in enumerate(comparison.pairs)
            ]
        pooled = f" ({count} pairs pooled)" if count > 1 else ""
        rows += [
            ["p50" + pooled, on["p50"], off["p50"], comparison.p50_ratio],
            ["p99" + pooled, on["p99"], off["p99"], comparison.p99_ratio],
        ]
        table(
            f"main-turn latency: speculation on vs off (same workload; "
            f"{on['count']} / {off['count']} typed turns)",
            ["", "on (ms)", "off (ms)", "on / off"],
            rows,
        )
    if report.errors:
        console.print("[yellow]notes:[/] " + "; ".join(report.errors[:5]))


def leaks_total(report: LoadReport) -> int:
    return sum(report.leaks.values())


def report_json(
    report: LoadReport,
    compare: LoadReport | None = None,
    comparison: Comparison | None = None,
) -> str:
    """The JSON report: the (first) run with speculation, the (first) run without, and
    the pooled comparison (``main_turn_p99_ratio`` is its verdict)."""
    data: dict[str, Any] = {"speculation": asdict(report)}
    if compare is not None:
        data["no_speculation"] = asdict(compare)
    if comparison is not None:
        data["comparison"] = comparison.as_dict()
        data["main_turn_p99_ratio"] = comparison.p99_ratio
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


def plot(path: Path, samples: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [k for k, v in samples.items() if v]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(4 * max(1, len(names)), 3.2))
    axes_list = axes if hasattr(axes, "__iter__") else [axes]
    for ax, name in zip(axes_list, names, strict=False):
        ax.hist([v * 1e3 for v in samples[name]], bins=40)
        ax.set_title(f"{name} latency")
        ax.set_xlabel("ms")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
