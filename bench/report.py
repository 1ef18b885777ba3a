"""The load benchmark's report: its sections, the glossary and the verdict.

The same rows feed the console table (:func:`print_report`), the HTML page
(:mod:`bench.report_html`) and the JSON's ``verdict``: built once here, from a
:class:`~bench.load_report.LoadReport`, as plain data. Three rules make it readable:

* every percentile carries its n, and a figure that could not be measured is
  "—" with the reason (never ``nan``); a p99 over 50 samples or fewer is
  their largest, and says so;
* every group of counts closes: its buckets add up to its total
  (:mod:`bench.report_accounting`), and the table shows the sum;
* the last line is the verdict: each target of the docs (README, the issues'
  targets) with its figure and PASS or FAIL.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fore.bench._common import Target, console, format_target, verdict_word
from fore.bench.load_report import Comparison, LoadReport, leaks_total

ACCEPT_P99_MS = 20.0
"""Tab -> files applied and history inserted, p99 (issue 12, README)."""
ABORT_P99_MS = 10.0
"""Keystroke -> LLM stream closed and tool calls cancelled, p99, running speculations."""
MAIN_TURN_P99_RATIO = 1.05
"""Main-turn p99 with speculation on / off (``--compare``)."""
DEFAULT_RUN_S = 120.0
"""A default run (``--duration`` 100) finishes in under two minutes."""
FEW_SAMPLES = 50
"""At or below this many samples the nearest-rank p99 is the largest one."""

GLOSSARY: dict[str, str] = {
    "turn (round)": "one user action and its answer: a typed prompt, or Tab on a suggestion. "
    "Each session plays up to --turns of them.",
    "suggestion": "the predicted next prompt, shown 300 ms after an answer (from the second "
    "answer on); a Tab takes it.",
    "speculation": "the suggestion run ahead in a copy-on-write overlay, so that Tab can apply "
    "finished work at once; typing anything else throws it away.",
    "typed over": "the user typed a prompt of its own instead of pressing Tab; at once means "
    "within a fraction of a second of the answer (--type-during-p), while the speculation "
    "typically still runs.",
    "boundary": "the speculation stopped before a step it may not take unseen (a shell "
    "command after a write, an unapproved tool); Tab applies the work up to there and the "
    "main worker continues from it.",
    "conflict": "the user edited a file the speculation also wrote: nothing is applied, and "
    "Tab runs the suggestion as a normal turn on the user's files.",
    "stale": "the session's tools or system prompt changed after the speculation forked, so "
    "its work no longer matches; Tab runs the suggestion normally.",
    "empty": "the speculation's answer had no text and no tool calls: nothing to apply; Tab "
    "runs the suggestion normally.",
    "submitted": "Tab on a suggestion that was not speculated (no headroom, speculation off) "
    "or came back empty: it ran as a normal turn.",
    "no headroom": "the load governor skipped speculating on a suggestion because the process "
    "was busy (its recent scheduling waits over 4 ms at the p99); the suggestion is still "
    "shown.",
    "accept latency": "Tab (or the speculation's end, if Tab came first) to the files applied "
    "and the history inserted.",
    "abort latency": "the keystroke to the speculation's LLM stream confirmed closed and its "
    "tool calls confirmed cancelled, over speculations still running at the keystroke.",
    "aborts of finished speculations": "typing over a speculation that had already finished: "
    "nothing left to cancel, only its overlay to remove; counted apart, never as 0 ms aborts.",
    "time saved": "per accepted Tab, the speculation's work the user did not have to wait for.",
    "wasted tokens": "tokens of speculations that were thrown away (aborted, failed, conflict, "
    "stale, empty); a stream cancelled before its usage arrived is estimated at ~4 characters "
    "per token. In money: those tokens at the run's own cost per speculation token (--price).",
    "main-turn latency": "a typed prompt to its answer; with --compare, the same workload "
    "without speculation too, and the ratio of their p99s.",
    "at matched load": "with --compare: the arms compared turn by turn at the same number of "
    "main turns in flight (strata of 5), so that what speculation costs a turn is told apart "
    "from the load its users bring -- with Tab answered at once they come back sooner and "
    "their typed turns bunch up differently. Shown beside the p99 verdict, not instead of it.",
    "cut by --duration": "--duration bounds the whole run; rounds in flight at the users' "
    "deadline get a short drain, and what is still running then is cut; rounds a user had "
    "no time left for are not started.",
    "still running when the run ended": "a speculation nobody had accepted or typed over "
    "when the rounds ended (usually each session's last suggestion): closed with its session.",
    "leaks": "after shutdown, all must be 0: a session's overlays on disk after its close, "
    "overlay directories after the runtime's close, threads, file descriptors, live actors, "
    "an unclean close.",
    "prompt cache": "--provider anthropic: each request's input tokens as the server billed "
    "them -- at the full price, written to the cache (1.25× the price) or read from it (0.1×); "
    "the target is the share of fork input (suggestions, speculations, pipelined) read from "
    "the cache.",
    "p50 / p95 / p99 (n)": "nearest-rank percentiles over n samples; '—' says why there are "
    "none; a p99 over 50 samples or fewer is simply the largest.",
}
"""The report's terms (``fore bench --explain`` prints them; the README lists them too)."""


@dataclass(frozen=True)
class Section:
    """A titled group of (label, value) rows."""

    title: str
    rows: list[tuple[str, str]]


def quantile_text(q: dict[str, float], reason: str, *, unit: str = "ms") -> str:
    """``p50 / p95 / p99 unit (n=N)``, or "—" with the reason when there are no samples."""
    count = int(q.get("count") or 0)
    if count == 0 or not _finite(q.get("p50")):
        return f"— ({reason})"
    note = ", p99 = the largest" if count <= FEW_SAMPLES else ""
    return f"{q['p50']:.2f} / {q['p95']:.2f} / {q['p99']:.2f} {unit} (n={count:,}{note})"


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _options_line(report: LoadReport) -> str:
    o = report.options
    think = float(o.get("think_ms", 0)) / 1000
    parts = [
        f"{report.sessions} sessions × {o.get('turns')} turns",
        f"think {think:g} s {o.get('think_dist')}",
        f"accept-p {o.get('accept_p')}",
        f"type-during-p {o.get('type_during_p')}",
        f"edit-p {o.get('edit_p')}",
        f"ttft {float(o.get('ttft_ms', 0)):g} ms, {float(o.get('tokens_per_s', 0)):g} tok/s",
        f"governor {'on' if o.get('governor') else 'off'}",
        *([f"provider {o['provider']}"] if o.get("provider", "openai") != "openai" else []),
        f"seed {o.get('seed')}",
    ]
    return ", ".join(parts)


def title_line(report: LoadReport, comparison: Comparison | None = None) -> str:
    """The run's parameters in one line (the table's and the plot's title)."""
    arm = "speculation on" if report.options.get("speculation", True) else "speculation off"
    pairs = f"; --compare, {len(comparison.pairs)} pair(s)" if comparison is not None else ""
    return f"fore bench ({arm}{pairs}): {_options_line(report)}"


def _group_rows(group: dict[str, Any], labels: dict[str, str]) -> list[tuple[str, str]]:
    rows = [
        (f"  {labels.get(key, key)}", f"{count:,}")
        for key, count in group["buckets"].items()
        if count
    ]
    mark = "✓ closes" if group["accounted"] == group["total"] else "✗ DOES NOT CLOSE"
    rows.append(("  sum of the above", f"{group['accounted']:,} of {group['total']:,} {mark}"))
    return rows


def sections(report: LoadReport, comparison: Comparison | None = None) -> list[Section]:
    """The report's content, section by section (console, HTML)."""
    from fore.bench.report_accounting import SPECULATION_BUCKETS, SUGGESTION_BUCKETS, TURN_BUCKETS

    acc = report.accounting
    cut = (
        f"; {report.rounds_cut} users cut in a round"
        if report.rounds_cut and not report.interrupted
        else ""
    )
    run = Section(
        "run",
        [
            ("workload", _options_line(report)),
            (
                "wall time: total (setup / rounds / teardown)",
                f"{report.wall_total_s:.1f} s ({report.setup_s:.1f} / {report.wall_s:.1f} / "
                f"{report.teardown_s:.1f} s){cut}",
            ),
            ("RSS per session", f"{report.rss_per_session_kib:,.1f} KiB"),
            (
                "peak OS threads / open file descriptors",
                f"{report.peak_threads} / {report.peak_fds}",
            ),
            (
                "leaks after shutdown (all must be 0)",
                ", ".join(f"{k} {v}" for k, v in report.leaks.items()),
            ),
        ],
    )
    out = [run]
    if acc:
        out.append(
            Section(
                f"turns: {acc['turns']['total']:,} planned ({report.sessions} sessions × "
                f"{report.options.get('turns')} turns), each in one bucket",
                _group_rows(acc["turns"], TURN_BUCKETS),
            )
        )
        out.append(
            Section(
                f"suggestions: {acc['suggestions']['total']:,} shown, each in one bucket",
                _group_rows(acc["suggestions"], SUGGESTION_BUCKETS),
            )
        )
        spec_rows = _group_rows(acc["speculations"], SPECULATION_BUCKETS)
        spec_rows.append(
            (
                "suggestions not speculated (no headroom)",
                f"{report.speculations_skipped:,}",
            )
        )
        out.append(
            Section(
                f"speculations: {acc['speculations']['total']:,} started, each in one bucket",
                spec_rows,
            )
        )
    nobody = "no Tab applied a speculation"
    accepted = int(report.accept_latency_ms.get("count") or 0)
    out.append(
        Section(
            "latency: p50 / p95 / p99 (n = samples)",
            [
                (
                    "accept (Tab → files applied, history inserted)",
                    quantile_text(report.accept_latency_ms, nobody),
                ),
                (
                    "  Tab while still running: waited",
                    quantile_text(report.tab_waited_ms, "no Tab had to wait for its speculation"),
                ),
                (
                    "abort (keystroke → stream closed, tools cancelled; running speculations)",
                    quantile_text(
                        report.abort_latency_ms,
                        "no keystroke found a speculation still running",
                    ),
                ),
                (
                    "  keystroke → overlay removed",
                    quantile_text(
                        report.abort_cleanup_ms, "no keystroke found a speculation still running"
                    ),
                ),
                (
                    f"aborts of finished speculations ({report.aborts_of_finished:,}): "
                    "keystroke → overlay removed",
                    quantile_text(
                        report.abort_finished_cleanup_ms, "no finished speculation was typed over"
                    ),
                ),
                (
                    "main turn (typed prompt → answer)",
                    quantile_text(report.main_turn_ms, "no typed prompt was answered"),
                ),
                (
                    "time saved per accepted turn (mean)",
                    f"{report.time_saved_ms_mean:.1f} ms (n={accepted:,})"
                    if accepted
                    else f"— ({nobody})",
                ),
                (
                    "tokens spent on discarded speculations (of which estimated)",
                    f"{report.wasted_tokens:,} ({report.wasted_tokens_estimated:,})"
                    + (f" ≈ ${report.wasted_cost_usd:,.4f}" if report.usage else ""),
                ),
                *_cost_rows(report),
            ],
        )
    )
    if report.cache:  # --provider anthropic (issue 27)
        from fore.bench.report_cache import cache_rows

        out.append(Section(f"prompt cache ({report.cache['provider']})", cache_rows(report.cache)))
    if comparison is not None:
        on, off = comparison.on_ms, comparison.off_ms
        count = len(comparison.pairs)
        rows: list[tuple[str, str]] = []
        if count > 1:
            rows += [
                (
                    f"p99, pair {i + 1} (seed {p['seed']:.0f}): on / off",
                    f"{p['on_p99']:.1f} / {p['off_p99']:.1f} ms = {p['p99_ratio']:.3f}×",
                )
                for i, p in enumerate(comparison.pairs)
            ]
        pooled = f" ({count} pairs pooled)" if count > 1 else ""
        for q, ratio in (("p50", comparison.p50_ratio), ("p99", comparison.p99_ratio)):
            rows.append(
                (
                    f"{q}{pooled}: on / off",
                    f"{on[q]:.1f} / {off[q]:.1f} ms = {ratio:.3f}×"
                    if _finite(ratio)
                    else "— (an arm has no typed turns)",
                )
            )
        matched = comparison.matched_p90_ratio
        rows.append(
            (
                "p90 at matched load: on / off",
                f"{matched:.3f}× (in flight, p99: "
                f"{comparison.load_quantile(True, 99):.0f} on / "
                f"{comparison.load_quantile(False, 99):.0f} off)"
                if _finite(matched)
                else "— (too few turns at any load both arms ran)",
            )
        )
        out.append(
            Section(
                f"main-turn latency, speculation on vs off (same workload; "
                f"n = {on['count']:,} / {off['count']:,} typed turns)",
                rows,
            )
        )
    return out


def _cost_rows(report: LoadReport) -> list[tuple[str, str]]:
    """What the run's tokens cost, by purpose, at its price (issue 28; none in old reports)."""
    by = report.usage.get("by_purpose") or {}
    if not by:
        return []
    price = report.options.get("price") or (0, 0, 0)
    rate = f"${price[0]:g} / ${price[1]:g} / ${price[2]:g} per M input / output / cached tokens"
    parts = [f"{purpose} ${u['cost_usd']:,.4f}" for purpose, u in by.items()]
    total = report.usage.get("total", {}).get("cost_usd", 0.0)
    return [(f"cost by purpose (at {rate})", " · ".join(parts) + f" · total ${total:,.4f}")]


def verdict(
    reports: Sequence[LoadReport], comparison: Comparison | None = None, *, compare: bool = False
) -> list[Target]:
    """Each documented target with its figure (``reports``: every run; the first with
    speculation is the one whose latencies are judged)."""
    report = reports[0]
    accept, abort = report.accept_latency_ms, report.abort_latency_ms
    targets = [
        _p99_target(
            "accept p99 (Tab → applied)", "accept p99", accept, ACCEPT_P99_MS, "no Tab applied"
        ),
        _p99_target(
            "abort p99 (keystroke → stream closed, tools cancelled)",
            "abort p99",
            abort,
            ABORT_P99_MS,
            "no keystroke found a speculation running",
        ),
    ]
    if compare:
        ratio = comparison.p99_ratio if comparison is not None else math.nan
        targets.append(
            Target(
                "main-turn p99, speculation on / off",
                ratio,
                "×",
                "<=",
                MAIN_TURN_P99_RATIO,
                note=(
                    f"{len(comparison.pairs)} pair(s)"
                    if comparison is not None and _finite(ratio)
                    else None
                ),
                missing="no complete pair of runs" if comparison is None else "an arm had no turns",
                short="main-turn p99 on/off",
            )
        )
    targets.append(
        Target(
            "leaks after shutdown",
            float(sum(leaks_total(r) for r in reports)),
            "",
            "==",
            0,
            short="leaks",
        )
    )
    from fore.bench.report_cache import cache_target  # --provider anthropic (issue 27)

    cached = cache_target(report.cache, int(report.options.get("turns") or 0))
    if cached is not None:
        targets.append(cached)
    unaccounted = sum(_unaccounted(r) for r in reports)
    targets.append(
        Target(
            "every turn, suggestion and speculation accounted for",
            float(unaccounted),
            "unaccounted",
            "==",
            0,
            short="accounting",
        )
    )
    longest = max(r.wall_total_s for r in reports)
    default_sized = all(float(r.options.get("duration", 0)) <= 100 for r in reports)
    targets.append(
        Target(
            "a run with --duration ≤ 100 ends within 2 min",
            longest,
            "s",
            "<=",
            DEFAULT_RUN_S,
            applies=default_sized and not any(r.interrupted for r in reports),
            missing="--duration over 100" if not default_sized else "interrupted",
            short="wall time",
        )
    )
    return targets


def _unaccounted(report: LoadReport) -> int:
    acc = report.accounting
    if not acc:
        return 0
    gap = sum(
        abs(int(acc[g]["total"]) - int(acc[g]["accounted"]))
        for g in ("turns", "suggestions", "speculations")
    )
    return gap + int(acc["speculations"]["buckets"].get("unreported", 0))


def _p99_target(name: str, short: str, q: dict[str, float], limit: float, reason: str) -> Target:
    count = int(q.get("count") or 0)
    note = f"n={count:,}" + (", the largest" if 0 < count <= FEW_SAMPLES else "")
    return Target(
        name,
        float(q["p99"]) if count and _finite(q.get("p99")) else math.nan,
        "ms",
        "<=",
        limit,
        note=note,
        missing=reason,
        short=short,
    )


def verdict_line(targets: Sequence[Target], *, interrupted: bool = False) -> str:
    """One line: the overall word, then every target with its figure and word."""
    judged = [t for t in targets if t.passed is not None]
    failed = [t for t in judged if not t.passed]
    word = "FAIL" if failed else "PASS" if judged else "NOT MEASURED"
    head = f"verdict{' (partial: interrupted)' if interrupted else ''}: {word}"
    if failed:
        head += f" ({len(failed)} of {len(judged)} targets missed)"
    elif judged:
        head += f" ({len(judged)} of {len(judged)} targets met"
        unmeasured = len(targets) - len(judged)
        head += f", {unmeasured} not measured)" if unmeasured else ")"
    return head + " — " + "; ".join(format_target(t, short=True) for t in targets)


def verdict_json(targets: Sequence[Target]) -> list[dict[str, Any]]:
    return [
        {
            "target": t.name,
            "measured": t.measured if _finite(t.measured) else None,
            "unit": t.unit,
            "limit": f"{t.op} {t.limit:g}",
            "verdict": verdict_word(t),
            "note": t.note,
        }
        for t in targets
    ]


def print_sections(parts: Sequence[Section], title: str) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=True, min_width=60)
    table.add_column("measurement")
    table.add_column("value", justify="right")
    for i, part in enumerate(parts):
        if i:
            table.add_section()
        table.add_row(f"[bold]{part.title}[/]", "")
        for label, value in part.rows:
            style = "red" if "DOES NOT CLOSE" in value else None
            table.add_row(label, value, style=style)
    console.print(table)


def print_glossary() -> None:
    from rich.table import Table

    table = Table(title="glossary (fore bench --explain)", title_justify="left", show_lines=False)
    table.add_column("term", style="bold")
    table.add_column("meaning")
    for term, meaning in GLOSSARY.items():
        table.add_row(term, meaning)
    console.print(table)


def print_report(
    report: LoadReport,
    comparison: Comparison | None = None,
    *,
    reports: Sequence[LoadReport] | None = None,
    compare: bool = False,
    explain: bool = False,
    with_verdict: bool = True,
) -> list[Target]:
    """The table, the targets, the glossary (``explain``) and -- last -- the verdict line
    (``with_verdict=False``: the caller prints :func:`verdict_line` itself, last)."""
    from fore.bench._common import targets_table

    everything = list(reports or [report])
    interrupted = any(r.interrupted for r in everything)
    title = f"fore bench: {report.sessions} sessions, {report.turns} turns in {report.wall_s:.1f} s"
    if interrupted:
        title += " — INTERRUPTED: what finished before Ctrl-C"
    print_sections(sections(report, comparison), title)
    if report.errors:
        console.print("[yellow]notes:[/] " + "; ".join(report.errors[:5]), soft_wrap=True)
    targets = verdict(everything, comparison, compare=compare)
    targets_table(targets, title="targets (README; issue 12)")
    if explain:
        print_glossary()
    if with_verdict:
        console.print(verdict_line(targets, interrupted=interrupted), soft_wrap=True, markup=False)
    return targets
