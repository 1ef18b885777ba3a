"""A speculation's shell commands never read secrets or anything outside the workspace
(issue 19, points 1 and 2), end to end: the model asks, the gate stops the speculation
at a boundary before the command runs, and no request the model receives carries the
runtime's environment or the file outside.

The red team's reproductions: ``cat /proc/$PPID/environ`` and ``ps eww -p $PPID``
printed the runtime's ``OPENAI_API_KEY`` to an unapproved speculation; ``cat
../outside/secret``, an absolute path and a symlink leading out read a file the file
tools refuse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    WAIT,
    Replies,
    call,
    overlay_dirs,
    settled,
    spec,
    wait_until,
)

MAIN = ["Hello.", "x is 1. Shall I look around?"]
SUGGESTION = ['{"suggestion": "look at the files"}']
SECRET = "sk-test-0123456789abcdefSECRET"
OUTSIDE = "outside-file-content-SECRET"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text(OUTSIDE + "\n")
    work = tmp_path / "ws"
    work.mkdir()
    (work / "app.py").write_text("x = 1\n")
    (work / "leak").symlink_to(outside / "secret")
    (work / "out").symlink_to(outside)
    return work


COMMANDS = [
    "cat /proc/$PPID/environ",
    "tr '\\0' '\\n' < /proc/$PPID/environ",
    "cat /proc/self/environ",
    "ps eww -p $PPID",
    "ps auxe",
    "cat ../outside/secret",
    "cat {outside}/secret",
    "cat leak",
    "cat out/secret",
    "cat *",
    "grep -r SECRET ..",
    "bash -c 'cat ../outside/secret'",
]


@pytest.mark.parametrize("template", COMMANDS)
def test_a_speculation_never_runs_a_command_that_reads_secrets_or_leaves_the_workspace(
    runtime: Runtime, ws: Path, template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    command = template.replace("{outside}", str(ws.parent / "outside"))
    look = {"text": "", "tool_calls": [call("shell", command=command)]}
    with (
        Replies(main=MAIN, suggestion=SUGGESTION, speculation=[look, "Done."]) as r,
        runtime.open_session(workspace=ws, model=r.model, speculation=spec()) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        status = s.speculation
        assert status.boundary_tool == "shell"
        reason = status.boundary_reason or ""
        assert reason.strip() and "\n" not in reason
        assert "outside the workspace" in reason or "/proc" in reason or "ps" in reason
        # The command never ran: nothing the model was sent holds either secret.
        for request in r.requests:
            text = request.model_dump_json()
            assert SECRET not in text
            assert OUTSIDE not in text
        s.keystroke("no")
        wait_until(lambda: overlay_dirs(runtime) == [])


def test_a_read_inside_the_workspace_still_runs(runtime: Runtime, ws: Path) -> None:
    look = {"text": "", "tool_calls": [call("shell", command="cat app.py && ls")]}
    with (
        Replies(main=MAIN, suggestion=SUGGESTION, speculation=[look, "x is 1."]) as r,
        runtime.open_session(workspace=ws, model=r.model, speculation=spec()) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) != "boundary"
        followups = r.seen("speculation")
        assert any("x = 1" in request.model_dump_json() for request in followups[1:])
        s.keystroke("no")
        wait_until(lambda: overlay_dirs(runtime) == [])
