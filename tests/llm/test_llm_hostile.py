"""A hostile server cannot make the client allocate without bound or wait forever.

Every case is a real TCP server on 127.0.0.1 (:mod:`bench.llm_hostile`) sending
what a broken or malicious endpoint can: a line that never ends, gzip bombs
(on a stream, an error body, a whole answer), a million tool calls, streams
that never say anything. The client must end each with one clear, typed
error, having read a bounded amount: the server counts what it managed to
send before the client hung up, and the parsers' own buffers are checked
directly. (RSS under these cases is measured by ``fore bench llm``, not here.)
"""

from __future__ import annotations

import gzip
import itertools
import zlib
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.llm import (
    LlmException,
    OpenAICompatible,
    RetryPolicy,
    StreamResult,
    Timeouts,
    evloop,
)
from fore.actors.llm.netio import FastAsyncTransport
from fore.bench.llm_hostile import CASES, HostileServer
from fore.messages.conversation import UserMessage
from fore.messages.llm import LlmRequest

MIB = 1024 * 1024


def body_module() -> Any:
    """``actors.llm.body``, imported where used (so each test stands alone on old code)."""
    from fore.actors.llm import body

    return body


def ask(
    base_url: str, *, stream: bool = True, purpose: str = "main", **options: Any
) -> tuple[StreamResult | LlmException, list[Any]]:
    """One request through the real provider and transport; the result or its error."""
    options.setdefault("retry", RetryPolicy(max_retries=0))
    model = OpenAICompatible(base_url=base_url, api_key="k", model="m", **options)
    request = LlmRequest(
        request_id="r1",
        session_id="s1",
        purpose=purpose,  # type: ignore[arg-type]
        messages=(UserMessage(text="hi"),),
        stream=stream,
    )
    events: list[Any] = []

    async def go() -> StreamResult:
        async with httpx.AsyncClient(transport=FastAsyncTransport()) as http:
            return await model.stream(request, events.append, http)

    try:
        return evloop.run(go()), events
    except LlmException as exc:
        return exc, events


def failed(case: str, **options: Any) -> tuple[LlmException, HostileServer]:
    with HostileServer(CASES[case]) as server:
        result, _ = ask(server.base_url, stream=CASES[case].stream, **options)
        server.ended()
    assert isinstance(result, LlmException), result
    return result, server


def test_a_line_without_end_is_refused_at_the_line_limit() -> None:
    error, server = failed("long_line")
    assert error.error.kind == "protocol" and not error.error.retryable
    assert "one line of the event stream passed 1 MiB" in error.error.message
    assert "max_line_bytes" in error.error.message
    # The client hung up long before the 300 MB (what is left in flight is the
    # socket buffers' worth).
    assert server.stats.hung_up == [True]
    assert server.stats.sent[0] < 48 * MIB


def test_a_gzip_bomb_on_a_stream_is_decoded_only_up_to_the_line_limit() -> None:
    # (The bomb is ~1 MB compressed: the server may well send it all; what is
    # bounded is what the client inflates.)
    error, _ = failed("stream_gzip_bomb")
    assert "one line of the event stream passed 1 MiB" in error.error.message


def test_a_gzip_bomb_of_empty_events_is_refused_at_the_stream_limit() -> None:
    error, _ = failed(
        "stream_gzip_bomb_events", limits=body_module().BodyLimits(max_stream_bytes=4 * MIB)
    )
    assert "the event stream passed 4 MiB" in error.error.message
    assert "max_stream_bytes" in error.error.message


def test_what_one_compressed_chunk_inflates_to_is_handled_piece_by_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """16 KiB of gzip can inflate to 16 MB of events: never held as events all at once."""
    from fore.actors.llm import models

    batches: list[int] = []
    feed_each = models._feed_each

    def counting(assembler: Any, events: list[bytes], *args: Any) -> bool:
        batches.append(sum(len(e) for e in events))
        return feed_each(assembler, events, *args)

    monkeypatch.setattr(models, "_feed_each", counting)
    error, _ = failed(
        "stream_gzip_bomb_events", limits=body_module().BodyLimits(max_stream_bytes=8 * MIB)
    )
    assert "max_stream_bytes" in error.error.message
    assert len(batches) > 100 and max(batches) <= body_module().PIECE_BYTES


def test_a_gzip_bombed_error_body_is_read_only_to_its_limit() -> None:
    """The status error is reported (a retryable server error) from the body's start."""
    error, _ = failed("error_gzip_bomb")
    assert error.error.kind == "server" and error.error.status == 500
    assert error.error.message.startswith("HTTP 500")
    assert "\x00" not in error.error.message  # the junk is not pasted into the message


@pytest.mark.parametrize("case", ["body_huge", "body_gzip_bomb"])
def test_a_non_streamed_body_past_its_limit_is_refused(case: str) -> None:
    error, _server = failed(case)
    assert error.error.kind == "protocol" and not error.error.retryable
    assert "the response body passed 8 MiB" in error.error.message
    assert "max_body_bytes" in error.error.message


def test_a_million_tool_calls_stop_at_the_tool_call_limit() -> None:
    error, server = failed("many_tool_calls", limits=body_module().BodyLimits(max_tool_calls=500))
    assert "more than 500 tool calls" in error.error.message
    assert server.stats.hung_up == [True]


@pytest.mark.parametrize("case", ["empty_deltas", "keepalives"])
def test_a_stream_that_says_nothing_ends_at_the_no_progress_deadline(case: str) -> None:
    """Empty deltas and keep-alive comments satisfy the idle timeout forever; not this one."""
    timeouts = Timeouts(idle=5, no_progress=0.6, total=60)
    error, server = failed(case, timeouts=timeouts)
    assert error.error.kind == "timeout" and error.error.deadline == "no_progress"
    assert "no progress for 0.6s" in error.error.message
    assert server.stats.hung_up == [True]


def test_a_stream_that_never_finishes_ends_at_the_overall_deadline() -> None:
    timeouts = Timeouts(idle=5, no_progress=5, total=1.0)
    error, _server = failed("endless_text", timeouts=timeouts)
    assert error.error.kind == "timeout" and error.error.deadline == "total"
    assert "no complete answer within 1s" in error.error.message


def test_a_background_stream_is_bounded_the_same_way() -> None:
    """Batched reading (forks) keeps every bound: the line limit and the deadlines."""
    with HostileServer(CASES["long_line"]) as server:
        result, _ = ask(server.base_url, purpose="speculation")
        server.ended()
    assert isinstance(result, LlmException)
    assert "max_line_bytes" in result.error.message
    with HostileServer(CASES["empty_deltas"]) as server:
        result, _ = ask(
            server.base_url,
            purpose="suggestion",
            timeouts=Timeouts(idle=5, no_progress=0.6, total=60),
        )
        server.ended()
    assert isinstance(result, LlmException) and result.error.deadline == "no_progress"


# -- the parsers' own bounds --


def test_the_sse_parser_never_holds_more_than_one_line() -> None:
    parser = body_module().SseParser(max_line_bytes=MIB)
    piece = b"y" * 65536
    held = 0
    with pytest.raises(LlmException, match="max_line_bytes"):
        for _ in range(300 * MIB // len(piece)):
            parser.feed(piece)
            held = max(held, len(parser._partial))
    assert held <= MIB


def test_one_event_of_many_data_lines_is_bounded_too() -> None:
    parser = body_module().SseParser(max_line_bytes=1000)
    with pytest.raises(LlmException, match="one event of the stream"):
        for _ in range(1000):
            parser.feed(b"data: " + b"z" * 50 + b"\n")


def test_the_decoder_inflates_a_bomb_in_small_pieces() -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = compressor.compress(bytes(64 * MIB)) + compressor.flush()
    assert len(bomb) < MIB // 8
    decoder = body_module().BoundedDecoder("gzip")
    sizes = [len(piece) for piece in decoder.decode(bomb)]
    assert max(sizes) <= body_module().PIECE_BYTES
    assert sum(sizes) == 64 * MIB


def test_an_encoding_the_client_did_not_ask_for_is_refused() -> None:
    with pytest.raises(LlmException, match="Content-Encoding 'br'"):
        body_module().BoundedDecoder("br")


# -- the parsers are exact (property tests) --

_data = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"").strip())
_events = st.lists(st.lists(_data, min_size=1, max_size=3), max_size=8)


def _encode(events: list[list[bytes]], newline: bytes, comments: bool) -> bytes:
    """An event stream of ``events``; ``comments`` adds keep-alives, other fields and the
    space-less ``data:`` spelling."""
    out = b""
    for event in events:
        if comments:
            out += b": keep-alive" + newline + b"event: message" + newline + b"id: 7" + newline
        for line in event:
            out += (b"data:" if comments else b"data: ") + line + newline
        out += newline
    return out


def _expected(events: list[list[bytes]]) -> list[bytes]:
    joined = [b"\n".join(event).strip() for event in events]
    return [data for data in joined if data]


@settings(max_examples=200, deadline=None)
@given(
    events=_events,
    newline=st.sampled_from([b"\n", b"\r\n", b"\r"]),
    comments=st.booleans(),
    cuts=st.lists(st.integers(0, 2000), max_size=12),
)
def test_sse_events_parse_the_same_however_the_bytes_are_split(
    events: list[list[bytes]], newline: bytes, comments: bool, cuts: list[int]
) -> None:
    stream = _encode(events, newline, comments)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    parser = body_module().SseParser(max_line_bytes=MIB)
    got: list[bytes] = []
    for a, b in itertools.pairwise(bounds):
        got += parser.feed(stream[a:b])
    got += parser.close()
    assert got == _expected(events)


@settings(max_examples=100, deadline=None)
@given(
    data=st.binary(max_size=200_000),
    encoding=st.sampled_from(["gzip", "deflate", "raw-deflate", "identity"]),
    cuts=st.lists(st.integers(0, 10_000), max_size=10),
)
def test_decoding_gives_back_the_body_however_it_is_split(
    data: bytes, encoding: str, cuts: list[int]
) -> None:
    if encoding == "gzip":
        body, header = gzip.compress(data), "gzip"
    elif encoding == "deflate":
        body, header = zlib.compress(data), "deflate"
    elif encoding == "raw-deflate":
        raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        body, header = raw.compress(data) + raw.flush(), "deflate"
    else:
        body, header = data, "identity"
    bounds = sorted({0, len(body), *(c % (len(body) + 1) for c in cuts)})
    decoder = body_module().BoundedDecoder(header)
    out = b"".join(
        piece for a, b in itertools.pairwise(bounds) for piece in decoder.decode(body[a:b])
    )
    assert out == data


# -- the one deadline guard, moved exactly (no clock in the test) --


class _Loop:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


class _Guard:
    def __init__(self) -> None:
        self.at: list[float | None] = []

    def reschedule(self, when: float | None) -> None:
        self.at.append(when)


def test_the_guard_follows_the_earliest_deadline() -> None:
    from fore.actors.llm.models import _Clock

    loop, guard = _Loop(), _Guard()
    clock = _Clock(
        loop,  # type: ignore[arg-type]
        Timeouts(first_byte=60, idle=30, no_progress=5, total=100),
        stream=True,
        start=loop.now,
    )
    clock.arm(guard)  # type: ignore[arg-type]
    assert clock.first == 1060.0  # first byte
    loop.now = 1001.0
    clock.data(progress=0)  # first data, nothing said yet: no progress due at 1006
    assert guard.at[-1] == 1006.0
    loop.now = 1004.0
    clock.data(progress=0)  # keep-alive: the idle deadline moves, no progress does not
    assert guard.at[-1] == 1006.0
    assert clock.expired() == "no_progress"
    loop.now = 1005.0
    clock.data(progress=1)  # text: no progress due at 1010
    assert guard.at[-1] == 1010.0
    for step in range(1, 200):  # steady progress: the overall deadline comes first
        loop.now = 1005.0 + step * 0.5
        clock.data(progress=1 + step)
    assert guard.at[-1] == 1100.0
    assert clock.expired() == "total"
