"""What the mock is told and what it reports: settings, fault requests, stats, records.

The data types of the mock's control surface -- :class:`MockSettings` (server-wide
behaviour), :class:`FaultSpec` (``POST /mock/faults``), :class:`MockStats` (``GET
/mock/stats``), :class:`RecordedRequest` (``GET /mock/requests``) -- and the mutable
records and counters behind the last two. They are separate from the server so the
in-process and the spawned flavour, the CLI and both wire formats share one
definition, and a reader finds the control API in one place.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from pydantic import Field, JsonValue, field_validator

from fore.messages.base import Message

FaultKind = Literal[
    "500",
    "529",
    "429",
    "401",
    "400",
    "malformed",
    "truncated",
    "bad_tool_args",
    "stall",
    "cut",
    "reject_tool_choice",
    "stream_error",
    "linger",
    "not_sse",
]
"""The faults the server can inject."""


FAULT_KINDS: Final[tuple[str, ...]] = get_args(FaultKind)


Outcome = Literal[
    "in_progress",
    "completed",
    "truncated",
    "cut",
    "disconnected",
    "closed",
    "error",
    "bad_request",
]
"""How a recorded request ended.

``completed``: the whole response was sent (a stream up to ``[DONE]``, even
one carrying a ``malformed`` or ``bad_tool_args`` fault); ``truncated``: a
stream ended early on purpose; ``cut``: the connection was closed on purpose;
``disconnected``: the client went away first; ``closed``: the server shut
down mid-response; ``error``: an injected error (a status, a 200 that is not
the answer, or an error inside the stream); ``bad_request``: the request
itself was invalid.
"""


DEFAULT_SESSION: Final = "default"


DEFAULT_PURPOSE: Final = "main"


_MAX_RECENT_IDS: Final = 1000


@dataclass(frozen=True, slots=True)
class MockSettings:
    """Server-wide behaviour; per-reply and per-request values override the pacing."""

    ttft_ms: float = 0.0
    """Default time to first token."""
    tokens_per_s: float | None = None
    """Default token rate; ``None`` streams unpaced."""
    generated_words: int = 24
    """Length of the generated reply when no script is loaded."""
    tool_args_chunk_chars: int = 4
    """Size of the ``function.arguments`` fragments of streamed tool calls."""
    stall_s: float = 30.0
    """How long a ``stall`` fault stays silent (unless the fault says otherwise)."""
    retry_after_s: float = 1.0
    """``Retry-After`` of a ``429`` fault (unless the fault says otherwise)."""
    reject_forced_tool_choice: bool = False
    """Answer every request that forces a named function with the reject fault."""
    strict: bool = True
    """Refuse (400) what real servers refuse (see "Strictness" in the module docs).
    Off: a lenient server, for tests that deliberately exercise one."""
    max_output_tokens: int = 16_384
    """The model's output limit: a ``max_tokens`` above it is a 400 (strict mode)."""
    record_limit: int = 1000
    """How many requests :meth:`MockLlmApp.requests` keeps (oldest dropped)."""
    background_tick_ms: float = 0.0
    """Streams of background purposes (anything but ``main``) are written in ticks of
    this many ms: events due within one tick go out in one write. 0: every event at
    its own time, as a real server writes each token. The load benchmark sets it:
    there the mock shares the machine with the runtime it measures, and writing every
    fork's every token cost the mock several times the CPU of the runtime's own
    reading of them; a server that writes once per tick still notices a client that
    left within a tick."""

    def __post_init__(self) -> None:
        if self.ttft_ms < 0:
            raise ValueError(f"ttft_ms must be >= 0, got {self.ttft_ms}")
        if self.tokens_per_s is not None and self.tokens_per_s <= 0:
            raise ValueError(f"tokens_per_s must be > 0, got {self.tokens_per_s}")
        if self.generated_words < 0:
            raise ValueError(f"generated_words must be >= 0, got {self.generated_words}")
        if self.tool_args_chunk_chars < 1:
            raise ValueError(
                f"tool_args_chunk_chars must be >= 1, got {self.tool_args_chunk_chars}"
            )
        if self.stall_s < 0:
            raise ValueError(f"stall_s must be >= 0, got {self.stall_s}")
        if self.retry_after_s < 0:
            raise ValueError(f"retry_after_s must be >= 0, got {self.retry_after_s}")
        if self.record_limit < 1:
            raise ValueError(f"record_limit must be >= 1, got {self.record_limit}")
        if self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {self.max_output_tokens}")
        if not self.background_tick_ms >= 0:
            raise ValueError(f"background_tick_ms must be >= 0, got {self.background_tick_ms}")


class FaultSpec(Message):
    """Faults queued for the next ``count`` matching requests (``POST /mock/faults``).

    A request matches when ``session`` is absent or equals its
    ``X-Fore-Session``; a ``reject_tool_choice`` fault additionally matches
    only requests whose ``tool_choice`` names a function.
    """

    fault: FaultKind
    count: int = Field(default=1, ge=1)
    retry_after: float | None = Field(default=None, ge=0)
    session: str | None = None
    stall_s: float | None = Field(default=None, ge=0)

    @field_validator("fault", mode="before")
    @classmethod
    def _status_as_text(cls, value: object) -> object:
        """Accept ``500`` as well as ``"500"`` (JSON authors write both)."""
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class MockStats(Message):
    """Counters of the server since start or the last reset."""

    requests: int = 0
    """Chat-completion requests received (including bad ones)."""
    streams_started: int = 0
    """Streaming responses begun (status 200)."""
    streams_completed: int = 0
    """Streams sent through ``[DONE]``."""
    completions: int = 0
    """Non-streaming 200 responses sent in full."""
    disconnects: int = 0
    """Requests whose client went away before the response was complete."""
    faults_served: int = 0
    faults_by_kind: dict[str, int] = Field(default_factory=dict)
    bad_requests: int = 0
    """Requests refused because the request itself was invalid."""
    in_flight: int = 0
    max_in_flight: int = 0
    disconnected_request_ids: tuple[str, ...] = ()
    """``X-Fore-Request-Id`` of disconnected requests (most recent last, bounded)."""


class RecordedRequest(Message):
    """One request as it arrived on the wire, and how it ended."""

    seq: int
    session: str
    purpose: str
    request_id: str | None
    stream: bool
    fault: str | None
    outcome: Outcome
    body: JsonValue
    """The parsed JSON body (``None`` when the body was not JSON)."""
    headers: dict[str, str]
    """All request headers, lower-cased names (the last value of repeated ones)."""
    ttft_s: float | None = None
    """The pause the server put before the first token (``None``: no answer was planned,
    e.g. an error status); lets tests check the latency model without a clock."""
    token_interval_s: float | None = None
    """The pause the server put between later deltas (0: unpaced)."""
    peer: str | None = None
    """``host:port`` of the client's end of the connection: requests that share it came
    over one reused connection."""
    arrived_s: float | None = None
    """When the request arrived, on the server's ``time.monotonic()`` clock: the gap
    between two requests' arrivals shows a client's retry spacing (e.g. that it
    waited at least a ``Retry-After``) without a clock in the test."""


@dataclass(slots=True)
class _Record:
    seq: int
    session: str
    purpose: str
    request_id: str | None
    body: Any
    headers: dict[str, str]
    stream: bool = False
    fault: str | None = None
    outcome: Outcome = "in_progress"
    finished: bool = False
    ttft_s: float | None = None
    token_interval_s: float | None = None
    peer: str | None = None
    arrived_s: float | None = None

    def snapshot(self) -> RecordedRequest:
        return RecordedRequest(
            seq=self.seq,
            session=self.session,
            purpose=self.purpose,
            request_id=self.request_id,
            stream=self.stream,
            fault=self.fault,
            outcome=self.outcome,
            body=self.body,
            headers=self.headers,
            ttft_s=self.ttft_s,
            token_interval_s=self.token_interval_s,
            peer=self.peer,
            arrived_s=self.arrived_s,
        )


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    streams_started: int = 0
    streams_completed: int = 0
    completions: int = 0
    disconnects: int = 0
    faults_served: int = 0
    faults_by_kind: dict[str, int] = field(default_factory=dict)
    bad_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    disconnected_ids: deque[str] = field(default_factory=lambda: deque(maxlen=_MAX_RECENT_IDS))
