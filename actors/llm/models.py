"""Model providers: what actually answers an :class:`~messages.llm.LlmRequest`.

Three kinds share one async interface, ``await model.stream(request, emit, http)``,
run by the gateway's event loop:

* :class:`OpenAICompatible` -- any OpenAI-compatible Chat Completions endpoint
  (OpenAI, vLLM, llama.cpp server, Ollama, DashScope, OpenRouter, the built-in
  mock server), streaming over SSE;
* :class:`ScriptedModel` -- offline and deterministic, from the public script
  format (:mod:`actors.llm.script`), streamed with the same schedule the mock
  server uses;
* :class:`FunctionModel` -- ``fn(request)`` decides each reply, for tests that
  must react to what they are sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

import httpx
import structlog
from httpx_sse import EventSource, SSEError

from actors.llm.errors import (
    LlmException,
    error_from_payload,
    error_from_status,
    llm_error,
    provider_error_details,
)
from actors.llm.script import (
    ScriptCursor,
    ScriptFile,
    ScriptReply,
    new_tool_call_id,
    split_fragments,
    stream_plan,
)
from actors.llm.wire import (
    StreamAssembler,
    arguments_text,
    complete_from_body,
    request_payload,
)
from messages.conversation import AssistantMessage, ToolCall, ToolResult, UserMessage, item_text
from messages.llm import LlmRequest, LlmTextDelta, LlmToolCallDelta, Usage

Emit = Callable[[Any], None]
"""Receives a model's stream events: LlmTextDelta / LlmToolCallDelta, or a plain ``str``
for text (the gateway builds one message per coalesced flush, not one per token)."""

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class StreamResult:
    """A completed answer."""

    message: AssistantMessage
    usage: Usage
    finish_reason: str


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
    token would be. A non-streaming answer arrives in one piece only when it
    is complete, so it has one overall deadline, ``total``. ``connect`` and
    ``write`` bound opening the connection and sending the body.

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
    after_done: float = 0.1


_ERROR_BODY_LIMIT = 64 * 1024
"""How much of an unexpected (non event stream) 200 body is read to explain it."""


class _Phase:
    """Which deadline the request's single timeout guard is enforcing right now."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


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
    ``FORE_API_KEY`` / ``OPENAI_API_KEY``, ``FORE_MODEL`` / ``OPENAI_MODEL``, and
    ``FORE_EXTRA_HEADERS`` (a JSON object of extra headers).

    ``stream=False`` asks this endpoint for whole answers even where the caller
    asked for a stream (``None``, the default: as each request says). Some
    servers can do tool calling only unstreamed -- llama-cpp-python's
    ``chatml-function-calling`` answers a streamed ``tool_choice: "auto"`` with
    HTTP 500 when the model picks a tool. The caller still gets the answer's
    text as one delta once it is complete. The price: an abort cannot stop such
    a server's generation (it notices a closed connection only when it writes).
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
    ) -> None:
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

    def __repr__(self) -> str:
        return f"OpenAICompatible(model={self.name!r}, base_url={self.base_url!r})"

    def _headers(self, request: LlmRequest) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if request.stream else "application/json",
            "X-Fore-Session": request.session_id,
            "X-Fore-Purpose": request.purpose,
            "X-Fore-Request-Id": request.request_id,
        }
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        return headers

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        whole = self.stream_answers is False and request.stream
        if whole:
            request = request.model_copy(update={"stream": False})
        payload = request_payload(request, request.model_name or self.name)
        t = self.timeouts
        # One asyncio deadline guards the whole attempt and is moved along as
        # it progresses (first byte, then idle after each event). httpx's own
        # read timeout applies to every socket read -- waiting for the headers
        # and for the first event included -- so it is only a backstop and
        # must not be shorter than any of those deadlines.
        if request.stream:
            read, phase = max(t.first_byte, t.idle), _Phase("first_byte")
        else:
            read, phase = t.total, _Phase("total")
        timeout = httpx.Timeout(connect=t.connect, read=read, write=t.write, pool=t.connect)
        try:
            async with (
                asyncio.timeout(t.first_byte if request.stream else t.total) as guard,
                _acyclic_stream(
                    http,
                    "POST",
                    f"{self.base_url}/chat/completions",
                    content=payload,
                    headers=self._headers(request),
                    timeout=timeout,
                ) as response,
            ):
                if response.status_code != 200:
                    raise error_from_status(
                        response.status_code, await response.aread(), response.headers
                    )
                if not request.stream:
                    result = _complete(request, response, await response.aread())
                    if whole and request.stream_deltas and result.message.text:
                        emit(result.message.text)
                    return result
                return await self._read_stream(request, response, emit, guard, phase)
        except LlmException:
            raise
        except (TimeoutError, httpx.ReadTimeout):
            raise self._timeout_error(phase.name) from None
        except httpx.ConnectTimeout:
            raise llm_error("timeout", f"could not connect within {t.connect:g}s") from None
        except httpx.WriteTimeout:
            raise llm_error("timeout", f"could not send the request within {t.write:g}s") from None
        except httpx.PoolTimeout:
            raise llm_error(
                "timeout", f"no free connection within {t.connect:g}s (pool exhausted)"
            ) from None
        except httpx.ConnectError as exc:
            raise llm_error("connection", f"cannot connect to {self.base_url}: {exc}") from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise llm_error("connection", f"connection broke mid-stream: {exc}") from None
        except httpx.HTTPError as exc:
            raise llm_error("connection", f"HTTP error: {exc!r}") from None

    def _timeout_error(self, phase: str) -> LlmException:
        t = self.timeouts
        if phase == "first_byte":
            return llm_error("timeout", f"no first byte within {t.first_byte:g}s")
        if phase == "idle":
            return llm_error("timeout", f"no data for {t.idle:g}s (idle timeout)")
        return llm_error("timeout", f"no complete answer within {t.total:g}s")

    async def _read_stream(
        self,
        request: LlmRequest,
        response: httpx.Response,
        emit: Emit,
        guard: asyncio.Timeout,
        phase: _Phase,
    ) -> StreamResult:
        # Text is passed on as plain strings: the gateway merges tokens before
        # building a message, so a message object per token would be waste.
        assembler = StreamAssembler(
            request.request_id,
            text_events=False,
            tool_events=request.stream_deltas and request.stream_tool_deltas,
        )
        text = assembler.text
        want_text = request.stream_deltas
        loop = asyncio.get_running_loop()
        idle = self.timeouts.idle
        # Moving the deadline costs a timer per move; events of one burst
        # arrive within microseconds, so it moves only when it would move by
        # more than ``slack`` (the idle timeout may then fire up to ``slack``
        # early, which no real stream can tell from exact).
        slack = min(0.05, idle / 20)
        deadline = -1.0
        events = EventSource(response).aiter_sse()
        saw_done = False
        try:
            async for sse in events:
                now = loop.time()
                if now + idle - deadline > slack:
                    deadline = now + idle
                    guard.reschedule(deadline)
                phase.name = "idle"
                data = sse.data.strip()
                if not data:
                    continue
                if data == "[DONE]":
                    saw_done = True
                    break
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise llm_error(
                        "protocol", f"malformed JSON in stream chunk: {data[:80]!r}", retryable=True
                    ) from None
                seen = len(text)
                tool_events = assembler.feed(chunk)
                if want_text and len(text) > seen:  # text before tool calls, as in a delta
                    emit(text[seen] if len(text) == seen + 1 else "".join(text[seen:]))
                for event in tool_events:
                    emit(event)
            message, usage, reason = assembler.finish(saw_done=saw_done)
            if saw_done:
                guard.reschedule(None)
                await _drain(events, min(idle, self.timeouts.after_done))
        except SSEError:
            raise await _not_an_event_stream(response) from None
        finally:
            await events.aclose()
        return StreamResult(message, usage, reason)


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
        detail, _ = provider_error_details(raw)
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
    return StreamResult(message, usage, reason)


async def _drain(events: AsyncIterator[Any], seconds: float) -> None:
    """Read what follows ``[DONE]`` (normally just the end of the body), briefly."""
    try:
        async with asyncio.timeout(seconds):
            async for _ in events:
                pass
    except (TimeoutError, httpx.HTTPError):
        # The answer is complete; the connection is closed instead of reused.
        log.debug("llm_stream_not_closed_after_done", within_s=seconds)


async def _not_an_event_stream(response: httpx.Response) -> LlmException:
    """A 200 that is not an event stream: type it from the body, and keep the body."""
    raw = bytearray()
    # httpx's aiter_bytes is an async generator: close it when stopping early.
    body_parts = cast(AsyncGenerator[bytes, None], response.aiter_bytes())
    async with contextlib.aclosing(body_parts) as parts:
        async for part in parts:
            raw += part
            if len(raw) >= _ERROR_BODY_LIMIT:
                break
    body = bytes(raw[:_ERROR_BODY_LIMIT])
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
        f"expected an event stream, got {content_type}" + (f": {detail[:200]}" if detail else ""),
        retryable=True,
        provider_message=detail,
    )


def last_input_text(request: LlmRequest) -> str:
    """The text of the last user message or tool result (what scripts match on)."""
    for item in reversed(request.messages):
        if isinstance(item, UserMessage):
            return item.text
        if isinstance(item, ToolResult):
            return item.output
    return ""


def estimate_tokens(text: str) -> int:
    """A rough token count (4 characters per token) for offline usage numbers."""
    return max(0, (len(text) + 3) // 4)


async def stream_reply(
    request: LlmRequest,
    reply: ScriptReply,
    emit: Emit,
    *,
    default_ttft_ms: float = 0.0,
    default_tokens_per_s: float | None = None,
    arg_chunk_size: int = 16,
) -> StreamResult:
    """Stream one scripted reply with its latency schedule (shared by both offline models)."""
    plan = stream_plan(
        reply, default_ttft_ms=default_ttft_ms, default_tokens_per_s=default_tokens_per_s
    )
    rid = request.request_id
    for chunk, delay in zip(plan.chunks, plan.delays_s, strict=True):
        if delay > 0:
            await asyncio.sleep(delay)
        emit(LlmTextDelta(request_id=rid, text=chunk))
    calls = []
    first_delay = plan.first_token_delay_s if not plan.chunks else plan.token_interval_s
    for index, scripted in enumerate(reply.tool_calls):
        call_id = scripted.id or new_tool_call_id()
        if first_delay > 0:
            await asyncio.sleep(first_delay)
        first_delay = plan.token_interval_s
        emit(LlmToolCallDelta(request_id=rid, index=index, call_id=call_id, name=scripted.name))
        for fragment in split_fragments(arguments_text(scripted.arguments), arg_chunk_size):
            if plan.token_interval_s > 0:
                await asyncio.sleep(plan.token_interval_s)
            emit(LlmToolCallDelta(request_id=rid, index=index, arguments_delta=fragment))
        calls.append(ToolCall(id=call_id, name=scripted.name, arguments=dict(scripted.arguments)))
    if not plan.chunks and not reply.tool_calls and plan.first_token_delay_s > 0:
        await asyncio.sleep(plan.first_token_delay_s)
    chars = sum(len(item_text(item)) for item in request.messages)
    prompt = (chars + 3) // 4
    completion = len(plan.chunks) + sum(
        estimate_tokens(arguments_text(c.arguments)) for c in reply.tool_calls
    )
    usage = Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
    message = AssistantMessage(text=plan.text, tool_calls=tuple(calls))
    return StreamResult(message, usage, "tool_calls" if calls else "stop")


class ScriptedModel:
    """Offline, deterministic replies from the public script format.

    Each session consumes the script on its own (per-session cursors), exactly
    as the mock server keys conversations by the ``X-Fore-Session`` header.
    """

    def __init__(
        self,
        replies: Sequence[ScriptReply | Mapping[str, Any]] = (),
        *,
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        name: str = "scripted",
        arg_chunk_size: int = 16,
    ) -> None:
        self.script = ScriptFile(
            replies=tuple(
                r if isinstance(r, ScriptReply) else ScriptReply.model_validate(r) for r in replies
            )
        )
        self.name = name
        self.retry = RetryPolicy(max_retries=0)
        self.ttft_ms = ttft_ms
        self.tokens_per_s = tokens_per_s
        self.arg_chunk_size = arg_chunk_size
        self._cursors: dict[str, ScriptCursor] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **options: Any) -> ScriptedModel:
        """Load a script file (raises a clear ``ScriptError`` on a bad file)."""
        return cls(ScriptFile.from_path(Path(path)).replies, **options)

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self.script.replies)} replies)"

    def cursor(self, session_id: str) -> ScriptCursor:
        with self._lock:
            cursor = self._cursors.get(session_id)
            if cursor is None:
                cursor = self._cursors[session_id] = ScriptCursor(self.script)
            return cursor

    def forget(self, session_id: str) -> None:
        """Drop ``session_id``'s cursor: a session reopened under that id starts afresh.

        The Runtime calls it when a session closes, so cursors do not pile up
        over a long-lived runtime.
        """
        with self._lock:
            self._cursors.pop(session_id, None)

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        reply = self.cursor(request.session_id).next_reply(
            request.purpose, last_input_text(request)
        )
        return await stream_reply(
            request,
            reply,
            emit,
            default_ttft_ms=self.ttft_ms,
            default_tokens_per_s=self.tokens_per_s,
            arg_chunk_size=self.arg_chunk_size,
        )


ReplyLike = ScriptReply | Mapping[str, Any] | str


class FunctionModel:
    """``fn(request) -> reply`` decides every answer (run on the model's own threads).

    The reply has the script's shape: a :class:`ScriptReply`, a mapping that
    validates as one, or a plain string (text only). ``fn`` may raise an
    :class:`~actors.llm.errors.LlmException` to simulate a typed failure.

    ``fn`` may block (tests make it wait on events), so it runs on a
    dedicated, bounded executor of ``max_workers`` threads (created lazily),
    never on the LLM loop's default executor, which other work shares. A
    cancelled request cannot stop a running ``fn`` (a thread cannot be
    killed): its thread is busy until ``fn`` returns.

    ``requests`` keeps the most recent ``keep_requests`` requests, oldest
    dropped first (a deque with ``maxlen``): each holds a whole history, so
    keeping all of them would grow without bound over a long run.
    :meth:`forget` drops one session's (the Runtime calls it when the
    session closes).
    """

    def __init__(
        self,
        fn: Callable[[LlmRequest], ReplyLike],
        *,
        name: str = "function",
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        retry: RetryPolicy | None = None,
        max_workers: int = 16,
        keep_requests: int = 1000,
    ) -> None:
        if max_workers < 1 or keep_requests < 0:
            raise ValueError("max_workers must be >= 1 and keep_requests >= 0")
        self.fn = fn
        self.name = name
        self.ttft_ms = ttft_ms
        self.tokens_per_s = tokens_per_s
        self.retry = retry or RetryPolicy(max_retries=0)
        self.requests: deque[LlmRequest] = deque(maxlen=keep_requests)
        self._lock = threading.Lock()
        self._max_workers = max_workers
        self._executor: ThreadPoolExecutor | None = None

    def __repr__(self) -> str:
        return f"FunctionModel({getattr(self.fn, '__name__', 'fn')})"

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._max_workers, thread_name_prefix="fore-function-model"
                )
            return self._executor

    def forget(self, session_id: str) -> None:
        """Drop what this model keeps about ``session_id`` (its recorded requests)."""
        with self._lock:
            kept = [r for r in self.requests if r.session_id != session_id]
            self.requests.clear()
            self.requests.extend(kept)

    def close(self) -> None:
        """Let the executor's threads end once their ``fn`` calls return."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        with self._lock:
            self.requests.append(request)
        try:
            loop = asyncio.get_running_loop()
            raw = await loop.run_in_executor(self._pool(), self.fn, request)
        except LlmException:
            raise
        except Exception as exc:
            raise llm_error(
                "server", f"model function raised {type(exc).__name__}: {exc}", retryable=False
            ) from None
        reply = (
            raw
            if isinstance(raw, ScriptReply)
            else ScriptReply(text=raw)
            if isinstance(raw, str)
            else ScriptReply.model_validate(raw)
        )
        return await stream_reply(
            request,
            reply,
            emit,
            default_ttft_ms=self.ttft_ms,
            default_tokens_per_s=self.tokens_per_s,
        )
