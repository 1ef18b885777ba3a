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

This module is the OpenAI-compatible client: its configuration, its events and
its errors. The HTTP side of an attempt (deadlines, the bounded stream read, the
mapping of transport errors) is :mod:`~fore.actors.llm.http_stream`, shared with
the Anthropic client; the protocol with its shared configuration (``RetryPolicy``,
``Timeouts``) lives in :mod:`~fore.actors.llm.chat_model`, the two offline models
in :mod:`~fore.actors.llm.offline`; their names stay importable from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

import httpx

from fore.actors.llm.body import ACCEPT_ENCODING, BodyLimits
from fore.actors.llm.chat_model import (
    ChatModel,
    Emit,
    RetryPolicy,
    StreamResult,
    StructuredOutput,
    Timeouts,
    _structured_output,
)
from fore.actors.llm.errors import LlmException, error_from_payload, llm_error
from fore.actors.llm.http_stream import (
    BACKGROUND_READ_INTERVAL_S,
    BATCHED_PURPOSES,
    DRAIN_BYTES,
    Clock,
    attempt,
    connect_problem,
    env,
    is_event_stream,
    loads_body,
    not_an_event_stream,
    output_cap,
    read_events,
    read_interval,
    read_whole,
    settle,
)
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
from fore.messages.llm import LlmRequest

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


DEFAULT_MAX_OUTPUT_TOKENS = 4096
"""The output cap a model is assumed to accept when none is configured.

Providers reject a ``max_tokens`` above their model's output limit (OpenAI's
models have 4,096 to 128k; llama.cpp is bounded by its context), so a request
never carries more than ``OpenAICompatible(max_output_tokens=...)``: 4,096 is
what every current model accepts."""


_Clock = Clock  # the name it had here (tests import it)

_ENDING = "finish reason"
"""What ends an answer on this wire, as a no-progress timeout names it."""


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
            base_url or env("FORE_BASE_URL", "OPENAI_BASE_URL") or "https://api.openai.com/v1"
        ).rstrip("/")
        self.api_key = api_key if api_key is not None else env("FORE_API_KEY", "OPENAI_API_KEY")
        self.name = model or env("FORE_MODEL", "OPENAI_MODEL") or "gpt-4o-mini"
        extra: dict[str, str] = {}
        raw_headers = env("FORE_EXTRA_HEADERS")
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
        self.max_output_tokens = output_cap(max_output_tokens, DEFAULT_MAX_OUTPUT_TOKENS)
        field_name = max_tokens_field or env("FORE_MAX_TOKENS_FIELD") or "max_tokens"
        if field_name not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(
                "max_tokens_field must be 'max_tokens' or 'max_completion_tokens', "
                f"got {field_name!r}"
            )
        self.max_tokens_field: MaxTokensField = cast(MaxTokensField, field_name)
        self.limits = limits or BodyLimits()
        self.background_read_interval = read_interval(background_read_interval)

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
        async with attempt(
            http,
            self.url,
            content=payload,
            headers=self._headers(request),
            stream=request.stream,
            timeouts=self.timeouts,
            limits=self.limits,
            base_url=self.base_url,
            hint_404=lambda: _hint_404(self.base_url),
            ending=_ENDING,
        ) as (response, clock):
            if not request.stream:
                result = _complete(request, response, await read_whole(response, self.limits))
                if whole and request.stream_deltas and result.message.text:
                    emit(result.message.text)
                return result
            return await self._read_stream(request, response, emit, clock)

    async def _read_stream(
        self,
        request: LlmRequest,
        response: httpx.Response,
        emit: Emit,
        clock: Clock,
    ) -> StreamResult:
        """Read an event stream within the limits; see :mod:`actors.llm.body`.

        A request nobody watches (purpose ``speculation`` or ``pipelined``) is read in
        batches (``background_read_interval``): after each read the task sleeps
        while the server's events pile up in the socket buffer, then handles
        them together -- one JSON decode for the batch, one text event.
        """
        if not is_event_stream(response):
            raise await not_an_event_stream(response, self.limits, _error_in)
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
        pause = self.background_read_interval if request.purpose in BATCHED_PURPOSES else 0.0
        raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())
        feed = _feed_batch if pause else _feed_each
        try:
            saw_done = await read_events(
                response,
                raw,
                limits=limits,
                clock=clock,
                assembler=assembler,
                pause=pause,
                feed=lambda events: feed(assembler, events, emit, want_text),
            )
            message, usage, reason = assembler.finish(saw_done=saw_done)
            answered_by = assembler.model
            if saw_done:
                await settle(clock, raw, self.timeouts)
        finally:
            await raw.aclose()
        return StreamResult(message, usage, reason, answered_by)


def _error_in(data: Any) -> LlmException | None:
    """The error an OpenAI-style body carries (``{"error": ...}``), if any."""
    if isinstance(data, Mapping) and data.get("error") is not None:
        return error_from_payload(data["error"], where="response body")
    return None


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


def _complete(request: LlmRequest, response: httpx.Response, raw: bytes) -> StreamResult:
    """A non-streaming answer; an unexpected body is a typed error that keeps it."""
    data = loads_body(response, raw, peek=DRAIN_BYTES)
    error = _error_in(data)
    if error is not None:
        raise error
    message, usage, reason = complete_from_body(request.request_id, data)
    answered_by = data.get("model") if isinstance(data, Mapping) else None
    model = answered_by[:200] if isinstance(answered_by, str) else None
    return StreamResult(message, usage, reason, model)


_VERSIONED_PATH = re.compile(r"/v\d+[a-z0-9]*(/|$)", re.IGNORECASE)


def _hint_404(base_url: str) -> str:
    """What a 404 from the chat endpoint probably means about the base URL."""
    if not _VERSIONED_PATH.search(urlsplit(base_url).path):
        return (
            f"; the base URL has no version path -- OpenAI-compatible servers serve"
            f" /v1/chat/completions: did you mean {base_url}/v1 ?"
        )
    return "; check the base URL and the model name"
