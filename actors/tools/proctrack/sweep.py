"""The ``"group"`` backend, and the last-resort sweep every backend falls back on.

:class:`GroupTracker` starts the command as the leader of its own session and
process group, kills the group when the call ends, then sweeps
(:func:`kill_marked`) what was created since the call started and is still in
its session or carries its environment marker (``FORE_SHELL_CALL=<token>``).
``setsid`` plus ``env -i`` escapes it: a convenience, not a boundary. The
cgroup and subreaper backends use the same sweep when their own mechanism
could not be trusted for a call (a command that never joined its cgroup, a
supervisor that was killed).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

from fore.actors.tools.proctrack.base import (
    CALL_MARKER,
    SWEEP_BOUND_S,
    TrackedCall,
    Tracker,
    _pidfd,
    _popen,
    _signal_pidfd,
    bash_argv,
    log,
)

_SWEEP_ROUNDS = 5
_SWEEP_MARGIN_S = 2.0
"""Processes created this long before the call started are still checked (clock slack)."""


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (no error if it is already gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def last_pid() -> int | None:
    """The pid the kernel handed out last in our pid namespace (Linux), else ``None``."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def _new_pid(after: int | None, last: int | None) -> Callable[[int], bool]:
    """Whether a pid was handed out in ``(after, last]``, pids wrapping around."""
    if after is None or last is None:
        return lambda _pid: True
    if after <= last:
        return lambda pid: after < pid <= last
    return lambda pid: pid > after or pid <= last  # the pid counter wrapped meanwhile


def kill_marked(token: str, since: float, after_pid: int | None = None, session: int = 0) -> int:
    """SIGKILL every process created after ``since`` carrying ``token`` or in ``session``.

    ``after_pid`` (:func:`last_pid` taken before the call started its first
    process) narrows the search to pids handed out since. Repeats while it
    finds any (a fork racing the sweep), at most a few rounds. Returns how
    many it killed. Linux reads ``/proc`` directly and signals through a
    pidfd; elsewhere psutil does the same by marker, more slowly.
    """
    needle = f"{CALL_MARKER}={token}".encode()
    killed = 0
    for _ in range(_SWEEP_ROUNDS):
        found = (
            _kill_marked_proc(needle, since, after_pid, session)
            if os.path.isdir("/proc/self")
            else _kill_marked_psutil(token, since)
        )
        if not found:
            break
        killed += found
    if killed:
        log.info("shell_escapees_killed", count=killed)
    return killed


def _kill_marked_proc(needle: bytes, since: float, after_pid: int | None, session: int) -> int:
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        floor = (since - _SWEEP_MARGIN_S - _boot_time()) * ticks
    except (OSError, ValueError):
        floor = 0.0
    me = os.getpid()
    is_new = _new_pid(after_pid, last_pid())
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me or not is_new(int(name)):
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if float(fields[19]) < floor:  # field 22, starttime in clock ticks after boot
                continue
            in_session = session > 0 and int(fields[3]) == session  # field 6, the session id
        except (OSError, IndexError, ValueError):
            continue  # gone, or unreadable
        fd = _pidfd(pid)
        if fd == -2:
            continue  # gone already
        try:
            if not in_session:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    in_session = needle in f.read().split(b"\0")
            if in_session:
                _signal_pidfd(fd, pid, signal.SIGKILL)
                killed += 1
        except OSError:
            pass  # not ours to read, or it exited meanwhile
        finally:
            if fd >= 0:
                os.close(fd)
    return killed


def _kill_marked_psutil(token: str, since: float) -> int:
    import psutil

    killed = 0
    for proc in psutil.process_iter(["create_time"]):
        try:
            if proc.pid == os.getpid() or proc.info["create_time"] < since - _SWEEP_MARGIN_S:
                continue
            if proc.environ().get(CALL_MARKER) == token:
                proc.kill()
                killed += 1
        except (psutil.Error, TypeError):
            continue
    return killed


# -- group: process group + marker sweep -------------------------------------------------


class _GroupCall(TrackedCall):
    backend = "group"

    def __init__(self, proc: subprocess.Popen[bytes], token: str, since: float, first: int | None):
        self.proc, self.token, self._since, self._first = proc, token, since, first
        self._lock = threading.Lock()
        self._pgid = proc.pid
        self._pidfd = _pidfd(proc.pid)

    def kill(self) -> None:
        # The group id is the leader's pid: ours until the leader is reaped (the
        # pidfd check says whether it still is).
        with self._lock:
            if self.proc.returncode is None:
                kill_group(self._pgid)

    def finish(self) -> int:
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=SWEEP_BOUND_S)
        killed = kill_marked(self.token, self._since, self._first, session=self._pgid)
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        return killed


class GroupTracker(Tracker):
    kind = "group"

    def spawn(
        self, command: str, *, cwd: str, env: Mapping[str, str], nice: int = 0
    ) -> TrackedCall:
        token = env[CALL_MARKER]
        since, first = time.time(), last_pid()
        proc = _popen(bash_argv(command, nice), cwd, env)
        return _GroupCall(proc, token, since, first)
