"""Serving the app: uvicorn on a socket bound here, in a background thread of this process.

:class:`MockLlmServer` (``with MockLlmServer(script) as server``) runs uvicorn with its
own event loop in a daemon thread, aborts in-flight responses at shutdown
(:class:`_UvicornServer`), and offers the control API in-process, without HTTP;
:meth:`MockLlmServer.spawn` starts the child-process flavour
(:mod:`~fore.actors.llm.mock_server.spawned`). The uvicorn configuration and socket
binding are shared with the CLI.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Final, Self

import uvicorn

from fore.actors.core.logs import get_logger
from fore.actors.llm import evloop
from fore.actors.llm.mock_server.app import MockLlmApp
from fore.actors.llm.mock_server.control import _wait_for_stats
from fore.actors.llm.mock_server.faults import _install_log_filter
from fore.actors.llm.mock_server.settings import (
    FaultKind,
    FaultSpec,
    MockSettings,
    MockStats,
    RecordedRequest,
)
from fore.actors.llm.mock_server.spawned import SpawnedMockLlmServer
from fore.actors.llm.script import ScriptFile

log = get_logger(__name__)


_BACKLOG: Final = 4096


class _UvicornServer(uvicorn.Server):
    """uvicorn that aborts in-flight mock responses at shutdown and leaves signals alone.

    Without the abort a stalled stream would hold shutdown for the whole
    graceful timeout; signals belong to whoever owns the process (the CLI
    installs its own handlers, a test process keeps its own).
    """

    def __init__(self, config: uvicorn.Config, app: MockLlmApp) -> None:
        super().__init__(config)
        self._mock_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._mock_app.begin_close()
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _uvicorn_config(app: MockLlmApp, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app.asgi,
        host="127.0.0.1",
        port=0,
        loop="none",  # we create it (actors.llm.evloop: uvloop when installed)
        http="auto",  # httptools when installed, else h11
        lifespan="off",
        log_config=None,  # never reconfigure the host process's logging
        log_level=log_level,
        access_log=False,
        backlog=_BACKLOG,
        limit_concurrency=None,
        timeout_graceful_shutdown=2,
    )


def _bind_socket(host: str, port: int) -> socket.socket:
    """Bind (and listen) here, so port 0 can be read back before serving starts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class MockLlmServer:
    """The mock server in a background thread of this process (uvicorn, own event loop).

    Use as a context manager; ``__enter__`` returns once the port accepts
    connections and ``__exit__`` stops it within ``shutdown_timeout_s``
    (in-flight responses are cut, the thread is joined).
    """

    def __init__(
        self,
        script: ScriptFile | str | os.PathLike[str] | None = None,
        *,
        port: int = 0,
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        generated_words: int = 24,
        tool_args_chunk_chars: int = 4,
        stall_s: float = 30.0,
        retry_after_s: float = 1.0,
        reject_forced_tool_choice: bool = False,
        strict: bool = True,
        max_output_tokens: int = 16_384,
        record_limit: int = 1000,
        background_tick_ms: float = 0.0,
        log_level: str = "warning",
        startup_timeout_s: float = 10.0,
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        if script is not None and not isinstance(script, ScriptFile):
            script = ScriptFile.from_path(Path(script))
        self.settings = MockSettings(
            ttft_ms=ttft_ms,
            tokens_per_s=tokens_per_s,
            generated_words=generated_words,
            tool_args_chunk_chars=tool_args_chunk_chars,
            stall_s=stall_s,
            retry_after_s=retry_after_s,
            reject_forced_tool_choice=reject_forced_tool_choice,
            strict=strict,
            max_output_tokens=max_output_tokens,
            record_limit=record_limit,
            background_tick_ms=background_tick_ms,
        )
        self.app = MockLlmApp(script, self.settings)
        self._requested_port = port
        self._log_level = log_level
        self._startup_timeout_s = startup_timeout_s
        self._shutdown_timeout_s = shutdown_timeout_s
        self._server: _UvicornServer | None = None
        self._thread: threading.Thread | None = None
        self._thread_error: BaseException | None = None
        self._port: int | None = None

    # -- lifecycle ---------------------------------------------------------- #

    def start(self) -> Self:
        """Bind, start serving in a thread, and wait until it accepts requests."""
        if self._thread is not None:
            raise RuntimeError("MockLlmServer already started")
        _install_log_filter()
        sock = _bind_socket("127.0.0.1", self._requested_port)
        self._port = int(sock.getsockname()[1])
        server = _UvicornServer(_uvicorn_config(self.app, self._log_level), self.app)
        self._server = server

        def run() -> None:
            try:
                evloop.run(server.serve(sockets=[sock]))
            except BaseException as exc:  # reported by start()
                self._thread_error = exc
            finally:
                sock.close()

        self._thread = threading.Thread(target=run, name=f"mock-llm-{self._port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"mock LLM server failed to start: {self._thread_error!r}")
            if time.monotonic() >= deadline:
                self.stop()
                raise TimeoutError(f"mock LLM server not up after {self._startup_timeout_s}s")
            time.sleep(0.002)
        log.debug("mock_llm.started", port=self._port)
        return self

    def stop(self) -> None:
        """Shut down (in-flight responses are cut) and join the thread; idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.should_exit = True
        thread.join(self._shutdown_timeout_s)
        if thread.is_alive():
            server.force_exit = True
            thread.join(2.0)
        if thread.is_alive():
            raise RuntimeError(
                f"mock LLM server thread did not stop within {self._shutdown_timeout_s}s"
            )
        self._server = None
        log.debug("mock_llm.stopped", port=self._port)

    close = stop

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------- #

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._port is None:
            raise RuntimeError("MockLlmServer not started")
        return self._port

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>`` (control endpoints live under ``/mock``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.root_url}/v1"

    # -- control (in-process, no HTTP) -------------------------------------- #

    def stats(self) -> MockStats:
        return self.app.stats()

    def requests(self) -> tuple[RecordedRequest, ...]:
        return self.app.requests()

    def queue_fault(
        self,
        fault: FaultKind,
        *,
        count: int = 1,
        retry_after: float | None = None,
        session: str | None = None,
        stall_s: float | None = None,
    ) -> None:
        self.app.queue_fault(
            FaultSpec(
                fault=fault, count=count, retry_after=retry_after, session=session, stall_s=stall_s
            )
        )

    def reset(self) -> None:
        self.app.reset()

    def set_script(self, script: ScriptFile | None) -> None:
        self.app.set_script(script)

    def wait_for_stats(
        self, predicate: Callable[[MockStats], bool], timeout_s: float = 5.0
    ) -> MockStats:
        """Poll the stats until ``predicate`` holds; ``TimeoutError`` after ``timeout_s``."""
        return _wait_for_stats(self.stats, predicate, timeout_s)

    # -- subprocess flavour ------------------------------------------------- #

    @classmethod
    def spawn(
        cls,
        script: ScriptFile | str | os.PathLike[str] | None = None,
        *,
        port: int = 0,
        ttft_ms: float = 0.0,
        tokens_per_s: float | None = None,
        generated_words: int = 24,
        tool_args_chunk_chars: int = 4,
        stall_s: float = 30.0,
        retry_after_s: float = 1.0,
        reject_forced_tool_choice: bool = False,
        strict: bool = True,
        max_output_tokens: int = 16_384,
        record_limit: int = 1000,
        background_tick_ms: float = 0.0,
        log_level: str = "warning",
        startup_timeout_s: float = 30.0,
        shutdown_timeout_s: float = 10.0,
    ) -> SpawnedMockLlmServer:
        """Run the server in a child process (its own GIL) and return its handle.

        The child is ``sys.executable -m actors.llm.mock_server``; the handle
        talks to its control endpoints over HTTP with the same API as here.
        """
        args = [
            "--port",
            str(port),
            "--ttft-ms",
            repr(float(ttft_ms)),
            "--generated-words",
            str(generated_words),
            "--tool-args-chunk-chars",
            str(tool_args_chunk_chars),
            "--stall-s",
            repr(float(stall_s)),
            "--retry-after-s",
            repr(float(retry_after_s)),
            "--record-limit",
            str(record_limit),
            "--background-tick-ms",
            repr(float(background_tick_ms)),
            "--max-output-tokens",
            str(max_output_tokens),
            "--log-level",
            log_level,
        ]
        if not strict:
            args.append("--lenient")
        if tokens_per_s is not None:
            args += ["--tokens-per-s", repr(float(tokens_per_s))]
        if reject_forced_tool_choice:
            args.append("--reject-forced-tool-choice")
        inline: ScriptFile | None = None
        if isinstance(script, ScriptFile):
            inline = script
        elif script is not None:
            args += ["--script", os.fspath(script)]
        server = SpawnedMockLlmServer(
            args, startup_timeout_s=startup_timeout_s, shutdown_timeout_s=shutdown_timeout_s
        )
        if inline is not None:
            try:
                server.set_script(inline)
            except BaseException:
                server.stop()
                raise
        return server
