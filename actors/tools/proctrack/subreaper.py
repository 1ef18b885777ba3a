"""The ``"subreaper"`` backend: a per-call supervisor that is the command's child subreaper.

Used where no cgroup can be created; how it works and its limits are in
:mod:`actors.tools.proctrack`, the supervisor itself is
:mod:`actors.tools.proctrack._subreaper` (run as a script in a fresh interpreter).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from fore.actors.tools.proctrack.base import (
    BASH,
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
from fore.actors.tools.proctrack.sweep import kill_group, kill_marked, last_pid
from fore.errors import TrackingUnavailable

_SUPERVISOR = str(Path(__file__).with_name("_subreaper.py"))


class _SubreaperCall(TrackedCall):
    backend = "subreaper"

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        token: str,
        status_fd: int,
        since: float,
        first: int | None,
    ):
        self.proc, self.token = proc, token
        self._status_fd, self._since, self._first = status_fd, since, first
        self._pidfd = _pidfd(proc.pid)
        self._lock = threading.Lock()
        self._closed = False

    def kill(self) -> None:
        """SIGTERM to the supervisor: it kills the command's group at once, then the rest."""
        with self._lock:
            if not self._closed and self.proc.returncode is None:
                _signal_pidfd(self._pidfd, self.proc.pid, signal.SIGTERM)

    def finish(self) -> int:
        self.kill()
        try:
            self.proc.wait(timeout=SWEEP_BOUND_S + 2)
        except subprocess.TimeoutExpired:
            with self._lock:
                _signal_pidfd(self._pidfd, self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=SWEEP_BOUND_S)
        report = self._read_status()
        with self._lock:
            self._closed = True
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
        leader = 0
        killed = 0
        clean = False
        for line in report.splitlines():
            parts = line.split()
            if parts[:1] == ["leader"] and len(parts) == 2 and parts[1].isdigit():
                leader = int(parts[1])
            elif parts[:1] == ["swept"] and len(parts) == 3 and parts[1].isdigit():
                killed, clean = int(parts[1]), parts[2] == "clean"
        if not clean:
            # The supervisor was killed (or gave up): sweep by group, session and marker.
            log.warning("shell_supervisor_lost", pid=self.proc.pid, leader=leader)
            if leader:
                kill_group(leader)
            killed += kill_marked(self.token, self._since, self._first, session=leader)
        return killed

    def _read_status(self) -> str:
        chunks = []
        try:
            os.set_blocking(self._status_fd, False)
            while True:
                try:
                    chunk = os.read(self._status_fd, 4096)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(self._status_fd)
        return b"".join(chunks).decode(errors="replace")

    def returncode(self) -> int | None:
        return self.proc.returncode


class SubreaperTracker(Tracker):
    """A per-call supervisor that is the command's child subreaper (see module docs)."""

    kind = "subreaper"

    def __init__(self) -> None:
        if sys.platform != "linux":
            raise TrackingUnavailable("PR_SET_CHILD_SUBREAPER is Linux only")
        if not sys.executable or not os.access(sys.executable, os.X_OK):
            raise TrackingUnavailable("no Python executable to run the supervisor")
        if not os.access(BASH, os.X_OK):
            raise TrackingUnavailable(f"{BASH} is missing")

    def spawn(
        self, command: str, *, cwd: str, env: Mapping[str, str], nice: int = 0
    ) -> TrackedCall:
        token = env.get(CALL_MARKER, "")
        since, first = time.time(), last_pid()
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        argv = [
            sys.executable, "-I", "-S", _SUPERVISOR, str(write_fd), str(os.getpid()),
            str(SWEEP_BOUND_S), "0" if "LC_CTYPE" in env else "1", *bash_argv(command, nice),
        ]  # fmt: skip
        try:
            proc = _popen(argv, cwd, env, pass_fds=(write_fd,))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return _SubreaperCall(proc, token, read_fd, since, first)
