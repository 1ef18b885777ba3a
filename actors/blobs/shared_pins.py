"""Pins shared between processes (and stores) that use one blob directory.

Why: pins (:mod:`actors.blobs.pins`) live in memory, so a second Fore
process on the same ``blob_dir`` did not see them, and its retention deleted
blobs that a live session of the first process still showed as
``[blob:<id>]``. A blob directory is meant to be shareable (temp files carry
their writer's pid for the same reason), so each store *publishes* its pins
and every collection honours what the live ones publish.

Layout, under ``<root>/blobs/.pins/``::

    <token>.lock   held with an exclusive flock by its store for as long as it publishes
    <token>.pins   that store's pinned ids: lines of space-separated UUIDs (append-only,
                   compacted by an atomic rewrite)
    gc.lock        shared by a pinner while it pins, exclusive by a collector while it
                   re-checks and removes one blob

``<token>`` is ``<pid>-<random hex>``: one per :class:`PinJournal` (so two
stores in one process publish separately; ``flock`` locks belong to an open
file, not to a process, so they exclude each other there too).

Rules:

* **Liveness is the kernel's word.** A ``<token>.lock`` whose flock can be
  taken has no owner -- its process died (the kernel drops the lock with the
  process), or it closed its store -- so its pins are not honoured and its
  files are removed. No pid is trusted (pids are reused).
* **A pin is published before it counts.** :class:`PinJournal` appends the new
  ids while holding ``gc.lock`` shared; a collector holds it exclusively
  while it re-reads every live store's pins and removes one blob. So a pin
  either reaches the file before the re-check (the blob stays) or after the
  blob is gone -- the same as pinning a blob retention had already removed.
* **Every wait has a deadline.** Locks are taken non-blocking and retried
  until a deadline: a pinner that cannot get ``gc.lock`` in time pins anyway
  (logged; only the narrow race above reopens), a collector that cannot get
  it skips that blob (kept; retried next run).
* **Releases cost nothing at once.** Releasing a session only marks the file
  stale (it over-protects, the safe direction); :meth:`PinJournal.rewrite`
  compacts it on the blocking lane. A release during a compaction marks it
  stale again (staleness is cleared *before* the snapshot is taken).
* **A file read is a file held.** A collector keeps every live store's pin
  file open and reads only what was appended since; a compaction is a new
  file (a new inode: the old one cannot be reused while it is held open),
  read whole. Identity by name, inode and size alone was fooled by a
  compaction that got the freed inode of the file read before back at the
  same size (ext4 reuses inodes at once), and missed the pins in it.
* **A store never reads its own file.** Its pins are in memory; its name is
  asked before and after each listing, and a withdrawal forgets the name only
  after the files are gone (a stale own file taken for another store's kept
  released blobs).

Limits: ``flock`` must work on the file system (local file systems do; on one
where it does not, every other store's pins count as live and their files are
never removed -- over-protection, never a deleted pinned blob). Files of a
store that was never closed (a process killed with SIGKILL) are removed by
the next collection of any store on the directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from fore.actors.core.logs import get_logger

__all__ = ["PINS_DIR", "ForeignPins", "LockState", "PinJournal", "gc_lock"]

log = get_logger(__name__)

PINS_DIR = ".pins"
LOCK_SUFFIX = ".lock"
DATA_SUFFIX = ".pins"
GC_LOCK = "gc.lock"
PIN_LOCK_TIMEOUT_S = 2.0
"""How long a pinner waits for ``gc.lock`` (a collector holds it for one removal)."""
COLLECT_LOCK_TIMEOUT_S = 5.0
"""How long a collector waits for ``gc.lock`` before it keeps the blob for the next run."""
MAX_PIN_FILE_BYTES = 64 * 1024 * 1024
"""Bytes read of one store's pin file (~1.7 million pins): a bigger one is not read,
and a collector that cannot read a live store's pins removes nothing."""
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _try_flock(fd: int, operation: int, deadline: float) -> bool:
    """``flock(fd, operation | LOCK_NB)`` retried until ``deadline``; whether it was taken."""
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EINTR):
                raise
        now = time.monotonic()
        if now >= deadline:
            return False
        time.sleep(min(delay, deadline - now))
        delay = min(delay * 2, 0.05)


LockState = Literal["taken", "busy", "unsupported"]
"""What :func:`gc_lock` got: the lock, a timeout, or a file system without ``flock``."""


@contextlib.contextmanager
def gc_lock(pins_dir: Path, *, exclusive: bool, timeout: float) -> Iterator[LockState]:
    """Hold ``gc.lock`` (shared or exclusive) for the block; yields what happened.

    A fresh open file per acquisition, so two holders in one process exclude
    each other as two processes do. ``"busy"`` after ``timeout``;
    ``"unsupported"`` when the lock file cannot be made or locked (no
    ``flock`` on this file system): the caller decides what is safe.
    """
    path = pins_dir / GC_LOCK
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)
        except FileNotFoundError:
            pins_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | _O_CLOEXEC, 0o644)
    except OSError as exc:
        log.warning("blob_gc_lock_unavailable", error=str(exc))
        yield "unsupported"
        return
    try:
        operation = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        state: LockState
        try:
            taken = _try_flock(fd, operation, time.monotonic() + timeout)
            state = "taken" if taken else "busy"
        except OSError as exc:  # e.g. ENOLCK: no flock on this file system
            log.warning("blob_gc_lock_unavailable", error=str(exc))
            state = "unsupported"
        yield state
    finally:
        os.close(fd)  # closing the last fd of the open file drops its lock


def _format_ids(ids: Iterable[uuid.UUID]) -> bytes:
    return (" ".join(str(i) for i in ids) + "\n").encode("ascii")


def parse_pin_data(data: bytes) -> set[uuid.UUID]:
    """The ids in a pin file's bytes; a torn last line and foreign tokens are ignored."""
    found: set[uuid.UUID] = set()
    end = data.rfind(b"\n")
    for line in data[: end + 1].split(b"\n"):
        for word in line.split():
            if len(word) != 36:
                continue
            try:
                text = word.decode("ascii")
                value = uuid.UUID(text)
            except (UnicodeDecodeError, ValueError):
                continue
            if str(value) == text:
                found.add(value)
    return found


@dataclass
class _Published:
    """A journal's published name and descriptors (what its finalizer withdraws)."""

    token: str | None = None
    lock_fd: int | None = None
    data_fd: int | None = None
    pid: int = 0
    """The process that published (a forked child must not withdraw its parent's files)."""

    def withdraw(self, pins_dir: Path) -> None:
        """Remove the files, close the descriptors (dropping the lock), then forget the name.

        Idempotent. The name goes last: a collection of this store takes a
        file under its own name for its own and never reads it, so while the
        files are still there (their lock still held) the name must still be
        known -- forgotten first, the stale file passed for another live store's.
        """
        token, lock_fd, data_fd = self.token, self.lock_fd, self.data_fd
        if token is not None and self.pid == os.getpid():
            for suffix in (DATA_SUFFIX, LOCK_SUFFIX):
                with contextlib.suppress(OSError):
                    (pins_dir / f"{token}{suffix}").unlink()
        for fd in (data_fd, lock_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.token = self.lock_fd = self.data_fd = None


class PinJournal:
    """This store's pins, published under ``pins_dir`` for the other stores.

    Opened on the first :meth:`append` or :meth:`rewrite` (a store that never
    pins publishes nothing); :meth:`close` withdraws the publication and the
    next pin opens a new one. Thread-safe; every method does disk I/O, so
    callers run it off dispatcher threads (the blob-store actor uses the
    blocking lane).
    """

    def __init__(self, pins_dir: Path, *, lock_timeout_s: float = PIN_LOCK_TIMEOUT_S) -> None:
        self.pins_dir = Path(pins_dir)
        self.lock_timeout_s = lock_timeout_s
        self._lock = threading.RLock()
        self._files = _Published()
        self._stale = False
        # A journal dropped without close() (a store nobody closed) still
        # withdraws its files and descriptors, at the latest at exit.
        self._finalizer = weakref.finalize(self, self._files.withdraw, self.pins_dir)

    def __repr__(self) -> str:
        return f"PinJournal({self.pins_dir}, token={self._files.token})"

    @property
    def token(self) -> str | None:
        """The published name (``<pid>-<hex>``), or None while nothing is published."""
        return self._files.token

    @property
    def is_open(self) -> bool:
        return self._files.lock_fd is not None

    @property
    def stale(self) -> bool:
        """Whether the file lists ids no longer pinned (a release since the last rewrite)."""
        return self._stale

    def mark_stale(self) -> None:
        self._stale = True

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Hold ``gc.lock`` shared around a pin (see the module docs); never fails."""
        with gc_lock(self.pins_dir, exclusive=False, timeout=self.lock_timeout_s) as state:
            if state != "taken":
                log.warning("blob_pin_unguarded", pins_dir=str(self.pins_dir), lock=state)
            yield

    def append(
        self, ids: Collection[uuid.UUID], everything: Callable[[], Iterable[uuid.UUID]]
    ) -> None:
        """Publish ``ids``; ``everything()`` (all pinned ids) is written if the file is new."""
        with self._lock:
            files = self._files
            if files.data_fd is not None and not self._published():
                # Someone removed our files (by hand, or a collector that could
                # not tell we live): publish afresh under a new name.
                log.warning("blob_pins_republished", token=files.token)
                self.close()
            if files.data_fd is None:
                if files.lock_fd is None:
                    self._open()
                self._replace_with(everything)
                return
            if ids:
                self._write_all(files.data_fd, _format_ids(ids))

    def _published(self) -> bool:
        """Whether our pin file is still the one under our name (one stat)."""
        files = self._files
        assert files.token is not None and files.data_fd is not None
        try:
            named = os.stat(self.pins_dir / f"{files.token}{DATA_SUFFIX}").st_ino
        except OSError:
            return False
        return named == os.fstat(files.data_fd).st_ino

    def rewrite(self, everything: Callable[[], Iterable[uuid.UUID]]) -> None:
        """Replace the file with exactly ``everything()`` (atomically: readers see old or new).

        With no ids left the publication is withdrawn (:meth:`close`): a store
        whose sessions all closed holds no file and no descriptor.
        """
        with self._lock:
            self._stale = False  # before the snapshot: a release after it marks it again
            try:
                wanted = list(everything())
                if not wanted:
                    self.close()
                    return
                if self._files.lock_fd is None:
                    self._open()
                self._replace(wanted)
            except BaseException:
                self._stale = True
                raise

    def close(self) -> None:
        """Withdraw the publication: files removed, lock released. Idempotent."""
        with self._lock:
            self._stale = False
            self._files.withdraw(self.pins_dir)

    # -- internals -----------------------------------------------------------------

    def _open(self) -> None:
        """Create and lock ``<token>.lock`` (retrying if a collector took it as stale)."""
        self.pins_dir.mkdir(parents=True, exist_ok=True)
        for _attempt in range(8):
            token = f"{os.getpid()}-{uuid.uuid4().hex[:16]}"
            path = self.pins_dir / f"{token}{LOCK_SUFFIX}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
            try:
                # A collector may take a brand-new lock file for a dead one and
                # remove it: lock, then check the name still means this file.
                if not _try_flock(fd, fcntl.LOCK_EX, time.monotonic() + self.lock_timeout_s):
                    raise BlockingIOError("lock file busy")
                if os.stat(path).st_ino != os.fstat(fd).st_ino:
                    raise FileNotFoundError(path)
            except FileNotFoundError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    path.unlink()
                raise
            self._files.token, self._files.lock_fd, self._files.pid = token, fd, os.getpid()
            return
        raise OSError(f"could not publish pins in {self.pins_dir}")

    def _replace_with(self, everything: Callable[[], Iterable[uuid.UUID]]) -> None:
        """Write a fresh file of ``everything()``; staleness is cleared before the snapshot."""
        self._stale = False
        try:
            self._replace(everything())
        except BaseException:
            self._stale = True
            raise

    def _replace(self, ids: Iterable[uuid.UUID]) -> None:
        token = self._files.token
        assert token is not None
        target = self.pins_dir / f"{token}{DATA_SUFFIX}"
        tmp = self.pins_dir / f"{token}.tmp-{uuid.uuid4().hex[:8]}"
        data = _format_ids(sorted(ids))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
        try:
            self._write_all(fd, data)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        new_fd = os.open(target, os.O_WRONLY | os.O_APPEND | _O_CLOEXEC)
        if self._files.data_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._files.data_fd)
        self._files.data_fd = new_fd

    @staticmethod
    def _write_all(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]


@dataclass
class _Seen:
    """A live store's pin file as read so far, held open.

    Holding the file open is what makes "same inode, so the same file" true:
    an inode cannot be handed to a new file while a descriptor keeps the old
    one. Compared by (device, inode) and size alone, a compaction that got the
    inode of the file read before back (ext4 reuses a freed inode at once) with
    the same size passed for the old file, and its new pins went unseen.
    """

    fd: int
    file: tuple[int, int]
    """(device, inode) of the open file: a rewrite is a new file, appends grow this one."""
    consumed: int
    """Bytes parsed: up to the end of the last whole line (a torn line is read again)."""
    ids: set[uuid.UUID]


def _close_all(seen: dict[str, _Seen]) -> None:
    for entry in seen.values():
        with contextlib.suppress(OSError):
            os.close(entry.fd)
    seen.clear()


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes at ``offset`` (fewer only at the end of the file)."""
    parts: list[bytes] = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            break
        parts.append(part)
        size -= len(part)
        offset += len(part)
    return b"".join(parts)


def _nobody() -> Collection[str]:
    return ()


LEFTOVER_GRACE_S = 60.0
"""Age after which a pin file or temp file without a lock file is removed.

A directory listing may return a file created during it without the lock
file created just before; a lock file older than this is always listed."""


class ForeignPins:
    """What the *other* live stores on a blob directory pin (the read side).

    :meth:`refresh` lists ``pins_dir``, tests the lock of every store it has
    not seen alive (``full``: of every store) -- taking it means its owner is
    gone, and its files are removed -- and reads what changed in the pin
    files: each is held open, so a refresh per removal costs a listing, a
    stat per store and the bytes appended since (a compaction, a new file,
    is read whole). ``own()`` names this store's own journal (its pins are in
    memory), asked before and after the listing, so a journal that changes
    its name meanwhile is never taken for another store. When the listing or
    a live store's file cannot be read -- or a file is over
    :data:`MAX_PIN_FILE_BYTES` -- :attr:`certain` is False and a collector
    removes nothing. Thread-safe; :meth:`close` (or garbage collection)
    closes the files held.
    """

    def __init__(self, pins_dir: Path) -> None:
        self.pins_dir = Path(pins_dir)
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}
        self._live: set[str] = set()
        self.certain = True
        """False when the last refresh could not read everything: remove nothing then."""
        self._finalizer = weakref.finalize(self, _close_all, self._seen)

    def close(self) -> None:
        """Close the files held open (a later refresh opens them again). Idempotent."""
        with self._lock:
            _close_all(self._seen)
            self._live.clear()

    def refresh(self, own: Callable[[], Collection[str]] = _nobody, *, full: bool = False) -> None:
        """Bring the view up to date (see the class docs)."""
        with self._lock:
            self.certain = True
            mine = set(own())
            try:
                names = os.listdir(self.pins_dir)
            except FileNotFoundError:
                names = []
            except OSError as exc:
                log.warning("blob_pins_unreadable", pins_dir=str(self.pins_dir), error=str(exc))
                self.certain = False
                return
            mine.update(own())
            locks = {n[: -len(LOCK_SUFFIX)] for n in names if n.endswith(LOCK_SUFFIX)}
            locks.discard(GC_LOCK[: -len(LOCK_SUFFIX)])
            live = {
                token
                for token in locks
                if token not in mine and ((token in self._live and not full) or self._alive(token))
            }
            self._live = live
            for token in list(self._seen):
                if token not in live:
                    self._forget(token)
            for token in live:
                self._read(token)
            if full:
                self._remove_leftovers(names, locks)

    def __contains__(self, blob_id: object) -> bool:
        with self._lock:
            return any(blob_id in seen.ids for seen in self._seen.values())

    def pinned(self) -> frozenset[uuid.UUID]:
        """Every id the live stores seen by the last refresh pin (a snapshot)."""
        with self._lock:
            return frozenset().union(*(seen.ids for seen in self._seen.values()))

    @property
    def stores(self) -> int:
        """Live stores (other than ``own``) seen by the last refresh."""
        with self._lock:
            return len(self._live)

    def _remove_leftovers(self, names: list[str], locks: set[str]) -> None:
        """Pin and temp files of stores that are gone (no lock file), once old enough."""
        now = time.time()
        for name in names:
            token = name.split(".", 1)[0]
            if name.endswith(LOCK_SUFFIX) or token in locks:
                continue
            path = self.pins_dir / name
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime >= LEFTOVER_GRACE_S:
                    path.unlink()

    def _alive(self, token: str) -> bool:
        """Whether a store holds ``<token>.lock``; if none does, remove its files."""
        path = self.pins_dir / f"{token}{LOCK_SUFFIX}"
        try:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError:
            return True  # cannot tell: honour its pins
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                # Held (EWOULDBLOCK), or no flock on this file system: either
                # way its pins are honoured.
                return True
            # Nobody holds it: its store is gone. Remove its files while
            # holding the lock (a store that is just creating this file
            # notices the removal and picks another name).
            for suffix in (DATA_SUFFIX, LOCK_SUFFIX):
                with contextlib.suppress(OSError):
                    (self.pins_dir / f"{token}{suffix}").unlink()
            log.info("blob_pins_of_gone_store_removed", token=token)
            return False
        finally:
            os.close(fd)

    def _forget(self, token: str) -> None:
        seen = self._seen.pop(token, None)
        if seen is not None:
            with contextlib.suppress(OSError):
                os.close(seen.fd)

    def _read(self, token: str) -> None:
        """Read what is new in ``token``'s pin file (a new file whole, else its tail)."""
        path = self.pins_dir / f"{token}{DATA_SUFFIX}"
        try:
            named = os.stat(path)
            seen = self._seen.get(token)
            if seen is None or seen.file != (named.st_dev, named.st_ino):
                self._forget(token)  # new, or replaced by a compaction: read it whole
                fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
                try:
                    opened = os.fstat(fd)
                except OSError:
                    os.close(fd)
                    raise
                seen = _Seen(fd, (opened.st_dev, opened.st_ino), 0, set())
                self._seen[token] = seen
            size = os.fstat(seen.fd).st_size
            if size > MAX_PIN_FILE_BYTES:
                log.warning("blob_pin_file_too_big", token=token, bytes=size)
                self.certain = False  # pins we will not read: remove nothing
                return
            if size <= seen.consumed:
                return
            data = _pread_all(seen.fd, size - seen.consumed, seen.consumed)
        except FileNotFoundError:
            self._forget(token)  # withdrawn: its store closed (or it was never written)
            return
        except OSError as exc:
            log.warning("blob_pin_file_unreadable", token=token, error=str(exc))
            self.certain = False  # a live store whose pins we cannot read
            return
        whole = data.rfind(b"\n") + 1  # a torn last line is read again next time
        seen.ids.update(parse_pin_data(data[:whole]))
        seen.consumed += whole
