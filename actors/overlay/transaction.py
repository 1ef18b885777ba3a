"""One apply after its conflict check: stage, keep, execute -- and undo.

:class:`_Transaction` is steps 2 to 5 of :func:`~fore.actors.overlay.apply.apply_overlay`
(see :mod:`.apply` for the whole protocol): it stages each new file at a
hidden temp name next to its target (:func:`_stage`: a hard link to the
upper file, else a copy), keeps every real file it will displace
(:mod:`._keep`), reaches the commit point in the journal, runs the
operations, and either lets go of what it kept (:meth:`_Transaction.finish`)
or undoes every operation done, newest first
(:meth:`_Transaction.roll_back`), restoring only over the exact version it
put there. Kept apart from :mod:`.apply` -- which plans the operations,
checks for conflicts and reports the result -- because this is the part
that changes the real tree.
"""

from __future__ import annotations

import errno
import os
import stat as stat_mod
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fore.actors.overlay._keep import Keeper, Kept, NotRestored, SysFault
from fore.actors.overlay._realfs import (
    DirCache,
    Ident,
    PathChanged,
    fsync_dir,
    parent_and_name,
    write_all,
)
from fore.actors.overlay.conflicts import _recheck
from fore.actors.overlay.journal import _describe, _execute, _Journal, _Op
from fore.actors.overlay.tree import PlannedEntry, path_key
from fore.actors.tools.fsclock import Stamp, record_own
from fore.errors import OverlayApplyFailed
from fore.messages.overlay import OverlayConflict

FaultHook = Callable[[str, int], None]
"""Test seam: ``fault(phase, n)`` after the n-th staged file (``"staged"``), at
the commit point (``"prepared"``, 0) and after the n-th operation (``"op"``)."""

_COPY_CHUNK = 1024 * 1024


@dataclass(slots=True)
class _Failure:
    op: _Op
    error: BaseException
    created: list[str]
    """Directories the failing operation had created before it failed."""


@dataclass(slots=True)
class _Done:
    index: int
    op: _Op
    did: bool
    created: tuple[str, ...]
    mode: int = 0o755
    """The removed directory's mode (``rmdir``)."""


class _Transaction:
    """Stage, keep, execute -- and undo: one apply after its conflict check."""

    def __init__(self, cache: DirCache, ops: list[_Op], keeper: Keeper, fault: SysFault) -> None:
        self.cache = cache
        self.ops = ops
        self.keeper = keeper
        self.fault = fault
        self.staged: list[_Op] = []
        self.linked: list[str] = []
        """Upper files staged by hard link: apply unlinks them once it stands."""
        self.ours: dict[str, Stamp] = {}
        """What each replace left at its path (taken right after it): the undo
        replaces only that exact version, never a user's edit of it."""
        self.kept: dict[int, Kept] = {}
        self.done: list[_Done] = []
        self.created: list[str] = []

    def close(self) -> None:
        self.keeper.close()

    def prepare(
        self,
        entries: list[PlannedEntry],
        seen: dict[str, Ident | None],
        modes: dict[str, int],
        journal: _Journal,
        *,
        durable: bool,
        fault: FaultHook | None,
    ) -> list[OverlayConflict]:
        """Stage, re-check, keep what will be displaced, reach the commit point.

        Returns late conflicts (then everything is undone and the journal
        discarded); raises :class:`OverlayApplyFailed` when staging fails (likewise).
        """
        cache = self.cache
        uppers = {e.rel: e.upper for e in entries if e.upper is not None}
        link = True
        try:
            for op in self.ops:
                if op.op != "replace":
                    continue
                upper = uppers[op.path]
                self.fault("stage", op.path)
                mode = modes.get(op.path, 0o644)
                link = _stage(cache, op, upper, mode, durable=durable, link=link)
                self.staged.append(op)
                if link:
                    self.linked.append(upper)
                if fault is not None:
                    fault("staged", len(self.staged))
            cache.verify()  # no directory used for staging moved or became a symlink
            late = _recheck(cache, entries, seen)
            if late:
                self._undo_staging()
                journal.discard()
                return late
            # After the re-check: a link changes the kept file's ctime.
            for index, op in enumerate(self.ops):
                if op.keep is not None:
                    assert op.keep_dir is not None
                    self.kept[index] = self.keeper.keep(op.path, index, op.keep_dir, op.keep)
            if durable:
                for directory in {op.tmp_dir or "" for op in self.staged}:
                    fsync_dir(cache.open(directory))
            journal.prepare(sync=durable)  # the commit point
        except BaseException as exc:
            self._undo_staging()
            journal.discard()
            if isinstance(exc, OSError | PathChanged):
                raise _failure(exc, "staging") from None
            raise
        return []

    def _undo_staging(self) -> None:
        _unstage(self.cache, self.staged)
        for kept in self.kept.values():
            self.keeper.drop(kept)
        self.kept.clear()

    def execute(self, *, fault: FaultHook | None) -> _Failure | None:
        """Run every operation in order; the first failure stops it (and is returned)."""
        cache = self.cache
        for index, op in enumerate(self.ops):
            mark = len(self.created)
            mode = _dir_mode(cache, op.path) if op.op == "rmdir" else 0o755
            try:
                did = _execute(cache, op, self.created, recovering=False, fault=self.fault)
            except Exception as exc:  # whatever it is, the tree must not stay half-applied
                return _Failure(op, exc, self.created[mark:])
            if op.op == "replace":
                stamp = _stamp(cache, op.path)
                if stamp is not None:
                    self.ours[op.path] = stamp
            self.done.append(_Done(index, op, did, tuple(self.created[mark:]), mode))
            if fault is not None:
                fault("op", index + 1)
        return None

    def finish(self, *, durable: bool) -> bool:
        """The apply stands: let go of what it kept, record its changes as Fore's own.

        Returns False when a kept link could not be removed from the tree.
        """
        cache = self.cache
        # The upper file shares its inode with the applied file: unlink it now,
        # in the apply, so that the overlay's removal later does not move the
        # applied file's ctime (a pipelined speculation would take that for a
        # user's edit).
        for upper in self.linked:
            try:
                os.unlink(upper)
            except OSError:
                pass
        clean = all([self.keeper.drop(kept) for kept in self.kept.values()])
        directories = {op.tmp_dir or "" for op in self.staged} | set(self.created)
        for op in self.ops:
            directories.add(parent_and_name(op.path)[0])
            if op.op in ("replace", "mkdir"):
                directories.discard(op.path)
                _record_path(cache, op.path)
        for directory in directories:
            _record_dir(cache, directory)
        if durable:
            for directory in directories:
                try:
                    fsync_dir(cache.open(directory))
                except (OSError, PathChanged):
                    pass
        return clean

    def roll_back(self, failure: _Failure) -> tuple[list[str], list[str]]:
        """Undo every operation done, newest first: ``(paths left changed, problems)``.

        Removes every staged temp and every kept link from the tree, whatever
        could be restored.
        """
        cache = self.cache
        changed: list[str] = []
        problems: list[str] = []
        for rel in reversed(failure.created):
            self._undo_mkdir(rel, changed, problems)
        for done in reversed(self.done):
            op = done.op
            if done.did:
                try:
                    self._undo(done)
                except Exception as exc:
                    changed.append(op.path)
                    problems.append(_describe(exc, op.path))
            for rel in reversed(done.created):
                self._undo_mkdir(rel, changed, problems)
        # Staged temps never moved into place (the failing operation's included).
        moved = {d.op.path for d in self.done if d.op.op == "replace" and d.did}
        _unstage(cache, [op for op in self.staged if op.path not in moved])
        for kept in self.kept.values():
            self.keeper.drop(kept)
        for path in changed:
            _record_path(cache, path)
        return sorted(set(changed), key=path_key), problems

    def _undo(self, done: _Done) -> None:
        op = done.op
        kept = self.kept.get(done.index)
        if op.op == "replace":
            ours = self.ours.get(op.path)
            if ours is None:
                raise NotRestored("changed during the apply; left as it is")
            if kept is not None:
                self.keeper.restore(kept, over=ours)
            else:
                _remove_ours(self.cache, op.path, ours, self.fault)
        elif op.op == "unlink":
            if kept is None:
                raise NotRestored("no kept copy")
            self.keeper.restore(kept, over=None)
        elif op.op == "rmdir":
            parent_fd, name = self.cache.lookup_parent(op.path)
            if parent_fd is None:
                raise NotRestored("its directory is gone")
            self.fault("mkdir", op.path)
            os.mkdir(name, done.mode, dir_fd=parent_fd)
        # mkdir: the directories it created are undone with ``done.created``

    def _undo_mkdir(self, rel: str, changed: list[str], problems: list[str]) -> None:
        parent_fd, name = self.cache.lookup_parent(rel)
        self.cache.forget(rel)
        if parent_fd is None:
            return
        try:
            self.fault("rmdir", rel)
            os.rmdir(name, dir_fd=parent_fd)
        except FileNotFoundError:
            pass
        except Exception as exc:
            changed.append(rel)
            problems.append(_describe(exc, rel))


def _stamp(cache: DirCache, rel: str) -> Stamp | None:
    try:
        parent_fd, name = cache.lookup_parent(rel)
        if parent_fd is None:
            return None
        return Stamp.of(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
    except (OSError, PathChanged):
        return None


def _dir_mode(cache: DirCache, rel: str) -> int:
    parent_fd, name = cache.lookup_parent(rel)
    if parent_fd is None:
        return 0o755
    try:
        return stat_mod.S_IMODE(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
    except OSError:
        return 0o755


def _remove_ours(cache: DirCache, rel: str, ours: Stamp | None, fault: SysFault) -> None:
    """Undo the creation of a new file: unlink it while it is still the one apply put there."""
    parent_fd, name = cache.lookup_parent(rel)
    if parent_fd is None:
        return
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if ours is None or Stamp.of(st) != ours:
        raise NotRestored("changed during the apply; left as it is")
    fault("unlink", rel)
    os.unlink(name, dir_fd=parent_fd)


def _record_path(cache: DirCache, rel: str) -> None:
    """Record what ``rel`` holds now as Fore's own change (see :mod:`actors.tools.fsclock`)."""
    try:
        parent_fd, name = cache.lookup_parent(rel)
        if parent_fd is not None:
            record_own(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
    except (OSError, PathChanged):
        pass


def _record_dir(cache: DirCache, rel: str) -> None:
    try:
        record_own(os.fstat(cache.open(rel)))
    except (OSError, PathChanged):
        pass


_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP, errno.ENOSYS})


def _stage(cache: DirCache, op: _Op, upper: str, mode: int, *, durable: bool, link: bool) -> bool:
    """Put the new content at ``op.tmp`` next to its target; True if hard-linked.

    When the upper layer is on the workspace's filesystem the staged file is a
    hard link to the upper file (no data copy: ~20x cheaper than creating and
    writing a file). The overlay never writes an upper file in place (writes
    replace it, and it is closed before apply), so sharing the inode is safe.
    Otherwise (another filesystem, no hard links) the content is copied.
    """
    assert op.tmp is not None and op.tmp_dir is not None
    dir_fd = cache.open(op.tmp_dir)
    if link:
        try:
            os.chmod(upper, mode)  # in our private upper directory: no symlink games
            if durable:
                _fsync_path(upper)
            os.link(upper, op.tmp, dst_dir_fd=dir_fd, follow_symlinks=False)
            return True
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
    fd = os.open(
        op.tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=dir_fd,
    )
    try:
        os.fchmod(fd, mode)
        with open(upper, "rb") as source:
            while True:
                chunk = source.read(_COPY_CHUNK)
                if not chunk:
                    break
                write_all(fd, chunk)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(op.tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    os.close(fd)
    return False


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unstage(cache: DirCache, staged: Iterable[_Op]) -> None:
    for op in staged:
        if op.tmp is None or op.tmp_dir is None:
            continue
        try:
            os.unlink(op.tmp, dir_fd=cache.open(op.tmp_dir))
        except (OSError, PathChanged):
            pass


def _failure(exc: BaseException, phase: str) -> OverlayApplyFailed:
    if isinstance(exc, PathChanged):
        return OverlayApplyFailed(f"apply stopped while {phase}: {exc.rel}: {exc.detail}")
    strerror = exc.strerror if isinstance(exc, OSError) else None
    return OverlayApplyFailed(f"apply stopped while {phase}: {strerror or type(exc).__name__}")
