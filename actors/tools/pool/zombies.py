"""Zombies: calls reported ``timeout`` or ``cancelled`` whose thread still runs.

A Python thread cannot be killed: a tool that ignores its token
keeps running after its call was reported ``timeout`` or ``cancelled``. Such
a call is a *zombie* until its thread returns, and the pool keeps treating it
as running for everything but reporting:

* it keeps its slot, so the caps bound the tool bodies that really run;
* a later call that must not overlap it -- one writing the same path, any
  call after an exclusive one, a shell after a write -- waits for its thread
  to end, whether the later call is in the same batch or in a later batch of
  the same session on the same filesystem view. If the thread has not ended
  ``call_timeout`` seconds (plus :data:`ZOMBIE_HANDOVER_GRACE`) after the
  later call became blocked by it, the later call is not run and gets an
  ``error`` result saying why;
* a session may hold at most ``max_zombies`` of them (default: its cap) --
  counting batch plannings that timed out, whose threads are stuck too.
  Beyond that its new calls get an ``error`` result at once, instead of
  waiting for slots that may never come back; and when zombies fill every
  global slot, every queued call is refused the same way. Other sessions
  keep their slots: one session never holds more than its own cap.

The result a zombie's thread produces in the end is dropped: its call was
answered already.

A mixin of :class:`~actors.tools.pool.actor.ToolPool` (not used alone):
making a call a zombie (:meth:`ZombieBound._abandon`), bounding how long a
later call waits for one (:meth:`ZombieBound._arm_wait`), and refusing calls
while a session -- or the whole pool -- is at the bound. The pool's state it
uses is declared below and set up by :meth:`ToolPool.__init__`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fore.actors.core.timer import TimerHandle
from fore.actors.tools.base import Invocation
from fore.actors.tools.pool.calls import _Call, _cancel
from fore.actors.tools.scheduling import FairQueue

ZOMBIE_HANDOVER_GRACE = 0.25
"""Seconds added to a blocked call's wait, so a thread ending right at its deadline
(a tool that overran by exactly one timeout) still hands over instead of racing the timer."""


class ZombieBound:
    """Zombie calls and the bound on them (a mixin of ``ToolPool``)."""

    # The pool's state these methods use (set up by ToolPool).
    _queue: FairQueue[_Call]
    _max_zombies: int | None
    _zombies: dict[str, set[_Call]]
    _stuck_plans: dict[str, int]
    _planning: dict[str, int]
    _abandoned: int

    if TYPE_CHECKING:  # ToolPool's methods these call

        def call_after(self, delay: float, fn: Callable[..., Any], *args: Any) -> TimerHandle: ...

        def _report(self, item: _Call, invocation: Invocation) -> None: ...

        def _release(self, item: _Call) -> None: ...

        def _pump(self) -> None: ...

    def _abandon(self, item: _Call, invocation: Invocation, reason: str, ended_as: str) -> None:
        """Report a running call now; it stays a zombie (slot held) until its thread ends."""
        item.token.cancel(reason)  # a shell's process group dies here, synchronously
        self._abandoned += 1
        self._report(item, invocation)
        _cancel(item.timer)
        item.timer = None
        item.state = "zombie"
        item.ended_as = ended_as
        self._zombies.setdefault(item.batch.session, set()).add(item)
        for dependent in item.dependents:
            if dependent.state == "waiting":
                self._arm_wait(dependent)

    def _arm_wait(self, item: _Call) -> None:
        """Bound how long ``item`` waits for a zombie: its own ``call_timeout`` from now."""
        if item.wait_timer is None:
            timeout = item.batch.request.call_timeout + ZOMBIE_HANDOVER_GRACE
            item.wait_timer = self.call_after(timeout, self._on_wait_timeout, item)

    def _on_wait_timeout(self, item: _Call) -> None:
        item.wait_timer = None
        if item.state != "waiting":
            return
        stuck = sorted(
            (b for b in item.waiting_on if b.state == "zombie"),
            key=lambda b: (b.batch.request.batch_id, b.index),
        )
        if not stuck:
            return  # its zombie blockers ended; the live ones have deadlines of their own
        blocker = stuck[0]
        timeout = item.batch.request.call_timeout
        self._report(
            item,
            Invocation(
                "error",
                f"Not run: {item.call.name} must not overlap call {blocker.call.id!r} "
                f"({blocker.call.name}, which writes the same file, may write anything, or is "
                f"exclusive); that call {blocker.ended_as}, but its tool thread was still running "
                f"{timeout:g}s later, so running this one could race with it",
                True,
            ),
        )
        self._release(item)
        self._pump()

    def _zombie_refusal(self, session: str) -> str | None:
        """Why ``session`` may not start calls now (too many stuck threads), or None."""
        stuck = len(self._zombies.get(session, ())) + self._stuck_plans.get(session, 0)
        cap = self._queue.session_cap(session)
        bound = cap if self._max_zombies is None else min(self._max_zombies, cap)
        if stuck >= bound:
            return (
                f"Not run: {stuck} earlier tool calls of this session timed out or were "
                "cancelled and their threads are still running (Python tool threads cannot be "
                f"killed); a session may keep at most {bound} of them, so its new calls are "
                "refused until they end"
            )
        total = sum(len(z) for z in self._zombies.values())
        if total >= self._queue.global_cap:
            return (
                f"Not run: all {self._queue.global_cap} tool slots are held by calls that timed "
                "out or were cancelled and whose threads are still running; new calls are "
                "refused until they end"
            )
        return None

    def _planning_refusal(self, session: str) -> str | None:
        """Why ``session`` may not start planning another batch now, or None.

        Planning runs tool code (``write_paths``) on a runner thread; a session
        sending batch after batch whose planning hangs would otherwise take one
        thread each. A session never needs more plannings at once than its cap.
        """
        cap = self._queue.session_cap(session)
        if self._planning.get(session, 0) >= cap:
            return (
                f"Not run: {cap} batches of this session are still being planned (working out "
                "which paths their calls write); send the next batch when one of them is done"
            )
        return None

    def _refuse_queued_over_the_bound(self) -> None:
        """Queued calls of sessions now at the zombie bound get their error at once."""
        for session in self._queue.queued_sessions():
            refusal = self._zombie_refusal(session)
            if refusal is None:
                continue
            for item in self._queue.remove(session, lambda _item: True):
                self._report(item, Invocation("error", refusal, True))
                self._release(item)
