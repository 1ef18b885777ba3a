"""``shell``: run a command in its own process group, with caps and a deadline.

The command runs under ``bash -c`` in a new session (so it leads its own
process group), with its working directory inside the workspace. stdout and
stderr are read concurrently with a selector and capped (head and tail are
kept, the middle is dropped with a marker). On timeout or cancellation the
whole process group is killed -- cancellation kills it from the token's
callback, without waiting for the reader loop -- and when the command exits,
anything it left running in its group is killed too.

**Escapees.** A child that calls ``setsid`` (``setsid cmd &``, ``nohup setsid
…``, a daemonising server) leaves the process group, so the group kill
misses it. Every process a call starts therefore carries a marker in its
environment, ``FORE_SHELL_CALL=<random token>``, inherited by every
descendant; when the call ends (normally, timed out or cancelled), after the
group kill, :func:`kill_marked` sweeps the processes created since the call
started and kills each one whose environment carries the token (repeating
while it finds any, so a fork racing the sweep is caught too). The sweep
runs on the tool's thread: the pool keeps the call's slot -- and a later
write's turn -- until it is done. A process that deliberately rewrites its
environment (``env -u FORE_SHELL_CALL …``) can still escape: the shell tool
is a convenience with limits, not a sandbox.

**Secrets.** The command does not inherit the runtime's credentials:
:func:`scrub_env` drops every variable whose name matches
:data:`SECRET_ENV_PATTERNS` (API keys, tokens, passwords, ``FORE_*``,
``OPENAI_*`` …) from the child's environment, since a ``printenv`` would
otherwise put them into the model's context (and from there into logs and
history). ``Shell(env_allow=[...])`` lets named variables through on purpose.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import secrets
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import structlog
from pydantic import Field

from actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from actors.tools.cancel import ToolCancelled

log = structlog.get_logger(__name__)

STREAM_CAP = 30_000
"""Bytes kept per stream (half from the start, half from the end)."""

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
_EXIT_GRACE = 0.2
"""After the command exits, how long to keep reading pipes held open by leftovers."""

_ENV_OVERRIDES = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "GIT_TERMINAL_PROMPT": "0",
}

CALL_MARKER = "FORE_SHELL_CALL"
"""The environment variable that marks every process of one shell call."""

SECRET_ENV_PATTERNS: tuple[str, ...] = (
    "*_API_KEY",
    "*_APIKEY",
    "*_KEY",
    "*_KEY_ID",
    "*TOKEN",
    "*_TOKEN_*",
    "*_PAT",
    "*SECRET*",
    "*PASSWORD*",
    "*PASSWD*",
    "*CREDENTIAL*",
    "*PRIVATE_KEY*",
    "*ACCESS_KEY*",
    "*_DSN",
    "*DATABASE_URL*",
    "FORE_*",
    "OPENAI_*",
    "ANTHROPIC_*",
    "AZURE_OPENAI_*",
)
"""Shell-style patterns (matched case-insensitively) of variable names never passed to
``shell`` commands unless allowed by name: they look like credentials."""

_SWEEP_ROUNDS = 5
_SWEEP_MARGIN_S = 2.0
"""Processes created this long before the call started are still checked (clock slack)."""


def looks_secret(name: str) -> bool:
    """Whether an environment variable name matches :data:`SECRET_ENV_PATTERNS`."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern) for pattern in SECRET_ENV_PATTERNS)


def scrub_env(environ: Mapping[str, str], allow: Iterable[str] = ()) -> dict[str, str]:
    """``environ`` without the variables that look like credentials (``allow``: keep these)."""
    keep = set(allow)
    return {k: v for k, v in environ.items() if k in keep or not looks_secret(k)}


class ShellArgs(ToolArgs):
    command: str = Field(min_length=1, description="The bash command to run.")
    timeout: float = Field(
        default=DEFAULT_TIMEOUT, gt=0, le=MAX_TIMEOUT, description="Seconds before it is killed."
    )
    cwd: str = Field(default=".", description="Working directory, relative to the workspace.")


class CappedBuffer:
    """Keeps the first and last ``cap // 2`` bytes of a stream."""

    __slots__ = ("cap", "dropped", "head", "tail")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        half = self.cap // 2
        room = half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        excess = len(self.tail) - (self.cap - half)
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if self.dropped:
            return f"{head}\n[… {self.dropped} bytes omitted …]\n{tail}"
        return head + tail


def kill_group(pgid: int) -> None:
    """SIGKILL a whole process group (no error if it is already gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def last_pid() -> int | None:
    """The pid the kernel handed out last in our pid namespace (Linux), else ``None``."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def kill_marked(token: str, since: float, after_pid: int | None = None) -> int:
    """SIGKILL every process created after ``since`` (epoch seconds) carrying ``token``.

    ``after_pid`` (:func:`last_pid` taken before the call started its first
    process) narrows the search to pids handed out since, so a sweep reads the
    ``/proc`` entries of a handful of new processes instead of every process
    of the machine. Returns how many it killed. Linux reads ``/proc`` directly
    (and signals through a pidfd, so a pid reused between the check and the
    kill is never hit); elsewhere psutil does the same, more slowly.
    """
    needle = f"{CALL_MARKER}={token}".encode()
    killed = 0
    for _ in range(_SWEEP_ROUNDS):
        found = (
            _kill_marked_proc(needle, since, after_pid)
            if os.path.isdir("/proc/self")
            else _kill_marked_psutil(token, since)
        )
        if not found:
            break
        killed += found
    if killed:
        log.info("shell_escapees_killed", count=killed)
    return killed


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


def _kill_marked_proc(needle: bytes, since: float, after_pid: int | None = None) -> int:
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
        except (OSError, IndexError, ValueError):
            continue  # gone, or unreadable
        fd = _pidfd(pid)
        if fd == -2:
            continue  # gone already
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                entries = f.read().split(b"\0")
            if needle in entries:
                if fd >= 0:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                else:  # no pidfds (Linux < 5.3): a tiny pid-reuse window remains
                    os.kill(pid, signal.SIGKILL)
                killed += 1
        except OSError:
            pass  # not ours to read, or it exited meanwhile
        finally:
            if fd >= 0:
                os.close(fd)
    return killed


def _pidfd(pid: int) -> int:
    """A pidfd pinning ``pid`` (so a kill cannot hit a reused pid); -1 if unsupported, -2 gone."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -2
    except (OSError, AttributeError):
        return -1


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


def format_result(code: int | None, out: CappedBuffer, err: CappedBuffer) -> str:
    parts = [f"exit code: {code}"]
    stdout, stderr = out.text(), err.text()
    if stdout:
        parts.append("stdout:\n" + stdout.rstrip("\n"))
    if stderr:
        parts.append("stderr:\n" + stderr.rstrip("\n"))
    if not stdout and not stderr:
        parts.append("(no output)")
    return "\n".join(parts)


class Shell(Tool[ShellArgs]):
    name = "shell"
    description = (
        "Run a bash command in the workspace (its own process group; stdout and stderr "
        "are captured and capped; the exit code is reported). Nothing it starts outlives "
        "it, and credentials in the environment (API keys, tokens, passwords) are not passed."
    )
    args_model = ShellArgs
    writes_all = True
    """A command may write any file: within a batch it runs after the writes before it
    and before the writes after it (reads still run beside it)."""

    def __init__(self, *, env_allow: Iterable[str] = ()) -> None:
        """``env_allow``: variable names passed to commands even though they look secret."""
        self.env_allow = frozenset(env_allow)

    def execute(self, args: ShellArgs, ctx: ToolContext) -> str:
        cwd = ctx.fs.exec_dir(args.cwd)
        deadline = min(ctx.deadline, time.monotonic() + args.timeout)
        token = secrets.token_hex(16)
        env = {
            **scrub_env(os.environ, self.env_allow),
            **_ENV_OVERRIDES,
            CALL_MARKER: token,
        }
        started = time.time()
        first_pid = last_pid()
        try:
            proc = subprocess.Popen(
                ["/bin/bash", "-c", args.command],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                env=env,
            )
        except OSError as exc:
            raise ToolError(f"could not start the command: {exc}") from None
        pgid = proc.pid
        reaped = threading.Event()

        def on_cancel(_reason: str) -> None:
            # Until the leader is reaped its pid (and so the group id) is ours;
            # after that it may belong to an unrelated process.
            if not reaped.is_set():
                kill_group(pgid)

        ctx.cancel.on_cancel(on_cancel)
        out, err = CappedBuffer(STREAM_CAP), CappedBuffer(STREAM_CAP)
        timed_out = False
        try:
            timed_out = _pump(proc, out, err, deadline)
            if not timed_out:
                # Reap the command itself before killing what it left behind,
                # so its own exit code is reported, not our SIGKILL.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                timed_out = proc.returncode is None
        finally:
            kill_group(pgid)
            reaped.set()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            kill_marked(token, started, first_pid)  # children that left the group with setsid
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        if ctx.cancel.cancelled:
            raise ToolCancelled(ctx.cancel.reason or "cancelled")
        if timed_out:
            raise ToolError(
                f"command timed out after {args.timeout:g}s and was killed\n"
                + format_result(None, out, err)
            )
        return format_result(proc.returncode, out, err)


def _pump(
    proc: subprocess.Popen[bytes], out: CappedBuffer, err: CappedBuffer, deadline: float
) -> bool:
    """Read both pipes until EOF, the deadline, or a short grace after exit.

    Returns True when the deadline passed.
    """
    selector = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    selector.register(proc.stdout, selectors.EVENT_READ, out)
    selector.register(proc.stderr, selectors.EVENT_READ, err)
    exited_at: float | None = None
    try:
        while selector.get_map():
            now = time.monotonic()
            if now >= deadline:
                return True
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _EXIT_GRACE:
                return False  # leftovers hold the pipes open; the group is killed next
            for key, _ in selector.select(timeout=min(0.05, deadline - now)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer: CappedBuffer = key.data
                buffer.feed(chunk)
        return False
    finally:
        selector.close()
