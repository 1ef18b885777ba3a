"""The chat's port to the runtime: everything ``fore chat`` asks of a session, in one place.

The terminal UI (:mod:`supervision.chat.app`) never touches a
:class:`~supervision.session.Session` directly; it talks to a
:class:`ChatBackend`. :class:`SessionBackend` implements that port over
today's public session API, and it is the *only* module that will change when
the session grows the API the issue asks for (issue 24, point 4):

=============================  =================================================
the port                       today (public ``Session`` API)
=============================  =================================================
``submit`` / ``accept``        ``Session.submit`` / ``Session.accept`` (blocking;
                               the UI runs them on an executor thread, with
                               deadlines) -- later ``asubmit`` / ``aaccept``
``events``                     ``Session.events(timeout)`` on a background
                               thread -- later ``async for ev in session.stream()``
``speculation``                ``Session.speculation`` + ``Session.suggestion``,
                               polled while a suggestion is shown: no event says
                               "speculation completed" -- later a status event
``dismiss``                    ``Session.keystroke("")``: a keystroke that is
                               not a prefix of the suggestion aborts it (any
                               key the person types aborts; see :meth:`dismiss`)
approvals                      a ``pre_tool_call`` hook (:mod:`.approval`) -- later
                               ``open_session(approval=..., approver=...)``
``model`` switching            not possible: the worker's model is fixed when the
                               session opens (``/model`` says so)
=============================  =================================================

Every method that waits has a deadline; :meth:`dismiss` and :meth:`cancel`
never wait (a tell on the control lane), so the UI may call them from a key
binding.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fore.actors.speculation.governor import LoadGovernor
from fore.actors.worker.hooks import Hooks
from fore.messages.gate import ApprovalMode
from fore.messages.session import TurnResult
from fore.messages.speculation import AcceptResult, SpeculationConfig, SpeculationStatus
from fore.supervision.chat.approval import ApprovalPolicy, Approver, approval_hook
from fore.supervision.runtime import Runtime
from fore.supervision.session import Session


class ChatBackend(Protocol):
    """What the chat UI needs from a session (see the module docs for the mapping)."""

    model_label: str
    workspace: Path

    def submit(self, text: str, *, timeout: float) -> TurnResult: ...
    def accept(self, *, timeout: float) -> AcceptResult: ...
    def dismiss(self) -> None: ...
    def cancel(self) -> None: ...
    def events(self, timeout: float) -> tuple[int, Iterator[Any]]: ...
    def speculation(self) -> tuple[SpeculationStatus, str | None]: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...

    @property
    def generation(self) -> int: ...


@dataclass(frozen=True)
class BackendConfig:
    """How to open the chat's session."""

    workspace: Path
    model: Any
    """A ScriptedModel, FunctionModel or OpenAICompatible (as ``Runtime.open_session``)."""
    model_label: str = ""
    system_prompt: str | None = None
    max_turns: int = 50
    speculation: bool = True
    approval_wait_s: float = 600.0
    """How long an approval prompt waits for the person before it counts as "no"."""
    resume: str | None = None
    """A stored session to continue instead of opening a new one (``fore chat --resume``)."""


APPROVAL_HOOK_MARGIN_S = 30.0
"""The hook's own deadline is the approver's wait plus this (the approver answers first)."""


def chat_runtime(*, name: str = "fore-chat", **options: Any) -> Runtime:
    """The runtime ``fore chat`` runs on.

    The load governor is off: it keeps speculation from taking time from other
    sessions' turns, and a terminal has one session, whose person is reading
    while its speculation runs -- skipping it would only hide the feature. The
    process is the terminal's own, so it takes the runtime's GC and GIL
    settings (``tune_process``), which keep Tab and typing inside their budgets.
    """
    options.setdefault("tune_process", True)
    return Runtime(name=name, speculation_governor=LoadGovernor(enabled=False), **options)


class SessionBackend:
    """:class:`ChatBackend` over today's ``Runtime.open_session`` / ``Session``."""

    def __init__(
        self,
        runtime: Runtime,
        config: BackendConfig,
        policy: ApprovalPolicy,
        approver: Approver,
    ) -> None:
        self.runtime = runtime
        self.config = config
        self.policy = policy
        self.approver = approver
        self.workspace = config.workspace
        self.model_label = config.model_label or str(getattr(config.model, "name", "model"))
        self._lock = threading.Lock()
        self._generation = 0
        self._session: Session = self._open(resume=config.resume)

    def _open(self, resume: str | None = None) -> Session:
        hooks = Hooks()
        hooks.pre_tool_call(
            approval_hook(self.policy, self.approver),
            timeout=self.config.approval_wait_s + APPROVAL_HOOK_MARGIN_S,
        )
        speculation = SpeculationConfig(
            enabled=self.config.speculation,
            # The gate lets edits into the overlay; the approval hook then holds
            # every call to the person's live mode (Shift-Tab), which it reads
            # per call -- see supervision.chat.approval.
            approval_mode=ApprovalMode.AUTO_EDIT,
        )
        if resume is not None:  # the stored session goes on, in this workspace
            return self.runtime.resume_session(
                resume,
                self.config.model,
                workspace=self.config.workspace,
                system_prompt=self.config.system_prompt,
                max_turns=self.config.max_turns,
                hooks=hooks,
                speculation=speculation,
            )
        return self.runtime.open_session(
            workspace=self.config.workspace,
            model=self.config.model,
            system_prompt=self.config.system_prompt,
            max_turns=self.config.max_turns,
            hooks=hooks,
            speculation=speculation,
        )

    @property
    def session(self) -> Session:
        with self._lock:
            return self._session

    @property
    def generation(self) -> int:
        """Changes when :meth:`reset` opens a new session (older events are stale)."""
        with self._lock:
            return self._generation

    # -- the port ----------------------------------------------------------------------------

    def submit(self, text: str, *, timeout: float) -> TurnResult:
        return self.session.submit(text, timeout=timeout)

    def accept(self, *, timeout: float) -> AcceptResult:
        return self.session.accept(timeout=timeout)

    def dismiss(self) -> None:
        """The person typed: abort the speculation now (a tell; never waits).

        ``Session.keystroke(text)`` keeps a speculation whose suggestion starts
        with ``text``; the chat's rule is simpler -- any key but Tab throws the
        suggestion away, as the ghost text disappears -- so it sends the empty
        keystroke, which never matches.
        """
        try:
            self.session.keystroke("")
        except Exception:  # the session is closing: nothing left to abort
            pass

    def cancel(self) -> None:
        try:
            self.session.cancel("cancelled by the user (Ctrl-C)")
        except Exception:
            pass

    def events(self, timeout: float) -> tuple[int, Iterator[Any]]:
        """The current session's generation and its events (ends after ``timeout`` idle)."""
        with self._lock:
            session, generation = self._session, self._generation
        return generation, session.events(timeout=timeout)

    def speculation(self) -> tuple[SpeculationStatus, str | None]:
        session = self.session
        return session.speculation, session.suggestion

    def reset(self) -> None:
        """A new conversation: close this session and open a fresh one (``/clear``)."""
        fresh = self._open()
        with self._lock:
            old, self._session = self._session, fresh
            self._generation += 1
        old.close()

    def close(self) -> None:
        self.session.close()
