"""``fore chat``: the interactive terminal (:mod:`supervision.chat`), from its flags.

``--demo`` needs no key and no network; ``--resume`` continues a stored
session (the one named, or one picked from the recent ones).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fore.errors import UsageError
from fore.supervision.cli.exits import PROG
from fore.supervision.cli.flags import (
    Subcommands,
    log_level_flag,
    model_flags,
    positive_int,
    price_flag,
    store_flags,
)
from fore.supervision.cli.sources import model_from_flags, store_url


def add_parser(sub: Subcommands) -> None:
    """``fore chat``'s flags."""
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
    model_flags(
        chat,
        demo="a generated demo project and a scripted model (with --workspace: created there)",
    )
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
    store_flags(chat)
    chat.add_argument(
        "--max-turns",
        type=positive_int,
        default=50,
        help="LLM calls per turn at most (default 50)",
    )
    price_flag(chat, "the model's price in USD per million tokens, for /cost")
    log_level_flag(chat, "critical")


def chat_command(args: argparse.Namespace) -> int:
    from fore.messages.gate import ApprovalMode
    from fore.supervision.chat.run import ChatError, ChatOptions, chat

    # Resuming without a model named: the stored session's endpoint is rebuilt.
    explicit = args.script is not None or args.base_url is not None or args.provider is not None
    resuming = args.resume is not None and not explicit
    model = None if args.demo or resuming else model_from_flags(args, "chat")
    options = ChatOptions(
        workspace=args.workspace,
        model=model,
        model_label=getattr(model, "name", "") if model is not None else "",
        demo=args.demo,
        approval=ApprovalMode(args.approval) if args.approval else None,
        speculation=not args.no_speculation,
        system_prompt=args.system,
        max_turns=args.max_turns,
        store=None if args.demo else store_url(args),
        resume=args.resume,
        price=args.price,
    )
    if args.resume is not None and options.store is None:
        raise UsageError(f"{PROG} chat: --resume needs a session store (not --no-store)")
    try:
        return chat(options)
    except ChatError as exc:
        raise UsageError(str(exc)) from None
