"""The load benchmark's report as data: :class:`LoadReport` and :class:`Comparison`.

What a run of :mod:`bench.load` hands back, built from what the simulated
users recorded (:func:`build_report`), and its JSON form
(:func:`report_json`). Printing it -- tables, verdicts, HTML, the figure --
is :mod:`bench.report` and its siblings.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from fore.actors.speculation.governor import LoadGovernor
from fore.bench._common import percentile
from fore.bench.cpu import in_flight, turns_done
from fore.bench.load_options import LoadOptions
from fore.bench.matched_load import matched_ratio
from fore.bench.report_accounting import Accounting
from fore.bench.sim_user import Recorder
from fore.messages.usage import UsageSummary

TIMELINE_POINTS = 2_000
"""The timeline keeps at most this many samples (every other one is dropped
when it fills: a long run is sampled more coarsely, never unboundedly)."""


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
    cpu_ms_per_turn: dict[str, float] = field(default_factory=dict)
    """CPU per turn of every process of the run, by role, over the rounds
    (:class:`bench.cpu.CpuMeter`): what a turn costs, whatever the machine's load."""


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


def quantiles_ms(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0, "p50": math.nan, "p95": math.nan, "p99": math.nan}
    return {
        "count": len(values),
        "p50": percentile(values, 50) * 1e3,
        "p95": percentile(values, 95) * 1e3,
        "p99": percentile(values, 99) * 1e3,
    }


class Timeline:
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


def build_report(
    options: LoadOptions,
    recorder: Recorder,
    accounting: Accounting,
    governor: LoadGovernor,
    timeline: Timeline,
    leaks: dict[str, int],
    *,
    interrupted: bool,
) -> LoadReport:
    """The report's figures from what was recorded (the wall times are set by the caller)."""
    return LoadReport(
        options=asdict(options),
        sessions=options.sessions,
        # The turns answered and the rounds cut come from the ledger, not the users' live
        # counters: a round that ends as the run is frozen is counted by one and not the
        # other, and the report must agree with its own accounting.
        turns=turns_done(accounting),
        suggestions=accounting.suggestions.total,
        speculations_started=accounting.speculations.total,
        speculations_skipped=recorder.skipped,
        speculations=dict(sorted(recorder.outcomes.items())),
        speculation_states=dict(sorted(recorder.states.items())),
        accepts=dict(sorted(recorder.accepts.items())),
        tab_waited_ms=quantiles_ms(recorder.tab_waited_s),
        accept_latency_ms=quantiles_ms(recorder.accept_latency_s),
        abort_latency_ms=quantiles_ms(recorder.abort_cancel_s),
        abort_cleanup_ms=quantiles_ms(recorder.abort_cleanup_s),
        aborts_of_finished=len(recorder.finished_abort_cleanup_s),
        abort_finished_cleanup_ms=quantiles_ms(recorder.finished_abort_cleanup_s),
        time_saved_ms_mean=(
            sum(recorder.time_saved_s) / len(recorder.time_saved_s) * 1e3
            if recorder.time_saved_s
            else 0.0
        ),
        wasted_tokens=recorder.wasted_tokens,
        wasted_tokens_estimated=recorder.wasted_tokens_estimated,
        main_turn_ms=quantiles_ms(recorder.typed_turn_s),
        rss_per_session_kib=0.0,
        peak_threads=0,
        peak_fds=0,
        wall_s=0.0,
        setup_s=0.0,
        teardown_s=0.0,
        wall_total_s=0.0,
        rounds_cut=in_flight(accounting),
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

    The raw ratio also carries how the arms' main turns happened to bunch up
    (the users are a closed loop: with speculation they come back sooner), so
    :attr:`matched_p90_ratio` compares the arms at matched load as well
    (:mod:`bench.matched_load`): shown beside the verdict, not instead of it.
    """

    pairs: list[dict[str, float]]
    """Per pair: ``seed``, ``on_p50``, ``off_p50``, ``on_p99``, ``off_p99``, ``p99_ratio`` (ms)."""
    on_ms: dict[str, float]
    """Quantiles over every typed turn of every run with speculation."""
    off_ms: dict[str, float]
    on_turns_s: list[float] = field(default_factory=list, repr=False)
    """The pooled typed-turn latencies themselves (seconds), for the plot."""
    off_turns_s: list[float] = field(default_factory=list, repr=False)
    on_load: list[float] = field(default_factory=list, repr=False)
    """Per pooled typed turn (``on_turns_s``'s order): the other typed turns of its run in
    flight beside it (:func:`bench.matched_load.overlapping`); empty: not recorded."""
    off_load: list[float] = field(default_factory=list, repr=False)

    @staticmethod
    def _ratio(on: float, off: float) -> float:
        return on / off if off and math.isfinite(off) else math.nan

    @property
    def p50_ratio(self) -> float:
        return self._ratio(self.on_ms["p50"], self.off_ms["p50"])

    @property
    def p99_ratio(self) -> float:
        return self._ratio(self.on_ms["p99"], self.off_ms["p99"])

    def _loaded(self, latencies: list[float], loads: list[float]) -> list[tuple[int, float]]:
        if len(loads) != len(latencies):  # not recorded (or cut mid-run): nothing to match
            return []
        return [(int(load), latency) for load, latency in zip(loads, latencies, strict=True)]

    @property
    def matched_p90_ratio(self) -> float:
        """The on/off p90 ratio at matched load (NaN: too few turns at any common load)."""
        return matched_ratio(
            self._loaded(self.on_turns_s, self.on_load),
            self._loaded(self.off_turns_s, self.off_load),
        )

    def load_quantile(self, speculation: bool, q: float) -> float:
        """A quantile of the other main turns in flight beside a typed turn, in one arm."""
        return percentile(self.on_load if speculation else self.off_load, q)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pairs": self.pairs,
            "on_ms": self.on_ms,
            "off_ms": self.off_ms,
            "p50_ratio": self.p50_ratio,
            "p99_ratio": self.p99_ratio,
            "matched_p90_ratio": self.matched_p90_ratio,
            "in_flight_p99": {
                "on": self.load_quantile(True, 99),
                "off": self.load_quantile(False, 99),
            },
        }


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
