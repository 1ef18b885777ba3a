"""No process a ``shell`` call starts outlives the call, whatever it does to escape.

The escape families of issue #19: ``env -i setsid`` (new session, no
environment marker), ``env -u FORE_SHELL_CALL`` (marker removed), a
double-fork daemon, and a process that re-forks every 2 ms (its pid changes
faster than a sweep by pid can follow). Each runs under the cgroup backend and
under the forced subreaper fallback, and must be gone when the call ends
normally and when it is cancelled. Real bash, real processes; every wait is a
bounded poll, nothing asserts on time.

Each escapee carries a unique tag in its command line, so the test finds it
(and the fixture kills it should a run fail) without trusting any pid file.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

import fore.testing
from fore.actors.tools import ToolContext, ToolRegistry, WorkspaceFs, invoke_tool
from fore.actors.tools.base import Invocation
from fore.actors.tools.builtin import Shell
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.proctrack import tracking_unavailable
from fore.actors.tools.proctrack.cgroup import cgroup2_mount, own_cgroup
from fore.messages.conversation import ToolCall
from tests.tools.conftest import available_backend

WAIT = 20.0

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux process tracking")

REFORK = """
import os, sys, time
path = sys.argv[2]
while True:
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(0.002)
    if os.fork():
        os._exit(0)
"""


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose command line carries ``tag``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if tag.encode() not in f.read():
                    continue
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


@pytest.fixture
def tag() -> Iterator[str]:
    value = f"fore-escapee-{secrets.token_hex(6)}"
    yield value
    for _ in range(50):  # whatever a failing run left behind must not outlive the test
        pids = tagged(value)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(params=["cgroup", "subreaper"])
def backend(request: pytest.FixtureRequest) -> str:
    return available_backend(str(request.param))


def context(root: Path) -> ToolContext:
    return ToolContext(
        fs=WorkspaceFs(root),
        cancel=CancelToken(),
        deadline=time.monotonic() + 60,
        session_id="s",
        call_id="c",
    )


def shell(ctx: ToolContext, command: str, backend: str) -> Invocation:
    registry = ToolRegistry([Shell(tracking=backend)])  # type: ignore[arg-type]
    call = ToolCall(id="c", name="shell", arguments={"command": command, "timeout": 30})
    return invoke_tool(registry, call, ctx)


def escape(family: str, tag: str) -> str:
    """A command that starts one escapee of ``family`` and returns once it runs."""
    sleeper = f"exec -a {tag} sleep 600"
    py = shlex.quote(sys.executable)
    started = "until [ -s started ]; do sleep 0.01; done"
    if family == "env -i setsid":
        start = f"env -i setsid bash -c 'echo $$ > started; {sleeper}' </dev/null >/dev/null 2>&1 &"
    elif family == "env -u marker":
        start = (
            "env -u FORE_SHELL_CALL setsid bash -c "
            f"'echo $$ > started; {sleeper}' </dev/null >/dev/null 2>&1 &"
        )
    elif family == "double-fork daemon":
        start = (
            "( setsid bash -c '( echo $$ > started; "
            f"{sleeper} ) </dev/null >/dev/null 2>&1 &' & ) ; "
        )
    elif family == "re-forker":
        start = (
            f"env -i setsid {py} -c {shlex.quote(REFORK)} {tag} started "
            "</dev/null >/dev/null 2>&1 &"
        )
    else:  # pragma: no cover
        raise AssertionError(family)
    return f"{start} {started}; sleep 0.05; echo escaped"


FAMILIES = ["env -i setsid", "env -u marker", "double-fork daemon", "re-forker"]


@pytest.mark.parametrize("family", FAMILIES)
def test_nothing_outlives_a_call_that_ends(
    tmp_path: Path, backend: str, family: str, tag: str
) -> None:
    result = shell(context(tmp_path), escape(family, tag), backend)
    assert result.outcome == "ok", result.output
    assert "escaped" in str(result.output)
    wait_until(
        lambda: not tagged(tag), message=lambda: f"{family} outlived the call: {tagged(tag)}"
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_nothing_outlives_a_cancelled_call(
    tmp_path: Path, backend: str, family: str, tag: str
) -> None:
    ctx = context(tmp_path)
    box: dict[str, Invocation] = {}
    command = escape(family, tag).replace("echo escaped", "echo escaped > escaped; sleep 600")
    thread = threading.Thread(target=lambda: box.update(r=shell(ctx, command, backend)))
    thread.start()
    try:
        wait_until((tmp_path / "escaped").exists)
        # (a re-forker can fall between two reads of /proc: poll, do not sample once)
        wait_until(lambda: bool(tagged(tag)), message="the escapee never ran")
    finally:
        ctx.cancel.cancel("user pressed stop")  # a failed check must not leave the call running
    thread.join(WAIT)
    assert not thread.is_alive()
    assert box["r"].outcome == "cancelled"
    wait_until(
        lambda: not tagged(tag), message=lambda: f"{family} outlived the cancel: {tagged(tag)}"
    )


def test_a_timed_out_call_takes_its_escapees_with_it(
    tmp_path: Path, backend: str, tag: str
) -> None:
    command = escape("env -i setsid", tag) + "; sleep 600"
    registry = ToolRegistry([Shell(tracking=backend)])  # type: ignore[arg-type]
    call = ToolCall(id="c", name="shell", arguments={"command": command, "timeout": 1})
    result = invoke_tool(registry, call, context(tmp_path))
    assert result.outcome == "error" and "timed out" in str(result.output)
    wait_until(lambda: not tagged(tag))


def test_the_exit_status_and_output_are_the_commands_own(tmp_path: Path, backend: str) -> None:
    out = shell(context(tmp_path), "echo out; echo err >&2; exit 7", backend)
    assert out.output == "exit code: 7\nstdout:\nout\nstderr:\nerr"
    killed = shell(context(tmp_path), "kill -TERM $$", backend)
    assert str(killed.output).startswith("exit code: -15")


def test_commands_in_the_cgroup_backend_run_inside_their_own_cgroup(tmp_path: Path) -> None:
    why = tracking_unavailable("cgroup")
    if why is not None:
        pytest.skip(why)
    first = str(shell(context(tmp_path), "grep ^0:: /proc/self/cgroup", "cgroup").output)
    second = str(shell(context(tmp_path), "grep ^0:: /proc/self/cgroup", "cgroup").output)
    line = next(x for x in first.splitlines() if x.startswith("0::"))
    assert f"/fore.{os.getpid()}." in line
    assert line not in second  # one cgroup per call
    mount, own = cgroup2_mount(), own_cgroup()
    assert mount is not None and own is not None
    parent = Path(mount, own.lstrip("/"), line.split("/")[-2])
    wait_until(lambda: not any(p.is_dir() for p in parent.iterdir()))  # removed


def test_the_callers_bash_env_still_applies(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc = tmp_path / "rc.sh"
    rc.write_text("FROM_BASH_ENV=yes\n")
    monkeypatch.setenv("BASH_ENV", str(rc))
    out = shell(context(tmp_path), 'echo "rc=$FROM_BASH_ENV env=$BASH_ENV"', backend).output
    assert f"rc=yes env={rc}" in str(out)


def test_posix_mode_in_the_runtimes_environment_does_not_switch_tracking_off(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch, tag: str
) -> None:
    """bash in POSIX mode reads no BASH_ENV: the cgroup backend must still join."""
    rc = tmp_path / "rc.sh"
    rc.write_text("FROM_BASH_ENV=yes\n")
    monkeypatch.setenv("BASH_ENV", str(rc))
    monkeypatch.setenv("POSIXLY_CORRECT", "1")
    monkeypatch.setenv("SHELLOPTS", "posix")
    out = shell(context(tmp_path), 'echo "rc=$FROM_BASH_ENV posix=$POSIXLY_CORRECT"', backend)
    assert "rc= posix=1" in str(out.output)  # as bash itself would: no BASH_ENV in POSIX mode
    result = shell(context(tmp_path), escape("env -i setsid", tag), backend)
    assert "escaped" in str(result.output)
    wait_until(lambda: not tagged(tag))


def test_a_command_that_kills_its_supervisor_is_still_swept_by_marker(
    tmp_path: Path, tag: str
) -> None:
    """The subreaper fallback's stated limit: a command that kills its supervisor
    detaches its orphans; the runtime then sweeps by group, session and marker,
    which catches what kept any of them."""
    why = tracking_unavailable("subreaper")
    if why is not None:
        pytest.skip(why)
    command = (
        f"setsid bash -c 'echo $$ > started; exec -a {tag} sleep 600' </dev/null >/dev/null 2>&1 &"
        " until [ -s started ]; do sleep 0.01; done; kill -9 $PPID; echo done"
    )
    shell(context(tmp_path), command, "subreaper")
    wait_until(lambda: not tagged(tag))


def test_a_command_that_never_joined_its_cgroup_is_swept_anyway(
    tmp_path: Path, tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail safe: should bash ever skip the join (it acknowledges the join on a pipe),
    the runtime does not trust the empty cgroup and sweeps by group, session and marker."""
    why = tracking_unavailable("cgroup")
    if why is not None:
        pytest.skip(why)
    from fore.actors.tools.proctrack import cgroup

    monkeypatch.setattr(cgroup, "_JOIN_SCRIPT", "builtin exec {fd}<&- {ack}>&-\n")
    command = (
        f"setsid bash -c 'echo $$ > started; exec -a {tag} sleep 600' </dev/null >/dev/null 2>&1 &"
        " until [ -s started ]; do sleep 0.01; done; grep ^0:: /proc/self/cgroup"
    )
    out = str(shell(context(tmp_path), command, "cgroup").output)
    assert "/fore." not in out  # it really ran outside its cgroup
    wait_until(lambda: not tagged(tag))
