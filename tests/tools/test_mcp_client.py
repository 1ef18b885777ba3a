"""MCP servers as session tools, against a real server written with the SDK (issue 23.3).

``tests/tools/mcp_demo_server.py`` is started for real: over stdio as a subprocess,
and over streamable HTTP on 127.0.0.1. Models are ``FunctionModel``s that
call the server's tools; a call "in flight" is known from a marker file the
server writes when the request has arrived, never from a sleep.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import fore.testing
from fore.actors.llm import FunctionModel
from fore.actors.tools.decorator import tool
from fore.actors.tools.mcp import MCPServerHTTP, MCPServerStdio
from fore.actors.tools.mcp.tool import (
    MAX_SCHEMA_BYTES,
    build_tools,
    render_result,
    session_tool_name,
)
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import ToolResult
from fore.messages.llm import LlmRequest
from fore.supervision import Runtime
from tests.processes import alive, descendants

pytestmark = pytest.mark.runtime(close_timeout=60)

WAIT = 60.0
DEMO = str(Path(__file__).with_name("mcp_demo_server.py"))


def demo(**options: Any) -> MCPServerStdio:
    options.setdefault("name", "demo")
    options.setdefault("startup_timeout", 60.0)
    extra = options.pop("extra_args", [])
    return MCPServerStdio(sys.executable, [DEMO, *extra], **options)


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


class Caller:
    """A FunctionModel that makes the calls of a queue, one batch per turn, and reports results."""

    def __init__(self, *batches: list[tuple[str, dict[str, Any]]]) -> None:
        self.batches = list(batches)
        self.seen_tools: list[set[str]] = []
        self.model = FunctionModel(self.decide, max_workers=4)

    def decide(self, request: LlmRequest) -> Any:
        self.seen_tools.append({d.name for d in request.tools})
        last = request.messages[-1]
        if last.kind == "user" and self.batches:
            batch = self.batches.pop(0)
            return {
                "text": "",
                "tool_calls": [{"name": name, "arguments": args} for name, args in batch],
            }
        results = []
        for item in reversed(request.messages):
            if not isinstance(item, ToolResult):
                break
            results.insert(0, f"{item.name}:{'ERR ' if item.is_error else ''}{item.output}")
        return json.dumps(results)


def ask(session: Any, prompt: str = "go") -> list[str]:
    """Each call's ``name:output`` (``name:ERR output`` for an error) of the session's turn."""
    turn = session.submit(prompt, timeout=WAIT)
    assert turn.status == "completed", turn
    answer: list[str] = json.loads(str(turn.items[-1].text))
    return answer


def alerts_of(session: Any, count: int) -> list[str]:
    """The session's MCP alerts, once ``count`` of them have arrived (they are told, not asked)."""
    wait_until(lambda: len([a for a in session.alerts if a.source == "mcp"]) >= count)
    return sorted(a.text for a in session.alerts if a.source == "mcp")


def server_pids(marker: str) -> list[int]:
    """Live processes of this test run whose command line contains ``marker``."""
    return [process.pid for process in descendants(marker)]


# -- tools, schemas, results -----------------------------------------------------------------------


def test_a_servers_tools_are_session_tools_with_their_schemas(runtime: Runtime) -> None:
    caller = Caller(
        [
            ("demo__echo", {"text": "hello"}),
            ("demo__add", {"a": 2, "b": 40}),
            ("demo__point", {"x": 1, "y": 2}),
            ("demo__picture", {}),
            ("demo__fail", {"message": "nope"}),
            ("demo__add", {"a": "two"}),
        ]
    )

    @tool
    def local(x: int) -> int:
        return x

    session = runtime.open_session(model=caller.model, tools=[local], mcp_servers=[demo()])
    try:
        echo, add, point, picture, fail, bad_add = ask(session)
        assert echo == "demo__echo:hello"
        assert add == "demo__add:42"
        assert json.loads(point.removeprefix("demo__point:")) == {"x": 1, "y": 2}
        assert picture == "demo__picture:a picture:\n[image: image/png, 108 bytes, not shown]"
        assert fail == "demo__fail:ERR Error executing tool fail"
        assert bad_add.startswith("demo__add:ERR ") and "validation error" in bad_add
        assert {
            "local",
            "demo__echo",
            "demo__add",
            "demo__slow",
            "demo__point",
            "demo__fail",
            "demo__picture",
            "demo__big",
            "demo__pid",
            "demo__fetch_weather",
        } <= caller.seen_tools[0]
    finally:
        session.close()


def test_input_schemas_are_passed_through(runtime: Runtime) -> None:
    caller = Caller()
    session = runtime.open_session(model=caller.model, mcp_servers=[demo()])
    try:
        ask(session)
        request = caller.model.requests[-1]
        sent = {d.name: d for d in request.tools}
        schema = sent["demo__add"].parameters
        assert schema["type"] == "object"
        assert schema["required"] == ["a", "b"]
        assert schema["properties"] == {  # the server's own schema, as it listed it
            "a": {"title": "A", "type": "integer"},
            "b": {"title": "B", "type": "integer"},
        }
        assert sent["demo__echo"].description == "Echo the text back."
    finally:
        session.close()


def test_a_large_result_goes_to_the_blob_store(runtime: Runtime) -> None:
    caller = Caller([("demo__big", {"lines": 3000})])
    session = runtime.open_session(model=caller.model, mcp_servers=[demo()])
    try:
        ask(session)
        (result,) = [item for item in session.history if isinstance(item, ToolResult)]
        assert result.output.startswith("[blob:")
        assert "3000 lines" in result.output
        assert len(result.output) < 2000
    finally:
        session.close()


def test_sessions_naming_a_server_share_one_process(runtime: Runtime) -> None:
    first = Caller([("demo__pid", {})])
    second = Caller([("srv_pid", {})])
    config = demo(extra_args=["--shared-marker"])
    one = runtime.open_session(model=first.model, mcp_servers=[config])
    # the same connection seen through another name, prefix and filter
    two = runtime.open_session(
        model=second.model,
        mcp_servers=[config.model_copy(update={"tool_prefix": "srv_", "include_tools": ("pid",)})],
    )
    try:
        pid_one = ask(one)[0].split(":")[1]
        pid_two = ask(two)[0].split(":")[1]
        assert pid_one == pid_two
        assert server_pids("--shared-marker") == [int(pid_one)]
        assert second.seen_tools[0] - {"inspect"} == {"srv_pid"}  # the included tool, prefixed
    finally:
        one.close()
        two.close()


def test_a_call_from_another_loop_runs_on_the_connections_loop(runtime: Runtime) -> None:
    from fore.actors.tools.aio import ToolLoop

    session = runtime.open_session(model=Caller().model, mcp_servers=[demo()])
    other = ToolLoop(name="another-loop")
    try:
        connection = runtime.mcp.find("demo")
        assert connection is not None
        result = other.run_coroutine(connection.call("echo", {"text": "hop"}, WAIT))
        assert render_result(result.result(WAIT), "demo") == "hop"
    finally:
        other.close()
        session.close()


# -- over streamable HTTP --------------------------------------------------------------------------


def test_a_server_over_streamable_http(runtime: Runtime, http_server: str) -> None:
    caller = Caller([("web__echo", {"text": "over http"}), ("web__add", {"a": 1, "b": 2})])
    session = runtime.open_session(
        model=caller.model, mcp_servers=[MCPServerHTTP(http_server, name="web")]
    )
    try:
        assert ask(session) == ["web__echo:over http", "web__add:3"]
    finally:
        session.close()


def test_http_headers_are_sent(runtime: Runtime, http_server: str) -> None:
    caller = Caller([("hdr__echo", {"text": "with headers"})])
    config = MCPServerHTTP(http_server, name="hdr", headers={"X-Fore-Test": "1"})
    session = runtime.open_session(model=caller.model, mcp_servers=[config])
    try:
        assert ask(session) == ["hdr__echo:with headers"]
    finally:
        session.close()


def test_an_http_server_that_is_not_there_is_one_alert(runtime: Runtime, refused_port: int) -> None:
    port = refused_port
    caller = Caller()
    session = runtime.open_session(
        model=caller.model,
        mcp_servers=[
            MCPServerHTTP(f"http://127.0.0.1:{port}/mcp", name="gone", startup_timeout=10)
        ],
    )
    try:
        (alert,) = alerts_of(session, 1)
        assert alert.startswith("MCP server 'gone' did not start: ")
        assert alert.endswith("the session opened without its tools")
        assert [a.level for a in session.alerts if a.source == "mcp"] == [AlertLevel.ERROR]
    finally:
        session.close()


# -- a server that will not start ------------------------------------------------------------------


def test_a_server_that_will_not_start_is_one_alert_and_the_session_opens(runtime: Runtime) -> None:
    caller = Caller([("demo__echo", {"text": "still here"})])
    broken = demo(name="broken", extra_args=["--fail"])
    missing = MCPServerStdio("no-such-mcp-server-command", name="missing")
    session = runtime.open_session(model=caller.model, mcp_servers=[broken, missing, demo()])
    try:
        assert ask(session) == ["demo__echo:still here"]
        alerts = alerts_of(session, 2)
        assert len(alerts) == 2
        assert alerts[0].startswith("MCP server 'broken' did not start: ")
        assert "refusing to start (--fail)" in alerts[0]  # the tail of its stderr
        assert alerts[1].startswith(
            "MCP server 'missing' did not start: command not found: no-such-mcp-server-command"
        )
        assert not any(name.startswith(("broken__", "missing__")) for name in caller.seen_tools[0])
    finally:
        session.close()


def test_a_server_that_never_answers_is_given_up_at_its_startup_timeout(runtime: Runtime) -> None:
    mute = MCPServerStdio(
        sys.executable,
        ["-c", "import time; time.sleep(600)", "--mute-marker"],
        name="mute",
        startup_timeout=2,
    )
    session = runtime.open_session(model=Caller().model, mcp_servers=[mute])
    try:
        (alert,) = alerts_of(session, 1)
        assert alert.startswith("MCP server 'mute' did not start: it did not answer within 2s")
        wait_until(lambda: server_pids("--mute-marker") == [])  # and its process is gone
    finally:
        session.close()


def test_configurations_are_checked_at_construction() -> None:
    with pytest.raises(ValidationError, match="args is a list of arguments"):
        MCPServerStdio("server", "--flag")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="http:// or https://"):
        MCPServerHTTP("ftp://example.org/mcp")
    with pytest.raises(ValidationError, match="greater than 0"):
        MCPServerStdio("server", startup_timeout=0)
    from fore.actors.tools.aio import ToolLoop
    from fore.actors.tools.mcp.manager import MCPManager

    loop = ToolLoop()
    try:
        with pytest.raises(TypeError, match="mcp_servers takes MCPServerStdio / MCPServerHTTP"):
            MCPManager(loop).session_tools(["mcp-server-git"])  # type: ignore[list-item]
    finally:
        loop.close()


# -- supervision: crashes, restarts, deadlines, shutdown -------------------------------------------


def test_killing_the_server_mid_call_errors_the_call_and_restarts_it(
    runtime: Runtime, tmp_path: Path
) -> None:
    marker = tmp_path / "arrived"
    config = demo(name="victim", extra_args=["--victim-marker"])
    caller = Caller(
        [("victim__slow", {"seconds": 600, "marker": str(marker)})],
        [("victim__pid", {})],
    )
    session = runtime.open_session(model=caller.model, mcp_servers=[config], call_timeout=300)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(ask, session)
            wait_until(marker.exists)  # the call is at the server
            old_pid = int(marker.read_text())
            os.kill(old_pid, signal.SIGKILL)
            lines = pending.result(timeout=WAIT)
        assert lines[0].startswith(
            "victim__slow:ERR the MCP server 'victim' went away during the call"
        )
        connection = runtime.mcp.find("victim")
        assert connection is not None
        wait_until(lambda: connection.state == "ready" and connection.starts == 2)
        new_pid = int(ask(session)[0].split(":")[1])
        assert new_pid != old_pid
        assert server_pids("--victim-marker") == [new_pid]
        wait_until(
            lambda: any(
                "victim" in a.text and "restarting it" in a.text
                for a in runtime.alert_state.history(None)
            )
        )
    finally:
        session.close()


def test_a_hung_server_hits_the_calls_deadline(runtime: Runtime, tmp_path: Path) -> None:
    marker = tmp_path / "arrived"
    caller = Caller(
        [("hung__slow", {"seconds": 600, "marker": str(marker)})],
        [("hung__echo", {"text": "still serving"})],
    )
    # 5 s: long enough for a loaded machine's round trip of the call that answers
    config = demo(name="hung", call_timeout=5.0, extra_args=["--hung-marker"])
    session = runtime.open_session(model=caller.model, mcp_servers=[config], call_timeout=300)
    try:
        assert ask(session) == ["hung__slow:ERR hung__slow timed out after 5s"]
        wait_until(marker.exists)  # the call did reach the server
        assert ask(session) == ["hung__echo:still serving"]  # the connection survived
        connection = runtime.mcp.find("hung")
        assert connection is not None and connection.starts == 1
    finally:
        session.close()


def test_a_server_that_keeps_crashing_stays_down(runtime: Runtime, tmp_path: Path) -> None:
    config = demo(name="fragile", max_restarts=1, extra_args=["--fragile-marker"])
    caller = Caller([("fragile__pid", {})], [("fragile__pid", {})])
    session = runtime.open_session(model=caller.model, mcp_servers=[config])
    try:
        connection = runtime.mcp.find("fragile")
        assert connection is not None
        for starts in (1, 2):
            wait_until(lambda s=starts: connection.state == "ready" and connection.starts == s)
            (pid,) = server_pids("--fragile-marker")
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: connection.state == "failed")
        lines = ask(session)
        assert lines[0].startswith("fragile__pid:ERR the MCP server 'fragile' is not running")
        wait_until(
            lambda: any(
                a.level is AlertLevel.ERROR and "'fragile'" in a.text and "stays down" in a.text
                for a in runtime.alert_state.history(None)
            )
        )
    finally:
        session.close()
    # a session opened later tries it again
    again = runtime.open_session(model=Caller([("fragile__pid", {})]).model, mcp_servers=[config])
    try:
        (answer,) = ask(again)
        assert answer.startswith("fragile__pid:") and "ERR" not in answer
    finally:
        again.close()


def test_closing_the_runtime_stops_its_servers() -> None:
    rt = Runtime(name="mcp-close", blobs=False)
    try:
        session = rt.open_session(
            model=Caller().model, mcp_servers=[demo(extra_args=["--close-marker"])]
        )
        (pid,) = server_pids("--close-marker")
        session.close()
        assert server_pids("--close-marker") == [pid]  # shared by the runtime, not the session
    finally:
        assert rt.close(timeout=60)
    assert not alive(pid)
    assert not any(t.name == "mcp-close-tool-aio" for t in threading.enumerate())


def test_a_chatty_servers_stderr_is_kept_small(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fore.actors.tools.mcp import connection as connection_module

    monkeypatch.setattr(connection_module, "STDERR_CAP", 20_000)
    monkeypatch.setattr(connection_module, "STDERR_CHECK_S", 0.05)
    config = demo(name="chatty", extra_args=["--chatty-marker"])
    session = runtime.open_session(
        model=Caller([("chatty__chatter", {"chunks": 500})]).model, mcp_servers=[config]
    )
    try:
        assert ask(session) == ["chatty__chatter:chattering"]
        connection = runtime.mcp.find("chatty")
        assert connection is not None
        # the server keeps writing while idle: the supervisor empties the file as it grows
        wait_until(lambda: connection.stderr_trims >= 2)
    finally:
        session.close()


# -- speculation: trusted read-only tools ----------------------------------------------------------


def speculation_of(rt: Runtime, workspace: Path, config: MCPServerStdio, name: str) -> Any:
    from fore.actors.llm import ScriptedModel
    from tests.speculation.test_speculation import TWO_TURNS, settled, spec, speculated, suggestion

    script = [
        *TWO_TURNS,
        suggestion("ask the server"),
        speculated(
            "", {"name": name, "arguments": {"text": "x"} if "echo" in name else {"city": "Oslo"}}
        ),
        speculated("Done."),
    ]
    with rt.open_session(
        workspace=workspace, model=ScriptedModel(script), speculation=spec(), mcp_servers=[config]
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        settled(s)
        return s.speculation


def test_a_trusted_servers_read_only_closed_world_tool_runs_in_a_speculation(
    runtime: Runtime, tmp_path: Path
) -> None:
    trusted = demo(name="tdemo", trusted=True)
    status = speculation_of(runtime, tmp_path, trusted, "tdemo__echo")
    assert status.state == "completed", status


def test_hints_alone_do_not_let_a_tool_run_in_a_speculation(
    runtime: Runtime, tmp_path: Path
) -> None:
    untrusted = demo(name="udemo")
    status = speculation_of(runtime, tmp_path, untrusted, "udemo__echo")
    assert status.state == "boundary" and status.boundary_tool == "udemo__echo"
    trusted = demo(name="tdemo", trusted=True)
    status = speculation_of(runtime, tmp_path, trusted, "tdemo__fetch_weather")
    assert status.state == "boundary"  # read-only, but open-world


# -- pure parts: names, results, listings ----------------------------------------------------------


def test_session_tool_names_are_valid_and_unique() -> None:
    taken = {"git__status"}
    assert session_tool_name("git__", "status", taken) == "git__status_2"
    assert session_tool_name("git__", "log.all/v2", set()) == "git__log_all_v2"
    long = session_tool_name("server__", "x" * 100, set())
    assert len(long) == 64 and long.startswith("server__xxx")
    assert long != session_tool_name("server__", "x" * 99 + "y", set())


class Block:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class Result:
    def __init__(self, content: list[Any], structured: Any = None, is_error: bool = False) -> None:
        self.content = content
        self.structured_content = structured
        self.is_error = is_error


def test_results_map_to_text_json_placeholders_and_errors() -> None:
    from fore.actors.tools.base import ToolError

    text = Block(type="text", text="hello")
    image = Block(type="image", mime_type="image/png", data="AAAA")
    link = Block(type="resource_link", uri="file:///x", name="x")
    embedded = Block(type="resource", resource=Block(uri="mem://a", text="inside"))
    blob = Block(type="resource", resource=Block(uri="mem://b", mime_type="app/x", blob="AAAA"))
    assert render_result(Result([text]), "s") == "hello"
    assert render_result(Result([], {"a": 1}), "s") == {"a": 1}
    assert render_result(Result([text], {"a": 1}), "s") == "hello"
    assert render_result(Result([image], {"a": 1}), "s") == (
        '[image: image/png, 3 bytes, not shown]\n{"a": 1}'
    )
    assert render_result(Result([link, embedded, blob]), "s") == (
        "[resource link: file:///x (x)]\n[resource: mem://a]\ninside\n"
        "[resource: mem://b, app/x, 3 bytes, not shown]"
    )
    assert render_result(Result([]), "s") == "(no output)"
    with pytest.raises(ToolError, match=r"^it broke$"):
        render_result(Result([Block(type="text", text="it broke")], is_error=True), "s")
    with pytest.raises(ToolError, match="reported an error"):
        render_result(Result([], is_error=True), "s")


def test_a_hostile_listing_is_bounded() -> None:
    listed = [
        Block(name="ok", description="fine", input_schema={"type": "object"}, annotations=None),
        Block(
            name="huge",
            description="",
            input_schema={"type": "object", "x": "y" * MAX_SCHEMA_BYTES},
        ),
        Block(name="notobject", description="", input_schema={"type": "string"}),
        Block(name="bad", description="", input_schema="nope"),
        Block(name="long", description="d" * 100_000, input_schema={"type": "object"}),
    ]
    tools, skipped = build_tools(None, demo(max_tools=10), listed, set())  # type: ignore[arg-type]
    assert [t.name for t in tools] == ["demo__ok", "demo__long"]
    assert len(tools[1].description) == 4096
    assert len(skipped) == 3
    many = [Block(name=f"t{i}", input_schema={}) for i in range(5)]
    tools, skipped = build_tools(None, demo(max_tools=2), many, set())  # type: ignore[arg-type]
    assert len(tools) == 2 and len(skipped) == 3
