"""The overlay's union listings and walks: ``list_dir`` and ``iter_files``.

A mixin of :class:`~fore.actors.overlay.fs.OverlayFs` (not used alone): a
directory of the union is the real directory's entries, listed through a
descriptor (never by path), with the overlay's own children on top -- new
files and directories added, whited-out names removed -- classified and
sorted as ``WorkspaceFs`` does; a walk opens every real subdirectory
relative to its parent with ``O_NOFOLLOW``. The overlay's state it reads is
declared below and set up by :meth:`OverlayFs.__init__`; it takes the
overlay's one lock, only to read the overlay's tables.
"""

from __future__ import annotations

import os
import posixpath
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fore.actors.overlay._realfs import (
    DIR_FLAGS,
    DirCache,
    PathChanged,
    kind_of,
    open_dir,
)
from fore.actors.overlay.tree import _WHITEOUT, UnionKind, _Dir, _Entry, _File, _Hidden
from fore.actors.tools.fs import (
    MAX_WALK_DEPTH,
    SKIP_DIRS,
    DirEntry,
    FileStat,
    NotADirectory,
    NotFound,
    translate_oserror,
)
from fore.actors.tools.paths import FsError, PathOutOfScope


class UnionListing:
    """Directory listings and walks of the union (a mixin of ``OverlayFs``)."""

    # The overlay's state these queries read (set up by OverlayFs; its one lock).
    _lock: threading.RLock
    _root: str
    _entries: dict[str, _Entry]
    _children: dict[str, set[str]]

    if TYPE_CHECKING:  # OverlayFs's methods these queries call

        def resolve(self, path: str) -> str: ...

        def stat(self, path: str) -> FileStat | None: ...

        def _union_kind(self, rel: str) -> tuple[UnionKind, _Entry | _Hidden | None]: ...

    def list_dir(self, path: str) -> list[DirEntry]:
        rel = self.resolve(path)
        kind, _ = self._union_kind(rel)
        if kind == "absent":
            raise NotFound(f"{rel}: no such directory")
        if kind != "dir":
            raise NotADirectory(f"{rel} is not a directory")
        entries: dict[str, DirEntry] = {}
        try:
            with DirCache(self._root) as cache:
                fd = cache.open(rel)
                with os.scandir(fd) as it:
                    for item in it:
                        entries[item.name] = self._real_entry(rel, item, fd)
        except (FileNotFoundError, NotADirectoryError, PathChanged):
            pass  # the directory exists only in the overlay (or replaced a real file)
        except OSError as exc:
            raise translate_oserror(exc, rel) from None
        with self._lock:
            for name in self._children.get(rel, ()):
                entry = self._entries[posixpath.join(rel, name) if rel else name]
                if entry is _WHITEOUT:
                    entries.pop(name, None)
                elif isinstance(entry, _File):
                    entries[name] = DirEntry(name, "file", entry.size)
                elif isinstance(entry, _Dir):
                    previous = entries.get(name)
                    size = previous.size if previous is not None and previous.kind == "dir" else 0
                    entries[name] = DirEntry(name, "dir", size)
        return sorted(entries.values(), key=lambda e: e.name)

    def _real_entry(self, rel: str, item: os.DirEntry[str], dir_fd: int) -> DirEntry:
        child = posixpath.join(rel, item.name) if rel else item.name
        try:
            if item.is_symlink():
                target = self.stat(child)
                if target is None:
                    return DirEntry(item.name, "other", 0)
                return DirEntry(item.name, target.kind, target.size)
            st = os.stat(item.name, dir_fd=dir_fd, follow_symlinks=False)
        except (FsError, OSError):
            return DirEntry(item.name, "other", 0)
        return DirEntry(item.name, kind_of(st.st_mode), st.st_size)

    def iter_files(self, path: str = "") -> Iterator[str]:
        base = self.resolve(path)
        kind, _ = self._union_kind(base)
        if kind == "file":
            yield base
            return
        if kind != "dir":
            return
        yield from self._walk(base, self._open_real_dir(base), 0)

    def _open_real_dir(self, rel: str) -> int | None:
        """An owned descriptor of the real directory ``rel`` (None: there is none).

        Opened one component at a time with ``O_NOFOLLOW``: a component swapped
        for a symlink fails the open instead of leading out of the workspace.
        """
        try:
            return open_dir(self._root, rel)
        except (OSError, PathChanged):
            return None

    def _walk(self, rel: str, fd: int | None, depth: int) -> Iterator[str]:
        """Union files under ``rel`` in ``os.walk`` order; ``fd`` is its real directory (owned).

        Every real subdirectory is opened relative to its parent's descriptor
        with ``O_NOFOLLOW`` (see :func:`actors.tools.fs.walk_files`): a directory
        swapped for a symlink mid-walk is skipped, never followed out.
        """
        try:
            files, dirs = self._union_children(rel, fd)
            for name in files:
                yield posixpath.join(rel, name) if rel else name
            for name, walk_into in dirs:
                if not walk_into or name in SKIP_DIRS or depth >= MAX_WALK_DEPTH:
                    continue
                child_fd: int | None = None
                if fd is not None:
                    try:
                        child_fd = os.open(name, DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        child_fd = None  # only in the overlay, or swapped since the listing
                yield from self._walk(
                    posixpath.join(rel, name) if rel else name, child_fd, depth + 1
                )
        finally:
            if fd is not None:
                os.close(fd)

    def _walk_children(self, rel: str) -> tuple[list[str], list[tuple[str, bool]]]:
        """Union children of ``rel`` (see :meth:`_union_children`)."""
        fd = self._open_real_dir(rel)
        try:
            return self._union_children(rel, fd)
        finally:
            if fd is not None:
                os.close(fd)

    def _union_children(self, rel: str, fd: int | None) -> tuple[list[str], list[tuple[str, bool]]]:
        """Union children of ``rel`` classified as ``os.walk`` does: ``(files, dirs)``.

        ``fd`` is the real directory (None: it exists only in the overlay); its
        entries are listed through the descriptor, never by path. ``dirs``
        pairs each directory name with whether to walk into it
        (``os.walk(followlinks=False)`` lists a symlink to a directory among
        the directories but does not enter it). A real symlink is classified
        by its target *in the union view* -- the real target may have been
        deleted or created by the overlay -- except one leading outside the
        workspace, which the overlay cannot change: that is classified by the
        real target, as ``WorkspaceFs`` does.
        """
        files: set[str] = set()
        dirs: dict[str, bool] = {}
        with self._lock:
            overlay_aware = bool(self._entries)
        if fd is not None:
            try:
                with os.scandir(fd) as it:
                    for item in it:
                        try:
                            link = item.is_symlink()
                            if link and overlay_aware:
                                is_dir = self._link_is_dir(rel, item)
                            else:
                                is_dir = item.is_dir()
                        except OSError:
                            link, is_dir = False, False
                        if is_dir:
                            dirs[item.name] = not link
                        else:
                            files.add(item.name)
            except OSError:
                pass
        with self._lock:
            for name in self._children.get(rel, ()):
                entry = self._entries[posixpath.join(rel, name) if rel else name]
                if entry is _WHITEOUT:
                    files.discard(name)
                    dirs.pop(name, None)
                elif isinstance(entry, _File):
                    files.add(name)
                    dirs.pop(name, None)
                else:
                    files.discard(name)
                    dirs[name] = True
        return sorted(files), sorted(dirs.items())

    def _link_is_dir(self, rel: str, item: os.DirEntry[str]) -> bool:
        """Whether the real symlink ``item`` in ``rel`` leads to a directory of the union."""
        try:
            target = self.stat(posixpath.join(rel, item.name) if rel else item.name)
        except PathOutOfScope:
            return item.is_dir()
        except FsError:  # a loop, or a parent that is not a directory: os.walk says file
            return False
        return target is not None and target.kind == "dir"
