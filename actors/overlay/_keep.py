"""Keeping what an apply displaces, so that a failed apply can put it back (overlay internals).

Before its commit point, apply keeps every real file it is about to replace or
delete, so that an operation failing after the commit point (a full disk, a
directory the user made read-only, a parent swapped mid-apply) is rolled back
in process, before the Tab returns, instead of leaving a half-applied tree.
In order of preference a file is kept as:

* ``graveyard`` -- a hard link in the overlay's private ``displaced``
  directory (:meth:`OverlayFs.displaced_dir`). This is also an optimisation:
  the old inode is then not freed inside the user's Tab (ext4 frees an inode's
  blocks in the very ``rename`` or ``unlink`` that drops its last link, most of
  what a replace costs) but when the overlay is removed, after it. Possible
  when the overlay lives on the workspace's filesystem;
* ``workspace`` -- a hard link next to the file (``.<name>.fore-keep-…``),
  named in the apply journal so that crash recovery removes it; apply removes
  it itself once it has finished or rolled back;
* ``copy`` -- a copy of the content in the overlay's private directory, for
  filesystems without hard links or files the process may not link
  (``protected_hardlinks``).

A file that cannot be kept at all stops the apply before its commit point:
nothing is applied that could not be undone.

Restoring never clobbers a user's change made during the apply: a deleted file
comes back with ``link`` (which fails if the name was taken meanwhile), and a
replaced one only while the path still holds the inode apply put there.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fore.actors.overlay._realfs import READ_FLAGS, DirCache, PathChanged, write_all
from fore.actors.tools.fsclock import Stamp

KeepWhere = Literal["graveyard", "workspace", "copy"]
SysFault = Callable[[str, str], None]
"""``fault(syscall, rel)``: called before each change apply makes to the real
tree; a test raises ``OSError`` from it to make that change fail."""

_LINKLESS = frozenset({errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM, errno.EMLINK})
"""Link failures: another filesystem, no hard links there, a file we may not link."""
_COPY_CHUNK = 1024 * 1024


class NotRestored(Exception):
    """A kept file could not be put back (the path keeps the apply's version)."""


@dataclass(frozen=True, slots=True)
class Kept:
    """Where one displaced file is kept."""

    rel: str
    where: KeepWhere
    name: str
    """The link's name in the graveyard (``graveyard``, ``copy``) or in ``directory``
    (``workspace``)."""
    mode: int
    """The file's mode (``copy``: what a restored copy gets; links keep their own)."""
    directory: str = ""
    """Where a ``workspace`` link is (workspace-relative)."""


def no_fault(_syscall: str, _rel: str) -> None:
    """The default :data:`SysFault`: every change is attempted."""


class Keeper:
    """Keeps displaced files of one apply, restores or drops them (see module docs)."""

    def __init__(self, cache: DirCache, graveyard: str | None, tag: str, fault: SysFault) -> None:
        self.cache = cache
        self.tag = tag
        self.fault = fault
        self._fd: int | None = None
        self._links = True
        """Whether hard links into the graveyard work (same filesystem)."""
        self._ws_links = True
        """Whether hard links work in the workspace at all."""
        if graveyard is not None:
            try:
                self._fd = os.open(
                    graveyard, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                )
            except OSError:
                self._fd = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- keeping -------------------------------------------------------------------

    def keep(self, rel: str, index: int, workspace_dir: str, workspace_name: str) -> Kept:
        """Keep the file at ``rel`` (raises ``OSError`` when it cannot be kept at all).

        A link in the tree is made as ``workspace_name`` in ``workspace_dir``.
        """
        parent_fd, name = self.cache.lookup_parent(rel)
        if parent_fd is None:
            raise FileNotFoundError(errno.ENOENT, "its directory is gone", rel)
        self.fault("keep", rel)
        if self._fd is not None and self._links:
            gname = f"{self.tag}-{index}"
            try:
                os.link(
                    name, gname, src_dir_fd=parent_fd, dst_dir_fd=self._fd, follow_symlinks=False
                )
                return Kept(rel, "graveyard", gname, 0)
            except OSError as exc:
                if exc.errno in (errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS):
                    self._links = False  # it would fail for every file
                elif exc.errno not in _LINKLESS:
                    raise
        if self._ws_links:
            try:
                os.link(
                    name,
                    workspace_name,
                    src_dir_fd=parent_fd,
                    dst_dir_fd=self.cache.open(workspace_dir),
                    follow_symlinks=False,
                )
                return Kept(rel, "workspace", workspace_name, 0, workspace_dir)
            except OSError as exc:
                if exc.errno in (errno.EXDEV, errno.EOPNOTSUPP, errno.ENOSYS):
                    self._ws_links = False
                elif exc.errno not in _LINKLESS:
                    raise
        return self._copy(rel, index, parent_fd, name)

    def _copy(self, rel: str, index: int, parent_fd: int, name: str) -> Kept:
        if self._fd is None:
            raise OSError(errno.EPERM, "no private directory to keep a copy in", rel)
        cname = f"copy-{self.tag}-{index}"
        source = os.open(name, READ_FLAGS, dir_fd=parent_fd)
        try:
            st = os.fstat(source)
            if not stat_mod.S_ISREG(st.st_mode):
                raise OSError(errno.EPERM, "a special file that cannot be linked", rel)
            os.set_blocking(source, True)
            target = os.open(
                cname,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=self._fd,
            )
            try:
                _copy_fd(source, target)
            finally:
                os.close(target)
        finally:
            os.close(source)
        return Kept(rel, "copy", cname, stat_mod.S_IMODE(st.st_mode))

    # -- after the apply -------------------------------------------------------------

    def drop(self, kept: Kept) -> bool:
        """Forget a kept file (the apply stands). False if a workspace link stayed behind.

        Graveyard links and copies stay until the overlay is removed (after the Tab).
        """
        if kept.where != "workspace":
            return True
        try:
            os.unlink(kept.name, dir_fd=self.cache.open(kept.directory))
        except FileNotFoundError:
            return True
        except (OSError, PathChanged):
            return False
        return True

    def restore(self, kept: Kept, *, over: Stamp | None) -> None:
        """Put ``kept`` back at its path.

        ``over`` is the identity of the file apply put there (undoing a
        replace): it is replaced only while the path still holds exactly that
        version (a user's edit of it since -- a new inode or new content -- stays).
        ``None`` (undoing a delete): the path must be free, and stays the user's
        if it was taken meanwhile. Raises :class:`NotRestored` or ``OSError``.
        """
        parent_fd, name = self.cache.lookup_parent(kept.rel)
        if parent_fd is None:
            raise NotRestored("its directory is gone")
        if over is not None:
            try:
                now = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is None or Stamp.of(now) != over:
                raise NotRestored("changed during the apply; left as it is")
        self.fault("restore", kept.rel)
        if kept.where == "copy":
            self._restore_copy(kept, parent_fd, name, replace=over is not None)
            return
        src_fd = self.cache.open(kept.directory) if kept.where == "workspace" else self._fd
        if src_fd is None:
            raise NotRestored("the kept copy is unreachable")
        if over is not None:
            os.rename(kept.name, name, src_dir_fd=src_fd, dst_dir_fd=parent_fd)
            return
        try:
            os.link(kept.name, name, src_dir_fd=src_fd, dst_dir_fd=parent_fd, follow_symlinks=False)
        except FileExistsError:
            raise NotRestored("created again during the apply; left as it is") from None
        if kept.where == "workspace":
            os.unlink(kept.name, dir_fd=src_fd)

    def _restore_copy(self, kept: Kept, parent_fd: int, name: str, *, replace: bool) -> None:
        if self._fd is None:
            raise NotRestored("the kept copy is unreachable")
        tmp = f".{name[:64]}.fore-restore-{secrets.token_hex(6)}"
        source = os.open(kept.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._fd)
        try:
            target = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=parent_fd,
            )
            try:
                os.fchmod(target, kept.mode)
                _copy_fd(source, target)
            finally:
                os.close(target)
        finally:
            os.close(source)
        try:
            if replace:
                os.rename(tmp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            else:
                _place_new(tmp, name, parent_fd)
        finally:
            try:
                os.unlink(tmp, dir_fd=parent_fd)
            except FileNotFoundError:
                pass


def _place_new(tmp: str, name: str, dir_fd: int) -> None:
    """Give ``tmp`` the name ``name`` only if nobody took it (``link`` when possible)."""
    try:
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        return
    except FileExistsError:
        raise NotRestored("created again during the apply; left as it is") from None
    except OSError as exc:
        if exc.errno not in _LINKLESS:
            raise
    try:  # no hard links here: check, then rename (a narrow window, as any writer has)
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return
    raise NotRestored("created again during the apply; left as it is")


def _copy_fd(source: int, target: int) -> None:
    while True:
        chunk = os.read(source, _COPY_CHUNK)
        if not chunk:
            break
        write_all(target, chunk)
