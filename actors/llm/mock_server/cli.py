"""``fore mock-llm``: the mock server as a program of its own, until SIGINT/SIGTERM.

:func:`main` parses the flags (exit code 2 and one line on stderr for a bad one, never a
traceback), binds 127.0.0.1, prints the port line a parent process reads
(:data:`~fore.actors.llm.mock_server.spawned.PORT_LINE_PREFIX`) and serves. It is what
``python -m fore.actors.llm.mock_server`` (``__main__``) and :class:`SpawnedMockLlmServer`
run; kept apart because only a program may configure the process's logging and signals.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any, Final, NoReturn

from fore.actors.core.logs import configure_logging
from fore.actors.llm import evloop
from fore.actors.llm.mock_server.app import MockLlmApp
from fore.actors.llm.mock_server.faults import _install_log_filter
from fore.actors.llm.mock_server.server import _bind_socket, _uvicorn_config, _UvicornServer
from fore.actors.llm.mock_server.settings import FAULT_KINDS, MockSettings
from fore.actors.llm.mock_server.spawned import PORT_LINE_PREFIX
from fore.actors.llm.script import ScriptError, ScriptFile

_ALLOWED_HOSTS: Final = ("127.0.0.1", "localhost")


_PROG: Final = "fore mock-llm"


_LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")


class _UsageError(Exception):
    pass


class _ParserExit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse that reports instead of exiting, so :func:`main` returns a code."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _ParserExit(status)


def _number(kind: type[int] | type[float], low: float, *, strict: bool = False) -> Any:
    name = "an integer" if kind is int else "a number"
    bound = f"> {low:g}" if strict else f">= {low:g}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {name} {bound}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"expected {name} {bound}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}")
    return value


def _build_parser() -> _Parser:
    parser = _Parser(
        prog=_PROG,
        description=(
            "Serve an OpenAI-compatible Chat Completions API on 127.0.0.1 for tests, demos "
            "and benchmarks: a scripted reply file or generated text, with a latency model "
            "and fault injection. Prints one line "
            f"'{PORT_LINE_PREFIX} port=<port> base_url=<url>' on stdout when listening."
        ),
        epilog=(
            "Per-request headers: X-Fore-Session, X-Fore-Purpose, X-Fore-Request-Id, "
            "X-Mock-TTFT-Ms, X-Mock-Tokens-Per-S, X-Mock-Fault "
            f"({', '.join(FAULT_KINDS)}). Control: GET /mock/stats, GET /mock/requests, "
            "POST /mock/faults, POST /mock/reset, POST|DELETE /mock/script."
        ),
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface; only 127.0.0.1 / localhost are allowed (default: %(default)s)",
    )
    parser.add_argument(
        "--port", type=_port, default=0, help="port; 0 picks a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--script", metavar="FILE", help="scripted replies (JSON); without it, generated text"
    )
    parser.add_argument(
        "--ttft-ms",
        type=_number(float, 0),
        default=0.0,
        help="default time to first token in ms (default: %(default)s)",
    )
    parser.add_argument(
        "--tokens-per-s",
        type=_number(float, 0, strict=True),
        default=None,
        help="default streaming rate; unpaced when omitted",
    )
    parser.add_argument(
        "--generated-words",
        type=_number(int, 0),
        default=24,
        help="words per generated reply when no script is given (default: %(default)s)",
    )
    parser.add_argument(
        "--tool-args-chunk-chars",
        type=_number(int, 1),
        default=4,
        help="size of streamed tool-argument fragments (default: %(default)s)",
    )
    parser.add_argument(
        "--stall-s",
        type=_number(float, 0),
        default=30.0,
        help="how long the 'stall' fault stays silent (default: %(default)s)",
    )
    parser.add_argument(
        "--retry-after-s",
        type=_number(float, 0),
        default=1.0,
        help="Retry-After of the '429' fault (default: %(default)s)",
    )
    parser.add_argument(
        "--record-limit",
        type=_number(int, 1),
        default=1000,
        help="requests kept for GET /mock/requests (default: %(default)s)",
    )
    parser.add_argument(
        "--reject-forced-tool-choice",
        action="store_true",
        help="answer 400 to every request whose tool_choice names a function",
    )
    parser.add_argument(
        "--background-tick-ms",
        type=_number(float, 0),
        default=0.0,
        help="write streams of background purposes (not main) once per tick of this many "
        "ms; 0 writes every token at its time (default: %(default)s)",
    )
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="accept what real servers refuse (null content, orphan tool messages, "
        "max_tokens above the model's limit); strict by default",
    )
    parser.add_argument(
        "--max-output-tokens",
        type=_number(int, 1),
        default=16_384,
        help="the model's output limit; a larger max_tokens is a 400 (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level", choices=_LOG_LEVELS, default="warning", help="(default: %(default)s)"
    )
    return parser


def _configure_cli_logging(level: str) -> None:
    """Logs to stderr: stdout carries only the port line a parent process parses."""
    # This is a program of its own (``fore mock-llm``): it may configure the
    # process's logging -- uvicorn's loggers and Fore's, both on stderr.
    numeric = logging.getLevelName(level.upper())
    logging.basicConfig(
        stream=sys.stderr, level=numeric, format="%(levelname)s %(name)s: %(message)s"
    )
    configure_logging(level=level.lower(), stream=sys.stderr)


async def _serve_until_signal(server: _UvicornServer, sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        await server.serve(sockets=[sock])
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    """``fore mock-llm``: run the mock server until SIGINT/SIGTERM.

    Exit codes: 0 after a signal, 2 for a bad flag, host or script (one line
    on stderr, no traceback), 1 when the port cannot be bound.
    """
    parser = _build_parser()

    def fail(message: str, code: int = 2) -> int:
        sys.stderr.write(f"{_PROG}: error: {' '.join(message.split())}\n")
        return code

    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        return fail(str(exc))
    except _ParserExit as exc:
        return exc.status
    if args.host not in _ALLOWED_HOSTS:
        return fail(f"--host {args.host!r} refused: the mock server only listens on 127.0.0.1")
    script: ScriptFile | None = None
    if args.script is not None:
        try:
            script = ScriptFile.from_path(args.script)
        except ScriptError as exc:
            return fail(str(exc))
    try:
        settings = MockSettings(
            ttft_ms=args.ttft_ms,
            tokens_per_s=args.tokens_per_s,
            generated_words=args.generated_words,
            tool_args_chunk_chars=args.tool_args_chunk_chars,
            stall_s=args.stall_s,
            retry_after_s=args.retry_after_s,
            reject_forced_tool_choice=args.reject_forced_tool_choice,
            strict=not args.lenient,
            max_output_tokens=args.max_output_tokens,
            record_limit=args.record_limit,
            background_tick_ms=args.background_tick_ms,
        )
    except ValueError as exc:
        return fail(str(exc))
    _configure_cli_logging(args.log_level)
    _install_log_filter()
    try:
        sock = _bind_socket("127.0.0.1", args.port)
    except OSError as exc:
        return fail(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}", 1)
    port = int(sock.getsockname()[1])
    app = MockLlmApp(script, settings)
    server = _UvicornServer(_uvicorn_config(app, args.log_level), app)
    sys.stdout.write(f"{PORT_LINE_PREFIX} port={port} base_url=http://127.0.0.1:{port}/v1\n")
    sys.stdout.flush()
    try:
        evloop.run(_serve_until_signal(server, sock))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0
