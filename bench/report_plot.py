"""The load benchmark's figure (``fore bench --plot``; embedded in ``--html``).

One figure, two panels, for a person rather than a table:

* **latency CDFs** on a log axis: accept (Tab → applied), abort (keystroke →
  stream closed, tools cancelled; running speculations only), the main turn
  with speculation and -- with ``--compare`` -- without. A CDF shows the whole
  distribution where four histograms of different scales hid it; p50 and p99
  are marked on each curve and printed in the legend with the sample count;
  the documented targets (accept ≤ 20 ms, abort ≤ 10 ms) are dashed lines.
* **timeline**: speculations running over time, and how many suggestions the
  load governor skipped (no headroom) and started per second -- where the
  load was, and what the governor did about it.

The title carries the run's parameters. Needs matplotlib (the ``plot`` extra);
the Agg backend, so no display is needed.
"""

from __future__ import annotations

import io
import itertools
import textwrap
from typing import Any

from fore.bench._common import percentile
from fore.bench.load_report import Comparison, LoadReport
from fore.bench.report import ABORT_P99_MS, ACCEPT_P99_MS, title_line

_COLORS = {
    "accept": "#1b9e77",
    "abort": "#d95f02",
    "main_on": "#7570b3",
    "main_off": "#8c8c8c",
}


def _series(
    samples: dict[str, list[float]], comparison: Comparison | None
) -> list[tuple[str, str, list[float], str]]:
    """(key, label, values in ms, why empty) of each curve."""
    on_turns = comparison.on_turns_s if comparison is not None else samples.get("main_turn", [])
    series = [
        (
            "accept",
            "accept (Tab → applied)",
            samples.get("accept", []),
            "no Tab applied a speculation",
        ),
        (
            "abort",
            "abort (keystroke → stream closed, tools cancelled)",
            samples.get("abort_cancel", []),
            "no keystroke found a speculation running",
        ),
        (
            "main_on",
            "main turn, speculation on" if comparison is not None else "main turn",
            on_turns,
            "no typed prompt was answered",
        ),
    ]
    if comparison is not None:
        series.append(
            (
                "main_off",
                "main turn, speculation off",
                comparison.off_turns_s,
                "no typed prompt was answered",
            )
        )
    return [(key, label, [v * 1e3 for v in values], why) for key, label, values, why in series]


def _cdf_panel(ax: Any, series: list[tuple[str, str, list[float], str]]) -> None:
    from matplotlib.lines import Line2D

    handles = []
    lowest, highest = float("inf"), 0.0
    for index, (key, label, values, why) in enumerate(series):
        color = _COLORS[key]
        if not values:
            handles.append(Line2D([], [], color=color, linestyle=":", label=f"{label}: — ({why})"))
            continue
        ordered = sorted(values)
        n = len(ordered)
        lowest, highest = min(lowest, ordered[0]), max(highest, ordered[-1])
        ys = [(i + 1) / n for i in range(n)]
        (line,) = ax.step(ordered, ys, where="post", color=color, linewidth=1.8)
        p50, p99 = percentile(ordered, 50), percentile(ordered, 99)
        few = ", p99 = the largest" if n <= 50 else ""
        line.set_label(f"{label}  (n={n:,}: p50 {p50:.1f} ms, p99 {p99:.1f} ms{few})")
        handles.append(line)
        # Labels of curves close together would overprint: each curve's sit lower.
        for value, q, marker, dy in ((p50, 0.50, "o", 6), (p99, 0.99, "D", -14)):
            ax.plot([value], [q], marker=marker, color=color, markersize=6, zorder=5)
            ax.annotate(
                f"p{round(q * 100)} {value:.1f}",
                (value, q),
                textcoords="offset points",
                xytext=(7, dy - 11 * index),
                fontsize=8,
                color=color,
            )
    for limit, key, what in (
        (ACCEPT_P99_MS, "accept", "accept target"),
        (ABORT_P99_MS, "abort", "abort target"),
    ):
        handles.append(
            ax.axvline(
                limit,
                color=_COLORS[key],
                linestyle="--",
                linewidth=1,
                alpha=0.7,
                label=f"{what}: p99 ≤ {limit:g} ms",
            )
        )
        lowest, highest = min(lowest, limit), max(highest, limit)
    ax.set_xscale("log")
    if highest > 0:
        ax.set_xlim(max(1e-3, lowest / 1.5), highest * 1.5)
    ax.set_ylim(0, 1.02)
    ax.axhline(0.5, color="#cccccc", linewidth=0.6, zorder=0)
    ax.axhline(0.99, color="#cccccc", linewidth=0.6, zorder=0)
    ax.set_xlabel("latency (ms, log scale)")
    ax.set_ylabel("fraction of samples ≤ x")
    ax.set_title("latency CDFs (p50 ○, p99 ◇)", loc="left", fontsize=11)
    ax.grid(True, which="both", axis="x", alpha=0.25)
    ax.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(0.0, -0.13),
        ncol=2,
        fontsize=8,
        frameon=False,
    )


def _rates(t: list[float], cumulative: list[float], edges: list[float]) -> list[float]:
    """Per-bin rate (per second) of a cumulative count sampled at times ``t``."""
    rates = []
    k = 0
    last = cumulative[0] if cumulative else 0.0
    for lo, hi in itertools.pairwise(edges):
        value = last
        while k < len(t) and t[k] <= hi:
            value = cumulative[k]
            k += 1
        rates.append((value - last) / (hi - lo))
        last = value
    return rates


def _timeline_panel(ax: Any, report: LoadReport) -> None:
    line = report.timeline or {}
    t = line.get("t_s", [])
    running = line.get("running", [])
    ax.set_title(
        "timeline: speculations running, and suggestions the governor started / skipped",
        loc="left",
        fontsize=11,
    )
    ax.set_xlabel("time since the users started (s)")
    ax.set_ylabel("speculations running (count)")
    if len(t) < 2:
        ax.text(0.5, 0.5, "— (too short to sample)", ha="center", transform=ax.transAxes)
        return
    ax.set_xlim(0, t[-1])
    # Over bins of at least a second (about 60 across the run), not per sample:
    # the running count's mean (a line) and its peak (shaded) in each bin, and
    # the rates of starts and skips.
    width = max(1.0, t[-1] / 60)
    edges = [i * width for i in range(int(t[-1] / width) + 2)]
    mids = [(lo + hi) / 2 for lo, hi in itertools.pairwise(edges)]
    binned: list[list[float]] = [[] for _ in mids]
    for when, count in zip(t, running, strict=False):
        binned[min(len(mids) - 1, int(when / width))].append(count)
    mean = [sum(b) / len(b) if b else 0.0 for b in binned]
    peak = [max(b) if b else 0.0 for b in binned]
    ax.fill_between(mids, peak, color=_COLORS["abort"], alpha=0.18, linewidth=0)
    (run_line,) = ax.plot(mids, mean, color=_COLORS["abort"], linewidth=1.6)
    ax.set_ylim(0, max(1.0, max(peak) * 1.15))
    skipped = _rates(t, line["skipped"], edges)
    started = _rates(t, line["admitted"], edges)
    rate = ax.twinx()
    bars = rate.bar(mids, skipped, width=width * 0.85, color="#e7298a", alpha=0.45)
    (start_line,) = rate.plot(mids, started, color=_COLORS["accept"], linewidth=1.2)
    rate.set_ylabel(f"suggestions per second ({width:.0f} s bins)")
    rate.set_ylim(bottom=0)
    total_skipped = int(line["skipped"][-1] - line["skipped"][0])
    total_started = int(line["admitted"][-1] - line["admitted"][0])
    ax.legend(
        [run_line, start_line, bars],
        [
            f"speculations running: mean per bin, peak shaded (peak {max(running):.0f})",
            f"speculations started / s ({total_started:,} while sampled)",
            f"skipped / s, no headroom ({total_skipped:,} while sampled)",
        ],
        loc="upper right",
        fontsize=8,
        framealpha=0.9,
    )
    if not report.options.get("speculation", True):
        ax.text(0.5, 0.5, "speculation off", ha="center", transform=ax.transAxes, alpha=0.6)


def _pyplot() -> Any:
    """pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def build_figure(
    report: LoadReport,
    samples: dict[str, list[float]],
    comparison: Comparison | None = None,
) -> Any:
    """The figure (a matplotlib ``Figure``; the caller closes it with ``plt.close``)."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(12, 9), gridspec_kw={"height_ratios": [3, 2]}, layout="constrained"
    )
    title = title_line(report, comparison)
    if report.interrupted:
        title += " — INTERRUPTED (partial)"
    fig.suptitle("\n".join(textwrap.wrap(title, 120)), fontsize=11)
    _cdf_panel(top, _series(samples, comparison))
    _timeline_panel(bottom, report)
    return fig


def figure_png(
    report: LoadReport,
    samples: dict[str, list[float]],
    comparison: Comparison | None = None,
) -> bytes:
    """The figure as PNG bytes."""
    plt = _pyplot()
    fig = build_figure(report, samples, comparison)
    try:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()
    finally:
        plt.close(fig)
