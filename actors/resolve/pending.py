"""Pending actions: staged previews waiting for the model's ``resolve`` decision.

A producer (a preview-mode tool, or a custom tool through
``ctx.push_pending_action``) calls :meth:`PendingActions.queue_resolve_handler`.
That stages the action and pushes a one-shot directive on the session's
tool-choice queue: the next LLM request forces the ``resolve`` tool and carries
a reminder. The newest preview is served first.

The store is per session and thread-safe: tools push from tool-pool threads,
the worker's interceptor reads it on the worker's thread, and ``resolve`` takes
from it on a tool-pool thread. It never leaves its session -- each session's
tools get their own store through their tool context.
"""

from __future__ import annotations

import inspect
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_REQUEUES = 3
"""How often a directive is requeued after the model answered a forced turn without ``resolve``."""

MAX_FORCED_ATTEMPTS = MAX_REQUEUES + 1
"""Forced turns per action before forcing stops: the original one plus :data:`MAX_REQUEUES`.

After that the action stays pending (still offered, still reminded), and
the user gets one Warn alert.
"""

Callback = Callable[..., Any]


@dataclass(eq=False)
class PendingAction:
    """One staged action with its apply/reject callbacks."""

    id: str
    label: str
    source_tool_name: str
    apply: Callback
    reject: Callback | None = None
    details: Any = None
    created: float = field(default_factory=time.time)
    ignored: int = 0
    """How often a forced turn for this action was answered without ``resolve``."""
    forcing: bool = True


@dataclass(eq=False)
class StandingHandler:
    """A long-lived resolve handler (e.g. approving a plan); never consumed."""

    label: str
    apply: Callback
    reject: Callback | None = None
    source_tool_name: str = "standing"
    details: Any = None


def call_with_reason(fn: Callback, reason: str, extra: Mapping[str, Any] | None) -> Any:
    """Call ``fn(reason, extra)``, or ``fn(reason)`` for callbacks that take one argument."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn(reason, extra)
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    if varargs or len(positional) >= 2:
        return fn(reason, extra)
    return fn(reason)


class PendingActions:
    """One session's pending actions, directive queue and standing handler."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._actions: list[PendingAction] = []  # oldest first; served newest first
        self._directives: list[str] = []  # action ids; the last is served next
        self._standing: StandingHandler | None = None
        self.forcing_supported = True
        """False once the provider rejected a forced tool choice for this session."""

    # -- producers -----------------------------------------------------------------

    def queue_resolve_handler(
        self,
        *,
        label: str,
        source_tool_name: str,
        apply: Callback,
        reject: Callback | None = None,
        details: Any = None,
    ) -> str:
        """Stage an action; the next LLM request forces ``resolve``. Returns its id."""
        if not label.strip():
            raise ValueError("a pending action needs a label")
        action = PendingAction(
            id=f"pa-{uuid.uuid4().hex[:12]}",
            label=label,
            source_tool_name=source_tool_name or "custom_tool",
            apply=apply,
            reject=reject,
            details=details,
        )
        with self._lock:
            self._actions.append(action)
            self._directives.append(action.id)
        return action.id

    def push(
        self,
        *,
        label: str,
        apply: Callback,
        reject: Callback | None = None,
        details: Any = None,
        source_tool_name: str = "custom_tool",
    ) -> str:
        """``ctx.push_pending_action`` for custom tools (same as queue_resolve_handler)."""
        return self.queue_resolve_handler(
            label=label,
            source_tool_name=source_tool_name,
            apply=apply,
            reject=reject,
            details=details,
        )

    def set_standing_handler(self, handler: StandingHandler | None) -> None:
        with self._lock:
            self._standing = handler

    @property
    def standing(self) -> StandingHandler | None:
        with self._lock:
            return self._standing

    # -- the interceptor's side ------------------------------------------------------------

    def pending(self) -> list[PendingAction]:
        """Pending actions, newest first."""
        with self._lock:
            return list(reversed(self._actions))

    def offered(self) -> bool:
        """Whether ``resolve`` should be offered to the model at all."""
        with self._lock:
            return bool(self._actions) or self._standing is not None

    def next_directive(self) -> PendingAction | None:
        """Take the next one-shot forcing directive (newest first), if any applies."""
        with self._lock:
            while self._directives:
                action_id = self._directives.pop()
                action = self._find(action_id)
                if action is not None and action.forcing and self.forcing_supported:
                    return action
            return None

    def ignored(self, action: PendingAction) -> bool:
        """The model answered a forced turn without ``resolve``: requeue, at most 3 times.

        The original forced turn plus :data:`MAX_REQUEUES` requeued ones: once
        all of them were ignored, forcing stops for this action (it stays
        pending). Returns True when forcing has just stopped.
        """
        with self._lock:
            if self._find(action.id) is None:
                return False  # resolved meanwhile
            action.ignored += 1
            if action.ignored > MAX_REQUEUES:
                action.forcing = False
                return True
            self._push_directive(action)
            return False

    def restore(self, action: PendingAction) -> None:
        """A forced request for ``action`` never got an answer: put its directive back.

        The request was cancelled by a hook or the user, or failed for a
        reason other than refusing the tool choice -- the model never saw it,
        so it is not counted as ignored, and the directive goes back where it
        was (newest first), not behind newer previews.
        """
        with self._lock:
            if self._find(action.id) is None or not action.forcing:
                return  # resolved meanwhile, or forcing stopped
            if action.id not in self._directives:
                self._push_directive(action)

    def _push_directive(self, action: PendingAction) -> None:
        """Queue ``action``'s directive below the directives of newer actions (lock held)."""
        order = {a.id: i for i, a in enumerate(self._actions)}
        mine = order.get(action.id, len(order))
        position = len(self._directives)
        while position > 0 and order.get(self._directives[position - 1], -1) > mine:
            position -= 1
        self._directives.insert(position, action.id)

    def requeue(self, action: PendingAction) -> None:
        """Put an action back (its apply raised): pending again, forced again."""
        with self._lock:
            if self._find(action.id) is None:
                self._actions.append(action)
            action.forcing = True
            action.ignored = 0
            if action.id not in self._directives:
                self._push_directive(action)

    # -- the resolve tool's side ---------------------------------------------------------------

    def take(self) -> PendingAction | None:
        """Remove and return the newest pending action (one per resolve call)."""
        with self._lock:
            if not self._actions:
                return None
            action = self._actions.pop()
            self._directives = [d for d in self._directives if d != action.id]
            return action

    def _find(self, action_id: str) -> PendingAction | None:
        for action in self._actions:
            if action.id == action_id:
                return action
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._actions)
