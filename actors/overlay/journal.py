"""The operations an apply performs on the real tree, and the journal that records them.

An apply is a list of operations (:class:`_Op`: unlink, rmdir, mkdir,
replace), written to a journal (:class:`_Journal`, JSON lines) before the
first one runs, so a crash at any point can be finished or undone;
:func:`_execute` runs one operation idempotently, for the apply and for its
recovery alike. Also the process's registry of applies in flight: one lock
per workspace (applies to it are serialised) and the journals in use (which
:func:`~fore.actors.overlay.recover.recover` leaves alone). Kept apart from
:mod:`.apply` so that :mod:`.recover` can replay operations without
importing the apply.
"""

from __future__ import annotations

import json
import os
import stat as stat_mod
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fore.actors.core.logs import get_logger
from fore.actors.overlay._keep import SysFault, no_fault
from fore.actors.overlay._realfs import DirCache, PathChanged, fsync_dir, parent_and_name, write_all

# Apply's one logger: its events keep the name they had before the split.
log = get_logger("fore.actors.overlay.apply")

JOURNAL_SUFFIX = ".journal"
_JOURNAL_VERSION = 3
"""2: every operation records its target's base and the new content's hash.
3: and the name a displaced file may be kept under (``keep``, ``keep_dir``)."""


@dataclass(slots=True)
class _Op:
    op: Literal["unlink", "rmdir", "mkdir", "replace"]
    path: str
    tmp_dir: str | None = None
    tmp: str | None = None
    size: int = 0
    base_kind: str | None = None
    """What the target was when apply checked it (None: a version-1 journal)."""
    base_sha256: str | None = None
    new_sha256: str | None = None
    """The staged content's hash (``replace``)."""
    keep: str | None = None
    """The name a displaced file may be kept under before the commit point
    (:mod:`actors.overlay._keep`), in ``keep_dir``: recovery removes it."""
    keep_dir: str | None = None
    """The nearest directory above the target that the apply does not remove."""

    def record(self) -> dict[str, Any]:
        """The journal form (``_Op(**record)`` reads it back)."""
        return {
            "op": self.op,
            "path": self.path,
            "tmp_dir": self.tmp_dir,
            "tmp": self.tmp,
            "size": self.size,
            "base_kind": self.base_kind,
            "base_sha256": self.base_sha256,
            "new_sha256": self.new_sha256,
            "keep": self.keep,
            "keep_dir": self.keep_dir,
        }


_locks_guard = threading.Lock()
_workspace_locks: dict[str, threading.Lock] = {}
_active_journals: set[str] = set()
"""Journals of applies running in this process: :func:`recover` leaves them alone."""


def _workspace_lock(root: str) -> threading.Lock:
    """Applies to one workspace are serialised within the process."""
    with _locks_guard:
        lock = _workspace_locks.get(root)
        if lock is None:
            lock = _workspace_locks[root] = threading.Lock()
        return lock


def _execute(
    cache: DirCache,
    op: _Op,
    created: list[str],
    *,
    recovering: bool,
    fault: SysFault = no_fault,
) -> bool:
    """Run one operation; idempotent (safe to repeat after a crash). True if it did something."""
    if op.op == "replace":
        assert op.tmp is not None and op.tmp_dir is not None
        try:
            src_fd = cache.open(op.tmp_dir)
        except FileNotFoundError:
            if recovering:
                return False
            raise
        if recovering:
            try:
                os.stat(op.tmp, dir_fd=src_fd, follow_symlinks=False)
            except FileNotFoundError:
                return False  # already moved into place
        parent, name = parent_and_name(op.path)
        dst_fd = cache.open(parent, create=True, created=created)
        fault("replace", op.path)
        os.replace(op.tmp, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        return True
    if op.op == "mkdir":
        before = len(created)
        cache.open(op.path, create=True, created=created)
        return len(created) > before
    parent_fd, name = cache.lookup_parent(op.path)
    if parent_fd is None:
        return False
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    is_dir = stat_mod.S_ISDIR(st.st_mode)
    if op.op == "unlink":
        if is_dir:
            return False  # already replaced by the directory this apply creates
        fault("unlink", op.path)
        os.unlink(name, dir_fd=parent_fd)
        return True
    if not is_dir:
        return False  # already replaced by the file this apply writes
    cache.forget(op.path)
    fault("rmdir", op.path)
    os.rmdir(name, dir_fd=parent_fd)
    return True


def _describe(exc: BaseException, rel: str) -> str:
    if isinstance(exc, PathChanged):
        return f"{exc.rel}: {exc.detail}"
    if isinstance(exc, OSError):
        return f"{rel}: {exc.strerror or type(exc).__name__}"
    return f"{rel}: {exc}"


class _Journal:
    """An append-only JSON-lines file: header (ops), then PREPARED, then DONE."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def create(
        cls, directory: Path, journal_id: str, root: str, overlay_id: str, ops: list[_Op]
    ) -> _Journal:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = directory / f"{journal_id}{JOURNAL_SUFFIX}"
        header = {
            "journal": _JOURNAL_VERSION,
            "id": journal_id,
            "workspace": root,
            "overlay": overlay_id,
            "created": time.time(),
            "ops": [op.record() for op in ops],
        }
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
        journal = cls(path, fd)
        with _locks_guard:
            _active_journals.add(str(path))
        journal._append(header)
        return journal

    def _append(self, record: dict[str, Any]) -> None:
        assert self._fd is not None
        write_all(self._fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())

    def prepare(self, *, sync: bool) -> None:
        """The commit point: from here on, recovery rolls forward."""
        assert self._fd is not None
        self._append({"state": "PREPARED"})
        if not sync:
            return
        os.fsync(self._fd)
        dir_fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fsync_dir(dir_fd)
        finally:
            os.close(dir_fd)

    def finish(self) -> None:
        """Every operation is done: mark it and remove the journal (best effort)."""
        try:
            self._append({"state": "DONE"})
        except OSError:
            pass  # a leftover PREPARED journal only replays idempotent operations
        self.discard()

    def discard(self) -> None:
        self.close()
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("overlay_journal_not_removed", journal=self.path.name, error=exc.strerror)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with _locks_guard:
            _active_journals.discard(str(self.path))
