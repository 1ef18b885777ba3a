"""Streamable HTTP with a bound on what an MCP server sends.

The SDK's streamable HTTP transport bounds one server-sent event
(``max_sse_event_size``) but reads a JSON response whole
(``Response.aread()``), and httpx2 inflates a compressed body before anyone
counts it: a server that answers a ``tools/call`` with an endless body, or a
small gzip bomb, grows the client's memory without limit (measured: a 64 KiB
gzip answer inflating to 2 GiB was read whole). The SDK takes an
``http_client``; Fore passes one whose transport, :class:`BoundedTransport`,

* asks for ``gzip, deflate`` only and inflates the body itself, in pieces of
  at most 64 KiB (:class:`~fore.actors.llm.body.BoundedDecoder`, the model
  client's decoder), removing ``Content-Encoding`` so httpx2 does not inflate
  it again; an encoding it did not ask for is an error;
* counts the decoded bytes of every response that is not an event stream and
  stops at ``max_message`` bytes, both with :class:`_AnswerRefused`.

:class:`_AnswerRefused` is an ``httpx2.StreamError``, the error the SDK's
JSON reader already answers: the call in flight fails with a JSON-RPC
``PARSE_ERROR`` whose message names the bound (``MCPServerHTTP(max_message=…)``),
and the connection stays up for the next call. Event streams are bounded per
event by the SDK itself; Fore passes it the same ``max_message``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx2

from fore.actors.llm.body import ACCEPT_ENCODING, BoundedDecoder
from fore.actors.llm.errors import LlmException, format_size

__all__ = ["BoundedTransport", "bounded_http_client"]


class _AnswerRefused(httpx2.StreamError):
    """A response passed the bound, or came compressed in a way not asked for.

    Private: the SDK turns it into the failed call's JSON-RPC error, which is
    what the caller sees.
    """


def _too_large_text(limit: int) -> str:
    return (
        f"fore: the MCP server's response passed {format_size(limit)} (one message); the call"
        " was refused (MCPServerHTTP(max_message=...) raises the bound)"
    )


class _BoundedBody(httpx2.AsyncByteStream):
    """A response body, inflated in bounded pieces and cut at ``limit`` decoded bytes."""

    def __init__(
        self,
        raw: httpx2.AsyncByteStream,
        decoder: BoundedDecoder | None,
        limit: int | None,
        refused: str = "",
    ) -> None:
        self._raw = raw
        self._decoder = decoder
        self._limit = limit
        self._refused = refused
        self.read = 0
        """Decoded bytes passed on so far."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._decoder is None:  # refused before the first byte (reading it fails the call)
            raise _AnswerRefused(self._refused)
        async for chunk in self._raw:
            try:
                pieces = list(self._pieces(chunk))
            except LlmException as exc:  # the decoder's own refusal (corrupt, unasked)
                raise _AnswerRefused(f"fore: {exc}") from None
            for piece in pieces:
                yield piece

    def _pieces(self, chunk: bytes) -> Iterator[bytes]:
        assert self._decoder is not None
        for piece in self._decoder.decode(chunk):
            self.read += len(piece)
            if self._limit is not None and self.read > self._limit:
                raise _AnswerRefused(_too_large_text(self._limit))
            yield piece

    async def aclose(self) -> None:
        await self._raw.aclose()


class BoundedTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport that inflates and bounds the server's answers (module docs)."""

    def __init__(self, max_message: int, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.max_message = max_message
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.headers["Accept-Encoding"] = ACCEPT_ENCODING
        response = await self._inner.handle_async_request(request)
        encoding = response.headers.get("content-encoding")
        decoder: BoundedDecoder | None = None
        refused = ""
        try:
            decoder = BoundedDecoder(encoding)
        except LlmException as exc:
            # Answered when the body is read, where the SDK fails just this call
            # (raised here, it would end the connection).
            refused = f"fore: {exc}"
        if encoding is not None:
            del response.headers["content-encoding"]  # inflated here, not again by httpx2
            response.headers.pop("content-length", None)
        content_type = response.headers.get("content-type", "").lower()
        # An event stream lives as long as the session; the SDK bounds each event.
        limit = None if content_type.startswith("text/event-stream") else self.max_message
        raw = response.stream
        assert isinstance(raw, httpx2.AsyncByteStream)
        response.stream = _BoundedBody(raw, decoder, limit, refused)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def bounded_http_client(headers: dict[str, str] | None, max_message: int) -> httpx2.AsyncClient:
    """The SDK's client settings (its timeouts) over a :class:`BoundedTransport`."""
    try:
        from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
    except ImportError:  # pragma: no cover - moved in a later SDK
        MCP_DEFAULT_TIMEOUT, MCP_DEFAULT_SSE_READ_TIMEOUT = 30.0, 300.0
    return httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        transport=BoundedTransport(max_message),
    )
