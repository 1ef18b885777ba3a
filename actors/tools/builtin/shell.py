"""``shell``: run a command in its own process group, with caps and a deadline.

The command runs under ``bash -c`` in a new session (so it leads its own
process group), with its working directory inside the workspace. stdout and
stderr are read concurrently with a selector and capped (head and tail are
kept, the middle is dropped with a marker). On timeout or cancellation the
whole process group is killed -- cancellation kills it from the token's
callback, without waiting for the reader loop -- and when the command exits,
anything it left running in its group is killed too: nothing a shell call
started outlives the call.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time

from pydantic import Field

from actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from actors.tools.cancel import ToolCancelled

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
        "are captured and capped; the exit code is reported). Nothing it starts outlives it."
    )
    args_model = ShellArgs
    writes_all = True
    """A command may write any file: within a batch it runs after the writes before it
    and before the writes after it (reads still run beside it)."""

    def execute(self, args: ShellArgs, ctx: ToolContext) -> str:
        cwd = ctx.fs.exec_dir(args.cwd)
        deadline = min(ctx.deadline, time.monotonic() + args.timeout)
        env = {**os.environ, **_ENV_OVERRIDES}
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
