"""One speculation's record in the controller: a typed phase and its allowed moves.

The controller keeps one :class:`Speculation` per live speculation; its
:class:`SpecPhase` says what the controller still owes it, and :meth:`move`
is the only way to change it -- a move not listed in :data:`ALLOWED` raises
:class:`SpeculationPhaseError` (a bug in the controller, never a user error).
The pointers the controller used to keep beside the records (the offered
speculation, the one whose accept is in its critical section) are queries
over the phases (:func:`offered`, :func:`accepting`)::

                   Tab                 InsertItems sent        inserted
    OFFERED ───────────────▶ ACCEPTING ──────────────▶ INSERTING ──────▶ ACCEPTED
       │  keystroke, submit,     │ called off               │ insert failed
       │  new snapshot, ...      ▼ (nothing applied)        ▼
       ├──────────────────▶ ABORTING ───────────────▶ ENDED ◀── (failed, empty,
       │                         overlay removed            conflict, stale)
       └───────────────────────────────────────────▶ ENDED

``state`` beside the phase is what the speculation's status shows (its run's
own outcome: running, completed, boundary, empty, failed, aborted, stale,
accepted); :meth:`move` writes both together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pykka import ActorRef

from fore.actors.core.timer import TimerHandle
from fore.errors import SpeculationPhaseError
from fore.messages.llm import LlmRequest

if TYPE_CHECKING:  # the speculator imports this module
    from fore.actors.speculation.speculator import Speculator

from fore.messages.speculation import (
    ForkSnapshot,
    OverlayRemoved,
    SpeculationResult,
    SpeculationState,
    Suggestion,
)


class SpecPhase(StrEnum):
    """Where a speculation is in the controller's eyes."""

    OFFERED = "offered"
    """Its suggestion is current: typing, a different submit or a new snapshot aborts it."""
    ACCEPTING = "accepting"
    """Tab was pressed (detached: typing no longer aborts it); its apply is awaited.
    Submits other than the accept are held until it leaves this phase."""
    INSERTING = "inserting"
    """Applied; its items were handed to the worker (``InsertItems``), the answer awaited."""
    ABORTING = "aborting"
    """The abort is under way; its telemetry follows once its overlay is gone."""
    ACCEPTED = "accepted"
    """Applied and inserted; only a pipelined suggestion may still arrive for it."""
    ENDED = "ended"
    """Reported; nothing left to do but forget it."""


ALLOWED: dict[SpecPhase, frozenset[SpecPhase]] = {
    SpecPhase.OFFERED: frozenset({SpecPhase.ACCEPTING, SpecPhase.ABORTING, SpecPhase.ENDED}),
    SpecPhase.ACCEPTING: frozenset({SpecPhase.INSERTING, SpecPhase.ABORTING, SpecPhase.ENDED}),
    SpecPhase.INSERTING: frozenset({SpecPhase.ACCEPTED, SpecPhase.ENDED}),
    SpecPhase.ABORTING: frozenset({SpecPhase.ENDED}),
    SpecPhase.ACCEPTED: frozenset(),
    SpecPhase.ENDED: frozenset(),
}
"""Every move a speculation may make; anything else is a controller bug."""

TERMINAL = frozenset(phase for phase, moves in ALLOWED.items() if not moves)

__all__ = [
    "ALLOWED",
    "TERMINAL",
    "SpecPhase",
    "Speculation",
    "SpeculationPhaseError",
    "accepting",
    "offered",
]


@dataclass(eq=False)
class Speculation:
    """The controller's only record of one speculation (see the module docs)."""

    id: str
    child_id: str
    suggestion: Suggestion
    snapshot: ForkSnapshot
    config_gen: int
    started_at: float
    handle: ActorRef[Speculator]
    """Its speculator (started and watched by the controller, never restarted)."""
    state: SpeculationState = "running"
    phase: SpecPhase = SpecPhase.OFFERED
    result: SpeculationResult | None = None
    accept_epoch: int | None = None
    accepted_snapshot: ForkSnapshot | None = None
    abort_requested: float | None = None
    """When the user did what aborts it (``time.monotonic()``; the keystroke's own time)."""
    abort_reason: str | None = None
    removal: OverlayRemoved | None = None
    """The reaper's report (its steps time the abort), once the overlay is gone."""
    accept_cancelled: str | None = None
    """Why an accept waiting for it was called off (a different submit, the caller gave up)."""
    give_up_timer: TimerHandle | None = None
    reason: str | None = None
    next_suggestion: str | None = None
    pipelined_request: LlmRequest | None = None
    """The pipelined suggestion request in flight (cancelled through its scope)."""
    reported: bool = False
    exited: bool = False
    overlay_removed: bool = False
    holds_slot: bool = False
    """It holds one of the governor's slots until its run ends."""
    span: Any = None
    """Its :class:`~actors.telemetry.tracing.SpeculationSpan` (telemetry on; issue 28)."""
    live_tool_calls: int = 0
    live_files: int = 0
    """Its progress while it runs (``SpeculationProgress``), for the status events."""

    def move(self, to: SpecPhase, *, state: SpeculationState | None = None) -> None:
        """Move to phase ``to`` (and set ``state`` with it); raises on a move not allowed."""
        if to not in ALLOWED[self.phase]:
            raise SpeculationPhaseError(
                f"speculation {self.id}: {self.phase.value} -> {to.value} is not allowed"
            )
        self.phase = to
        if state is not None:
            self.state = state


def offered(specs: Iterable[Speculation]) -> Speculation | None:
    """The speculation behind the current suggestion (at most one is offered at a time)."""
    return next((s for s in specs if s.phase is SpecPhase.OFFERED), None)


def accepting(specs: Iterable[Speculation]) -> Speculation | None:
    """The speculation whose accept has not yet handed its items to the worker."""
    return next((s for s in specs if s.phase is SpecPhase.ACCEPTING), None)
