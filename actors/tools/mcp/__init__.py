"""MCP (Model Context Protocol) servers as session tools, through the official SDK.

::

    from fore.mcp import MCPServerStdio, MCPServerHTTP

    git = MCPServerStdio("mcp-server-git", ["--repository", "."])
    session = rt.open_session(workspace=".", model=model, mcp_servers=[git])

A server's tools appear in the session as ``<name>__<tool>`` (``tool_prefix``
changes that), with the server's own input schemas; their results are tool
results like any other (large ones go to the blob store). A server is started
once per runtime and shared by every session that names it, supervised
(restarted with backoff when it crashes; calls in flight get a clear error),
and stopped by ``Runtime.close()``. A server that will not start is one alert
for the session, which opens without its tools. The SDK is asyncio-based: it
runs on the tool layer's event loop (:mod:`actors.tools.aio`), never on a
dispatcher thread. Install the SDK with the ``mcp`` extra.

**Speculation.** An MCP tool is a boundary in a speculation: the speculation
stops before it and waits for the user, as for any tool the gate does not
know. A server may be marked ``trusted=True``; then those of its tools whose
annotations say ``readOnlyHint: true`` *and* ``openWorldHint: false`` may run
in a speculation. The hints alone are never trusted: they are claims the
server makes about itself, not something Fore can check (the MCP
specification says as much: clients must not decide on tool use from the
annotations of untrusted servers). A speculation runs before the user has
approved anything, so whatever it runs must be safe to run even if the
user then types something else -- one wrong ``readOnlyHint`` on a tool that
sends a message, moves money or deletes a branch would act on a prediction.
Marking a server trusted is the user saying "I vouch for this server's
hints"; ``openWorldHint: false`` is required too, because a read of the
outside world (a web page, a ticket system) can itself leak the prompt or
trigger effects elsewhere. Even a trusted read-only MCP tool is a boundary
once the speculation has written to its overlay: the server reads the real
files, which no longer match what the speculation sees.
"""

from fore.actors.tools.mcp.config import AnyMCPServer, MCPServer, MCPServerHTTP, MCPServerStdio

__all__ = ["AnyMCPServer", "MCPServer", "MCPServerHTTP", "MCPServerStdio"]
