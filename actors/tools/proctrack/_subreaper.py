"""The per-call supervisor of a ``shell`` command when no cgroup can hold it.

Run by :class:`actors.tools.proctrack.subreaper.SubreaperTracker` as
``python -I -S _subreaper.py STATUS_FD PARENT_PID BOUND_S UNSET_LC_CTYPE ARGV...``;
standard library only, no package imports (it starts in a fresh interpreter
for every call, so every import is paid per call).

It marks itself a *child subreaper* (``PR_SET_CHILD_SUBREAPER``): every
descendant of the command whose parent dies -- a double fork, ``setsid``,
``env -i``, a process that re-forks every few milliseconds -- is reparented
to this process instead of to init, so "my descendants" is exactly "what the
command started", and "I have no children left" means "nothing it started is
alive". It starts the command in a session of its own (so the command's
process group is the leader's pid), reaps everything, and when the command
exits -- or on SIGTERM, the runtime's cancel -- kills every descendant in
rounds until it has no child left (bounded by BOUND_S seconds), reports on
STATUS_FD and exits with the command's own status (dying of the same signal
when the command was killed by one).

STATUS_FD lines: ``leader <pid>``, then ``swept <killed> clean|incomplete``.
A missing ``swept`` line tells the runtime the supervisor itself was killed
(for instance by the command: same user) and it must sweep by itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class _Cancelled(Exception):
    pass


def _on_signal(_signum: int, _frame: object) -> None:
    raise _Cancelled


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                kids.extend(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return kids


def _children_by_scan(root: int) -> dict[int, list[int]]:
    """ppid -> pids from ``/proc/*/stat`` (kernels without ``task/*/children``)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(name))
    return tree


_HAS_CHILDREN_FILE = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def descendants(root: int, limit: int = 100_000) -> list[int]:
    """Every live descendant of ``root`` (breadth first, at most ``limit``)."""
    tree = None if _HAS_CHILDREN_FILE else _children_by_scan(root)
    found: list[int] = []
    frontier = [root]
    while frontier and len(found) < limit:
        pid = frontier.pop()
        kids = _children(pid) if tree is None else tree.get(pid, [])
        found.extend(kids)
        frontier.extend(kids)
    return found


def sweep(leader: int, bound: float) -> tuple[int, bool]:
    """Kill every descendant until none is left; ``(killed, clean)``."""
    me = os.getpid()
    deadline = time.monotonic() + bound
    killed = 0
    if leader > 0:
        try:
            os.killpg(leader, signal.SIGKILL)
        except OSError:
            pass
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return killed, True  # no child: as their subreaper, no descendant either
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        if time.monotonic() > deadline:
            return killed, False
        time.sleep(0.0005)


def _exit_like(status: int | None) -> None:
    if status is None:
        os.kill(os.getpid(), signal.SIGKILL)
    code = os.waitstatus_to_exitcode(status) if status is not None else -9
    if code >= 0:
        os._exit(code)
    sig = -code
    signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def main(argv: list[str]) -> None:
    status_fd, parent, bound, unset_lc = int(argv[0]), int(argv[1]), float(argv[2]), argv[3]
    command = argv[4:]
    os.set_inheritable(status_fd, False)

    def report(line: str) -> None:
        try:
            os.write(status_fd, line.encode() + b"\n")
        except OSError:
            pass

    for sig in _SIGNALS:
        signal.signal(sig, _on_signal)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.write(2, b"fore: could not become the command's subreaper\n")
        report("swept 0 clean")
        os._exit(125)
    env = dict(os.environb)
    if unset_lc == "1":
        env.pop(b"LC_CTYPE", None)  # set by Python's C-locale coercion, not by the caller
    status: int | None = None
    leader = 0
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            raise _Cancelled  # the runtime died before we could watch for it
        leader = os.posix_spawn(command[0], command, env, setsid=True)
        report(f"leader {leader}")
        while True:
            pid, st = os.waitpid(-1, 0)
            if pid == leader:
                status = st
                break
    except _Cancelled:
        pass
    except OSError as exc:
        os.write(2, f"fore: could not start the command: {exc}\n".encode())
        status = 127 << 8
    signal.pthread_sigmask(signal.SIG_BLOCK, set(_SIGNALS))
    killed, clean = sweep(leader, bound)  # also when a cancel came mid-spawn
    report(f"swept {killed} {'clean' if clean else 'incomplete'}")
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
