"""A mock OpenAI-compatible Chat Completions server on 127.0.0.1 (``fore mock-llm``).

Tests and benchmarks need a model that runs offline *and* a real HTTP server,
so the real client path (connection pool, SSE parsing, timeouts, retries,
cancellation) is exercised exactly as against OpenAI, vLLM or llama.cpp. This
module is that server: starlette + uvicorn, serving either a scripted reply
file (:mod:`actors.llm.script`, the same format and matching rules as the
in-process ``ScriptedModel``) or deterministic generated text.

Wire protocol (``POST /v1/chat/completions``)
---------------------------------------------
The OpenAI request body (``model``, ``messages``, ``tools``, ``tool_choice``,
``stream``, ``stream_options.include_usage`` ...). ``stream: true`` answers
``text/event-stream``: a role chunk, ``delta.content`` chunks (word-ish tokens,
see :func:`actors.llm.script.stream_plan`), then per tool call one
``delta.tool_calls`` entry with ``index``, ``id``, ``type`` and
``function.name`` (empty ``arguments``) followed by ``function.arguments``
fragments of ``tool_args_chunk_chars`` characters, a final chunk with
``finish_reason`` (``"stop"`` / ``"tool_calls"``), a usage chunk
(``choices: []``) when ``stream_options.include_usage`` is true (every other
chunk then carries ``"usage": null``, as OpenAI does), and ``data: [DONE]``.
Otherwise a ``chat.completion`` JSON body. ``POST /v1/messages`` speaks Anthropic's
Messages API on the same script, faults and records, with its prompt-cache
accounting (:mod:`actors.llm.mock_anthropic`).

Request headers
---------------
``X-Fore-Session``      conversation key for script consumption (default ``default``)
``X-Fore-Purpose``      purpose matched against ``when.purpose`` (default ``main``)
``X-Fore-Request-Id``   labels the request in the records and stats
``X-Mock-TTFT-Ms``      time to first token for this request (a reply's own wins)
``X-Mock-Tokens-Per-S`` token rate for this request (a reply's own wins)
``X-Mock-Fault``        inject a fault into this request (see :data:`FAULT_KINDS`)
``X-Mock-Retry-After``  seconds for the ``Retry-After`` of an injected ``429``
``X-Mock-Stall-S``      how long an injected ``stall`` lasts
``X-Mock-Args-Chunk-Chars`` tool-argument fragment size for this request

Control endpoints
-----------------
``GET /mock/stats`` (:class:`MockStats`), ``GET /mock/requests`` (recorded
requests, arrival order, bounded ring), ``POST /mock/faults`` (a
:class:`FaultSpec`), ``POST /mock/reset``, ``POST /mock/script`` (a script in
the public format) / ``DELETE /mock/script`` (back to generated text),
``GET /mock/health`` and ``GET /v1/models``.

Faults (:data:`FAULT_KINDS`)
----------------------------
``500`` / ``401`` / ``400``  that status with an OpenAI-format error body;
``529``                      Anthropic's "overloaded" status (an ``overloaded_error`` body);
``429``                      status 429 with a ``Retry-After`` header (seconds);
``malformed``                a stream chunk that is not valid JSON (the stream goes on to
                             ``[DONE]``); non-streaming: a 200 body that is not JSON;
``truncated``                the stream ends cleanly after about half its chunks, with no
                             ``finish_reason`` and no ``[DONE]``; non-streaming: a cut-short
                             JSON body;
``bad_tool_args``            tool-call argument fragments that never form valid JSON (a
                             call is synthesised when the reply has none);
``stall``                    headers and the role chunk, then silence for ``stall_s``
                             (then the normal rest); ends early when the client leaves;
``cut``                      the connection is closed mid-stream (mid-body when not
                             streaming): the client sees an incomplete chunked body;
``reject_tool_choice``       400 ``invalid_request_error`` with ``param: "tool_choice"``,
                             only for requests whose ``tool_choice`` names a function
                             (other requests pass and do not use up a queued fault);
``stream_error``             about half the chunks, then an in-stream ``error`` chunk
                             (``invalid_request_error`` / ``context_length_exceeded``) and
                             the end of the body; non-streaming: that error with status 400;
``linger``                   the whole stream through ``[DONE]``, then the body stays open
                             for ``stall_s`` (ends early when the client leaves);
                             non-streaming: no effect;
``not_sse``                  status 200 with an HTML page instead of the answer (what a
                             misrouted proxy or captive portal sends).

A faulted request never consumes a scripted reply (faults serve a *peeked*
reply), so a client that retries gets the scripted answer.

Strictness
----------
The mock is at least as strict as the real servers Fore meets (OpenAI,
llama.cpp's server), so a test against it catches what they would refuse.
Always (400): ``n`` other than 1; a ``tool_choice`` without ``tools``, or naming
a function that is not among them; a ``response_format`` other than ``text`` /
``json_object`` / ``json_schema``, JSON mode without the word "json" in the
messages (OpenAI's rule), and a ``json_schema`` format OpenAI refuses (no name,
an invalid schema, or with ``strict`` a schema outside its structured-output
rules: :mod:`actors.llm.mock_schema`). Always honoured: a named ``tool_choice``
forces that call, ``none`` allows none, ``required`` at least one; JSON mode
answers a JSON object, a ``json_schema`` format JSON matching the schema.
Strict mode (the default; ``MockLlmServer(strict=False)`` / ``--lenient`` turns
it off for tests that deliberately exercise a lenient server), also 400: a
message whose ``content`` is not a string (``null`` on an assistant message with
tool calls -- OpenAI accepts it, llama.cpp-class servers answer 500), an orphan
``tool`` message or an unanswered tool call, and a ``max_tokens`` /
``max_completion_tokens`` above the model's output limit (``max_output_tokens``,
16,384 by default).

Running it
----------
In-process (tests): ``with MockLlmServer(script) as server: server.base_url``
-- uvicorn in a background thread with its own event loop. Separate process
(benchmarks that need their own GIL): ``with MockLlmServer.spawn(...) as
server:`` runs ``python -m actors.llm.mock_server --port 0`` and talks to the
control endpoints over HTTP; same API. The CLI is :func:`main`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import random
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Final, Literal, NoReturn, Protocol, Self, cast, get_args

import httpx
import uvicorn
from pydantic import Field, JsonValue, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fore.actors.core.logs import configure_logging, get_logger
from fore.actors.llm import evloop
from fore.actors.llm.mock_schema import conform, response_format_problem
from fore.actors.llm.script import (
    ScriptCursor,
    ScriptError,
    ScriptFile,
    ScriptReply,
    ScriptToolCall,
    arguments_json,
    last_user_or_tool_text,
    new_tool_call_id,
    split_fragments,
    stream_plan,
)
from fore.messages.base import Message

__all__ = [
    "DEFAULT_SESSION",
    "FAULT_KINDS",
    "PORT_LINE_PREFIX",
    "FaultKind",
    "FaultSpec",
    "MockLlmApp",
    "MockLlmControl",
    "MockLlmServer",
    "MockSettings",
    "MockStats",
    "Outcome",
    "RecordedRequest",
    "SpawnedMockLlmServer",
    "generated_text",
    "main",
]

log = get_logger(__name__)

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
PORT_LINE_PREFIX: Final = "MOCK_LLM_LISTENING"
"""The CLI's one stdout line: ``MOCK_LLM_LISTENING port=<n> base_url=<url>``."""

_PORT_LINE_RE = re.compile(rf"^{PORT_LINE_PREFIX} port=(\d+) ")
_ALLOWED_HOSTS: Final = ("127.0.0.1", "localhost")
_BACKLOG: Final = 4096
_MAX_RECENT_IDS: Final = 1000
_SHORT_SLEEP_S: Final = 0.2
_FLUSH_BYTES: Final = 32 * 1024


# --------------------------------------------------------------------------- #
# Settings, faults, stats, records
# --------------------------------------------------------------------------- #


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
class _QueuedFault:
    spec: FaultSpec
    remaining: int


@dataclass(frozen=True, slots=True)
class _Fault:
    kind: FaultKind
    retry_after_s: float
    stall_s: float


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


class _CutConnection(Exception):
    """Raised inside a response to make uvicorn abort the connection."""


class _DropCutConnectionLogs(logging.Filter):
    """Keeps uvicorn from logging a traceback for every deliberate cut."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BaseExceptionGroup):
            return not all(isinstance(e, _CutConnection) for e in exc.exceptions)
        return not isinstance(exc, _CutConnection)


_log_filter_installed = False
_log_filter_lock = threading.Lock()


def _install_log_filter() -> None:
    global _log_filter_installed
    with _log_filter_lock:
        if not _log_filter_installed:
            logging.getLogger("uvicorn.error").addFilter(_DropCutConnectionLogs())
            _log_filter_installed = True


# --------------------------------------------------------------------------- #
# Reply content helpers
# --------------------------------------------------------------------------- #

_VOCABULARY: Final = (
    "actor", "buffer", "cache", "delta", "event", "future", "gateway", "handle",
    "index", "journal", "kernel", "ledger", "mailbox", "node", "offset", "pool",
    "queue", "router", "stream", "token", "update", "vector", "worker", "yield",
    "the", "a", "of", "to", "and", "in", "is", "for", "with", "on", "then", "as",
)  # fmt: skip


def generated_text(words: int, seed: str) -> str:
    """Deterministic pseudo-words: the same ``seed`` always gives the same text.

    The mock seeds with the request's purpose and last user/tool text, so a
    retried request gets the same answer as the original.
    """
    if words <= 0:
        return ""
    rng = random.Random(hashlib.sha256(seed.encode("utf-8")).digest())
    picked = [rng.choice(_VOCABULARY) for _ in range(words)]
    picked[0] = picked[0].capitalize()
    return " ".join(picked) + "."


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _forced_function(body: Mapping[str, Any]) -> str | None:
    """The function name a request's ``tool_choice`` forces, if it names one."""
    choice = body.get("tool_choice")
    if not isinstance(choice, Mapping) or choice.get("type") != "function":
        return None
    function = choice.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return str(function["name"])
    name = choice.get("name")
    return name if isinstance(name, str) else "?"


def _first_tool_name(body: Mapping[str, Any]) -> str:
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            if isinstance(tool, Mapping):
                function = tool.get("function")
                if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                    return str(function["name"])
    return "mock_tool"


def _validate_body(body: Any) -> tuple[str, str | None] | None:
    """``(message, param)`` when the request body is not a usable chat request."""
    if not isinstance(body, dict):
        return "request body must be a JSON object", None
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "'model' is required and must be a non-empty string", "model"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' is required and must be a non-empty array", "messages"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{i}] must be an object with a string 'role'", f"messages[{i}]"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "'stream' must be a boolean", "stream"
    if "tools" in body and body["tools"] is not None and not isinstance(body["tools"], list):
        return "'tools' must be an array", "tools"
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            return f"'{name}' must be a positive integer", name
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        return "'n' must be a positive integer", "n"
    if isinstance(n, int) and n > 1:
        return "'n' > 1 is not supported by this server: one choice per request", "n"
    return _validate_tool_choice(body) or _validate_response_format(body)


def _tool_names(body: Mapping[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(str(function["name"]))
    return names


def _validate_tool_choice(body: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """A ``tool_choice`` a server can honour: a mode, or a function it was given."""
    if "tool_choice" not in body or body["tool_choice"] is None:
        return None
    choice = body["tool_choice"]
    if not body.get("tools"):
        return "'tool_choice' is only allowed when 'tools' are specified", "tool_choice"
    if choice in ("auto", "none", "required"):
        return None
    forced = _forced_function(body)
    if forced is None:
        return (
            "'tool_choice' must be 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if forced not in _tool_names(body):
        return f"tool_choice names {forced!r}, which is not among the tools", "tool_choice"
    return None


def _validate_response_format(body: Mapping[str, Any]) -> tuple[str, str | None] | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "json_schema":  # structured outputs, refused as OpenAI refuses them
        assert isinstance(fmt, Mapping)
        return response_format_problem(fmt)
    if kind not in ("text", "json_object"):
        return (
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'",
            "response_format",
        )
    if kind == "json_object":
        said = " ".join(_content_text(m.get("content")) for m in body["messages"])
        if "json" not in said.lower():
            # OpenAI's rule: JSON mode needs the word in the conversation.
            return (
                "'messages' must contain the word 'json' in some form to use"
                " 'response_format' of type 'json_object'",
                "messages",
            )
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _strict_problems(body: dict[str, Any], max_output_tokens: int) -> tuple[str, str | None] | None:
    """What a strict server (llama.cpp, OpenAI) refuses that a lenient one lets through.

    * a message whose ``content`` is not a string (a user or system message may
      also carry an array of parts): OpenAI accepts ``null`` on an assistant
      message with tool calls, but llama.cpp-class servers fail on it (their
      chat templates concatenate the content) -- the mock refuses it like them;
    * a ``tool`` message that answers no call of the assistant message before
      it (an orphan), answers one twice, or an assistant message whose calls
      are not all answered before the next other message;
    * ``max_tokens`` / ``max_completion_tokens`` above the model's output limit.
    """
    open_calls: set[str] | None = None  # calls of the last assistant message, unanswered
    for i, message in enumerate(body["messages"]):
        role = message["role"]
        content = message.get("content")
        if role not in ("system", "user", "assistant", "tool", "developer"):
            return f"messages[{i}].role {role!r} is not a chat role", f"messages[{i}].role"
        if not isinstance(content, str | list):  # a string, or an array of parts
            shown = "null" if content is None else type(content).__name__
            return (
                f"messages[{i}].content must be a string, got {shown}"
                + (
                    " (llama.cpp-class servers answer this with HTTP 500)"
                    if role == "assistant"
                    else ""
                ),
                f"messages[{i}].content",
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                return f"messages[{i}].tool_call_id is required", f"messages[{i}].tool_call_id"
            if open_calls is None or call_id not in open_calls:
                return (
                    f"messages[{i}] with role 'tool' must be a response to a preceding"
                    f" message with 'tool_calls' (no open call {call_id!r})",
                    f"messages[{i}]",
                )
            open_calls.discard(call_id)
            continue
        if open_calls:
            return (
                "an assistant message with 'tool_calls' must be followed by tool messages"
                f" responding to each 'tool_call_id'; unanswered: {sorted(open_calls)}",
                f"messages[{i}]",
            )
        open_calls = None
        if role == "assistant" and message.get("tool_calls"):
            calls = message["tool_calls"]
            ids = [
                c["id"]
                for c in (calls if isinstance(calls, list) else ())
                if isinstance(c, Mapping) and isinstance(c.get("id"), str) and c["id"]
            ]
            if not isinstance(calls, list) or len(ids) != len(calls):
                return (
                    f"messages[{i}].tool_calls must each have an 'id'",
                    f"messages[{i}].tool_calls",
                )
            open_calls = set(ids)
    if open_calls:
        return (
            "an assistant message with 'tool_calls' must be followed by tool messages"
            f" responding to each 'tool_call_id'; unanswered: {sorted(open_calls)}",
            "messages",
        )
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > max_output_tokens:
            return (
                f"'{name}' is too large: {value}. This model supports at most"
                f" {max_output_tokens} completion tokens",
                name,
            )
    return None


def _max_tokens(body: dict[str, Any]) -> int | None:
    """The request's cap on completion tokens (``max_completion_tokens`` wins, as at OpenAI)."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _obey(reply: ScriptReply, body: Mapping[str, Any]) -> ScriptReply:
    """The reply as a real server's answer would be shaped by the request.

    A named ``tool_choice`` forces exactly that call (the scripted call of that
    name, else one with no arguments) and no text; ``none`` allows no calls;
    ``required`` at least one (the first tool's, if the script has none). JSON
    mode (``response_format: json_object``) answers a JSON object: scripted
    text that is not one is wrapped as ``{"text": ...}``. A JSON-schema format
    (``json_schema``) answers text matching the schema: the scripted text if it
    does, else a minimal instance (:func:`actors.llm.mock_schema.conform`).
    """
    choice = body.get("tool_choice")
    forced = _forced_function(body) if body.get("tools") else None
    if forced is not None:
        calls = [c for c in reply.tool_calls if c.name == forced][:1] or [
            ScriptToolCall(name=forced)
        ]
        reply = reply.model_copy(update={"text": "", "tool_calls": tuple(calls)})
    elif choice == "none" and reply.tool_calls:
        reply = reply.model_copy(update={"tool_calls": ()})
    elif choice == "required" and not reply.tool_calls and body.get("tools"):
        reply = reply.model_copy(
            update={"tool_calls": (ScriptToolCall(name=_first_tool_name(body)),)}
        )
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema" and not reply.tool_calls:
        # A schema-enforcing server can only answer matching JSON (actors.llm.mock_schema).
        schema = fmt["json_schema"].get("schema", {})
        conformed = conform(reply.text, schema)
        if conformed != reply.text:
            reply = reply.model_copy(update={"text": conformed})
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        try:
            is_object = isinstance(json.loads(reply.text), dict)
        except ValueError:
            is_object = False
        if not is_object:
            reply = reply.model_copy(update={"text": _dumps({"text": reply.text})})
    return reply


def _error_body(message: str, type_: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(_error_body(message, type_, param, code), status, headers=headers)


def _broken_arguments(args_json: str) -> str:
    """Argument text that no amount of further fragments can make valid JSON."""
    return args_json[:-1] + ', "' if args_json.endswith("}") else args_json + '{"'


# --------------------------------------------------------------------------- #
# The ASGI application
# --------------------------------------------------------------------------- #

_CUT: Final = object()
"""Marker in an event list: abort the connection here."""

_LINGER: Final = object()
"""Marker in an event list: the body ends here (after its pause)."""

_STREAM_ERROR: Final = {
    "message": "This model's maximum context length is 128000 tokens; your messages resulted"
    " in 130000 tokens (injected by the mock).",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded",
}
"""The error a ``stream_error`` fault sends (OpenAI's context-length error)."""

_NOT_SSE_PAGE: Final = (
    "<!doctype html><html><head><title>Gateway notice</title></head>"
    "<body><h1>Please sign in to continue</h1>(injected by the mock)</body></html>"
)


@dataclass(slots=True)
class _Exchange:
    """One chat-completion request while it is being answered."""

    record: _Record
    session: str
    purpose: str
    request_id: str | None
    model: str
    stream: bool
    include_usage: bool
    fault: _Fault | None
    completion_id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))


@dataclass(frozen=True, slots=True)
class _Answer:
    """The content of a reply, with ids assigned and pacing resolved."""

    text_chunks: tuple[str, ...]
    tool_calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments text)
    first_delay_s: float
    interval_s: float
    prompt_tokens: int
    args_chunk_chars: int
    cut_at_max_tokens: bool = False
    """The reply was longer than the request's ``max_tokens``: cut, ``finish_reason`` length."""

    @property
    def finish_reason(self) -> str:
        if self.cut_at_max_tokens:
            return "length"
        return "tool_calls" if self.tool_calls else "stop"

    @property
    def text(self) -> str:
        return "".join(self.text_chunks)

    def fragments(self, arguments: str) -> tuple[str, ...]:
        return split_fragments(arguments, self.args_chunk_chars)

    @property
    def completion_tokens(self) -> int:
        return len(self.text_chunks) + sum(
            1 + len(self.fragments(args)) for _, _, args in self.tool_calls
        )

    @property
    def total_s(self) -> float:
        deltas = self.completion_tokens
        return self.first_delay_s + self.interval_s * max(0, deltas - 1)

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


class _ChatEndpoint:
    """Raw ASGI endpoint so bookkeeping wraps the whole response, not just the handler.

    A plain starlette handler returns before a streaming body is sent; the
    in-flight count and the disconnect detection must span the body too.
    """

    def __init__(self, app: MockLlmApp) -> None:
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app._handle_chat(scope, receive, send)


class MockLlmApp:
    """The mock server's ASGI application and its state (thread-safe Python API).

    ``asgi`` is the starlette app. Every public method may be called from any
    thread: state is guarded by one lock, held only for short bookkeeping.
    """

    def __init__(
        self, script: ScriptFile | None = None, settings: MockSettings | None = None
    ) -> None:
        self.settings = settings or MockSettings()
        self._lock = threading.Lock()
        self._script = script
        self._cursors: dict[str, ScriptCursor] = {}
        self._faults: list[_QueuedFault] = []
        self._records: deque[_Record] = deque(maxlen=self.settings.record_limit)
        self._seq = 0
        self._counters = _Counters()
        self._closing = asyncio.Event()
        # -- Anthropic's /v1/messages (issue 27): its own module, same state --
        from fore.actors.llm.mock_anthropic import AnthropicMessages

        self.anthropic = AnthropicMessages(self)
        # --
        self.asgi = Starlette(
            routes=[
                Route("/v1/chat/completions", _ChatEndpoint(self), methods=["POST"]),
                *self.anthropic.routes(),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/mock/stats", self._stats_endpoint, methods=["GET"]),
                Route("/mock/requests", self._requests_endpoint, methods=["GET"]),
                Route("/mock/faults", self._faults_endpoint, methods=["POST"]),
                Route("/mock/reset", self._reset_endpoint, methods=["POST"]),
                Route("/mock/script", self._script_endpoint, methods=["POST", "DELETE"]),
                Route("/mock/health", self._health_endpoint, methods=["GET"]),
            ]
        )

    # -- Python API --------------------------------------------------------- #

    def stats(self) -> MockStats:
        """A snapshot of the counters."""
        with self._lock:
            c = self._counters
            return MockStats(
                requests=c.requests,
                streams_started=c.streams_started,
                streams_completed=c.streams_completed,
                completions=c.completions,
                disconnects=c.disconnects,
                faults_served=c.faults_served,
                faults_by_kind=dict(c.faults_by_kind),
                bad_requests=c.bad_requests,
                in_flight=c.in_flight,
                max_in_flight=c.max_in_flight,
                disconnected_request_ids=tuple(c.disconnected_ids),
            )

    def requests(self) -> tuple[RecordedRequest, ...]:
        """The recorded requests in arrival order (the last ``record_limit``)."""
        with self._lock:
            records = list(self._records)
            return tuple(r.snapshot() for r in records)

    def queue_fault(self, spec: FaultSpec) -> None:
        """Inject ``spec.fault`` into the next ``spec.count`` matching requests."""
        with self._lock:
            self._faults.append(_QueuedFault(spec, spec.count))

    def reset(self) -> None:
        """Forget counters, records (``seq`` restarts at 1), queued faults and script
        progress; the script itself stays."""
        with self._lock:
            in_flight = self._counters.in_flight
            self._counters = _Counters(in_flight=in_flight, max_in_flight=in_flight)
            self._records.clear()
            self._seq = 0
            self._faults.clear()
            self._cursors.clear()
        self.anthropic.reset()  # its prompt cache (issue 27)

    def set_script(self, script: ScriptFile | None) -> None:
        """Serve ``script`` from now on (``None``: generated text); progress restarts."""
        with self._lock:
            self._script = script
            self._cursors.clear()

    @property
    def script(self) -> ScriptFile | None:
        """The script being served, ``None`` in generated-text mode."""
        with self._lock:
            return self._script

    def begin_close(self) -> None:
        """Abort in-flight responses (call on the server's event loop)."""
        self._closing.set()

    # -- bookkeeping -------------------------------------------------------- #

    def _new_record(self, headers: Mapping[str, str], body: Any) -> _Record:
        with self._lock:
            self._seq += 1
            self._counters.requests += 1
            record = _Record(
                seq=self._seq,
                session=headers.get("x-fore-session") or DEFAULT_SESSION,
                purpose=headers.get("x-fore-purpose") or DEFAULT_PURPOSE,
                request_id=headers.get("x-fore-request-id"),
                body=body,
                headers=dict(headers.items()),
                arrived_s=time.monotonic(),
            )
            self._records.append(record)
            return record

    def _enter(self) -> None:
        with self._lock:
            c = self._counters
            c.in_flight += 1
            c.max_in_flight = max(c.max_in_flight, c.in_flight)

    def _finish(self, record: _Record, outcome: Outcome | None = None) -> None:
        """Settle a request -- outcome, counters, in-flight -- once; later calls are no-ops.

        Called as soon as the outcome is known, *before* the last bytes are
        written, so a client that has read a whole response already finds it
        in the stats and records; only disconnects need polling.
        """
        with self._lock:
            if record.finished:
                return
            record.finished = True
            if outcome is not None:
                record.outcome = outcome
            if record.outcome == "in_progress":
                record.outcome = "closed" if self._closing.is_set() else "disconnected"
            c = self._counters
            c.in_flight = max(0, c.in_flight - 1)
            if record.outcome == "disconnected":
                c.disconnects += 1
                if record.request_id is not None:
                    c.disconnected_ids.append(record.request_id)
            elif record.outcome == "completed":
                if record.stream:
                    c.streams_completed += 1
                else:
                    c.completions += 1
            elif record.outcome == "bad_request":
                c.bad_requests += 1

    def _abandon(self) -> None:
        """A request that went away before it could even be recorded."""
        with self._lock:
            self._counters.in_flight = max(0, self._counters.in_flight - 1)
            self._counters.disconnects += 1

    def _count_fault(self, record: _Record, fault: _Fault) -> None:
        with self._lock:
            record.fault = fault.kind
            self._counters.faults_served += 1
            by_kind = self._counters.faults_by_kind
            by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1

    def _count_stream_start(self) -> None:
        with self._lock:
            self._counters.streams_started += 1

    def _cursor(self, session: str) -> ScriptCursor | None:
        with self._lock:
            if self._script is None:
                return None
            cursor = self._cursors.get(session)
            if cursor is None:
                cursor = self._cursors[session] = ScriptCursor(self._script)
            return cursor

    def _take_fault(
        self, headers: Mapping[str, str], session: str, forced: str | None
    ) -> _Fault | None:
        """The fault for this request: header first, then the queue, then the flag."""
        settings = self.settings
        header = headers.get("x-mock-fault")
        if header:
            kind = cast(FaultKind, header.strip())
            if kind == "reject_tool_choice" and forced is None:
                return None
            return _Fault(
                kind,
                _header_float(headers, "x-mock-retry-after", settings.retry_after_s),
                _header_float(headers, "x-mock-stall-s", settings.stall_s),
            )
        with self._lock:
            for queued in self._faults:
                spec = queued.spec
                if spec.session is not None and spec.session != session:
                    continue
                if spec.fault == "reject_tool_choice" and forced is None:
                    continue
                queued.remaining -= 1
                if queued.remaining <= 0:
                    self._faults.remove(queued)
                return _Fault(
                    spec.fault,
                    settings.retry_after_s if spec.retry_after is None else spec.retry_after,
                    settings.stall_s if spec.stall_s is None else spec.stall_s,
                )
        if settings.reject_forced_tool_choice and forced is not None:
            return _Fault("reject_tool_choice", settings.retry_after_s, settings.stall_s)
        return None

    # -- waiting ------------------------------------------------------------ #

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but end at once (raising :class:`_CutConnection`) when closing."""
        if seconds > 0:
            if seconds <= _SHORT_SLEEP_S:
                await asyncio.sleep(seconds)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), seconds)
        if self._closing.is_set():
            raise _CutConnection("server shutting down")

    async def _wait_or_disconnect(self, seconds: float, receive: Any) -> str:
        """``"elapsed"``, ``"disconnected"`` or ``"closing"``, whichever comes first.

        Non-streaming responses wait before sending anything; starlette only
        watches for disconnects while a *streaming* body is sent, so this
        races the wait against the ASGI ``http.disconnect`` message itself.
        """
        if seconds <= 0:
            return "closing" if self._closing.is_set() else "elapsed"

        async def disconnected() -> None:
            while True:
                message = await receive()
                if message.get("type") == "http.disconnect":
                    return

        async def elapsed() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), seconds)

        t_disconnect = asyncio.ensure_future(disconnected())
        t_elapsed = asyncio.ensure_future(elapsed())
        try:
            done, _ = await asyncio.wait(
                {t_disconnect, t_elapsed}, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (t_disconnect, t_elapsed):
                task.cancel()
            await asyncio.gather(t_disconnect, t_elapsed, return_exceptions=True)
        if t_disconnect in done:
            return "disconnected"
        return "closing" if self._closing.is_set() else "elapsed"

    # -- the chat endpoint -------------------------------------------------- #

    async def _handle_chat(self, scope: Any, receive: Any, send: Any) -> None:
        self._enter()
        record: _Record | None = None
        try:
            request = Request(scope, receive)
            try:
                raw = await request.body()
            except ClientDisconnect:
                return
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = None
            record = self._new_record(request.headers, body if isinstance(body, dict) else None)
            if request.client is not None:
                record.peer = f"{request.client.host}:{request.client.port}"
            response = await self._respond(record, request.headers, body, receive, len(raw))
            if record.outcome != "in_progress":
                self._finish(record)
            elif record.stream:
                self._count_stream_start()
            await response(scope, receive, send)
        finally:
            if record is None:
                self._abandon()
            else:
                self._finish(record)

    async def _respond(
        self, record: _Record, headers: Mapping[str, str], body: Any, receive: Any, size: int
    ) -> Response:
        problem = _validate_body(body)
        if problem is None and self.settings.strict:
            problem = _strict_problems(body, self.settings.max_output_tokens)
        if problem is not None:
            record.outcome = "bad_request"
            return _error_response(400, problem[0], param=problem[1])
        header_fault = headers.get("x-mock-fault")
        if header_fault and header_fault.strip() not in FAULT_KINDS:
            record.outcome = "bad_request"
            return _error_response(
                400,
                f"unknown X-Mock-Fault {header_fault!r}; use one of {', '.join(FAULT_KINDS)}",
                param="X-Mock-Fault",
            )
        settings = self.settings
        try:
            ttft_ms = _header_float(headers, "x-mock-ttft-ms", settings.ttft_ms, minimum=0.0)
            tokens_per_s = _header_optional_float(
                headers, "x-mock-tokens-per-s", settings.tokens_per_s
            )
            args_chunk = int(
                _header_float(
                    headers,
                    "x-mock-args-chunk-chars",
                    settings.tool_args_chunk_chars,
                    minimum=1.0,
                )
            )
            _header_float(headers, "x-mock-retry-after", settings.retry_after_s, minimum=0.0)
            _header_float(headers, "x-mock-stall-s", settings.stall_s, minimum=0.0)
        except ValueError as exc:
            record.outcome = "bad_request"
            return _error_response(400, str(exc))

        stream = body.get("stream") is True
        record.stream = stream
        options = body.get("stream_options")
        include_usage = (
            stream and isinstance(options, dict) and options.get("include_usage") is True
        )
        forced = _forced_function(body)
        fault = self._take_fault(headers, record.session, forced)
        exchange = _Exchange(
            record=record,
            session=record.session,
            purpose=record.purpose,
            request_id=record.request_id,
            model=str(body["model"]),
            stream=stream,
            include_usage=include_usage,
            fault=fault,
        )
        if fault is not None:
            self._count_fault(record, fault)
            status_response = _status_fault(fault, forced, stream=stream)
            if status_response is not None:
                record.outcome = "error"
                return status_response

        messages: list[Any] = body["messages"]
        last_text = last_user_or_tool_text(messages)
        cursor = self._cursor(record.session)
        if cursor is None:
            reply = ScriptReply(
                text=generated_text(settings.generated_words, f"{record.purpose}\0{last_text}")
            )
        elif fault is None:
            reply = cursor.next_reply(record.purpose, last_text)
        else:
            reply = cursor.peek_reply(record.purpose, last_text)
        reply = _obey(reply, body)
        answer = _make_answer(
            reply,
            ttft_ms=ttft_ms,
            tokens_per_s=tokens_per_s,
            args_chunk_chars=args_chunk,
            # ~4 bytes per token, estimated from the body as sent (re-encoding
            # the messages would cost the server O(history) per request).
            prompt_tokens=max(1, size // 4),
            max_tokens=_max_tokens(body),
            bad_args_tool=_first_tool_name(body)
            if fault is not None and fault.kind == "bad_tool_args"
            else None,
        )
        record.ttft_s = answer.first_delay_s
        record.token_interval_s = answer.interval_s
        extra_headers: dict[str, str] = {"x-mock-fault": fault.kind} if fault is not None else {}
        if stream:
            events = _stream_events(exchange, answer)
            return StreamingResponse(
                self._stream_body(exchange, events),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", **extra_headers},
            )
        return await self._completion(exchange, answer, receive, extra_headers)

    async def _stream_body(
        self, ex: _Exchange, events: list[tuple[float, object]]
    ) -> AsyncIterator[bytes]:
        """Send the events, coalescing those due at the same moment into one write.

        Each SSE event stays its own ``data:`` line; only the socket writes are
        merged. Loopback ``send`` dominates the server's cost under load, and
        an unpaced reply (or the finish / usage / ``[DONE]`` tail) needs no
        gaps between its events.

        The latency model is kept on absolute due times (the first event at
        start + TTFT, each later one a token interval after the one before it
        was *due*, not after it was sent): a real provider's tokens come at
        its own pace however busy the proxy in front of it is. Sleeping the
        interval after each send instead would stretch every stream by the
        server's scheduling lag once per token -- under load, hundreds of
        small overshoots -- and the benchmark would measure the stand-in
        model's loop rather than the runtime. Events that fell behind go out
        together (one write) at once.
        """
        loop = asyncio.get_running_loop()
        due = start = loop.time()
        tick = self.settings.background_tick_ms / 1000.0 if ex.purpose != "main" else 0.0
        buffer = bytearray()
        last = len(events) - 1
        kind = ex.fault.kind if ex.fault is not None else None
        end: Outcome = (
            "truncated"
            if kind == "truncated"
            else "error"
            if kind == "stream_error"
            else "completed"
        )
        try:
            for i, (delay, payload) in enumerate(events):
                if payload is _LINGER:
                    # The whole answer is out: it counts as completed even if the
                    # client leaves while the body is held open.
                    self._finish(ex.record, "completed")
                if delay > 0:
                    due += delay
                    send_at = due
                    if tick and i > 0:  # after the first event: at the end of its tick
                        send_at = start + math.ceil((due - start) / tick) * tick
                    wait = send_at - loop.time()
                    if wait > 0:
                        if buffer:
                            yield bytes(buffer)
                            buffer.clear()
                        await self._sleep(wait)
                if payload is _CUT:
                    if buffer:
                        yield bytes(buffer)
                        buffer.clear()
                    self._finish(ex.record, "cut")
                    raise _CutConnection("cut fault")
                if payload is _LINGER:  # [DONE] went out before the pause
                    return
                buffer += cast(bytes, payload)
                if i == last:
                    self._finish(ex.record, end)
                    yield bytes(buffer)
                    return
                if len(buffer) >= _FLUSH_BYTES:
                    yield bytes(buffer)
                    buffer.clear()
                    await asyncio.sleep(0)  # let other streams and disconnects in
        except _CutConnection:
            self._finish(ex.record, "closed")  # no-op after a deliberate cut
            raise

    async def _completion(
        self, ex: _Exchange, answer: _Answer, receive: Any, extra_headers: dict[str, str]
    ) -> Response:
        kind = ex.fault.kind if ex.fault is not None else None
        wait_s = answer.total_s + (ex.fault.stall_s if ex.fault and kind == "stall" else 0.0)
        waited = await self._wait_or_disconnect(wait_s, receive)
        if waited == "disconnected":
            ex.record.outcome = "disconnected"
            return Response(status_code=499)
        if waited == "closing":
            ex.record.outcome = "closed"
            return _error_response(503, "mock server shutting down", type_="server_error")
        content = answer.text if answer.text or not answer.tool_calls else None
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if answer.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in answer.tool_calls
            ]
        payload = {
            "id": ex.completion_id,
            "object": "chat.completion",
            "created": ex.created,
            "model": ex.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": answer.finish_reason,
                }
            ],
            "usage": answer.usage(),
        }
        data = _dumps(payload).encode("utf-8")
        headers = {"content-type": "application/json", **extra_headers}
        if kind == "malformed":
            data = data[: len(data) // 2] + b"<<not json>>"
        elif kind == "truncated":
            data = data[: len(data) // 2]
        elif kind == "cut":
            full_length = len(data)
            ex.record.outcome = "cut"

            async def partial() -> AsyncIterator[bytes]:
                yield data[: full_length // 2]
                raise _CutConnection("cut fault")

            return StreamingResponse(
                partial(), headers={**headers, "content-length": str(full_length)}
            )
        ex.record.outcome = "completed"
        return Response(data, 200, headers=headers)

    # -- control endpoints -------------------------------------------------- #

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": "mock", "object": "model", "created": 0, "owned_by": "fore"}],
            }
        )

    async def _stats_endpoint(self, request: Request) -> Response:
        return Response(self.stats().model_dump_json(), media_type="application/json")

    async def _requests_endpoint(self, request: Request) -> Response:
        records = [r.model_dump(mode="json") for r in self.requests()]
        return Response(_dumps({"requests": records}), media_type="application/json")

    async def _faults_endpoint(self, request: Request) -> Response:
        try:
            spec = FaultSpec.model_validate_json(await request.body())
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            return _error_response(400, f"invalid fault: {detail}")
        self.queue_fault(spec)
        return JSONResponse({"queued": spec.model_dump(mode="json")})

    async def _reset_endpoint(self, request: Request) -> Response:
        self.reset()
        return JSONResponse({"reset": True})

    async def _script_endpoint(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.set_script(None)
            return JSONResponse({"script": None})
        try:
            script = ScriptFile.from_json(await request.body(), source="request body")
        except ScriptError as exc:
            return _error_response(400, str(exc))
        self.set_script(script)
        return JSONResponse({"script": {"replies": len(script.replies)}})

    async def _health_endpoint(self, request: Request) -> Response:
        return JSONResponse({"ok": True})


def _status_fault(fault: _Fault, forced: str | None, *, stream: bool) -> Response | None:
    """The error response of a status fault; ``None`` for faults served in the body."""
    kind = fault.kind
    tag = {"x-mock-fault": kind}
    if kind == "not_sse":
        return Response(_NOT_SSE_PAGE, 200, media_type="text/html", headers=tag)
    if kind == "stream_error" and not stream:
        return JSONResponse({"error": _STREAM_ERROR}, 400, headers=tag)
    if kind == "500":
        return _error_response(
            500,
            "The server had an error while processing your request (injected by the mock).",
            type_="server_error",
            headers=tag,
        )
    if kind == "529":  # Anthropic's "overloaded" (issue 27)
        return _error_response(
            529, "Overloaded (injected by the mock).", type_="overloaded_error", headers=tag
        )
    if kind == "429":
        return _error_response(
            429,
            "Rate limit reached for requests (injected by the mock).",
            type_="requests",
            code="rate_limit_exceeded",
            headers={**tag, "retry-after": _format_seconds(fault.retry_after_s)},
        )
    if kind == "401":
        return _error_response(
            401,
            "Incorrect API key provided (injected by the mock).",
            code="invalid_api_key",
            headers=tag,
        )
    if kind == "400":
        return _error_response(400, "Invalid request (injected by the mock).", headers=tag)
    if kind == "reject_tool_choice":
        return _error_response(
            400,
            f"tool_choice naming a function ({forced!r}) is not supported by this model"
            " (injected by the mock).",
            param="tool_choice",
            headers=tag,
        )
    return None


def _header_float(
    headers: Mapping[str, str], name: str, default: float, *, minimum: float | None = None
) -> float:
    raw = headers.get(name)
    if raw is None or not raw.strip():
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"header {name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"header {name} must be a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"header {name} must be >= {minimum:g}, got {raw!r}")
    return value


def _header_optional_float(
    headers: Mapping[str, str], name: str, default: float | None
) -> float | None:
    raw = headers.get(name)
    if raw is None or not raw.strip():
        return default
    value = _header_float(headers, name, 0.0)
    if value <= 0:
        raise ValueError(f"header {name} must be > 0, got {raw!r}")
    return value


def _make_answer(
    reply: ScriptReply,
    *,
    ttft_ms: float,
    tokens_per_s: float | None,
    args_chunk_chars: int,
    prompt_tokens: int,
    bad_args_tool: str | None,
    max_tokens: int | None = None,
) -> _Answer:
    """The reply as sent. Past ``max_tokens`` it is cut as a provider cuts it: the text
    stops at the cap, tool calls that did not fit are dropped, ``finish_reason`` is
    ``length``."""
    plan = stream_plan(reply, default_ttft_ms=ttft_ms, default_tokens_per_s=tokens_per_s)
    calls: list[ScriptToolCall] = list(reply.tool_calls)
    if bad_args_tool is not None and not calls:
        calls.append(ScriptToolCall(name=bad_args_tool))
    tool_calls = tuple(
        (
            call.id or new_tool_call_id(),
            call.name,
            _broken_arguments(arguments_json(call.arguments))
            if bad_args_tool is not None
            else arguments_json(call.arguments),
        )
        for call in calls
    )
    answer = _Answer(
        text_chunks=plan.chunks,
        tool_calls=tool_calls,
        first_delay_s=plan.first_token_delay_s,
        interval_s=plan.token_interval_s,
        prompt_tokens=prompt_tokens,
        args_chunk_chars=args_chunk_chars,
    )
    if max_tokens is None or answer.completion_tokens <= max_tokens:
        return answer
    return replace(
        answer, text_chunks=plan.chunks[:max_tokens], tool_calls=(), cut_at_max_tokens=True
    )


def _stream_events(ex: _Exchange, answer: _Answer) -> list[tuple[float, object]]:
    """Every SSE event of the response with the pause before it, faults applied."""

    # Every chunk is the same object around its delta: encoded once, then spliced
    # around each delta (byte for byte what encoding the whole object gives; an
    # answer is hundreds of chunks and the mock's CPU is shared with what it measures).
    head = (
        "data: "
        + _dumps(
            {
                "id": ex.completion_id,
                "object": "chat.completion.chunk",
                "created": ex.created,
                "model": ex.model,
            }
        )[:-1]
        + ',"choices":[{"index":0,"delta":'
    ).encode("utf-8")
    usage_tail = ',"usage":null' if ex.include_usage else ""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        tail = f',"logprobs":null,"finish_reason":{_dumps(finish_reason)}}}]{usage_tail}}}'
        return head + (_dumps(delta) + tail).encode("utf-8") + b"\n\n"

    interval = answer.interval_s
    role_content = None if (answer.tool_calls and not answer.text_chunks) else ""
    events: list[tuple[float, object]] = [
        (answer.first_delay_s, chunk({"role": "assistant", "content": role_content}))
    ]
    for i, token in enumerate(answer.text_chunks):
        events.append((0.0 if i == 0 else interval, chunk({"content": token})))
    for index, (call_id, name, arguments) in enumerate(answer.tool_calls):
        header = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append((interval, chunk({"tool_calls": [header]})))
        for fragment in answer.fragments(arguments):
            delta = {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
            events.append((interval, chunk(delta)))
    body_end = len(events)
    events.append((0.0, chunk({}, answer.finish_reason)))
    if ex.include_usage:
        usage_chunk = {
            "id": ex.completion_id,
            "object": "chat.completion.chunk",
            "created": ex.created,
            "model": ex.model,
            "choices": [],
            "usage": answer.usage(),
        }
        events.append((0.0, b"data: " + _dumps(usage_chunk).encode("utf-8") + b"\n\n"))
    events.append((0.0, b"data: [DONE]\n\n"))

    kind = ex.fault.kind if ex.fault is not None else None
    keep = max(1, body_end // 2)
    if kind == "malformed":
        bad = (
            b'data: {"id":"' + ex.completion_id.encode() + b'","object":"chat.completion.chunk",'
            b'"choices":[{"index":0,"delta":{"content":"\n\n'
        )
        events.insert(min(2, body_end), (0.0, bad))
    elif kind == "truncated":
        del events[keep:]
    elif kind == "cut":
        del events[keep:]
        events.append((0.0, _CUT))
    elif kind == "stall" and ex.fault is not None:
        delay, payload = events[1]
        events[1] = (delay + ex.fault.stall_s, payload)
    elif kind == "stream_error":
        del events[keep:]
        events.append((0.0, b"data: " + _dumps({"error": _STREAM_ERROR}).encode("utf-8") + b"\n\n"))
    elif kind == "linger" and ex.fault is not None:
        events.append((ex.fault.stall_s, _LINGER))
    return events


# --------------------------------------------------------------------------- #
# Running it: in a thread, or as a subprocess
# --------------------------------------------------------------------------- #


class _UvicornServer(uvicorn.Server):
    """uvicorn that aborts in-flight mock responses at shutdown and leaves signals alone.

    Without the abort a stalled stream would hold shutdown for the whole
    graceful timeout; signals belong to whoever owns the process (the CLI
    installs its own handlers, a test process keeps its own).
    """

    def __init__(self, config: uvicorn.Config, app: MockLlmApp) -> None:
        super().__init__(config)
        self._mock_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._mock_app.begin_close()
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _uvicorn_config(app: MockLlmApp, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app.asgi,
        host="127.0.0.1",
        port=0,
        loop="none",  # we create it (actors.llm.evloop: uvloop when installed)
        http="auto",  # httptools when installed, else h11
        lifespan="off",
        log_config=None,  # never reconfigure the host process's logging
        log_level=log_level,
        access_log=False,
        backlog=_BACKLOG,
        limit_concurrency=None,
        timeout_graceful_shutdown=2,
    )


def _bind_socket(host: str, port: int) -> socket.socket:
    """Bind (and listen) here, so port 0 can be read back before serving starts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class MockLlmControl(Protocol):
    """What both server flavours offer (in-process and subprocess)."""

    @property
    def base_url(self) -> str: ...

    def stats(self) -> MockStats: ...

    def requests(self) -> tuple[RecordedRequest, ...]: ...

    def queue_fault(
        self,
        fault: FaultKind,
        *,
        count: int = 1,
        retry_after: float | None = None,
        session: str | None = None,
        stall_s: float | None = None,
    ) -> None: ...

    def reset(self) -> None: ...

    def set_script(self, script: ScriptFile | None) -> None: ...

    def wait_for_stats(
        self, predicate: Callable[[MockStats], bool], timeout_s: float = 5.0
    ) -> MockStats: ...


def _wait_for_stats(
    get: Callable[[], MockStats], predicate: Callable[[MockStats], bool], timeout_s: float
) -> MockStats:
    deadline = time.monotonic() + timeout_s
    while True:
        stats = get()
        if predicate(stats):
            return stats
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"mock LLM stats did not reach the condition in {timeout_s}s: {stats}"
            )
        time.sleep(0.01)


class MockLlmServer:
    """The mock server in a background thread of this process (uvicorn, own event loop).

    Use as a context manager; ``__enter__`` returns once the port accepts
    connections and ``__exit__`` stops it within ``shutdown_timeout_s``
    (in-flight responses are cut, the thread is joined).
    """

    def __init__(
        self,
        script: ScriptFile | str | os.PathLike[str] | None = None,
        *,
        port: int = 0,
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        generated_words: int = 24,
        tool_args_chunk_chars: int = 4,
        stall_s: float = 30.0,
        retry_after_s: float = 1.0,
        reject_forced_tool_choice: bool = False,
        strict: bool = True,
        max_output_tokens: int = 16_384,
        record_limit: int = 1000,
        background_tick_ms: float = 0.0,
        log_level: str = "warning",
        startup_timeout_s: float = 10.0,
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        if script is not None and not isinstance(script, ScriptFile):
            script = ScriptFile.from_path(Path(script))
        self.settings = MockSettings(
            ttft_ms=ttft_ms,
            tokens_per_s=tokens_per_s,
            generated_words=generated_words,
            tool_args_chunk_chars=tool_args_chunk_chars,
            stall_s=stall_s,
            retry_after_s=retry_after_s,
            reject_forced_tool_choice=reject_forced_tool_choice,
            strict=strict,
            max_output_tokens=max_output_tokens,
            record_limit=record_limit,
            background_tick_ms=background_tick_ms,
        )
        self.app = MockLlmApp(script, self.settings)
        self._requested_port = port
        self._log_level = log_level
        self._startup_timeout_s = startup_timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._server: _UvicornServer | None = None
        self._thread: threading.Thread | None = None
        self._thread_error: BaseException | None = None
        self._port: int | None = None

    # -- lifecycle ---------------------------------------------------------- #

    def start(self) -> Self:
        """Bind, start serving in a thread, and wait until it accepts requests."""
        if self._thread is not None:
            raise RuntimeError("MockLlmServer already started")
        _install_log_filter()
        sock = _bind_socket("127.0.0.1", self._requested_port)
        self._port = int(sock.getsockname()[1])
        server = _UvicornServer(_uvicorn_config(self.app, self._log_level), self.app)
        self._server = server

        def run() -> None:
            try:
                evloop.run(server.serve(sockets=[sock]))
            except BaseException as exc:  # reported by start()
                self._thread_error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name=f"mock-llm-{self._port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"mock LLM server failed to start: {self._thread_error!r}")
            if time.monotonic() >= deadline:
                self.stop()
                raise TimeoutError(f"mock LLM server not up after {self._startup_timeout_s}s")
            time.sleep(0.002)
        log.debug("mock_llm.started", port=self._port)
        return self

    def stop(self) -> None:
        """Shut down (in-flight responses are cut) and join the thread; idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(self._shutdown_timeout_s)
        if thread.is_alive():
            server.force_exit = True
            thread.join(2.0)
        if thread.is_alive():
            raise RuntimeError(
                f"mock LLM server thread did not stop within {self._shutdown_timeout_s}s"
            )
        self._server = None
        log.debug("mock_llm.stopped", port=self._port)

    close = stop

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------- #

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("MockLlmServer not started")
        return self._port

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>`` (control endpoints live under ``/mock``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.root_url}/v1"

    # -- control (in-process, no HTTP) -------------------------------------- #

    def stats(self) -> MockStats:
        return self.app.stats()

    def requests(self) -> tuple[RecordedRequest, ...]:
        return self.app.requests()

    def queue_fault(
        self,
        fault: FaultKind,
        *,
        count: int = 1,
        retry_after: float | None = None,
        session: str | None = None,
        stall_s: float | None = None,
    ) -> None:
        self.app.queue_fault(
            FaultSpec(
                fault=fault, count=count, retry_after=retry_after, session=session, stall_s=stall_s
            )
        )

    def reset(self) -> None:
        self.app.reset()

    def set_script(self, script: ScriptFile | None) -> None:
        self.app.set_script(script)

    def wait_for_stats(
        self, predicate: Callable[[MockStats], bool], timeout_s: float = 5.0
    ) -> MockStats:
        """Poll the stats until ``predicate`` holds; ``TimeoutError`` after ``timeout_s``."""
        return _wait_for_stats(self.stats, predicate, timeout_s)

    # -- subprocess flavour ------------------------------------------------- #

    @classmethod
    def spawn(
        cls,
        script: ScriptFile | str | os.PathLike[str] | None = None,
        *,
        port: int = 0,
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        generated_words: int = 24,
        tool_args_chunk_chars: int = 4,
        stall_s: float = 30.0,
        retry_after_s: float = 1.0,
        reject_forced_tool_choice: bool = False,
        strict: bool = True,
        max_output_tokens: int = 16_384,
        record_limit: int = 1000,
        background_tick_ms: float = 0.0,
        log_level: str = "warning",
        startup_timeout_s: float = 30.0,
        shutdown_timeout_s: float = 10.0,
    ) -> SpawnedMockLlmServer:
        """Run the server in a child process (its own GIL) and return its handle.

        The child is ``sys.executable -m actors.llm.mock_server``; the handle
        talks to its control endpoints over HTTP with the same API as here.
        """
        args = [
            "--port",
            str(port),
            "--ttft-ms",
            repr(float(ttft_ms)),
            "--generated-words",
            str(generated_words),
            "--tool-args-chunk-chars",
            str(tool_args_chunk_chars),
            "--stall-s",
            repr(float(stall_s)),
            "--retry-after-s",
            repr(float(retry_after_s)),
            "--record-limit",
            str(record_limit),
            "--background-tick-ms",
            repr(float(background_tick_ms)),
            "--max-output-tokens",
            str(max_output_tokens),
            "--log-level",
            log_level,
        ]
        if not strict:
            args.append("--lenient")
        if tokens_per_s is not None:
            args += ["--tokens-per-s", repr(float(tokens_per_s))]
        if reject_forced_tool_choice:
            args.append("--reject-forced-tool-choice")
        inline: ScriptFile | None = None
        if isinstance(script, ScriptFile):
            inline = script
        elif script is not None:
            args += ["--script", os.fspath(script)]
        server = SpawnedMockLlmServer(
            args, startup_timeout_s=startup_timeout_s, shutdown_timeout_s=shutdown_timeout_s
        )
        if inline is not None:
            try:
                server.set_script(inline)
            except BaseException:
                server.stop()
                raise
        return server


class SpawnedMockLlmServer:
    """A mock server in a child process; control over HTTP, same API as :class:`MockLlmServer`.

    Started by the constructor (normally via :meth:`MockLlmServer.spawn`);
    :meth:`stop` (or leaving the ``with`` block) sends SIGTERM, waits, and
    kills it past the deadline.
    """

    def __init__(
        self,
        cli_args: Sequence[str],
        *,
        startup_timeout_s: float = 30.0,
        shutdown_timeout_s: float = 10.0,
    ) -> None:
        self._shutdown_timeout_s = shutdown_timeout_s
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "fore.actors.llm.mock_server", *cli_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=root,
        )
        self._client: httpx.Client | None = None
        try:
            self._port = self._read_port(startup_timeout_s)
            self._client = httpx.Client(base_url=self.root_url, timeout=10.0)
        except BaseException:
            self.stop()
            raise

    def _read_port(self, timeout_s: float) -> int:
        stdout = self._process.stdout
        assert stdout is not None
        fd = stdout.fileno()
        deadline = time.monotonic() + timeout_s
        buffer = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"mock LLM subprocess printed no port in {timeout_s}s")
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.1))
            if ready:
                data = os.read(fd, 4096)
                if not data:
                    self._process.wait(timeout=5)
                    raise RuntimeError(
                        "mock LLM subprocess exited with code "
                        f"{self._process.returncode}: {self._stderr_text()}"
                    )
                buffer += data
                for line in buffer.decode("utf-8", "replace").splitlines():
                    match = _PORT_LINE_RE.match(line)
                    if match:
                        return int(match.group(1))
            elif self._process.poll() is not None:
                raise RuntimeError(
                    f"mock LLM subprocess exited with code {self._process.returncode}: "
                    f"{self._stderr_text()}"
                )

    def _stderr_text(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace").strip()[-2000:]
        return ""

    # -- lifecycle ---------------------------------------------------------- #

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The child's exit code once it has exited, else ``None``."""
        return self._process.poll()

    def stop(self) -> None:
        """SIGTERM, wait up to ``shutdown_timeout_s``, then SIGKILL; idempotent."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=self._shutdown_timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._stderr.close()

    close = stop

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------- #

    @property
    def port(self) -> int:
        return self._port

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    # -- control over HTTP -------------------------------------------------- #

    def _http(self) -> httpx.Client:
        if self._client is None:
            raise RuntimeError("mock LLM subprocess is stopped")
        return self._client

    def stats(self) -> MockStats:
        response = self._http().get("/mock/stats")
        response.raise_for_status()
        return MockStats.model_validate_json(response.content)

    def requests(self) -> tuple[RecordedRequest, ...]:
        response = self._http().get("/mock/requests")
        response.raise_for_status()
        return tuple(RecordedRequest.model_validate(r) for r in response.json()["requests"])

    def queue_fault(
        self,
        fault: FaultKind,
        *,
        count: int = 1,
        retry_after: float | None = None,
        session: str | None = None,
        stall_s: float | None = None,
    ) -> None:
        spec = FaultSpec(
            fault=fault, count=count, retry_after=retry_after, session=session, stall_s=stall_s
        )
        response = self._http().post("/mock/faults", content=spec.model_dump_json())
        response.raise_for_status()

    def reset(self) -> None:
        self._http().post("/mock/reset").raise_for_status()

    def set_script(self, script: ScriptFile | None) -> None:
        if script is None:
            self._http().delete("/mock/script").raise_for_status()
        else:
            self._http().post("/mock/script", content=script.to_json()).raise_for_status()

    def wait_for_stats(
        self, predicate: Callable[[MockStats], bool], timeout_s: float = 5.0
    ) -> MockStats:
        return _wait_for_stats(self.stats, predicate, timeout_s)


# --------------------------------------------------------------------------- #
# The CLI: fore mock-llm
# --------------------------------------------------------------------------- #

_PROG: Final = "fore mock-llm"
_LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")


class _UsageError(Exception):
    pass


class _ParserExit(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse that reports instead of exiting, so :func:`main` returns a code."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise _ParserExit(status)


def _number(kind: type[int] | type[float], low: float, *, strict: bool = False) -> Any:
    name = "an integer" if kind is int else "a number"
    bound = f"> {low:g}" if strict else f">= {low:g}"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {name} {bound}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"expected {name} {bound}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}")
    return value


def _build_parser() -> _Parser:
    parser = _Parser(
        prog=_PROG,
        description=(
            "Serve an OpenAI-compatible Chat Completions API on 127.0.0.1 for tests, demos "
            "and benchmarks: a scripted reply file or generated text, with a latency model "
            "and fault injection. Prints one line "
            f"'{PORT_LINE_PREFIX} port=<port> base_url=<url>' on stdout when listening."
        ),
        epilog=(
            "Per-request headers: X-Fore-Session, X-Fore-Purpose, X-Fore-Request-Id, "
            "X-Mock-TTFT-Ms, X-Mock-Tokens-Per-S, X-Mock-Fault "
            f"({', '.join(FAULT_KINDS)}). Control: GET /mock/stats, GET /mock/requests, "
            "POST /mock/faults, POST /mock/reset, POST|DELETE /mock/script."
        ),
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface; only 127.0.0.1 / localhost are allowed (default: %(default)s)",
    )
    parser.add_argument(
        "--port", type=_port, default=0, help="port; 0 picks a free one (default: %(default)s)"
    )
    parser.add_argument(
        "--script", metavar="FILE", help="scripted replies (JSON); without it, generated text"
    )
    parser.add_argument(
        "--ttft-ms",
        type=_number(float, 0),
        default=0.0,
        help="default time to first token in ms (default: %(default)s)",
    )
    parser.add_argument(
        "--tokens-per-s",
        type=_number(float, 0, strict=True),
        default=None,
        help="default streaming rate; unpaced when omitted",
    )
    parser.add_argument(
        "--generated-words",
        type=_number(int, 0),
        default=24,
        help="words per generated reply when no script is given (default: %(default)s)",
    )
    parser.add_argument(
        "--tool-args-chunk-chars",
        type=_number(int, 1),
        default=4,
        help="size of streamed tool-argument fragments (default: %(default)s)",
    )
    parser.add_argument(
        "--stall-s",
        type=_number(float, 0),
        default=30.0,
        help="how long the 'stall' fault stays silent (default: %(default)s)",
    )
    parser.add_argument(
        "--retry-after-s",
        type=_number(float, 0),
        default=1.0,
        help="Retry-After of the '429' fault (default: %(default)s)",
    )
    parser.add_argument(
        "--record-limit",
        type=_number(int, 1),
        default=1000,
        help="requests kept for GET /mock/requests (default: %(default)s)",
    )
    parser.add_argument(
        "--reject-forced-tool-choice",
        action="store_true",
        help="answer 400 to every request whose tool_choice names a function",
    )
    parser.add_argument(
        "--background-tick-ms",
        type=_number(float, 0),
        default=0.0,
        help="write streams of background purposes (not main) once per tick of this many "
        "ms; 0 writes every token at its time (default: %(default)s)",
    )
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="accept what real servers refuse (null content, orphan tool messages, "
        "max_tokens above the model's limit); strict by default",
    )
    parser.add_argument(
        "--max-output-tokens",
        type=_number(int, 1),
        default=16_384,
        help="the model's output limit; a larger max_tokens is a 400 (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level", choices=_LOG_LEVELS, default="warning", help="(default: %(default)s)"
    )
    return parser


def _configure_cli_logging(level: str) -> None:
    """Logs to stderr: stdout carries only the port line a parent process parses."""
    # This is a program of its own (``fore mock-llm``): it may configure the
    # process's logging -- uvicorn's loggers and Fore's, both on stderr.
    numeric = logging.getLevelName(level.upper())
    logging.basicConfig(
        stream=sys.stderr, level=numeric, format="%(levelname)s %(name)s: %(message)s"
    )
    configure_logging(level=level.lower(), stream=sys.stderr)


async def _serve_until_signal(server: _UvicornServer, sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        await server.serve(sockets=[sock])
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def main(argv: Sequence[str] | None = None) -> int:
    """``fore mock-llm``: run the mock server until SIGINT/SIGTERM.

    Exit codes: 0 after a signal, 2 for a bad flag, host or script (one line
    on stderr, no traceback), 1 when the port cannot be bound.
    """
    parser = _build_parser()

    def fail(message: str, code: int = 2) -> int:
        sys.stderr.write(f"{_PROG}: error: {' '.join(message.split())}\n")
        return code

    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        return fail(str(exc))
    except _ParserExit as exc:
        return exc.status
    if args.host not in _ALLOWED_HOSTS:
        return fail(f"--host {args.host!r} refused: the mock server only listens on 127.0.0.1")
    script: ScriptFile | None = None
    if args.script is not None:
        try:
            script = ScriptFile.from_path(args.script)
        except ScriptError as exc:
            return fail(str(exc))
    try:
        settings = MockSettings(
            ttft_ms=args.ttft_ms,
            tokens_per_s=args.tokens_per_s,
            generated_words=args.generated_words,
            tool_args_chunk_chars=args.tool_args_chunk_chars,
            stall_s=args.stall_s,
            retry_after_s=args.retry_after_s,
            reject_forced_tool_choice=args.reject_forced_tool_choice,
            strict=not args.lenient,
            max_output_tokens=args.max_output_tokens,
            record_limit=args.record_limit,
            background_tick_ms=args.background_tick_ms,
        )
    except ValueError as exc:
        return fail(str(exc))
    _configure_cli_logging(args.log_level)
    _install_log_filter()
    try:
        sock = _bind_socket("127.0.0.1", args.port)
    except OSError as exc:
        return fail(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}", 1)
    port = int(sock.getsockname()[1])
    app = MockLlmApp(script, settings)
    server = _UvicornServer(_uvicorn_config(app, args.log_level), app)
    sys.stdout.write(f"{PORT_LINE_PREFIX} port={port} base_url=http://127.0.0.1:{port}/v1\n")
    sys.stdout.flush()
    try:
        evloop.run(_serve_until_signal(server, sock))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
