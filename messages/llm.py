"""LLM messages: requests to the gateway and the stream events it sends back.

A request is answered by zero or more deltas (:class:`LlmTextDelta`,
:class:`LlmToolCallDelta`, possibly an :class:`LlmRetrying` that voids the
deltas before it) and then exactly one terminal event: :class:`LlmCompleted`,
:class:`LlmFailed` or :class:`LlmCancelled`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, JsonValue

from fore.actors.core.cancel import CancelScope
from fore.messages.base import Message
from fore.messages.conversation import AssistantMessage, Item
from fore.messages.tools import ToolDefinition

Purpose = Literal["main", "suggestion", "speculation", "pipelined"]
"""Why a request is made (the mock server and scripted models match on it)."""


class NamedToolChoice(Message):
    """Force the model to call one named tool."""

    kind: Literal["tool"] = "tool"
    name: str = Field(min_length=1)


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice


class ResponseSchema(Message):
    """Ask for an answer whose text is JSON matching ``json_schema`` (structured output).

    On the wire (:mod:`actors.llm.wire`) it is OpenAI's ``response_format:
    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``,
    which OpenAI, vLLM and llama.cpp's server enforce while decoding.
    ``strict`` asks the provider to follow the schema exactly; such a schema
    must list every property as required and forbid additional ones
    (:func:`actors.output.schema.strict_schema` builds it).
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    json_schema: dict[str, JsonValue]
    strict: bool = True


class Usage(Message):
    """Token accounting of one completed request (or a sum of them: ``a + b``).

    ``prompt_tokens`` is every input token the model read, cached or not, so
    that prompts compare across providers; of those, ``cached_tokens`` were
    read from the provider's prompt cache (OpenAI's
    ``prompt_tokens_details.cached_tokens``, Anthropic's
    ``cache_read_input_tokens``: billed at a fraction of the input price) and
    ``cache_write_tokens`` were written to it (Anthropic's
    ``cache_creation_input_tokens``: billed *above* the input price; OpenAI
    caches implicitly and reports none). The input billed at the full price
    is :attr:`uncached_input_tokens`.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    """Of ``prompt_tokens``: read from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Of ``prompt_tokens``: written to the provider's prompt cache by this request."""

    @property
    def uncached_input_tokens(self) -> int:
        """Input tokens billed at the full price: neither read from nor written to a cache."""
        return max(0, self.prompt_tokens - self.cached_tokens - self.cache_write_tokens)

    def __add__(self, other: Usage) -> Usage:
        """Field-wise sum (a run's usage over its requests)."""
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class LlmRequest(Message):
    """Start one model request on the gateway.

    ``model`` is the provider object (a ``ScriptedModel``, ``FunctionModel`` or
    ``OpenAICompatible`` from :mod:`actors.llm`) and ``reply_to`` the address
    the stream events go to; both are in-process references, excluded from
    JSON (and so is ``trace``, the parent span's context). ``model_name`` is the
    model identifier sent on the wire.

    Every request has a ``scope`` (:class:`~actors.core.cancel.CancelScope`):
    the sender's, or one made with the request. ``request.scope.cancel(reason)``
    cancels it wherever it is -- still in the gateway's mailbox (it is answered
    ``LlmCancelled`` and never sent), or streaming (its connection is closed) --
    with exactly one ``LlmCancelled``; cancelling after it ended does nothing.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    request_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)
    purpose: Purpose = "main"
    model_name: str = ""
    messages: tuple[Item, ...]
    tools: tuple[ToolDefinition, ...] = ()
    tool_choice: ToolChoice = "auto"
    stream: bool = True
    stream_deltas: bool = True
    """Send :class:`LlmTextDelta` events as text arrives (coalesced)."""
    stream_tool_deltas: bool = True
    """Send an :class:`LlmToolCallDelta` per tool-argument fragment.

    Only a UI that shows arguments as they stream needs these; the final
    :class:`LlmCompleted` carries every call assembled, so the worker opts out
    (a tool call's arguments arrive as dozens of fragments, each an actor
    message). Ignored when ``stream_deltas`` is false.
    """
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    json_response: bool = False
    response_schema: ResponseSchema | None = None
    """Structured output: the answer's text must be JSON matching this schema (wins
    over ``json_response``)."""
    model: Any = Field(default=None, exclude=True)
    reply_to: Any = Field(default=None, exclude=True)
    scope: CancelScope = Field(default_factory=CancelScope, exclude=True)
    """What cancels this request (in-process, like ``reply_to``): the scope of the work it
    belongs to (the worker's run), or -- when the sender gives none -- its own, made with
    the request, so whoever holds the request can cancel it at any time."""
    # -- telemetry (issue 28) --
    trace: Any = Field(default=None, exclude=True)
    """The OpenTelemetry context of the span this request belongs to (the turn's),
    in-process like ``reply_to``: the LLM loop makes its span a child of it
    (``actors.telemetry.tracing``). ``None`` when telemetry is off."""


class LlmTextDelta(Message):
    request_id: str
    text: str


class LlmToolCallDelta(Message):
    """A fragment of a streamed tool call (arguments arrive split anywhere)."""

    request_id: str
    index: int
    call_id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


class LlmRetrying(Message):
    """The request is being retried; the deltas of the failed attempt are void.

    ``discarded_chars`` is how much text the failed attempt had delivered as
    :class:`LlmTextDelta` (the retry streams its answer from the start).
    """

    request_id: str
    attempt: int
    delay_s: float
    reason: str
    discarded_chars: int = Field(default=0, ge=0)


class LlmCompleted(Message):
    """A complete answer.

    ``finish_reason`` is the provider's: ``stop`` / ``tool_calls`` for an answer the
    model ended itself, ``length`` for one the provider **cut off** at an output
    limit (``max_tokens``, or its context), ``content_filter`` ... A stream that ends
    without any finish reason is never completed: it fails with kind ``incomplete``.
    """

    request_id: str
    message: AssistantMessage
    usage: Usage = Usage()
    finish_reason: str = "stop"
    attempts: int = 1
    duration_s: float = 0.0


LlmErrorKind = Literal[
    "auth", "rate_limit", "bad_request", "server", "timeout", "protocol", "connection", "incomplete"
]
"""What failed. ``incomplete``: the answer ended before the model finished it (the
stream closed, or sent ``[DONE]``, without a ``finish_reason``); the message says how
much had arrived."""

Deadline = Literal["connect", "write", "pool", "first_byte", "idle", "no_progress", "total"]
"""Which of a request's deadlines (:class:`~actors.llm.models.Timeouts`) ran out."""


class LlmError(Message):
    """A typed failure; ``provider_message`` keeps what the provider said."""

    kind: LlmErrorKind
    message: str
    status: int | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    provider_message: str | None = None
    param: str | None = None
    deadline: Deadline | None = None
    """For kind ``timeout``: which deadline ran out."""


class LlmFailed(Message):
    request_id: str
    error: LlmError
    attempts: int = 1


class LlmCancelled(Message):
    request_id: str
    reason: str = "cancelled"


class GatewayStats(Message):
    """Counters of one LLM loop, or of a gateway's lanes summed (``lanes`` of them)."""

    in_flight: int
    started: int
    completed: int
    failed: int
    cancelled: int
    retries: int
    lanes: int = 1


class GetGatewayStats(Message):
    """Ask the LLM gateway for :class:`GatewayStats`."""
