"""The gateway's HTTP transport: aiohttp under httpx, every failure typed as what it is.

Real sockets on 127.0.0.1: a refused port, a server that hangs up mid-body, a
server that never answers, and the mock LLM server for the happy path.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import aiohttp
import httpx
import pytest

from fore.actors.llm.loop import LlmLoop
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.netio import FastAsyncTransport, env_proxies, httpx_error


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=FastAsyncTransport(), timeout=httpx.Timeout(5.0))


class RawServer:
    """A TCP server on 127.0.0.1 whose answer is scripted bytes, then a hang-up or silence."""

    def __init__(self, reply: bytes, *, hang: bool = False) -> None:
        self.reply = reply
        self.hang = hang
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(self.reply)
            if self.hang:
                self.release.wait(10)

    def close(self) -> None:
        self.release.set()
        self.thread.join(10)
        self.sock.close()


def test_a_streamed_answer_arrives_whole() -> None:
    with MockLlmServer() as server:

        async def go() -> tuple[int, str]:
            async with client() as http:
                body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
                async with http.stream(
                    "POST", f"{server.base_url}/chat/completions", json={**body, "stream": True}
                ) as response:
                    text = "".join([part async for part in response.aiter_text()])
                    return response.status_code, text

        status, text = run(go())  # type: ignore[misc]
    assert status == 200
    assert text.rstrip().endswith("data: [DONE]")


def test_a_refused_connection_is_a_connect_error(refused_port: int) -> None:
    async def go() -> None:
        async with client() as http:
            await http.get(f"http://127.0.0.1:{refused_port}/")

    with pytest.raises(httpx.ConnectError):
        run(go())


def test_a_hang_up_mid_body_is_a_read_error_not_a_connect_timeout() -> None:
    server = RawServer(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
        b"\r\n5\r\ndata:\r\n"  # one chunk, then the server goes away
    )
    try:

        async def go() -> None:
            async with (
                client() as http,
                http.stream("GET", f"http://127.0.0.1:{server.port}/") as response,
            ):
                async for _ in response.aiter_raw():
                    pass

        with pytest.raises(httpx.TransportError) as caught:
            run(go())
    finally:
        server.close()
    assert isinstance(caught.value, httpx.ReadError | httpx.RemoteProtocolError)
    assert not isinstance(caught.value, httpx.TimeoutException)


def test_a_server_that_goes_silent_is_a_read_timeout() -> None:
    server = RawServer(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", hang=True)
    try:

        async def go() -> None:
            async with (
                httpx.AsyncClient(
                    transport=FastAsyncTransport(), timeout=httpx.Timeout(5.0, read=0.3)
                ) as http,
                http.stream("GET", f"http://127.0.0.1:{server.port}/") as response,
            ):
                async for _ in response.aiter_raw():
                    pass

        with pytest.raises(httpx.ReadTimeout):
            run(go())
    finally:
        server.close()


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (aiohttp.ConnectionTimeoutError("connect"), httpx.ConnectTimeout),
        (aiohttp.SocketTimeoutError("read"), httpx.ReadTimeout),
        (aiohttp.ServerDisconnectedError(), httpx.RemoteProtocolError),
        (aiohttp.ClientPayloadError("cut"), httpx.ReadError),
        (aiohttp.ClientOSError(104, "reset"), httpx.ReadError),
        (aiohttp.InvalidURL("nope://x"), httpx.UnsupportedProtocol),
        (aiohttp.ClientError("odd"), httpx.TransportError),
    ],
)
def test_aiohttp_failures_map_to_the_matching_httpx_error(
    error: BaseException, expected: type[httpx.TransportError]
) -> None:
    mapped = httpx_error(error)
    assert type(mapped) is expected
    # Also when it arrives already (mis)mapped by httpx-aiohttp, with the cause kept.
    wrapped = httpx.ConnectTimeout("mapped by the library")
    wrapped.__cause__ = error
    assert type(httpx_error(wrapped)) is expected
    assert httpx_error(ValueError("not ours")) is None


def test_an_environment_proxy_keeps_httpx_own_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    assert not env_proxies()
    loop = LlmLoop(name="transport-test", client_shards=1)
    try:
        assert isinstance(loop._clients[0]._transport, FastAsyncTransport)
    finally:
        assert loop.close()
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert env_proxies()
    loop = LlmLoop(name="transport-test-proxy", client_shards=1)
    try:
        assert not isinstance(loop._clients[0]._transport, FastAsyncTransport)
    finally:
        assert loop.close()


def test_reading_a_body_can_pause_at_the_socket_and_resume_whole() -> None:
    """A fork's stream is read in batches: between them the socket is not read at all
    (what arrives waits in the kernel), and nothing is lost when reading resumes."""
    from fore.actors.llm.netio import FLOW_EXTENSION

    with MockLlmServer(generated_words=60, tokens_per_s=100) as server:  # 0.6 s long

        async def go() -> tuple[list[bool], str]:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            paused = []
            async with (
                client() as http,
                http.stream("POST", f"{server.base_url}/chat/completions", json=body) as response,
            ):
                flow = response.extensions[FLOW_EXTENSION]
                parts = []
                async for part in response.aiter_raw():
                    parts.append(part)
                    if len(paused) < 3:
                        paused.append(flow.pause_reading())
                        await asyncio.sleep(0.05)
                        flow.resume_reading()
                return paused, b"".join(parts).decode()

        paused, text = run(go())  # type: ignore[misc]
    assert paused == [True, True, True]  # the stream was still coming each time
    assert text.rstrip().endswith("data: [DONE]") and text.count("data: ") > 60
