"""Shared benchmark helpers: percentiles, ratio formatting, result tables, targets.

Every table of every benchmark goes through :func:`table`, and every target
through :func:`targets_table`, so they read alike:

* a number never stands without its unit: a numeric column's header ends with
  its unit in parentheses ("p99 (ms)", "vs ThreadingActor (×)"), or -- in a
  "measurement / value" table whose rows differ -- each row's label does
  ("cancel → closed, p99 (ms)"). A column that has neither is flagged
  ``(unit?)`` in its header and named in a warning line, so a new row or
  column without a unit shows at once (the micro-benchmark tests look for it);
* a figure that could not be measured is "—", never ``nan``;
* every target ends in one row of the ``targets`` table: the target, its
  limit, the measured figure and PASS, FAIL, or n/a with the reason.
"""

from __future__ import annotations

import gc
import math
import os
import platform
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psutil
from rich.console import Console
from rich.table import Table

from fore.errors import BenchFailed

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["BenchFailed"]


# Piped output (CI logs, tests, ``| tee``) gets 120 columns rather than rich's
# 80, so the result tables keep one row per line.
def _width() -> int | None:
    """The terminal's width; 120 (or ``COLUMNS``) when the output is a file or a pipe."""
    if os.isatty(1):
        return None
    try:
        return max(80, int(os.environ.get("COLUMNS", "120")))
    except ValueError:
        return 120


console = Console(highlight=False, width=_width())


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def ratio(numerator: float, denominator: float) -> float:
    return float("nan") if denominator == 0 else numerator / denominator


def rss_bytes() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def os_threads() -> int:
    return int(psutil.Process().num_threads())


def machine_line() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.python_implementation()} {platform.python_version()} on "
        f"{os.cpu_count()} cores, load avg {load:.2f}, threads now {threading.active_count()}"
    )


_UNIT = re.compile(r"\([^()]+\)\s*$")
"""A unit: a parenthesized group at the end of a header or a row label."""


def has_unit(text: str) -> bool:
    return bool(_UNIT.search(text))


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def missing_units(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """The numeric columns whose numbers have no unit (see the module docs)."""
    missing = []
    for index, header in enumerate(columns):
        if index == 0 or has_unit(header):
            continue
        labelled = [
            has_unit(str(row[0]))
            for row in rows
            if len(row) > index and _numeric(row[index]) and row
        ]
        if labelled and not all(labelled):
            missing.append(header)
    return missing


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print one result table (numbers formatted; a column without a unit flagged)."""
    unitless = set(missing_units(columns, rows))
    t = Table(title=title, title_justify="left", min_width=min(len(title), 120))
    for i, column in enumerate(columns):
        header = f"{column} (unit?)" if column in unitless else column
        t.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*[fmt(v) for v in row])
    console.print(t)
    if unitless:
        console.print(
            f"[yellow]warning:[/] table {title!r}: no unit for {', '.join(sorted(unitless))}"
        )


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# -- targets ------------------------------------------------------------------------------


_OPS = {"<=": "≤", ">=": "≥", "==": "="}


@dataclass(frozen=True)
class Target:
    """One target of the spec and what a run measured for it.

    ``passed`` is None when it cannot be judged: ``applies`` is False (a
    quick run, not the size the target is for) or the figure is NaN (nothing
    was measured) -- ``missing`` says why.
    """

    name: str
    measured: float
    unit: str
    op: Literal["<=", ">=", "=="]
    limit: float
    applies: bool = True
    note: str | None = None
    """Shown beside the figure (the sample count, say)."""
    missing: str = "not measured"
    short: str = ""
    """A short name for one-line verdicts (the name when empty)."""

    @property
    def passed(self) -> bool | None:
        if not self.applies or not math.isfinite(self.measured):
            return None
        if self.op == "<=":
            return self.measured <= self.limit
        if self.op == ">=":
            return self.measured >= self.limit
        return self.measured == self.limit

    def _with_unit(self, text: str) -> str:
        return f"{text}{self.unit}" if self.unit in ("", "×", "%") else f"{text} {self.unit}"

    @property
    def limit_text(self) -> str:
        return self._with_unit(f"{_OPS[self.op]} {float(self.limit):g}")

    @property
    def measured_text(self) -> str:
        if not math.isfinite(self.measured):
            return "—"
        note = f" ({self.note})" if self.note else ""
        return self._with_unit(fmt(float(self.measured))) + note


def verdict_word(target: Target) -> str:
    """PASS, FAIL, or "n/a (why)" / "— (why)" when it cannot be judged."""
    if target.passed is None:
        return f"n/a ({target.missing})" if not target.applies else f"— ({target.missing})"
    return "PASS" if target.passed else "FAIL"


def format_target(target: Target, *, short: bool = False) -> str:
    """``name measured, limit: VERDICT`` in one phrase (a verdict line's part)."""
    name = (target.short or target.name) if short else target.name
    if not math.isfinite(target.measured):
        return f"{name} {verdict_word(target)}"
    return f"{name} {target.measured_text}, {target.limit_text}: {verdict_word(target)}"


def targets_table(targets: Sequence[Target], title: str = "targets") -> bool:
    """Print the targets with their verdicts; True when none failed."""
    table(
        title,
        ["target", "limit", "measured", "verdict"],
        [[t.name, t.limit_text, t.measured_text, verdict_word(t)] for t in targets],
    )
    return all(t.passed is not False for t in targets)
