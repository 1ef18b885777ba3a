"""A speculation's view of its model provider: usage per request, and when no stream is left.

The speculation's worker owns its LLM requests (it sends and cancels them),
but two facts about them belong to the speculation:

* its token budget is enforced from the usage of *each* completed request --
  the worker reports usage only when its run ends, which is too late to stop
  a runaway run;
* an abort must not remove the overlay before the LLM stream is really gone
  (the task finished and its connection closed), not merely asked to stop.

The gateway's loop calls ``stream`` once per attempt of every request, so
wrapping the provider object is the one place that sees both, without the
worker or the gateway knowing anything about speculation. The wrapper keeps
the wrapped provider's behaviour (name, retry policy, replies) unchanged.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
from pykka import ActorDeadError

from actors.llm.errors import llm_error
from actors.llm.models import Emit, StreamResult
from messages.llm import LlmRequest
from messages.speculation import SpeculationUsage, StreamsIdle


class MeteredModel:
    """Wraps a provider object for one speculation (see module docs).

    ``stream`` runs on the LLM loop's thread; everything else may be called
    from any actor. The small amount of shared state is behind a lock and
    every notification is a ``tell`` (never a call into an actor).
    """

    def __init__(self, inner: Any, usage_to: Any) -> None:
        self.inner = inner
        self._usage_to = usage_to
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closed = False
        self._idle_waiters: list[tuple[Any, Any]] = []

    def __repr__(self) -> str:
        return f"MeteredModel({self.inner!r})"

    @property
    def name(self) -> str:
        return str(getattr(self.inner, "name", ""))

    @property
    def retry(self) -> Any:
        return self.inner.retry

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "inner":  # not set yet (copy, pickle): do not recurse
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        with self._lock:
            if self._closed:
                # A request that reaches the loop after the speculation ended
                # (it was queued before the cancel) never touches the network.
                raise llm_error("connection", "the speculation has ended", retryable=False)
            self._in_flight += 1
        try:
            result: StreamResult = await self.inner.stream(request, emit, http)
        finally:
            # Reached after the provider unwound, i.e. after its connection closed
            # (also on cancellation, which arrives here as CancelledError).
            self._ended()
        _tell(self._usage_to, SpeculationUsage(request_id=request.request_id, usage=result.usage))
        return result

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def close(self) -> None:
        """Refuse every later stream (the speculation has ended)."""
        with self._lock:
            self._closed = True

    def when_idle(self, address: Any, message: Any) -> None:
        """Tell ``address`` ``message`` once no stream is in flight (at once if none is)."""
        with self._lock:
            if self._in_flight:
                self._idle_waiters.append((address, message))
                return
        _tell(address, message)

    def _ended(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight or not self._idle_waiters:
                return
            waiters, self._idle_waiters = self._idle_waiters, []
        for address, message in waiters:
            _tell(address, message)


def _tell(address: Any, message: Any) -> None:
    try:
        address.tell(message)
    except ActorDeadError:
        pass


__all__ = ["MeteredModel", "SpeculationUsage", "StreamsIdle"]
