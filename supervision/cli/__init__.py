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

One module per command (:mod:`~supervision.cli.bench`,
:mod:`~supervision.cli.run`, :mod:`~supervision.cli.chat`), each with its
flags (``add_parser``) and what it does with them; the flags several commands
share are built once (:mod:`~supervision.cli.flags`), the model and the store
``run`` and ``chat`` open are :mod:`~supervision.cli.sources`, the exit codes
and the one-line errors :mod:`~supervision.cli.exits`. Everything heavy is
imported inside the command that needs it, so ``fore --help`` and a usage
error answer at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from fore.errors import UsageError
from fore.supervision.cli import bench, chat, run
from fore.supervision.cli.exits import EXIT_FAILED, EXIT_USAGE, PROG, _Failed, needs_extra
from fore.supervision.cli.flags import Parser

__all__ = ["build_parser", "main"]

_MOCK_MODULES = ("starlette", "uvicorn")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fore-runtime")
    except PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description=(
            "Fore: a runtime for LLM coding-agent sessions (pooled actors, typed messages)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    bench.add_parser(sub)
    run.add_parser(sub)
    chat.add_parser(sub)
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
            needs_extra("mock-llm", "testing", _MOCK_MODULES)
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
            return bench.bench_command(args)
        if args.command == "run":
            return run.run_command(args)
        if args.command == "chat":
            return chat.chat_command(args)
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
