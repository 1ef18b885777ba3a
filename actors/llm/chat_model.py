"""What a model provider is to Fore: the :class:`ChatModel` protocol and what it shares.

The gateway runs ``await model.stream(request, emit, http)`` and gets a
:class:`StreamResult`; ``emit`` (:data:`Emit`) receives the deltas. Beside the protocol
are the configuration types every provider takes -- :class:`RetryPolicy`,
:class:`Timeouts`, :data:`StructuredOutput`. They live apart from any one provider so the
offline models (:mod:`~fore.actors.llm.offline`), the OpenAI-compatible client
(:mod:`~fore.actors.llm.models`) and the Anthropic one depend on the contract, not on
each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast, get_args, runtime_checkable

import httpx

from fore.messages.conversation import AssistantMessage
from fore.messages.llm import LlmRequest, Usage

Emit = Callable[[Any], None]
"""Receives a model's stream events: LlmTextDelta / LlmToolCallDelta, or a plain ``str``
for text (the gateway builds one message per coalesced flush, not one per token)."""


StructuredOutput = Literal["auto", "json_schema", "tool"]
"""How a model is asked for structured output (``submit(output_type=...)``, actors.output):
the provider's JSON-schema response format, a ``final_answer`` tool, or ``auto`` --
the response format, and the tool if the provider refuses the format."""


def _structured_output(value: str) -> StructuredOutput:
    if value not in get_args(StructuredOutput):
        raise ValueError(
            f"structured_output must be 'auto', 'json_schema' or 'tool', got {value!r}"
        )
    return cast(StructuredOutput, value)


@dataclass(frozen=True)
class StreamResult:
    """A completed answer."""

    message: AssistantMessage
    usage: Usage
    finish_reason: str
    response_model: str | None = None
    """The model the provider says answered (its ``model`` field), for telemetry."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retries with exponential backoff and jitter, within a bounded budget."""

    max_retries: int = 3
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    jitter: float = 0.25
    max_total_wait: float = 30.0


@dataclass(frozen=True)
class Timeouts:
    """How long each phase of a request may take (seconds).

    A model may think for a long time before its first token and then stream
    quickly, so the two waits are separate: ``first_byte`` bounds a streaming
    attempt from its start (connecting and sending included) to the first
    event, headers included; ``idle`` bounds every later gap between events,
    so a stream that stalls mid-answer is given up long before a slow first
    token would be. ``connect`` and ``write`` bound opening the connection and
    sending the body.

    A stream that keeps sending but never says anything -- empty deltas,
    keep-alive comments -- satisfies ``idle`` forever, so two more deadlines
    bound it: ``no_progress``, the longest gap between chunks that carry
    something (text, a tool call, reasoning, a finish reason), and ``total``,
    the whole attempt, streamed or not (a non-streamed answer arrives in one
    piece only when it is complete, so ``total`` is its only deadline after
    connecting). Each ends the attempt with a ``timeout`` error whose
    ``deadline`` names it (``LlmError.deadline``).

    ``after_done`` is how long to keep reading after ``[DONE]`` for the end of
    the body: reading to the end lets the connection go back to the pool, and
    a server that ends the body promptly (all of them, normally) does so well
    within it. One that keeps the body open must not turn a complete answer
    into an idle timeout, so the answer stands and that connection is closed.
    """

    connect: float = 10.0
    first_byte: float = 60.0
    idle: float = 30.0
    write: float = 30.0
    total: float = 600.0
    no_progress: float = 60.0
    after_done: float = 0.1

    def __post_init__(self) -> None:
        for name in ("connect", "first_byte", "idle", "write", "total", "no_progress"):
            value = getattr(self, name)
            if not value > 0 or value == float("inf"):
                raise ValueError(f"Timeouts.{name} must be a positive number, got {value!r}")
        if not self.after_done >= 0:
            raise ValueError(f"Timeouts.after_done must be >= 0, got {self.after_done!r}")


@runtime_checkable
class ChatModel(Protocol):
    """What the gateway needs from a model provider."""

    name: str
    retry: RetryPolicy

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        """Answer ``request``, emitting deltas as they arrive; raise LlmException on failure."""
        ...
