"""``fore chat``'s state: everything the terminal app knows, in one place.

:class:`ChatState` is the base of the app's layers -- what it draws
(:mod:`~supervision.chat.screen`), how it drives the session
(:mod:`~supervision.chat.driver`) and the person's keys and commands
(:mod:`~supervision.chat.app`) -- which are one object on prompt_toolkit's
loop: the state is set here, once, and every layer reads it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from prompt_toolkit.application import Application
from prompt_toolkit.buffer import Buffer

from fore.actors.worker.approval import ApprovalDecision, ApprovalRequest
from fore.messages.speculation import SpeculationStatus
from fore.supervision.chat.backend import ChatBackend
from fore.supervision.chat.trace import Trace
from fore.supervision.chat.transcript import Totals, Transcript

APPROVAL_WAIT_S = 600.0
MAX_KEPT_LINES = 20_000


@dataclass
class PendingApproval:
    """An approval the runtime asked for, waiting for the person's key."""

    request: ApprovalRequest
    answer: concurrent.futures.Future[ApprovalDecision]


class ChatState:
    """The app's state (see the module docs); :class:`~supervision.chat.app.ChatApp` is the app."""

    buffer: Buffer
    """The prompt line (built by the app, with its key handlers)."""
    app: Application[int]
    """The prompt_toolkit application (built by the app: its layout and key bindings)."""

    def __init__(
        self,
        backend: ChatBackend,
        *,
        banner: Sequence[str] = (),
        opening: str | None = None,
        trace: Trace | None = None,
        approval_wait_s: float = APPROVAL_WAIT_S,
    ) -> None:
        self.backend = backend
        self.banner = list(banner)
        self.opening = opening
        self.trace = trace or Trace(None)
        self.approval_wait_s = approval_wait_s
        self.transcript = Transcript()
        self.totals = Totals()
        self.printed: deque[str] = deque(maxlen=MAX_KEPT_LINES)
        """The lines printed above the app, as plain text (the newest; tests read them)."""
        self.ghost: str | None = None
        self.spec_status: SpeculationStatus | None = None
        self._latest_status: SpeculationStatus | None = None
        """The newest status event, whichever suggestion it is about (it may come first)."""
        self.busy: str | None = None
        """``"turn"``, ``"accept"`` or ``"clear"`` while a blocking call runs, else ``None``."""
        self.busy_since = 0.0
        self.hint = ""
        self.approvals: deque[PendingApproval] = deque()
        self._pending_ghost: str | None = None
        self.queued: str | None = None
        """A prompt sent while a turn ran: it goes when the turn ends."""
        self._ended_runs: set[str] = set()
        self._ended_order: deque[str] = deque()
        self._suggestion_possible = False
        """A turn ended and no key was typed since: a suggestion may still be coming."""
        self._exit_armed = False
        self._awaiting_ghost_removal: int | None = None
        self._awaiting_echo: int | None = None
        self._key_seq = 0
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="fore-chat"
        )
        self._pump: asyncio.Task[None] | None = None
        self._streaming = -1
        """The conversation (backend generation) whose events the pump reads."""
        self._ticker: asyncio.Task[None] | None = None
        self.exit_code = 0
        self._tab_pending = False
