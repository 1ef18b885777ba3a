"""MCP server configurations: what to start or connect to, and how its tools appear.

Plain, frozen pydantic models (a bad value is refused at construction with
pydantic's message naming the field), importable without the MCP SDK
installed: only connecting needs it.

Two parts of a configuration play different roles:

* the **connection** (:meth:`MCPServer.connection_key`): the command line,
  environment and working directory of a stdio server, the URL and headers of
  an HTTP one. Sessions naming the same connection share one server process
  or connection, started once per runtime;
* the **view** a session gets: ``name`` and ``tool_prefix`` (tools appear as
  ``<name>__<tool>`` so two servers' ``search`` do not clash), the
  ``include_tools`` filter, ``trusted``, the call deadline. These may differ
  between sessions sharing one connection. The supervision settings
  (startup timeout, restart intensity) are the first session's.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_MAX_LINE = 32 * 1024 * 1024
"""The longest line (characters; one JSON-RPC message) read from a stdio server."""

TOOL_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")

_LAUNCHERS = frozenset(
    {"python", "python3", "uv", "uvx", "npx", "node", "bunx", "deno", "pipx", "docker", "env"}
)
"""Commands that run another program: the server's name comes from what they run."""


class MCPServer(BaseModel):
    """What every MCP server configuration has (see module docs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=40)
    """Shown in alerts and used for the tool prefix (default: derived from the command or URL)."""
    tool_prefix: str | None = Field(default=None, max_length=40)
    """Put before each tool's name (default ``"<name>__"``; ``""`` for none)."""
    include_tools: tuple[str, ...] | None = None
    """Only these of the server's tools (by the server's names); None: all of them."""
    trusted: bool = False
    """Take the server's ``readOnlyHint`` / ``openWorldHint`` at their word (speculation)."""
    startup_timeout: float = Field(default=30.0, gt=0, le=600)
    """Seconds to start (or connect) and list the tools, before the server counts as failed."""
    call_timeout: float | None = Field(default=None, gt=0, le=86_400)
    """Deadline of each call of its tools (None: the session's ``call_timeout``)."""
    max_restarts: int = Field(default=5, ge=0, le=1000)
    """Restarts allowed within ``restart_window`` seconds; one more and it stays down."""
    restart_window: float = Field(default=60.0, gt=0)
    max_tools: int = Field(default=256, ge=1, le=10_000)
    """At most this many of its tools are offered (a server listing thousands floods the prompt)."""

    def connection_key(self) -> tuple[Any, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def default_name(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def display_name(self) -> str:
        return self.name or self.default_name()

    @property
    def prefix(self) -> str:
        if self.tool_prefix is not None:
            return self.tool_prefix
        return f"{TOOL_NAME_CHARS.sub('_', self.display_name)}__"


class MCPServerStdio(MCPServer):
    """A server Fore starts as a subprocess and talks to over its stdin/stdout.

    ``MCPServerStdio("mcp-server-git", ["--repository", path])``. The process
    gets only a minimal environment (``PATH``, ``HOME``, ...) plus ``env``: the
    runtime's credentials are not passed on. Each line the server writes (one
    message) is read up to ``max_line`` characters (32 Mi by default).
    """

    kind: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    max_line: int = Field(default=DEFAULT_MAX_LINE, ge=1024)
    """The longest line (one JSON-RPC message, in characters) read from the server; a
    longer one closes the connection (it is restarted as after a crash). The SDK alone
    would read an endless line into memory (actors/tools/mcp/stdio.py)."""

    def __init__(self, command: str | None = None, args: Sequence[str] = (), **data: Any) -> None:
        if command is not None:
            data["command"] = command
        data.setdefault("args", args)
        super().__init__(**data)

    @field_validator("command", "cwd")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain a NUL byte")
        return value

    @field_validator("args", mode="before")
    @classmethod
    def _args_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError("args is a list of arguments, not one string")
        return value

    def connection_key(self) -> tuple[Any, ...]:
        env = tuple(sorted((self.env or {}).items()))
        return ("stdio", self.command, self.args, env, self.cwd, self.max_line)

    def default_name(self) -> str:
        words = [self.command, *self.args]
        program = os.path.basename(self.command)
        name = program
        if program.split(".")[0].rstrip("0123456789.") in _LAUNCHERS or program in _LAUNCHERS:
            rest = [word for word in words[1:] if not word.startswith("-")]
            if rest:
                name = os.path.basename(rest[0])
        name = re.sub(r"\.(py|js|mjs|ts)$", "", name)
        return TOOL_NAME_CHARS.sub("_", name)[:40] or "mcp"


class MCPServerHTTP(MCPServer):
    """A server Fore connects to over streamable HTTP, e.g. ``http://127.0.0.1:8000/mcp``.

    Each answer (a JSON response, or one event of a stream) is read up to
    ``max_message`` bytes after decoding (32 Mi by default).
    """

    kind: Literal["http"] = "http"
    url: str = Field(min_length=1)
    headers: dict[str, str] | None = None
    max_message: int = Field(default=DEFAULT_MAX_LINE, ge=1024)
    """The largest answer (one JSON-RPC message, in bytes after decoding) read from the
    server: a JSON response or one event of a stream. A larger one fails the call in
    flight; the connection stays up. The SDK alone reads a JSON response whole
    (actors/tools/mcp/http_bounds.py)."""

    def __init__(self, url: str | None = None, **data: Any) -> None:
        if url is not None:
            data["url"] = url
        super().__init__(**data)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value

    def connection_key(self) -> tuple[Any, ...]:
        headers = tuple(sorted((self.headers or {}).items()))
        return ("http", self.url, headers, self.max_message)

    def default_name(self) -> str:
        parts = urlsplit(self.url)
        path = posixpath.basename(parts.path.rstrip("/"))
        base = parts.hostname or "mcp"
        if parts.port:
            base += f"_{parts.port}"
        if path and path != "mcp":
            base += f"_{path}"
        return TOOL_NAME_CHARS.sub("_", base)[:40]


AnyMCPServer = MCPServerStdio | MCPServerHTTP


def describe(config: MCPServer) -> Mapping[str, Any]:
    """What a log line says about a server (never its headers or environment values)."""
    if isinstance(config, MCPServerStdio):
        return {"name": config.display_name, "command": config.command, "args": config.args}
    if isinstance(config, MCPServerHTTP):
        return {"name": config.display_name, "url": config.url}
    return {"name": config.display_name}  # pragma: no cover


__all__ = ["AnyMCPServer", "MCPServer", "MCPServerHTTP", "MCPServerStdio", "describe"]
