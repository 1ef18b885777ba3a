"""One speculation's record in the controller: what it owes the user, and what is left to tear down.

The controller keeps one :class:`Speculation` per speculation, the *only*
record of it: its run (worker, overlay, model, gate, budgets, progress), its
accept and its teardown all live here, and nowhere else. Two typed phases say
where it is, each changed only by its own method, which raises
:class:`SpeculationPhaseError` on a move its table does not list (a bug in the
controller, never a user error):

* :class:`SpecPhase` (:meth:`Speculation.move`, table :data:`ALLOWED`): what
  the controller still owes the user for it -- the offer, an accept, a report::

                Tab             run over:           applied:              inserted
    OFFERED ─────────▶ ACCEPTING ──apply──▶ APPLYING ──InsertItems──▶ INSERTING ─────▶ ACCEPTED
       │ keystroke,        │ called off        │ called off, and       │ insert
       │ submit, tools,    │ (run stopped,     │ the apply failed      │ failed
       │ snapshot, ...     ▼ nothing applied)  ▼ (rolled back)         │
       ├────────────▶ ABORTING ◀───────────────┘                       │
       │                   │ overlay removed                           │
       │                   ▼                                           ▼
       └────────────▶   ENDED   ◀── from ACCEPTING: its run failed or was empty;
         run failed,              from APPLYING: a conflict, the apply failed;
         empty; closed            from INSERTING: the insert failed

* :class:`Teardown` (:meth:`Speculation.tear`, table :data:`TEARDOWN`):
  what is left of its resources, in the one order that is safe::

    RUNNING ──▶ STOPPING ──▶ SETTLING ──▶ KEPT ──▶ REMOVING ──▶ REMOVED
      run over   StopNow on    worker      nothing can  overlay.remove
      or aborted the control   exited;     write through on the blocking
                 lane; exit    its run     it; kept for lane, then
                 awaited       scope's     Tab's apply  the abort's
                 (deadline:    "llm" and                report
                 kill)         "tools"     SETTLING ──▶ REMOVING when
                               leases      the speculation is over
                               awaited (deadline)

Two rules tie the phases together, checked by the moves themselves: the
overlay's removal starts only once the speculation is over (:data:`OVER`:
inserting, accepted, aborting or ended) -- so never while Tab may still come,
and never while an apply runs (APPLYING is not over); and an apply starts only
while the run is over and the overlay is still there (teardown STOPPING,
SETTLING or KEPT). An abort is reported (ABORTING → ENDED) only once its
overlay is gone: the report times the removal.

The queries the controller used to keep as pointers beside the records (the
offered speculation, the one whose accept is in its critical section) are
queries over the phases (:func:`offered`, :func:`accepting`). ``state``
beside the phase is what the speculation's status shows (its run's own
outcome: running, completed, boundary, empty, failed, aborted, stale,
accepted); :meth:`move` writes both together.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pykka import ActorRef

from fore.actors.core.cancel import CancelScope, Registration
from fore.actors.core.future import PooledFuture
from fore.actors.core.timer import TimerHandle
from fore.actors.overlay.fs import OverlayFs
from fore.actors.speculation.gate import SpeculationGate
from fore.actors.speculation.handover import Handover
from fore.actors.speculation.metered import MeteredModel
from fore.actors.speculation.outcome import Limit
from fore.errors import SpeculationPhaseError
from fore.messages.llm import LlmRequest
from fore.messages.session import TurnResult
from fore.messages.speculation import (
    AcceptResult,
    ForkSnapshot,
    SpeculationResult,
    SpeculationState,
    Suggestion,
)


class SpecPhase(StrEnum):
    """What the controller still owes the user for a speculation."""

    OFFERED = "offered"
    """Its suggestion is current: typing, a different submit or a new snapshot aborts it."""
    ACCEPTING = "accepting"
    """Tab was pressed (detached: typing no longer aborts it); its run is still going.
    Submits other than the accept are held until it leaves this phase."""
    APPLYING = "applying"
    """Its run is over and its overlay is being applied on the blocking lane (it leaves
    this phase only once the apply has ended)."""
    INSERTING = "inserting"
    """Applied; its items were handed to the worker (``InsertItems``), the answer awaited."""
    ABORTING = "aborting"
    """Aborted; its telemetry follows once its overlay is gone."""
    ACCEPTED = "accepted"
    """Applied and inserted; only a pipelined suggestion may still arrive for it."""
    ENDED = "ended"
    """Reported; nothing left to owe the user."""


ALLOWED: dict[SpecPhase, frozenset[SpecPhase]] = {
    SpecPhase.OFFERED: frozenset({SpecPhase.ACCEPTING, SpecPhase.ABORTING, SpecPhase.ENDED}),
    SpecPhase.ACCEPTING: frozenset({SpecPhase.APPLYING, SpecPhase.ABORTING, SpecPhase.ENDED}),
    SpecPhase.APPLYING: frozenset({SpecPhase.INSERTING, SpecPhase.ABORTING, SpecPhase.ENDED}),
    SpecPhase.INSERTING: frozenset({SpecPhase.ACCEPTED, SpecPhase.ENDED}),
    SpecPhase.ABORTING: frozenset({SpecPhase.ENDED}),
    SpecPhase.ACCEPTED: frozenset(),
    SpecPhase.ENDED: frozenset(),
}
"""Every move of a speculation's phase; anything else is a controller bug."""

TERMINAL = frozenset(phase for phase, moves in ALLOWED.items() if not moves)

OVER = frozenset({SpecPhase.INSERTING, SpecPhase.ACCEPTED, SpecPhase.ABORTING, SpecPhase.ENDED})
"""Phases in which nothing will read the overlay any more (its removal may start)."""


class Teardown(StrEnum):
    """What is left of a speculation's worker and overlay (see the module docs)."""

    RUNNING = "running"
    """Its worker runs the suggestion (or waits to)."""
    STOPPING = "stopping"
    """``StopNow`` went to its worker on the control lane; its exit is awaited."""
    SETTLING = "settling"
    """Its worker has exited; the run scope's ``llm`` / ``tools`` leases are awaited."""
    KEPT = "kept"
    """No stream or tool call can write through the overlay any more; it is kept for Tab."""
    REMOVING = "removing"
    """The overlay's removal runs on the blocking lane."""
    REMOVED = "removed"
    """The overlay is gone (or its removal was given up on at its deadline, logged)."""


TEARDOWN: dict[Teardown, frozenset[Teardown]] = {
    Teardown.RUNNING: frozenset({Teardown.STOPPING}),
    Teardown.STOPPING: frozenset({Teardown.SETTLING}),
    Teardown.SETTLING: frozenset({Teardown.KEPT, Teardown.REMOVING}),
    Teardown.KEPT: frozenset({Teardown.REMOVING}),
    Teardown.REMOVING: frozenset({Teardown.REMOVED}),
    Teardown.REMOVED: frozenset(),
}
"""Every move of a speculation's teardown; anything else is a controller bug."""

APPLICABLE = frozenset({Teardown.STOPPING, Teardown.SETTLING, Teardown.KEPT})
"""Teardown phases in which an apply may start: the run is over, the overlay still there."""

__all__ = [
    "ALLOWED",
    "APPLICABLE",
    "OVER",
    "TEARDOWN",
    "TERMINAL",
    "AcceptCall",
    "SpecPhase",
    "Speculation",
    "SpeculationPhaseError",
    "Teardown",
    "accepting",
    "offered",
]


@dataclass(frozen=True)
class Continuation:
    """A Tab whose accept has landed, waiting for its boundary's continuation to end.

    ``report`` answers it (with the continuation's turn, or None); ``reply`` is the
    asker's reply it sets, released from the controller's exit when the controller
    stops first (the Tab is then answered without the turn).
    """

    report: Callable[[TurnResult | None], None]
    reply: PooledFuture[Any] | None


@dataclass(frozen=True)
class AcceptCall:
    """A Tab waiting for its speculation: how to answer it, its scope, and its clock."""

    answer: Callable[[AcceptResult], None]
    wait: bool
    """Whether the answer waits for a continuation's end (a boundary accept)."""
    scope: CancelScope
    """The accept's cancel scope (its sender's, ``AcceptSuggestion.scope``): its cancel
    calls the accept off, and the run the accept starts runs under a child of it."""
    registration: Registration
    """The controller's callback on ``scope``: taken back when the accept answers (or the
    controller stops), so the scope does not keep the controller alive."""
    tab_at: float
    """``time.time()`` of the Tab (what the speculation saved is measured up to it)."""
    started: float
    """``time.monotonic()`` of the Tab (the accept's latency and wait start here)."""
    reply: PooledFuture[Any] | None = None
    """The asker's reply ``answer`` sets (deferred by the controller): released to the
    accept's :class:`Handover` if the controller stops once the apply has begun."""


@dataclass(eq=False)
class Speculation:
    """The controller's only record of one speculation (see the module docs)."""

    id: str
    suggestion: Suggestion
    snapshot: ForkSnapshot
    config_gen: int
    started_at: float = field(default_factory=time.time)
    state: SpeculationState = "running"
    phase: SpecPhase = SpecPhase.OFFERED
    teardown: Teardown = Teardown.RUNNING
    reason: str | None = None
    """Why it was aborted, went stale or failed (its status shows it)."""

    # -- its run ---------------------------------------------------------------------------
    worker: ActorRef[Any] | None = None
    """Its worker (purpose ``speculation``), started and watched by the controller."""
    overlay: OverlayFs | None = None
    model: MeteredModel | None = None
    gate: SpeculationGate | None = None
    scope: CancelScope = field(default_factory=CancelScope)
    """Its run's scope (travels with the Submit): a hard budget cancels it, wherever the
    run is (not started yet: it never starts); settled once no stream or call is left."""
    limit: Limit | None = None
    """The budget it reached, if one did (it names the boundary)."""
    budget_timer: TimerHandle | None = None
    transcript_items: int = 0
    live_tool_calls: int = 0
    live_files: int = 0
    tokens: int = 0
    """Its progress while it runs: items, calls and files so far, tokens reported."""
    result: SpeculationResult | None = None
    """Its run's outcome, once the run has ended (the run is over exactly when this is set)."""
    holds_slot: bool = False
    """It holds one of the governor's slots until its run ends."""
    span: Any = None
    """Its :class:`~actors.telemetry.tracing.SpeculationSpan` (telemetry on; issue 28)."""

    # -- an accept -------------------------------------------------------------------------
    accept: AcceptCall | None = None
    accept_epoch: int | None = None
    accepted_snapshot: ForkSnapshot | None = None
    accept_cancelled: str | None = None
    """Why an accept waiting for it was called off (its scope was cancelled, a different
    submit came, the approval mode narrowed)."""
    give_up_timer: TimerHandle | None = None
    apply_started: float | None = None
    apply_job: Future[Any] | None = None
    """The apply running on the blocking lane (its overlay is removed only after it)."""
    handover: Handover | None = None
    """The items its apply owes the worker, built when the apply starts: delivered by the
    controller, or by the apply's completion if the controller is gone by then."""
    next_suggestion: str | None = None
    pipelined_request: LlmRequest | None = None
    """The pipelined suggestion request in flight (cancelled through its own scope)."""
    reported: bool = False

    # -- its end and teardown ----------------------------------------------------------------
    abort_requested: float | None = None
    """When the user did what aborts it (``time.monotonic()``; the keystroke's own time)."""
    abort_reason: str | None = None
    steps: list[tuple[str, float]] = field(default_factory=list)
    """Teardown steps with their ``time.monotonic()`` (an abort's timings are read from them)."""
    stopped_at: float | None = None
    teardown_timer: TimerHandle | None = None
    """The deadline of the teardown's current wait (the worker's exit, the leases)."""

    @property
    def child_id(self) -> str:
        """Its worker's id for ``GetChild`` (tests reach a speculation's worker by it)."""
        return f"speculation:{self.id}"

    @property
    def finished(self) -> bool:
        """Whether its run has ended (its result is known)."""
        return self.result is not None

    @property
    def accept_began(self) -> float:
        """When its accept itself began (``time.monotonic()``): at Tab, or when its apply
        started if Tab waited for its run (the wait is reported separately)."""
        call = self.accept
        assert call is not None
        return max(call.started, self.apply_started or call.started)

    @property
    def time_saved(self) -> float:
        """What its accept saved: its run up to Tab (or up to its end, if earlier)."""
        call, result = self.accept, self.result
        assert call is not None and result is not None
        completed = result.completed_at or time.time()
        return max(0.0, min(completed, call.tab_at) - result.started_at)

    def accepted(
        self,
        applied: tuple[str, ...],
        *,
        latency: float,
        next_suggestion: str | None = None,
        turn: TurnResult | None = None,
    ) -> AcceptResult:
        """Its accept's answer once its items are in (``latency``: from
        :attr:`accept_began` to the items inserted), whoever gives it."""
        call, result, handover = self.accept, self.result, self.handover
        assert call is not None and result is not None and handover is not None
        items = handover.insert.items
        return AcceptResult(
            outcome="boundary" if handover.insert.boundary else "accepted",
            suggestion=self.suggestion.text,
            files_applied=applied,
            items_inserted=len(items),
            items=tuple(items),
            boundary_tool=result.boundary_tool,
            boundary_reason=result.boundary_reason,
            time_saved_s=self.time_saved,
            accept_latency_s=latency,
            waited_s=self.accept_began - call.started,
            next_suggestion=next_suggestion,
            turn=turn,
        )

    def move(self, to: SpecPhase, *, state: SpeculationState | None = None) -> None:
        """Move to phase ``to`` (and set ``state`` with it); raises on a move not allowed."""
        if to not in ALLOWED[self.phase]:
            raise SpeculationPhaseError(
                f"speculation {self.id}: {self.phase.value} -> {to.value} is not allowed"
            )
        if to is SpecPhase.APPLYING and self.teardown not in APPLICABLE:
            raise SpeculationPhaseError(
                f"speculation {self.id}: no apply with its teardown {self.teardown.value}"
            )
        if (
            self.phase is SpecPhase.ABORTING
            and to is SpecPhase.ENDED
            and self.teardown is not Teardown.REMOVED
        ):
            raise SpeculationPhaseError(
                f"speculation {self.id}: an abort ends only once its overlay is removed"
            )
        self.phase = to
        if state is not None:
            self.state = state

    def tear(self, to: Teardown) -> None:
        """Move its teardown to ``to``; raises on a move not allowed (see the module docs)."""
        if to not in TEARDOWN[self.teardown]:
            raise SpeculationPhaseError(
                f"speculation {self.id}: teardown {self.teardown.value} -> {to.value} "
                "is not allowed"
            )
        if to is Teardown.REMOVING and self.phase not in OVER:
            raise SpeculationPhaseError(
                f"speculation {self.id}: its overlay cannot go while it is {self.phase.value}"
            )
        self.teardown = to

    def step(self, name: str, at: float | None = None) -> float:
        """Record a teardown step (now, or ``at``); returns its time."""
        when = time.monotonic() if at is None else at
        self.steps.append((name, when))
        return when


def offered(specs: Iterable[Speculation]) -> Speculation | None:
    """The speculation behind the current suggestion (at most one is offered at a time)."""
    return next((s for s in specs if s.phase is SpecPhase.OFFERED), None)


def accepting(specs: Iterable[Speculation]) -> Speculation | None:
    """The speculation whose accept has not yet handed its items to the worker."""
    return next((s for s in specs if s.phase in (SpecPhase.ACCEPTING, SpecPhase.APPLYING)), None)
