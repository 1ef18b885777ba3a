"""A worker run's status, kept once: its phase, and how its ending began.

A run used to carry its status twice -- a phase string *and* the flags
``ended`` and ``aborted`` -- written in pairs by hand, and one place had
already set one without the other. Here the phase is the only record:
:attr:`RunProgress.ended` and :attr:`RunProgress.aborted` are read from it,
and every change of phase is checked against :data:`ALLOWED`, the table of the
moves the worker makes. A move outside it is a bug of the worker and raises
:class:`PhaseError` at the assignment that made it, instead of surfacing
later as a run that appends to history after its ending began.

Plain data, no actor: the worker's ``_Run`` derives from :class:`RunProgress`,
and the table is unit- and property-tested on its own
(``tests/worker/test_worker_run_state.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from fore.errors import PhaseError
from fore.messages.session import RunStatus

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["PhaseError"]

RunPhase = Literal[
    "starting",
    "preparing",
    "on_prompt_submit",
    "pre_llm_request",
    "streaming",
    "pre_tool_call",
    "approval",
    "tools",
    "post_tool_call",
    "storing outputs",
    "on_turn_end",
    "paused",
    "saving",
    "on_abort",
    "ended",
]
"""Where a run is. The values are the strings ``RunState.phase`` has always shown
(``"storing outputs"`` with its space), so callers comparing them keep working."""

PHASES: tuple[RunPhase, ...] = get_args(RunPhase)

CallStatus = Literal["pending", "approved", "skipped", "running", "done", "removed"]
"""Where one tool call of an answer is: ``pending`` (its pre_tool_call checks to
come), ``approved`` (it will run), ``skipped`` (a synthetic result instead),
``running`` (in the tool pool), ``done`` (its result is back), ``removed``
(past a speculation's boundary: it leaves the answer)."""


def _phases(*phases: RunPhase) -> frozenset[RunPhase]:
    return frozenset(phases)


_NEXT_LLM = _phases("pre_llm_request", "on_turn_end", "paused")
"""Where a step that asks the model next (``_llm_turn``) can land: the request's
hooks; the turn's end when the interceptor already has the answer (structured
output); a pause someone asked for meanwhile."""

_ENDS = _phases("on_abort", "ended", "saving")
"""Every started phase may end: early (on_abort first) or at once -- with a session
store, through ``saving`` (its end, a pause or an accepted insert written ahead)."""

ALLOWED: dict[RunPhase, frozenset[RunPhase]] = {
    # A submit prepares its input; an accepted speculation's continuation
    # (InsertItems) starts at its LLM request or its calls' checks directly.
    "starting": _phases("preparing", "pre_tool_call", "approval", "storing outputs")
    | _NEXT_LLM
    | _ENDS,
    # Nothing of the run is in history yet: it ends without on_abort.
    "preparing": _phases("on_prompt_submit", "ended"),
    "on_prompt_submit": _NEXT_LLM | _ENDS,
    "pre_llm_request": _phases("streaming") | _ENDS,
    # The answer: retried or continued (_NEXT_LLM), its calls checked, or --
    # every call refused, with a result too large for history -- stored.
    "streaming": _phases("pre_tool_call", "approval", "storing outputs") | _NEXT_LLM | _ENDS,
    # One call after the other: hooks, the approval policy, then the batch.
    "pre_tool_call": _phases("pre_tool_call", "approval", "tools", "storing outputs")
    | _NEXT_LLM
    | _ENDS,
    "approval": _phases("pre_tool_call", "approval", "tools", "storing outputs")
    | _NEXT_LLM
    | _ENDS,
    "tools": _phases("post_tool_call", "storing outputs") | _NEXT_LLM | _ENDS,
    "post_tool_call": _phases("post_tool_call", "storing outputs") | _NEXT_LLM | _ENDS,
    "storing outputs": _NEXT_LLM | _ENDS,
    "on_turn_end": _NEXT_LLM | _ENDS,
    # Resumed: at the LLM request, the call's hooks, or the turn end's hooks.
    "paused": _phases("pre_tool_call") | _NEXT_LLM | _ENDS,
    "on_abort": _phases("ended"),
    # Written to the session store (actors/worker/persistence.py): the run's end
    # (then ended), a pause (then paused) or an accepted speculation's items (then
    # its turn goes on, as from starting); a live one may still be cancelled meanwhile.
    # (A run whose end is saved from preparing or on_abort stays in that phase.)
    "saving": _phases("pre_tool_call", "approval", "storing outputs") | _NEXT_LLM | _ENDS,
    "ended": _phases(),
}


def check_move(old: RunPhase, new: RunPhase) -> None:
    """Raise :class:`PhaseError` unless ``old -> new`` is in :data:`ALLOWED`."""
    if new not in ALLOWED[old]:
        raise PhaseError(f"a run cannot go from phase {old!r} to {new!r}")


@dataclass(frozen=True, slots=True)
class Ending:
    """How a run's early ending began: the status and error its result gets.

    The ending that begins first decides how the run ends; later endings
    (a cancel after a failure, a close after a cancel) keep it.
    """

    status: RunStatus
    error: str | None


@dataclass
class RunProgress:
    """The run's phase -- the one record of its status -- and how it ends.

    ``phase`` is checked on every assignment; ``on_abort`` is entered only
    through :meth:`begin_ending`, so a run in it always has its ending. The
    end being written to the session store is :meth:`save_end`'s record, and
    :attr:`live` -- the one test every continuation used to copy -- is read
    from these, never kept beside them.
    """

    _phase: RunPhase = field(default="starting", init=False)
    _ending: Ending | None = field(default=None, init=False, repr=False)
    _end_save: Ending | None = field(default=None, init=False, repr=False)

    @property
    def phase(self) -> RunPhase:
        return self._phase

    @phase.setter
    def phase(self, new: RunPhase) -> None:
        if new == "on_abort":
            raise PhaseError("on_abort begins with begin_ending(status, error), which says how")
        check_move(self._phase, new)
        self._phase = new

    @property
    def ended(self) -> bool:
        """The run is over: its result was given."""
        return self._phase == "ended"

    @property
    def aborted(self) -> bool:
        """Its ending has begun (on_abort runs) and has not finished yet."""
        return self._phase == "on_abort"

    @property
    def closing(self) -> bool:
        """Its ending has begun -- on_abort runs, or its end is being saved -- and is not over."""
        return self._phase == "on_abort" or (self._end_save is not None and self._phase != "ended")

    @property
    def live(self) -> bool:
        """The run may go on: it has not ended, and its ending has not begun."""
        return self._phase != "ended" and not self.closing

    @property
    def end_save(self) -> Ending | None:
        """The end being written to the session store (set by :meth:`save_end`), else None."""
        return self._end_save

    @property
    def final(self) -> Ending | None:
        """How the run ends, once that is decided: the end being saved, else its early ending."""
        return self._end_save or self._ending

    def save_end(self, end: Ending) -> None:
        """Its end (``end``) is being written to the session store: it reports once that is done.

        Until then it is ending (a cancel finds nothing to cancel, a submit
        waits behind it). The phase moves to ``saving`` where :data:`ALLOWED`
        lists it; ``preparing`` and ``on_abort`` stay as they are. Called again
        (the save failed), it replaces the status the run ends with.
        """
        self._end_save = end
        if self._phase != "saving" and "saving" in ALLOWED[self._phase]:
            self.phase = "saving"

    @property
    def ending(self) -> Ending | None:
        """How its early ending began (kept once it has ended), None if it never did."""
        return self._ending

    def begin_ending(self, status: RunStatus, error: str | None) -> None:
        """Enter ``on_abort``: the run ends early, as ``status`` with ``error``."""
        check_move(self._phase, "on_abort")
        self._ending = Ending(status, error)
        self._phase = "on_abort"
