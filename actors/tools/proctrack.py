"""Tracking every process a ``shell`` call starts, so none outlives the call.

A command's children can leave its process group (``setsid``), shed the
environment marker the runtime used to sweep by (``env -i``, ``env -u``),
double-fork into daemons, or re-fork every few milliseconds so that a sweep
by pid always finds a fresh one. Tracking must therefore be something a
process cannot opt out of. Three backends, chosen once per process by
:func:`get_tracker` (``"auto"``) or by name (tests, benchmarks):

* :class:`CgroupTracker` (``"cgroup"``) -- **a cgroup v2 per call**. The
  cgroup2 mount is found in ``/proc/self/mounts`` and the runtime's own
  cgroup in ``/proc/self/cgroup``; a directory ``fore.<pid>.<id>`` is created
  under it, and one ``c<n>`` below that for each call. The command's bash
  joins its call's cgroup before it runs a single word of the command: a
  sealed, immutable ``memfd`` (one per call, closed in the runtime once bash
  has it) holding a four-line script is passed to bash
  as ``BASH_ENV``, which a non-interactive bash sources first (it writes
  ``$$`` into ``cgroup.procs``, closes the memfd and restores the caller's
  ``BASH_ENV`` / ``POSIXLY_CORRECT``; if the write fails the command does not
  run, exit 125). The script acknowledges the join on a pipe; a call whose
  bash never acknowledged it (killed before it could, or a bash that skipped
  ``BASH_ENV``) is swept like :class:`GroupTracker` does instead of trusting
  an empty cgroup, and logged. Every descendant is born in the cgroup whatever it does to
  its session, group or environment; ending the call writes ``cgroup.kill``
  (the kernel kills every member, including one forking at that moment),
  waits until ``cgroup.events`` says ``populated 0`` and removes the
  directory. Used only when a probe at first use shows it works end to end
  (mkdir, join, ``cgroup.kill``), the effective uid equals the real one (bash
  ignores ``BASH_ENV`` otherwise), and ``/bin/bash`` exists. Its limits: a
  process that may write ``cgroup.procs`` elsewhere (root, or the same user
  in a delegated subtree) can move itself out of the call's cgroup; a
  process another daemon starts on the command's behalf (``systemd-run``,
  ``at``, ``ssh localhost``, ``docker run``) was never the command's
  descendant. ``SHELLOPTS`` and ``BASHOPTS`` from the runtime's environment
  are not passed to the command's top shell (they could switch off
  ``BASH_ENV``).

* :class:`SubreaperTracker` (``"subreaper"``) -- where no cgroup can be
  created (no cgroup2, not writable, not delegated, kernel < 5.14 without
  ``cgroup.kill``). Each call runs under a small supervisor process
  (:mod:`actors.tools._subreaper`, a fresh ``python -I -S``) that sets
  ``PR_SET_CHILD_SUBREAPER``: every orphaned descendant is reparented to it
  rather than to init, whatever its session or environment. When the command
  exits, or on cancel (SIGTERM to the supervisor), it kills the command's
  process group and then every descendant, round after round, until it has
  no child left -- a re-forker is killed with its whole tree each round, and
  a killed process cannot fork again -- bounded by :data:`SWEEP_BOUND_S`.
  Its limits: the supervisor runs as the same user, so a command that kills
  its parent (``kill -9 $PPID``) before escaping detaches its orphans (they
  go to init); the runtime then sees no ``swept`` report and falls back to
  the sweep of :class:`GroupTracker` (process group, session and the
  environment marker), which catches what kept any of them. It costs a
  Python start per call (25-60 ms on a loaded 2-core machine, measured in
  ``bench/tools.py``), and the same "another daemon started it" limit applies.

* :class:`GroupTracker` (``"group"``) -- off Linux, or where neither works:
  the command leads its own session and process group; the group is killed
  when the call ends, and processes created since the call started are swept
  by their session id and by the environment marker ``FORE_SHELL_CALL``.
  ``setsid`` plus ``env -i`` escapes it: it is a convenience, not a boundary.

Every backend also gives each call's processes the marker
``FORE_SHELL_CALL=<random token>`` (cheap, and what the last-resort sweep
reads). ``kill()`` is what the cancel callback calls: it never blocks (a
write to ``cgroup.kill``, a signal through a pidfd). ``finish()`` runs on the
tool's thread after the command: it kills what is left and waits, bounded,
until nothing is.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from fore.actors.core.logs import get_logger
from fore.errors import TrackingUnavailable

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["TrackingUnavailable"]

log = get_logger(__name__)

TrackingKind = Literal["auto", "cgroup", "subreaper", "group"]

CALL_MARKER = "FORE_SHELL_CALL"
"""The environment variable that marks every process of one shell call."""

SWEEP_BOUND_S = 5.0
"""How long a backend keeps killing (and waiting for) a call's processes before it gives up
and logs what is left."""

BASH = "/bin/bash"
_SWEEP_ROUNDS = 5
_SWEEP_MARGIN_S = 2.0
"""Processes created this long before the call started are still checked (clock slack)."""


class TrackedCall(ABC):
    """One running command and everything it starts."""

    proc: subprocess.Popen[bytes]
    token: str
    backend: str

    @abstractmethod
    def kill(self) -> None:
        """Kill the command and everything it started; never blocks (cancel callbacks)."""

    @abstractmethod
    def finish(self) -> int:
        """After the command: kill what is left, wait until none is (bounded), release.

        Returns how many leftover processes were killed (when the backend knows).
        """

    def returncode(self) -> int | None:
        """The command's exit status as ``Popen.returncode`` reports it."""
        return self.proc.returncode


class Tracker(ABC):
    kind: str

    @abstractmethod
    def spawn(self, command: str, *, cwd: str, env: Mapping[str, str]) -> TrackedCall:
        """Start ``bash -c command`` (stdin ``/dev/null``, stdout/stderr pipes)."""


def _popen(
    argv: list[str], cwd: str, env: Mapping[str, str], **extra: object
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # type: ignore[call-overload,no-any-return]
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
        env=dict(env),
        **extra,
    )


def _pidfd(pid: int) -> int:
    """A pidfd pinning ``pid`` (so a kill cannot hit a reused pid); -1 if unsupported, -2 gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -2
    except (OSError, AttributeError):
        return -1


def _signal_pidfd(fd: int, pid: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)


# -- the last-resort sweep: process group, session, marker --------------------------------


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

    def spawn(self, command: str, *, cwd: str, env: Mapping[str, str]) -> TrackedCall:
        token = env[CALL_MARKER]
        since, first = time.time(), last_pid()
        proc = _popen([BASH, "-c", command], cwd, env)
        return _GroupCall(proc, token, since, first)


# -- cgroup v2 -----------------------------------------------------------------------------


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

    def spawn(self, command: str, *, cwd: str, env: Mapping[str, str]) -> TrackedCall:
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
            proc = _popen([BASH, "-c", command], cwd, child_env, pass_fds=(join_fd, ack_w))
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


# -- subreaper -----------------------------------------------------------------------------

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

    def spawn(self, command: str, *, cwd: str, env: Mapping[str, str]) -> TrackedCall:
        token = env.get(CALL_MARKER, "")
        since, first = time.time(), last_pid()
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        argv = [
            sys.executable, "-I", "-S", _SUPERVISOR, str(write_fd), str(os.getpid()),
            str(SWEEP_BOUND_S), "0" if "LC_CTYPE" in env else "1", BASH, "-c", command,
        ]  # fmt: skip
        try:
            proc = _popen(argv, cwd, env, pass_fds=(write_fd,))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return _SubreaperCall(proc, token, read_fd, since, first)


# -- choosing a backend --------------------------------------------------------------------

_trackers: dict[str, Tracker] = {}
_failures: dict[str, str] = {}
_choose_lock = threading.Lock()
_FACTORIES: dict[str, Callable[[], Tracker]] = {
    "cgroup": CgroupTracker,
    "subreaper": SubreaperTracker,
    "group": GroupTracker,
}


def get_tracker(kind: TrackingKind = "auto") -> Tracker:
    """The process-wide tracker of ``kind``; ``"auto"`` is the strongest that works here.

    A named backend that cannot work raises :class:`TrackingUnavailable`
    (tests select backends by name and skip on that). Each backend is set up
    (and probed) once per process.
    """
    with _choose_lock:
        if kind != "auto":
            return _make(kind)
        for name in ("cgroup", "subreaper", "group"):
            try:
                tracker = _make(name)
            except TrackingUnavailable:
                continue
            if name != "cgroup":
                log.info("shell_tracking_fallback", backend=name, why=_failures.get("cgroup"))
            return tracker
        raise TrackingUnavailable("no process tracking works here")  # pragma: no cover


def _make(kind: str) -> Tracker:
    if kind in _trackers:
        return _trackers[kind]
    if kind in _failures:
        raise TrackingUnavailable(_failures[kind])
    factory = _FACTORIES.get(kind)
    if factory is None:
        raise ValueError(f"unknown process tracking backend {kind!r}")
    try:
        tracker = factory()
    except TrackingUnavailable as exc:
        _failures[kind] = str(exc)
        raise
    _trackers[kind] = tracker
    return tracker


def tracking_unavailable(kind: str) -> str | None:
    """Why backend ``kind`` cannot work here (None: it can). Sets it up if needed."""
    try:
        get_tracker(kind)  # type: ignore[arg-type]
    except TrackingUnavailable as exc:
        return str(exc)
    return None
