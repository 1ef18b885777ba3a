"""One MCP server connection, supervised, on the tool layer's event loop.

The SDK's client is a stack of async context managers (transport, session)
that must be entered and exited by the same task. So each connection has one
long-lived **supervisor task** on the :class:`~actors.tools.aio.ToolLoop`: it
connects (starting the server process for stdio), lists the tools, then
waits until the connection is lost; calls are made from the calls' own tasks
through the live client. Actors never touch the SDK: the supervisor task is
to this connection what an actor is to its state.

**Losing the connection** is noticed three ways: the server's output stream
ends (its process exited -- noticed even while idle), the transport fails
(an HTTP server gone: the SDK's task group ends), or a call sees the
connection closed. Calls in flight then end with a clear error (never a
hang), and the supervisor restarts the server with exponential backoff and
jitter. As in OTP, restarts are bounded: more than ``max_restarts`` in
``restart_window`` seconds and the server stays down (state ``failed``, one
error alert); its calls fail at once, naming why. A session opened later
that names the server tries it again.

**Starting** is bounded by ``startup_timeout``. A first start that fails is
not retried: it is a configuration problem (a command that does not exist,
a server that exits), reported once per session that asked for it, with the
tail of the server's stderr.

**Deadlines.** A call waits for a (re)starting server only until its own
deadline; the call itself is cancelled by the pool at its deadline
(``task.cancel()``), which the SDK turns into an MCP cancellation, so a hung
server costs a call its deadline and nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import tempfile
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

from fore.actors.core.logs import get_logger
from fore.actors.tools.base import ToolError
from fore.actors.tools.mcp.config import MCPServer, MCPServerHTTP, MCPServerStdio, describe
from fore.actors.tools.mcp.stdio import bounded_stdio_client
from fore.messages.alerts import AlertLevel

log = get_logger(__name__)

State = Literal["new", "starting", "ready", "restarting", "failed", "closed"]

MAX_LIST_PAGES = 20
"""tools/list pages read at most (a server paginating forever cannot hang a start)."""

STDERR_CAP = 1024 * 1024
"""The server's stderr file is emptied when it grows past this (bytes)."""

STDERR_CHECK_S = 30.0
"""How often a running server's stderr file is checked against :data:`STDERR_CAP`."""

STDERR_TAIL = 600
"""Characters of the server's stderr quoted in a failure alert."""

BACKOFF_INITIAL = 0.2
BACKOFF_MAX = 10.0

Alert = Callable[[AlertLevel, str], None]


def sdk() -> Any:
    """The MCP SDK, or a clear error when the ``mcp`` extra is not installed."""
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - the extra is installed in dev
        raise ToolError(
            "MCP servers need the MCP SDK: pip install 'fore-runtime[mcp]' "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return mcp


class MCPConnection:
    """A supervised connection to one MCP server (see module docs).

    Every method except :meth:`snapshot` runs on the tool loop.
    """

    def __init__(self, config: MCPServer, *, alert: Alert) -> None:
        self.config = config
        self.name = config.display_name
        self.state: State = "new"
        self.error: str | None = None
        """Why the last start failed or the connection was lost."""
        self.tools: list[Any] = []
        """The server's tool listing from its latest start."""
        self.starts = 0
        """Successful starts (1 + restarts that succeeded)."""
        self.in_flight = 0
        """Calls that hold the live client and wait for the server's answer."""
        self.stderr_trims = 0
        """Times the server's stderr file was emptied for growing past :data:`STDERR_CAP`."""
        self._alert = alert
        self._home: asyncio.AbstractEventLoop | None = None
        """The loop the connection lives on (its supervisor task, its client)."""
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._lost: asyncio.Event | None = None
        self._restarts: deque[float] = deque()
        self._closing = False
        self._stderr_path: str | None = None

    # -- waiting for the connection ---------------------------------------------------

    def _signal(self) -> None:
        """Wake whoever waits for a state change."""
        if self._changed is not None:
            self._changed.set()
        self._changed = asyncio.Event()

    def _set_state(self, state: State) -> None:
        self.state = state
        self._signal()

    async def ensure_started(self) -> None:
        """Start if not running (again after a failure); return once ready or failed."""
        if self.state in ("new", "failed") and not self._closing:
            self._home = asyncio.get_running_loop()
            self._restarts.clear()
            self.error = None
            self._set_state("starting")
            self._task = asyncio.get_running_loop().create_task(
                self._supervise(), name=f"mcp:{self.name}"
            )
        deadline = time.monotonic() + self.config.startup_timeout + 5.0
        while self.state in ("starting", "restarting"):
            assert self._changed is not None
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()

    async def _ready_client(self, deadline: float) -> Any:
        """The live client, waiting for a restart until ``deadline`` (loop time)."""
        while True:
            if self.state == "ready" and self._client is not None:
                return self._client
            if self.state in ("failed", "closed", "new"):
                reason = f": {self.error}" if self.error else ""
                raise ToolError(f"the MCP server {self.name!r} is not running{reason}")
            assert self._changed is not None
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise ToolError(
                    f"the MCP server {self.name!r} is restarting and was not back before "
                    "the call's deadline; try again"
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()

    # -- calls ------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], time_left: float) -> Any:
        """Call ``tool``; a ``ToolError`` (the model's error result) for every failure.

        Called from another loop than the connection's, it runs there (the
        client's streams belong to that loop); cancelling the caller cancels it.
        """
        loop = asyncio.get_running_loop()
        home = self._home
        if home is not None and home is not loop:
            hop = asyncio.run_coroutine_threadsafe(self.call(tool, arguments, time_left), home)
            return await asyncio.wrap_future(hop)
        client = await self._ready_client(loop.time() + max(0.0, time_left))
        lost = self._lost
        self.in_flight += 1
        try:
            result = await client.call_tool(tool, arguments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._is_connection_loss(exc) or (lost is not None and lost.is_set()):
                self._connection_lost(lost, f"a call saw the connection close ({_reason(exc)})")
                raise ToolError(
                    f"the MCP server {self.name!r} went away during the call ({_reason(exc)}); "
                    "it is being restarted -- the call may or may not have taken effect"
                ) from None
            raise ToolError(
                f"the MCP server {self.name!r} refused the call: {_reason(exc)}"
            ) from None
        finally:
            self.in_flight -= 1
            self._trim_stderr()
        return result

    def _is_connection_loss(self, exc: BaseException) -> bool:
        mcp = sdk()
        error = getattr(exc, "error", None)
        code = getattr(error, "code", None)
        if isinstance(exc, mcp.MCPError) and code == mcp.types.CONNECTION_CLOSED:
            return True
        try:
            import anyio
        except ImportError:  # pragma: no cover - anyio comes with the SDK
            return False
        closed = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream)
        return isinstance(exc, (*closed, ConnectionError))

    def _connection_lost(self, lost: asyncio.Event | None, reason: str) -> None:
        if lost is not None and not lost.is_set():
            self.error = reason
            lost.set()

    # -- the supervisor task ----------------------------------------------------------

    async def _supervise(self) -> None:
        config = self.config
        while not self._closing:
            lost = self._lost = asyncio.Event()
            reached_ready = False
            reason = "the connection ended"
            try:
                async with contextlib.AsyncExitStack() as stack:
                    async with asyncio.timeout(config.startup_timeout):
                        client = await self._connect(stack, lost)
                        listed = await self._list_tools(client)
                    self._client = client
                    self.tools = listed
                    self.starts += 1
                    reached_ready = True
                    self._set_state("ready")
                    log.info("mcp_server_ready", tools=len(listed), **describe(config))
                    while not lost.is_set():
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(STDERR_CHECK_S):
                                await lost.wait()
                        self._trim_stderr()  # a chatty idle server fills no disk
                    reason = self.error or reason
            except asyncio.CancelledError:
                if self._closing:
                    raise
                reason = self.error or "its transport was cancelled"
            except TimeoutError:
                reason = (
                    f"it did not answer within {config.startup_timeout:g}s"
                    if not reached_ready
                    else "it stopped answering"
                )
            except BaseException as exc:  # the SDK raises groups; any failure is this server's
                if isinstance(exc, KeyboardInterrupt | SystemExit):
                    raise
                command = config.command if isinstance(config, MCPServerStdio) else None
                reason = self.error if reached_ready and self.error else _reason(exc, command)
            finally:
                self._client = None
            if self._closing:
                break
            self.error = reason + self._stderr_tail()
            if not reached_ready and self.starts == 0:
                self._set_state("failed")  # a first start that fails: not retried
                log.warning("mcp_server_start_failed", error=self.error, **describe(config))
                return
            if not self._may_restart():
                self._set_state("failed")
                text = (
                    f"MCP server {self.name!r} stopped ({self.error}) and was restarted "
                    f"{config.max_restarts} times within {config.restart_window:g}s; it stays "
                    "down and its tools fail until a new session names it"
                )
                log.error("mcp_server_gave_up", error=self.error, **describe(config))
                self._alert(AlertLevel.ERROR, text)
                return
            delay = self._backoff()
            self._set_state("restarting")
            log.warning(
                "mcp_server_restarting", error=self.error, delay_s=delay, **describe(config)
            )
            self._alert(
                AlertLevel.WARN,
                f"MCP server {self.name!r} stopped ({self.error}); restarting it in {delay:.1f}s",
            )
            await asyncio.sleep(delay)

    def _may_restart(self) -> bool:
        now = time.monotonic()
        window = self.config.restart_window
        while self._restarts and now - self._restarts[0] > window:
            self._restarts.popleft()
        if len(self._restarts) >= self.config.max_restarts:
            return False
        self._restarts.append(now)
        return True

    def _backoff(self) -> float:
        attempt = len(self._restarts)
        base = min(BACKOFF_MAX, BACKOFF_INITIAL * (2 ** max(0, attempt - 1)))
        return float(base * random.uniform(0.8, 1.2))

    async def _connect(self, stack: contextlib.AsyncExitStack, lost: asyncio.Event) -> Any:
        mcp = sdk()
        config = self.config

        def on_eof() -> None:
            self._connection_lost(lost, "the server's output ended (did it exit?)")

        if isinstance(config, MCPServerStdio):
            params = mcp.StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) if config.env else None,
                cwd=config.cwd,
                encoding_error_handler="replace",
            )
            errlog = stack.enter_context(self._stderr_file())
            # The SDK's transport with the server's output lines bounded (stdio.py).
            transport: Any = bounded_stdio_client(params, errlog, config.max_line)
        elif isinstance(config, MCPServerHTTP):
            from mcp.client.streamable_http import streamable_http_client

            from fore.actors.tools.mcp.http_bounds import bounded_http_client

            # The SDK's client settings over a transport that bounds each answer
            # (http_bounds.py); the SDK bounds each event of a stream itself.
            http_client = bounded_http_client(
                dict(config.headers) if config.headers else None, config.max_message
            )
            stack.push_async_callback(http_client.aclose)
            transport = streamable_http_client(
                config.url, http_client=http_client, max_sse_event_size=config.max_message
            )
        else:  # pragma: no cover - the config types are closed
            raise ToolError(f"unknown MCP server configuration {type(config).__name__}")
        client = mcp.Client(
            _WatchedTransport(transport, on_eof),
            cache=None,
            client_info=mcp.types.Implementation(name="fore", version="0.1"),
        )
        return await stack.enter_async_context(client)

    async def _list_tools(self, client: Any) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(tools) > 10 * self.config.max_tools:
                break
        return tools

    # -- the server's stderr ----------------------------------------------------------

    @contextlib.contextmanager
    def _stderr_file(self) -> Any:
        """A file the server's stderr is appended to (O_APPEND: it can be emptied under it)."""
        fd, path = tempfile.mkstemp(prefix="fore-mcp-", suffix=".stderr")
        os.close(fd)
        self._stderr_path = path
        handle = open(path, "a+", encoding="utf-8", errors="replace")  # noqa: SIM115
        try:
            yield handle
        finally:
            handle.close()

    def _trim_stderr(self) -> None:
        path = self._stderr_path
        if path is None:
            return
        try:
            if os.path.getsize(path) > STDERR_CAP:
                os.truncate(path, 0)
                self.stderr_trims += 1
        except OSError:
            pass

    def _stderr_tail(self) -> str:
        path = self._stderr_path
        if path is None:
            return ""
        try:
            with open(path, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - 4 * STDERR_TAIL))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if not lines:
            return ""
        tail = " | ".join(lines[-3:])
        if len(tail) > STDERR_TAIL:
            tail = "…" + tail[-STDERR_TAIL:]
        return f"; its stderr said: {tail}"

    # -- shutdown ---------------------------------------------------------------------

    async def close(self) -> None:
        """Stop the server (or close the connection); pending calls end with an error."""
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._client = None
        self._set_state("closed")
        if self._stderr_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._stderr_path)
            self._stderr_path = None

    def snapshot(self) -> dict[str, Any]:
        """State for tests and diagnostics (any thread)."""
        return {
            "name": self.name,
            "state": self.state,
            "starts": self.starts,
            "in_flight": self.in_flight,
            "error": self.error,
            "tools": [getattr(tool, "name", "?") for tool in self.tools],
        }


class _WatchedTransport:
    """A transport whose read stream reports its end (the server's process exited)."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self._inner.__aenter__()
        return _WatchedRead(read, self._on_eof), write

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)


class _WatchedRead:
    """Delegates to a read stream; calls ``on_eof`` when it ends or breaks."""

    def __init__(self, inner: Any, on_eof: Callable[[], None]) -> None:
        self._inner = inner
        self._on_eof = on_eof

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except Exception:
            self._on_eof()
            raise

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._inner.__anext__()
        except StopAsyncIteration:
            self._on_eof()
            raise
        except Exception:
            self._on_eof()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _WatchedRead:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._inner.__aexit__(*exc_info)


def _reason(exc: BaseException, command: str | None = None) -> str:
    """A one-line reason, looking inside exception groups for the real error."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    error = getattr(exc, "error", None)
    message = getattr(error, "message", None) if error is not None else None
    text = str(message or exc).strip().splitlines()
    first = text[0] if text else ""
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or command or first}"
    return f"{name}: {first}"[:300] if first else name


__all__ = ["MCPConnection", "sdk"]
