"""Hostile model servers: answers built to exhaust a client, on 127.0.0.1.

A real server is not the only thing at the other end of a base URL: a
misconfigured proxy, a broken build or a malicious endpoint can answer with a
line that never ends, a gzip bomb, or a stream that never says anything. Each
:data:`CASES` entry is one such answer; :class:`HostileServer` serves it over
real TCP (plain sockets, no HTTP library to smooth anything over), counting
what it sent before the client hung up.

Used by the tests (``tests/llm/test_llm_hostile.py``: the client ends each with a
clear error, having read only a bounded amount) and by ``fore bench llm``
(peak RSS growth of a client process under each case, against a limit).
"""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

__all__ = ["BENIGN", "CASES", "Case", "HostileServer", "gzip_bomb", "probe", "sse_chunk"]

MIB = 1024 * 1024


def sse_chunk(delta: dict[str, object], finish_reason: str | None = None) -> bytes:
    """One ``data:`` event of a chat completion stream."""
    chunk = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def gzip_bomb(unit: bytes, units: int) -> Iterator[bytes]:
    """A gzip stream that inflates to ``unit`` repeated ``units`` times, built in ~no time.

    ``unit`` is compressed once and ends with a full flush, which resets the
    compressor: the next copy compresses to the very same bytes, so the bomb
    is one compressed block repeated (no trailer: the client must stop long
    before it would need one).
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    yield compressor.compress(unit) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(unit) + compressor.flush(zlib.Z_FULL_FLUSH)
    batch = block * max(1, (256 * 1024) // len(block))
    per_batch = len(batch) // len(block)
    for _ in range(0, units - 1, per_batch):
        yield batch


def _repeat(part: bytes, total: int) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield part
        sent += len(part)


def _paced(part: bytes, every_s: float, seconds: float) -> Iterator[bytes]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        yield part
        time.sleep(every_s)


@dataclass(frozen=True)
class Case:
    """One hostile answer: status line and headers, then a body made on demand."""

    name: str
    what: str
    status: str
    headers: tuple[tuple[str, str], ...]
    body: Callable[[], Iterator[bytes]]
    stream: bool = True
    """Whether the client should ask for a stream (a non-streamed case answers a
    plain request)."""
    timed: bool = False
    """Bounded by a deadline, not by a size: ends only when a timeout fires."""


_SSE = (("Content-Type", "text/event-stream"),)
_JSON = (("Content-Type", "application/json"),)
_GZIP = (("Content-Encoding", "gzip"),)

BENIGN = Case(
    "benign",
    "a normal answer (200 words)",
    "200 OK",
    _SSE,
    lambda: iter(
        [
            *(sse_chunk({"content": f"word{i} "}) for i in range(200)),
            sse_chunk({}, "stop"),
            b"data: [DONE]\n\n",
        ]
    ),
)
"""The baseline of the RSS benchmark: what an ordinary answer costs the same client."""

CASES: dict[str, Case] = {
    case.name: case
    for case in (
        BENIGN,
        Case(
            "long_line",
            "a 300 MB SSE line with no newline",
            "200 OK",
            _SSE,
            lambda: iter([b"data: ", *_repeat(b"x" * 65536, 300 * MIB)]),
        ),
        Case(
            "stream_gzip_bomb",
            "a gzip bomb on a stream (1 GiB of zeros, no newline)",
            "200 OK",
            _SSE + _GZIP,
            lambda: gzip_bomb(bytes(MIB), 1024),
        ),
        Case(
            "stream_gzip_bomb_events",
            "a gzip bomb of empty events (1 GiB of them)",
            "200 OK",
            _SSE + _GZIP,
            lambda: gzip_bomb(sse_chunk({}) * (MIB // len(sse_chunk({}))), 1024),
        ),
        Case(
            "error_gzip_bomb",
            "a gzip-bombed HTTP 500 body (1 GiB)",
            "500 Internal Server Error",
            _JSON + _GZIP,
            lambda: gzip_bomb(bytes(MIB), 1024),
        ),
        Case(
            "body_huge",
            "a 300 MB non-streamed answer body",
            "200 OK",
            _JSON,
            lambda: iter(
                [b'{"choices": [{"message": {"content": "', *_repeat(b"y" * 65536, 300 * MIB)]
            ),
            stream=False,
        ),
        Case(
            "body_gzip_bomb",
            "a gzip-bombed non-streamed answer body (1 GiB)",
            "200 OK",
            _JSON + _GZIP,
            lambda: gzip_bomb(b" " * MIB, 1024),
            stream=False,
        ),
        Case(
            "many_tool_calls",
            "a stream of a million tool calls",
            "200 OK",
            _SSE,
            lambda: (
                sse_chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": f"c{i}",
                                "type": "function",
                                "function": {"name": "t", "arguments": "{}"},
                            }
                        ]
                    }
                )
                for i in range(1_000_000)
            ),
        ),
        Case(
            "empty_deltas",
            "an empty delta every 0.1 s, forever",
            "200 OK",
            _SSE,
            lambda: _paced(sse_chunk({}), 0.1, 600),
            timed=True,
        ),
        Case(
            "keepalives",
            "an SSE comment every 0.1 s, forever",
            "200 OK",
            _SSE,
            lambda: _paced(b": keep-alive\n\n", 0.1, 600),
            timed=True,
        ),
        Case(
            "endless_text",
            "a word every 0.05 s, forever (never a finish reason)",
            "200 OK",
            _SSE,
            lambda: _paced(sse_chunk({"content": "word "}), 0.05, 600),
            timed=True,
        ),
        Case(
            "done_without_finish",
            "some text, then [DONE] with no finish_reason",
            "200 OK",
            _SSE,
            lambda: iter([sse_chunk({"content": "The answer is"}), b"data: [DONE]\n\n"]),
        ),
    )
}


@dataclass
class _Stats:
    connections: int = 0
    sent: list[int] = field(default_factory=list)
    """Bytes of body sent on each connection before it ended."""
    hung_up: list[bool] = field(default_factory=list)
    """Whether the client hung up first (the body was not sent whole)."""


class HostileServer:
    """Serves one :class:`Case` on 127.0.0.1 to every connection (a thread per connection).

    ``with HostileServer(case) as server: server.base_url``. The body goes out
    with ``Connection: close`` and no length (it ends when the server closes),
    in the parts the case yields; a client that hangs up ends it.
    """

    def __init__(self, case: Case) -> None:
        self.case = case
        self.stats = _Stats()
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> HostileServer:
        self._acceptor.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)
        self._sock.close()

    def ended(self, timeout_s: float = 10.0) -> None:
        """Wait until every connection so far has ended."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                if len(self.stats.sent) >= self.stats.connections:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("a hostile connection did not end")
            time.sleep(0.01)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.stats.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        sent = 0
        hung_up = False
        try:
            conn.settimeout(10)
            _read_request(conn)
            head = f"HTTP/1.1 {self.case.status}\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in self.case.headers
            )
            conn.sendall((head + "Connection: close\r\n\r\n").encode())
            for part in self.case.body():
                if self._stop.is_set():
                    break
                conn.sendall(part)
                sent += len(part)
        except OSError:  # the client hung up (reset, broken pipe) or timed out
            hung_up = True
        finally:
            conn.close()
            with self._lock:
                self.stats.sent.append(sent)
                self.stats.hung_up.append(hung_up)


def _read_request(conn: socket.socket) -> None:
    """Read one request (headers, then ``Content-Length`` bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = conn.recv(65536)
        if not part:
            raise ConnectionResetError("no request")
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        part = conn.recv(65536)
        if not part:
            raise ConnectionResetError("request cut short")
        body += part


# -- the client side, in a process of its own (``fore bench llm`` measures its peak RSS) --


def probe(base_url: str, benign_url: str, *, stream: bool) -> dict[str, object]:
    """Ask ``base_url`` once through the real provider; the peak RSS it added, and how it ended.

    Run in a fresh process (``python -m bench.llm_hostile URL BENIGN_URL``): a
    first request to the benign server warms everything (imports, the event
    loop, the connection pool), then the RSS is read and the hostile request
    made; its cost is the process's peak RSS (``ru_maxrss``) minus that.
    """
    import httpx
    import psutil

    from fore.actors.llm import LlmException, OpenAICompatible, RetryPolicy, evloop
    from fore.actors.llm.netio import FastAsyncTransport
    from fore.messages.conversation import UserMessage
    from fore.messages.llm import LlmRequest

    def ask(url: str, stream: bool) -> str:
        model = OpenAICompatible(
            base_url=url, api_key="k", model="m", retry=RetryPolicy(max_retries=0)
        )
        request = LlmRequest(
            request_id="r", session_id="s", messages=(UserMessage(text="hi"),), stream=stream
        )

        async def go() -> str:
            async with httpx.AsyncClient(transport=FastAsyncTransport()) as http:
                result = await model.stream(request, lambda event: None, http)
                return f"completed ({len(result.message.text)} characters)"

        try:
            return evloop.run(go())
        except LlmException as exc:
            return f"{exc.error.kind}: {exc.error.message}"

    ask(benign_url, True)
    before = psutil.Process().memory_info().rss
    exact = _reset_peak_rss()
    peak = [before]
    stop = threading.Event()

    def sample() -> None:  # where the peak cannot be reset: sample it
        while not stop.wait(0.002):
            peak[0] = max(peak[0], psutil.Process().memory_info().rss)

    sampler = None if exact else threading.Thread(target=sample, daemon=True)
    if sampler is not None:
        sampler.start()
    began = time.perf_counter()
    outcome = ask(base_url, stream)
    seconds = time.perf_counter() - began
    stop.set()
    if sampler is not None:
        sampler.join()
        high = peak[0]
    else:
        high = _peak_rss()
    return {"growth": max(0, high - before), "outcome": outcome, "seconds": seconds}


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux: ``clear_refs`` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return _peak_rss() > 0


def _peak_rss() -> int:
    """The peak RSS since the last reset (``VmHWM``), in bytes; 0 when unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    import sys

    url, benign, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.stdout.write(json.dumps(probe(url, benign, stream=mode == "stream")) + "\n")
