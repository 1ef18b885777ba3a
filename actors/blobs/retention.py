"""Retention of the blob directory: what is stored, what may go, and the sweep.

A mixin of :class:`~fore.actors.blobs.fs_store.FsBlobStore` (not used
alone): listing the stored blobs, deleting one, :meth:`Retention.collect`
(age and size limits that never remove a referenced or pinned blob, whichever
process pinned it) and :meth:`Retention.sweep_temp` (leftovers of interrupted
writes, never a temp file a live writer may own). The store's state it uses
is declared below and set up by :meth:`FsBlobStore.__init__`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fore.actors.blobs.fs_layout import (
    _INFLIGHT_IDS,
    _INFLIGHT_LOCK,
    _INFLIGHT_TEMPS,
    _KINDS,
    _SIDECARS,
    INDEX_SUFFIX,
    JSON_INDEX_SUFFIX,
    JSON_SUFFIX,
    TEMP_PREFIX,
    TEXT_SUFFIX,
    parse_blob_id,
)
from fore.actors.blobs.line_index import LineIndex
from fore.actors.blobs.pins import PinTable
from fore.actors.blobs.shared_pins import COLLECT_LOCK_TIMEOUT_S, ForeignPins, gc_lock
from fore.actors.core.logs import get_logger
from fore.messages.blob_store import CollectReport

if TYPE_CHECKING:
    from fore.messages.blobs import BlobKind

# The store's one logger: its events keep the name they had before the split.
log = get_logger("fore.actors.blobs.fs_store")


def _temp_owner(name: str) -> int | None:
    """The pid in a ``.tmp-<pid>-<hex><suffix>`` name (None: a legacy or foreign name)."""
    pid, dash, _rest = name[len(TEMP_PREFIX) :].partition("-")
    if not dash or not pid.isascii() or not pid.isdigit():
        return None
    value = int(pid)
    return value if value > 0 else None


def _pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a reused pid counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return True  # cannot tell: keep its files
    return True


@dataclass(frozen=True)
class _Entry:
    blob_id: uuid.UUID
    path: Path
    size: int
    mtime: float


class Retention:
    """Listing, deleting, collecting and sweeping (a mixin of ``FsBlobStore``)."""

    # The store's state this mixin reads and writes (set up by FsBlobStore).
    blobs_dir: Path
    pins: PinTable
    pins_dir: Path
    max_total_bytes: int | None
    max_age_s: float | None
    grace_s: float
    temp_grace_s: float
    _foreign: ForeignPins
    _lock: threading.Lock
    _collect_lock: threading.Lock
    _indexes: OrderedDict[uuid.UUID, LineIndex]
    _owners: OrderedDict[uuid.UUID, str]
    _dir_key: str

    if TYPE_CHECKING:  # FsBlobStore's methods this mixin calls

        def path_for(self, blob_id: uuid.UUID | str, kind: BlobKind) -> Path: ...

        def _index_path(self, blob_id: uuid.UUID) -> Path: ...

        def _json_index_path(self, blob_id: uuid.UUID) -> Path: ...

        def _owner_path(self, blob_id: uuid.UUID) -> Path: ...

        def _forget_parsed(self, blob_id: uuid.UUID) -> None: ...

    def _scan(self) -> list[_Entry]:
        entries: list[_Entry] = []
        with os.scandir(self.blobs_dir) as it:
            for entry in it:
                stem, dot, ext = entry.name.rpartition(".")
                if not dot or f".{ext}" not in (TEXT_SUFFIX, JSON_SUFFIX):
                    continue
                try:
                    blob_id = uuid.UUID(stem)
                except ValueError:
                    continue  # not ours: never touch foreign files
                if str(blob_id) != stem:
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                size = st.st_size
                sidecar = (
                    self._index_path(blob_id)
                    if ext == TEXT_SUFFIX[1:]
                    else self._json_index_path(blob_id)
                )
                with contextlib.suppress(OSError):
                    size += sidecar.stat().st_size
                entries.append(_Entry(blob_id, Path(entry.path), size, st.st_mtime))
        return entries

    def blob_ids(self) -> list[uuid.UUID]:
        """Ids of every stored blob, oldest first."""
        return [e.blob_id for e in sorted(self._scan(), key=lambda e: (e.mtime, e.blob_id))]

    def total_bytes(self) -> int:
        """Bytes used by blobs and their line indexes."""
        return sum(e.size for e in self._scan())

    def delete(self, blob_id: uuid.UUID | str) -> bool:
        """Remove one blob (and its index); ``False`` if it was not there."""
        key = parse_blob_id(blob_id)
        removed = False
        for kind in _KINDS:
            with contextlib.suppress(FileNotFoundError):
                self.path_for(key, kind).unlink()
                removed = True
        for sidecar in (self._index_path(key), self._json_index_path(key), self._owner_path(key)):
            with contextlib.suppress(FileNotFoundError):
                sidecar.unlink()
        with self._lock:
            self._indexes.pop(key, None)
            self._owners.pop(key, None)
        self._forget_parsed(key)
        return removed

    def collect(
        self,
        referenced: Collection[uuid.UUID | str] = (),
        now: float | None = None,
        *,
        pins: PinTable | None = None,
        confirm: Callable[[], Collection[uuid.UUID | str]] | None = None,
    ) -> CollectReport:
        """Apply retention; never remove a referenced or pinned blob.

        Protected are the ids in ``referenced`` (e.g.
        :func:`actors.blobs.summary.referenced_blob_ids` of live histories),
        every blob pinned in :attr:`pins`, and in ``pins`` when another table
        is passed, and every blob another live store on this directory
        publishes as pinned (:mod:`actors.blobs.shared_pins`). Pins are
        re-checked right before each removal under the directory's
        collection lock, so a pin taken while this runs -- in this process or
        another -- still protects its blob; a blob whose lock cannot be had in
        time is kept for the next run. First every
        unprotected blob older than ``max_age_s`` goes; then, oldest first,
        unprotected blobs go until the total is at most ``max_total_bytes``.
        Blobs younger than ``grace_s`` always stay. Age is ``now - mtime``
        (``now`` defaults to ``time.time()``; tests pass it).

        ``confirm`` is for references that can appear while this runs and
        whose holders pin a blob until it is referenced (a session store: a
        session appends its turn before it releases its pins). The removals
        are then planned first; ``confirm()`` is called once, after every
        planned blob was found unpinned, and what it returns is kept too;
        only then are the others removed (pins checked again, as always).
        """
        now = time.time() if now is None else now
        refs = {parse_blob_id(r) for r in referenced}
        tables = [self.pins] if pins is None or pins is self.pins else [self.pins, pins]
        journals = [t.journal for t in tables if t.journal is not None]

        def own() -> set[str]:
            """Our journals' names *now*: a compaction may withdraw one and publish anew."""
            return {token for j in journals if (token := j.token) is not None}

        foreign = self._foreign

        def is_protected(blob_id: uuid.UUID) -> bool:
            return (
                blob_id in refs
                or any(table.is_pinned(blob_id) for table in tables)
                or blob_id in foreign
            )

        def remove(entry: _Entry) -> bool | None:
            """True: removed; False: pinned after all; None: kept (lock busy, unlink failed)."""
            with gc_lock(self.pins_dir, exclusive=True, timeout=COLLECT_LOCK_TIMEOUT_S) as state:
                if state == "busy":
                    return None
                # Under the lock no pin can land: what the tables and the other
                # stores' files say now holds until the blob is gone.
                foreign.refresh(own)
                if not foreign.certain:
                    return None  # another store's pins are unreadable: keep everything
                if is_protected(entry.blob_id):
                    return False
                return True if self._remove(entry) else None

        planned: list[_Entry] = []

        def plan(entry: _Entry) -> bool:
            planned.append(entry)
            return True

        decide = remove if confirm is None else plan
        with self._collect_lock:
            for table in tables:
                table.sync()  # compact our published pins after releases
            foreign.refresh(own, full=True)  # who is alive; files of gone stores removed
            entries = sorted(self._scan(), key=lambda e: (e.mtime, e.blob_id))
            removed: list[_Entry] = []
            protected: dict[uuid.UUID, None] = {}
            kept: list[_Entry] = []
            for entry in entries:
                age = now - entry.mtime
                if self.max_age_s is not None and age > self.max_age_s:
                    if is_protected(entry.blob_id):
                        protected[entry.blob_id] = None
                    elif age >= self.grace_s:
                        outcome = decide(entry)
                        if outcome:
                            removed.append(entry)
                            continue
                        if outcome is False:
                            protected[entry.blob_id] = None
                kept.append(entry)
            total = sum(e.size for e in kept)
            if self.max_total_bytes is not None:
                survivors: list[_Entry] = []
                for index, entry in enumerate(kept):
                    if total <= self.max_total_bytes:
                        survivors.extend(kept[index:])
                        break
                    if is_protected(entry.blob_id):
                        protected[entry.blob_id] = None
                    elif now - entry.mtime >= self.grace_s:
                        outcome = decide(entry)
                        if outcome:
                            removed.append(entry)
                            total -= entry.size
                            continue
                        if outcome is False:
                            protected[entry.blob_id] = None
                    survivors.append(entry)
                kept = survivors
            if confirm is not None and planned:
                # Planned removals: everything referenced by now is kept after all.
                later = {parse_blob_id(r) for r in confirm()}
                removed = []
                for entry in planned:
                    outcome = None if entry.blob_id in later else remove(entry)
                    if outcome:
                        removed.append(entry)
                        continue
                    if entry.blob_id in later or outcome is False:
                        protected[entry.blob_id] = None
                    kept.append(entry)
                    total += entry.size
                kept.sort(key=lambda e: (e.mtime, e.blob_id))
            report = CollectReport(
                removed=tuple(e.blob_id for e in removed),
                removed_bytes=sum(e.size for e in removed),
                kept=len(kept),
                kept_bytes=total,
                protected=tuple(protected),
                over_budget=self.max_total_bytes is not None and total > self.max_total_bytes,
            )
        if removed or report.over_budget:
            log.info(
                "blob_collect",
                removed=len(removed),
                removed_bytes=report.removed_bytes,
                kept=report.kept,
                kept_bytes=report.kept_bytes,
                protected=len(report.protected),
                over_budget=report.over_budget,
            )
        return report

    def _remove(self, entry: _Entry) -> bool:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("blob_remove_failed", blob_id=str(entry.blob_id), error=str(exc))
            return False
        for sidecar in (
            self._index_path(entry.blob_id),
            self._json_index_path(entry.blob_id),
            self._owner_path(entry.blob_id),
        ):
            with contextlib.suppress(OSError):
                sidecar.unlink()
        with self._lock:
            self._indexes.pop(entry.blob_id, None)
            self._owners.pop(entry.blob_id, None)
        self._forget_parsed(entry.blob_id)
        return True

    def sweep_temp(self, now: float | None = None) -> int:
        """Remove leftovers of interrupted writes; return how many files went.

        Leftovers are ``.tmp-*`` files (a write that never reached its
        rename) and line-index sidecars whose blob is gone. A temp file goes
        when no live writer can own it: it is this process's and no write in
        this process uses it, or its pid is dead, or it is older than
        ``temp_grace_s`` (``now - mtime``; a reused pid or a name without a
        pid). Safe at any time, from any number of processes sharing the
        root; called by the constructor.
        """
        now = time.time() if now is None else now
        swept = 0
        with os.scandir(self.blobs_dir) as it:
            names = [e.name for e in it if e.is_file(follow_symlinks=False)]
        # Snapshot the writes in progress only *after* listing: a write
        # registers its temp name before creating the file, so every temp file
        # in the listing that is still being written is in this snapshot.
        with _INFLIGHT_LOCK:
            busy_temps = set(_INFLIGHT_TEMPS)
            busy_ids = {blob_id for d, blob_id in _INFLIGHT_IDS if d == self._dir_key}
        present = set(names)
        me = os.getpid()
        for name in names:
            if name.startswith(TEMP_PREFIX):
                if os.path.join(self._dir_key, name) in busy_temps:
                    continue
                if not self._temp_removable(name, me, now):
                    continue
            elif name.endswith(_SIDECARS):
                stem, _dot, ext = name.rpartition(".")
                suffix = f".{ext}"
                blobs = (
                    (TEXT_SUFFIX,)
                    if suffix == INDEX_SUFFIX
                    else (JSON_SUFFIX,)
                    if suffix == JSON_INDEX_SUFFIX
                    else (TEXT_SUFFIX, JSON_SUFFIX)  # an owner file: a blob of either kind
                )
                if any(f"{stem}{b}" in present for b in blobs):
                    continue
                try:
                    if uuid.UUID(stem) in busy_ids or str(uuid.UUID(stem)) != stem:
                        continue
                except ValueError:
                    continue
                if any((self.blobs_dir / f"{stem}{b}").exists() for b in blobs):
                    continue
            else:
                continue
            with contextlib.suppress(FileNotFoundError):
                (self.blobs_dir / name).unlink()
                swept += 1
        if swept:
            log.info("blob_temp_swept", files=swept)
        return swept

    def _temp_removable(self, name: str, me: int, now: float) -> bool:
        """No live writer can own this temp file (the caller checked this process's)."""
        owner = _temp_owner(name)
        if owner == me or self._temp_expired(name, now):
            return True
        return owner is not None and not _pid_alive(owner)

    def _temp_expired(self, name: str, now: float) -> bool:
        try:
            mtime = (self.blobs_dir / name).stat().st_mtime
        except FileNotFoundError:
            return False
        return now - mtime >= self.temp_grace_s
