"""The ``fore`` command's flags: value types that range-check as they parse, and the
flag groups several commands share (one builder each, not a copy per command).

A bad value is a :class:`~fore.errors.UsageError` with the range in the
message (:class:`Parser` raises instead of printing and exiting).
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any, NoReturn, TypeAlias

from fore.errors import UsageError


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


Subcommands: TypeAlias = "argparse._SubParsersAction[Parser]"
"""What each command module adds its parser to (``fore COMMAND``)."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def shard_count(text: str) -> int:
    """``--shards``: 0 (in this process) up to 64 Ray shard processes."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be 0 to 64, got {value}")
    return value


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text!r}")
    return value


def positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def price(text: str) -> Any:
    from fore.actors.telemetry.usage import parse_price

    try:
        return parse_price(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def probability(text: str) -> float:
    value = non_negative(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text!r}")
    return value


def writable(path: str) -> Path:
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {path}: permission denied")
    if target.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {path}: it is a directory")
    return target


def log_level_flag(parser: argparse.ArgumentParser, default: str) -> None:
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


def store_flags(parser: argparse.ArgumentParser) -> None:
    """``--store`` / ``--no-store``: where the session is kept (issue 25)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--store",
        metavar="URL",
        help="the session store: sqlite:///path/sessions.db or postgresql://... (default: "
        "FORE_STORE, else sessions.db in the user's data directory)",
    )
    group.add_argument("--no-store", action="store_true", help="keep the session in memory only")


def model_flags(parser: argparse.ArgumentParser, *, demo: str | None = None) -> None:
    """The model a session talks to: ``--script`` or an endpoint (``--base-url``,
    ``--provider``, ``--model`` and where its key comes from); ``demo``: the help of a
    third source, ``--demo`` (``fore chat``'s). ``fore run`` and ``fore chat`` share it."""
    source = parser.add_mutually_exclusive_group()
    if demo is not None:
        source.add_argument("--demo", action="store_true", help=demo)
    source.add_argument("--script", help="a scripted-model JSON file (offline)")
    source.add_argument(
        "--base-url",
        help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 "
        "(default: FORE_BASE_URL / OPENAI_BASE_URL), or an Anthropic one",
    )
    parser.add_argument(
        "--provider",
        choices=("openai", "anthropic"),
        help="the endpoint's API: openai (Chat Completions) or anthropic (Messages); "
        "default: inferred -- anthropic for a base URL on anthropic.com, or with "
        "ANTHROPIC_API_KEY set and no OpenAI configuration; else openai",
    )
    parser.add_argument(
        "--model", help="the model name for the endpoint (default: FORE_MODEL / OPENAI_MODEL)"
    )
    _api_key_flags(parser)


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


def price_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """``--price IN,OUT[,CACHED]``: USD per million tokens; ``help`` says what it prices."""
    parser.add_argument("--price", type=price, metavar="IN,OUT[,CACHED]", help=help)
