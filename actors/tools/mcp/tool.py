"""An MCP server's tool as a session tool, and how its results become tool results.

:class:`MCPTool` is an ``async`` :class:`~actors.tools.base.Tool`: the pool
runs it on the tool loop, where the server's connection lives. Its input
schema is the server's, passed through as the definition the model sees;
arguments are handed to the server as the model wrote them (the server
validates them, and its refusal is the error result the model sees).

:func:`render_result` maps a ``CallToolResult`` (pure, unit-tested): text
blocks are the output; structured content is the output when there is no
text (as JSON, so the blob store keeps it as JSON); images, audio and binary
resources become one-line placeholders (a coding model cannot use base64);
``isError`` makes an error result. Whatever the size, the result is then a
tool output like any other: over the inline threshold it goes to the blob
store and history keeps a summary.

**Speculation.** An MCP tool is a boundary (the gate does not know it), unless
its server is ``trusted`` and the tool's annotations say ``readOnlyHint: true``
and ``openWorldHint: false``: then it declares ``read_only`` and a
speculation may run it. Hints alone are never enough -- see
:mod:`actors.tools.mcp`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from fore.actors.tools.base import Tool, ToolContext, ToolError
from fore.actors.tools.mcp.config import TOOL_NAME_CHARS, MCPServer
from fore.messages.tools import ToolDefinition

if TYPE_CHECKING:
    from fore.actors.tools.mcp.connection import MCPConnection

MAX_RESULT_CHARS = 4 * 1024 * 1024
"""Characters of one result kept; beyond, it is cut with a note (the blob store keeps the rest)."""

MAX_DESCRIPTION_CHARS = 4096
MAX_SCHEMA_BYTES = 64 * 1024
"""A tool whose input schema is larger is not offered (it would flood every request)."""


class MCPArguments(BaseModel):
    """An MCP tool's arguments: any JSON object (the server's schema is the contract)."""

    model_config = ConfigDict(extra="allow")


class MCPTool(Tool[MCPArguments]):
    """One tool of one MCP server, as a session sees it (see module docs)."""

    args_model = MCPArguments

    def __init__(
        self,
        connection: MCPConnection,
        config: MCPServer,
        *,
        name: str,
        remote_name: str,
        description: str,
        input_schema: dict[str, Any],
        read_only: bool,
    ) -> None:
        self.name = name
        self.remote_name = remote_name
        self.description = description
        self.input_schema = input_schema
        self.read_only = read_only
        self.timeout = config.call_timeout
        self.server = config.display_name
        self._connection = connection
        self._definition = ToolDefinition(
            name=name, description=description, parameters=input_schema
        )

    def __repr__(self) -> str:
        return f"<MCPTool {self.name!r} ({self.server}: {self.remote_name})>"

    def definition(self) -> ToolDefinition:
        return self._definition

    async def execute(self, args: MCPArguments, ctx: ToolContext) -> Any:
        arguments = dict(args.model_extra or {})
        result = await self._connection.call(self.remote_name, arguments, ctx.time_left())
        return render_result(result, self.server)


def render_result(result: Any, server: str) -> Any:
    """A ``CallToolResult`` as a tool result: text, or JSON; ``ToolError`` for ``isError``."""
    texts: list[str] = []
    placeholders = 0
    for block in getattr(result, "content", None) or ():
        text, is_placeholder = _block_text(block)
        if text:
            texts.append(text)
            placeholders += is_placeholder
    structured = getattr(result, "structured_content", None)
    if getattr(result, "is_error", False):
        message = "\n".join(texts).strip() or (
            json.dumps(structured, ensure_ascii=False) if structured is not None else ""
        )
        raise ToolError(_cap(message) or f"the MCP server {server!r} reported an error")
    if structured is not None and placeholders == len(texts):
        # no text to show (at most placeholders): the structured value is the result
        if not texts:
            return structured
        texts.append(json.dumps(structured, ensure_ascii=False))
    if not texts:
        return "(no output)"
    return _cap("\n".join(texts))


def _block_text(block: Any) -> tuple[str, bool]:
    """One content block's text, and whether it is a placeholder for binary content."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", "")), False
    if kind in ("image", "audio"):
        mime = getattr(block, "mime_type", None) or "unknown type"
        size = _decoded_size(getattr(block, "data", ""))
        return f"[{kind}: {mime}, {size} bytes, not shown]", True
    if kind == "resource_link":
        uri = getattr(block, "uri", "")
        name = getattr(block, "name", "") or ""
        return f"[resource link: {uri}{f' ({name})' if name else ''}]", False
    if kind == "resource":
        resource = getattr(block, "resource", None)
        uri = getattr(resource, "uri", "")
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource: {uri}]\n{text}", False
        mime = getattr(resource, "mime_type", None) or "unknown type"
        size = _decoded_size(getattr(resource, "blob", ""))
        return f"[resource: {uri}, {mime}, {size} bytes, not shown]", True
    return f"[{kind or 'unknown'} content, not shown]", True


def _decoded_size(data: Any) -> int:
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _cap(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + f"\n… [cut: {len(text) - MAX_RESULT_CHARS} more characters]"


def session_tool_name(prefix: str, remote: str, taken: set[str]) -> str:
    """``prefix + remote`` as a valid, unique tool name (providers allow ``[A-Za-z0-9_-]{1,64}``).

    Other characters become ``_``; a name too long is cut and given a short
    hash of the original, so two long names stay apart; a name already taken
    gets ``_2``, ``_3``, ... .
    """
    name = TOOL_NAME_CHARS.sub("_", prefix + remote) or "tool"
    if len(name) > 64:
        digest = hashlib.sha1((prefix + remote).encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    candidate, number = name, 2
    while candidate in taken:
        suffix = f"_{number}"
        candidate = name[: 64 - len(suffix)] + suffix
        number += 1
    return candidate


def declares_read_only(config: MCPServer, annotations: Any) -> bool:
    """Whether a trusted server's tool says it only reads a closed world."""
    if not config.trusted or annotations is None:
        return False
    return (
        getattr(annotations, "read_only_hint", None) is True
        and getattr(annotations, "open_world_hint", None) is False
    )


def build_tools(
    connection: MCPConnection,
    config: MCPServer,
    listed: Iterable[Any],
    taken: set[str],
) -> tuple[list[MCPTool], list[str]]:
    """A session's tools from a server's listing, and why any were left out (one line each)."""
    tools: list[MCPTool] = []
    skipped: list[str] = []
    wanted = None if config.include_tools is None else set(config.include_tools)
    for remote in listed:
        remote_name = str(getattr(remote, "name", ""))
        if wanted is not None and remote_name not in wanted:
            continue
        if len(tools) >= config.max_tools:
            skipped.append(f"{remote_name}: more than max_tools={config.max_tools} tools")
            continue
        schema = _schema(getattr(remote, "input_schema", None))
        if schema is None:
            skipped.append(f"{remote_name}: its input schema is not a JSON object schema")
            continue
        if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
            skipped.append(f"{remote_name}: its input schema is over {MAX_SCHEMA_BYTES} bytes")
            continue
        name = session_tool_name(config.prefix, remote_name, taken)
        taken.add(name)
        description = str(
            getattr(remote, "description", None) or getattr(remote, "title", "") or ""
        )
        if len(description) > MAX_DESCRIPTION_CHARS:
            description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
        tools.append(
            MCPTool(
                connection,
                config,
                name=name,
                remote_name=remote_name,
                description=description or f"{remote_name} (MCP server {config.display_name})",
                input_schema=schema,
                read_only=declares_read_only(config, getattr(remote, "annotations", None)),
            )
        )
    return tools, skipped


def _schema(value: Any) -> dict[str, Any] | None:
    """A JSON-serialisable object schema (``type: object`` added when missing), or None."""
    if not isinstance(value, Mapping):
        return None
    try:
        schema: dict[str, Any] = json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return None
    if schema.get("type", "object") != "object":
        return None
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


__all__ = [
    "MCPArguments",
    "MCPTool",
    "build_tools",
    "declares_read_only",
    "render_result",
    "session_tool_name",
]
