"""The order a session's user inputs start in on its shard, whatever order Ray runs them in.

In one process a session keeps the order the user gave its inputs by
:class:`~fore.supervision.input_order.InputOrder`: a key typed after a Tab or a
submit waits for it -- provided the Tab or submit *entered* that order first.
Over Ray that is not given: Ray does not run an async actor's calls in the
order they were made, not even one caller's, and a keystroke and a Tab run on
different event loops of the shard (``calls.CONTROL_METHODS``). A key typed
after Tab could start first on the shard and abort the speculation the Tab
was sent to accept.

So the caller numbers each user input of a session -- submit, Tab, keystroke,
cancel -- from 0 for each hosting of the session (``Placement.inputs``: a
session moved to another shard starts again at 0 there, as the shard's
:class:`InputSequence` does), and the shard starts them in that order:
:meth:`InputSequence.arrive` starts an input whose number is the next one at
once, and holds one that is ahead until those before it have started.

An earlier input may never come: its Ray call was cancelled before it ran, its
caller died, serialising it failed. So nothing is held for longer than
:data:`HOLD_S`: :meth:`InputSequence.expire` gives up on the missing numbers
before an input held that long and lets it (and what follows it) start. An
input known never to start (:meth:`InputSequence.withdraw`: its call was
cancelled while held, or its caller cancelled it before it ran here --
``RemoteSession.aaccept`` then tells the shard, ``ShardServer.withdraw``) lets
the next ones go at once. An input whose number was
given up on and arrives after all starts at once: late, but not lost. One whose
number was withdrawn and arrives after all (``ray.cancel`` did not stop the call)
is refused (:class:`~fore.errors.InputWithdrawn`): its caller stopped waiting
for it, and a Tab started behind the keys typed after it would apply a
speculation nobody accepted. The last :data:`MAX_WITHDRAWN` withdrawn numbers
are remembered for that. One withdrawn while it is held here (it arrived ahead
of its turn) is refused at once: its ``refuse`` callback is called, so whoever
waits for it hears :class:`~fore.errors.InputWithdrawn` now rather than when its
own deadline passes. Withdrawals ahead of the next number leave a marker each
until their turn; at most :data:`MAX_WITHDRAWN` are kept (past that one is
declined, and that input, should it come, waits its turn like any other).

Plain code, no actor, no event loop: starting an input is a callback, called
under the sequence's lock (so two inputs released by different threads start
in number order), with ``late`` telling whether it starts in its own
:meth:`~InputSequence.arrive` call or later, from another's. The hot path --
the next number arrives, nothing held -- is one uncontended lock and the call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from fore.actors.core.logs import get_logger
from fore.errors import InputWithdrawn

log = get_logger(__name__)

__all__ = ["HOLD_S", "MAX_WITHDRAWN", "InputSequence", "Refuse", "Start"]

HOLD_S = 1.0
"""The longest an input waits for the ones numbered before it (then they are given up on)."""

MAX_WITHDRAWN = 256
"""How many withdrawn numbers are remembered (and refused) once their turn has passed,
and how many withdrawals ahead of the next number are kept until it comes."""

Start = Callable[[bool], None]
"""Starts one input; its argument is ``late``: called after its ``arrive`` returned."""

Refuse = Callable[[InputWithdrawn], None]
"""Tells a held input's waiter that it was withdrawn (called under the sequence's lock)."""


@dataclass
class _Held:
    start: Start | None
    """``None``: withdrawn (its turn passes without starting anything)."""
    deadline: float
    refuse: Refuse | None = None


class InputSequence:
    """The next input number to start on one hosting of a session, and those ahead of it."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._next = 0
        self._held: dict[int, _Held] = {}
        self._withdrawn: dict[int, None] = {}
        """Withdrawn numbers whose turn has passed, oldest first (an ordered set)."""

    @property
    def withdrawn(self) -> frozenset[int]:
        """The withdrawn numbers whose turn has passed that are still refused."""
        with self._lock:
            return frozenset(self._withdrawn)

    @property
    def next(self) -> int:
        """The number that starts as soon as it arrives."""
        return self._next

    @property
    def held(self) -> tuple[int, ...]:
        """The numbers waiting for earlier ones, in order (not those withdrawn)."""
        with self._lock:
            return tuple(sorted(n for n, h in self._held.items() if h.start is not None))

    def next_deadline(self) -> float | None:
        """When the earliest held input stops waiting (``None``: nothing is held)."""
        with self._lock:
            return min((h.deadline for h in self._held.values()), default=None)

    def arrive(self, number: int, start: Start, now: float, refuse: Refuse | None = None) -> bool:
        """Input ``number`` arrived: start it now (True), or hold it until its turn (False).

        Started now with every held input it unblocks, in order. An exception of
        ``start`` itself is raised (after the others have started); one of an
        input started on its behalf is logged (its caller has returned). A withdrawn
        number never starts: :class:`~fore.errors.InputWithdrawn` -- raised here, or,
        if it is withdrawn while held, given to ``refuse`` (none: it is just dropped).
        """
        with self._lock:
            held = self._held.get(number)
            if number in self._withdrawn or (held is not None and held.start is None):
                log.info("withdrawn_input_refused", number=number)
                raise InputWithdrawn(number)
            if number < self._next:
                log.warning("input_started_late", number=number, expected=self._next)
                start(False)
                return True
            if number > self._next:
                self._held[number] = _Held(start, now + self.hold_s, refuse)
                return False
            self._next += 1
            try:
                start(False)
            finally:
                self._release()
            return True

    def withdraw(self, number: int) -> bool:
        """Input ``number`` will never start (its call was cancelled, or is known lost).

        True if it had not started: its turn passes and the inputs after it go
        on; if it is held, its ``refuse`` is called. False if it had started (or
        was given up on), or if it is ahead of the next number and
        :data:`MAX_WITHDRAWN` withdrawals ahead are kept already: nothing changes.
        """
        with self._lock:
            if number < self._next:
                return False
            if number == self._next:
                self._held.pop(number, None)
                self._next += 1
                self._remember_withdrawn(number)
                self._release()
                return True
            held = self._held.get(number)
            if held is None:
                ahead = sum(1 for h in self._held.values() if h.start is None)
                if ahead >= MAX_WITHDRAWN:
                    log.warning("withdrawal_ahead_declined", number=number, next=self._next)
                    return False
                self._held[number] = _Held(None, float("inf"))
            elif held.start is not None:
                self._held[number] = _Held(None, held.deadline)
                if held.refuse is not None:
                    self._refuse(held.refuse, number)
            return True

    def expire(self, now: float) -> tuple[int, ...]:
        """Give up on the missing numbers before every input held past its deadline and
        start what that lets go; returns the numbers given up on (for the log)."""
        with self._lock:
            due = [n for n, h in self._held.items() if h.start is not None and h.deadline <= now]
            if not due:
                return ()
            last = max(due)
            skipped = tuple(n for n in range(self._next, last) if n not in self._held)
            # Everything up to the last due input starts (in order), gaps and all.
            while self._next <= last:
                held = self._held.pop(self._next, None)
                self._next += 1
                if held is not None:
                    self._pass(self._next - 1, held)
            self._release()
            return skipped

    def _release(self) -> None:
        """Start the held inputs that are next in turn (under the lock)."""
        while self._next in self._held:
            held = self._held.pop(self._next)
            self._next += 1
            self._pass(self._next - 1, held)

    def _pass(self, number: int, held: _Held) -> None:
        """Input ``number``'s turn has come: start it, or remember it was withdrawn."""
        if held.start is None:
            self._remember_withdrawn(number)
        else:
            self._start_late(held.start)

    def _remember_withdrawn(self, number: int) -> None:
        """Refuse ``number`` should it arrive after all (the oldest are forgotten)."""
        self._withdrawn[number] = None
        if len(self._withdrawn) > MAX_WITHDRAWN:
            del self._withdrawn[next(iter(self._withdrawn))]

    @staticmethod
    def _refuse(refuse: Refuse, number: int) -> None:
        try:
            refuse(InputWithdrawn(number))
        except Exception as exc:  # its waiter's business: the log has it
            log.warning("withdrawn_input_refuse_failed", number=number, error=repr(exc))

    @staticmethod
    def _start_late(start: Start) -> None:
        try:
            start(True)
        except Exception as exc:  # its caller has returned or waits: the log has it
            log.warning("held_input_start_failed", error=repr(exc))
