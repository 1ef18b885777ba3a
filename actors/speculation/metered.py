"""A speculation's view of its model provider: usage per request, and its live spend.

The speculation's worker owns its LLM requests (it sends and cancels them),
but three facts about them belong to the speculation:

* its token budget is enforced while a request streams, not after: the
  worker reports usage only when its run ends, which is too late to stop a
  runaway run, and even a request's own usage arrives only at its end. So
  the spend is tracked live -- completed requests' usage plus an estimate for
  the request in flight -- and the speculation's controller is told the
  moment it passes the budget (:class:`~messages.speculation.TokenBudgetReached`,
  naming the speculation: one controller runs many);
* tokens spent on a stream that never completes (cancelled by an abort or a
  budget, or failed) still cost money: they are estimated and counted, so the
  waste of a discarded speculation is not under-reported;
* a cancelled stream's estimate is final only once the stream is really gone
  (its task finished and its connection closed): the controller reads
  :meth:`MeteredModel.spent` for an abort's report after the run's scope has
  settled (when the overlay goes).

**The budget travels with each request** as well: ``max_tokens`` is capped
at what the budget leaves after the spend so far and this request's prompt
(and at the model's output limit, ``max_output_tokens`` of the provider, when
that is lower -- providers reject a ``max_tokens`` above it), so the provider
itself stops there. An answer cut at the budget's cap (``finish_reason``
length) has reached the budget; one cut at the model's limit has not. For a
request that is not streamed (``SpeculationConfig.stream_forks`` off) that is
the only check -- it shows nothing until it ends -- and a cancelled one is
counted at its prompt's estimate: its partial output never reached us.

**The estimate.** Without usage from the provider, a request is taken to cost
one token per :data:`CHARS_PER_TOKEN` characters of its prompt (message
texts, tool-call arguments, tool results; the tool definitions are left out,
they are the cached part of every fork's prefix) plus one per
:data:`CHARS_PER_TOKEN` characters streamed back (text and tool-call
fragments), rounded up. That is the usual rule of thumb for English text and
code with BPE tokenizers; it is a cost estimate, not an exact count.

The gateway's loop calls ``stream`` once per attempt of every request, so
wrapping the provider object is the one place that sees all of this, without
the worker or the gateway knowing anything about speculation. The wrapper
keeps the wrapped provider's behaviour (name, retry policy, replies) unchanged.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx

from fore.actors.core.continuations import tell_quietly
from fore.actors.llm.errors import llm_error
from fore.actors.llm.models import Emit, StreamResult
from fore.actors.speculation.governor import LoadGovernor

# The estimate lives with the usage ledger (a lower layer: usage limits use it too).
from fore.actors.telemetry.usage import CHARS_PER_TOKEN, estimate_tokens
from fore.messages.conversation import AssistantMessage, ToolResult
from fore.messages.llm import LlmRequest, LlmTextDelta, LlmToolCallDelta, Usage
from fore.messages.speculation import SpeculationUsage, TokenBudgetReached


def prompt_chars(request: LlmRequest) -> int:
    """The characters of a request's messages that the estimate counts (module docs)."""
    total = 0
    for message in request.messages:
        text = getattr(message, "text", None)
        if isinstance(text, str):
            total += len(text)
        if isinstance(message, ToolResult):
            total += len(message.output)
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                total += len(call.name) + len(json.dumps(call.arguments, default=str))
    return total


def streamed_chars(event: Any) -> int:
    """Characters one stream event carries (a text flush or a tool-call fragment)."""
    if isinstance(event, str):
        return len(event)
    if isinstance(event, LlmTextDelta):
        return len(event.text)
    if isinstance(event, LlmToolCallDelta):
        return sum(len(str(getattr(event, f, "") or "")) for f in ("name", "arguments_delta"))
    return 0


class _Stream:
    """One attempt in flight: its prompt estimate and what has streamed so far."""

    __slots__ = ("prompt", "streamed")

    def __init__(self, prompt: int) -> None:
        self.prompt = prompt
        self.streamed = 0

    def estimate(self) -> int:
        return estimate_tokens(self.prompt) + estimate_tokens(self.streamed)


class MeteredModel:
    """Wraps a provider object for one speculation (see module docs).

    ``stream`` runs on the LLM loop's thread; everything else may be called
    from any actor. The small amount of shared state is behind a lock and
    every notification is a ``tell`` (never a call into an actor).
    """

    def __init__(
        self,
        inner: Any,
        usage_to: Any,
        *,
        token_budget: int | None = None,
        governor: LoadGovernor | None = None,
        speculation_id: str = "",
    ) -> None:
        self.inner = inner
        self.speculation_id = speculation_id
        """Named in every message to ``usage_to`` (one controller runs many speculations)."""
        self._governor = governor
        """Each request first waits for headroom under it (:mod:`actors.speculation.governor`)."""
        self._usage_to = usage_to
        self._budget = token_budget
        self._lock = threading.Lock()
        self._in_flight: list[_Stream] = []
        self._spent = 0
        self._estimated = 0
        self._budget_told = False
        self._closed = False

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
        if self._governor is not None:
            await self._governor.wait_for_headroom()
        current = _Stream(prompt_chars(request))
        with self._lock:
            if self._closed:
                # A request that reaches the loop after the speculation ended
                # (it was queued before the cancel) never touches the network.
                raise llm_error("connection", "the speculation has ended", retryable=False)
            self._in_flight.append(current)
            cap = self._output_cap(current)
        self._check_budget()
        limit = _model_limit(self.inner)
        bound = min((c for c in (cap, limit) if c is not None), default=None)
        if bound is not None and (request.max_tokens is None or request.max_tokens > bound):
            request = request.model_copy(update={"max_tokens": bound})
            if cap is not None and bound < cap:
                cap = None  # the model's limit binds: a cut there is not the budget's
        else:
            cap = None  # the request's own limit is the tighter one

        def metered_emit(event: Any) -> None:
            chars = streamed_chars(event)
            if chars:
                with self._lock:
                    current.streamed += chars
                self._check_budget()
            if isinstance(event, str | LlmTextDelta):
                # Counted, not passed on: nobody reads a speculation's text as it
                # streams (its answer arrives whole in LlmCompleted), and each piece
                # would be two actor messages (to the worker, on to its controller).
                return
            emit(event)

        result: StreamResult | None = None
        try:
            result = await self.inner.stream(request, metered_emit, http)
        finally:
            # Reached after the provider unwound, i.e. after its connection closed
            # (also on cancellation, which arrives here as CancelledError).
            self._ended(current, None if result is None else result.usage)
        if result is not None:
            tell_quietly(
                self._usage_to,
                SpeculationUsage(
                    speculation_id=self.speculation_id,
                    request_id=request.request_id,
                    usage=result.usage,
                ),
            )
            # An answer cut at the cap: the provider stopped at what the budget left.
            self._check_budget(reached=cap is not None and result.finish_reason == "length")
        return result

    # -- accounting -------------------------------------------------------------------

    def spent(self) -> tuple[int, int]:
        """``(tokens, of which estimated)``: every ended attempt plus those in flight."""
        with self._lock:
            live = sum(s.estimate() for s in self._in_flight)
            return self._spent + live, self._estimated + live

    def _output_cap(self, current: _Stream) -> int | None:
        """Completion tokens the budget leaves ``current`` (under the lock; None: no budget)."""
        if self._budget is None:
            return None
        others = sum(s.estimate() for s in self._in_flight if s is not current)
        left = self._budget - self._spent - others - current.estimate()
        return max(1, left)

    def _check_budget(self, *, reached: bool = False) -> None:
        """Tell the controller once the spend passes the budget (or it is ``reached``)."""
        budget = self._budget
        if budget is None:
            return
        with self._lock:
            if self._budget_told:
                return
            total = self._spent + sum(s.estimate() for s in self._in_flight)
            if total <= budget and not reached:
                return
            self._budget_told = True
        tell_quietly(
            self._usage_to, TokenBudgetReached(speculation_id=self.speculation_id, spent=total)
        )

    # -- the end ---------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse every later stream (the speculation has ended)."""
        with self._lock:
            self._closed = True

    def _ended(self, stream: _Stream, usage: Usage | None) -> None:
        with self._lock:
            self._in_flight.remove(stream)
            if usage is not None:
                self._spent += usage.total_tokens
            else:
                estimate = stream.estimate()
                self._spent += estimate
                self._estimated += estimate


def _model_limit(model: Any) -> int | None:
    """The provider's output limit (``OpenAICompatible.max_output_tokens``), if it has one."""
    limit = getattr(model, "max_output_tokens", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


__all__ = [
    "CHARS_PER_TOKEN",
    "MeteredModel",
    "SpeculationUsage",
    "estimate_tokens",
    "prompt_chars",
]
