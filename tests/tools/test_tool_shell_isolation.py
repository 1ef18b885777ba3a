"""``shell``: children that leave the process group die with the call; secrets stay out.

Real bash, real ``setsid``, real ``/proc``. A child started with ``setsid``
leads a new session, so killing the call's process group misses it; the
tool's process tracking (``actors.tools.proctrack``, a cgroup per call here)
takes it anyway. Every process of a call also carries a marker in its
environment (what the last-resort sweep reads). Commands also run without
the runtime's credentials in their environment; the escape families that
shed the marker are in ``test_shell_process_tracking.py``, the scrub's rules
in ``test_shell_env_scrub.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest

import fore.testing
from fore.actors.tools import ToolContext, ToolRegistry, WorkspaceFs, invoke_tool
from fore.actors.tools.base import Invocation
from fore.actors.tools.builtin import Shell
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.envscrub import scrub_env, secret_name
from fore.actors.tools.proctrack import CALL_MARKER
from fore.actors.tools.proctrack.sweep import _new_pid, last_pid
from fore.messages.conversation import ToolCall

WAIT = 15.0

pytestmark = pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid(1)")


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie waiting for whoever reaps orphans here."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    # Whatever a failing run left behind must not outlive the test.
    for name in ("bg", "bg2"):
        path = tmp_path / name
        if path.exists() and path.read_text().strip():
            try:
                os.kill(int(path.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def context(root: Path) -> ToolContext:
    return ToolContext(
        fs=WorkspaceFs(root),
        cancel=CancelToken(),
        deadline=time.monotonic() + 60,
        session_id="s",
        call_id="c",
    )


def shell(ctx: ToolContext, command: str, tool: Shell | None = None, **extra: Any) -> Invocation:
    registry = ToolRegistry([tool or Shell()])
    call = ToolCall(id="c", name="shell", arguments={"command": command, **extra})
    return invoke_tool(registry, call, ctx)


def pid_in(path: Path) -> int:
    wait_until(lambda: path.exists() and path.read_text().strip() != "")
    return int(path.read_text())


IN_OWN_SESSION = 'until [ "$(awk \'{print $6}\' /proc/$!/stat)" = "$!" ]; do sleep 0.01; done'
"""Wait (in bash) until the last background child leads a session of its own."""


@pytest.mark.parametrize(
    "command",
    [
        # the plain escape: a new session, its own process group
        f"setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $! > bg; {IN_OWN_SESSION}; echo ok",
        # the escapee keeps the output pipe open (the reader waits for it too)
        f"setsid sleep 30 & echo $! > bg; {IN_OWN_SESSION}; echo started",
        # nohup in front, and a grandchild of the escapee
        "nohup setsid bash -c 'sleep 30 & echo $! > bg2; wait' >/dev/null 2>&1 &"
        " echo $! > bg; while [ ! -s bg2 ]; do sleep 0.01; done; echo started",
    ],
)
def test_children_that_escape_with_setsid_do_not_outlive_the_call(ws: Path, command: str) -> None:
    result = shell(context(ws), command, timeout=20)
    assert result.outcome == "ok", result.output
    assert "stdout:\n" in result.output
    for name in ("bg", "bg2"):
        if (ws / name).exists():
            pid = pid_in(ws / name)
            wait_until(lambda pid=pid: gone(pid), message=f"{name} ({pid}) outlived the call")


def test_a_cancelled_call_takes_its_setsid_children_with_it(ws: Path) -> None:
    ctx = context(ws)
    box: dict[str, Invocation] = {}
    command = (
        f"setsid sleep 30 </dev/null >/dev/null 2>&1 & {IN_OWN_SESSION}; echo $! > bg; sleep 30"
    )
    thread = threading.Thread(target=lambda: box.update(r=shell(ctx, command)), daemon=True)
    thread.start()
    escapee = pid_in(ws / "bg")
    assert not gone(escapee)
    ctx.cancel.cancel("user pressed stop")
    thread.join(WAIT)
    assert not thread.is_alive()
    assert box["r"].outcome == "cancelled"
    wait_until(lambda: gone(escapee), message="the setsid child outlived the cancelled call")


def test_every_process_of_a_call_carries_its_marker(ws: Path) -> None:
    out = shell(context(ws), f'echo "m=${CALL_MARKER}"; bash -c \'echo "n=${CALL_MARKER}"\'')
    lines = {line[:2]: line[2:] for line in out.output.splitlines() if line[1:2] == "="}
    assert len(lines["m="]) == 32 and lines["m="] == lines["n="]
    again = shell(context(ws), f'echo "m=${CALL_MARKER}"').output
    assert lines["m="] not in again  # one token per call


def test_unrelated_processes_survive_the_sweep(ws: Path) -> None:
    bystander = psutil.Popen(["sleep", "30"])
    try:
        command = f"setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $! > bg; {IN_OWN_SESSION}"
        result = shell(context(ws), command)
        assert result.outcome == "ok"
        wait_until(lambda: gone(pid_in(ws / "bg")))
        assert bystander.is_running() and bystander.status() != psutil.STATUS_ZOMBIE
    finally:
        bystander.kill()
        bystander.wait()


# -- secrets -----------------------------------------------------------------------------

SECRETS = {
    "OPENAI_API_KEY": "sk-test-openai",
    "ANTHROPIC_API_KEY": "sk-ant-test",
    "FORE_API_KEY": "fore-key",
    "FORE_BASE_URL": "http://127.0.0.1:1/v1",
    "GITHUB_TOKEN": "ghp_test",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "AWS_ACCESS_KEY_ID": "AKIATEST",
    "DB_PASSWORD": "hunter2",
    "MY_SERVICE_SECRET": "shh",
    "SENTRY_DSN": "https://key@example.invalid/1",
    "lower_case_token": "lower",
}


def test_the_name_rules() -> None:
    assert all(secret_name(name) for name in SECRETS)
    for name in ("PATH", "HOME", "LANG", "TERM", "MY_SETTING", "TOKENIZERS_PARALLELISM", "KEYMAP"):
        assert not secret_name(name), name
    env = {"OPENAI_API_KEY": "x", "GITHUB_TOKEN": "y", "PATH": "/bin"}
    assert scrub_env(env) == {"PATH": "/bin"}
    assert scrub_env(env, allow=["GITHUB_TOKEN"]) == {"GITHUB_TOKEN": "y", "PATH": "/bin"}


def test_commands_do_not_see_the_runtimes_credentials(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MY_SETTING", "visible")
    out = shell(context(ws), "env").output
    for name, value in SECRETS.items():
        assert value not in out, f"{name} leaked into the command's environment"
    assert "MY_SETTING=visible" in out
    assert "PATH=" in out and "HOME=" in out


def test_an_allowlisted_variable_is_passed_on_purpose(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_allowed")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-still-hidden")
    tool = Shell(env_allow=["GITHUB_TOKEN"])
    out = shell(context(ws), "env", tool=tool).output
    assert "GITHUB_TOKEN=ghp_allowed" in out
    assert "sk-still-hidden" not in out


# -- the sweep only looks at pids handed out since the call started ------------------------------


@pytest.mark.parametrize(
    ("after", "last", "new", "old"),
    [
        (100, 200, [101, 150, 200], [100, 99, 1, 201, 4_000_000]),
        # the pid counter wrapped between the call's start and its sweep
        (4_194_000, 50, [4_194_001, 4_194_303, 1, 50], [4_194_000, 51, 300, 4_000_000]),
        (7, 7, [], [6, 7, 8]),  # nothing was started since
    ],
)
def test_the_sweep_considers_exactly_the_pids_handed_out_since(
    after: int, last: int, new: list[int], old: list[int]
) -> None:
    is_new = _new_pid(after, last)
    assert all(is_new(pid) for pid in new)
    assert not any(is_new(pid) for pid in old)


def test_without_the_pid_counter_every_pid_is_a_candidate() -> None:
    assert _new_pid(None, 10)(3) and _new_pid(10, None)(3)


def test_a_process_started_by_the_call_is_in_the_new_pid_range(ws: Path) -> None:
    before = last_pid()
    if before is None:
        pytest.skip("no /proc/sys/kernel/ns_last_pid on this kernel")
    out = shell(context(ws), "echo $$").output
    assert _new_pid(before, last_pid())(int(out.split()[-1]))
