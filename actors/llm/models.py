"""Model providers: what actually answers an :class:`~messages.llm.LlmRequest`.

Three kinds share one async interface, ``await model.stream(request, emit, http)``
(:class:`~fore.actors.llm.chat_model.ChatModel`), run by the gateway's event loop:

* :class:`OpenAICompatible` -- any OpenAI-compatible Chat Completions endpoint
  (OpenAI, vLLM, llama.cpp server, Ollama, DashScope, OpenRouter, the built-in
  mock server), streaming over SSE;
* :class:`ScriptedModel` -- offline and deterministic, from the public script
  format (:mod:`actors.llm.script`), streamed with the same schedule the mock
  server uses;
* :class:`FunctionModel` -- ``fn(request)`` decides each reply, for tests that
  must react to what they are sent.

This module is the OpenAI-compatible client: its configuration, the streaming read
with its deadlines (:class:`_Clock`, shared with the Anthropic client) and the error
mapping. The protocol with its shared configuration (``RetryPolicy``, ``Timeouts``)
lives in :mod:`~fore.actors.llm.chat_model`, the two offline models in
:mod:`~fore.actors.llm.offline`; their names stay importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import re
import socket
import ssl
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

import httpx

from fore.actors.core.logs import get_logger
from fore.actors.llm.body import ACCEPT_ENCODING, BodyLimits, BoundedDecoder, SseParser, read_body
from fore.actors.llm.chat_model import (
    ChatModel,
    Emit,
    RetryPolicy,
    StreamResult,
    StructuredOutput,
    Timeouts,
    _structured_output,
)
from fore.actors.llm.errors import (
    LlmException,
    error_from_payload,
    error_from_status,
    format_size,
    llm_error,
    provider_error_details,
)
from fore.actors.llm.netio import FLOW_EXTENSION
from fore.actors.llm.offline import (
    FunctionModel,
    ReplyLike,
    ScriptedModel,
    estimate_tokens,
    last_input_text,
    stream_reply,
)
from fore.actors.llm.wire import (
    MaxTokensField,
    StreamAssembler,
    complete_from_body,
    request_payload,
)
from fore.messages.llm import Deadline, LlmRequest

__all__ = [
    "BACKGROUND_READ_INTERVAL_S",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "ChatModel",
    "Emit",
    "FunctionModel",
    "OpenAICompatible",
    "ReplyLike",
    "RetryPolicy",
    "ScriptedModel",
    "StreamResult",
    "StructuredOutput",
    "Timeouts",
    "connect_problem",
    "estimate_tokens",
    "last_input_text",
    "stream_reply",
]


log = get_logger(__name__)


DEFAULT_MAX_OUTPUT_TOKENS = 4096
"""The output cap a model is assumed to accept when none is configured.

Providers reject a ``max_tokens`` above their model's output limit (OpenAI's
models have 4,096 to 128k; llama.cpp is bounded by its context), so a request
never carries more than ``OpenAICompatible(max_output_tokens=...)``: 4,096 is
what every current model accepts."""


BACKGROUND_READ_INTERVAL_S = 0.1
"""How often the stream of a request nobody watches is read (see ``OpenAICompatible``).

Also the most it can delay noticing that such an answer is complete: a
speculation's end (what a Tab that arrived while it ran waits for) comes up
to this late, so it is kept well under the time a person takes to read."""


_BATCHED_PURPOSES = frozenset({"speculation", "pipelined"})
"""Purposes whose streams are read in batches. A suggestion is not: it is short
(``suggestion_max_tokens``) and the sooner it is complete, the sooner its
speculation can start -- before the user has begun to type."""


_BATCH_FULL_BYTES = 8 * 1024
"""A raw read at least this large suggests more is already buffered: read on
without the pause (so a fast server is not throttled by it)."""


_DRAIN_BYTES = 64 * 1024
"""What is read after ``[DONE]`` to find the end of the body, at most."""


class _Clock:
    """The one deadline that guards an attempt, moved along as the attempt progresses.

    Every :class:`Timeouts` deadline is a point in time; the guard is set to
    the earliest, and when it fires :meth:`expired` says which one passed.
    Moving a deadline costs a timer per move; events of one burst arrive
    within microseconds, so the guard moves only when it would move by more
    than ``slack`` (it may then fire up to ``slack`` early, which no real
    stream can tell from exact).
    """

    __slots__ = (
        "_guard",
        "_idle",
        "_loop",
        "_no_progress",
        "_scheduled",
        "_slack",
        "got_data",
        "idle_at",
        "progress",
        "progress_at",
        "stream",
        "total_at",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, t: Timeouts, *, stream: bool, start: float
    ) -> None:
        self._loop = loop
        self._guard: asyncio.Timeout | None = None
        self._idle = t.idle
        self._no_progress = t.no_progress
        self._slack = min(0.05, t.idle / 20, t.no_progress / 20)
        self.stream = stream
        self.got_data = False
        self.total_at = start + t.total
        self.idle_at = min(start + t.first_byte, self.total_at) if stream else self.total_at
        self.progress_at = self.total_at
        self.progress = 0
        self._scheduled = self.idle_at

    @property
    def first(self) -> float:
        return self._scheduled

    def arm(self, guard: asyncio.Timeout) -> None:
        self._guard = guard

    def data(self, progress: int) -> None:
        """Data arrived; ``progress`` is the assembler's count of chunks that said something."""
        now = self._loop.time()
        if not self.got_data:
            self.got_data = True
            self.progress_at = min(now + self._no_progress, self.total_at)
        if progress != self.progress:
            self.progress = progress
            self.progress_at = min(now + self._no_progress, self.total_at)
        self.idle_at = now + self._idle
        target = min(self.idle_at, self.progress_at)
        # Later by more than the slack, or earlier at all (the first data can
        # bring the no-progress deadline before the first-byte one).
        moved = target - self._scheduled
        if (moved > self._slack or moved < 0) and self._guard is not None:
            self._scheduled = target
            self._guard.reschedule(target)

    def done(self) -> None:
        """The answer is complete: only the after-``[DONE]`` drain (its own bound) is left."""
        if self._guard is not None:
            self._guard.reschedule(None)

    def expired(self) -> Deadline:
        """The deadline that passed (called when the guard fired)."""
        if not self.stream:
            return "total"
        if not self.got_data:
            return "total" if self.total_at <= self.idle_at else "first_byte"
        soonest = min(self.idle_at, self.progress_at)
        if self.total_at <= soonest:
            return "total"
        return "no_progress" if self.progress_at <= self.idle_at else "idle"


def _env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


class OpenAICompatible:
    """An OpenAI-compatible Chat Completions endpoint.

    Configuration comes from the arguments or, when absent, from the usual
    environment variables: ``FORE_BASE_URL`` / ``OPENAI_BASE_URL``,
    ``FORE_API_KEY`` / ``OPENAI_API_KEY``, ``FORE_MODEL`` / ``OPENAI_MODEL``,
    ``FORE_EXTRA_HEADERS`` (a JSON object of extra headers),
    ``FORE_MAX_OUTPUT_TOKENS`` and ``FORE_MAX_TOKENS_FIELD``.

    * ``max_output_tokens`` -- the model's output limit: no request carries a
      larger ``max_tokens`` (a larger one, e.g. a speculation's remaining token
      budget, is lowered to it; providers reject values above their limit).
      Default :data:`DEFAULT_MAX_OUTPUT_TOKENS`. Requests without ``max_tokens``
      send none.
    * ``max_tokens_field`` -- ``"max_tokens"`` (default) or
      ``"max_completion_tokens"`` (OpenAI's reasoning models reject the former).
    * ``limits`` -- how much of an answer is read (:class:`~actors.llm.body.BodyLimits`).
    * ``background_read_interval`` -- the stream of a request nobody watches
      (purpose ``speculation``, ``pipelined``) is read in batches,
      at most every this many seconds (0: as it arrives). Forks are streamed so
      that an abort closes the connection mid-answer and the server stops
      generating (a server notices a client that left only when it writes to
      it); reading their events in batches -- one JSON decode per batch, not per
      token -- keeps what that costs the process close to a non-streamed answer.

    ``stream=False`` asks this endpoint for whole answers even where the caller
    asked for a stream (``None``, the default: as each request says). Some
    servers can do tool calling only unstreamed -- llama-cpp-python's
    ``chatml-function-calling`` answers a streamed ``tool_choice: "auto"`` with
    HTTP 500 when the model picks a tool. The caller still gets the answer's
    text as one delta once it is complete. The price: an abort cannot stop such
    a server's generation (it notices a closed connection only when it writes).

    ``structured_output`` -- how ``submit(output_type=...)`` asks this endpoint
    for a typed answer: ``"json_schema"`` (the response format; OpenAI, vLLM,
    llama.cpp's server enforce it while decoding), ``"tool"`` (a
    ``final_answer`` tool: any server with tool calling), or ``"auto"``
    (default): the response format, and the tool from the first request the
    server refuses it on. A server that silently *ignores* the format needs
    ``"tool"``.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        stream: bool | None = None,
        max_output_tokens: int | None = None,
        max_tokens_field: MaxTokensField | None = None,
        limits: BodyLimits | None = None,
        background_read_interval: float = BACKGROUND_READ_INTERVAL_S,
        structured_output: StructuredOutput = "auto",
    ) -> None:
        self.structured_output = _structured_output(structured_output)
        self.stream_answers = stream
        self.base_url = (
            base_url or _env("FORE_BASE_URL", "OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self.api_key = api_key if api_key is not None else _env("FORE_API_KEY", "OPENAI_API_KEY")
        self.name = model or _env("FORE_MODEL", "OPENAI_MODEL") or "gpt-4o-mini"
        extra: dict[str, str] = {}
        raw_headers = _env("FORE_EXTRA_HEADERS")
        if raw_headers:
            try:
                parsed = json.loads(raw_headers)
            except ValueError as exc:
                raise ValueError(f"FORE_EXTRA_HEADERS is not a JSON object: {exc}") from None
            if not isinstance(parsed, dict):
                raise ValueError("FORE_EXTRA_HEADERS is not a JSON object")
            extra.update({str(k): str(v) for k, v in parsed.items()})
        extra.update(headers or {})
        self.headers = extra
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        if max_output_tokens is None:
            raw_cap = _env("FORE_MAX_OUTPUT_TOKENS")
            try:
                max_output_tokens = int(raw_cap) if raw_cap else DEFAULT_MAX_OUTPUT_TOKENS
            except ValueError:
                raise ValueError(
                    f"FORE_MAX_OUTPUT_TOKENS must be a whole number, got {raw_cap!r}"
                ) from None
        if max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {max_output_tokens}")
        self.max_output_tokens = max_output_tokens
        field_name = max_tokens_field or _env("FORE_MAX_TOKENS_FIELD") or "max_tokens"
        if field_name not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(
                "max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                f"got {field_name!r}"
            )
        self.max_tokens_field: MaxTokensField = cast(MaxTokensField, field_name)
        self.limits = limits or BodyLimits()
        if not background_read_interval >= 0:
            raise ValueError(
                f"background_read_interval must be >= 0, got {background_read_interval!r}"
            )
        self.background_read_interval = background_read_interval

    def __repr__(self) -> str:
        return f"OpenAICompatible(model={self.name!r}, base_url={self.base_url!r})"

    def _headers(self, request: LlmRequest) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if request.stream else "application/json",
            # Only what can be decoded in bounded steps (actors.llm.body).
            "Accept-Encoding": ACCEPT_ENCODING,
            "X-Fore-Session": request.session_id,
            "X-Fore-Purpose": request.purpose,
            "X-Fore-Request-Id": request.request_id,
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        return headers

    def shape(self, request: LlmRequest) -> LlmRequest:
        """``request`` as sent: its ``max_tokens`` no higher than the model's output limit."""
        if request.max_tokens is not None and request.max_tokens > self.max_output_tokens:
            return request.model_copy(update={"max_tokens": self.max_output_tokens})
        return request

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        whole = self.stream_answers is False and request.stream
        if whole:
            request = request.model_copy(update={"stream": False})
        request = self.shape(request)
        payload = request_payload(
            request, request.model_name or self.name, max_tokens_field=self.max_tokens_field
        )
        t = self.timeouts
        loop = asyncio.get_running_loop()
        clock = _Clock(loop, t, stream=request.stream, start=loop.time())
        # One asyncio deadline guards the whole attempt and is moved along as
        # it progresses (_Clock). httpx's own read timeout applies to every
        # socket read -- waiting for the headers and for the first event
        # included -- so it is only a backstop and must not be shorter than
        # any of those deadlines.
        read = max(t.first_byte, t.idle) if request.stream else t.total
        timeout = httpx.Timeout(connect=t.connect, read=read, write=t.write, pool=t.connect)
        try:
            async with (
                asyncio.timeout_at(clock.first) as guard,
                _acyclic_stream(
                    http,
                    "POST",
                    self.url,
                    content=payload,
                    headers=self._headers(request),
                    timeout=timeout,
                ) as response,
            ):
                clock.arm(guard)
                if response.status_code != 200:
                    raise await self._status_error(response)
                if not request.stream:
                    body = await read_body(
                        response,
                        self.limits.max_body_bytes,
                        knob="max_body_bytes",
                        what="the response body",
                        truncate=False,
                    )
                    result = _complete(request, response, body)
                    if whole and request.stream_deltas and result.message.text:
                        emit(result.message.text)
                    return result
                return await self._read_stream(request, response, emit, clock)
        except LlmException:
            raise
        except (TimeoutError, httpx.ReadTimeout):
            raise self._timeout_error(clock.expired()) from None
        except httpx.ConnectTimeout:
            raise llm_error(
                "timeout", f"could not connect within {t.connect:g}s", deadline="connect"
            ) from None
        except httpx.WriteTimeout:
            raise llm_error(
                "timeout", f"could not send the request within {t.write:g}s", deadline="write"
            ) from None
        except httpx.PoolTimeout:
            raise llm_error(
                "timeout",
                f"no free connection within {t.connect:g}s (pool exhausted)",
                deadline="pool",
            ) from None
        except httpx.ConnectError as exc:
            raise llm_error(
                "connection", f"cannot connect to {self.base_url}: {connect_problem(exc)}"
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise llm_error("connection", f"connection broke mid-answer: {exc}") from None
        except httpx.HTTPError as exc:
            raise llm_error("connection", f"HTTP error: {exc!r}") from None

    async def _status_error(self, response: httpx.Response) -> LlmException:
        """A non-200 answer as a typed error (its body read only up to its cap)."""
        body = await read_body(
            response,
            self.limits.max_error_body_bytes,
            knob="max_error_body_bytes",
            what="the error body",
            truncate=True,
        )
        exc = error_from_status(response.status_code, body, response.headers)
        if response.status_code == 404:
            message = f"{exc.error.message} (POST {self.url}){_hint_404(self.base_url)}"
            exc = LlmException(exc.error.model_copy(update={"message": message}))
        return exc

    def _timeout_error(self, deadline: Deadline) -> LlmException:
        t = self.timeouts
        if deadline == "first_byte":
            message = f"no first byte within {t.first_byte:g}s"
        elif deadline == "idle":
            message = f"no data for {t.idle:g}s (idle timeout)"
        elif deadline == "no_progress":
            message = (
                f"no progress for {t.no_progress:g}s: the stream kept sending, but no text,"
                " tool call or finish reason"
            )
        else:
            message = f"no complete answer within {t.total:g}s (the overall deadline)"
        return llm_error("timeout", message, deadline=deadline)

    async def _read_stream(
        self,
        request: LlmRequest,
        response: httpx.Response,
        emit: Emit,
        clock: _Clock,
    ) -> StreamResult:
        """Read an event stream within the limits; see :mod:`actors.llm.body`.

        A request nobody watches (purpose ``speculation`` or ``pipelined``) is read in
        batches (``background_read_interval``): after each read the task sleeps
        while the server's events pile up in the socket buffer, then handles
        them together -- one JSON decode for the batch, one text event.
        """
        content_type = response.headers.get("content-type") or ""
        if "text/event-stream" not in content_type.lower():
            raise await self._not_an_event_stream(response)
        limits = self.limits
        # Text is passed on as plain strings: the gateway merges tokens before
        # building a message, so a message object per token would be waste.
        assembler = StreamAssembler(
            request.request_id,
            text_events=False,
            tool_events=request.stream_deltas and request.stream_tool_deltas,
            max_answer_chars=limits.max_answer_chars,
            max_tool_calls=limits.max_tool_calls,
        )
        want_text = request.stream_deltas
        pause = self.background_read_interval if request.purpose in _BATCHED_PURPOSES else 0.0
        decoder = BoundedDecoder.for_response(response)
        sse = SseParser(limits.max_line_bytes)
        raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())
        feed = _feed_batch if pause else _feed_each
        total = 0
        saw_done = False
        ended = False
        try:
            while not ended and not saw_done:
                try:
                    chunk = await anext(raw)
                except StopAsyncIteration:
                    ended = True
                    pieces: Iterable[bytes] = (b"",)
                else:
                    pieces = decoder.decode(chunk)
                # Events are handled per decoded piece (at most PIECE_BYTES), so what
                # one raw chunk inflates to is never held as events all at once.
                for piece in pieces:
                    total += len(piece)
                    if total > limits.max_stream_bytes:
                        raise llm_error(
                            "protocol",
                            f"the event stream passed {format_size(limits.max_stream_bytes)}"
                            " (the client's limit, BodyLimits.max_stream_bytes): refused",
                            retryable=False,
                        )
                    events = sse.feed(piece) if piece else sse.close()
                    if events and feed(assembler, events, emit, want_text):
                        saw_done = True
                        break
                clock.data(assembler.progress)
                if pause and not ended and not saw_done and len(chunk) < _BATCH_FULL_BYTES:
                    await _pause(response, pause)
            message, usage, reason = assembler.finish(saw_done=saw_done)
            answered_by = assembler.model
            if saw_done:
                clock.done()
                await _drain(raw, min(self.timeouts.idle, self.timeouts.after_done))
        finally:
            await raw.aclose()
        return StreamResult(message, usage, reason, answered_by)

    async def _not_an_event_stream(self, response: httpx.Response) -> LlmException:
        """A 200 that is not an event stream: type it from the start of its body."""
        body = await read_body(
            response,
            self.limits.max_error_body_bytes,
            knob="max_error_body_bytes",
            what="the body",
            truncate=True,
        )
        try:
            data: Any = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, Mapping) and data.get("error") is not None:
            return error_from_payload(data["error"], where="response body")
        detail, _ = provider_error_details(body)
        content_type = response.headers.get("content-type") or "no content type"
        return llm_error(
            "protocol",
            f"expected an event stream, got {content_type}"
            + (f": {detail[:200]}" if detail else ""),
            retryable=True,
            provider_message=detail,
        )


async def _pause(response: httpx.Response, seconds: float) -> None:
    """Let a stream's events pile up for ``seconds``: in the kernel's socket buffer when
    the transport can stop reading (:data:`~actors.llm.netio.FLOW_EXTENSION`), else in
    the client's."""
    flow: Any = response.extensions.get(FLOW_EXTENSION)
    paused = flow is not None and bool(flow.pause_reading())
    try:
        await asyncio.sleep(seconds)
    finally:
        if paused:
            flow.resume_reading()


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise llm_error(
            "protocol",
            f"malformed JSON in stream chunk: {data[:80].decode(errors='replace')!r}",
            retryable=True,
        ) from None


def _feed(assembler: StreamAssembler, chunks: Sequence[Any], emit: Emit, want_text: bool) -> None:
    """Feed decoded chunks, text passed on in one piece per batch (before any tool event
    that follows it)."""
    text = assembler.text
    seen = len(text)
    for chunk in chunks:
        tool_events = assembler.feed(chunk)
        if tool_events:
            if want_text and len(text) > seen:
                emit("".join(text[seen:]))
                seen = len(text)
            for event in tool_events:
                emit(event)
    if want_text and len(text) > seen:
        emit(text[seen] if len(text) == seen + 1 else "".join(text[seen:]))


def _until_done(events: list[bytes]) -> tuple[list[bytes], bool]:
    """The events before ``[DONE]``, and whether it came."""
    try:
        end = events.index(b"[DONE]")
    except ValueError:
        return events, False
    return events[:end], True


def _feed_each(
    assembler: StreamAssembler, events: list[bytes], emit: Emit, want_text: bool
) -> bool:
    """Decode and feed events one by one, text passed on per event (a watched stream shows
    each token as the server sent it); whether ``[DONE]`` came."""
    text = assembler.text
    for data in events:
        if data == b"[DONE]":
            return True
        seen = len(text)
        tool_events = assembler.feed(_loads(data))
        if want_text and len(text) > seen:  # text before tool calls, as in a delta
            emit(text[seen] if len(text) == seen + 1 else "".join(text[seen:]))
        for event in tool_events:
            emit(event)
    return False


def _feed_batch(
    assembler: StreamAssembler, events: list[bytes], emit: Emit, want_text: bool
) -> bool:
    """Decode a batch of events with one JSON parse (an array of them); whether ``[DONE]`` came.

    A batch that does not parse as exactly its events is decoded one by one,
    which names the malformed one.
    """
    events, done = _until_done(events)
    chunks: Any = None
    if len(events) > 1:
        try:
            chunks = json.loads(b"[" + b",".join(events) + b"]")
        except ValueError:
            chunks = None
        if not isinstance(chunks, list) or len(chunks) != len(events):
            chunks = None
    if chunks is None:
        chunks = [_loads(data) for data in events]
    _feed(assembler, chunks, emit, want_text)
    return done


_CLOSED_BODY = httpx.ByteStream(b"")


@contextlib.asynccontextmanager
async def _acyclic_stream(
    http: httpx.AsyncClient, method: str, url: str, **kwargs: Any
) -> AsyncIterator[httpx.Response]:
    """``http.stream(...)``, with httpx's response <-> body cycle broken once it is closed.

    httpx wraps a streamed body in a stream that refers back to its response,
    a reference cycle: every answer -- response, request, headers, the
    transport's own response -- would wait for the cyclic garbage collector,
    whose pauses stop every thread of the process (under load, the largest
    source of cyclic garbage here). Once httpx has closed the response, its
    body is swapped for an empty one and reference counting frees it all.
    """
    response: httpx.Response | None = None
    try:
        async with http.stream(method, url, **kwargs) as response:
            yield response
    finally:
        if response is not None:
            response.stream = _CLOSED_BODY


def _complete(request: LlmRequest, response: httpx.Response, raw: bytes) -> StreamResult:
    """A non-streaming answer; an unexpected body is a typed error that keeps it."""
    try:
        data = json.loads(raw)
    except ValueError:
        detail, _ = provider_error_details(raw[:_DRAIN_BYTES])
        content_type = response.headers.get("content-type") or "no content type"
        raise llm_error(
            "protocol",
            f"response body is not JSON ({content_type})" + (f": {detail[:200]}" if detail else ""),
            retryable=True,
            provider_message=detail,
        ) from None
    if isinstance(data, Mapping) and data.get("error") is not None:
        raise error_from_payload(data["error"], where="response body")
    message, usage, reason = complete_from_body(request.request_id, data)
    answered_by = data.get("model") if isinstance(data, Mapping) else None
    model = answered_by[:200] if isinstance(answered_by, str) else None
    return StreamResult(message, usage, reason, model)


async def _drain(raw: AsyncIterator[bytes], seconds: float) -> None:
    """Read what follows ``[DONE]`` (normally just the end of the body), briefly and boundedly."""
    read = 0
    try:
        async with asyncio.timeout(seconds):
            async for chunk in raw:
                read += len(chunk)
                if read > _DRAIN_BYTES:
                    break
            else:
                return
    except (TimeoutError, httpx.HTTPError):
        pass
    # The answer is complete; the connection is closed instead of reused.
    log.debug("llm_stream_not_closed_after_done", within_s=seconds, read=read)


def connect_problem(exc: BaseException) -> str:
    """Why a connection could not be made, in a few words (no transport internals).

    aiohttp's own message reads ``Cannot connect to host 127.0.0.1:9
    ssl:default [Connect call failed ('127.0.0.1', 9)]``; what the user needs
    is the operating system's reason, found on the exception chain.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or (
            isinstance(current, OSError) and current.errno == errno.ECONNREFUSED
        ):
            return "connection refused (is the server running and listening on that port?)"
        if isinstance(current, socket.gaierror):
            return f"cannot resolve the host name ({current.strerror or current})"
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"the server's TLS certificate is not trusted ({current.verify_message})"
        if isinstance(current, ssl.SSLError):
            return f"the TLS handshake failed ({current.reason or current})"
        if isinstance(current, OSError) and current.strerror:
            return current.strerror[:1].lower() + current.strerror[1:]
        os_error = getattr(current, "os_error", None)  # aiohttp's ClientConnectorError
        if isinstance(os_error, BaseException) and id(os_error) not in seen:
            current = os_error
            continue
        current = current.__cause__ or current.__context__
    text = _AIOHTTP_DETAIL.sub("", str(exc)).strip()
    return text or type(exc).__name__


_AIOHTTP_DETAIL = re.compile(r"\s*ssl:\S+\s*\[[^\]]*\]")


_VERSIONED_PATH = re.compile(r"/v\d+[a-z0-9]*(/|$)", re.IGNORECASE)


def _hint_404(base_url: str) -> str:
    """What a 404 from the chat endpoint probably means about the base URL."""
    if not _VERSIONED_PATH.search(urlsplit(base_url).path):
        return (
            f"; the base URL has no version path -- OpenAI-compatible servers serve"
            f" /v1/chat/completions: did you mean {base_url}/v1 ?"
        )
    return "; check the base URL and the model name"
