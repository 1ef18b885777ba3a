"""Filesystem views: the only way a tool touches files.

Every built-in tool takes paths from the model and hands them to the session's
:class:`FsView`. Today that is :class:`WorkspaceFs`, the real workspace; during
speculation it is the copy-on-write overlay. Tools never see anything but
workspace-relative paths.

:class:`WorkspaceFs` keeps every path inside the workspace root *on the real
filesystem*, not only lexically:

1. the path is normalised lexically (:func:`actors.tools.paths.normalize`);
2. it is canonicalised by the scope rule shared with the shell gate
   (:func:`actors.tools.paths.resolve_in_workspace`): walked component by
   component from the root, following symlinks only while their targets stay
   inside the root (at most 40 hops);
3. the operation then walks the canonical path again opening every directory
   with ``O_NOFOLLOW`` and the file itself with ``O_NOFOLLOW``.

Step 3 opens exactly what step 2 checked: if a component is swapped for a
symlink in between, the ``O_NOFOLLOW`` open fails instead of following it out
of the workspace. Writes are atomic: a temporary file in the target directory,
then ``os.replace``.
"""

from __future__ import annotations

import errno
import os
import posixpath
import secrets
import stat as stat_mod
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from fore.actors.tools.fsclock import record_own
from fore.actors.tools.paths import (
    FsError,
    PathOutOfScope,
    lstat_lookup,
    normalize,
    resolve_in_workspace,
)
from fore.errors import IsADirectory, NotADirectory, NotFound

_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_HOPS = 40

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)
"""Directories ``glob`` and ``grep`` do not descend into (``list_directory`` shows them)."""


__all__ = [
    "SKIP_DIRS",
    "DirEntry",
    "FileStat",
    "FsError",
    "FsView",
    "IsADirectory",
    "NotADirectory",
    "NotFound",
    "PathOutOfScope",
    "WorkspaceFs",
    "translate_oserror",
]


@dataclass(frozen=True, slots=True)
class FileStat:
    """What a view says about one path."""

    kind: Literal["file", "dir", "other"]
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One entry of a directory listing."""

    name: str
    kind: Literal["file", "dir", "other"]
    size: int


@runtime_checkable
class FsView(Protocol):
    """The filesystem interface every tool uses.

    All paths in and out are workspace-relative POSIX strings (``""`` is the
    root). Errors are :class:`FsError` subclasses or :class:`PathOutOfScope`.
    """

    def resolve(self, path: str) -> str:
        """The canonical workspace-relative form of a model-supplied path."""
        ...

    def stat(self, path: str) -> FileStat | None:
        """``None`` when the path does not exist."""
        ...

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        """The file's bytes (at most ``limit`` of them)."""
        ...

    def write_bytes(self, path: str, data: bytes) -> None:
        """Atomically replace or create the file, creating parent directories."""
        ...

    def delete(self, path: str) -> None:
        """Remove a file (or an empty directory)."""
        ...

    def mkdir(self, path: str) -> None:
        """Create a directory and its parents (no error if it exists)."""
        ...

    def list_dir(self, path: str) -> list[DirEntry]:
        """The directory's entries, sorted by name."""
        ...

    def iter_files(self, path: str = "") -> Iterator[str]:
        """Every file under ``path`` (skipping :data:`SKIP_DIRS`), in sorted walk order."""
        ...

    def exec_dir(self, path: str) -> str:
        """An absolute directory a subprocess may use as its working directory."""
        ...


class WorkspaceFs:
    """The real workspace, with symlink-safe path handling (see module docs)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        real = os.path.realpath(os.fspath(root))
        if not os.path.isdir(real):
            raise NotADirectory(f"workspace root {root} is not a directory")
        self.root = Path(real)
        self._root = real
        self._lookup = lstat_lookup(real)

    def __repr__(self) -> str:
        return f"WorkspaceFs({self._root!r})"

    # -- resolution ---------------------------------------------------------

    def resolve(self, path: str) -> str:
        return self._canonical(normalize(path, self._root))

    def _canonical(self, rel: str) -> str:
        """Follow symlinks inside the root; refuse any that lead out (the shared scope rule)."""
        try:
            found = resolve_in_workspace(rel, self._root, self._lookup)
        except OSError as exc:
            raise translate_oserror(exc, rel) from exc
        if found.stop == "not_dir":
            raise NotADirectory(f"{found.at} is not a directory")
        return found.rel

    def _open_dir(self, rel: str, *, create: bool = False) -> int:
        """Open the canonical directory ``rel`` without following any symlink."""
        fd = os.open(self._root, _ROOT_FLAGS)
        try:
            for name in rel.split("/") if rel else []:
                try:
                    next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise NotFound(f"{rel}: no such directory") from None
                    try:
                        os.mkdir(name, 0o777, dir_fd=fd)
                    except FileExistsError:
                        pass
                    else:
                        record_own(os.fstat(fd))  # our change: the parent gained an entry
                    next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    record_own(os.fstat(next_fd))
                except OSError as exc:
                    raise translate_oserror(exc, rel) from exc
                os.close(fd)
                fd = next_fd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _split(self, path: str) -> tuple[str, str, str]:
        rel = self.resolve(path)
        if rel == "":
            return rel, "", ""
        parent, _, name = rel.rpartition("/")
        return rel, parent, name

    # -- queries -------------------------------------------------------------

    def stat(self, path: str) -> FileStat | None:
        rel, parent, name = self._split(path)
        if rel == "":
            st = os.stat(self._root)
            return FileStat("dir", st.st_size, st.st_mtime_ns)
        try:
            fd = self._open_dir(parent)
        except (NotFound, NotADirectory):
            return None
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(fd)
        return FileStat(_kind(st.st_mode), st.st_size, st.st_mtime_ns)

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        rel, parent, name = self._split(path)
        if rel == "":
            raise IsADirectory("the workspace root is a directory")
        fd = self._open_dir(parent)
        try:
            try:
                # O_NONBLOCK: opening a FIFO must not wait for a writer.
                file_fd = os.open(name, _READ_FLAGS | os.O_NONBLOCK, dir_fd=fd)
            except OSError as exc:
                raise translate_oserror(exc, rel) from exc
        finally:
            os.close(fd)
        try:
            mode = os.fstat(file_fd).st_mode
            if stat_mod.S_ISDIR(mode):
                raise IsADirectory(f"{rel} is a directory")
            if not stat_mod.S_ISREG(mode):
                raise FsError(f"{rel} is not a regular file (device, FIFO or socket)")
            os.set_blocking(file_fd, True)
        except BaseException:
            os.close(file_fd)
            raise
        with os.fdopen(file_fd, "rb") as handle:
            return handle.read() if limit is None else handle.read(limit)

    def list_dir(self, path: str) -> list[DirEntry]:
        rel = self.resolve(path)
        fd = self._open_dir(rel)
        try:
            entries = []
            with os.scandir(fd) as it:
                for entry in it:
                    entries.append(self._entry(rel, entry))
        finally:
            os.close(fd)
        return sorted(entries, key=lambda e: e.name)

    def _entry(self, rel: str, entry: os.DirEntry[str]) -> DirEntry:
        try:
            if entry.is_symlink():
                target = self.stat(posixpath.join(rel, entry.name))
                if target is None:
                    return DirEntry(entry.name, "other", 0)
                return DirEntry(entry.name, target.kind, target.size)
            st = entry.stat(follow_symlinks=False)
        except (PathOutOfScope, FsError, OSError):
            return DirEntry(entry.name, "other", 0)
        return DirEntry(entry.name, _kind(st.st_mode), st.st_size)

    def iter_files(self, path: str = "") -> Iterator[str]:
        base = self.resolve(path)
        st = self.stat(base)
        if st is None or st.kind == "other":
            return
        if st.kind == "file":
            yield base
            return
        try:
            fd = self._open_dir(base)
        except FsError:
            return
        yield from walk_files(fd, base)

    def exec_dir(self, path: str) -> str:
        rel = self.resolve(path)
        st = self.stat(rel)
        if st is None:
            raise NotFound(f"{rel or '.'}: no such directory")
        if st.kind != "dir":
            raise NotADirectory(f"{rel} is not a directory")
        return os.path.join(self._root, rel) if rel else self._root

    # -- mutations --------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes) -> None:
        rel, parent, name = self._split(path)
        if rel == "":
            raise IsADirectory("cannot write to the workspace root")
        fd = self._open_dir(parent, create=True)
        try:
            mode = 0o644
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat_mod.S_ISDIR(st.st_mode):
                    raise IsADirectory(f"{rel} is a directory")
                mode = stat_mod.S_IMODE(st.st_mode)
            except FileNotFoundError:
                pass
            atomic_write_at(fd, name, data, mode=mode)
            _record_change(fd, name)
        finally:
            os.close(fd)

    def delete(self, path: str) -> None:
        rel, parent, name = self._split(path)
        if rel == "":
            raise FsError("cannot delete the workspace root")
        fd = self._open_dir(parent)
        try:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat_mod.S_ISDIR(st.st_mode):
                    os.rmdir(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            except OSError as exc:
                raise translate_oserror(exc, rel) from exc
            record_own(os.fstat(fd))
        finally:
            os.close(fd)

    def mkdir(self, path: str) -> None:
        rel = self.resolve(path)
        os.close(self._open_dir(rel, create=True))


MAX_WALK_DEPTH = 128
"""Walks (``glob``, ``grep``) go no deeper than this below their start: each level
holds one directory descriptor, so a hostile tree cannot exhaust them."""


def walk_files(
    fd: int, base: str, *, max_depth: int = MAX_WALK_DEPTH
) -> Generator[str, None, None]:
    """Every file under the open directory ``fd`` (whose path is ``base``), as ``os.walk``
    lists them -- but by directory descriptor, never by path.

    ``os.walk`` opens each subdirectory by its path, so a directory swapped for
    a symlink between the listing and the descent is followed wherever it
    leads: names from outside the workspace came back. Here each subdirectory
    is opened relative to its parent's descriptor with ``O_NOFOLLOW``: a swapped
    name fails to open (and is skipped) instead of leading out. The order and
    classification are ``os.walk(followlinks=False)``'s: a directory's files
    (sorted), then its subdirectories (sorted, :data:`SKIP_DIRS` skipped) in
    turn; a symlink to a directory is not entered, a symlink to anything else is
    a file. ``fd`` is owned (closed) by the walk, also when it is abandoned.
    """
    stack: list[tuple[int, str, Iterator[str]]] = [(fd, base, iter(()))]
    try:
        files, dirs = _list_fd(fd)
        stack[0] = (fd, base, iter(dirs))
        for name in files:
            yield posixpath.join(base, name) if base else name
        while stack:
            parent_fd, parent_rel, pending = stack[-1]
            child = next(pending, None)
            if child is None:
                stack.pop()
                os.close(parent_fd)
                continue
            if len(stack) > max_depth:
                continue
            try:
                child_fd = os.open(child, _DIR_FLAGS, dir_fd=parent_fd)
            except OSError:
                continue  # gone, or swapped for a symlink or a file since the listing
            rel = posixpath.join(parent_rel, child) if parent_rel else child
            stack.append((child_fd, rel, iter(())))
            files, dirs = _list_fd(child_fd)
            stack[-1] = (child_fd, rel, iter(dirs))
            for file in files:
                yield posixpath.join(rel, file)
    finally:
        for open_fd, _, _ in stack:
            os.close(open_fd)


def _list_fd(fd: int) -> tuple[list[str], list[str]]:
    """``(files, subdirectories to walk)`` of an open directory, sorted, as ``os.walk`` sees it."""
    files: list[str] = []
    dirs: list[str] = []
    try:
        with os.scandir(fd) as it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    if entry.name not in SKIP_DIRS:
                        dirs.append(entry.name)
                else:
                    files.append(entry.name)
    except OSError:
        return [], []
    return sorted(files), sorted(dirs)


def atomic_write_at(
    dir_fd: int, name: str, data: bytes, *, mode: int = 0o644, durable: bool = False
) -> None:
    """Write ``name`` in the directory ``dir_fd`` atomically (temp file + rename).

    Readers see the old content or the new content, never a half-written file.
    With ``durable`` the data is fsynced before the rename.
    """
    tmp = f".{name[:64]}.fore-tmp-{secrets.token_hex(6)}"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    try:
        os.fchmod(fd, mode)  # the umask applied at creation must not change the mode
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.close(fd)
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _record_change(dir_fd: int, name: str) -> None:
    """Record a write this view made (its file and directory) as Fore's own change.

    A speculation starting in the same clock tick must not take it for a
    user's edit (:mod:`actors.tools.fsclock`).
    """
    try:
        record_own(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
        record_own(os.fstat(dir_fd))
    except OSError:
        pass


def _kind(mode: int) -> Literal["file", "dir", "other"]:
    if stat_mod.S_ISREG(mode):
        return "file"
    if stat_mod.S_ISDIR(mode):
        return "dir"
    return "other"


def translate_oserror(exc: OSError, rel: str) -> FsError:
    """An ``OSError`` on the real tree in the file tools' words (workspace-relative).

    Shared by :class:`WorkspaceFs` and the overlay's reads of the real tree
    (:mod:`fore.actors.overlay`), so both report a failure the same way.
    """
    if exc.errno == errno.ENOENT:
        return NotFound(f"{rel}: no such file or directory")
    if exc.errno == errno.EISDIR:
        return IsADirectory(f"{rel} is a directory")
    if exc.errno == errno.ENOTDIR:
        return NotADirectory(f"{rel}: a parent is not a directory")
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return FsError(f"{rel}: a symlink appeared in the path; refusing to follow it")
    if exc.errno == errno.ENOTEMPTY:
        return FsError(f"{rel}: directory not empty")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FsError(f"{rel}: permission denied")
    return FsError(f"{rel}: {exc.strerror or exc}")
