"""Approvals in normal turns: which tool calls ask the person, and how the worker asks.

A session opened with ``open_session(approval=..., approver=...)`` holds every
tool call of its normal turns to an :class:`ApprovalPolicy`, with modes like
Claude Code's:

=============  ==========================================================
``default``    file edits and anything else that changes things ask first
``auto-edit``  file edits run unasked; other changes ask first
``yolo``       everything runs unasked
``plan``       read-only: every change is refused without asking
=============  ==========================================================

**What is a change** is decided by the speculation gate's own classifier
(:func:`~actors.gate.tool_gate.evaluate_tool_call`, with the tree-sitter shell
classifier behind it, in ``default`` mode): a call the gate would let a
speculation run unasked only reads (:attr:`Category.READ`: the read tools, a
provably read-only shell command, a tool that declares itself read-only); a
file tool's write is an :attr:`Category.EDIT`; everything else -- a shell
command not provably read-only, a network, interactive or unknown tool,
``resolve`` -- is a :attr:`Category.CHANGE`. :func:`verdict_for` is the mode
table. One classifier means a person never sees a speculation do what the same
mode would have asked them about.

**Where it runs.** The worker checks each call after its trusted interceptors
and *before* the public ``pre_tool_call`` hooks. Calls that cannot need asking
(``yolo``, the read tools, a tool the person said "always" to) pass inline;
every other call is judged on the hook lane, like a hook -- classifying a
shell command parses it and may read git config, and asking may wait minutes
for a person, so neither may hold a dispatcher thread. That job is an ordinary
:class:`~actors.worker.hooks.HookSpec` run through the worker's hook chain
(the session's :class:`~actors.worker.hookrun.HookGate`, its cap, its start
deadline, cancellation with the run), but its deadline is the approver's
(:attr:`ApprovalPolicy.timeout_s`, armed when the job starts), and whatever
goes wrong -- no approver, no answer in time, an approver that raises, a lane
too busy to start it -- is a **refusal**, never a failed run: the call gets a
"Skipped: ..." result the model reads, as a ``Skip`` hook result would give.

**"Always"** (:attr:`ApprovalDecision.ALWAYS`) lets that tool run unasked for
the rest of the session. It is kept in the live state
(:class:`LiveApproval`), which lives in the session's
:class:`~actors.worker.state.SessionState`, so a restarted worker keeps it.
In ``plan`` mode nothing overrides the refusal. A ``pre_tool_call`` hook that
rewrites the arguments after the person approved has the new arguments judged
again (and, if they need it, asked about again): what runs is always what was
approved.

A speculation is never asked about: its worker has no approval state, and the
speculation gate, in the session's live mode, stops it where a normal turn
would ask; the call then runs -- asking -- after Tab. A file tool the person
said "always" to is redirected into the overlay in ``default`` mode too
(:meth:`LiveApproval.speculation_mode`).
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field

from fore.actors.gate.tool_gate import (
    READ_TOOLS,
    WRITE_TOOLS,
    declared_read_only,
    evaluate_tool_call,
    parse_approval_mode,
)
from fore.actors.worker.hooks import (
    Continue,
    HookError,
    HookEvent,
    HookSpec,
    HookTimeout,
    Skip,
    ToolCallContext,
)
from fore.messages.base import Message
from fore.messages.gate import ApprovalMode, GateAction

DEFAULT_APPROVAL_TIMEOUT_S = 600.0
"""How long a person may take to answer one approval request (then it is a refusal)."""

MAX_SUMMARY = 120
"""The longest one-line summary of a call's arguments in an :class:`ApprovalRequest`."""


class Category(StrEnum):
    """What a tool call does, as far as approval goes."""

    READ = "read"
    """Only reads (read tools, a provably read-only shell command, a declared read-only tool)."""
    EDIT = "edit"
    """Edits workspace files through a file tool (edit, write_file, multi_edit)."""
    CHANGE = "change"
    """Anything else: a shell command not provably read-only, network, unknown tools."""


class Verdict(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    REFUSE = "refuse"


class ApprovalDecision(StrEnum):
    """The person's answer to one :class:`ApprovalRequest`."""

    ALLOW = "allow"
    DENY = "deny"
    ALWAYS = "always"
    """Allow, and never ask about this tool again in this session."""


_PERMISSIVENESS = {
    ApprovalMode.PLAN: 0,
    ApprovalMode.DEFAULT: 1,
    ApprovalMode.AUTO_EDIT: 2,
    ApprovalMode.YOLO: 3,
}


def stricter(new: ApprovalMode, old: ApprovalMode) -> bool:
    """Whether ``new`` lets less run unasked than ``old``."""
    return _PERMISSIVENESS[new] < _PERMISSIVENESS[old]


_EDITS_IN_OVERLAY = frozenset({ApprovalMode.AUTO_EDIT, ApprovalMode.YOLO})
"""The modes in which the speculation gate sends file edits into the overlay."""


def narrows_speculation(new: ApprovalMode, old: ApprovalMode) -> bool:
    """Whether a speculation run under ``old`` may hold work ``new`` would have stopped before.

    The gate treats the modes alike but for file edits (into the overlay in
    ``auto-edit`` / ``yolo``, a boundary otherwise): ``yolo`` → ``auto-edit``
    narrows nothing a speculation can do; ``auto-edit`` → ``default`` does.
    """
    return stricter(new, old) and new not in _EDITS_IN_OVERLAY


class ApprovalPolicy(Message):
    """How a session's normal turns ask before tool calls (``open_session(approval=...)``).

    ``mode``: see the module docs. ``timeout_s``: the approver's deadline for
    one answer (a person may take minutes); no answer by then is a refusal.
    ``always``: tools that run unasked from the start (as if the person had
    answered "always"; ``plan`` still refuses them). ``Session.approval``
    returns the live policy in this form.
    """

    mode: ApprovalMode = ApprovalMode.DEFAULT
    timeout_s: float = Field(default=DEFAULT_APPROVAL_TIMEOUT_S, gt=0, allow_inf_nan=False)
    always: frozenset[str] = frozenset()


class ApprovalRequest(Message):
    """One tool call waiting for the person: what an approver shows them."""

    session_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    """A copy of the call's arguments (changing it changes nothing)."""
    summary: str
    """The call's main argument on one short line (bounded; control characters escaped)."""
    category: Category
    reason: str
    """Why it asks: the classifier's words."""
    mode: ApprovalMode
    timeout_s: float
    """How long the runtime waits for the answer (from when the approver is called)."""


Approver = Callable[[ApprovalRequest], "ApprovalDecision | bool"]
"""Asks the person; blocking (it runs on the hook lane, never on a dispatcher
thread), and should answer within ``request.timeout_s``. ``True`` is
:attr:`ApprovalDecision.ALLOW`, ``False`` :attr:`ApprovalDecision.DENY`."""


def as_policy(value: ApprovalPolicy | ApprovalMode | str) -> ApprovalPolicy:
    """``open_session(approval=...)``'s value as a policy (a mode name is enough)."""
    if isinstance(value, ApprovalPolicy):
        return value
    return ApprovalPolicy(mode=parse_approval_mode(value))


# -- the classifier and the mode table (pure) ------------------------------------------


def classify(
    name: str,
    arguments: Mapping[str, Any],
    cwd: str | os.PathLike[str] | None,
    tool: Any = None,
) -> tuple[Category, str]:
    """The call's category and the classifier's reason (the gate in ``default`` mode)."""
    decision = evaluate_tool_call(name, arguments, ApprovalMode.DEFAULT, cwd=cwd)
    decision = declared_read_only(decision, tool, False)
    if decision.action is GateAction.ALLOW:
        return Category.READ, decision.reason
    if isinstance(name, str) and name in WRITE_TOOLS:
        return Category.EDIT, decision.reason
    return Category.CHANGE, decision.reason


def verdict_for(mode: ApprovalMode, category: Category) -> Verdict:
    """The mode table."""
    if category is Category.READ or mode is ApprovalMode.YOLO:
        return Verdict.ALLOW
    if mode is ApprovalMode.PLAN:
        return Verdict.REFUSE
    if mode is ApprovalMode.AUTO_EDIT and category is Category.EDIT:
        return Verdict.ALLOW
    return Verdict.ASK


def one_line(text: str, limit: int = MAX_SUMMARY) -> str:
    """``text`` on one bounded line: control, separator and bidi characters escaped."""
    text = text[: limit * 4]
    if not text.isprintable():
        text = "".join(_visible(ch) for ch in text)
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: max(0, limit - 1)] + "…"


def _visible(ch: str) -> str:
    if ch.isprintable() or ch == " ":
        return ch
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return " "
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_MAIN_ARGUMENT = ("path", "command", "pattern", "url", "query", "action")


def call_text(name: str, arguments: Any) -> str:
    """What a one-line summary of a call shows, before it is made one line: its main
    argument when it has one (the paths of a ``multi_edit``), else its first few
    arguments, each clipped; ``""`` when the arguments are not a mapping.

    Shared by the approval request's :func:`summarize` and the chat's own, shorter
    summary (``supervision.chat.approval.short_arguments``), which bound and escape
    it each their own way.
    """
    if not isinstance(arguments, Mapping):
        return ""
    if name == "multi_edit":
        edits = arguments.get("edits")
        if isinstance(edits, list):
            return ", ".join(
                sorted(
                    {str(e.get("path")) for e in edits[:100] if isinstance(e, Mapping)} - {"None"}
                )
            )
    for key in _MAIN_ARGUMENT:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return " ".join(f"{key}={value!r}"[:40] for key, value in list(arguments.items())[:4])


def summarize(name: str, arguments: Any, limit: int = MAX_SUMMARY) -> str:
    """A call's arguments as one short line: its main argument when it has one."""
    return one_line(call_text(name, arguments), limit)


# -- the live state ------------------------------------------------------------------------


class LiveApproval:
    """A session's approval mode, its "always" tools and its approver (thread-safe).

    Kept in the session's :class:`~actors.worker.state.SessionState` (so a
    restarted worker keeps the person's "always" answers); read by the worker
    on its dispatcher thread, by approval jobs on the hook lane, by the
    speculation gate and by :class:`~supervision.session.Session`.
    """

    def __init__(
        self,
        policy: ApprovalPolicy,
        approver: Approver | None,
        *,
        workspace: Path | None,
    ) -> None:
        self._lock = threading.Lock()
        self._mode = policy.mode
        self._always: set[str] = set(policy.always)
        self.timeout_s = policy.timeout_s
        self.approver = approver
        self.workspace = workspace
        self.spec = HookSpec(
            event=HookEvent.PRE_TOOL_CALL,
            fn=self.decide,
            name="approval",
            timeout=policy.timeout_s,
        )
        """The approval job as the worker's hook chain runs it (one spec, its deadline)."""

    # -- state -----------------------------------------------------------------------

    @property
    def mode(self) -> ApprovalMode:
        with self._lock:
            return self._mode

    def set_mode(self, mode: ApprovalMode | str) -> ApprovalMode:
        """Switch modes from the next call on; returns the previous mode."""
        new = parse_approval_mode(mode)
        with self._lock:
            old, self._mode = self._mode, new
            return old

    def allow_always(self, tool: str) -> None:
        with self._lock:
            self._always.add(tool)

    @property
    def always(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._always)

    def policy(self) -> ApprovalPolicy:
        """The live state as a (frozen) policy."""
        with self._lock:
            return ApprovalPolicy(
                mode=self._mode, timeout_s=self.timeout_s, always=frozenset(self._always)
            )

    def speculation_mode(self, name: str, mode: ApprovalMode) -> ApprovalMode:
        """The gate's mode for one speculative call: a file tool said "always" to is an edit
        the person pre-approved, so in ``default`` mode it goes to the overlay too."""
        if mode is ApprovalMode.DEFAULT and name in WRITE_TOOLS:
            with self._lock:
                if name in self._always:
                    return ApprovalMode.AUTO_EDIT
        return mode

    # -- deciding ------------------------------------------------------------------------

    def allows_at_once(self, ctx: ToolCallContext) -> bool:
        """Whether the call passes without classifying it (cheap; on the dispatcher)."""
        name = ctx.name
        with self._lock:
            mode = self._mode
            always = name in self._always
        if mode is ApprovalMode.YOLO or name in READ_TOOLS:
            return True
        return always and mode is not ApprovalMode.PLAN

    def decide(self, ctx: ToolCallContext) -> Continue | Skip:
        """The approval job (on the hook lane): classify, then allow, refuse, or ask."""
        category, reason = classify(ctx.name, ctx.arguments, self.workspace, ctx.tool)
        with self._lock:
            mode = self._mode
            always = ctx.name in self._always
        verdict = verdict_for(mode, category)
        if verdict is Verdict.ASK and always:
            verdict = Verdict.ALLOW
        if verdict is Verdict.ALLOW:
            return Continue()
        if verdict is Verdict.REFUSE:
            return Skip(f"approval mode {mode.value} allows no changes ({reason})")
        approver = self.approver
        if approver is None:
            return Skip(
                f"{ctx.name} needs the user's approval in approval mode {mode.value}, "
                "and this session has no approver to ask"
            )
        request = ApprovalRequest.model_construct(
            session_id=ctx.session_id,
            call_id=ctx.call_id,
            tool=ctx.name,
            arguments=copy.deepcopy(ctx.arguments),
            summary=summarize(ctx.name, ctx.arguments),
            category=category,
            reason=reason,
            mode=mode,
            timeout_s=self.timeout_s,
        )
        answer = approver(request)
        if answer is ApprovalDecision.ALWAYS:
            self.allow_always(ctx.name)
            return Continue()
        if answer is True or answer is ApprovalDecision.ALLOW:
            return Continue()
        if answer is False or answer is ApprovalDecision.DENY:
            return Skip(f"the user refused {ctx.name} {request.summary}".rstrip())
        raise TypeError(
            f"the approver answered {answer!r}; it must answer an ApprovalDecision or a bool"
        )


def refusal(error: HookError, timeout_s: float) -> str:
    """Why a call is refused when its approval job failed (see the module docs)."""
    if isinstance(error, HookTimeout):
        if "did not start" in error.message:
            return "its approval could not start: the hook lane is busy"
        return f"no answer to the approval request within {timeout_s:g} s"
    return f"the approver failed ({error.message})"


__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT_S",
    "ApprovalDecision",
    "ApprovalPolicy",
    "ApprovalRequest",
    "Approver",
    "Category",
    "LiveApproval",
    "Verdict",
    "as_policy",
    "call_text",
    "classify",
    "narrows_speculation",
    "refusal",
    "stricter",
    "summarize",
    "verdict_for",
]
