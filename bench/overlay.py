"""Overlay accept and discard vs a bare ``shutil.copyfile`` loop, in one run.

* accept (conflict check, journal, staging, ``os.replace``) of 10 and of 100
  changed 4 KB files, p50/p99 over repeated runs -- target p99 <= 20 ms for
  100 files -- next to a bare loop of ``shutil.copyfile`` from the upper layer
  over the same targets (no check, no atomicity), ratio printed. This is the
  accept path a speculation's Tab takes: ``durable=False``, i.e. *no fsync* --
  the journal makes it safe against a process crash, which is what recovery
  handles (:mod:`actors.overlay.apply`);
* for reference, the same 100-file accept with ``durable=True`` (every staged
  file, the journal and the touched directories fsynced: power-loss safe),
  fewer runs -- what the fsyncs would cost on this disk;
* the removal of the overlay after a 100-file accept, which runs after the
  Tab has been answered and frees the 100 replaced files' old inodes (apply
  parks them there: see :mod:`actors.overlay.apply`) -- shown so that the
  cost moved off the accept path stays visible;
* discard (removal of the upper layer) of a 100-file overlay;
* the first write (the original is hashed for the base, never copied) and a
  later write of a 4 KB file into the overlay.

Run: ``python -m bench.overlay [--quick]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from fore.actors.overlay import OverlayFs, OverlayStore, apply_overlay
from fore.actors.tools.fs import WorkspaceFs
from fore.bench._common import (
    Target,
    console,
    machine_line,
    percentile,
    ratio,
    table,
    targets_table,
)
from fore.messages.overlay import ApplyResult

FILE_SIZE = 4096


def _content(version: int, index: int) -> bytes:
    line = f"version {version} file {index} ".encode()
    return (line * (FILE_SIZE // len(line) + 1))[:FILE_SIZE]


def _workspace(base: Path, count: int) -> Path:
    ws = base / f"ws-{count}"
    for index in range(count):
        target = ws / f"pkg{index % 4}" / f"mod{index}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_content(0, index))
    return ws


def _filled_overlay(store: OverlayStore, ws: Path, count: int, version: int) -> OverlayFs:
    overlay = store.create(WorkspaceFs(ws))
    for index in range(count):
        overlay.write_bytes(f"pkg{index % 4}/mod{index}.py", _content(version, index))
    return overlay


def _accept(
    store: OverlayStore,
    ws: Path,
    count: int,
    runs: int,
    *,
    durable: bool = False,
    version: int = 0,
) -> tuple[list[float], list[float], int]:
    """Apply and then removal latencies (s) of ``runs`` overlays each changing ``count`` files."""
    times, removals = [], []
    for _ in range(runs + 2):  # two warm-up runs
        version += 1
        overlay = _filled_overlay(store, ws, count, version)
        t0 = time.perf_counter()
        result = apply_overlay(overlay, store.journal_dir, durable=durable)
        t1 = time.perf_counter()
        assert isinstance(result, ApplyResult) and len(result.written) == count
        overlay.remove()
        removals.append(time.perf_counter() - t1)
        times.append(t1 - t0)
    return times[2:], removals[2:], version


def _copyfile(store: OverlayStore, ws: Path, count: int, runs: int, version: int) -> list[float]:
    """The same copies as a bare ``shutil.copyfile`` loop (no check, no atomicity)."""
    times = []
    for _ in range(runs + 2):
        version += 1
        overlay = _filled_overlay(store, ws, count, version)
        pairs = []
        for index in range(count):
            rel = f"pkg{index % 4}/mod{index}.py"
            upper = overlay.upper_file(rel)
            assert upper is not None
            pairs.append((upper, ws / rel))
        t0 = time.perf_counter()
        for source, target in pairs:
            shutil.copyfile(source, target)
        times.append(time.perf_counter() - t0)
        overlay.remove()
    return times[2:]


def _discard(store: OverlayStore, ws: Path, count: int, runs: int) -> list[float]:
    times = []
    for run in range(runs):
        overlay = _filled_overlay(store, ws, count, 10_000 + run)
        t0 = time.perf_counter()
        assert overlay.remove()
        times.append(time.perf_counter() - t0)
    return times


def _writes(store: OverlayStore, ws: Path, count: int) -> tuple[list[float], list[float]]:
    overlay = store.create(WorkspaceFs(ws))
    first, later = [], []
    for index in range(count):
        rel = f"pkg{index % 4}/mod{index}.py"
        t0 = time.perf_counter()
        overlay.write_bytes(rel, _content(20_000, index))
        first.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        overlay.write_bytes(rel, _content(20_001, index))
        later.append(time.perf_counter() - t0)
    overlay.remove()
    return first, later


def run(*, quick: bool = False) -> dict[str, float]:
    runs = 20 if quick else 100
    console.print(f"[bold]bench overlay[/] — {machine_line()}")
    base = Path(tempfile.mkdtemp(prefix="fore-bench-overlay-"))
    store = OverlayStore(base / "overlays")
    try:
        ws10, ws100 = _workspace(base, 10), _workspace(base, 100)
        accept10, _, v10 = _accept(store, ws10, 10, runs)
        accept100, removal100, v100 = _accept(store, ws100, 100, runs)
        durable100, _, v100 = _accept(
            store, ws100, 100, max(5, runs // 5), durable=True, version=v100
        )
        copy10 = _copyfile(store, ws10, 10, runs, v10)
        copy100 = _copyfile(store, ws100, 100, runs, v100)
        discard100 = _discard(store, ws100, 100, runs)
        first, later = _writes(store, ws100, 100)
    finally:
        store.close()
        shutil.rmtree(base, ignore_errors=True)

    def ms(values: list[float], q: float) -> float:
        return percentile(values, q) * 1e3

    table(
        "overlay accept (no fsync, the Tab path) vs bare shutil.copyfile loop (4 KB files)",
        [
            "measurement",
            "p50 (ms)",
            "p99 (ms)",
            "copyfile p50 (ms)",
            "copyfile p99 (ms)",
            "p99 ratio (×)",
            "target",
        ],
        [
            [
                "accept 10 files",
                ms(accept10, 50),
                ms(accept10, 99),
                ms(copy10, 50),
                ms(copy10, 99),
                ratio(ms(accept10, 99), ms(copy10, 99)),
                "",
            ],
            [
                "accept 100 files",
                ms(accept100, 50),
                ms(accept100, 99),
                ms(copy100, 50),
                ms(copy100, 99),
                ratio(ms(accept100, 99), ms(copy100, 99)),
                "p99 ≤ 20 ms",
            ],
            [
                "accept 100 files, durable (fsync; reference)",
                ms(durable100, 50),
                ms(durable100, 99),
                "",
                "",
                "",
                "",
            ],
            [
                "removal after a 100-file accept (off the Tab path)",
                ms(removal100, 50),
                ms(removal100, 99),
                "",
                "",
                "",
                "",
            ],
            ["discard 100-file overlay", ms(discard100, 50), ms(discard100, 99), "", "", "", ""],
        ],
    )
    table(
        "overlay writes (4 KB)",
        ["measurement", "p50 (µs)", "p99 (µs)"],
        [
            ["first write (base hash, no copy)", ms(first, 50) * 1e3, ms(first, 99) * 1e3],
            ["later write (same upper file)", ms(later, 50) * 1e3, ms(later, 99) * 1e3],
        ],
    )
    targets_table([Target("accept 100 changed 4 KB files, p99", ms(accept100, 99), "ms", "<=", 20)])
    return {
        "accept10_p50_ms": ms(accept10, 50),
        "accept10_p99_ms": ms(accept10, 99),
        "accept100_p50_ms": ms(accept100, 50),
        "accept100_p99_ms": ms(accept100, 99),
        "accept100_durable_p50_ms": ms(durable100, 50),
        "accept100_durable_p99_ms": ms(durable100, 99),
        "copyfile10_p50_ms": ms(copy10, 50),
        "copyfile10_p99_ms": ms(copy10, 99),
        "copyfile100_p50_ms": ms(copy100, 50),
        "copyfile100_p99_ms": ms(copy100, 99),
        "accept10_p99_ratio": ratio(ms(accept10, 99), ms(copy10, 99)),
        "accept100_p99_ratio": ratio(ms(accept100, 99), ms(copy100, 99)),
        "accept100_p50_ratio": ratio(ms(accept100, 50), ms(copy100, 50)),
        "removal_after_accept100_p50_ms": ms(removal100, 50),
        "removal_after_accept100_p99_ms": ms(removal100, 99),
        "discard100_p50_ms": ms(discard100, 50),
        "discard100_p99_ms": ms(discard100, 99),
        "first_write_p50_us": ms(first, 50) * 1e3,
        "later_write_p50_us": ms(later, 50) * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench overlay", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    run(quick=parser.parse_args(argv).quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
