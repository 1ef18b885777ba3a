"""The HTTP transport under the gateway's ``httpx.AsyncClient``: aiohttp's, errors typed right.

httpx's default transport runs httpcore's pure-Python HTTP/1.1 machinery
(h11) on anyio: every chunk of a streamed answer passes through h11's state
machine, anyio's cancel scopes and a pause/resume of socket reading. A
streamed LLM answer is hundreds of small chunks, so with hundreds of
concurrent streams that per-chunk cost became most of the LLM thread's time
in the load benchmark -- and, the GIL being shared, time every actor waited.

``httpx-aiohttp`` (by an httpx maintainer; the OpenAI SDK's optional
transport) keeps ``httpx.AsyncClient`` -- requests, headers, timeouts, the
API the provider code is written against -- and hands the socket-level HTTP
to aiohttp, whose parser is C (llhttp). In ``fore bench llm`` that raised the
gateway's throughput by about a quarter and roughly halved main-turn latency
under the 200-session load.

:class:`FastAsyncTransport` adds what Fore needs on top: errors mapped to the
httpx exception a failure really is (the library maps every
``ClientConnectionError`` -- a server disconnect mid-stream included -- to
``ConnectTimeout``), also for errors raised while the body streams, and any
other aiohttp error turned into an ``httpx.TransportError`` so the provider's
error handling sees only httpx types. Proxies from the environment keep
httpx's own transport (:func:`env_proxies`).
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

__all__ = ["FLOW_EXTENSION", "FastAsyncTransport", "env_proxies", "httpx_error"]


def httpx_error(exc: BaseException) -> httpx.TransportError | None:
    """The httpx exception for an aiohttp failure (``None``: not an aiohttp failure).

    Accepts the aiohttp exception itself or the httpx exception httpx-aiohttp
    raised from it.
    """
    cause = exc.__cause__ if isinstance(exc, httpx.TransportError) else exc
    if not isinstance(cause, aiohttp.ClientError):
        return None
    message = str(cause) or type(cause).__name__
    if isinstance(cause, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(cause, aiohttp.ServerTimeoutError):  # a read timed out
        return httpx.ReadTimeout(message)
    if isinstance(cause, aiohttp.ClientConnectorError):  # could not connect (TLS included)
        return httpx.ConnectError(message)
    if isinstance(cause, aiohttp.ServerDisconnectedError):
        return httpx.RemoteProtocolError(message)
    if isinstance(cause, aiohttp.ClientPayloadError | aiohttp.ClientConnectionError):
        return httpx.ReadError(message)
    if isinstance(cause, aiohttp.InvalidURL):
        return httpx.UnsupportedProtocol(message)
    return httpx.TransportError(message)


FLOW_EXTENSION = "fore.flow"
"""The response extension under which :class:`FastAsyncTransport` puts the body's
socket-level flow control (an object with ``pause_reading()`` / ``resume_reading()``)."""


class _Body(httpx.AsyncByteStream):
    """The response body, with errors raised while it streams typed as well.

    ``pause_reading`` / ``resume_reading`` stop and restart reading the socket
    itself: while paused, what the server sends waits in the kernel's buffer
    and costs this process nothing -- not even the event loop's wake-up per
    arriving packet -- until reading resumes and takes it in a few large reads.
    A reader that wants a stream in batches (a fork nobody watches) pauses
    between batches.
    """

    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    def _protocol(self) -> Any:
        response = getattr(self._inner, "_aiohttp_response", None)
        connection = getattr(response, "connection", None)
        return getattr(connection, "protocol", None)

    def pause_reading(self) -> bool:
        """Stop reading the socket; False when the connection is gone (nothing to pause)."""
        protocol = self._protocol()
        if protocol is None or getattr(protocol, "transport", None) is None:
            return False
        try:
            protocol.pause_reading()
        except Exception:  # aiohttp internals changed: read without pausing
            return False
        return True

    def resume_reading(self) -> None:
        protocol = self._protocol()
        if protocol is not None and getattr(protocol, "transport", None) is not None:
            protocol.resume_reading()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except (httpx.TransportError, aiohttp.ClientError) as exc:
            mapped = httpx_error(exc)
            if mapped is None:
                raise
            raise mapped from exc

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        except (httpx.TransportError, aiohttp.ClientError):
            pass  # the connection is gone either way


class FastAsyncTransport(AiohttpTransport):
    """``httpx_aiohttp.AiohttpTransport`` with failures typed as what they are."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except (httpx.TransportError, aiohttp.ClientError) as exc:
            mapped = httpx_error(exc)
            if mapped is None:
                raise
            raise mapped from exc
        assert isinstance(response.stream, httpx.AsyncByteStream)
        body = _Body(response.stream)
        response.stream = body
        response.extensions[FLOW_EXTENSION] = body
        return response


def env_proxies() -> bool:
    """Whether the environment names a proxy httpx would use (``HTTPS_PROXY``, ``ALL_PROXY`` ...).

    httpx reads the same variables through :func:`urllib.request.getproxies`.
    """
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))
