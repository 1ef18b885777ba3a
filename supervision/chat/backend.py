"""The chat's port to the runtime: everything ``fore chat`` asks of a session, in one place.

The terminal UI (:mod:`supervision.chat.app`) never touches a
:class:`~supervision.session.Session` directly; it talks to a
:class:`ChatBackend`. :class:`SessionBackend` implements that port over the
public session API -- the same API any other front end (a web UI, an editor)
builds on (issue 24, point 4):

=============================  =================================================
the port                       the public ``Session`` API
=============================  =================================================
``asubmit`` / ``aaccept``      ``await Session.asubmit`` / ``Session.aaccept``:
                               the UI's event loop never waits on the runtime
``stream``                     ``async for event in Session.stream()`` -- no
                               thread, no polling; the speculation's state comes
                               as ``SpeculationStatusChanged`` events
``dismiss``                    ``Session.keystroke("")``: a keystroke that is
                               not a prefix of the suggestion aborts it (any
                               key the person types aborts; see :meth:`dismiss`)
``cancel``                     ``Session.cancel``: the running turn, or a Tab
                               still waiting for its speculation (called off,
                               nothing applied)
``mode`` / ``set_mode``        ``open_session(approval=..., approver=...)``,
                               ``Session.set_approval_mode`` (normal turns and
                               the speculation gate)
``set_model``                  ``Session.set_model`` (between turns)
=============================  =================================================

``dismiss``, ``cancel`` and ``set_mode`` never wait (tells), so the UI calls
them from a key binding; ``set_model`` and ``reset`` wait (with deadlines) and
the UI runs them on an executor.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fore.actors.llm.models import OpenAICompatible
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.worker.approval import ApprovalPolicy, Approver
from fore.errors import ModelSwitchError
from fore.messages.gate import ApprovalMode
from fore.messages.session import TurnResult
from fore.messages.speculation import AcceptResult, SpeculationConfig
from fore.messages.usage import UsageSummary
from fore.supervision.runtime import Runtime
from fore.supervision.session import Session


class ChatBackend(Protocol):
    """What the chat UI needs from a session (see the module docs for the mapping)."""

    model_label: str
    workspace: Path

    async def asubmit(self, text: str, *, timeout: float) -> TurnResult: ...
    async def aaccept(self, *, timeout: float) -> AcceptResult: ...
    def stream(self) -> AsyncIterator[Any]: ...
    def dismiss(self) -> None: ...
    def cancel(self) -> None: ...
    def set_mode(self, mode: ApprovalMode) -> None: ...
    def set_model(self, name: str) -> str: ...
    def reset(self) -> None: ...
    def close(self) -> None: ...

    @property
    def mode(self) -> ApprovalMode: ...

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
    mode: ApprovalMode = ApprovalMode.DEFAULT
    approval_wait_s: float = 600.0
    """How long an approval prompt waits for the person before it counts as "no"."""
    resume: str | None = None
    """A stored session to continue instead of opening a new one (``fore chat --resume``)."""


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


def switched(model: Any, name: str) -> Any:
    """``model`` talking to the model ``name`` on the same endpoint.

    Raises :class:`ModelSwitchError` for a scripted model (nothing to switch to).
    """
    if not isinstance(model, OpenAICompatible):
        raise ModelSwitchError(
            f"this session's model ({getattr(model, 'name', 'model')}) is scripted: "
            "it has no other models to switch to"
        )
    clone = copy.copy(model)  # same endpoint, key, headers, timeouts and limits
    clone.name = name
    return clone


class SessionBackend:
    """:class:`ChatBackend` over ``Runtime.open_session`` / ``Session``."""

    def __init__(self, runtime: Runtime, config: BackendConfig, approver: Approver) -> None:
        self.runtime = runtime
        self.config = config
        self.approver = approver
        self.workspace = config.workspace
        self.model = config.model
        self.model_label = config.model_label or str(getattr(config.model, "name", "model"))
        self._lock = threading.Lock()
        self._generation = 0
        self._mode = config.mode
        self._session: Session = self._open(resume=config.resume)

    def _open(self, always: frozenset[str] = frozenset(), resume: str | None = None) -> Session:
        policy = ApprovalPolicy(
            mode=self._mode, timeout_s=self.config.approval_wait_s, always=always
        )
        speculation = SpeculationConfig(enabled=self.config.speculation)
        if resume is not None:  # the stored session goes on, in this workspace
            return self.runtime.resume_session(
                resume,
                self.model,
                workspace=self.config.workspace,
                system_prompt=self.config.system_prompt,
                max_turns=self.config.max_turns,
                speculation=speculation,
                approval=policy,
                approver=self.approver,
            )
        return self.runtime.open_session(
            workspace=self.config.workspace,
            model=self.model,
            system_prompt=self.config.system_prompt,
            max_turns=self.config.max_turns,
            speculation=speculation,
            # The mode gates normal turns and the speculation alike.
            approval=policy,
            approver=self.approver,
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

    async def asubmit(self, text: str, *, timeout: float) -> TurnResult:
        return await self.session.asubmit(text, timeout=timeout)

    async def aaccept(self, *, timeout: float) -> AcceptResult:
        return await self.session.aaccept(timeout=timeout)

    def stream(self) -> AsyncIterator[Any]:
        """The current session's events (ends when :meth:`reset` or :meth:`close` closes it)."""
        return self.session.stream()

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
        """Ctrl-C: the running turn, or a Tab waiting for its speculation (never waits)."""
        try:
            self.session.cancel("cancelled by the user (Ctrl-C)")
        except Exception:
            pass

    @property
    def mode(self) -> ApprovalMode:
        with self._lock:
            return self._mode

    def set_mode(self, mode: ApprovalMode) -> None:
        """Shift-Tab, ``/approval``: the session's approval mode (never waits)."""
        with self._lock:
            self._mode = mode
            session = self._session
        try:
            session.set_approval_mode(mode)
        except Exception:  # the session is closing: the next one opens in this mode
            pass

    def set_model(self, name: str) -> str:
        """``/model NAME``: the same endpoint, another model, from the next turn on.

        Returns the new label; :class:`ModelSwitchError` says why it cannot
        (a scripted model), ``WorkerBusy`` that a turn is running.
        """
        model = switched(self.model, name)
        self.session.set_model(model)
        self.model = model
        self.model_label = name
        return name

    def reset(self) -> None:
        """A new conversation: close this session and open a fresh one (``/clear``).

        The person's "always" answers carry over: they are about tools, not
        about the conversation.
        """
        approval = self.session.approval
        fresh = self._open(approval.always if approval is not None else frozenset())
        with self._lock:
            old, self._session = self._session, fresh
            self._generation += 1
        old.close()

    def close(self) -> None:
        self.session.close()

    def usage(self) -> UsageSummary:
        """The session's model usage and cost by purpose (``/cost``; issue 28)."""
        return self.session.usage
