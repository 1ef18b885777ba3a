"""Approvals in normal turns: which tool calls ask the person, and the hook that asks.

Today a session's :class:`~messages.gate.ApprovalMode` applies only to
speculation; a normal turn runs every call unasked. ``fore chat`` adds the
policy on the session's public extension point, a ``pre_tool_call`` hook
(:mod:`actors.worker.hooks`), which runs on the hook lane -- a thread that may
wait on a person -- before every call, in normal turns *and* in speculations:

* :class:`ApprovalPolicy` decides, with the speculation gate's own classifier
  (:func:`~actors.gate.tool_gate.evaluate_tool_call`, the tree-sitter shell
  classifier behind it): a call that only reads runs; a file edit runs in
  ``auto-edit`` and ``yolo``; anything else that writes (a shell command not
  provably read-only, a network or unknown tool, ``resolve``) runs in ``yolo``
  only. ``default`` asks for edits and for those; ``auto-edit`` asks for those
  only; ``plan`` refuses every change without asking. "Always" for a tool
  (the person's third answer) lets that tool run unasked for the rest of the
  session.
* :func:`approval_hook` turns a verdict into the hook's answer. In a normal
  turn it asks the :data:`Approver` (``fore chat`` shows y / n / always inline)
  and waits for it; a refusal is ``Skip`` (the model sees a "Skipped" result
  and goes on). In a speculation nobody is asked: a call that would ask (or is
  refused) answers ``Skip``, which the speculator treats as a boundary -- it
  stops there and the call runs for real, asking, after Tab.

The mode is live (Shift-Tab, ``/approval``): the policy is read on every call,
so a speculation opened in the permissive gate mode (``auto-edit``) is held to
whatever the person has chosen since.

What the worker should provide instead (issue 24, point 2): ``open_session(
approval=..., approver=...)`` running this same policy inside the worker, so
that every front end gets it without installing a hook; :func:`approval_hook`
is then the adapter to drop.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fore.actors.gate.tool_gate import WRITE_TOOLS, evaluate_tool_call
from fore.actors.worker.hooks import Continue, Skip, ToolCallContext
from fore.messages.gate import ApprovalMode, GateAction
from fore.supervision.chat.text import MAX_SUMMARY, one_line

MODE_CYCLE: tuple[ApprovalMode, ...] = (
    ApprovalMode.DEFAULT,
    ApprovalMode.AUTO_EDIT,
    ApprovalMode.YOLO,
    ApprovalMode.PLAN,
)
"""Shift-Tab's order (Claude Code's)."""

_PERMISSIVENESS = {
    ApprovalMode.PLAN: 0,
    ApprovalMode.DEFAULT: 1,
    ApprovalMode.AUTO_EDIT: 2,
    ApprovalMode.YOLO: 3,
}

MODE_HELP: dict[ApprovalMode, str] = {
    ApprovalMode.DEFAULT: "file edits and commands that change things ask first",
    ApprovalMode.AUTO_EDIT: "file edits run unasked; other changes ask first",
    ApprovalMode.YOLO: "everything runs unasked",
    ApprovalMode.PLAN: "read-only: every change is refused",
}


def next_mode(mode: ApprovalMode) -> ApprovalMode:
    """The mode after ``mode`` in Shift-Tab's cycle."""
    return MODE_CYCLE[(MODE_CYCLE.index(mode) + 1) % len(MODE_CYCLE)]


def stricter(new: ApprovalMode, old: ApprovalMode) -> bool:
    """Whether ``new`` lets less run unasked than ``old``."""
    return _PERMISSIVENESS[new] < _PERMISSIVENESS[old]


class Category(StrEnum):
    """What a tool call does, as far as approval goes."""

    READ = "read"
    """Only reads (read tools, a provably read-only shell command)."""
    EDIT = "edit"
    """Edits workspace files through a file tool (edit, write_file, multi_edit)."""
    CHANGE = "change"
    """Anything else: a shell command not provably read-only, network, unknown tools."""


class Verdict(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    REFUSE = "refuse"


class Decision(StrEnum):
    """The person's answer to one approval request."""

    ALLOW = "allow"
    DENY = "deny"
    ALWAYS = "always"
    """Allow, and never ask for this tool again in this session."""


@dataclass(frozen=True)
class ApprovalRequest:
    """One call waiting for the person: what to show them."""

    tool: str
    summary: str
    """The call's arguments in one short line (bounded, control characters escaped)."""
    category: Category
    reason: str
    """Why it asks (the classifier's words)."""
    mode: ApprovalMode
    arguments: Mapping[str, Any]


Approver = Callable[[ApprovalRequest], Decision]
"""Asks the person; blocking (it runs on the hook lane), must answer within its own deadline."""


def classify(
    name: str, arguments: Mapping[str, Any], cwd: str | os.PathLike[str] | None
) -> tuple[Category, str]:
    """The call's category and the classifier's reason (the gate in ``default`` mode)."""
    decision = evaluate_tool_call(name, arguments, ApprovalMode.DEFAULT, cwd=cwd)
    if decision.action is GateAction.ALLOW:
        return Category.READ, decision.reason
    if isinstance(name, str) and name in WRITE_TOOLS:
        return Category.EDIT, decision.reason
    return Category.CHANGE, decision.reason


def verdict_for(mode: ApprovalMode, category: Category) -> Verdict:
    """The mode table (pure)."""
    if category is Category.READ or mode is ApprovalMode.YOLO:
        return Verdict.ALLOW
    if mode is ApprovalMode.PLAN:
        return Verdict.REFUSE
    if mode is ApprovalMode.AUTO_EDIT and category is Category.EDIT:
        return Verdict.ALLOW
    return Verdict.ASK


_MAIN_ARGUMENT = ("path", "command", "pattern", "url", "query", "action")


def short_arguments(name: str, arguments: Any, limit: int = MAX_SUMMARY) -> str:
    """A call's arguments as one short line: its main argument when it has one."""
    if not isinstance(arguments, Mapping):
        return ""
    if name == "multi_edit":
        edits = arguments.get("edits")
        if isinstance(edits, list):
            paths = sorted(
                {str(e.get("path")) for e in edits[:100] if isinstance(e, Mapping)} - {"None"}
            )
            return one_line(", ".join(paths), limit)
    for key in _MAIN_ARGUMENT:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return one_line(value, limit)
    parts = []
    for key, value in list(arguments.items())[:4]:
        parts.append(f"{key}={value!r}"[:40])
    return one_line(" ".join(parts), limit)


class ApprovalPolicy:
    """The live approval mode and the tools the person said "always" to (thread-safe)."""

    def __init__(
        self, mode: ApprovalMode = ApprovalMode.DEFAULT, *, cwd: str | os.PathLike[str] | None
    ) -> None:
        self._lock = threading.Lock()
        self._mode = mode
        self._always: set[str] = set()
        self.cwd = cwd

    @property
    def mode(self) -> ApprovalMode:
        with self._lock:
            return self._mode

    def set_mode(self, mode: ApprovalMode) -> ApprovalMode:
        """Switch modes; returns the previous one."""
        with self._lock:
            old, self._mode = self._mode, mode
            return old

    def always(self, tool: str) -> None:
        with self._lock:
            self._always.add(tool)

    @property
    def always_allowed(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._always)

    def check(self, name: str, arguments: Mapping[str, Any]) -> tuple[Verdict, ApprovalRequest]:
        """The verdict on one call, and the request to show if it asks."""
        category, reason = classify(name, arguments, self.cwd)
        with self._lock:
            mode = self._mode
            always = name in self._always
        verdict = verdict_for(mode, category)
        if verdict is Verdict.ASK and always:
            verdict = Verdict.ALLOW
        request = ApprovalRequest(
            tool=name if isinstance(name, str) else repr(name),
            summary=short_arguments(name, arguments),
            category=category,
            reason=reason,
            mode=mode,
            arguments=arguments,
        )
        return verdict, request


SPECULATION_PURPOSES = frozenset({"speculation"})


def approval_hook(
    policy: ApprovalPolicy, approver: Approver
) -> Callable[[ToolCallContext], Continue | Skip]:
    """The ``pre_tool_call`` hook that enforces ``policy``, asking through ``approver``."""

    def approve(ctx: ToolCallContext) -> Continue | Skip:
        verdict, request = policy.check(ctx.name, ctx.arguments)
        if verdict is Verdict.ALLOW:
            return Continue()
        mode = request.mode.value
        if verdict is Verdict.REFUSE:
            return Skip(f"approval mode {mode} allows no changes ({request.reason})")
        if ctx.purpose in SPECULATION_PURPOSES:
            # Nobody is asked for a prediction: the speculation stops here and
            # the call runs -- asking -- if the person presses Tab.
            return Skip(f"{ctx.name} needs the user's approval in approval mode {mode}")
        decision = approver(request)
        if decision is Decision.ALWAYS:
            policy.always(request.tool)
            return Continue()
        if decision is Decision.ALLOW:
            return Continue()
        return Skip(f"the user refused {ctx.name} {request.summary}".rstrip())

    approve.__name__ = "fore_chat_approval"
    return approve
