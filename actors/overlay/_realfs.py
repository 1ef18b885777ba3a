"""Symlink-safe access to the real workspace by ``dir_fd`` walks (overlay internals).

The overlay reads bases and apply writes files in the *real* workspace. Both
walk a canonical workspace-relative path from the root one component at a time
with ``O_NOFOLLOW``, the same discipline as :class:`actors.tools.fs.WorkspaceFs`:
a directory swapped for a symlink between resolution and use makes the open
fail (``ELOOP``/``ENOTDIR``) instead of leading outside the workspace.

:class:`DirCache` keeps the directory descriptors of one operation open so an
apply of 100 files in one directory opens that directory once, and so the
rename into place happens in exactly the directory that was checked.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat as stat_mod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fore.actors.tools.fsclock import Stamp
from fore.messages.overlay import FileBase

ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CHUNK = 1024 * 1024

Ident = Stamp
"""Cheap identity of a file version (inode, size, mtime, ctime): same identity, same content."""


class PathChanged(Exception):
    """A parent of the path is no longer a plain directory (file or symlink)."""

    def __init__(self, rel: str, detail: str) -> None:
        super().__init__(f"{rel}: {detail}")
        self.rel = rel
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Observed:
    """What a real path holds right now."""

    base: FileBase
    ident: Ident | None
    mode: int = 0o644


def parent_and_name(rel: str) -> tuple[str, str]:
    parent, _, name = rel.rpartition("/")
    return parent, name


def kind_of(mode: int) -> Literal["file", "dir", "other"]:
    if stat_mod.S_ISREG(mode):
        return "file"
    if stat_mod.S_ISDIR(mode):
        return "dir"
    return "other"


class DirCache:
    """Open directory descriptors of one real workspace, keyed by relative path."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._fds: dict[str, int] = {"": os.open(root, ROOT_FLAGS)}
        self.before_mkdir: Callable[[str], None] | None = None
        """Test seam (apply's fault injection): called before each directory is created."""

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()

    def __enter__(self) -> DirCache:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def forget(self, rel: str) -> None:
        """Drop cached descriptors of ``rel`` and below (it was removed or replaced)."""
        for key in [k for k in self._fds if k == rel or k.startswith(rel + "/")]:
            if key:
                os.close(self._fds.pop(key))

    def open(self, rel: str, *, create: bool = False, created: list[str] | None = None) -> int:
        """The descriptor of directory ``rel`` (owned by the cache; do not close).

        Raises ``FileNotFoundError`` for a missing directory (unless ``create``),
        :class:`PathChanged` when a component is a file or a symlink.
        """
        fd = self._fds.get(rel)
        if fd is not None:
            return fd
        parent, name = parent_and_name(rel)
        parent_fd = self.open(parent, create=create, created=created)
        try:
            fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                if self.before_mkdir is not None:
                    self.before_mkdir(rel)
                os.mkdir(name, 0o777, dir_fd=parent_fd)
                if created is not None:
                    created.append(rel)
            except FileExistsError:
                pass
            fd = self._open_checked(rel, name, parent_fd)
        except OSError as exc:
            error = self._path_error(rel, name, parent_fd, exc)
            if error is exc:
                raise
            raise error from exc
        self._fds[rel] = fd
        return fd

    def _open_checked(self, rel: str, name: str, parent_fd: int) -> int:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            error = self._path_error(rel, name, parent_fd, exc)
            if error is exc:
                raise
            raise error from exc

    @staticmethod
    def _path_error(rel: str, name: str, parent_fd: int, exc: OSError) -> Exception:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            try:
                st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except OSError:
                return PathChanged(rel, "a parent directory changed")
            if stat_mod.S_ISLNK(st.st_mode):
                return PathChanged(rel, "a parent directory is now a symlink")
            return PathChanged(rel, "a parent directory is now a file")
        return exc

    def verify(self) -> None:
        """Check every cached directory is still the one its path leads to.

        A cached descriptor follows its directory wherever it moves; if the
        directory was moved (out of the workspace) or replaced by a symlink
        since it was opened, writing through the old descriptor would land
        somewhere else. Raises :class:`PathChanged` for the first such path.
        """
        fresh = DirCache(self.root)
        try:
            for rel in sorted(self._fds, key=lambda r: r.count("/")):
                if not rel:
                    continue
                try:
                    now = os.fstat(fresh.open(rel))
                except FileNotFoundError:
                    raise PathChanged(rel, "a directory was moved away during apply") from None
                cached = os.fstat(self._fds[rel])
                if (now.st_dev, now.st_ino) != (cached.st_dev, cached.st_ino):
                    raise PathChanged(rel, "a directory was replaced during apply")
        finally:
            fresh.close()

    def lookup_parent(self, rel: str) -> tuple[int | None, str]:
        """``(parent_fd, name)``; ``parent_fd`` is None when the parent does not exist."""
        parent, name = parent_and_name(rel)
        try:
            return self.open(parent), name
        except FileNotFoundError:
            return None, name


def open_dir(root: str, rel: str) -> int:
    """An owned descriptor of the directory ``rel``, opened component by component
    with ``O_NOFOLLOW`` (raises ``OSError``; :class:`PathChanged` via the cache)."""
    with DirCache(root) as cache:
        return os.dup(cache.open(rel))


def identity(cache: DirCache, rel: str) -> Ident | None:
    """The cheap identity of what ``rel`` holds now (None when absent)."""
    parent_fd, name = cache.lookup_parent(rel)
    if parent_fd is None:
        return None
    try:
        return Ident.of(os.stat(name, dir_fd=parent_fd, follow_symlinks=False))
    except FileNotFoundError:
        return None


def observe(
    cache: DirCache,
    rel: str,
    *,
    hash_files: bool = True,
    expect_size: int | None = None,
) -> Observed:
    """The current real state of ``rel`` (never follows a symlink).

    A regular file is hashed (unless ``hash_files`` is False, or ``expect_size``
    is given and differs -- then the content cannot match anyway); its
    identity is that of the descriptor hashed, so hash and identity describe
    the same file version.
    Raises :class:`PathChanged` when a parent is a file or a symlink.
    """
    parent_fd, name = cache.lookup_parent(rel)
    if parent_fd is None:
        return Observed(FileBase.absent(), None)
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return Observed(FileBase.absent(), None)
    kind = kind_of(st.st_mode)
    ident = Ident.of(st)
    mode = stat_mod.S_IMODE(st.st_mode)
    if kind != "file":
        return Observed(
            FileBase(kind=kind, size=0, mtime_ns=st.st_mtime_ns),
            ident,
            mode,
        )
    if not hash_files or (expect_size is not None and expect_size != st.st_size):
        return Observed(
            FileBase(kind="file", size=st.st_size, mtime_ns=st.st_mtime_ns), ident, mode
        )
    fd = os.open(name, READ_FLAGS, dir_fd=parent_fd)
    try:
        fst = os.fstat(fd)
        if not stat_mod.S_ISREG(fst.st_mode):  # swapped between stat and open
            return Observed(FileBase(kind="other", mtime_ns=fst.st_mtime_ns), Ident.of(fst), mode)
        os.set_blocking(fd, True)
        digest = hashlib.sha256()
        size = 0
        while True:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return Observed(
        FileBase(kind="file", sha256=digest.hexdigest(), size=size, mtime_ns=fst.st_mtime_ns),
        Ident.of(fst),
        stat_mod.S_IMODE(fst.st_mode),
    )


def write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def fsync_dir(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
