"""The ``fore`` command.

* ``fore bench`` -- the speculation load benchmark (the main job);
* ``fore bench actors|tools|llm|worker|blobs|overlay|shell|store|chat|tool-api|real_server``
  -- the micro-benchmarks (``real_server`` needs llama-cpp-python and a model file, see
  ``bench/llama_server.py``);
* ``fore run`` -- one headless turn against a script or an OpenAI-compatible endpoint;
  ``--session ID`` continues a stored session;
* ``fore chat`` -- the interactive terminal (``--demo``: offline, scripted; ``--resume``
  picks a stored session to continue);
* ``fore mock-llm`` -- the built-in mock LLM server.

A user mistake (a bad flag value, an unreachable endpoint, an unwritable output
path) is one clear line on stderr and a non-zero exit code (2), never a
traceback; so is a failure to set up (the mock server does not start, a file
cannot be written: exit code 1). Every numeric flag is range-checked when it is
parsed, with the range in the message.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from fore.errors import UsageError

PROG = "fore"
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

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

_RUN_EXIT = {
    "completed": 0,
    "error": 1,
    "rejected": 3,
    "aborted": 3,
    "max_turns": 4,
    "paused": 5,
    "cut_off": 6,
    "usage_limit": 4,
    "cancelled": 130,
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _shard_count(text: str) -> int:
    """``--shards``: 0 (in this process) up to 64 Ray shard processes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be 0 to 64, got {value}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text!r}")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _price(text: str) -> Any:
    from fore.actors.telemetry.usage import parse_price

    try:
        return parse_price(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _price_tuple(price: Any) -> tuple[float, float, float]:
    cached = price.input if price.cached_input is None else price.cached_input
    return (price.input, price.output, cached)


def _probability(text: str) -> float:
    value = _non_negative(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def _writable(path: str) -> Path:
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {path}: permission denied")
    if target.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {path}: it is a directory")
    return target


def _log_level_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """``--log-level``: the runtime's structlog events on stderr.

    The commands report what matters themselves (events, tables, one error
    line), so by default only what is worse than the expected is logged; the
    bench's conflict alerts, for one, are part of its workload.
    """
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error", "critical"),
        default=os.environ.get("FORE_LOG_LEVEL", default).lower(),
        help=f"runtime log events on stderr at or above this level (default {default}, "
        "or FORE_LOG_LEVEL)",
    )


def _store_flags(parser: argparse.ArgumentParser) -> None:
    """``--store`` / ``--no-store``: where the session is kept (issue 25)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--store",
        metavar="URL",
        help="the session store: sqlite:///path/sessions.db or postgresql://... (default: "
        "FORE_STORE, else sessions.db in the user's data directory)",
    )
    group.add_argument("--no-store", action="store_true", help="keep the session in memory only")


def _store_url(args: argparse.Namespace) -> str | None:
    """The store ``fore run`` / ``fore chat`` use: a flag, ``FORE_STORE``, or the default file."""
    if args.no_store:
        return None
    url = args.store or _env("FORE_STORE")
    if url:
        return str(url)
    from fore.supervision.persist import default_store_dir

    directory = default_store_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"{PROG}: cannot create the session store's directory: {_one_line(exc)} "
            "(use --store URL or --no-store)"
        ) from None
    return f"sqlite:///{directory / 'sessions.db'}"


def _runtime(name: str, store: str | None, command: str, **options: Any) -> Any:
    """A runtime on ``store``; a store that cannot be opened is one line."""
    from fore.actors.store import StoreError, StoreUrlError
    from fore.supervision import Runtime

    try:
        return Runtime(name=name, store=store, **options)
    except StoreUrlError as exc:
        raise UsageError(f"{PROG} {command}: --store: {_one_line(exc)}") from None
    except StoreError as exc:
        raise _Failed(f"{PROG} {command}: error: the session store: {_one_line(exc)}") from None


class _Failed(Exception):
    """A failure to set up, reported as one line, exit code 1."""


def _provider_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--provider",
        choices=("openai", "anthropic"),
        help="the endpoint's API: openai (Chat Completions) or anthropic (Messages); "
        "default: inferred -- anthropic for a base URL on anthropic.com, or with "
        "ANTHROPIC_API_KEY set and no OpenAI configuration; else openai",
    )


def _api_key_flags(parser: argparse.ArgumentParser) -> None:
    """Where the API key comes from: the environment, or a file -- not the command line.

    A key given as an argument is visible to every user of the machine (``ps``)
    and lands in shell history; ``--api-key`` still works, with a warning.
    """
    parser.add_argument(
        "--api-key-file",
        type=Path,
        metavar="PATH",
        help="read the API key from this file (default: FORE_API_KEY / OPENAI_API_KEY)",
    )
    parser.add_argument("--api-key", help=argparse.SUPPRESS)


def _api_key(args: argparse.Namespace, command: str) -> str | None:
    if args.api_key is not None:
        sys.stderr.write(
            f"{PROG} {command}: warning: --api-key shows the key to every process listing and "
            "keeps it in shell history; use FORE_API_KEY or --api-key-file\n"
        )
        return str(args.api_key)
    path: Path | None = args.api_key_file
    if path is None:
        return None
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UsageError(
            f"{PROG} {command}: --api-key-file {path}: {exc.strerror or _one_line(exc)}"
        ) from None
    if not key or "\n" in key:
        raise UsageError(f"{PROG} {command}: --api-key-file {path}: expected one line, the key")
    return key


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fore-runtime")
    except PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description=(
            "Fore: a runtime for LLM coding-agent sessions (pooled actors, typed messages)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

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
    bench.add_argument("--sessions", type=_positive_int, default=200, help="sessions (default 200)")
    bench.add_argument(
        "--turns", type=_positive_int, default=4, help="turns per session (default 4)"
    )
    bench.add_argument(
        "--duration",
        type=_positive,
        default=100.0,
        help="wall-clock bound of the whole run in seconds, opening and closing the sessions "
        "included (default 100)",
    )
    bench.add_argument(
        "--accept-p",
        type=_probability,
        default=0.7,
        help="probability a user presses Tab (default 0.7)",
    )
    bench.add_argument(
        "--think-ms",
        type=_non_negative,
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
        type=_probability,
        default=0.8,
        help="probability a user types its next prompt at once, while the speculation of the "
        "answer's suggestion still runs (what abort latency is measured on; default 0.8)",
    )
    bench.add_argument(
        "--edit-p",
        type=_probability,
        default=0.05,
        help="probability a user edits a file the speculation touched before Tab (default 0.05)",
    )
    bench.add_argument(
        "--ttft-ms",
        type=_non_negative,
        default=40.0,
        help="mock LLM time to first token in ms (default 40)",
    )
    bench.add_argument(
        "--tokens-per-s",
        type=_positive,
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
        type=_positive_int,
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
        type=_shard_count,
        default=0,
        help="host the sessions on N Ray shard processes of a local Ray instance "
        "(needs pip install 'fore-runtime[ray]'); 0: in this process (default 0)",
    )
    bench.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    bench.add_argument(
        "--price",
        type=_price,
        metavar="IN,OUT[,CACHED]",
        help="the mock model's price in USD per million tokens, for the report's costs and "
        "the waste in money (default 3,15,0.3)",
    )
    bench.add_argument("--json", type=_writable, metavar="PATH", help="write the JSON report here")
    bench.add_argument(
        "--plot",
        type=_writable,
        metavar="PATH.png",
        help="one figure: latency CDFs and a timeline of running speculations and governor "
        "skips (needs matplotlib: pip install 'fore-runtime[plot]')",
    )
    bench.add_argument(
        "--html",
        type=_writable,
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
    _log_level_flag(bench, "error")

    run = sub.add_parser(
        "run",
        help="one headless turn",
        description=(
            "Run one turn in WORKSPACE and print its events (JSON lines with --json). "
            "Exit code: 0 completed, 1 error, 3 rejected or aborted, 4 turn budget or a usage "
            "limit spent, "
            "5 paused, 6 answer cut off at the model's output limit, 130 cancelled, "
            "2 usage error."
        ),
    )
    run.add_argument("prompt", help="the prompt (@path references are attached)")
    run.add_argument(
        "--workspace",
        help="the workspace directory (default: the current one; with --session, the stored one)",
    )
    run.add_argument(
        "--session",
        metavar="ID",
        help="continue the stored session ID (its workspace, model and settings unless given)",
    )
    _store_flags(run)
    source = run.add_mutually_exclusive_group()
    source.add_argument("--script", help="a scripted-model JSON file (offline)")
    source.add_argument(
        "--base-url",
        help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
        "(default: FORE_BASE_URL / OPENAI_BASE_URL), or an Anthropic one",
    )
    _provider_flag(run)
    run.add_argument(
        "--model", help="the model name for the endpoint (default: FORE_MODEL / OPENAI_MODEL)"
    )
    _api_key_flags(run)
    run.add_argument(
        "--no-stream",
        action="store_true",
        help="ask the endpoint for whole answers, not streams (servers whose tool calling "
        "works only unstreamed, e.g. llama-cpp-python's chatml-function-calling)",
    )
    run.add_argument("--system", help="a system prompt")
    run.add_argument(
        "--max-turns",
        type=_positive_int,
        help="LLM calls at most (default 50, or the stored session's)",
    )
    run.add_argument(
        "--wrap-up",
        action="store_true",
        help="make the last of --max-turns LLM calls one without tools, so a model that "
        "keeps calling tools still answers (small local models do)",
    )
    run.add_argument(
        "--timeout",
        type=_positive,
        default=600.0,
        help="seconds the turn may take; then it is cancelled (> 0; default 600)",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print events as JSON lines; the last line is the usage (tokens and cost)",
    )
    run.add_argument(
        "--price",
        type=_price,
        metavar="IN,OUT[,CACHED]",
        help="the model's price in USD per million tokens (input, output, cached input), "
        "for the cost in the usage line",
    )
    _log_level_flag(run, "critical")

    chat = sub.add_parser(
        "chat",
        help="the interactive terminal: suggestions, Tab, approvals",
        description=(
            "An interactive session in WORKSPACE (default: the current directory). After each "
            "answer the predicted next prompt appears as grey text while a speculation runs it; "
            "Tab applies its work, typing throws it away. --demo needs no key and no network."
        ),
    )
    chat.add_argument("--workspace", type=Path, help="the workspace directory")
    chat_source = chat.add_mutually_exclusive_group()
    chat_source.add_argument(
        "--demo",
        action="store_true",
        help="a generated demo project and a scripted model (with --workspace: created there)",
    )
    chat_source.add_argument("--script", help="a scripted-model JSON file (offline)")
    chat_source.add_argument(
        "--base-url",
        help="an OpenAI-compatible endpoint (default: FORE_BASE_URL / OPENAI_BASE_URL), "
        "or an Anthropic one",
    )
    _provider_flag(chat)
    chat.add_argument("--model", help="the model name (default: FORE_MODEL / OPENAI_MODEL)")
    _api_key_flags(chat)
    chat.add_argument("--system", help="a system prompt")
    chat.add_argument(
        "--approval",
        choices=("default", "auto-edit", "yolo", "plan"),
        help="the approval mode to start in (default: default; the demo: auto-edit); "
        "Shift-Tab cycles it",
    )
    chat.add_argument("--no-speculation", action="store_true", help="suggestions only")
    chat.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="ID",
        help="continue a stored session: the one named, or pick one of the recent ones",
    )
    _store_flags(chat)
    chat.add_argument(
        "--max-turns",
        type=_positive_int,
        default=50,
        help="LLM calls per turn at most (default 50)",
    )
    chat.add_argument(
        "--price",
        type=_price,
        metavar="IN,OUT[,CACHED]",
        help="the model's price in USD per million tokens, for /cost",
    )
    _log_level_flag(chat, "critical")

    sub.add_parser(
        "mock-llm",
        help="the built-in OpenAI-compatible mock LLM server",
        add_help=False,
        description="See `fore mock-llm --help`.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] == "mock-llm":
        try:
            _needs_extra("mock-llm", "testing", _MOCK_MODULES)
        except UsageError as exc:
            sys.stderr.write(f"{exc}\n")
            return EXIT_USAGE
        from fore.actors.llm.mock_server import main as mock_main

        return mock_main(args_list[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        from fore.actors.core.logs import configure_logging

        try:
            configure_logging(level=args.log_level)
        except ValueError as exc:  # a bad FORE_LOG_LEVEL
            raise UsageError(f"{PROG}: {exc}") from None
        if args.command == "bench":
            return _bench(args)
        if args.command == "run":
            return _run(args)
        if args.command == "chat":
            return _chat(args)
    except UsageError as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_USAGE
    except _Failed as exc:
        sys.stderr.write(f"{exc}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    return EXIT_USAGE


# -- fore bench -----------------------------------------------------------------------------


def _needs_extra(command: str, extra: str, modules: tuple[str, ...]) -> None:
    """A clear usage error when an optional dependency of ``command`` is missing."""
    import importlib.util

    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(
            f"{PROG} {command}: needs the {extra!r} extra ({', '.join(missing)} missing): "
            f"pip install 'fore-runtime[{extra}]'"
        )


_BENCH_MODULES = ("rich", "starlette", "uvicorn")
_MOCK_MODULES = ("starlette", "uvicorn")


def _bench(args: argparse.Namespace) -> int:
    _needs_extra("bench", "bench", _BENCH_MODULES)
    if args.name is not None:
        from fore.bench._common import BenchFailed

        module = importlib.import_module(f"fore.bench.{args.name.replace('-', '_')}")
        try:
            module.run(quick=args.quick)
        except BenchFailed as exc:
            sys.stderr.write(f"{PROG} bench {args.name}: FAILED: {exc}\n")
            return EXIT_FAILED
        except OSError as exc:  # no temp space, too many open files ...
            sys.stderr.write(f"{PROG} bench {args.name}: error: {_one_line(exc)}\n")
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
            sys.stderr.write(f"{PROG} bench: error: {_one_line(exc)}\n")
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
        sys.stderr.write(f"{PROG} bench: error: {_one_line(exc)}\n")
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
        sys.stderr.write(f"{PROG} bench: error: cannot write the report: {_one_line(exc)}\n")
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


def _figure(report: Any, samples: dict[str, list[float]], comparison: Any) -> bytes | None:
    """The report's figure as PNG bytes, or None without matplotlib (``--html`` only)."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return None
    from fore.bench.report_plot import figure_png

    return figure_png(report, samples, comparison)


def _one_line(exc: BaseException) -> str:
    """An exception as one line (an OSError with its file name, without the errno noise)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror}"
    return " ".join(str(exc).split()) or type(exc).__name__


# -- fore run --------------------------------------------------------------------------------


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _run_model(args: argparse.Namespace, command: str = "run") -> Any:
    """The model of ``fore run``/``chat``: a script, or an endpoint from flags or environment."""
    api_key = _api_key(args, command)  # warned about / checked even when a script needs none
    if args.script is not None:
        from fore.actors.llm import ScriptedModel
        from fore.actors.llm.script import ScriptError

        try:
            return ScriptedModel.from_file(args.script)
        except ScriptError as exc:
            raise UsageError(f"{PROG} {command}: {' '.join(str(exc).split())}") from None
    # -- --provider (issue 27) --
    from fore.actors.llm.providers import infer_provider

    configured = args.base_url or _env("FORE_BASE_URL", "OPENAI_BASE_URL")
    if infer_provider(args.provider, configured, os.environ) == "anthropic":
        return _anthropic_model(args, command, api_key)
    # --
    base_url = args.base_url or _env("FORE_BASE_URL", "OPENAI_BASE_URL")
    if not base_url:
        sources = (
            "--demo, --script or --base-url" if command == "chat" else "--script or --base-url"
        )
        raise UsageError(
            f"{PROG} {command}: one of {sources} is required "
            "(or set FORE_BASE_URL / OPENAI_BASE_URL)"
        )
    model_name = args.model or _env("FORE_MODEL", "OPENAI_MODEL")
    if not model_name:
        raise UsageError(
            f"{PROG} {command}: --model is required with --base-url "
            "(or set FORE_MODEL / OPENAI_MODEL)"
        )
    if not base_url.startswith(("http://", "https://")):
        raise UsageError(f"{PROG} {command}: --base-url must start with http:// or https://")
    from fore.actors.llm import OpenAICompatible, RetryPolicy

    try:
        return OpenAICompatible(
            base_url=base_url,
            model=model_name,
            api_key=api_key,
            retry=RetryPolicy(max_retries=1, initial_backoff=0.2),
            stream=False if args.no_stream else None,
        )
    except ValueError as exc:  # e.g. a malformed FORE_EXTRA_HEADERS
        raise UsageError(f"{PROG} {command}: {' '.join(str(exc).split())}") from None


def _anthropic_model(args: argparse.Namespace, command: str, api_key: str | None) -> Any:
    """``--provider anthropic``: the Messages API (defaults: ``AnthropicModel``'s; the key
    from ``--api-key-file`` or else ``ANTHROPIC_API_KEY`` / ``FORE_API_KEY``)."""
    from fore.actors.llm import AnthropicModel, RetryPolicy
    from fore.actors.llm.providers import is_anthropic_url

    base_url = args.base_url or _env("ANTHROPIC_BASE_URL")
    fallback = _env("FORE_BASE_URL", "OPENAI_BASE_URL")
    if base_url is None and fallback is not None and is_anthropic_url(fallback):
        base_url = fallback
    try:
        return AnthropicModel(
            base_url=base_url,
            model=args.model,
            api_key=api_key,
            retry=RetryPolicy(max_retries=1, initial_backoff=0.2),
            stream=False if getattr(args, "no_stream", False) else None,
        )
    except ValueError as exc:
        raise UsageError(f"{PROG} {command}: {' '.join(str(exc).split())}") from None


class _Output:
    """Prints a turn's events as they come; a closed stdout just stops the printing.

    When the reader goes away (``fore run ... | head -1``) the turn still runs to
    its end -- it may be writing files -- but quietly: stdout is pointed at
    ``/dev/null`` so that nothing (not even the interpreter's final flush)
    raises ``BrokenPipeError`` again.
    """

    def __init__(self, out: TextIO, *, as_json: bool) -> None:
        self.out = out
        self.as_json = as_json
        self.closed = False
        self.saw_end = False

    def event(self, event: Any) -> None:
        from fore.messages.session import (
            AlertRaised,
            TextDelta,
            ToolFinished,
            ToolStarted,
            TurnFinished,
        )
        from fore.messages.speculation import SnapshotTaken

        if isinstance(event, SnapshotTaken):
            return  # speculation's own plumbing: the whole request (tools included), every turn
        if isinstance(event, TurnFinished):
            self.saw_end = True
        if self.as_json:
            self.write(event.model_dump_json() + "\n")
        elif isinstance(event, AlertRaised):
            alert = event.alert
            self.write(f"\n[{alert.level.value}] {' '.join(alert.text.split())}\n")
        elif isinstance(event, TextDelta):
            self.write(event.text)
        elif isinstance(event, ToolStarted):
            self.write(f"\n[tool {event.name} ...]\n")
        elif isinstance(event, ToolFinished):
            state = "failed" if event.is_error else "done"
            self.write(f"[tool {event.name} {state} in {event.duration_s * 1000:.0f} ms]\n")
        elif isinstance(event, TurnFinished):
            self.write(f"\n[turn {event.result.status} after {event.result.turns} LLM calls]\n")

    def write(self, text: str) -> None:
        if self.closed:
            return
        try:
            self.out.write(text)
            self.out.flush()
        except BrokenPipeError:
            self.closed = True
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.out.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass


def _run(args: argparse.Namespace) -> int:
    if args.workspace is None and args.session is None:
        args.workspace = "."  # the current directory; --session ID keeps the stored one
    workspace = None if args.workspace is None else Path(args.workspace)
    if workspace is not None and not workspace.is_dir():
        raise UsageError(f"{PROG} run: --workspace {args.workspace}: not a directory")
    store = _store_url(args)
    if args.session is not None and store is None:
        raise UsageError(f"{PROG} run: --session needs a session store (not --no-store)")
    # Continuing a session: its stored endpoint unless flags name a model.
    explicit = args.script is not None or args.base_url is not None or args.provider is not None
    model = _run_model(args) if args.session is None or explicit else None

    out = _Output(sys.stdout, as_json=args.json)
    prices = None if args.price is None else {"*": args.price}
    with _runtime("fore-run", store, "run", prices=prices) as rt:
        if args.session is None:
            session = rt.open_session(
                workspace=workspace,
                model=model,
                system_prompt=args.system,
                max_turns=args.max_turns or 50,
                wrap_up=args.wrap_up,
            )
        else:
            session = _resume(rt, args, model)
        box: dict[str, Any] = {}
        ended = threading.Event()

        def turn() -> None:
            try:
                box["result"] = session.submit(args.prompt, timeout=args.timeout)
            except BaseException as exc:
                box["error"] = exc
            finally:
                ended.set()

        worker = threading.Thread(target=turn, name="fore-run-turn", daemon=True)
        worker.start()
        # Events are printed while the turn runs, not after it.
        while not ended.is_set():
            for event in session.events(timeout=0.05):
                out.event(event)
                if ended.is_set():
                    break
        worker.join()
        for event in session.drain_events():
            out.event(event)
        error = box.get("error")
        if error is not None:
            session.cancel("fore run gave up waiting")
            if _is_timeout(error):
                sys.stderr.write(f"{PROG} run: turn timed out after {args.timeout:g} s\n")
            else:
                sys.stderr.write(f"{PROG} run: error: {_one_line(error)}\n")
            _usage_line(out, session, args.json)
            return EXIT_FAILED
        result = box["result"]
        if store is not None and not args.json:
            out.write(f"[session {session.id}: continue it with --session {session.id}]\n")
        if result.status == "cut_off":
            sys.stderr.write(f"{PROG} run: incomplete answer: {result.error}\n")
        if result.status == "error":
            sys.stderr.write(f"{PROG} run: error: {result.error}\n")
        elif args.json and not out.saw_end:
            out.write(
                json.dumps({"kind": "turn_finished", "result": result.model_dump(mode="json")})
                + "\n"
            )
        _usage_line(out, session, args.json)
        return _RUN_EXIT.get(result.status, EXIT_FAILED)


def _resume(rt: Any, args: argparse.Namespace, model: Any) -> Any:
    """``fore run --session ID``: the stored session, continued (one line if it cannot be)."""
    from fore.actors.store import SessionLeased, SessionNotFound, StoreError
    from fore.supervision.resume import ModelNotRebuildable

    def resume(with_model: Any) -> Any:
        return rt.resume_session(
            args.session,
            with_model,
            workspace=args.workspace,
            system_prompt=args.system,
            max_turns=args.max_turns,
            wrap_up=args.wrap_up or None,
        )

    try:
        try:
            return resume(model)
        except ModelNotRebuildable as exc:
            if model is not None or not _env("FORE_BASE_URL", "OPENAI_BASE_URL"):
                raise UsageError(f"{PROG} run: {_one_line(exc)} (--script or --base-url)") from None
            return resume(_run_model(args))  # the environment names an endpoint
    except SessionNotFound as exc:
        raise UsageError(f"{PROG} run: --session: {_one_line(exc)}") from None
    except (SessionLeased, StoreError) as exc:
        raise _Failed(f"{PROG} run: error: {_one_line(exc)}") from None


def _usage_line(out: _Output, session: Any, as_json: bool) -> None:
    """``--json``'s last line: the session's usage by purpose and its cost (issue 28)."""
    if as_json:
        from fore.actors.telemetry.usage import usage_json

        line = {"kind": "usage", "session_id": session.id, "usage": usage_json(session.usage)}
        out.write(json.dumps(line) + "\n")


# -- fore chat -------------------------------------------------------------------------------


def _chat(args: argparse.Namespace) -> int:
    from fore.messages.gate import ApprovalMode
    from fore.supervision.chat.run import ChatError, ChatOptions, chat

    # Resuming without a model named: the stored session's endpoint is rebuilt.
    explicit = args.script is not None or args.base_url is not None or args.provider is not None
    resuming = args.resume is not None and not explicit
    model = None if args.demo or resuming else _run_model(args, "chat")
    options = ChatOptions(
        workspace=args.workspace,
        model=model,
        model_label=getattr(model, "name", "") if model is not None else "",
        demo=args.demo,
        approval=ApprovalMode(args.approval) if args.approval else None,
        speculation=not args.no_speculation,
        system_prompt=args.system,
        max_turns=args.max_turns,
        store=None if args.demo else _store_url(args),
        resume=args.resume,
        price=args.price,
    )
    if args.resume is not None and options.store is None:
        raise UsageError(f"{PROG} chat: --resume needs a session store (not --no-store)")
    try:
        return chat(options)
    except ChatError as exc:
        raise UsageError(str(exc)) from None


def _is_timeout(error: BaseException) -> bool:
    import pykka

    return isinstance(error, pykka.Timeout | TimeoutError)


if __name__ == "__main__":
    raise SystemExit(main())
