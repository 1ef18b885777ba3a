"""``fore run``: one headless turn, its events printed as they come (``--json``: JSON lines).

``--session ID`` continues a stored session. The exit code says how the turn
ended (:data:`_RUN_EXIT`; the parser's description lists them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from fore.errors import UsageError
from fore.supervision.cli.exits import EXIT_FAILED, PROG, _Failed, one_line
from fore.supervision.cli.flags import (
    Subcommands,
    log_level_flag,
    model_flags,
    positive,
    positive_int,
    price_flag,
    store_flags,
)
from fore.supervision.cli.sources import first_env, model_from_flags, open_runtime, store_url

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


def add_parser(sub: Subcommands) -> None:
    """``fore run``'s flags."""
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
    store_flags(run)
    model_flags(run)
    run.add_argument(
        "--no-stream",
        action="store_true",
        help="ask the endpoint for whole answers, not streams (servers whose tool calling "
        "works only unstreamed, e.g. llama-cpp-python's chatml-function-calling)",
    )
    run.add_argument("--system", help="a system prompt")
    run.add_argument(
        "--max-turns",
        type=positive_int,
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
        type=positive,
        default=600.0,
        help="seconds the turn may take; then it is cancelled (> 0; default 600)",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="print events as JSON lines; the last line is the usage (tokens and cost)",
    )
    price_flag(
        run,
        "the model's price in USD per million tokens (input, output, cached input), "
        "for the cost in the usage line",
    )
    log_level_flag(run, "critical")


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


def run_command(args: argparse.Namespace) -> int:
    if args.workspace is None and args.session is None:
        args.workspace = "."  # the current directory; --session ID keeps the stored one
    workspace = None if args.workspace is None else Path(args.workspace)
    if workspace is not None and not workspace.is_dir():
        raise UsageError(f"{PROG} run: --workspace {args.workspace}: not a directory")
    store = store_url(args)
    if args.session is not None and store is None:
        raise UsageError(f"{PROG} run: --session needs a session store (not --no-store)")
    # Continuing a session: its stored endpoint unless flags name a model.
    explicit = args.script is not None or args.base_url is not None or args.provider is not None
    model = model_from_flags(args) if args.session is None or explicit else None

    out = _Output(sys.stdout, as_json=args.json)
    prices = None if args.price is None else {"*": args.price}
    with open_runtime("fore-run", store, "run", prices=prices) as rt:
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
                sys.stderr.write(f"{PROG} run: error: {one_line(error)}\n")
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
            if model is not None or not first_env("FORE_BASE_URL", "OPENAI_BASE_URL"):
                raise UsageError(f"{PROG} run: {one_line(exc)} (--script or --base-url)") from None
            return resume(model_from_flags(args))  # the environment names an endpoint
    except SessionNotFound as exc:
        raise UsageError(f"{PROG} run: --session: {one_line(exc)}") from None
    except (SessionLeased, StoreError) as exc:
        raise _Failed(f"{PROG} run: error: {one_line(exc)}") from None


def _usage_line(out: _Output, session: Any, as_json: bool) -> None:
    """``--json``'s last line: the session's usage by purpose and its cost (issue 28)."""
    if as_json:
        from fore.actors.telemetry.usage import usage_json

        line = {"kind": "usage", "session_id": session.id, "usage": usage_json(session.usage)}
        out.write(json.dumps(line) + "\n")


def _is_timeout(error: BaseException) -> bool:
    import pykka

    return isinstance(error, pykka.Timeout | TimeoutError)
