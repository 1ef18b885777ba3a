"""Retention protection: which blobs each live session references.

Why a table of its own rather than a field of the blob-store actor: the actor
is supervised, and a restarted incarnation starts with empty fields. Pins kept
there vanished on every crash, and once a blob was older than the grace
period the next collection could delete a blob that a live session's history
still shows as ``[blob:<id>]``. A :class:`PinTable` lives as long as its owner
-- by default the :class:`~actors.blobs.fs_store.FsBlobStore` the runtime
holds, which outlives every incarnation of the actor -- and
``FsBlobStore.collect`` consults it itself, so no caller can forget it.

A session pins every blob it stores and every blob its history references
(``[blob:<id>]`` anywhere in a text, see
:func:`actors.blobs.summary.referenced_blob_ids`), and releases them all when
it closes. A blob stays protected while *any* session pins it.

Thread-safe. Without a journal it is I/O-free. With a
:class:`~actors.blobs.shared_pins.PinJournal` (the store's own table has
one) every :meth:`PinTable.pin` also publishes the new ids for other
processes sharing the blob directory -- disk I/O, so the blob-store actor
pins on the blocking lane -- while :meth:`PinTable.release` stays in memory
(the file over-protects until :meth:`PinTable.sync` compacts it).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import Counter
from collections.abc import Iterable

from fore.actors.blobs.shared_pins import PinJournal
from fore.actors.core.logs import get_logger

__all__ = ["PinTable"]

log = get_logger(__name__)


class PinTable:
    """Blob ids pinned per session; a blob is pinned while any session pins it.

    ``journal`` publishes the pinned ids for other processes (see
    :mod:`actors.blobs.shared_pins`); a publishing failure is logged and
    retried with the next pin, never raised -- the pin holds in memory.
    """

    def __init__(self, journal: PinJournal | None = None) -> None:
        self._lock = threading.Lock()
        self._publish = threading.Lock()
        """Orders journal appends and rewrites, so a rewrite never drops a newer pin."""
        self._by_session: dict[str, set[uuid.UUID]] = {}
        self._refs: Counter[uuid.UUID] = Counter()
        self.journal = journal

    def __repr__(self) -> str:
        with self._lock:
            return f"PinTable({len(self._by_session)} sessions, {len(self._refs)} blobs)"

    def pin(self, session_id: str, blob_ids: Iterable[uuid.UUID]) -> int:
        """Pin ``blob_ids`` for ``session_id``; returns how many were new for it."""
        journal = self.journal
        if journal is None:
            return self._pin(session_id, blob_ids)[0]
        with self._publish, journal.guard():
            added, fresh = self._pin(session_id, blob_ids)
            if fresh:
                try:
                    journal.append(fresh, self.pinned)
                except OSError as exc:
                    log.warning("blob_pins_not_published", error=str(exc))
                    with contextlib.suppress(OSError):
                        journal.close()  # the next pin publishes everything afresh
            return added

    def _pin(self, session_id: str, blob_ids: Iterable[uuid.UUID]) -> tuple[int, list[uuid.UUID]]:
        """The in-memory pin: (new for the session, new for the table)."""
        added = 0
        fresh: list[uuid.UUID] = []
        with self._lock:
            pinned = self._by_session.setdefault(session_id, set())
            for blob_id in blob_ids:
                if blob_id not in pinned:
                    pinned.add(blob_id)
                    self._refs[blob_id] += 1
                    added += 1
                    if self._refs[blob_id] == 1:
                        fresh.append(blob_id)
            if not pinned:
                del self._by_session[session_id]
        return added, fresh

    def release(self, session_id: str) -> int:
        """Drop every pin of ``session_id`` (it closed); returns how many it held.

        In memory only: a journal is marked stale, and :meth:`sync` compacts it.
        """
        with self._lock:
            pinned = self._by_session.pop(session_id, set())
            for blob_id in pinned:
                self._refs[blob_id] -= 1
                if self._refs[blob_id] <= 0:
                    del self._refs[blob_id]
        if pinned and self.journal is not None:
            self.journal.mark_stale()
        return len(pinned)

    def sync(self) -> None:
        """Rewrite a stale journal to exactly what is pinned (disk I/O; blocking lane).

        Also republishes after a failed append (the journal closed itself).
        """
        journal = self.journal
        if journal is None:
            return
        with self._lock:
            unpublished = bool(self._refs) and not journal.is_open
        if not (journal.stale or unpublished):
            return
        with self._publish:
            try:
                journal.rewrite(self.pinned)
            except OSError as exc:
                log.warning("blob_pins_not_compacted", error=str(exc))

    def close(self) -> None:
        """Withdraw the journal's publication (the runtime closes); pins stay in memory."""
        if self.journal is not None:
            with self._publish:
                self.journal.close()

    def is_pinned(self, blob_id: uuid.UUID) -> bool:
        with self._lock:
            return blob_id in self._refs

    def pinned(self) -> frozenset[uuid.UUID]:
        """Every blob some session pins (a snapshot)."""
        with self._lock:
            return frozenset(self._refs)

    def session_pins(self, session_id: str) -> frozenset[uuid.UUID]:
        with self._lock:
            return frozenset(self._by_session.get(session_id, ()))

    @property
    def sessions(self) -> int:
        """Sessions holding at least one pin."""
        with self._lock:
            return len(self._by_session)

    @property
    def pins(self) -> int:
        """(session, blob) pairs: a blob pinned by two sessions counts twice."""
        with self._lock:
            return sum(len(p) for p in self._by_session.values())
