"""A speculation's shell commands run at background CPU priority; the user's do not.

Each test reads the niceness the kernel reports for the command itself
(``nice`` with no argument prints its own) and for a process the command
starts, under every process-tracking backend that works here -- so the
priority is shown to hold from the command's first instruction, for what it
forks, and without breaking what the backend promises (the exit status is
the command's own, the command runs inside its call's cgroup).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fore.actors.overlay import OverlayStore
from fore.actors.tools import ToolContext, ToolRegistry, WorkspaceFs, invoke_tool
from fore.actors.tools.builtin import Shell
from fore.actors.tools.builtin.shell import SPECULATION_NICE
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.fs import FsView
from fore.actors.tools.proctrack import MAX_NICE
from fore.actors.tools.proctrack import base as proctrack_base
from fore.actors.tools.proctrack.base import BASH, bash_argv
from fore.messages.conversation import ToolCall
from tests.tools.conftest import available_backend

# The command's own niceness, then that of a child it forks (a pipeline stage).
NICENESS = "nice; nice | cat"


def own_niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def expected(steps: int) -> int:
    return min(MAX_NICE, own_niceness() + steps)


@pytest.fixture(params=["cgroup", "subreaper", "group"])
def backend(request: pytest.FixtureRequest) -> str:
    return available_backend(str(request.param))


def run(fs: FsView, command: str, shell: Shell) -> str:
    ctx = ToolContext(
        fs=fs, cancel=CancelToken(), deadline=time.monotonic() + 60, session_id="s", call_id="c"
    )
    call = ToolCall(id="c", name="shell", arguments={"command": command})
    result = invoke_tool(ToolRegistry([shell]), call, ctx)
    assert result.outcome == "ok", result.output
    return str(result.output)


def niceness(output: str) -> list[int]:
    stdout = output.split("stdout:\n", 1)[1]
    return [int(line) for line in stdout.splitlines()]


def test_a_speculations_command_and_its_children_run_below_the_runtime(
    ws: Path, overlay_store: OverlayStore, backend: str
) -> None:
    overlay = overlay_store.create(ws)
    out = run(overlay, NICENESS, Shell(tracking=backend))  # type: ignore[arg-type]
    assert niceness(out) == [expected(SPECULATION_NICE)] * 2


def test_the_users_own_turn_runs_at_the_runtimes_priority(ws: Path, backend: str) -> None:
    out = run(WorkspaceFs(ws), NICENESS, Shell(tracking=backend))  # type: ignore[arg-type]
    assert niceness(out) == [own_niceness()] * 2


def test_the_step_is_configurable_and_zero_turns_it_off(
    ws: Path, overlay_store: OverlayStore
) -> None:
    overlay = overlay_store.create(ws)
    assert niceness(run(overlay, NICENESS, Shell(speculation_nice=3))) == [expected(3)] * 2
    assert niceness(run(overlay, NICENESS, Shell(speculation_nice=0))) == [own_niceness()] * 2


def test_a_niced_command_keeps_its_own_exit_status_and_output(
    ws: Path, overlay_store: OverlayStore, backend: str
) -> None:
    overlay = overlay_store.create(ws)
    shell = Shell(tracking=backend)  # type: ignore[arg-type]
    assert run(overlay, "echo out; echo err >&2; exit 7", shell) == (
        "exit code: 7\nstdout:\nout\nstderr:\nerr"
    )
    assert run(overlay, "kill -TERM $$", shell).startswith("exit code: -15")


def test_a_niced_command_still_runs_under_its_backends_tracking(
    ws: Path, overlay_store: OverlayStore, backend: str
) -> None:
    """``nice`` execs bash: the command keeps the pid its backend tracks -- the runtime's
    own child, in its call's cgroup (cgroup), or the per-call supervisor's (subreaper)."""
    overlay = overlay_store.create(ws)
    shell = Shell(tracking=backend)  # type: ignore[arg-type]
    out = run(overlay, "echo ppid=$PPID; cat /proc/self/cgroup 2>/dev/null || true", shell)
    parent = int(out.split("ppid=", 1)[1].split()[0])
    if backend == "subreaper":
        assert parent != os.getpid()  # its supervisor
    else:
        assert parent == os.getpid()
    if backend == "cgroup":
        assert f"/fore.{os.getpid()}." in out


@pytest.mark.parametrize("steps", [-1, MAX_NICE + 1])
def test_a_step_outside_nices_range_is_refused(steps: int) -> None:
    with pytest.raises(ValueError, match="within"):
        bash_argv("true", steps)
    with pytest.raises(ValueError, match="within"):
        Shell(speculation_nice=steps)


def test_without_a_nice_binary_the_command_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proctrack_base, "_nice_binary", lambda: None)
    assert bash_argv("true", SPECULATION_NICE) == [BASH, "-c", "true"]


def test_priority_zero_adds_no_process() -> None:
    assert bash_argv("true") == [BASH, "-c", "true"]
