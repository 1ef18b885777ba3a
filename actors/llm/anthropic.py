"""``AnthropicModel``: the Anthropic Messages API as a Fore model provider.

The same contract as :class:`~actors.llm.models.OpenAICompatible` -- one
``await model.stream(request, emit, http)`` per attempt on the gateway's
loop, typed errors (:func:`~actors.llm.errors.llm_error`) that the loop's
retry policy and budget act on -- and the same defences against a hostile
server, reused rather than rewritten: :class:`~actors.llm.body.BodyLimits`
(line, event, stream, body and error-body caps), the bounded gzip/deflate
decoder, the bounded SSE parser, and the first-byte / idle / no-progress /
total deadlines of one clock. The wire format is :mod:`actors.llm.anthropic_wire` (the
request) and :mod:`actors.llm.anthropic_answer` (the answer).

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

import json
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import httpx

from fore.actors.llm.anthropic_answer import (
    AnthropicAssembler,
    anthropic_error,
    complete_from_message,
)
from fore.actors.llm.anthropic_wire import ANTHROPIC_VERSION, CacheTtl, Thinking, request_body
from fore.actors.llm.body import ACCEPT_ENCODING, BodyLimits
from fore.actors.llm.chat_model import RetryPolicy, StreamResult, Timeouts
from fore.actors.llm.codec import dumps
from fore.actors.llm.errors import LlmException, llm_error
from fore.actors.llm.http_stream import (
    BACKGROUND_READ_INTERVAL_S,
    BATCHED_PURPOSES,
    Clock,
    attempt,
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
from fore.actors.llm.meter import UsageMeter
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.llm import LlmRequest, ToolChoice

DEFAULT_BASE_URL = "https://api.anthropic.com"

DEFAULT_MODEL = "claude-sonnet-4-5"

DEFAULT_MAX_OUTPUT_TOKENS = 8192
"""The output cap assumed when none is configured: every current Claude model
accepts at least this ``max_tokens`` (the API refuses more than a model's limit)."""

ForkToolChoice = Literal["match_main", "as_requested"]

MAX_PAUSE_CONTINUATIONS = 3
"""How often a turn the API paused (``pause_turn``) is continued before it is an error."""

_HINT_404 = "; check the base URL and the model name"

_ENDING = "stop reason"
"""What ends an answer on this wire, as a no-progress timeout names it."""

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
        self.base_url = (base_url or env("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        self.api_key = api_key if api_key is not None else env("ANTHROPIC_API_KEY", "FORE_API_KEY")
        self.name = model or env("ANTHROPIC_MODEL", "FORE_MODEL") or DEFAULT_MODEL
        self.headers = dict(headers or {})
        self.version = version
        self.timeouts = timeouts or Timeouts()
        self.retry = retry or RetryPolicy()
        self.stream_answers = stream
        self.max_output_tokens = output_cap(max_output_tokens, DEFAULT_MAX_OUTPUT_TOKENS)
        self.limits = limits or BodyLimits()
        self.background_read_interval = read_interval(background_read_interval)
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
        # A non-200 answer is a typed error: 529 ("overloaded") a retryable server
        # error like any 5xx, and a 429's retry-after honoured by the loop's retry policy.
        async with attempt(
            http,
            self.url,
            content=payload,
            headers=self._headers(request, stream),
            stream=stream,
            timeouts=self.timeouts,
            limits=self.limits,
            base_url=self.base_url,
            hint_404=lambda: _HINT_404,
            ending=_ENDING,
        ) as (response, clock):
            if not stream:
                raw = await read_whole(response, self.limits)
                result = self._complete(request, response, raw)
                if whole and request.stream_deltas and result.message.text:
                    emit(result.message.text)
            else:
                result = await self._read_stream(request, response, emit, clock)
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
        data = loads_body(response, raw, peek=4096)
        message, usage, reason = complete_from_message(
            request.request_id, data, max_tool_calls=self.limits.max_tool_calls
        )
        return StreamResult(message, usage, reason)

    async def _read_stream(
        self, request: LlmRequest, response: httpx.Response, emit: Any, clock: Clock
    ) -> StreamResult:
        """Read the event stream within the limits (as the OpenAI client does).

        The stream is whole at ``message_stop``; what follows is drained
        briefly so the connection can be reused. A request nobody watches
        (``speculation``, ``pipelined``) is read in batches.
        """
        if not is_event_stream(response):
            raise await not_an_event_stream(response, self.limits, _error_in)
        limits = self.limits
        assembler = AnthropicAssembler(
            request.request_id,
            tool_events=request.stream_deltas and request.stream_tool_deltas,
            max_answer_chars=limits.max_answer_chars,
            max_tool_calls=limits.max_tool_calls,
        )
        want_text = request.stream_deltas
        pause = self.background_read_interval if request.purpose in BATCHED_PURPOSES else 0.0
        raw = cast(AsyncGenerator[bytes, None], response.aiter_raw())
        try:
            stopped = await read_events(
                response,
                raw,
                limits=limits,
                clock=clock,
                assembler=assembler,
                pause=pause,
                feed=lambda events: _feed(assembler, events, emit, want_text),
            )
            message, usage, reason = assembler.finish()
            if stopped:
                await settle(clock, raw, self.timeouts)
        except BaseException:
            # Cancelled (an abort) or failed after message_start: the API bills the
            # prompt all the same, so the meter counts it (output as far as reported).
            if assembler.started:
                self.meter.record(request.purpose, assembler.usage)
            raise
        finally:
            await raw.aclose()
        return StreamResult(message, usage, reason)


def _error_in(data: Any) -> LlmException | None:
    """The error an Anthropic body carries (``{"type": "error", "error": ...}``), if any."""
    if isinstance(data, Mapping) and data.get("type") == "error":
        return anthropic_error(data.get("error"), where="response body")
    return None


def _feed(assembler: AnthropicAssembler, events: list[bytes], emit: Any, want_text: bool) -> bool:
    """Decode and feed events; new text is passed on before any tool event after it.
    Whether the message is complete (``message_stop``)."""
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
    return assembler.stopped


__all__ = ["DEFAULT_BASE_URL", "DEFAULT_MAX_OUTPUT_TOKENS", "AnthropicModel"]
