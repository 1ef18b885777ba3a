"""What a touched path held when the speculation started: the overlay's *bases*.

The first write, delete or mkdir of a path records its **base**: what the real
path held (sha256, size, mtime of a file, or "absent"/"dir"). Apply refuses to
run when a real path no longer matches its base. The base must be what the
path held when the speculation *started*: the speculation computes its
changes from the session's history, so a user edit made after the start --
before or after the speculation's first touch, whether or not the
speculation read the file, through the overlay or with ``shell cat`` -- must
never be replaced. Two mechanisms make it so:

* **Changed since the start** (:mod:`actors.tools.fsclock`). The overlay knows
  its start instant (``started``: the coarse file clock when the speculation
  was set up). At a path's first touch, a real path whose ctime is at or after
  that instant -- the kernel sets ctime on every edit, ``chmod``, rename
  (editors save by renaming a new file over the old) and link change, and no
  tool can set it back -- has changed since the start, unless it still carries
  exactly the identity one of Fore's own writes left before the start. A path
  that does not exist is judged by its deepest existing directory, whose ctime
  moves when an entry is added, removed or renamed in it (the user deleted
  the file the speculation now recreates). Either way the base is marked
  ``changed_since_start`` and apply reports a conflict, whatever it finds.
* **Changed since the first touch.** Apply compares each real path with its
  base (content hash, kind). So the base is also what the speculation *saw*:
  the first read of a file through the overlay remembers the sha256 of the
  bytes it returned (or "absent" when there was no file), and a later first
  write or delete of that path takes that as its base. A read that returned
  only a prefix (``limit``) remembers the file's identity (inode, size, mtime,
  ctime) instead; if the file still has that identity at the first write its
  current hash is the base, else the base stays "unknown content" and apply
  reports a conflict.

A write never copies the original into the upper layer: the new content
replaces it wholesale, so the original is only hashed. (Edits read the
original through the overlay -- it falls through to the real file -- and
write the result, so the size bound counts exactly the bytes the speculation
wrote.)

A mixin of :class:`~fore.actors.overlay.fs.OverlayFs` (not used alone): the
first read of a real path remembers what it returned (:meth:`_read_real`),
the first change of a path takes its base (:meth:`_first_base`,
:meth:`_quick_base` for a path that becomes a directory). The overlay's
state it reads is declared below and set up by :meth:`OverlayFs.__init__`.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_mod
import threading

from fore.actors.core.logs import get_logger
from fore.actors.overlay._realfs import DirCache, Ident, PathChanged, identity, kind_of, observe
from fore.actors.overlay.tree import _ABSENT_SEEN, _Seen
from fore.actors.tools.fs import NotFound, WorkspaceFs, translate_oserror
from fore.actors.tools.fsclock import Instant, changed_since
from fore.messages.overlay import FileBase

# The overlay's one logger: its events keep the name they had before the split.
log = get_logger("fore.actors.overlay.fs")


class BaseRecorder:
    """What the speculation saw, and each touched path's base (a mixin of ``OverlayFs``)."""

    # The overlay's state these methods use (set up by OverlayFs; its one lock).
    started: Instant
    real: WorkspaceFs
    overlay_id: str
    _multigrain: bool
    _lock: threading.RLock
    _root: str
    _bases: dict[str, FileBase]
    _seen: dict[str, _Seen]

    def _read_real(self, rel: str, limit: int | None) -> bytes:
        """Read the real file, remembering what was seen if it is the first read."""
        with self._lock:
            first = rel not in self._bases and rel not in self._seen
        if not first:
            return self.real.read_bytes(rel, limit)
        # Identity *before* the read: if the file changes in between, the identity
        # is the old one and a later write's check sees the change (a false
        # conflict at worst, never a missed one).
        try:
            before: os.stat_result | None = os.lstat(os.path.join(self._root, rel))
        except OSError:
            before = None
        try:
            data = self.real.read_bytes(rel, limit)
        except NotFound:
            self._remember(rel, _ABSENT_SEEN)
            raise
        if before is None:  # created between the two calls: only a whole read is known
            if limit is None:
                self._remember(rel, _Seen("file", hashlib.sha256(data).hexdigest(), len(data)))
        elif stat_mod.S_ISREG(before.st_mode):
            if limit is None or len(data) < limit or len(data) == before.st_size:
                seen = _Seen(
                    "file", hashlib.sha256(data).hexdigest(), len(data), before.st_mtime_ns
                )
            else:  # only a prefix: the content seen is known by identity only
                seen = _Seen("file", None, before.st_size, before.st_mtime_ns, Ident.of(before))
            self._remember(rel, seen)
        return data

    def _remember(self, rel: str, seen: _Seen) -> None:
        with self._lock:
            if rel not in self._bases:
                self._seen.setdefault(rel, seen)

    def _first_base(self, rel: str) -> FileBase:
        """The base of ``rel`` at its first change: what it held when the speculation started.

        A path read before is based on that read (see the module docs), so a
        user edit between the read and this change is caught by apply; any
        other path on its real state now. Either is marked
        ``changed_since_start`` when the real path changed after the start.
        """
        with self._lock:
            seen = self._seen.get(rel)
        if seen is None:
            base, ident = self._capture(rel)
        elif seen.ident is None:
            base = seen.base()  # the hash of exactly the bytes the speculation read
            ident = self._identity(rel)
        else:
            now, ident = self._capture(rel)
            if ident == seen.ident:
                base = now  # unchanged since the partial read: its content is what was read
            else:
                log.info("overlay_base_changed_since_read", overlay=self.overlay_id, path=rel)
                base = seen.base()  # no hash: apply reports the change as a conflict
        if self._changed_since_start(rel, ident):
            log.info("overlay_base_changed_since_start", overlay=self.overlay_id, path=rel)
            return base.model_copy(update={"changed_since_start": True})
        return base

    def _changed_since_start(self, rel: str, ident: Ident | None) -> bool:
        """Whether the real ``rel`` (identity ``ident``; None: absent) changed after the start.

        An absent path is judged by its deepest existing directory: an entry
        added, removed or renamed there after the start (the user deleted the
        file the speculation is about to recreate) moves that directory's
        ctime. A path whose directories cannot be examined counts as changed.
        """
        if ident is not None:
            return changed_since(ident, self.started, multigrain=self._multigrain)
        parts = rel.split("/")[:-1]
        try:
            with DirCache(self._root) as cache:
                fd = cache.open("")
                for index in range(1, len(parts) + 1):
                    try:
                        fd = cache.open("/".join(parts[:index]))
                    except (OSError, PathChanged):
                        break
                st = os.fstat(fd)
        except OSError:
            return True
        return changed_since(st, self.started, multigrain=self._multigrain)

    def _identity(self, rel: str) -> Ident | None:
        try:
            with DirCache(self._root) as cache:
                return identity(cache, rel)
        except PathChanged:
            return None
        except OSError as exc:
            raise translate_oserror(exc, rel) from None

    def _capture(self, rel: str) -> tuple[FileBase, Ident | None]:
        """The real state of ``rel`` now (a regular file is hashed) and its identity."""
        try:
            with DirCache(self._root) as cache:
                observed = observe(cache, rel)
        except PathChanged:
            # An overlay directory replaced a real file above it.
            return FileBase.absent(), None
        except OSError as exc:
            raise translate_oserror(exc, rel) from None
        return observed.base, observed.ident

    def _quick_base(self, rel: str) -> FileBase:
        """The base of a path that becomes a directory (no content to hash)."""
        st: os.stat_result | None = None
        try:
            with DirCache(self._root) as cache:
                parent_fd, name = cache.lookup_parent(rel)
                if parent_fd is not None:
                    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except (OSError, PathChanged):
            st = None
        if st is None:
            base, ident = FileBase.absent(), None
        else:
            base = FileBase(kind=kind_of(st.st_mode), size=0, mtime_ns=st.st_mtime_ns)
            ident = Ident.of(st)
        if self._changed_since_start(rel, ident):
            return base.model_copy(update={"changed_since_start": True})
        return base
