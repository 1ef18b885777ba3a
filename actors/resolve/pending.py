"""Pending actions: staged previews waiting for the model's ``resolve`` decision.

A producer (a preview-mode tool, or a custom tool through
``ctx.push_pending_action``) calls :meth:`PendingActions.queue_resolve_handler`.
That stages the action and pushes a one-shot directive on the session's
tool-choice queue: the next LLM request forces the ``resolve`` tool and carries
a reminder. The newest preview is served first.

The forcing budget
------------------
Every pending action has a budget of its own: :data:`MAX_FORCED_ATTEMPTS`
forced turns that did not settle it -- the original directive plus at most
:data:`MAX_REQUEUES` requeues. A forced turn is spent ("a miss") when

* the model answered it without a usable ``resolve`` call (no call, or calls
  that resolved nothing: invalid arguments, skipped by a hook), or
* ``apply`` (or ``reject``) raised, on any turn, forced or not: the action
  is pending again.

After the last miss forcing stops for that action only: it stays pending, is
still offered with its reminder, and the interceptor raises one Warn alert
(:meth:`PendingActions.drain_exhausted`). An ``apply`` that raises an
exception whose ``retryable`` attribute is false (a
:class:`~actors.resolve.preview.StalePreview`: the files changed, so no retry
can succeed) stops forcing at once, without an alert: the model still sees
the error and the reminder (which quotes it) and can discard.

A forced turn for action A whose ``resolve`` consumed a *different* action
(a newer one -- ``resolve`` always takes the newest) is not a miss for A: the
model did decide something, just not about A. A's directive goes back
uncounted, so A is forced again on the next request; it can never be left
un-forced because another action used its directive. Every such turn
consumes a pending action, so this cannot loop.

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
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_REQUEUES = 3
"""How often a directive is requeued after a miss (an ignored forced turn or a failed apply)."""

MAX_FORCED_ATTEMPTS = MAX_REQUEUES + 1
"""Misses per action before forcing stops: the original forced turn plus :data:`MAX_REQUEUES`.

After that the action stays pending (still offered, still reminded), and
the user gets one Warn alert.
"""

_TAKEN_LOG = 256
"""Recent ``take()`` results kept so the interceptor can tell which action a resolve consumed."""

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
    failures: int = 0
    """How often ``apply`` (or ``reject``) raised: each one is a miss, forced turn or not."""
    forcing: bool = True
    last_error: str | None = None
    """The message of the last failed ``apply``/``reject`` (shown in the reminder)."""
    seq: int = 0
    """Creation order within the store (newest = highest); keeps "newest first" stable."""

    @property
    def misses(self) -> int:
        """Spent forcing budget: ignored forced turns plus failed applies."""
        return self.ignored + self.failures


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
        self._seq = 0
        self._takes = 0
        self._taken: deque[tuple[int, str]] = deque(maxlen=_TAKEN_LOG)
        self._exhausted: list[PendingAction] = []
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
            self._seq += 1
            action.seq = self._seq
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
        """A forced turn for ``action`` was a miss (answered without a usable ``resolve``).

        Requeues the directive while the budget lasts (see the module docs);
        returns True when forcing has just stopped (the action is then also
        reported by :meth:`drain_exhausted`).
        """
        with self._lock:
            if self._find(action.id) is None or not action.forcing:
                return False  # resolved meanwhile, or forcing already stopped
            action.ignored += 1
            return self._spend(action)

    def restore(self, action: PendingAction) -> None:
        """A forced turn for ``action`` did not settle it, through no fault of the model.

        The request was cancelled by a hook or the user, failed for a reason
        other than refusing the tool choice, or its ``resolve`` consumed a
        different (newer) action. Not a miss: the directive goes back where
        it was (newest first), not behind newer previews.
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

    def _spend(self, action: PendingAction) -> bool:
        """One miss was counted: requeue within budget, else stop forcing (lock held)."""
        if action.misses > MAX_REQUEUES:
            action.forcing = False
            self._directives = [d for d in self._directives if d != action.id]
            self._exhausted.append(action)
            return True
        if action.id not in self._directives:
            self._push_directive(action)
        return False

    def requeue(
        self, action: PendingAction, *, retryable: bool = True, error: str | None = None
    ) -> bool:
        """Put an action back after its ``apply`` (or ``reject``) raised: pending again.

        A retryable failure is a miss: the directive is pushed again while the
        budget lasts (returns True when forcing has just stopped). A failure
        that no retry can fix (``retryable=False``, e.g. a stale preview)
        stops forcing at once, quietly: the action stays pending with its
        reminder so the model can discard it.
        """
        with self._lock:
            if self._find(action.id) is None:
                self._insert(action)
            action.last_error = error
            if not retryable:
                action.forcing = False
                self._directives = [d for d in self._directives if d != action.id]
                return False
            action.failures += 1
            if not action.forcing:
                return False  # forcing already stopped: it stays pending, unforced
            return self._spend(action)

    def _insert(self, action: PendingAction) -> None:
        """Re-insert a taken action at its creation position (lock held)."""
        position = len(self._actions)
        while position > 0 and self._actions[position - 1].seq > action.seq:
            position -= 1
        self._actions.insert(position, action)

    def drain_exhausted(self) -> list[PendingAction]:
        """Actions whose forcing budget ran out since the last call (one alert each)."""
        with self._lock:
            exhausted, self._exhausted = self._exhausted, []
            return exhausted

    # -- the resolve tool's side ---------------------------------------------------------------

    def take(self) -> PendingAction | None:
        """Remove and return the newest pending action (one per resolve call)."""
        with self._lock:
            if not self._actions:
                return None
            action = self._actions.pop()
            self._directives = [d for d in self._directives if d != action.id]
            self._takes += 1
            self._taken.append((self._takes, action.id))
            return action

    @property
    def takes(self) -> int:
        """How many actions ``take`` has returned so far (a mark for :meth:`taken_since`)."""
        with self._lock:
            return self._takes

    def taken_since(self, mark: int) -> list[str]:
        """Ids of the actions taken after ``mark`` (a value of :attr:`takes`)."""
        with self._lock:
            return [action_id for seq, action_id in self._taken if seq > mark]

    def _find(self, action_id: str) -> PendingAction | None:
        for action in self._actions:
            if action.id == action_id:
                return action
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._actions)
