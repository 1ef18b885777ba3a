"""``OverlayFs``: a copy-on-write view of the workspace for one speculation.

A speculation runs the model's edits before the user has said yes, so its
writes must land in scratch space, be visible to its own later reads, and
reach the real tree only on accept (:mod:`actors.overlay.apply`). This class
implements the :class:`~actors.tools.fs.FsView` protocol over a real
:class:`~actors.tools.fs.WorkspaceFs` plus an *upper layer* on disk, so every
built-in tool runs on it unchanged.

Model
-----
Every touched path has one overlay entry, forever (entries change kind but
are never dropped, so the base recorded at first touch stays attached):

* a *file* -- its content lives in the upper layer (``upper/f<n>``, one name
  per path for the overlay's lifetime, so later writes reuse it);
* a *directory* created (or re-created) by the speculation;
* a *whiteout* -- the path was deleted; it hides the real file or directory.

A path without an entry falls through to the real tree, unless an ancestor is
a whiteout (then it is hidden). Listings, ``iter_files`` (and therefore
``glob`` and ``grep``) and ``stat`` merge both layers: overlay files and new
directories appear, whited-out names disappear; sorting and ``SKIP_DIRS`` are
those of ``WorkspaceFs``. A real symlink is classified by what its target is
*in the union view* (a link to a directory the overlay deleted is a dangling
link, i.e. a file entry; a dangling link whose target the overlay created as
a directory is a directory), exactly as ``WorkspaceFs`` would classify it in
a tree where the overlay's changes were applied.

The first write, delete or mkdir of a path records its **base**: what the real
path held when the speculation started, which apply checks before it writes
(:mod:`.bases`). A write never copies the original into the upper layer: the
new content replaces it wholesale, so the original is only hashed.

Scope and leaks
---------------
Paths are resolved on the real filesystem, overlay-aware: symlinks in the real
tree are followed only while they stay inside the workspace (a link leading
outside is refused even for a write that would only land in the overlay);
``..foo`` is an ordinary name; ``""`` is the root. Every error message names
workspace-relative paths only -- the upper layer's location never reaches a
tool result. :meth:`exec_dir` returns the *real* directory: the gate lets a
speculative shell command run only while the overlay holds no write, and then
the real tree is exactly what the speculation sees.

Concurrency and lifetime
------------------------
Many tool threads share one overlay: metadata is guarded by one lock, writes
to the same path are serialised by a per-path lock, upper files are replaced
atomically (readers see the old or the new bytes); in-flight mutations are
counted so that closing and removing wait for them (:mod:`.lifetime`). The
upper layer is bounded: a write that would exceed ``max_bytes`` raises
:class:`OverlayFull`, which the speculation gate turns into a
boundary.

Layout: this module is the view itself -- resolution, reads and mutations
under its one lock -- one concept, kept whole although it is a little over
600 lines: all three work on the same entries, lock and upper layer. The
records it keeps are :mod:`.tree`'s; the union listings and walks are the
:class:`~fore.actors.overlay.search.UnionListing` mixin (:mod:`.search`), what
a path held at the speculation's start the
:class:`~fore.actors.overlay.bases.BaseRecorder` mixin (:mod:`.bases`), and
closing and removal the :class:`~fore.actors.overlay.lifetime.OverlayLifetime`
mixin (:mod:`.lifetime`); all of them read the same tables under the same lock.
"""

from __future__ import annotations

import errno
import hashlib
import itertools
import os
import posixpath
import secrets
import stat as stat_mod
import threading
import time
from pathlib import Path

from fore.actors.core.logs import get_logger
from fore.actors.overlay._realfs import (
    write_all,
)
from fore.actors.overlay.bases import BaseRecorder
from fore.actors.overlay.lifetime import OverlayLifetime
from fore.actors.overlay.search import UnionListing
from fore.actors.overlay.tree import (
    _HIDDEN,
    _WHITEOUT,
    PlannedEntry,
    UnionKind,
    _Dir,
    _Entry,
    _File,
    _Hidden,
    _Seen,
    path_key,
)
from fore.actors.tools.fs import (
    FileStat,
    IsADirectory,
    NotADirectory,
    NotFound,
    WorkspaceFs,
    translate_oserror,
)
from fore.actors.tools.fsclock import Instant, multigrain
from fore.actors.tools.paths import FsError, PathOutOfScope, normalize
from fore.errors import OverlayClosed, OverlayFull
from fore.messages.overlay import FileBase, OverlayChange

log = get_logger(__name__)

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""Default bound of an overlay's upper layer (bytes of file content)."""

_MAX_HOPS = 40
_READ_RETRIES = 3

__all__ = [
    "DEFAULT_MAX_BYTES",
    "OverlayClosed",
    "OverlayFs",
    "OverlayFull",
    "PlannedEntry",
]


class OverlayFs(UnionListing, BaseRecorder, OverlayLifetime):
    """A copy-on-write :class:`~actors.tools.fs.FsView` over a real workspace."""

    def __init__(
        self,
        real: WorkspaceFs,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        overlay_id: str | None = None,
        started: Instant | None = None,
    ) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self.started = started if started is not None else Instant.now()
        """When the speculation started: a real path changed at or after it is a conflict."""
        self.real = real
        self.root: Path = real.root
        """The *real* workspace root (the pool keys writes by it)."""
        self._multigrain = multigrain(real.root)
        """The workspace's filesystem orders stamps exactly (:func:`fsclock.multigrain`)."""
        self._root = str(real.root)
        self.directory = Path(directory)
        self.overlay_id = overlay_id or self.directory.name
        self.max_bytes = max_bytes
        self._upper = self.directory / "upper"
        os.makedirs(self._upper, mode=0o700, exist_ok=True)
        self._upper_str = str(self._upper)
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._children: dict[str, set[str]] = {}
        self._bases: dict[str, FileBase] = {}
        self._seen: dict[str, _Seen] = {}
        self._upper_names: dict[str, str] = {}
        self._name_counter = itertools.count(1)
        self._used = 0
        self._reserved = 0
        self._path_locks: dict[str, threading.Lock] = {}
        self._life = threading.Condition(threading.Lock())
        self._inflight = 0
        self._closed = False
        self._removed = False
        self._remove_pending = False
        self.closing = threading.Event()
        """Set as soon as :meth:`close` or :meth:`remove` starts."""
        self.gone = threading.Event()
        """Set once the upper layer has been deleted from disk."""

    def __repr__(self) -> str:
        return f"OverlayFs({self.overlay_id!r} over {self._root!r})"

    # -- inspection ------------------------------------------------------------

    @property
    def has_writes(self) -> bool:
        """Whether the overlay holds any change (file, whiteout or new directory)."""
        return bool(self._entries)

    @property
    def bytes_used(self) -> int:
        return self._used

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def removed(self) -> bool:
        return self._removed

    def touched(self) -> dict[str, FileBase]:
        """Every touched path and its base (the real state at first touch)."""
        with self._lock:
            return dict(self._bases)

    def counts(self) -> tuple[int, int, int]:
        """``(files written, whiteouts, directories created)``."""
        with self._lock:
            files = sum(1 for e in self._entries.values() if isinstance(e, _File))
            whiteouts = sum(1 for e in self._entries.values() if e is _WHITEOUT)
            dirs = sum(1 for e in self._entries.values() if isinstance(e, _Dir))
        return files, whiteouts, dirs

    @property
    def bytes_free(self) -> int:
        """What the size bound still allows (writes in flight already reserved theirs)."""
        with self._lock:
            return max(0, self.max_bytes - self._used - self._reserved)

    def held_bytes(self, path: str) -> int:
        """Bytes the upper layer holds for ``path`` (0 when the overlay holds no file there).

        A write of ``n`` bytes to ``path`` needs ``n - held_bytes(path)`` more
        of the size bound (the speculation gate's estimate before a write runs).
        A path out of scope is 0: the write itself will report that.
        """
        try:
            rel = self.resolve(path)
        except FsError:
            return 0
        with self._lock:
            entry = self._entries.get(rel)
        return entry.size if isinstance(entry, _File) else 0

    def displaced_dir(self) -> str:
        """A private directory, removed with the overlay, for what apply displaces.

        Apply hard-links each real file it replaces or deletes here first, so
        the old inode is not freed inside the user's Tab: ext4 frees an inode's
        blocks in the very ``rename`` that drops its last link, which is most of
        a bare replace's cost. The blocks are freed later, when :meth:`remove`
        deletes the overlay off the accept path.
        """
        path = os.path.join(str(self.directory), "displaced")
        os.makedirs(path, mode=0o700, exist_ok=True)
        return path

    def upper_file(self, path: str) -> Path | None:
        """Where the overlay stores ``path``'s content (diagnostics and tests only).

        Never hand this to a tool or the model: tools see workspace paths only.
        """
        rel = self.resolve(path)
        with self._lock:
            entry = self._entries.get(rel)
            if isinstance(entry, _File):
                return self._upper / entry.upper
        return None

    def plan(self) -> list[PlannedEntry]:
        """Every touched path with its final state (sorted; used by apply)."""
        with self._lock:
            out = []
            for rel in sorted(self._entries, key=path_key):
                entry = self._entries[rel]
                base = self._bases.get(rel, FileBase.absent())
                if isinstance(entry, _File):
                    out.append(
                        PlannedEntry(
                            rel,
                            "file",
                            base,
                            os.path.join(self._upper_str, entry.upper),
                            entry.size,
                            entry.sha256,
                        )
                    )
                elif isinstance(entry, _Dir):
                    out.append(PlannedEntry(rel, "dir", base))
                else:
                    out.append(PlannedEntry(rel, "absent", base))
            return out

    def changes(self) -> list[OverlayChange]:
        """The net changes apply would make (no-ops such as create-then-delete omitted)."""
        out = []
        for item in self.plan():
            if item.final == "file":
                out.append(
                    OverlayChange(path=item.rel, action="write", base=item.base, size=item.size)
                )
            elif item.final == "dir" and item.base.kind != "dir":
                out.append(OverlayChange(path=item.rel, action="mkdir", base=item.base))
            elif item.final == "absent" and item.base.kind != "absent":
                out.append(OverlayChange(path=item.rel, action="delete", base=item.base))
        return out

    # -- resolution --------------------------------------------------------------

    def resolve(self, path: str) -> str:
        try:
            return self._canonical(normalize(path, self._root))
        except FsError as exc:
            raise self._scrub(exc) from None

    def _canonical(self, rel: str) -> str:
        """Follow real symlinks that stay inside the root; overlay entries win."""
        pending = rel.split("/") if rel else []
        done: list[str] = []
        hops = 0
        through_overlay_dir = False
        while pending:
            name = pending.pop(0)
            current = "/".join([*done, name])
            with self._lock:
                entry = self._entries.get(current)
            if entry is _WHITEOUT:
                return "/".join([*done, name, *pending])
            if isinstance(entry, _File):
                if pending:
                    raise NotADirectory(f"{current} is not a directory")
                done.append(name)
                continue
            if isinstance(entry, _Dir):
                through_overlay_dir = True
                done.append(name)
                continue
            try:
                st = os.lstat(os.path.join(self._root, current))
            except FileNotFoundError:
                return "/".join([*done, name, *pending])
            except NotADirectoryError:
                if through_overlay_dir:  # an overlay directory replaced a real file
                    return "/".join([*done, name, *pending])
                raise NotADirectory(f"{'/'.join(done)} is not a directory") from None
            except OSError as exc:
                raise translate_oserror(exc, rel) from None
            if stat_mod.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_HOPS:
                    raise FsError(f"{rel}: too many levels of symbolic links")
                try:
                    target = os.readlink(os.path.join(self._root, current))
                except OSError as exc:
                    raise translate_oserror(exc, rel) from None
                joined = posixpath.join(self._root, *done, target)
                try:
                    new = normalize(joined, self._root, strip=False)
                except PathOutOfScope:
                    raise PathOutOfScope(
                        f"{current} is a symlink that leads outside the workspace"
                    ) from None
                pending = (new.split("/") if new else []) + pending
                done = []
                through_overlay_dir = False
                continue
            if pending and not stat_mod.S_ISDIR(st.st_mode):
                raise NotADirectory(f"{current} is not a directory")
            done.append(name)
        return "/".join(done)

    def _lookup(self, rel: str) -> _Entry | _Hidden | None:
        """The entry deciding ``rel`` (caller holds the lock); None: the real tree decides."""
        entry = self._entries.get(rel)
        if entry is not None:
            return entry
        if not self._entries:
            return None
        parent = rel
        while parent:
            parent = posixpath.dirname(parent)
            above = self._entries.get(parent)
            if above is _WHITEOUT or isinstance(above, _File):
                return _HIDDEN
        return None

    def _union_kind(self, rel: str) -> tuple[UnionKind, _Entry | _Hidden | None]:
        if rel == "":
            return "dir", None
        with self._lock:
            entry = self._lookup(rel)
        if entry is _HIDDEN or entry is _WHITEOUT:
            return "absent", entry
        if isinstance(entry, _File):
            return "file", entry
        if isinstance(entry, _Dir):
            return "dir", entry
        st = self._real_stat(rel)
        return ("absent" if st is None else st.kind), None

    def _real_stat(self, rel: str) -> FileStat | None:
        try:
            return self.real.stat(rel)
        except (NotADirectory, NotFound):
            return None

    # -- queries -----------------------------------------------------------------

    def stat(self, path: str) -> FileStat | None:
        rel = self.resolve(path)
        if rel == "":
            return self.real.stat("")
        with self._lock:
            entry = self._lookup(rel)
        if entry is _HIDDEN or entry is _WHITEOUT:
            return None
        if isinstance(entry, _File):
            return FileStat("file", entry.size, entry.mtime_ns)
        if isinstance(entry, _Dir):
            real = self._real_stat(rel)
            if real is not None and real.kind == "dir":
                return real
            return FileStat("dir", 0, entry.mtime_ns)
        return self._real_stat(rel)

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        rel = self.resolve(path)
        if rel == "":
            raise IsADirectory("the workspace root is a directory")
        for _ in range(_READ_RETRIES):
            with self._lock:
                entry = self._lookup(rel)
            if entry is _HIDDEN or entry is _WHITEOUT:
                raise NotFound(f"{rel}: no such file or directory")
            if isinstance(entry, _Dir):
                raise IsADirectory(f"{rel} is a directory")
            if entry is None:
                try:
                    return self._read_real(rel, limit)
                except NotADirectory:  # an overlay directory replaced a real file above it
                    raise NotFound(f"{rel}: no such file or directory") from None
            assert isinstance(entry, _File)
            try:
                with open(os.path.join(self._upper_str, entry.upper), "rb") as handle:
                    return handle.read() if limit is None else handle.read(limit)
            except FileNotFoundError:
                if self._removed:
                    raise OverlayClosed("the speculation overlay was discarded") from None
                continue  # deleted or replaced concurrently: look again
            except OSError as exc:
                raise _storage_error(exc, rel) from None
        raise NotFound(f"{rel}: no such file or directory")

    def exec_dir(self, path: str) -> str:
        rel = self.resolve(path)
        kind, _ = self._union_kind(rel)
        if kind == "absent":
            raise NotFound(f"{rel or '.'}: no such directory")
        if kind != "dir":
            raise NotADirectory(f"{rel} is not a directory")
        try:
            return self.real.exec_dir(rel)
        except (NotFound, NotADirectory):
            raise NotFound(
                f"{rel}: this directory exists only in the speculation; commands run "
                "in the real workspace"
            ) from None

    # -- mutations -----------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes) -> None:
        with self._operation():
            rel = self.resolve(path)
            if rel == "":
                raise IsADirectory("cannot write to the workspace root")
            with self._path_lock(rel):
                self._write(rel, bytes(data))

    def _write(self, rel: str, data: bytes) -> None:
        kind, _ = self._union_kind(rel)
        if kind == "dir":
            raise IsADirectory(f"{rel} is a directory")
        if kind == "other":
            raise FsError(
                f"{rel} is not a regular file (device, FIFO or socket); "
                "the speculation cannot change it"
            )
        size = len(data)
        with self._lock:
            current = self._entries.get(rel)
            delta = size - (current.size if isinstance(current, _File) else 0)
            reserve = max(delta, 0)
            if reserve and self._used + self._reserved + reserve > self.max_bytes:
                raise OverlayFull(
                    f"{rel}: the speculation overlay is full ({self._used} of "
                    f"{self.max_bytes} bytes used; this write needs {reserve} more)"
                )
            self._reserved += reserve
            name = self._upper_names.get(rel)
            if name is None:
                name = f"f{next(self._name_counter):06d}"
                self._upper_names[rel] = name
            first = rel not in self._bases
        upper_path = os.path.join(self._upper_str, name)
        registered = False
        try:
            # Hash only: the new content replaces the original wholesale, so
            # copying it here would put up to the whole original file into the
            # upper layer, unbounded by max_bytes.
            base = self._first_base(rel) if first else None
            self._before_commit(rel)
            mtime_ns = self._write_upper(name, data, rel)
            digest = hashlib.sha256(data).hexdigest()  # on the tool's thread, not on Tab's path
            with self._lock:
                current = self._entries.get(rel)
                if isinstance(current, _Dir):  # a write below it made it a directory meanwhile
                    raise IsADirectory(f"{rel} is a directory")
                self._ensure_dirs(rel, include_self=False)
                if base is not None:
                    self._bases.setdefault(rel, base)
                self._used += size - (current.size if isinstance(current, _File) else 0)
                self._set_entry(rel, _File(name, size, mtime_ns, digest))
                registered = True
        finally:
            with self._lock:
                self._reserved -= reserve
                leftover = not registered and not isinstance(self._entries.get(rel), _File)
            if leftover:
                _unlink_quietly(upper_path)

    def _before_commit(self, rel: str) -> None:
        """Test seam: called in the middle of a write (after the base is recorded)."""

    def _write_upper(self, name: str, data: bytes, rel: str) -> int:
        """Replace the upper file ``name`` atomically; its mtime in ns."""
        tmp = os.path.join(self._upper_str, f".{name}.{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                write_all(fd, data)
                mtime_ns = os.fstat(fd).st_mtime_ns
            finally:
                os.close(fd)
            os.replace(tmp, os.path.join(self._upper_str, name))
        except OSError as exc:
            _unlink_quietly(tmp)
            if self._removed or (exc.errno == errno.ENOENT and self._closed):
                raise OverlayClosed("the speculation overlay was discarded") from None
            raise _storage_error(exc, rel) from None
        return mtime_ns

    def delete(self, path: str) -> None:
        with self._operation():
            rel = self.resolve(path)
            if rel == "":
                raise FsError("cannot delete the workspace root")
            with self._path_lock(rel):
                kind, _ = self._union_kind(rel)
                if kind == "absent":
                    raise NotFound(f"{rel}: no such file or directory")
                if kind == "dir" and self._walk_children(rel) != ([], []):
                    raise FsError(f"{rel}: directory not empty")
                with self._lock:
                    first = rel not in self._bases
                base = self._first_base(rel) if first else None
                with self._lock:
                    if base is not None:
                        self._bases.setdefault(rel, base)
                    current = self._entries.get(rel)
                    if isinstance(current, _File):
                        self._used -= current.size
                    self._set_entry(rel, _WHITEOUT)
                if isinstance(current, _File):
                    _unlink_quietly(os.path.join(self._upper_str, current.upper))

    def mkdir(self, path: str) -> None:
        with self._operation():
            rel = self.resolve(path)
            if rel == "":
                return
            with self._path_lock(rel):
                kind, _ = self._union_kind(rel)
                if kind == "dir":
                    return
                if kind != "absent":
                    raise NotADirectory(f"{rel} exists and is not a directory")
                with self._lock:
                    self._ensure_dirs(rel, include_self=True)

    def _ensure_dirs(self, rel: str, *, include_self: bool) -> None:
        """Make every ancestor (and ``rel`` itself) a directory in the union (lock held)."""
        chain: list[str] = []
        current = rel if include_self else posixpath.dirname(rel)
        while current:
            chain.append(current)
            current = posixpath.dirname(current)
        for directory in reversed(chain):
            entry = self._lookup(directory)
            if isinstance(entry, _Dir):
                continue
            if isinstance(entry, _File):
                raise NotADirectory(f"{directory} is not a directory")
            if entry is None:
                real = self._real_stat(directory)
                if real is not None and real.kind == "dir":
                    continue
                if real is not None:
                    raise NotADirectory(f"{directory} is not a directory")
            if directory not in self._bases:
                self._bases[directory] = self._quick_base(directory)
            self._set_entry(directory, _Dir(time.time_ns()))

    def _set_entry(self, rel: str, entry: _Entry) -> None:
        """Record ``rel``'s entry and index it (lock held); entries are never dropped."""
        if rel not in self._entries:
            parent, _, name = rel.rpartition("/")
            self._children.setdefault(parent, set()).add(name)
        self._entries[rel] = entry

    def _scrub(self, exc: FsError) -> FsError:
        """Never let the overlay's own location reach a tool (defence in depth)."""
        text = str(exc)
        secret = str(self.directory)
        if secret not in text:
            return exc
        return type(exc)(text.replace(secret, "<overlay>"))


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _storage_error(exc: OSError, rel: str) -> FsError:
    """An upper-layer failure, described without the upper layer's path."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return OverlayFull(f"{rel}: no space left for the speculation overlay")
    return FsError(f"{rel}: the speculation overlay could not store it ({exc.strerror or 'error'})")
