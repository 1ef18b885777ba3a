"""MCP (Model Context Protocol) servers as session tools -- see :mod:`fore.actors.tools.mcp`.

::

    from fore.mcp import MCPServerStdio, MCPServerHTTP

    git = MCPServerStdio("mcp-server-git", ["--repository", "."])
    session = rt.open_session(workspace=".", model=model, mcp_servers=[git])

Needs the ``mcp`` extra (``pip install 'fore-runtime[mcp]'``) when a server is
started; naming the configuration classes does not import the SDK.
"""

from __future__ import annotations

from fore.actors.tools.mcp import MCPServer, MCPServerHTTP, MCPServerStdio

__all__ = ["MCPServer", "MCPServerHTTP", "MCPServerStdio"]
