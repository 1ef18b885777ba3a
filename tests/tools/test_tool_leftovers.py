"""Issue 23's leftovers: ``Session.add_tool`` takes functions, MCP stdio lines are bounded.

``add_tool`` accepts what ``open_session(tools=...)`` accepts -- a ``Tool``, a
plain function, an ``async def`` -- and refuses a function that cannot be a
tool at once, naming the parameter. The MCP stdio transport reads a server's
output lines up to ``MCPServerStdio.max_line``: the real demo server is made
to answer with a line past the bound; the call fails clearly, the server is
restarted, and the next call works.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.llm import FunctionModel
from fore.actors.tools.decorator import ToolDefinitionError
from fore.actors.tools.mcp.stdio import split_bounded
from fore.messages.conversation import ToolResult
from fore.messages.llm import LlmRequest
from fore.supervision import Runtime
from tests.tools.test_mcp_client import WAIT, Caller, ask, demo, wait_until

pytestmark = pytest.mark.runtime(close_timeout=60)


def test_add_tool_takes_plain_and_async_functions(runtime: Runtime) -> None:
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    async def whisper(text: str) -> str:
        """Lower-case the text."""
        await asyncio.sleep(0)
        return text.lower()

    def answer(request: LlmRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            outputs = [m.output for m in request.messages if isinstance(m, ToolResult)]
            return " ".join(outputs)
        return {
            "tool_calls": [
                {"name": "shout", "arguments": {"text": "Hi"}},
                {"name": "whisper", "arguments": {"text": "Hi"}},
            ]
        }

    with runtime.open_session(model=FunctionModel(answer)) as s:
        s.add_tool(shout)
        s.add_tool(whisper)
        turn = s.submit("go", timeout=WAIT)
    assert turn.items[-1].text == "HI hi"


class Opaque:
    """A type pydantic knows nothing about."""


def test_add_tool_refuses_a_function_that_cannot_be_a_tool(runtime: Runtime) -> None:
    def broken(thing: Opaque) -> str:
        return ""

    with runtime.open_session(model=FunctionModel(lambda r: "ok")) as s:
        with pytest.raises(ToolDefinitionError, match="thing"):
            s.add_tool(broken)
        with pytest.raises(TypeError, match="not a tool"):
            s.add_tool(42)  # type: ignore[arg-type]


@given(st.lists(st.text(alphabet="ab\n", max_size=40), max_size=20), st.integers(1, 12))
def test_split_bounded_is_splitting_until_a_line_is_too_long(chunks: list[str], limit: int) -> None:
    buffer, lines = "", []
    over = False
    for chunk in chunks:
        got, buffer, over = split_bounded(buffer, chunk, limit)
        if over:
            break
        lines.extend(got)
    whole = "".join(chunks).split("\n")
    if over:
        assert any(len(line) > limit for line in whole)
    else:
        assert [*lines, buffer] == whole  # exactly the stream's lines, none too long
        assert all(len(line) <= limit for line in whole)


def test_an_mcp_line_past_the_bound_closes_the_connection_and_it_restarts(
    runtime: Runtime,
) -> None:
    limit = 64 * 1024
    config = demo(name="bounded", max_line=limit)
    caller = Caller(
        [("bounded__echo", {"text": "x" * (limit + 10)})],
        [("bounded__echo", {"text": "small"})],
    )
    session = runtime.open_session(model=caller.model, mcp_servers=[config], call_timeout=120)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            lines = pool.submit(ask, session).result(timeout=WAIT)
        assert lines[0].startswith("bounded__echo:ERR the MCP server 'bounded' went away")
        connection = runtime.mcp.find("bounded")
        assert connection is not None
        wait_until(lambda: connection.state == "ready" and connection.starts == 2)
        assert ask(session) == ["bounded__echo:small"]
    finally:
        session.close()
