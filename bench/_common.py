"""Shared benchmark helpers: percentiles, ratio formatting, result tables."""

from __future__ import annotations

import gc
import math
import os
import platform
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

# Piped output (CI logs, tests, ``| tee``) gets 120 columns rather than rich's
# 80, so the result tables keep one row per line.
console = Console(highlight=False, width=None if os.isatty(1) else 120)


class BenchFailed(RuntimeError):
    """A measurement lost work or missed its deadline: its figures are not rates.

    Raised by a micro-benchmark's ``run`` (after printing what it could);
    ``fore bench <name>`` reports it as one line and exits non-zero.
    """


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


def open_fds() -> int:
    return int(psutil.Process().num_fds())


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - start
    end.append(time.perf_counter())


def machine_line() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.python_implementation()} {platform.python_version()} on "
        f"{os.cpu_count()} cores, load avg {load:.2f}, threads now {threading.active_count()}"
    )


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print one result table."""
    t = Table(title=title, title_justify="left", min_width=min(len(title), 120))
    for i, column in enumerate(columns):
        t.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*[fmt(v) for v in row])
    console.print(t)


def fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)
