"""``fore bench``'s report as a reader sees it: n beside every percentile, "—" with a reason
instead of nan, a verdict per documented target and one verdict line last, the glossary
(in ``--explain`` and the README), the figure, and the HTML page -- all from hand-made
reports (no run: the runs are in ``tests/cli/test_cli.py`` and ``test_bench_html.py``)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.bench._common import Target, fmt, format_target, missing_units, verdict_word
from fore.bench.load_report import Comparison, LoadReport
from fore.bench.report import (
    GLOSSARY,
    print_report,
    quantile_text,
    sections,
    verdict,
    verdict_json,
    verdict_line,
)

README = Path(__file__).resolve().parents[2] / "README.md"
NONE = {"count": 0, "p50": math.nan, "p95": math.nan, "p99": math.nan}


def q(count: int, p50: float, p99: float) -> dict[str, float]:
    return {"count": count, "p50": p50, "p95": (p50 + p99) / 2, "p99": p99}


def closed(total: int, **buckets: int) -> dict[str, Any]:
    return {"total": total, "accounted": sum(buckets.values()), "buckets": buckets}


def fake_report(**changes: Any) -> LoadReport:
    fields: dict[str, Any] = {
        "options": {
            "turns": 4, "think_ms": 10_000.0, "think_dist": "exp", "accept_p": 0.7,
            "type_during_p": 0.8, "edit_p": 0.05, "ttft_ms": 40.0, "tokens_per_s": 400.0,
            "governor": True, "seed": 1, "speculation": True, "duration": 100.0,
        },
        "sessions": 2, "turns": 8, "suggestions": 4, "speculations_started": 6,
        "speculations_skipped": 0, "speculations": {"accepted": 2}, "speculation_states": {},
        "accepts": {"accepted": 2}, "tab_waited_ms": NONE,
        "accept_latency_ms": q(240, 2.0, 9.5), "abort_latency_ms": q(230, 2.5, 7.0),
        "abort_cleanup_ms": q(230, 6.0, 20.0), "aborts_of_finished": 3,
        "abort_finished_cleanup_ms": q(3, 5.0, 9.0), "time_saved_ms_mean": 250.0,
        "wasted_tokens": 1000, "wasted_tokens_estimated": 10,
        "main_turn_ms": q(500, 300.0, 600.0), "rss_per_session_kib": 300.0,
        "peak_threads": 20, "peak_fds": 100, "wall_s": 60.0, "setup_s": 3.0,
        "teardown_s": 1.0, "wall_total_s": 64.0, "rounds_cut": 0,
        "leaks": {"overlay_dirs": 0, "threads": 0}, "errors": [], "turns_planned": 8,
        "accounting": {
            "turns": closed(8, typed=6, tab=2),
            "suggestions": closed(4, tab_accepted=2, after_last_turn=2),
            "speculations": closed(6, accepted=2, aborted_running=2, open_finished=2),
            "cut": None,
            "closes": True,
        },
        "timeline": {
            "t_s": [0.2 * i for i in range(1, 60)],
            "running": [float(i % 5) for i in range(1, 60)],
            "skipped": [float(i // 3) for i in range(1, 60)],
            "admitted": [float(i // 2) for i in range(1, 60)],
            "rounds": [float(i // 4) for i in range(1, 60)],
        },
    }  # fmt: skip
    fields.update(changes)
    return LoadReport(**fields)


# -- figures in the table -----------------------------------------------------------------


def test_every_percentile_has_its_n_and_no_samples_say_why() -> None:
    assert quantile_text(q(240, 2.0, 9.5), "x") == "2.00 / 5.75 / 9.50 ms (n=240)"
    assert quantile_text(q(5, 2.0, 3.0), "x").endswith("(n=5, p99 = the largest)")
    assert quantile_text(NONE, "nobody pressed Tab") == "— (nobody pressed Tab)"
    assert fmt(math.nan) == "—"


def test_the_table_has_no_nan_and_shows_each_group_closing() -> None:
    report = fake_report(accept_latency_ms=NONE, tab_waited_ms=NONE, accepts={})
    text = "\n".join(f"{label} {value}" for s in sections(report) for label, value in s.rows)
    assert "nan" not in text.lower()
    assert "— (no Tab applied a speculation)" in text
    assert text.count("✓ closes") == 3
    broken = fake_report(accounting={**report.accounting, "turns": {**closed(9, typed=6, tab=2)}})
    rows = [v for s in sections(broken) for _, v in s.rows]
    assert "8 of 9 ✗ DOES NOT CLOSE" in rows


# -- targets and the verdict --------------------------------------------------------------


def test_verdict_judges_each_documented_target() -> None:
    targets = {t.short: t for t in verdict([fake_report()])}
    assert set(targets) == {"accept p99", "abort p99", "leaks", "accounting", "wall time"}
    assert all(t.passed for t in targets.values())
    slow = {t.short: t for t in verdict([fake_report(abort_latency_ms=q(300, 3.0, 12.5))])}
    assert slow["abort p99"].passed is False
    assert (
        format_target(slow["abort p99"], short=True) == "abort p99 12.5 ms (n=300), ≤ 10 ms: FAIL"
    )


def test_the_compare_ratio_is_a_target_only_with_compare() -> None:
    pair = {"seed": 1, "on_p50": 300, "off_p50": 300, "on_p99": 630, "off_p99": 600}
    comparison = Comparison([pair], q(500, 300.0, 630.0), q(500, 300.0, 600.0))
    report = fake_report()
    targets = {t.short: t for t in verdict([report, report], comparison, compare=True)}
    assert targets["main-turn p99 on/off"].measured == pytest.approx(1.05)
    assert targets["main-turn p99 on/off"].passed is True
    worse = Comparison(comparison.pairs, q(500, 300.0, 700.0), q(500, 300.0, 600.0))
    assert {t.short: t for t in verdict([report], worse, compare=True)}[
        "main-turn p99 on/off"
    ].passed is False
    interrupted = {t.short: t for t in verdict([report], None, compare=True)}
    assert verdict_word(interrupted["main-turn p99 on/off"]) == "— (no complete pair of runs)"


def test_a_target_with_nothing_measured_is_not_a_pass() -> None:
    targets = verdict([fake_report(abort_latency_ms=NONE)])
    line = verdict_line(targets)
    assert "abort p99 — (no keystroke found a speculation running)" in line
    assert line.startswith("verdict: PASS (4 of 4 targets met, 1 not measured)")
    leaky = verdict_line(verdict([fake_report(leaks={"threads": 2})]))
    assert leaky.startswith("verdict: FAIL (1 of 5 targets missed)")
    assert "leaks 2, = 0: FAIL" in leaky
    big = verdict([fake_report(options={**fake_report().options, "duration": 300.0})])
    assert verdict_word(big[-1]) == "n/a (--duration over 100)"
    assert verdict_json(targets)[1]["measured"] is None


def test_the_verdict_is_the_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(fake_report(), explain=True)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("verdict: PASS (5 of 5 targets met)")
    assert "accept p99 9.5 ms (n=240), ≤ 20 ms: PASS" in lines[-1]
    assert any("glossary" in line for line in lines)


def test_an_interrupted_report_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    print_report(fake_report(interrupted=True))
    out = capsys.readouterr().out
    assert "INTERRUPTED" in out
    assert out.strip().splitlines()[-1].startswith("verdict (partial: interrupted)")


@given(
    columns=st.lists(st.sampled_from(["a", "b (ms)", "c (×)", "d"]), min_size=2, max_size=4),
    labels=st.lists(st.sampled_from(["x", "y (ms)", "z (count)"]), min_size=1, max_size=4),
    value=st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3)),
)
def test_a_number_without_a_unit_is_always_found(
    columns: list[str], labels: list[str], value: object
) -> None:
    rows = [[label] + [value] * (len(columns) - 1) for label in labels]
    missing = missing_units(columns, rows)
    numeric = isinstance(value, int | float)
    for header in columns[1:]:
        unitless = "(" not in header and not all("(" in label for label in labels)
        assert (header in missing) == (numeric and unitless), (header, rows)


def test_target_words() -> None:
    assert verdict_word(Target("t", 1.0, "ms", "<=", 2)) == "PASS"
    assert verdict_word(Target("t", 3.0, "×", ">=", 15)) == "FAIL"
    assert verdict_word(Target("t", 3.0, "", "<=", 2, applies=False, missing="quick")) == (
        "n/a (quick)"
    )
    assert verdict_word(Target("t", math.nan, "ms", "<=", 2, missing="none")) == "— (none)"
    assert Target("t", 1.04, "×", "<=", 1.15).limit_text == "≤ 1.15×"


# -- the glossary -------------------------------------------------------------------------


def test_the_readme_has_the_glossary_and_the_new_options() -> None:
    text = " ".join(README.read_text().split())
    for term, meaning in GLOSSARY.items():
        assert f"**{term}** — {' '.join(meaning.split())}" in text, term
    for flag in ("--type-during-p", "--html", "--explain", "--plot"):
        assert f"`{flag}" in text, flag


def test_the_glossary_explains_the_terms_the_table_uses() -> None:
    text = " ".join(GLOSSARY).lower() + " " + " ".join(GLOSSARY.values()).lower()
    for word in ("boundary", "conflict", "submitted", "no headroom", "stale", "empty", "n "):
        assert word in text, word


# -- the figure and the page (rendered here; a browser renders it in test_bench_html) ---


def test_the_figure_has_cdfs_with_n_and_markers_a_timeline_and_a_titled_run() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from fore.bench.report_plot import build_figure

    samples = {
        "accept": [0.002 + i * 1e-5 for i in range(240)],
        "abort_cancel": [],
        "main_turn": [0.3 + i * 1e-3 for i in range(500)],
    }
    comparison = Comparison(
        [{"seed": 1, "on_p50": 1, "off_p50": 1, "on_p99": 1, "off_p99": 1, "p99_ratio": 1}],
        q(500, 300.0, 600.0),
        q(400, 300.0, 600.0),
        samples["main_turn"],
        [0.31 + i * 1e-3 for i in range(400)],
    )
    fig = build_figure(fake_report(), samples, comparison)
    try:
        title = " ".join(fig._suptitle.get_text().split())
        assert "2 sessions × 4 turns" in title and "type-during-p 0.8" in title
        cdf, timeline = fig.axes[0], fig.axes[1]
        assert cdf.get_xscale() == "log"
        legend = [t.get_text() for t in cdf.get_legend().get_texts()]
        assert any(t.startswith("accept") and "n=240" in t and "p99" in t for t in legend)
        assert any("speculation off" in t and "n=400" in t for t in legend)
        assert any(t.startswith("abort") and "—" in t for t in legend)  # no samples: why
        assert any("target" in t for t in legend)
        marks = [t.get_text() for t in cdf.texts]
        assert any(m.startswith("p50 ") for m in marks) and any(m.startswith("p99 ") for m in marks)
        assert "running" in timeline.get_ylabel()
        first = timeline.get_legend().get_texts()[0].get_text()
        assert first.startswith("speculations running")
    finally:
        plt.close(fig)


def test_the_html_page_is_self_contained_and_escaped() -> None:
    from fore.bench.report_html import render_html

    report = fake_report(errors=['<script>alert("x")</script>'])
    page = render_html(report, verdict([report]), None, None, b"\x89PNG fake")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", page)
    assert 'src="data:image/png;base64,' in page
    assert 'id="verdict">verdict: PASS' in page
    for term in GLOSSARY:
        assert term.replace("'", "&#x27;") in page


def test_the_comparison_shows_the_ratio_at_matched_load_beside_the_verdict() -> None:
    """The on arm's turns ran beside more main turns (loads 10-19 vs 0-9) and were slower
    by that alone: the raw p90 differs, the matched ratio -- here from the one load both
    arms ran at, 10 -- is 1.0; the verdict is still the raw p99 ratio."""
    on_turns = [0.40] * 60 + [0.50] * 60
    off_turns = [0.30] * 60 + [0.40] * 60
    pair = {"seed": 1, "on_p50": 400, "off_p50": 300, "on_p99": 500, "off_p99": 400}
    comparison = Comparison(
        [pair],
        q(120, 400.0, 500.0),
        q(120, 300.0, 400.0),
        on_turns,
        off_turns,
        on_load=[10.0] * 60 + [15.0] * 60,
        off_load=[5.0] * 60 + [10.0] * 60,
    )
    assert comparison.matched_p90_ratio == pytest.approx(1.0)
    assert comparison.load_quantile(True, 99) == 15 and comparison.load_quantile(False, 99) == 10
    data = comparison.as_dict()
    assert data["matched_p90_ratio"] == pytest.approx(1.0)
    assert data["in_flight_p99"] == {"on": 15.0, "off": 10.0}
    rows = dict(row for part in sections(fake_report(), comparison) for row in part.rows)
    assert rows["p90 at matched load: on / off"].startswith("1.000× (")
    targets = {t.short: t for t in verdict([fake_report()], comparison, compare=True)}
    assert targets["main-turn p99 on/off"].measured == pytest.approx(1.25)
    # loads not recorded (or not one per turn): nothing is matched, and the row says why
    bare = Comparison([pair], comparison.on_ms, comparison.off_ms, on_turns, off_turns)
    assert math.isnan(bare.matched_p90_ratio)
    rows = dict(row for part in sections(fake_report(), bare) for row in part.rows)
    assert rows["p90 at matched load: on / off"].startswith("—")
