"""The ``"cgroup"`` backend: a cgroup v2 per call, which no descendant can leave.

How it works and its limits are in :mod:`actors.tools.proctrack` (the
strongest backend, chosen when a probe at first use shows it works here).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import secrets
import select
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from fore.actors.tools.proctrack.base import (
    BASH,
    CALL_MARKER,
    SWEEP_BOUND_S,
    TrackedCall,
    Tracker,
    _popen,
    bash_argv,
    log,
)
from fore.actors.tools.proctrack.sweep import kill_group, kill_marked, last_pid
from fore.errors import TrackingUnavailable


def cgroup2_mount(mounts: str = "/proc/self/mounts") -> str | None:
    """The first cgroup2 mount point in ``mounts``, or None."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[2] == "cgroup2":
                    return fields[1].replace("\\040", " ")
    except OSError:
        return None
    return None


def own_cgroup(path: str = "/proc/self/cgroup") -> str | None:
    """This process's cgroup v2 path (``0::/…``), relative to the hierarchy's root."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        return None
    return None


_JOIN_SCRIPT = """\
builtin echo $$ > "$FORE_SHELL_CGROUP" || {{ builtin echo "fore: the command could not join its \
call's cgroup; it was not run" >&2; builtin exit 125; }}
builtin echo J >&{ack}; builtin unset -v FORE_SHELL_CGROUP BASH_ENV; builtin exec {fd}<&- {ack}>&-
if [[ -n ${{FORE_SHELL_BASH_ENV+set}} ]]; then builtin export BASH_ENV="$FORE_SHELL_BASH_ENV"; \
builtin unset -v FORE_SHELL_BASH_ENV; [[ -n ${{FORE_SHELL_POSIXLY_CORRECT+set}} ]] || \
builtin . "$BASH_ENV"; fi
if [[ -n ${{FORE_SHELL_POSIXLY_CORRECT+set}} ]]; then builtin export \
POSIXLY_CORRECT="$FORE_SHELL_POSIXLY_CORRECT"; builtin unset -v FORE_SHELL_POSIXLY_CORRECT; fi
"""
_STRIPPED = ("SHELLOPTS", "BASHOPTS")
_SAVED = ("POSIXLY_CORRECT", "BASH_ENV")


def _join_memfd(ack: int) -> int:
    """A sealed memfd holding the join script (which closes the memfd's own number, and
    acknowledges the join on descriptor ``ack``)."""
    fd = os.memfd_create("fore-shell-join", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.write(fd, _JOIN_SCRIPT.format(fd=fd, ack=ack).encode())
        seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _populated(events_fd: int) -> bool:
    data = os.pread(events_fd, 256, 0)
    for line in data.splitlines():
        if line.startswith(b"populated "):
            return line.split()[1] != b"0"
    return False


class _CgroupCall(TrackedCall):
    backend = "cgroup"

    def __init__(
        self,
        tracker: CgroupTracker,
        *,
        proc: subprocess.Popen[bytes],
        token: str,
        path: str,
        kill_fd: int,
        events_fd: int,
        ack_fd: int,
        since: float,
        first: int | None,
    ):
        self.proc, self.token = proc, token
        self._tracker, self._path = tracker, path
        self._kill_fd, self._events_fd = kill_fd, events_fd
        self._ack_fd, self._since, self._first = ack_fd, since, first
        self._lock = threading.Lock()
        self._released = False

    def kill(self) -> None:
        with self._lock:
            if self.proc.returncode is None:
                # A cancel that comes before bash has joined its cgroup (it joins
                # right after exec) finds the cgroup empty: the group kill takes
                # bash itself, before it can run or fork anything. The group id
                # is the leader's pid, ours until it is reaped.
                kill_group(self.proc.pid)
            if not self._released:
                with contextlib.suppress(OSError):
                    os.write(self._kill_fd, b"1")

    def finish(self) -> int:
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=SWEEP_BOUND_S)
        empty = self._wait_empty(time.monotonic() + SWEEP_BOUND_S)
        with self._lock:
            self._released = True
            os.close(self._kill_fd)
            os.close(self._events_fd)
        self._tracker.release(self._path, empty)
        killed = 0
        if not self._joined():
            # The command ran without joining its cgroup (killed before it could,
            # or a bash that skipped BASH_ENV): fall back to the group, session and
            # marker sweep rather than trust an empty cgroup.
            log.warning("shell_cgroup_not_joined", pid=self.proc.pid)
            killed = kill_marked(self.token, self._since, self._first, session=self.proc.pid)
        return killed

    def _joined(self) -> bool:
        """Whether the join script acknowledged the join (its byte is in the pipe by now:
        the command, and so its start-up, is over)."""
        try:
            os.set_blocking(self._ack_fd, False)
            try:
                return os.read(self._ack_fd, 16).startswith(b"J")
            except BlockingIOError:
                return False
        finally:
            os.close(self._ack_fd)

    def _wait_empty(self, deadline: float) -> bool:
        """Until ``populated 0`` (``cgroup.events`` signals changes as POLLPRI), bounded."""
        poller = select.poll()
        poller.register(self._events_fd, select.POLLPRI | select.POLLERR)
        while True:
            try:
                if not _populated(self._events_fd):
                    return True
            except OSError:
                return True  # removed: nothing can be in it
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("shell_cgroup_not_empty", cgroup=self._path)
                return False
            self.kill()  # again: a member in uninterruptible sleep dies when it wakes
            poller.poll(min(50.0, left * 1000))


class CgroupTracker(Tracker):
    """A cgroup v2 per call (see module docs); raises :class:`TrackingUnavailable`."""

    kind = "cgroup"

    def __init__(self) -> None:
        if sys.platform != "linux":
            raise TrackingUnavailable("cgroups are Linux only")
        if os.geteuid() != os.getuid():
            raise TrackingUnavailable("bash ignores BASH_ENV when euid != uid")
        if not os.access(BASH, os.X_OK):
            raise TrackingUnavailable(f"{BASH} is missing")
        mount, own = cgroup2_mount(), own_cgroup()
        if mount is None or own is None:
            raise TrackingUnavailable("no cgroup2 hierarchy is mounted")
        base = os.path.join(mount, own.lstrip("/"))
        self._sweep_stale(base)
        self.root = os.path.join(base, f"fore.{os.getpid()}.{secrets.token_hex(4)}")
        try:
            os.mkdir(self.root)
        except OSError as exc:
            raise TrackingUnavailable(f"cannot create a cgroup under {base}: {exc}") from None
        self._lock = threading.Lock()
        self._counter = 0
        self._leftovers: list[str] = []
        try:
            self._probe()
        except BaseException:
            self.close()
            raise
        atexit.register(self.close)

    # -- probe, stale directories, cleanup --------------------------------------------

    def _probe(self) -> None:
        """Run one real command through the whole mechanism; refuse the backend if any
        step does not do what it should."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), CALL_MARKER: "probe"}
        try:
            call = self.spawn(
                'while builtin read -r line; do [[ $line == 0::* ]] && builtin echo "$line"; '
                "done < /proc/self/cgroup",
                cwd="/",
                env=env,
            )
        except OSError as exc:
            raise TrackingUnavailable(f"probe: {exc}") from None
        try:
            out, err = call.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            call.kill()
            call.finish()
            raise TrackingUnavailable("probe: the command did not finish") from None
        path = call._path if isinstance(call, _CgroupCall) else ""
        call.finish()
        expected = "0::/" + os.path.relpath(path, cgroup2_mount() or "/")
        if call.proc.returncode != 0 or out.decode().strip() != expected:
            raise TrackingUnavailable(
                f"probe: the command did not join its cgroup ({err.decode().strip()!r})"
            )

    @staticmethod
    def _sweep_stale(base: str) -> None:
        """Remove the call cgroups of runtimes that died (killing what is still in them)."""
        with contextlib.suppress(OSError):
            for name in os.listdir(base):
                parts = name.split(".")
                if len(parts) != 3 or parts[0] != "fore" or not parts[1].isdigit():
                    continue
                if os.path.exists(f"/proc/{parts[1]}"):
                    continue
                _remove_tree(os.path.join(base, name))

    def release(self, path: str, empty: bool) -> None:
        if empty:
            with contextlib.suppress(OSError):
                os.rmdir(path)
                return
        with self._lock:
            self._leftovers.append(path)

    def close(self) -> None:
        """Kill every call cgroup still present and remove the runtime's directory."""
        _remove_tree(self.root)

    # -- calls --------------------------------------------------------------------------

    def spawn(
        self, command: str, *, cwd: str, env: Mapping[str, str], nice: int = 0
    ) -> TrackedCall:
        argv = bash_argv(command, nice)
        with self._lock:
            self._counter += 1
            path = os.path.join(self.root, f"c{self._counter}")
            leftovers, self._leftovers = self._leftovers, []
        for old in leftovers:
            _remove_tree(old)
        os.mkdir(path)
        try:
            kill_fd = os.open(os.path.join(path, "cgroup.kill"), os.O_WRONLY | os.O_CLOEXEC)
            events_fd = os.open(os.path.join(path, "cgroup.events"), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(path)
            raise
        child_env = {k: v for k, v in env.items() if k not in _STRIPPED and k not in _SAVED}
        for name in _SAVED:
            if name in env:
                child_env[f"FORE_SHELL_{name}"] = env[name]
        child_env["FORE_SHELL_CGROUP"] = os.path.join(path, "cgroup.procs")
        join_fd = -1
        since, first = time.time(), last_pid()
        ack_r, ack_w = os.pipe2(os.O_CLOEXEC)
        try:
            join_fd = _join_memfd(ack_w)  # per call: the runtime keeps no descriptor between calls
            child_env["BASH_ENV"] = f"/proc/self/fd/{join_fd}"
            proc = _popen(argv, cwd, child_env, pass_fds=(join_fd, ack_w))
        except BaseException:
            os.close(kill_fd)
            os.close(events_fd)
            os.close(ack_r)
            with contextlib.suppress(OSError):
                os.rmdir(path)
            raise
        finally:
            os.close(ack_w)
            if join_fd >= 0:
                os.close(join_fd)
        return _CgroupCall(
            self,
            proc=proc,
            token=env.get(CALL_MARKER, ""),
            path=path,
            kill_fd=kill_fd,
            events_fd=events_fd,
            ack_fd=ack_r,
            since=since,
            first=first,
        )


def _remove_tree(path: str) -> None:
    """Kill everything in a cgroup subtree and remove it, deepest first (best effort)."""
    if not os.path.isdir(path):
        return
    for dirpath, _dirs, _files in sorted(os.walk(path), key=lambda t: -t[0].count("/")):
        with (
            contextlib.suppress(OSError),
            open(os.path.join(dirpath, "cgroup.kill"), "wb", buffering=0) as f,
        ):
            f.write(b"1")
        deadline = time.monotonic() + 1.0
        while True:
            try:
                os.rmdir(dirpath)
                break
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
