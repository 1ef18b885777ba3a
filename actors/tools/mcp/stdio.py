"""The stdio transport with a bound on the server's output lines.

The SDK's ``stdio_client`` reads the server's stdout one JSON-RPC message per
line and keeps reading until the newline comes: a server that writes a huge
line -- or endless output without a newline -- grows the client's memory
without limit. This is the SDK's transport with one change, the bound: a line
longer than ``max_line`` characters ends the connection (the server is
stopped, in-flight calls get the connection-lost error, and the supervisor
restarts it with backoff, as after a crash); the reason is written to the
server's stderr file, whose tail the failure alert quotes.

Everything else -- spawning in its own process group, the line parser, the
bounded flush and the process-tree shutdown -- is the SDK's own code, reused
(private helpers of ``mcp.client.stdio``, pinned by the ``mcp<3`` extra). If
a later SDK moves them, :func:`bounded_stdio_client` falls back to the SDK's
unbounded ``stdio_client`` and logs that once.

Streamable HTTP is bounded in http_bounds.py (a transport under the SDK's
HTTP client).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.lowlevel
from anyio.streams.text import TextReceiveStream

from fore.actors.core.logs import get_logger
from fore.actors.tools.mcp.config import DEFAULT_MAX_LINE

log = get_logger(__name__)

_warned = False


def over_limit_text(limit: int) -> str:
    return (
        f"fore: the MCP server wrote a line (one message) longer than {limit} characters; "
        "the connection was closed (MCPServerStdio(max_line=...) raises the bound)"
    )


def split_bounded(buffer: str, chunk: str, limit: int) -> tuple[list[str], str, bool]:
    """``(complete lines, the unfinished rest, over the limit)`` after reading ``chunk``.

    Pure (property-tested): the lines are exactly what splitting the whole
    stream at newlines gives, as long as no line (finished or not) is longer
    than ``limit``; once one is, it says so instead of keeping it.
    """
    lines = (buffer + chunk).split("\n")
    rest = lines.pop()
    over = len(rest) > limit or any(len(line) > limit for line in lines)
    return lines, rest, over


@asynccontextmanager
async def bounded_stdio_client(
    server: Any, errlog: TextIO, max_line: int = DEFAULT_MAX_LINE
) -> AsyncGenerator[Any, None]:
    """``mcp.client.stdio.stdio_client`` with output lines bounded (see module docs)."""
    global _warned
    try:
        from mcp.client import stdio as sdk
        from mcp.client.stdio import (
            _aclose_all,
            _create_platform_compatible_process,
            _drain_stdout,
            _get_executable_command,
            _parse_line,
            _stop_server_process,
            get_default_environment,
        )
        from mcp.shared.message import SessionMessage

        flush_timeout = float(sdk._WRITER_FLUSH_TIMEOUT)
    except (ImportError, AttributeError):  # pragma: no cover - a later SDK moved them
        from mcp.client.stdio import stdio_client

        if not _warned:
            _warned = True
            log.warning("mcp_stdio_unbounded", reason="the SDK's stdio internals moved")
        async with stdio_client(server, errlog=errlog) as streams:
            yield streams
        return

    command = await _get_executable_command(server.command)
    process = await _create_platform_compatible_process(
        command=command,
        args=server.args,
        env=get_default_environment() | (server.env or {}),
        errlog=errlog,
        cwd=server.cwd,
    )
    # As in the SDK: no awaits until the task group is entered.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        assert process.stdout
        stdout = TextReceiveStream(
            process.stdout, encoding=server.encoding, errors=server.encoding_error_handler
        )
        try:
            async with read_writer:
                try:
                    buffer = ""
                    async for chunk in stdout:
                        lines, buffer, over = split_bounded(buffer, chunk, max_line)
                        if over:
                            log.warning("mcp_line_too_long", limit=max_line)
                            try:
                                errlog.write(over_limit_text(max_line) + "\n")
                                errlog.flush()
                            except (OSError, ValueError):
                                pass
                            # End the read stream now (the drain below lasts while the
                            # server runs): the session sees the connection lost.
                            await read_writer.aclose()
                            return
                        for line in lines:
                            try:
                                await read_writer.send(_parse_line(line))
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                finally:
                    await _drain_stdout(process)
        except anyio.ClosedResourceError:
            pass
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                log.exception("mcp_stdout_failed")

    async def stdin_writer() -> None:
        assert process.stdin
        try:
            async with write_reader:
                async for session_message in write_reader:
                    text = session_message.message.model_dump_json(
                        by_alias=True, exclude_unset=True
                    )
                    data = (text + "\n").encode(
                        encoding=server.encoding, errors=server.encoding_error_handler
                    )
                    await process.stdin.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(flush_timeout) as flush_scope:
            await writer_done.wait()
        if flush_scope.cancelled_caught:
            await anyio.lowlevel.cancel_shielded_checkpoint()
        await _stop_server_process(process)
        await _aclose_all(read_stream, write_stream, read_writer, write_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):
                await shutdown()
            tg.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
