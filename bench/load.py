"""The speculation load benchmark (``fore bench``): the main job.

N sessions in this one process, each on its own generated workspace, all
talking to the built-in mock LLM server (a child process on 127.0.0.1, real
HTTP, a latency model). A simulated user per session -- a pooled actor, so
the harness adds no threads -- types a prompt, reads the answer (think time
drawn from ``think_dist`` -- exponential, lognormal, uniform or fixed -- with
mean ``think_ms``), then presses Tab on the suggestion with probability
``accept_p`` or types something else. With probability ``type_during_p`` it
does not read at all but starts typing its next prompt at once (within
:data:`~bench.sim_user.TYPE_AT_ONCE_S` of the answer), which is while the
speculation of the answer's suggestion typically runs: that is what abort
latency is measured on; it presses Enter after its usual think time, so the
workload's pace does not depend on the knob. It is bounded by ``turns`` per
session and stops by itself.

This module is the run driver (setup, the rounds, teardown, leak checks, the
on/off comparison); the knobs are :mod:`bench.load_options`, the users and
what they record :mod:`bench.sim_user`, the report as data
:mod:`bench.load_report`.

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
from the keystroke to its teardown's confirmations that the LLM stream closed
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
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
from pykka import ActorRef
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fore.actors.llm import AnthropicModel, OpenAICompatible, RetryPolicy, evloop
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.telemetry.usage import usage_json
from fore.bench._common import console
from fore.bench.cpu import CpuMeter, turns_done
from fore.bench.load_options import LoadOptions
from fore.bench.load_report import (
    Comparison,
    LoadReport,
    Timeline,
    build_report,
    quantiles_ms,
    wasted_cost,
)
from fore.bench.matched_load import overlapping
from fore.bench.report_accounting import Ledger
from fore.bench.report_cache import cache_summary
from fore.bench.sim_user import THINK_DISTS, Recorder, SimUser, start_users, users_finished
from fore.bench.workload import make_workspace, script
from fore.errors import BenchSetupError
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import GetSpeculation, SpeculationConfig
from fore.messages.usage import ModelPrice
from fore.supervision import Runtime

# BenchSetupError is defined in fore.errors (the one exception tree); re-exported for the
# importers of this module.
__all__ = ["BenchSetupError"]


def _model_price(price: tuple[float, float, float]) -> ModelPrice:
    return ModelPrice(input=price[0], output=price[1], cached_input=price[2])


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
        timeline = Timeline()
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
            meter = CpuMeter()
            meter.start()
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
        meter.stop()
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
        report = build_report(
            options, recorder, accounting, governor, timeline, leaks, interrupted=interrupted
        )
        report.rss_per_session_kib = (peak_rss - rss_before) / max(1, len(sessions)) / 1024
        report.peak_threads = peak_threads
        report.peak_fds = peak_fds
        report.wall_s = wall
        report.setup_s = setup
        report.teardown_s = teardown
        report.wall_total_s = time.monotonic() - begun
        report.usage = usage_json(usage)
        report.wasted_cost_usd = wasted_cost(usage, report.wasted_tokens)
        report.cache = cache_summary(options.provider, getattr(model, "meter", None))
        report.cpu_ms_per_turn = meter.per_turn(turns_done(accounting))
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
            # how many other typed turns each one ran beside (bench.matched_load)
            "main_turn_load": [float(n) for n in overlapping(recorder.typed_turn_spans)],
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
    loads: dict[bool, list[float]] = {True: [], False: []}
    first_samples: dict[str, list[float]] = {}
    rows = []
    for index in range(pairs):
        seed = options.seed + index
        order = (True, False) if index % 2 == 0 else (False, True)
        quantiles: dict[bool, dict[str, float]] = {}
        turns: dict[bool, list[float]] = {}
        run_loads: dict[bool, list[float]] = {}
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
            run_loads[speculation] = samples["main_turn_load"]
        if len(quantiles) < 2:  # interrupted: this pair is incomplete, and the last
            break
        on_turns += turns[True]
        off_turns += turns[False]
        for speculation in (True, False):
            loads[speculation] += run_loads[speculation]
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
            rows,
            quantiles_ms(on_turns),
            quantiles_ms(off_turns),
            on_turns,
            off_turns,
            on_load=loads[True],
            off_load=loads[False],
        )
    return on_reports, off_reports, comparison, first_samples
