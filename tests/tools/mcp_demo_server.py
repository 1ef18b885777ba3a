"""A real MCP server for the tests, written with the SDK's high-level server.

``MCPServer`` is what the SDK called ``FastMCP`` before 2.0. Run as
``python tests/tools/mcp_demo_server.py`` (stdio) or with ``--http PORT``
(streamable HTTP on 127.0.0.1). ``--fail`` exits at once with a message on
stderr (a server that will not start).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import threading
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel

server = MCPServer("demo")

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
def fetch_weather(city: str) -> str:
    """Read-only, but it reaches the outside world."""
    return f"sunny in {city}"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def slow(seconds: float, marker: str = "") -> str:
    """Sleep, then answer; ``marker`` is a file created when the call has arrived."""
    if marker:
        with open(marker, "w") as handle:
            handle.write(str(os.getpid()))
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


class Point(BaseModel):
    x: int
    y: int


@server.tool()
def point(x: int, y: int) -> Point:
    """A structured result."""
    return Point(x=x, y=y)


@server.tool()
def fail(message: str) -> str:
    """Always fails."""
    raise ValueError(message)


@server.tool(structured_output=False)
def picture() -> list[TextContent | ImageContent]:
    """Text and an image."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 100).decode()
    return [
        TextContent(type="text", text="a picture:"),
        ImageContent(type="image", data=png, mime_type="image/png"),
    ]


@server.tool()
def big(lines: int) -> str:
    """Many lines of text."""
    return "\n".join(f"line {i} of the big result" for i in range(lines))


@server.tool()
def chatter(chunks: int) -> str:
    """Write to stderr in the background, after answering (a chatty server)."""

    def write() -> None:
        for _ in range(chunks):
            sys.stderr.write("x" * 1000 + "\n")
            sys.stderr.flush()
            time.sleep(0.01)

    threading.Thread(target=write, daemon=True).start()
    return "chattering"


@server.tool(annotations=READ_ONLY)
def pid() -> int:
    """The server's process id."""
    return os.getpid()


def main() -> None:
    if "--fail" in sys.argv:
        print("demo server: refusing to start (--fail)", file=sys.stderr)
        sys.exit(3)
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.settings.log_level = "WARNING"
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run()


if __name__ == "__main__":
    main()
