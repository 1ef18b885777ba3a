"""``fore bench``: the speculation load benchmark (the main job), or a micro-benchmark.

The load benchmark is :mod:`bench.load` (``--compare``: with and without
speculation; ``--store sqlite``: :mod:`bench.store_load`; ``--shards N``:
:mod:`bench.load_ray`); each micro-benchmark is the ``run`` of the
:mod:`bench` module it is named after.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from typing import Any

from fore.errors import UsageError
from fore.supervision.cli.exits import EXIT_FAILED, EXIT_OK, PROG, needs_extra, one_line
from fore.supervision.cli.flags import (
    Subcommands,
    log_level_flag,
    non_negative,
    positive,
    positive_int,
    price_flag,
    probability,
    shard_count,
    writable,
)

MICRO = (
    "actors",
    "tools",
    "llm",
    "worker",
    "blobs",
    "overlay",
    "shell",
    "store",
    "chat",
    "tool-api",
    "telemetry",
    "real_server",
)

_BENCH_MODULES = ("rich", "starlette", "uvicorn")


def add_parser(sub: Subcommands) -> None:
    """``fore bench``'s flags."""
    bench = sub.add_parser(
        "bench",
        help="the speculation load benchmark, or a micro-benchmark",
        description=(
            "Without a name: the speculation load benchmark -- N sessions in this process on "
            "generated workspaces, talking to the built-in mock LLM server over real HTTP, with "
            "simulated users who press Tab or type. With a name: one micro-benchmark "
            f"({', '.join(MICRO)}), each printing its baseline and ratio from the same run."
        ),
    )
    bench.add_argument("name", nargs="?", choices=MICRO, help="a micro-benchmark to run instead")
    bench.add_argument("--quick", action="store_true", help="micro-benchmarks: smaller counts")
    bench.add_argument("--sessions", type=positive_int, default=200, help="sessions (default 200)")
    bench.add_argument(
        "--turns", type=positive_int, default=4, help="turns per session (default 4)"
    )
    bench.add_argument(
        "--duration",
        type=positive,
        default=100.0,
        help="wall-clock bound of the whole run in seconds, opening and closing the sessions "
        "included (default 100)",
    )
    bench.add_argument(
        "--accept-p",
        type=probability,
        default=0.7,
        help="probability a user presses Tab (default 0.7)",
    )
    bench.add_argument(
        "--think-ms",
        type=non_negative,
        default=10_000.0,
        help="mean time a user reads an answer, in ms (default 10000)",
    )
    bench.add_argument(
        "--think-dist",
        choices=("exp", "lognormal", "uniform", "fixed"),
        default="exp",
        help="how think times spread around --think-ms: exp (exponential, capped at 5x), "
        "lognormal (sigma 1, capped at 5x), uniform (0 to 2x) or fixed (default exp)",
    )
    bench.add_argument(
        "--type-during-p",
        type=probability,
        default=0.8,
        help="probability a user types its next prompt at once, while the speculation of the "
        "answer's suggestion still runs (what abort latency is measured on; default 0.8)",
    )
    bench.add_argument(
        "--edit-p",
        type=probability,
        default=0.05,
        help="probability a user edits a file the speculation touched before Tab (default 0.05)",
    )
    bench.add_argument(
        "--ttft-ms",
        type=non_negative,
        default=40.0,
        help="mock LLM time to first token in ms (default 40)",
    )
    bench.add_argument(
        "--tokens-per-s",
        type=positive,
        default=400.0,
        help="mock LLM tokens per second (> 0; default 400)",
    )
    bench.add_argument(
        "--no-speculation", action="store_true", help="suggestions only, no speculation"
    )
    bench.add_argument(
        "--compare", action="store_true", help="run with and without speculation; print the ratio"
    )
    bench.add_argument(
        "--store",
        choices=("sqlite",),
        help="run the workload with every session in a SQLite session store and without one "
        "(same seed, --pairs pairs), and compare main-turn latency (target: p99 ratio <= 1.05)",
    )
    bench.add_argument(
        "--pairs",
        type=positive_int,
        default=1,
        help="with --compare: pairs of runs, interleaved (on/off, off/on ...), each pair on "
        "its own seed, every typed turn pooled per arm; one pair cannot resolve a few per "
        "cent at the p99 (use 3 for a verdict; each pair takes about 3 minutes; default 1)",
    )
    bench.add_argument(
        "--no-governor",
        action="store_true",
        help="speculate on every suggestion, even without headroom (no load shedding)",
    )
    bench.add_argument(
        "--shards",
        type=shard_count,
        default=0,
        help="host the sessions on N Ray shard processes of a local Ray instance "
        "(needs pip install 'fore-runtime[ray]'); 0: in this process (default 0)",
    )
    bench.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    price_flag(
        bench,
        "the mock model's price in USD per million tokens, for the report's costs and "
        "the waste in money (default 3,15,0.3)",
    )
    bench.add_argument("--json", type=writable, metavar="PATH", help="write the JSON report here")
    bench.add_argument(
        "--plot",
        type=writable,
        metavar="PATH.png",
        help="one figure: latency CDFs and a timeline of running speculations and governor "
        "skips (needs matplotlib: pip install 'fore-runtime[plot]')",
    )
    bench.add_argument(
        "--html",
        type=writable,
        metavar="PATH",
        help="a self-contained HTML report: the table, the verdict, the figure "
        "(the figure needs matplotlib)",
    )
    bench.add_argument(
        "--explain", action="store_true", help="print a glossary of the report's terms"
    )
    bench.add_argument("--no-progress", action="store_true", help="no progress bar")
    bench.add_argument(
        "--provider",
        choices=("openai", "anthropic"),
        default="openai",
        help="the mock's wire protocol: openai (default) or anthropic (Messages API with "
        "prompt caching; the report adds the share of fork input read from the cache)",
    )
    log_level_flag(bench, "error")


def bench_command(args: argparse.Namespace) -> int:
    needs_extra("bench", "bench", _BENCH_MODULES)
    if args.name is not None:
        from fore.bench._common import BenchFailed

        module = importlib.import_module(f"fore.bench.{args.name.replace('-', '_')}")
        try:
            module.run(quick=args.quick)
        except BenchFailed as exc:
            sys.stderr.write(f"{PROG} bench {args.name}: FAILED: {exc}\n")
            return EXIT_FAILED
        except OSError as exc:  # no temp space, too many open files ...
            sys.stderr.write(f"{PROG} bench {args.name}: error: {one_line(exc)}\n")
            return EXIT_FAILED
        return EXIT_OK
    if args.pairs != 1 and not (args.compare or args.store):
        raise UsageError(f"{PROG} bench: --pairs needs --compare or --store")
    if args.store and args.compare:
        raise UsageError(f"{PROG} bench: --store and --compare are two comparisons: pick one")
    if args.plot is not None:
        try:
            importlib.import_module("matplotlib")
        except ImportError:
            raise UsageError(
                f"{PROG} bench: --plot needs matplotlib (pip install 'fore-runtime[plot]')"
            ) from None
    from fore.bench._common import console
    from fore.bench.load import BenchSetupError, run_comparison, run_load
    from fore.bench.load_options import LoadOptions
    from fore.bench.load_report import leaks_total, report_json
    from fore.bench.report import print_report, verdict_json, verdict_line

    options = LoadOptions(
        sessions=args.sessions,
        turns=args.turns,
        duration=args.duration,
        accept_p=args.accept_p,
        think_ms=args.think_ms,
        think_dist=args.think_dist,
        type_during_p=args.type_during_p,
        edit_p=args.edit_p,
        ttft_ms=args.ttft_ms,
        tokens_per_s=args.tokens_per_s,
        speculation=not args.no_speculation,
        governor=not args.no_governor,
        seed=args.seed,
        progress=not args.no_progress,
        shards=args.shards,
        provider=args.provider,
    )
    if args.price is not None:
        options = dataclasses.replace(options, price=_price_tuple(args.price))
    if args.store:  # the session store's cost (bench/store_load.py)
        from fore.bench.store_load import run_store_comparison

        try:
            code, _figures = run_store_comparison(options, args.pairs)
        except (BenchSetupError, OSError) as exc:
            sys.stderr.write(f"{PROG} bench: error: {one_line(exc)}\n")
            return EXIT_FAILED
        return code
    comparison = None
    compare = None
    try:
        if args.compare:
            on_reports, off_reports, comparison, samples = run_comparison(options, args.pairs)
            reports = on_reports + off_reports
            report = on_reports[0]
            compare = off_reports[0] if off_reports else None
        else:
            report, samples = run_load(options)
            reports = [report]
    except (BenchSetupError, OSError) as exc:
        sys.stderr.write(f"{PROG} bench: error: {one_line(exc)}\n")
        return EXIT_FAILED
    interrupted = any(r.interrupted for r in reports)
    targets = print_report(
        report,
        comparison,
        reports=reports,
        compare=args.compare,
        explain=args.explain,
        with_verdict=False,
    )
    if args.shards:  # --shards N: each shard's load (bench/load_ray.py)
        from fore.bench.load_ray import print_shard_table

        print_shard_table(report)
    try:
        if args.json is not None:
            args.json.write_text(
                report_json(report, compare, comparison, verdict_json(targets)) + "\n"
            )
            console.print(f"JSON report written to {args.json}", soft_wrap=True)
        figure = None
        if args.plot is not None or args.html is not None:
            figure = _figure(report, samples, comparison)
        if args.plot is not None and figure is not None:
            args.plot.write_bytes(figure)
            console.print(f"figure written to {args.plot}", soft_wrap=True)
        if args.html is not None:
            from fore.bench.report_html import render_html

            args.html.write_text(render_html(report, targets, comparison, reports, figure))
            console.print(f"HTML report written to {args.html}", soft_wrap=True)
    except OSError as exc:
        sys.stderr.write(f"{PROG} bench: error: cannot write the report: {one_line(exc)}\n")
        return EXIT_FAILED
    # The verdict is the last line of the output, whatever was written.
    console.print(verdict_line(targets, interrupted=interrupted), soft_wrap=True, markup=False)
    leaky = [r for r in reports if leaks_total(r)]
    if leaky:
        leaks = sum(leaks_total(r) for r in leaky)
        sys.stderr.write(f"{PROG} bench: {leaks} leak(s) after shutdown: {leaky[0].leaks}\n")
        return EXIT_FAILED
    if interrupted:
        sys.stderr.write(f"{PROG} bench: interrupted: the report covers what finished\n")
        return 130
    return EXIT_OK


def _price_tuple(price: Any) -> tuple[float, float, float]:
    cached = price.input if price.cached_input is None else price.cached_input
    return (price.input, price.output, cached)


def _figure(report: Any, samples: dict[str, list[float]], comparison: Any) -> bytes | None:
    """The report's figure as PNG bytes, or None without matplotlib (``--html`` only)."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return None
    from fore.bench.report_plot import figure_png

    return figure_png(report, samples, comparison)
