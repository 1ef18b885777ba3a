"""Reading a model server's HTTP answer within bounds: decoding, SSE events, whole bodies.

The server is not trusted to be sane. Before these bounds a 300 MB SSE line
without a newline grew the client by ~940 MB (httpx's line decoder keeps the
whole unfinished line), a gzip bomb on a stream by ~930 MB (httpx inflates a
compressed chunk in one call, however large the result), and a gzip-bombed
HTTP 500 body by 3.2 GB (the error path read the whole body). So:

* bodies are read raw (``Response.aiter_raw``) and decoded here,
  :class:`BoundedDecoder`, in pieces of at most :data:`PIECE_BYTES`, so one
  small compressed chunk never becomes one huge buffer; only the encodings the
  client asks for (``gzip``, ``deflate``; :data:`ACCEPT_ENCODING`) are
  decoded, anything else is a clear error;
* server-sent events are split here, :class:`SseParser`, on bytes, with the
  line (and one event's data) capped at ``max_line_bytes``; a newline is only
  searched for in new data, so a long line costs linear time up to its cap;
* a whole body (a non-streamed answer, an error) is read up to a cap: an
  answer past it is an error, an error body is cut there (its start is what
  explains it).

Every limit lives in :class:`BodyLimits` (``OpenAICompatible(limits=...)``);
crossing one is a non-retryable ``protocol`` error that names the limit.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx

from fore.actors.llm.codec import MAX_ANSWER_CHARS, MAX_TOOL_CALLS
from fore.actors.llm.errors import LlmException, format_size, llm_error

__all__ = [
    "ACCEPT_ENCODING",
    "PIECE_BYTES",
    "BodyLimits",
    "BoundedDecoder",
    "SseParser",
    "read_body",
]

ACCEPT_ENCODING = "gzip, deflate"
"""What the client accepts (sent as ``Accept-Encoding``): the encodings it can decode
in bounded steps. httpx would otherwise offer ``br`` and ``zstd`` as well."""

PIECE_BYTES = 64 * 1024
"""The most one decoding step produces."""


@dataclass(frozen=True)
class BodyLimits:
    """How much of a server's answer the client reads (bytes after decoding).

    Each is far above what a real answer needs and far below what would hurt
    the process; a streamed answer is never held whole, only its text and
    tool-call arguments are (``max_answer_chars``).
    """

    max_line_bytes: int = 1024 * 1024
    """One SSE line, and one event's data (a chunk of a streamed answer)."""
    max_stream_bytes: int = 64 * 1024 * 1024
    """One streamed answer, all events together (bounds a flood of empty events too).
    At ~150 bytes of SSE per token that is ~400k tokens, above any model's output."""
    max_body_bytes: int = 8 * 1024 * 1024
    """One non-streamed answer body (parsed whole, so it is held whole)."""
    max_error_body_bytes: int = 64 * 1024
    """What is read of an error body (or of a 200 that is not the answer) to explain it;
    the rest is not read."""
    max_answer_chars: int = MAX_ANSWER_CHARS
    """Text plus tool-call arguments of one answer."""
    max_tool_calls: int = MAX_TOOL_CALLS
    """Tool calls in one answer."""

    def __post_init__(self) -> None:
        for name in (
            "max_line_bytes",
            "max_stream_bytes",
            "max_body_bytes",
            "max_error_body_bytes",
            "max_answer_chars",
            "max_tool_calls",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"BodyLimits.{name} must be >= 1, got {getattr(self, name)}")


def _too_large(what: str, limit: int, knob: str) -> LlmException:
    return llm_error(
        "protocol",
        f"{what} passed {format_size(limit)} (the client's limit, BodyLimits.{knob}): refused",
        retryable=False,
    )


class BoundedDecoder:
    """``Content-Encoding`` decoding in pieces of at most :data:`PIECE_BYTES`.

    ``decode(chunk)`` yields the decoded pieces of one raw chunk; a gzip bomb
    thus never exists decoded in memory, only as a sequence of small pieces the
    caller counts (and stops at its limit).
    """

    __slots__ = ("_head", "_zlib")

    def __init__(self, encoding: str | None) -> None:
        name = (encoding or "").strip().lower()
        self._head: bytes | None = None
        self._zlib: zlib._Decompress | None
        if name in ("", "identity"):
            self._zlib = None
        elif name in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif name == "deflate":
            # HTTP's "deflate" is zlib-wrapped, but some servers send raw deflate:
            # the first two bytes tell (a zlib header), so they are held until known.
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS)
            self._head = b""
        else:
            raise llm_error(
                "protocol",
                f"the server sent Content-Encoding {encoding!r}, which the client did not ask"
                f" for (it accepts {ACCEPT_ENCODING})",
                retryable=False,
            )

    @classmethod
    def for_response(cls, response: httpx.Response) -> BoundedDecoder:
        return cls(response.headers.get("content-encoding"))

    def decode(self, chunk: bytes) -> Iterator[bytes]:
        inflate = self._zlib
        if inflate is None:
            if chunk:
                yield chunk
            return
        data = chunk
        if self._head is not None:
            data = self._head + data
            if len(data) < 2:
                self._head = data
                return
            self._head = None
            cmf, flg = data[0], data[1]
            if cmf & 0x0F != 8 or (cmf * 256 + flg) % 31:  # no zlib header: raw deflate
                inflate = self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        while True:
            try:
                out = inflate.decompress(data, PIECE_BYTES)
            except zlib.error as exc:
                raise llm_error(
                    "protocol", f"the compressed body is corrupt: {exc}", retryable=True
                ) from None
            if out:
                yield out
            data = inflate.unconsumed_tail
            # Output may still be pending inside zlib when a piece came out full.
            if not data and len(out) < PIECE_BYTES:
                return


class SseParser:
    """Server-sent events from bytes: each event's ``data`` (lines joined by ``\\n``), stripped.

    Only ``data`` matters to a chat completion stream; comments (``:`` lines,
    keep-alives), ``event``, ``id`` and ``retry`` fields are skipped. Lines may
    end in ``\\n``, ``\\r\\n`` or ``\\r``. A line, or an event's data, longer
    than ``max_line_bytes`` is a non-retryable protocol error.
    """

    __slots__ = ("_data", "_data_size", "_max", "_partial", "_pending_cr")

    def __init__(self, max_line_bytes: int) -> None:
        self._max = max_line_bytes
        self._partial = bytearray()
        self._data: list[bytes] = []
        self._data_size = 0
        self._pending_cr = False

    def feed(self, piece: bytes) -> list[bytes]:
        """The data of every event ``piece`` completes (possibly none)."""
        if self._pending_cr:  # a "\r" ended the last piece: a "\n" here belongs to it
            self._pending_cr = False
            if piece.startswith(b"\n"):
                piece = piece[1:]
        if b"\r" in piece:
            if piece.endswith(b"\r"):
                self._pending_cr = True
            piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in piece:
            # The common case of a long line: nothing to split, only to bound.
            self._partial += piece
            if len(self._partial) > self._max:
                self._partial.clear()
                raise _too_large("one line of the event stream", self._max, "max_line_bytes")
            return []
        if self._partial:
            self._partial += piece
            text = bytes(self._partial)
            self._partial.clear()
        else:
            text = piece
        # Blank lines end events: split on them, and take the usual event -- one
        # ``data: ...`` line -- without looking at it line by line.
        blocks = text.split(b"\n\n")
        tail = blocks.pop()
        events: list[bytes] = []
        for block in blocks:
            if not self._data and block.startswith(b"data: ") and b"\n" not in block:
                if len(block) > self._max:
                    raise _too_large("one line of the event stream", self._max, "max_line_bytes")
                data = block[6:].strip()
                if data:
                    events.append(data)
                continue
            for line in block.split(b"\n"):
                self._line(line, events)
            self._line(b"", events)  # the blank line that ended the block
        lines = tail.split(b"\n")
        partial = lines.pop()
        if len(partial) > self._max:
            raise _too_large("one line of the event stream", self._max, "max_line_bytes")
        for line in lines:
            self._line(line, events)
        self._partial += partial
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        """One complete line (without its end)."""
        if not line:  # dispatch the event
            if self._data:
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                self._data = []
                self._data_size = 0
                data = data.strip()
                if data:
                    events.append(data)
            return
        if len(line) > self._max:
            raise _too_large("one line of the event stream", self._max, "max_line_bytes")
        if line.startswith(b"data:"):
            value = line[6:] if line.startswith(b"data: ") else line[5:]
            self._data_size += len(value) + 1
            if self._data_size > self._max:
                raise _too_large("one event of the stream", self._max, "max_line_bytes")
            self._data.append(value)
        elif line == b"data":
            self._data.append(b"")

    def close(self) -> list[bytes]:
        """The data of an event the body ended in the middle of (a server may omit the
        final blank line)."""
        if self._partial:
            self.feed(b"\n")
        if not self._data:
            return []
        data = b"\n".join(self._data).strip()
        self._data = []
        self._data_size = 0
        return [data] if data else []


async def read_body(
    response: httpx.Response, limit: int, *, knob: str, what: str, truncate: bool
) -> bytes:
    """A body decoded, at most ``limit`` bytes of it.

    ``truncate``: stop reading at the limit and return what fits (an error
    body is explained by its start); otherwise a body past it is an error.
    """
    decoder = BoundedDecoder.for_response(response)
    body = bytearray()
    raw: AsyncIterator[bytes] = response.aiter_raw()
    try:
        async for chunk in raw:
            for piece in decoder.decode(chunk):
                room = limit - len(body)
                if len(piece) > room:
                    if truncate:
                        body += piece[:room]
                        return bytes(body)
                    raise _too_large(what, limit, knob)
                body += piece
    finally:
        aclose = getattr(raw, "aclose", None)
        if aclose is not None:
            await aclose()
    return bytes(body)
