"""``AnthropicModel``: the Anthropic Messages API as a Fore model provider.

The same contract as :class:`~actors.llm.models.OpenAICompatible` -- one
``await model.stream(request, emit, http)`` per attempt on the gateway's
loop, typed errors (:func:`~actors.llm.errors.llm_error`) that the loop's
retry policy and budget act on -- and the same defences against a hostile
server, reused rather than rewritten: :class:`~actors.llm.body.BodyLimits`
(line, event, stream, body and error-body caps), the bounded gzip/deflate
decoder, the bounded SSE parser, and the first-byte / idle / no-progress /
total deadlines of one clock. The wire format is :mod:`actors.llm.anthropic_wire`.

What differs from OpenAI, and why it matters here:

* **Prompt caching is explicit.** Nothing is cached without ``cache_control``
  breakpoints, so without them every suggestion, speculation and pipelined
  request -- each a fork repeating the main request's prompt byte for byte --
  would pay the full input price. The codec marks the tools, the system
  prompt, the end of the previous model turn and the final message (at most
  four, the API's limit), so the main request, its forks and the next main
  request read each other's prefix. :attr:`AnthropicModel.meter` keeps the
  figures (``cache_read_input_tokens`` / ``cache_creation_input_tokens`` per
  purpose) that ``fore chat``'s ``/cost`` and ``fore bench --provider
  anthropic`` show.
* **A change of ``tool_choice`` or ``thinking`` misses the message cache.** A
  suggestion asks for ``tool_choice: none``; sent as is, it would re-read the
  whole history at full price. So by default (``fork_tool_choice="match_main"``)
  a fork that asks for ``none`` is sent ``auto``, as main requests are, and any
  tool call in its answer is dropped (the caller asked for none). Extended
  thinking (``thinking_budget``) is for main requests only -- never for forks,
  whose answers nobody reads as they think -- and only where the API allows it:
  at the start of a turn (history keeps no thinking blocks to send back within
  a tool loop) and with a tool choice that does not force a call.
* **``max_tokens`` is required**: always sent, never above ``max_output_tokens``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import httpx

from fore.actors.llm.anthropic_wire import (
    ANTHROPIC_VERSION,
    AnthropicAssembler,
    CacheTtl,
    Thinking,
    anthropic_error,
    complete_from_message,
    dumps,
    request_body,
)
from fore.actors.llm.body import ACCEPT_ENCODING, BodyLimits, BoundedDecoder, SseParser, read_body
from fore.actors.llm.errors import (
    LlmException,
    error_from_status,
    format_size,
    llm_error,
    provider_error_details,
)
from fore.actors.llm.meter import UsageMeter
from fore.actors.llm.models import (
    _BATCH_FULL_BYTES,
    _BATCHED_PURPOSES,
    BACKGROUND_READ_INTERVAL_S,
    RetryPolicy,
    StreamResult,
    Timeouts,
    _acyclic_stream,
    _Clock,
    _drain,
    _env,
    _pause,
    connect_problem,
)
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.llm import Deadline, LlmRequest, ToolChoice

DEFAULT_BASE_URL = "https://api.anthropic.com"

DEFAULT_MODEL = "claude-sonnet-4-5"

DEFAULT_MAX_OUTPUT_TOKENS = 8192
"""The output cap assumed when none is configured: every current Claude model
accepts at least this ``max_tokens`` (the API refuses more than a model's limit)."""

ForkToolChoice = Literal["match_main", "as_requested"]

MAX_PAUSE_CONTINUATIONS = 3
"""How often a turn the API paused (``pause_turn``) is continued before it is an error."""

_ONE_SHOT_PURPOSES = frozenset({"suggestion", "pipelined"})
"""Requests nothing extends: their final message gets no breakpoint (a cache write
costs 1.25x the input price; only the snapshot's end, which the speculation and the
next main request extend, is worth writing)."""


def _messages_url(base_url: str) -> str:
    """``/v1/messages`` under ``base_url``, which may or may not end in ``/v1``."""
    path = urlsplit(base_url).path.rstrip("/")
    return f"{base_url}/messages" if path.endswith("/v1") else f"{base_url}/v1/messages"


class AnthropicModel:
    """The Anthropic Messages API (``POST /v1/messages``).

    Configuration comes from the arguments or, when absent, the environment:
    ``ANTHROPIC_BASE_URL`` (default ``https://api.anthropic.com``; a URL ending
    in ``/v1`` works too), ``ANTHROPIC_API_KEY`` / ``FORE_API_KEY``,
    ``ANTHROPIC_MODEL`` / ``FORE_MODEL``, ``FORE_MAX_OUTPUT_TOKENS``.

    * ``max_output_tokens`` -- the model's output limit (default
      :data:`DEFAULT_MAX_OUTPUT_TOKENS`): every request carries ``max_tokens``
      (the API requires it), the request's own or this limit, never more.
    * ``cache`` -- place ``cache_control`` breakpoints (default on);
      ``cache_ttl`` ``"5m"`` (default) or ``"1h"``.
    * ``thinking_budget`` -- extended thinking for main requests (see the
      module docs); ``None`` (default): off.
    * ``fork_tool_choice`` -- ``"match_main"`` (default): a fork asking for
      ``tool_choice: none`` is sent ``auto`` so it hits the main request's
      message cache, and tool calls in its answer are dropped;
      ``"as_requested"``: sent as asked.
    * ``stream``, ``limits``, ``timeouts``, ``retry``,
      ``background_read_interval``: as for
      :class:`~actors.llm.models.OpenAICompatible`.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        version: str = ANTHROPIC_VERSION,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        stream: bool | None = None,
        max_output_tokens: int | None = None,
        limits: BodyLimits | None = None,
        background_read_interval: float = BACKGROUND_READ_INTERVAL_S,
        cache: bool = True,
        cache_ttl: CacheTtl = "5m",
        thinking_budget: int | None = None,
        fork_tool_choice: ForkToolChoice = "match_main",
    ) -> None:
        self.base_url = (base_url or _env("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        self.api_key = api_key if api_key is not None else _env("ANTHROPIC_API_KEY", "FORE_API_KEY")
        self.name = model or _env("ANTHROPIC_MODEL", "FORE_MODEL") or DEFAULT_MODEL
        self.headers = dict(headers or {})
        self.version = version
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self.stream_answers = stream
        if max_output_tokens is None:
            raw = _env("FORE_MAX_OUTPUT_TOKENS")
            try:
                max_output_tokens = int(raw) if raw else DEFAULT_MAX_OUTPUT_TOKENS
            except ValueError:
                raise ValueError(
                    f"FORE_MAX_OUTPUT_TOKENS must be a whole number, got {raw!r}"
                ) from None
        if max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {max_output_tokens}")
        self.max_output_tokens = max_output_tokens
        self.limits = limits or BodyLimits()
        if not background_read_interval >= 0:
            raise ValueError(
                f"background_read_interval must be >= 0, got {background_read_interval!r}"
            )
        self.background_read_interval = background_read_interval
        if cache_ttl not in ("5m", "1h"):
            raise ValueError(f"cache_ttl must be '5m' or '1h', got {cache_ttl!r}")
        self.cache = cache
        self.cache_ttl: CacheTtl = cache_ttl
        self.thinking = Thinking(thinking_budget) if thinking_budget is not None else None
        if fork_tool_choice not in ("match_main", "as_requested"):
            raise ValueError(
                f"fork_tool_choice must be 'match_main' or 'as_requested', got {fork_tool_choice!r}"
            )
        self.fork_tool_choice: ForkToolChoice = fork_tool_choice
        self.url = _messages_url(self.base_url)
        self.meter = UsageMeter()
        """Usage as billed, by purpose (cache reads and writes included): every completed
        answer, and every stream that ended early -- cancelled by an abort, or failed --
        after the server had reported its prompt (``message_start``)."""

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.name!r}, base_url={self.base_url!r})"

    # -- shaping the request ------------------------------------------------------------------

    def shape(self, request: LlmRequest) -> LlmRequest:
        """``request`` with ``max_tokens`` set (the API requires it) and within the limit."""
        cap = self.max_output_tokens
        wanted = request.max_tokens
        if wanted is None or wanted > cap:
            return request.model_copy(update={"max_tokens": cap})
        return request

    def _sent_tool_choice(self, request: LlmRequest) -> ToolChoice:
        if (
            request.tool_choice == "none"
            and request.purpose != "main"
            and self.fork_tool_choice == "match_main"
        ):
            return "auto"
        return request.tool_choice

    def _thinking(
        self, request: LlmRequest, tool_choice: ToolChoice, max_tokens: int
    ) -> Thinking | None:
        thinking = self.thinking
        if (
            thinking is None
            or request.purpose != "main"
            or tool_choice not in ("auto", "none")
            or max_tokens <= thinking.budget_tokens
            or not request.messages
            or not isinstance(request.messages[-1], UserMessage)
        ):
            return None
        return thinking

    def body(
        self, request: LlmRequest, *, stream: bool | None = None, prefill: str | None = None
    ) -> dict[str, Any]:
        """The JSON body :meth:`stream` sends for ``request`` (shaped first)."""
        request = self.shape(request)
        max_tokens = cast(int, request.max_tokens)
        tool_choice = self._sent_tool_choice(request)
        return request_body(
            model=request.model_name or self.name,
            items=request.messages,
            tools=request.tools,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
            stream=request.stream if stream is None else stream,
            temperature=request.temperature,
            # (a prefill cannot start with the thinking block the API would then want)
            thinking=None if prefill else self._thinking(request, tool_choice, max_tokens),
            cache=self.cache,
            cache_ttl=self.cache_ttl,
            cache_final=request.purpose not in _ONE_SHOT_PURPOSES,
            prefill=prefill,
        )

    def _headers(self, request: LlmRequest, stream: bool) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "Accept-Encoding": ACCEPT_ENCODING,
            "anthropic-version": self.version,
            "X-Fore-Session": request.session_id,
            "X-Fore-Purpose": request.purpose,
            "X-Fore-Request-Id": request.request_id,
        }
        if self.api_key:
            headers["x-api-key"] = self.api_key
        headers.update(self.headers)
        return headers

    # -- one attempt ---------------------------------------------------------------------------

    async def stream(self, request: LlmRequest, emit: Any, http: httpx.AsyncClient) -> StreamResult:
        """Answer ``request``; a turn the API paused (``pause_turn``) is continued.

        The API pauses a long turn and expects the answer back as the final
        (assistant) message to go on from it: up to :data:`MAX_PAUSE_CONTINUATIONS`
        times, the text so far is sent back and the continuation joined to it.
        """
        result = await self._attempt(request, emit, http)
        for _ in range(MAX_PAUSE_CONTINUATIONS):
            paused = result.message
            if result.finish_reason != "pause_turn" or paused.tool_calls:
                break
            prefill = paused.text.rstrip()
            if not prefill:
                break
            more = await self._attempt(request, emit, http, prefill=prefill)
            message = AssistantMessage(
                text=prefill + more.message.text, tool_calls=more.message.tool_calls
            )
            result = StreamResult(message, result.usage + more.usage, more.finish_reason)
        if result.finish_reason == "pause_turn":
            raise llm_error(
                "incomplete",
                "the API paused the turn (pause_turn) and it could not be continued"
                f" within {MAX_PAUSE_CONTINUATIONS} continuations",
                retryable=False,
            )
        return result

    async def _attempt(
        self,
        request: LlmRequest,
        emit: Any,
        http: httpx.AsyncClient,
        *,
        prefill: str | None = None,
    ) -> StreamResult:
        whole = self.stream_answers is False and request.stream
        stream = request.stream and not whole
        payload = dumps(self.body(request, stream=stream, prefill=prefill)).encode()
        t = self.timeouts
        loop = asyncio.get_running_loop()
        clock = _Clock(loop, t, stream=stream, start=loop.time())
        read = max(t.first_byte, t.idle) if stream else t.total
        timeout = httpx.Timeout(connect=t.connect, read=read, write=t.write, pool=t.connect)
        try:
            async with (
                asyncio.timeout_at(clock.first) as guard,
                _acyclic_stream(
                    http,
                    "POST",
                    self.url,
                    content=payload,
                    headers=self._headers(request, stream),
                    timeout=timeout,
                ) as response,
            ):
                clock.arm(guard)
                if response.status_code != 200:
                    raise await self._status_error(response)
                if not stream:
                    raw = await read_body(
                        response,
                        self.limits.max_body_bytes,
                        knob="max_body_bytes",
                        what="the response body",
                        truncate=False,
                    )
                    result = self._complete(request, response, raw)
                    if whole and request.stream_deltas and result.message.text:
                        emit(result.message.text)
                else:
                    result = await self._read_stream(request, response, emit, clock)
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
        result = self._as_asked(request, result)
        self.meter.record(request.purpose, result.usage)
        return result

    def _as_asked(self, request: LlmRequest, result: StreamResult) -> StreamResult:
        """A fork that asked for no tool calls gets none (see ``fork_tool_choice``)."""
        if request.tool_choice != "none" or not result.message.tool_calls:
            return result
        message = AssistantMessage(text=result.message.text)
        reason = "stop" if result.finish_reason == "tool_calls" else result.finish_reason
        return StreamResult(message, result.usage, reason)

    def _complete(self, request: LlmRequest, response: httpx.Response, raw: bytes) -> StreamResult:
        try:
            data = json.loads(raw)
        except ValueError:
            detail, _ = provider_error_details(raw[:4096])
            content_type = response.headers.get("content-type") or "no content type"
            raise llm_error(
                "protocol",
                f"response body is not JSON ({content_type})"
                + (f": {detail[:200]}" if detail else ""),
                retryable=True,
                provider_message=detail,
            ) from None
        message, usage, reason = complete_from_message(
            request.request_id, data, max_tool_calls=self.limits.max_tool_calls
        )
        return StreamResult(message, usage, reason)

    async def _status_error(self, response: httpx.Response) -> LlmException:
        """A non-200 answer as a typed error (its body read only up to its cap).

        529 ("overloaded") is a retryable server error like any 5xx, and a 429's
        ``retry-after`` is honoured by the loop's retry policy.
        """
        body = await read_body(
            response,
            self.limits.max_error_body_bytes,
            knob="max_error_body_bytes",
            what="the error body",
            truncate=True,
        )
        exc = error_from_status(response.status_code, body, response.headers)
        if response.status_code == 404:
            message = (
                f"{exc.error.message} (POST {self.url}); check the base URL and the model name"
            )
            exc = LlmException(exc.error.model_copy(update={"message": message}))
        return exc

    def _timeout_error(self, deadline: Deadline) -> LlmException:
        t = self.timeouts
        messages = {
            "first_byte": f"no first byte within {t.first_byte:g}s",
            "idle": f"no data for {t.idle:g}s (idle timeout)",
            "no_progress": (
                f"no progress for {t.no_progress:g}s: the stream kept sending, but no text,"
                " tool call or stop reason"
            ),
        }
        message = messages.get(
            deadline, f"no complete answer within {t.total:g}s (the overall deadline)"
        )
        return llm_error("timeout", message, deadline=deadline)

    async def _read_stream(
        self, request: LlmRequest, response: httpx.Response, emit: Any, clock: _Clock
    ) -> StreamResult:
        """Read the event stream within the limits (as the OpenAI client does).

        The stream is whole at ``message_stop``; what follows is drained
        briefly so the connection can be reused. A request nobody watches
        (``speculation``, ``pipelined``) is read in batches.
        """
        content_type = response.headers.get("content-type") or ""
        if "text/event-stream" not in content_type.lower():
            raise await self._not_an_event_stream(response)
        limits = self.limits
        assembler = AnthropicAssembler(
            request.request_id,
            tool_events=request.stream_deltas and request.stream_tool_deltas,
            max_answer_chars=limits.max_answer_chars,
            max_tool_calls=limits.max_tool_calls,
        )
        want_text = request.stream_deltas
        pause = self.background_read_interval if request.purpose in _BATCHED_PURPOSES else 0.0
        decoder = BoundedDecoder.for_response(response)
        sse = SseParser(limits.max_line_bytes)
        raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())
        total = 0
        ended = False
        try:
            while not ended and not assembler.stopped:
                try:
                    chunk = await anext(raw)
                except StopAsyncIteration:
                    ended = True
                    pieces: Iterable[bytes] = (b"",)
                else:
                    pieces = decoder.decode(chunk)
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
                    if events:
                        _feed(assembler, events, emit, want_text)
                        if assembler.stopped:
                            break
                clock.data(assembler.progress)
                if pause and not ended and not assembler.stopped and len(chunk) < _BATCH_FULL_BYTES:
                    await _pause(response, pause)
            message, usage, reason = assembler.finish()
            if assembler.stopped:
                clock.done()
                await _drain(raw, min(self.timeouts.idle, self.timeouts.after_done))
        except BaseException:
            # Cancelled (an abort) or failed after message_start: the API bills the
            # prompt all the same, so the meter counts it (output as far as reported).
            if assembler.started:
                self.meter.record(request.purpose, assembler.usage)
            raise
        finally:
            await raw.aclose()
        return StreamResult(message, usage, reason)

    async def _not_an_event_stream(self, response: httpx.Response) -> LlmException:
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
        if isinstance(data, Mapping) and data.get("type") == "error":
            return anthropic_error(data.get("error"), where="response body")
        detail, _ = provider_error_details(body)
        content_type = response.headers.get("content-type") or "no content type"
        return llm_error(
            "protocol",
            f"expected an event stream, got {content_type}"
            + (f": {detail[:200]}" if detail else ""),
            retryable=True,
            provider_message=detail,
        )


def _feed(assembler: AnthropicAssembler, events: list[bytes], emit: Any, want_text: bool) -> None:
    """Decode and feed events; new text is passed on before any tool event after it."""
    text = assembler.text
    seen = len(text)
    for data in events:
        try:
            event = json.loads(data)
        except ValueError:
            raise llm_error(
                "protocol",
                f"malformed JSON in stream event: {data[:80].decode(errors='replace')!r}",
                retryable=True,
            ) from None
        tool_events = assembler.feed(event)
        if tool_events:
            if want_text and len(text) > seen:
                emit("".join(text[seen:]))
                seen = len(text)
            for tool_event in tool_events:
                emit(tool_event)
        if assembler.stopped:
            break
    if want_text and len(text) > seen:
        emit(text[seen] if len(text) == seen + 1 else "".join(text[seen:]))


__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MAX_OUTPUT_TOKENS", "AnthropicModel"]
