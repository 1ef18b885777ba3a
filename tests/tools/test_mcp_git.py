"""The published ``mcp-server-git`` over stdio: a real MCP server nobody here wrote (issue 23.3).

It runs against a temporary git repository. The model (a ``FunctionModel``)
calls ``git_status`` and ``git_log`` through a session; the server is then
frozen (SIGSTOP) so a call is certainly in flight, killed, and the
supervisor restarts it.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from fore.supervision import Runtime
from tests.tools.test_mcp_client import WAIT, Caller, ask, server_pids, wait_until

pytestmark = pytest.mark.runtime(close_timeout=60)

pytest.importorskip("mcp_server_git")


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=Test", "-c", "user.email=t@example.org", *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "README.md").write_text("hello\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "first commit")
    (root / "app.py").write_text("x = 1\n")
    git(root, "add", "app.py")
    git(root, "commit", "-q", "-m", "add the app")
    (root / "app.py").write_text("x = 2\n")  # an unstaged change for git_status
    return root


def git_server(repo: Path, **options: Any) -> Any:
    from fore.actors.tools.mcp import MCPServerStdio

    options.setdefault("startup_timeout", 60.0)
    return MCPServerStdio(
        sys.executable, ["-m", "mcp_server_git", "--repository", str(repo)], name="git", **options
    )


def test_its_tools_are_listed_with_their_schemas(fresh_runtime: Runtime, repo: Path) -> None:
    caller = Caller()
    session = fresh_runtime.open_session(model=caller.model, mcp_servers=[git_server(repo)])
    try:
        ask(session)
        sent = {d.name: d for d in caller.model.requests[-1].tools}
        assert {"git__git_status", "git__git_log", "git__git_diff", "git__git_commit"} <= set(sent)
        assert sent["git__git_status"].parameters["required"] == ["repo_path"]
        assert sent["git__git_status"].description == "Shows the working tree status"
    finally:
        session.close()


def test_git_status_and_git_log_through_a_session(fresh_runtime: Runtime, repo: Path) -> None:
    caller = Caller(
        [("git__git_status", {"repo_path": str(repo)}), ("git__git_log", {"repo_path": str(repo)})]
    )
    session = fresh_runtime.open_session(model=caller.model, mcp_servers=[git_server(repo)])
    try:
        status, log = ask(session)
        assert status.startswith("git__git_status:Repository status:")
        assert "modified:   app.py" in status
        assert log.startswith("git__git_log:Commit history:")
        assert log.index("Message: add the app") < log.index("Message: first commit")
        # outside the repository it was confined to: the server's own error, as a result
        caller.batches.append([("git__git_status", {"repo_path": "/"})])
        (outside,) = ask(session)
        assert outside.startswith("git__git_status:ERR ")
    finally:
        session.close()


def test_killing_it_mid_call_restarts_it(fresh_runtime: Runtime, repo: Path) -> None:
    marker = str(repo)
    caller = Caller(
        [("git__git_log", {"repo_path": str(repo)})],
        [("git__git_status", {"repo_path": str(repo)})],
    )
    session = fresh_runtime.open_session(
        model=caller.model, mcp_servers=[git_server(repo)], call_timeout=300
    )
    try:
        (pid,) = server_pids(marker)
        os.kill(pid, signal.SIGSTOP)  # frozen: the next call cannot be answered
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                pending = pool.submit(ask, session)
                connection = fresh_runtime.mcp.find("git")
                assert connection is not None
                wait_until(lambda: connection.in_flight == 1)  # the call is with the server
                os.kill(pid, signal.SIGKILL)
                (failed,) = pending.result(timeout=WAIT)
        finally:
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
        assert failed.startswith("git__git_log:ERR ")
        assert "the MCP server 'git' went away during the call" in failed
        wait_until(lambda: connection.state == "ready" and connection.starts == 2)
        (status,) = ask(session)
        assert status.startswith("git__git_status:Repository status:")
        (new_pid,) = server_pids(marker)
        assert new_pid != pid
    finally:
        session.close()


def test_a_trusted_git_server_offers_its_read_only_tools_as_such(
    fresh_runtime: Runtime, repo: Path
) -> None:
    session = fresh_runtime.open_session(
        model=Caller().model, mcp_servers=[git_server(repo, trusted=True)]
    )
    try:
        ask(session)
        tools = {t.name: t for t in fresh_runtime.mcp.find("git").tools}  # type: ignore[union-attr]
        assert tools["git_status"].annotations.read_only_hint is True
        registry = session_registry(fresh_runtime, session)
        assert registry["git__git_status"].read_only is True
        assert registry["git__git_log"].read_only is True
        assert registry["git__git_commit"].read_only is False
        assert registry["git__git_reset"].read_only is False
    finally:
        session.close()


def session_registry(runtime: Runtime, session: Any) -> dict[str, Any]:
    """The session's tools by name (read from a fresh listing, as open_session builds them)."""
    from fore.actors.tools.mcp.tool import build_tools

    connection = runtime.mcp.find("git")
    assert connection is not None
    tools, _ = build_tools(connection, connection.config, connection.tools, set())
    return {t.name: t for t in tools}


def test_results_are_json_serialisable_tool_outputs(fresh_runtime: Runtime, repo: Path) -> None:
    caller = Caller([("git__git_show", {"repo_path": str(repo), "revision": "HEAD"})])
    session = fresh_runtime.open_session(model=caller.model, mcp_servers=[git_server(repo)])
    try:
        (show,) = ask(session)
        assert "add the app" in show and "+x = 1" in show
        json.dumps(show)
    finally:
        session.close()
