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
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

import psutil
import structlog

from actors.overlay.apply import recover
from actors.overlay.fs import DEFAULT_MAX_BYTES, OverlayFs
from actors.tools.fs import WorkspaceFs
from actors.tools.fsclock import Instant
from messages.overlay import RecoveryRecord, SweepReport

log = structlog.get_logger(__name__)

ROOT_NAME = "fore-overlays"
JOURNAL_DIR = "journal"
_PROCESS_DIR = re.compile(r"^(\d+)-([0-9]+)$")
_SWEEPING = re.compile(r"^(\d+)-([0-9]+)\.sweeping-(\d+)-([0-9]+)$")

__all__ = [
    "OverlayStore",
    "OverlayStoreError",
    "default_root",
    "process_marker",
    "sweep_dead",
]


class OverlayStoreError(OSError):
    """The overlay root is unusable (not a directory, or owned by another user)."""


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


class OverlayStore:
    """Creates this process's overlays and knows where their journals go."""

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

    def __repr__(self) -> str:
        return f"OverlayStore({str(self.root)!r})"

    def create(
        self,
        workspace: WorkspaceFs | str | os.PathLike[str],
        *,
        overlay_id: str | None = None,
        max_bytes: int | None = None,
        started: Instant | None = None,
    ) -> OverlayFs:
        """A fresh, empty overlay over ``workspace``.

        ``started`` is when the speculation started (default: now): a real path
        that changed at or after it is a conflict (:mod:`actors.tools.fsclock`).
        """
        overlay_id = overlay_id or f"ov-{secrets.token_hex(6)}"
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", overlay_id) or overlay_id in (".", ".."):
            raise ValueError(f"invalid overlay id {overlay_id!r}")
        real = workspace if isinstance(workspace, WorkspaceFs) else WorkspaceFs(workspace)
        _ensure_private_dir(self.root)
        self.process_dir.mkdir(mode=0o700, exist_ok=True)
        self.journal_dir.mkdir(mode=0o700, exist_ok=True)
        directory = self.process_dir / overlay_id
        directory.mkdir(mode=0o700)
        return OverlayFs(
            real,
            directory,
            max_bytes=self.max_bytes if max_bytes is None else max_bytes,
            overlay_id=overlay_id,
            started=started,
        )

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
