"""Where overlays live on disk, and sweeping the ones dead processes left behind.

Layout (the root is configurable; the default is under the system temp dir)::

    <root>/                          default: <tempfile.gettempdir()>/fore-overlays
      <pid>-<start marker>/          one per process (mode 0700)
        journal/                     apply journals of this process
        <overlay-id>/upper/f000001   one directory per overlay (speculation)

A process directory is named by its pid *and* the process's start time, so a
recycled pid does not make a dead process's overlays look alive. At runtime
start :func:`sweep_dead` finds directories whose process is gone (or whose pid
now belongs to a different process), first finishes or rolls back their
interrupted applies (:func:`actors.overlay.apply.recover`), then deletes them.
A directory being swept is first renamed, so two starting processes never
sweep the same one.

**Every overlay a store creates is accounted for until it is gone.** The
store remembers each one (weakly: a removed overlay is freed by reference
counting as before) with the session that owns it, so whoever closes a
session or a runtime can wait for that session's overlays -- or all of the
store's -- to be removed, and finish or name the ones that are not
(:meth:`OverlayStore.wait_removed`, :meth:`OverlayStore.remove_outstanding`).
Removal is otherwise asynchronous (a speculation's teardown in its
controller, the blocking lane), and a close that did not wait for it returned "clean" with overlays
still on disk -- some of them never removed, because the lane drops work
still queued when it shuts down.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import psutil

from fore.actors.core.logs import get_logger
from fore.actors.overlay.apply import recover
from fore.actors.overlay.fs import DEFAULT_MAX_BYTES, OverlayFs
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.fsclock import Instant
from fore.errors import OverlayStoreError
from fore.messages.overlay import RecoveryRecord, SweepReport

log = get_logger(__name__)

ROOT_NAME = "fore-overlays"
JOURNAL_DIR = "journal"
_PROCESS_DIR = re.compile(r"^(\d+)-([0-9]+)$")
_SWEEPING = re.compile(r"^(\d+)-([0-9]+)\.sweeping-(\d+)-([0-9]+)$")

__all__ = [
    "OverlayLeft",
    "OverlayStore",
    "OverlayStoreError",
    "default_root",
    "process_marker",
    "sweep_dead",
]


def default_root() -> Path:
    """``<system temp dir>/fore-overlays`` (per-user name if another user owns that)."""
    base = Path(tempfile.gettempdir())
    shared = base / ROOT_NAME
    try:
        _ensure_private_dir(shared)
    except OverlayStoreError:
        return base / f"{ROOT_NAME}-{os.getuid()}"
    return shared


def process_marker(pid: int) -> str | None:
    """A string that changes when ``pid`` is reused (the process's start time), or None if dead."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None  # exited, not yet reaped: its overlays are dead too
        created = process.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, ValueError):
        return None
    return str(round(float(created) * 100))


def _ensure_private_dir(path: Path) -> None:
    """Create ``path`` (0700) or check an existing one is a real directory we own."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = path.lstat()
    if not path.is_dir() or path.is_symlink():
        raise OverlayStoreError(f"{path} is not a directory")
    if st.st_uid != os.getuid():
        raise OverlayStoreError(f"{path} belongs to another user")


@dataclass(frozen=True)
class OverlayLeft:
    """An overlay that was still on disk when its session or runtime finished closing."""

    overlay_id: str
    session_id: str | None
    reason: str

    def __str__(self) -> str:
        owner = f" (session {self.session_id})" if self.session_id else ""
        return f"{self.overlay_id}{owner}: {self.reason}"


@dataclass(frozen=True)
class _Tracked:
    overlay_id: str
    directory: str
    owner: str | None
    ref: weakref.ref[OverlayFs]


class OverlayStore:
    """Creates this process's overlays, knows where their journals go, and tracks them."""

    def __init__(
        self, root: str | os.PathLike[str] | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.max_bytes = max_bytes
        marker = process_marker(os.getpid())
        if marker is None:  # pragma: no cover - our own process always exists
            raise OverlayStoreError("cannot determine this process's start time")
        self.process_dir = self.root / f"{os.getpid()}-{marker}"
        self.journal_dir = self.process_dir / JOURNAL_DIR
        self._lock = threading.Lock()
        self._tracked: dict[str, _Tracked] = {}
        """Overlays created here that may still be on disk, by directory."""

    def __repr__(self) -> str:
        return f"OverlayStore({str(self.root)!r})"

    def create(
        self,
        workspace: WorkspaceFs | str | os.PathLike[str],
        *,
        overlay_id: str | None = None,
        max_bytes: int | None = None,
        owner: str | None = None,
        started: Instant | None = None,
    ) -> OverlayFs:
        """A fresh, empty overlay over ``workspace``, owned by session ``owner`` (if any).

        The store tracks it until it is removed (see module docs). ``started``
        is when the speculation started (default: now): a real path that
        changed at or after it is a conflict (:mod:`actors.tools.fsclock`).
        """
        overlay_id = overlay_id or f"ov-{secrets.token_hex(6)}"
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", overlay_id) or overlay_id in (".", ".."):
            raise ValueError(f"invalid overlay id {overlay_id!r}")
        real = workspace if isinstance(workspace, WorkspaceFs) else WorkspaceFs(workspace)
        _ensure_private_dir(self.root)
        self.process_dir.mkdir(mode=0o700, exist_ok=True)
        self.journal_dir.mkdir(mode=0o700, exist_ok=True)
        directory = self.process_dir / overlay_id
        self._prune()
        directory.mkdir(mode=0o700)
        try:
            overlay = OverlayFs(
                real,
                directory,
                max_bytes=self.max_bytes if max_bytes is None else max_bytes,
                overlay_id=overlay_id,
                started=started,
            )
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        with self._lock:
            self._tracked[str(directory)] = _Tracked(
                overlay_id, str(directory), owner, weakref.ref(overlay)
            )
        return overlay

    # -- accounting: nothing created here is forgotten ----------------------------

    def outstanding(self, owner: str | None = None) -> list[OverlayLeft]:
        """Overlays created here (of session ``owner``, or all) still on disk, and why."""
        self._prune()
        with self._lock:
            tracked = [t for t in self._tracked.values() if owner is None or t.owner == owner]
        left = []
        for item in tracked:
            reason = _why_not_gone(item)
            if reason is not None:
                left.append(OverlayLeft(item.overlay_id, item.owner, reason))
        return left

    def wait_removed(self, owner: str | None = None, *, timeout: float) -> list[OverlayLeft]:
        """Wait up to ``timeout`` s for the overlays (of ``owner``, or all) to be removed.

        Removal is someone else's job here (a speculation's teardown, or its
        controller letting it go when the session closes); this only waits for
        it. Returns what is still left.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            tracked = [t for t in self._tracked.values() if owner is None or t.owner == owner]
        for item in tracked:
            overlay = item.ref()
            if overlay is not None:
                overlay.gone.wait(max(0.0, deadline - time.monotonic()))
        return self.outstanding(owner)

    def remove_outstanding(self, owner: str | None = None, *, timeout: float) -> list[OverlayLeft]:
        """Remove what is left (of ``owner``, or all) now; returns what still could not be.

        The last resort of a close, once nothing that could write into an
        overlay runs any more: an overlay still in use waits up to ``timeout``
        seconds in total for its in-flight writes.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            tracked = [t for t in self._tracked.values() if owner is None or t.owner == owner]
        for item in tracked:
            overlay = item.ref()
            if overlay is not None and not overlay.removed:
                overlay.remove(max(0.0, deadline - time.monotonic()))
            elif (overlay is None or overlay.gone.is_set()) and os.path.lexists(item.directory):
                # Dropped without removal, or written again after it: nothing
                # can be writing into it any more (its object is gone or done).
                shutil.rmtree(item.directory, ignore_errors=True)
        return self.outstanding(owner)

    def _prune(self) -> None:
        """Forget overlays that are gone from disk (keeps the table as small as what is live)."""
        with self._lock:
            tracked = list(self._tracked.values())
        done = [t.directory for t in tracked if _why_not_gone(t) is None]
        if done:
            with self._lock:
                for directory in done:
                    self._tracked.pop(directory, None)

    def recover(self) -> list[RecoveryRecord]:
        """Recover this process's own interrupted applies (normally none)."""
        return recover(self.journal_dir)

    def sweep_dead(self) -> SweepReport:
        return sweep_dead(self.root)

    def close(self) -> None:
        """Remove this process's directory if no overlay or journal is left in it.

        Several stores (runtimes) of one process share the directory, so a
        busy one stays; a later process sweeps whatever a dead one left.
        """
        try:
            self.journal_dir.rmdir()
        except OSError:
            pass
        try:
            self.process_dir.rmdir()
        except OSError:
            pass


def _why_not_gone(item: _Tracked) -> str | None:
    """Why a tracked overlay is still on disk (None: it is gone)."""
    overlay = item.ref()
    if overlay is None:
        if not os.path.lexists(item.directory):
            return None
        return "its overlay object was dropped without being removed"
    if not overlay.gone.is_set():
        if overlay.removed:
            return "its removal is under way"
        if overlay.closing.is_set():
            return "its removal waits for writes still in flight"
        return "its removal has not started (its speculation's cleanup is still under way)"
    if os.path.lexists(item.directory):
        return "it was written to again after its removal"
    return None


def sweep_dead(root: str | os.PathLike[str]) -> SweepReport:
    """Recover and delete overlays of processes that no longer run (see module docs)."""
    base = Path(root)
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        return SweepReport()
    me = f"{os.getpid()}-{process_marker(os.getpid())}"
    removed: list[str] = []
    recovered: list[RecoveryRecord] = []
    for name in names:
        claimed = _claim(base, name, me)
        if claimed is None:
            continue
        original, path = claimed
        recovered.extend(recover(path / JOURNAL_DIR))
        shutil.rmtree(path, ignore_errors=True)
        removed.append(original)
        log.info("overlays_swept", process_dir=original)
    return SweepReport(removed=tuple(removed), recovered=tuple(recovered))


def _claim(base: Path, name: str, me: str) -> tuple[str, Path] | None:
    """Rename a dead process's directory to a name only this sweep uses."""
    match = _PROCESS_DIR.match(name)
    if match is not None:
        if name == me or _alive(int(match.group(1)), match.group(2)):
            return None
        target = base / f"{name}.sweeping-{me}"
        try:
            os.rename(base / name, target)
        except OSError:
            return None  # another sweeper got it first
        return name, target
    match = _SWEEPING.match(name)
    if match is not None:
        # An interrupted sweep: take it over once its sweeper is dead too.
        sweeper_pid, sweeper_marker = int(match.group(3)), match.group(4)
        if f"{sweeper_pid}-{sweeper_marker}" == me or _alive(sweeper_pid, sweeper_marker):
            return None
        original = f"{match.group(1)}-{match.group(2)}"
        target = base / f"{original}.sweeping-{me}"
        try:
            os.rename(base / name, target)
        except OSError:
            return None
        return original, target
    return None


def _alive(pid: int, marker: str) -> bool:
    return process_marker(pid) == marker
