"""``fore chat``'s entry: check the terminal, build the backend, run the app, clean up.

The CLI (:mod:`supervision.cli`) parses the flags and resolves the model; this
module does the rest. What cannot work is said in one line before anything
starts: not a terminal (``fore run`` is the headless command), a terminal
too small to show the prompt, the status line and a tool line.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from fore.actors.worker.approval import ApprovalDecision, ApprovalRequest
from fore.errors import ChatError
from fore.messages.gate import ApprovalMode
from fore.supervision.chat.app import ChatApp
from fore.supervision.chat.backend import BackendConfig, SessionBackend, chat_runtime
from fore.supervision.chat.demo import OPENING, DemoModel, demo_banner, make_workspace
from fore.supervision.chat.picker import pick_session, resumed_banner
from fore.supervision.chat.trace import Trace

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["ChatError"]

MIN_COLUMNS = 40
MIN_ROWS = 8


@dataclass(frozen=True)
class ChatOptions:
    """What ``fore chat`` was asked for (the CLI fills it in)."""

    workspace: Path | None
    model: Any = None
    """The provider; ``None`` with ``demo``."""
    model_label: str = ""
    demo: bool = False
    approval: ApprovalMode | None = None
    speculation: bool = True
    system_prompt: str | None = None
    max_turns: int = 50
    store: str | None = None
    """The session store's URL (``None``: the session lives in memory only)."""
    resume: str | None = None
    """A stored session to continue: its id, or ``""`` to pick one (``None``: a new one)."""
    price: Any = None
    """The model's :class:`~messages.usage.ModelPrice` (``--price``), for ``/cost``."""


def terminal_problem(stdin: TextIO, stdout: TextIO) -> str | None:
    """Why this terminal cannot host the chat, or ``None``."""
    try:
        interactive = stdin.isatty() and stdout.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if not interactive:
        return (
            "fore chat: needs an interactive terminal (stdin and stdout must be a TTY); "
            "for one headless turn use: fore run PROMPT"
        )
    try:
        # The terminal's own size: COLUMNS / LINES in the environment may be stale.
        columns, lines = os.get_terminal_size(stdout.fileno())
    except (OSError, ValueError):
        columns, lines = 0, 0
    if columns < MIN_COLUMNS or lines < MIN_ROWS:
        return (
            f"fore chat: needs a terminal of at least {MIN_COLUMNS}x{MIN_ROWS} "
            f"(this one is {columns}x{lines}): make the window larger"
        )
    return None


def chat(options: ChatOptions) -> int:
    """Run ``fore chat``; returns the exit code. Raises :class:`ChatError` before starting."""
    problem = terminal_problem(sys.stdin, sys.stdout)
    if problem is not None:
        raise ChatError(problem)
    owned: Path | None = None
    if options.demo:
        if options.workspace is None:
            owned = Path(tempfile.mkdtemp(prefix="fore-demo-"))
            workspace = make_workspace(owned)
        else:
            try:
                workspace = make_workspace(options.workspace)
            except (FileExistsError, OSError) as exc:
                raise ChatError(f"fore chat --demo: {exc}") from None
        model: Any = DemoModel().model()
        label = "fore-demo"
        mode = options.approval or ApprovalMode.AUTO_EDIT
        banner = demo_banner(workspace, kept=owned is None)
        opening: str | None = OPENING
    else:
        workspace = options.workspace or Path.cwd()
        if not workspace.is_dir():
            raise ChatError(f"fore chat: --workspace {workspace}: not a directory")
        model = options.model
        label = options.model_label or str(getattr(model, "name", "the stored model"))
        mode = options.approval or ApprovalMode.DEFAULT
        banner = [f"fore chat: {label} on {workspace}. /help lists the keys; Ctrl-D leaves."]
        opening = None
    try:
        return _run(options, workspace, model, label, mode, banner=banner, opening=opening)
    finally:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)


def _run(
    options: ChatOptions,
    workspace: Path,
    model: Any,
    label: str,
    mode: ApprovalMode,
    *,
    banner: list[str],
    opening: str | None,
) -> int:
    apps: list[ChatApp] = []

    def approver(request: ApprovalRequest) -> ApprovalDecision:
        return apps[0].approver(request) if apps else ApprovalDecision.DENY

    trace = Trace.from_env()
    runtime = _chat_runtime(options)
    try:
        resume = options.resume
        if resume == "":  # --resume without an id: pick one of this workspace's
            resume = pick_session(runtime.list_sessions(workspace=workspace))
            if resume is None:
                return 0
        backend = SessionBackend(
            runtime,
            BackendConfig(
                workspace=workspace,
                model=model,
                model_label=label,
                system_prompt=options.system_prompt,
                max_turns=options.max_turns,
                speculation=options.speculation,
                resume=resume,
                mode=mode,
            ),
            approver,
        )
        if resume is not None:
            banner = [*banner, *resumed_banner(resume, backend.session.history)]
        app = ChatApp(backend, banner=banner, opening=opening, trace=trace)
        apps.append(app)
        try:
            return app.run()
        finally:
            backend.close()
    finally:
        trace.close()
        runtime.close(timeout=10.0)
        close = getattr(model, "close", None)
        if callable(close):
            close()


def _chat_runtime(options: ChatOptions) -> Any:
    """The chat's runtime on its store; a store that cannot be opened is one line."""
    from fore.actors.store import StoreError

    try:
        prices = None if options.price is None else {"*": options.price}
        return chat_runtime(store=options.store, prices=prices)
    except StoreError as exc:
        raise ChatError(f"fore chat: the session store: {' '.join(str(exc).split())}") from None
