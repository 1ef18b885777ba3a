"""Where every turn, suggestion and speculation of a load run ended: buckets that add up.

A load run's headline counts are only worth reading if they close: "573
speculations started" must be followed by where each of the 573 went, or a
reader cannot tell a leak from a bookkeeping gap. So each simulated user
files what it sees into one :class:`Ledger`, and :meth:`Ledger.result`
puts every item into exactly one named bucket:

* **turns** -- every planned round (sessions x ``--turns``): answered after
  a typed prompt or after Tab, ended in an error, in flight when the run was
  cut, or never started (cut by ``--duration`` or Ctrl-C, or the user
  stopped after an error);
* **suggestions** -- every suggestion shown (``SuggestionReady``) before the
  run ended: Tab (by the accept's outcome), typed over (after reading, or at
  once while its speculation ran), replaced by a newer one, shown after the
  user's last turn, or left when the run was cut;
* **speculations** -- every speculation the runtime admitted: each reported
  end (``SpeculationFinished``) by outcome, and those still open when the run
  ended (running, finished but unused, or ending), read from each session's
  status at that moment.

The total of each group is counted apart from its buckets (planned rounds;
suggestion events; the load governor's admissions), so a bucketing bug shows
as a sum that does not match -- the test of this module and the load test
assert the sums. Plain code with a lock: no actor, no I/O.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

CutReason = Literal["duration", "interrupt"]
LeaveReason = Literal["turns", "deadline", "error"]

TURN_BUCKETS: dict[str, str] = {
    "typed": "typed a prompt, answered",
    "tab": "pressed Tab, answered",
    "error": "ended in an error",
    "in_flight_duration": "in flight when --duration cut the run",
    "in_flight_interrupt": "in flight when Ctrl-C cut the run",
    "not_started_duration": "not started: cut by --duration",
    "not_started_interrupt": "not started: cut by Ctrl-C",
    "not_started_error": "not started: the user stopped after an error",
    "not_started_other": "not started: the user stopped early, unexplained (a bug)",
}
"""Every planned round ends in one of these."""

TAB_OUTCOMES: dict[str, str] = {
    "accepted": "Tab: speculation applied",
    "boundary": "Tab: applied up to its boundary, then continued",
    "conflict": "Tab: conflict with a user edit, ran as a normal turn",
    "stale": "Tab: stale, ran as a normal turn",
    "submitted": "Tab: not speculated (or empty), ran as a normal turn",
    "failed": "Tab: failed",
    "aborted": "Tab: called off (the user moved on)",
    "no_suggestion": "Tab: nothing shown any more",
    "debounced": "Tab: debounced (pressed again too soon)",
}

SUGGESTION_BUCKETS: dict[str, str] = {
    **{f"tab_{k}": v for k, v in TAB_OUTCOMES.items()},
    "tab_cut": "Tab pressed, no answer before the run was cut",
    "typed_over": "typed over after reading",
    "typed_during": "typed over at once, its speculation running (--type-during-p)",
    "replaced": "replaced by a newer suggestion before the user acted",
    "after_last_turn": "shown after the user's last turn",
    "cut_duration": "not acted on: cut by --duration",
    "cut_interrupt": "not acted on: cut by Ctrl-C",
    "after_error": "not acted on: the user stopped after an error",
}
"""Every suggestion shown ends in one of these."""

SPECULATION_BUCKETS: dict[str, str] = {
    "accepted": "applied by Tab",
    "boundary": "applied by Tab up to its boundary",
    "aborted_running": "aborted while running",
    "aborted_finished": "aborted after it had finished",
    "aborted_unstarted": "aborted before its run started",
    "stale": "stale (the session changed under it)",
    "conflict": "conflict with a user edit",
    "failed": "failed",
    "empty": "empty (no text, no tool calls)",
    "open_running": "still running when the run ended",
    "open_finished": "finished, never used when the run ended",
    "open_ending": "being aborted or applied when the run ended",
    "unreported": "admitted, but never reported or seen",
}
"""Every admitted speculation ends in one of these."""


def speculation_bucket(outcome: str, was_running: bool | None) -> str:
    """The bucket of a reported end (``SpeculationFinished.outcome``)."""
    if outcome == "aborted":
        if was_running is None:
            return "aborted_unstarted"
        return "aborted_running" if was_running else "aborted_finished"
    if outcome in SPECULATION_BUCKETS:
        return outcome
    return "failed"  # an outcome this version does not know: never dropped


def open_bucket(state: str | None) -> str:
    """The bucket of a speculation still open at the end, by its status then."""
    if state == "running":
        return "open_running"
    if state in ("completed", "boundary", "empty"):
        return "open_finished"
    return "open_ending"


@dataclass
class _User:
    planned: int
    typed: int = 0
    tabs: int = 0
    errors: int = 0
    in_round: bool = False
    left: LeaveReason | None = None
    pending: str | None = None
    """The suggestion on screen that the user has not acted on."""
    tab_pending: str | None = None
    """The suggestion Tab was pressed on, before its answer."""


@dataclass(frozen=True)
class Group:
    """One closed group: its independently counted total and its buckets."""

    total: int
    buckets: dict[str, int]
    labels: dict[str, str]

    @property
    def accounted(self) -> int:
        return sum(self.buckets.values())

    @property
    def closes(self) -> bool:
        return self.accounted == self.total

    def rows(self) -> list[tuple[str, int]]:
        """(label, count) of every non-empty bucket, in the buckets' order."""
        return [(self.labels[k], n) for k, n in self.buckets.items() if n]


@dataclass(frozen=True)
class Accounting:
    turns: Group
    suggestions: Group
    speculations: Group
    cut: CutReason | None

    @property
    def closes(self) -> bool:
        return self.turns.closes and self.suggestions.closes and self.speculations.closes

    def as_dict(self) -> dict[str, object]:
        return {
            name: {"total": g.total, "accounted": g.accounted, "buckets": dict(g.buckets)}
            for name, g in (
                ("turns", self.turns),
                ("suggestions", self.suggestions),
                ("speculations", self.speculations),
            )
        } | {"cut": self.cut, "closes": self.closes}


@dataclass
class Ledger:
    """What the simulated users saw, filed as it happens (thread-safe).

    Users are numbered; ids are the runtime's suggestion and speculation
    ids. After :meth:`freeze` nothing more is filed: the run has ended, and
    what was open then is counted as open.
    """

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _users: dict[int, _User] = field(default_factory=dict)
    _suggestions: dict[str, str | None] = field(default_factory=dict)
    """Suggestion id -> its bucket (``None``: still open)."""
    _speculations: dict[str, str | None] = field(default_factory=dict)
    shown: int = 0
    """Suggestions shown before the freeze, counted apart from their buckets."""
    frozen: CutReason | Literal["done"] | None = None

    # -- users and rounds -------------------------------------------------------------

    def user(self, index: int, planned: int) -> None:
        with self._lock:
            self._users[index] = _User(planned=planned)

    def round_began(self, index: int) -> None:
        with self._lock:
            if self.frozen is None:
                self._users[index].in_round = True

    def round_ended(self, index: int, how: Literal["typed", "tab", "error"]) -> None:
        with self._lock:
            user = self._users[index]
            if self.frozen is not None or not user.in_round:
                return
            user.in_round = False
            if how == "typed":
                user.typed += 1
            elif how == "tab":
                user.tabs += 1
            else:
                user.errors += 1

    def left(self, index: int, reason: LeaveReason) -> None:
        """The user stops playing (no more rounds): its turns budget, the deadline, an error."""
        with self._lock:
            user = self._users[index]
            if self.frozen is not None or user.left is not None:
                return
            user.left = reason
            if user.pending is not None:
                self._suggestions[user.pending] = _leave_bucket(reason)
                user.pending = None

    # -- suggestions --------------------------------------------------------------------

    def suggestion_shown(self, index: int, suggestion_id: str) -> None:
        with self._lock:
            if self.frozen is not None or suggestion_id in self._suggestions:
                return
            self.shown += 1
            user = self._users[index]
            if user.left is not None:
                self._suggestions[suggestion_id] = _leave_bucket(user.left)
                return
            if user.pending is not None:
                self._suggestions[user.pending] = "replaced"
            user.pending = suggestion_id
            self._suggestions[suggestion_id] = None

    def has_pending(self, index: int) -> bool:
        with self._lock:
            return self._users[index].pending is not None

    def typed_over(self, index: int, *, at_once: bool = False) -> None:
        """The user types instead of pressing Tab (on whatever suggestion is shown)."""
        with self._lock:
            user = self._users[index]
            if self.frozen is not None or user.pending is None:
                return
            self._suggestions[user.pending] = "typed_during" if at_once else "typed_over"
            user.pending = None

    def tab_pressed(self, index: int) -> None:
        with self._lock:
            user = self._users[index]
            if self.frozen is not None:
                return
            user.tab_pending, user.pending = user.pending, None

    def tab_answered(self, index: int, outcome: str) -> None:
        with self._lock:
            user = self._users[index]
            if self.frozen is not None or user.tab_pending is None:
                return
            bucket = f"tab_{outcome}" if f"tab_{outcome}" in SUGGESTION_BUCKETS else "tab_failed"
            self._suggestions[user.tab_pending] = bucket
            user.tab_pending = None

    # -- speculations -------------------------------------------------------------------

    def speculation_seen(self, speculation_id: str) -> None:
        with self._lock:
            if self.frozen is None:
                self._speculations.setdefault(speculation_id, None)

    def speculation_ended(
        self, speculation_id: str, outcome: str, was_running: bool | None
    ) -> None:
        with self._lock:
            if self.frozen is None:
                self._speculations[speculation_id] = speculation_bucket(outcome, was_running)

    # -- the end --------------------------------------------------------------------------

    def freeze(self, cut: CutReason | None) -> None:
        """The run has ended (``cut``: how, if the users did not all finish)."""
        with self._lock:
            if self.frozen is None:
                self.frozen = cut or "done"

    def result(
        self,
        open_states: Mapping[str, str | None] | None = None,
        admitted: int | None = None,
    ) -> Accounting:
        """Every item in one bucket (after :meth:`freeze`; calling it again gives the same).

        ``open_states``: each session's current speculation id -> its state,
        read after the freeze. ``admitted``: the load governor's count of
        admitted speculations, the independent total (``None``: what was seen).
        """
        open_states = open_states or {}
        with self._lock:
            cut: CutReason | None = None
            if self.frozen == "duration":
                cut = "duration"
            elif self.frozen == "interrupt":
                cut = "interrupt"
            stopped = cut or "duration"  # a user still playing at a normal end: impossible
            turns = dict.fromkeys(TURN_BUCKETS, 0)
            suggestions = dict.fromkeys(SUGGESTION_BUCKETS, 0)
            planned = 0
            for user in self._users.values():
                planned += user.planned
                turns["typed"] += user.typed
                turns["tab"] += user.tabs
                turns["error"] += user.errors
                played = user.typed + user.tabs + user.errors
                if user.in_round:
                    turns[f"in_flight_{stopped}"] += 1
                    played += 1
                rest = max(0, user.planned - played)
                if user.left == "error":
                    turns["not_started_error"] += rest
                elif user.left == "deadline":
                    turns["not_started_duration"] += rest
                elif user.left is None:
                    turns[f"not_started_{stopped}"] += rest
                else:  # it left having played all its turns: nothing should be left
                    turns["not_started_other"] += rest
                if user.pending is not None:
                    self._suggestions[user.pending] = f"cut_{stopped}"
                if user.tab_pending is not None:
                    self._suggestions[user.tab_pending] = "tab_cut"
            for bucket in self._suggestions.values():
                suggestions[bucket or f"cut_{stopped}"] += 1
            speculations = dict.fromkeys(SPECULATION_BUCKETS, 0)
            seen = dict(self._speculations)
            for spec_id, state in open_states.items():
                if seen.get(spec_id) is None:
                    seen[spec_id] = open_bucket(state)
            for spec_id, spec_bucket in seen.items():
                speculations[spec_bucket or open_bucket(open_states.get(spec_id))] += 1
            started = len(seen) if admitted is None else admitted
            speculations["unreported"] = max(0, started - len(seen))
            return Accounting(
                turns=Group(planned, turns, dict(TURN_BUCKETS)),
                suggestions=Group(self.shown, suggestions, dict(SUGGESTION_BUCKETS)),
                speculations=Group(started, speculations, dict(SPECULATION_BUCKETS)),
                cut=cut,
            )


def _leave_bucket(reason: LeaveReason) -> str:
    return {"turns": "after_last_turn", "deadline": "cut_duration", "error": "after_error"}[reason]
