"""The runtime's MCP connections, shared by every session that names a server.

``open_session(mcp_servers=[...])`` asks :meth:`MCPManager.session_tools`,
on the caller's thread (never a dispatcher thread): each server's connection
is looked up by its connection key -- started the first time, reused after
that -- all of them are waited for in parallel (each bounded by its
``startup_timeout``), and the session gets the tools of those that are up.
A server that is not is one line in the returned failures, which the
runtime raises as one alert for the session; the session opens without its
tools. The manager closes every connection when the tool loop closes
(``Runtime.close()``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from fore.actors.tools.aio import ToolLoop, ToolLoopClosed
from fore.actors.tools.base import Tool
from fore.actors.tools.mcp.config import MCPServer
from fore.actors.tools.mcp.connection import MCPConnection
from fore.actors.tools.mcp.tool import build_tools
from fore.messages.alerts import AlertLevel

Alert = Callable[[AlertLevel, str], None]


class MCPManager:
    """Connections by key, on one :class:`~actors.tools.aio.ToolLoop` (see module docs)."""

    def __init__(self, loop: ToolLoop, *, alert: Alert | None = None) -> None:
        self._loop = loop
        self._alert: Alert = alert or (lambda _level, _text: None)
        self._lock = threading.Lock()
        self._connections: dict[tuple[Any, ...], MCPConnection] = {}
        self._closed = False
        loop.on_close(self.close)

    def connection(self, config: MCPServer) -> MCPConnection:
        """The connection for ``config``'s key (created, not started, the first time)."""
        key = config.connection_key()
        with self._lock:
            if self._closed:
                raise ToolLoopClosed("the runtime's MCP connections are closed")
            found = self._connections.get(key)
            if found is None:
                found = self._connections[key] = MCPConnection(config, alert=self._alert)
            return found

    def session_tools(
        self, servers: Iterable[MCPServer], *, taken: Iterable[str] = ()
    ) -> tuple[list[Tool[Any]], list[str]]:
        """Start or reuse each server; its tools for a session, and one line per failure.

        ``taken`` are the session's other tool names (an MCP tool's name is
        made unique against them). Blocks the calling thread up to the
        longest ``startup_timeout`` of the servers (plus a little).
        """
        configs = list(servers)
        for config in configs:
            if not isinstance(config, MCPServer):
                raise TypeError(
                    "mcp_servers takes MCPServerStdio / MCPServerHTTP configurations, "
                    f"not {config!r}"
                )
        if not configs:
            return [], []
        pending: list[tuple[MCPServer, MCPConnection, concurrent.futures.Future[None]]] = []
        failures: list[str] = []
        for config in configs:
            try:
                connection = self.connection(config)
                future = self._loop.run_coroutine(connection.ensure_started())
            except ToolLoopClosed as exc:
                failures.append(f"MCP server {config.display_name!r} was not started: {exc}")
                continue
            pending.append((config, connection, future))
        deadline = time.monotonic() + max(c.startup_timeout for c in configs) + 10.0
        names = set(taken)
        tools: list[Tool[Any]] = []
        for config, connection, future in pending:
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                pass  # reported below by its state
            except Exception as exc:  # the start itself failed unexpectedly
                connection.error = connection.error or f"{type(exc).__name__}: {exc}"
            name = config.display_name
            if connection.state != "ready":
                why = connection.error or f"it is {connection.state}"
                failures.append(
                    f"MCP server {name!r} did not start: {why}; the session opened without "
                    "its tools"
                )
                continue
            built, skipped = build_tools(connection, config, list(connection.tools), names)
            tools.extend(built)
            if skipped:
                failures.append(
                    f"MCP server {name!r}: {len(skipped)} of its tools were left out ("
                    + "; ".join(skipped[:5])
                    + (" …" if len(skipped) > 5 else "")
                    + ")"
                )
        return tools, failures

    def snapshot(self) -> list[dict[str, Any]]:
        """Every connection's state (tests, diagnostics)."""
        with self._lock:
            connections = list(self._connections.values())
        return [connection.snapshot() for connection in connections]

    def find(self, name: str) -> MCPConnection | None:
        """A connection by its server's display name (tests, diagnostics)."""
        with self._lock:
            for connection in self._connections.values():
                if connection.name == name:
                    return connection
        return None

    async def close(self) -> None:
        """Close every connection (stops their servers); runs on the tool loop."""
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
        if connections:
            await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


__all__ = ["MCPManager"]
