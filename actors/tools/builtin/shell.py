"""``shell``: run a command in its own process group, with caps and a deadline.

The command runs under ``bash -c`` in a new session (so it leads its own
process group), with its working directory inside the workspace. stdout and
stderr are read concurrently with a selector and capped (head and tail are
kept, the middle is dropped with a marker). On timeout or cancellation the
whole process group is killed -- cancellation kills it from the token's
callback, without waiting for the reader loop -- and when the command exits,
anything it left running in its group is killed too.

**Nothing outlives the call.** Every process the command starts is tracked
by :mod:`actors.tools.proctrack` in a way it cannot opt out of (a cgroup v2
per call where the kernel allows it, else a per-call child-subreaper
supervisor, else process group + marker); when the command exits, times out
or is cancelled, everything it started is killed, and the tool's thread (so
the pool's slot, and a later write's turn) waits, bounded, until none is
left. ``Shell(tracking=...)`` selects a backend (tests, benchmarks).

**Secrets.** The command does not inherit the runtime's credentials:
:func:`actors.tools.envscrub.scrub_env` drops variables whose name or value
looks like a credential and strips passwords from URLs, since a ``printenv``
would otherwise put them into the model's context (and from there into logs
and history). ``Shell(env_allow=[...])`` lets named variables through on purpose.

**Git.** Every command runs with ``GIT_OPTIONAL_LOCKS=0``: a ``git status`` or
``git diff`` of the agent -- a speculation's above all, which the user never
approved -- then never takes ``.git/index.lock`` or rewrites ``.git/index``
to refresh stat data, so it can never make the user's own ``git commit`` or
``git add`` fail at that moment. Locks git needs to write (commit, add,
checkout) are not optional and are still taken. The cost: a stale index is
not refreshed by the agent's reads (git re-checks those files on each
status until the user's own git refreshes it). Older git (2.39) still
refreshes the index in ``git diff`` and ``git describe --dirty``, so a
*speculation's* command also gets a private copy of the index
(:mod:`actors.tools.gitindex`, ``GIT_INDEX_FILE``): it reads the same entries
and can never write the user's.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable

from pydantic import Field

from fore.actors.core.logs import get_logger
from fore.actors.tools.base import Tool, ToolArgs, ToolContext, ToolError
from fore.actors.tools.cancel import ToolCancelled
from fore.actors.tools.envscrub import scrub_env
from fore.actors.tools.gitindex import private_index
from fore.actors.tools.proctrack import (
    CALL_MARKER,
    MAX_NICE,
    TrackedCall,
    Tracker,
    TrackingKind,
    TrackingUnavailable,
    get_tracker,
)

log = get_logger(__name__)

STREAM_CAP = 30_000
"""Bytes kept per stream (half from the start, half from the end)."""

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
SPECULATION_NICE = 10
"""A speculation's command runs this many ``nice`` steps below the runtime.

A speculation is work nobody asked for yet; the commands of the turns users
wait for -- and the runtime itself, which streams their answers -- come
first. On a busy machine the kernel then gives a speculation's ``wc`` or
``pytest`` the CPU the foreground leaves, instead of an equal share of it
(the main turn's tool phase waits for its own shell command). 10 is
``nice(1)``'s default; 19 would starve a speculation on a machine that is
never idle, and a starved speculation's Tab waits for it."""
_EXIT_GRACE = 0.2
"""After the command exits, how long to keep reading pipes held open by leftovers."""

_ENV_OVERRIDES = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "TERM": "dumb",
    "NO_COLOR": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
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

    def __init__(
        self,
        *,
        env_allow: Iterable[str] = (),
        tracking: TrackingKind = "auto",
        speculation_nice: int = SPECULATION_NICE,
    ) -> None:
        """``env_allow``: variable names passed to commands even though they look secret.

        ``tracking``: the process-tracking backend (:mod:`actors.tools.proctrack`);
        ``"auto"`` picks the strongest that works on this machine.
        ``speculation_nice``: how many ``nice`` steps below the runtime a
        speculation's command runs (0: at the same priority; see
        :data:`SPECULATION_NICE`).
        """
        if not 0 <= speculation_nice <= MAX_NICE:
            raise ValueError(f"speculation_nice must be within 0..{MAX_NICE}")
        self.env_allow = frozenset(env_allow)
        self.tracking: TrackingKind = tracking
        self.speculation_nice = speculation_nice

    def tracker(self) -> Tracker:
        return get_tracker(self.tracking)

    def execute(self, args: ShellArgs, ctx: ToolContext) -> str:
        cwd = ctx.fs.exec_dir(args.cwd)
        deadline = min(ctx.deadline, time.monotonic() + args.timeout)
        env = {
            **scrub_env(os.environ, self.env_allow),
            **_ENV_OVERRIDES,
            CALL_MARKER: secrets.token_hex(16),
        }
        scratch = None
        nice = 0
        if _speculative(ctx):
            scratch = tempfile.mkdtemp(prefix="fore-shell-")
            env.update(private_index(cwd, env, scratch))
            nice = self.speculation_nice
        try:
            call = self.tracker().spawn(args.command, cwd=cwd, env=env, nice=nice)
        except (OSError, TrackingUnavailable) as exc:
            _remove(scratch)
            raise ToolError(f"could not start the command: {exc}") from None
        proc = call.proc
        ctx.cancel.on_cancel(lambda _reason: call.kill())
        out, err = CappedBuffer(STREAM_CAP), CappedBuffer(STREAM_CAP)
        timed_out = False
        try:
            timed_out = _pump(proc, out, err, deadline, on_exit=call.kill)
            if not timed_out:
                # Reap the command itself before killing what it left behind,
                # so its own exit code is reported, not our SIGKILL.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                timed_out = proc.returncode is None
        finally:
            _finish(call)
            _remove(scratch)
        if ctx.cancel.cancelled:
            raise ToolCancelled(ctx.cancel.reason or "cancelled")
        if timed_out:
            raise ToolError(
                f"command timed out after {args.timeout:g}s and was killed\n"
                + format_result(None, out, err)
            )
        return format_result(call.returncode(), out, err)


def _speculative(ctx: ToolContext) -> bool:
    """Whether the call runs in a speculation (its view of the files is an overlay)."""
    from fore.actors.overlay.fs import OverlayFs  # the overlay package builds on actors.tools

    return isinstance(ctx.fs, OverlayFs)


def _remove(scratch: str | None) -> None:
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)


def _finish(call: TrackedCall) -> None:
    """Kill what the call left, wait until none is left (bounded), close its pipes."""
    try:
        call.finish()
    finally:
        for stream in (call.proc.stdout, call.proc.stderr):
            if stream is not None:
                stream.close()


def _pump(
    proc: subprocess.Popen[bytes],
    out: CappedBuffer,
    err: CappedBuffer,
    deadline: float,
    on_exit: Callable[[], None] | None = None,
) -> bool:
    """Read both pipes until EOF, the deadline, or a short grace after exit.

    ``on_exit`` runs once when the command has exited: it kills what the
    command left behind, so pipes those leftovers held close at once (what
    they wrote before is still read). Returns True when the deadline passed.
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
                if on_exit is not None:
                    on_exit()
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
