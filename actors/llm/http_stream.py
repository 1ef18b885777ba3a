"""The HTTP side of one streamed LLM attempt, shared by every HTTP provider.

:class:`~fore.actors.llm.models.OpenAICompatible` and
:class:`~fore.actors.llm.anthropic.AnthropicModel` speak different wire formats
(:mod:`~fore.actors.llm.wire`, :mod:`~fore.actors.llm.anthropic_wire`) over the same
transport, and must defend against a hostile or broken server the same way: the
deadlines of one attempt (:class:`Clock`), the bounded read of an event stream
(:func:`read_events`: stream-byte cap, bounded decoder and SSE parser, batched
reads for requests nobody watches), the drain after the end, httpx's
response/body cycle broken (:func:`acyclic_stream`), and one mapping of
transport failures, non-200 answers and non-stream bodies to typed errors. Kept
in one place so a fix to any of them reaches both providers; what differs
(how an answer ends, how an error body looks, a 404's hint) is passed in.
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
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Protocol

import httpx

from fore.actors.core.logs import get_logger
from fore.actors.llm.body import BodyLimits, BoundedDecoder, SseParser, read_body
from fore.actors.llm.chat_model import Timeouts
from fore.actors.llm.errors import (
    LlmException,
    error_from_status,
    format_size,
    llm_error,
    provider_error_details,
)
from fore.actors.llm.netio import FLOW_EXTENSION
from fore.messages.llm import Deadline

log = get_logger(__name__)


BACKGROUND_READ_INTERVAL_S = 0.1
"""How often the stream of a request nobody watches is read (see ``OpenAICompatible``).

Also the most it can delay noticing that such an answer is complete: a
speculation's end (what a Tab that arrived while it ran waits for) comes up
to this late, so it is kept well under the time a person takes to read."""


BATCHED_PURPOSES = frozenset({"speculation", "pipelined"})
"""Purposes whose streams are read in batches. A suggestion is not: it is short
(``suggestion_max_tokens``) and the sooner it is complete, the sooner its
speculation can start -- before the user has begun to type."""


BATCH_FULL_BYTES = 8 * 1024
"""A raw read at least this large suggests more is already buffered: read on
without the pause (so a fast server is not throttled by it)."""


DRAIN_BYTES = 64 * 1024
"""What is read after the end of an answer (``[DONE]``, ``message_stop``) to find the end
of the body, at most."""


class Clock:
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


def env(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


async def pause_reading(response: httpx.Response, seconds: float) -> None:
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


_CLOSED_BODY = httpx.ByteStream(b"")


@contextlib.asynccontextmanager
async def acyclic_stream(
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


async def drain(raw: AsyncIterator[bytes], seconds: float) -> None:
    """Read what follows the end of an answer (normally just the end of the body), briefly
    and boundedly."""
    read = 0
    try:
        async with asyncio.timeout(seconds):
            async for chunk in raw:
                read += len(chunk)
                if read > DRAIN_BYTES:
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


def output_cap(max_output_tokens: int | None, default: int) -> int:
    """The output limit as configured: the argument, else ``FORE_MAX_OUTPUT_TOKENS``,
    else ``default``; a clear error for anything but a whole number >= 1."""
    if max_output_tokens is None:
        raw = env("FORE_MAX_OUTPUT_TOKENS")
        try:
            max_output_tokens = int(raw) if raw else default
        except ValueError:
            raise ValueError(
                f"FORE_MAX_OUTPUT_TOKENS must be a whole number, got {raw!r}"
            ) from None
    if max_output_tokens < 1:
        raise ValueError(f"max_output_tokens must be >= 1, got {max_output_tokens}")
    return max_output_tokens


def read_interval(seconds: float) -> float:
    """``background_read_interval`` checked (NaN refused too)."""
    if not seconds >= 0:
        raise ValueError(f"background_read_interval must be >= 0, got {seconds!r}")
    return seconds


def start_attempt(t: Timeouts, *, stream: bool) -> tuple[Clock, httpx.Timeout]:
    """The deadline clock of an attempt starting now, and httpx's timeouts for it.

    One asyncio deadline guards the whole attempt and is moved along as it
    progresses (:class:`Clock`). httpx's own read timeout applies to every
    socket read -- waiting for the headers and for the first event included --
    so it is only a backstop and must not be shorter than any of those deadlines.
    """
    loop = asyncio.get_running_loop()
    clock = Clock(loop, t, stream=stream, start=loop.time())
    read = max(t.first_byte, t.idle) if stream else t.total
    return clock, httpx.Timeout(connect=t.connect, read=read, write=t.write, pool=t.connect)


async def read_whole(response: httpx.Response, limits: BodyLimits) -> bytes:
    """A non-streamed answer's body, refused past ``max_body_bytes``."""
    return await read_body(
        response,
        limits.max_body_bytes,
        knob="max_body_bytes",
        what="the response body",
        truncate=False,
    )


def loads_body(response: httpx.Response, raw: bytes, *, peek: int) -> Any:
    """A non-streamed answer's JSON; a body that is not JSON is a typed (retryable)
    error that keeps the start of it (up to ``peek`` bytes looked at)."""
    try:
        return json.loads(raw)
    except ValueError:
        detail, _ = provider_error_details(raw[:peek])
        content_type = response.headers.get("content-type") or "no content type"
        raise llm_error(
            "protocol",
            f"response body is not JSON ({content_type})" + (f": {detail[:200]}" if detail else ""),
            retryable=True,
            provider_message=detail,
        ) from None


def timeout_error(deadline: Deadline, t: Timeouts, *, ending: str) -> LlmException:
    """The deadline that passed as a typed error; ``ending`` names what ends an answer
    on this wire ("finish reason", "stop reason")."""
    messages = {
        "first_byte": f"no first byte within {t.first_byte:g}s",
        "idle": f"no data for {t.idle:g}s (idle timeout)",
        "no_progress": (
            f"no progress for {t.no_progress:g}s: the stream kept sending, but no text,"
            f" tool call or {ending}"
        ),
    }
    message = messages.get(
        deadline, f"no complete answer within {t.total:g}s (the overall deadline)"
    )
    return llm_error("timeout", message, deadline=deadline)


def attempt_error(
    exc: TimeoutError | httpx.HTTPError,
    t: Timeouts,
    clock: Clock,
    *,
    base_url: str,
    ending: str,
) -> LlmException:
    """A transport failure of an attempt as a typed error (which deadline, or why the
    connection could not be made or broke)."""
    if isinstance(exc, (TimeoutError, httpx.ReadTimeout)):
        return timeout_error(clock.expired(), t, ending=ending)
    if isinstance(exc, httpx.ConnectTimeout):
        return llm_error("timeout", f"could not connect within {t.connect:g}s", deadline="connect")
    if isinstance(exc, httpx.WriteTimeout):
        return llm_error(
            "timeout", f"could not send the request within {t.write:g}s", deadline="write"
        )
    if isinstance(exc, httpx.PoolTimeout):
        return llm_error(
            "timeout",
            f"no free connection within {t.connect:g}s (pool exhausted)",
            deadline="pool",
        )
    if isinstance(exc, httpx.ConnectError):
        return llm_error("connection", f"cannot connect to {base_url}: {connect_problem(exc)}")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return llm_error("connection", f"connection broke mid-answer: {exc}")
    return llm_error("connection", f"HTTP error: {exc!r}")


async def status_error(
    response: httpx.Response, limits: BodyLimits, *, url: str, hint_404: str
) -> LlmException:
    """A non-200 answer as a typed error (its body read only up to its cap); a 404 says
    what was asked for (``POST url``) and ``hint_404``."""
    body = await read_body(
        response,
        limits.max_error_body_bytes,
        knob="max_error_body_bytes",
        what="the error body",
        truncate=True,
    )
    exc = error_from_status(response.status_code, body, response.headers)
    if response.status_code == 404:
        message = f"{exc.error.message} (POST {url}){hint_404}"
        exc = LlmException(exc.error.model_copy(update={"message": message}))
    return exc


async def not_an_event_stream(
    response: httpx.Response,
    limits: BodyLimits,
    error_in: Callable[[Any], LlmException | None],
) -> LlmException:
    """A 200 that is not an event stream: typed from the start of its body -- the
    provider's own error (``error_in`` of its JSON), else a retryable protocol error."""
    body = await read_body(
        response,
        limits.max_error_body_bytes,
        knob="max_error_body_bytes",
        what="the body",
        truncate=True,
    )
    try:
        data: Any = json.loads(body)
    except ValueError:
        data = None
    provider = error_in(data)
    if provider is not None:
        return provider
    detail, _ = provider_error_details(body)
    content_type = response.headers.get("content-type") or "no content type"
    return llm_error(
        "protocol",
        f"expected an event stream, got {content_type}" + (f": {detail[:200]}" if detail else ""),
        retryable=True,
        provider_message=detail,
    )


def is_event_stream(response: httpx.Response) -> bool:
    content_type = response.headers.get("content-type") or ""
    return "text/event-stream" in content_type.lower()


class Progress(Protocol):
    """What :func:`read_events` reads off an assembler: its count of chunks that said something."""

    @property
    def progress(self) -> int: ...


async def read_events(
    response: httpx.Response,
    raw: AsyncGenerator[bytes, None],
    *,
    limits: BodyLimits,
    clock: Clock,
    assembler: Progress,
    pause: float,
    feed: Callable[[list[bytes]], bool],
) -> bool:
    """Read an event stream within the limits (see :mod:`actors.llm.body`) until
    ``feed`` says the answer is complete (returns whether it did) or the body ends.

    Events are handled per decoded piece (at most ``PIECE_BYTES``), so what one
    raw chunk inflates to is never held as events all at once. With ``pause``
    (a request nobody watches), the task sleeps after each read while the
    server's events pile up, then handles them together.
    """
    decoder = BoundedDecoder.for_response(response)
    sse = SseParser(limits.max_line_bytes)
    total = 0
    done = False
    ended = False
    while not ended and not done:
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
            if events and feed(events):
                done = True
                break
        clock.data(assembler.progress)
        if pause and not ended and not done and len(chunk) < BATCH_FULL_BYTES:
            await pause_reading(response, pause)
    return done


async def settle(clock: Clock, raw: AsyncIterator[bytes], t: Timeouts) -> None:
    """The answer is complete: stop its deadlines and drain the rest of the body briefly."""
    clock.done()
    await drain(raw, min(t.idle, t.after_done))


@contextlib.asynccontextmanager
async def attempt(
    http: httpx.AsyncClient,
    url: str,
    *,
    content: bytes,
    headers: Mapping[str, str],
    stream: bool,
    timeouts: Timeouts,
    limits: BodyLimits,
    base_url: str,
    hint_404: Callable[[], str],
    ending: str,
) -> AsyncIterator[tuple[httpx.Response, Clock]]:
    """``POST url`` as one attempt: the 200 response and its deadline clock.

    The whole block runs under the attempt's one moving deadline; a non-200
    answer is raised as :func:`status_error`, and a timeout or transport failure
    -- while connecting or while the block reads -- as :func:`attempt_error`.
    """
    clock, timeout = start_attempt(timeouts, stream=stream)
    try:
        async with (
            asyncio.timeout_at(clock.first) as guard,
            acyclic_stream(
                http, "POST", url, content=content, headers=headers, timeout=timeout
            ) as response,
        ):
            clock.arm(guard)
            if response.status_code != 200:
                raise await status_error(response, limits, url=url, hint_404=hint_404())
            yield response, clock
    except LlmException:
        raise
    except (TimeoutError, httpx.HTTPError) as exc:
        raise attempt_error(exc, timeouts, clock, base_url=base_url, ending=ending) from None
