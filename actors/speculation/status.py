"""Speculation status events: push what ``s.speculation`` would answer, when it changes.

A front end shows what the speculation behind the grey suggestion is doing
(*speculating: 2 calls, 1 file* → *ready* / *stopped at shell: why* /
*aborted*). Polling ``Session.speculation`` for it costs an ask per poll and
still lags; instead the session supervisor hands this publisher the status
after every message it handles, and the publisher emits a
:class:`~messages.speculation.SpeculationStatusChanged` only when the status or
the suggestion on offer differ from the last one sent. Checking after *every*
message -- rather than at each place that changes the state -- means no
transition can be forgotten, and comparing first keeps a run of messages that
change nothing (LLM retries, snapshots without a suggestion) silent.

The supervisor builds the status without validation
(``SpeculationStatus.model_construct``: every field is its own, already
typed), so the check costs a few microseconds per message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fore.messages.speculation import SpeculationStatus, SpeculationStatusChanged


class StatusEvents:
    """Emits a :class:`SpeculationStatusChanged` for each change (see the module docs)."""

    def __init__(self, session_id: str, emit: Callable[[Any], None]) -> None:
        self.session_id = session_id
        self._emit = emit
        self._last: tuple[SpeculationStatus, str | None] = (IDLE, None)
        """What was last sent; at first the state before any suggestion (not an event)."""
        self.sent = 0
        """Events sent so far (telemetry, tests)."""

    def publish(self, status: SpeculationStatus, shown: str | None) -> bool:
        """Emit ``status`` and the suggestion on offer unless both are unchanged."""
        if (status, shown) == self._last:
            return False
        self._last = (status, shown)
        self._emit(SpeculationStatusChanged(session_id=self.session_id, status=status, shown=shown))
        self.sent += 1
        return True


IDLE = SpeculationStatus()
"""A session's status before its first suggestion."""
