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

Thread-safe and I/O-free: the actor updates it on its dispatcher thread (a
dict update under a lock) while collections read it on the blocking lane.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterable

__all__ = ["PinTable"]


class PinTable:
    """Blob ids pinned per session; a blob is pinned while any session pins it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: dict[str, set[uuid.UUID]] = {}
        self._refs: Counter[uuid.UUID] = Counter()

    def __repr__(self) -> str:
        with self._lock:
            return f"PinTable({len(self._by_session)} sessions, {len(self._refs)} blobs)"

    def pin(self, session_id: str, blob_ids: Iterable[uuid.UUID]) -> int:
        """Pin ``blob_ids`` for ``session_id``; returns how many were new for it."""
        added = 0
        with self._lock:
            pinned = self._by_session.setdefault(session_id, set())
            for blob_id in blob_ids:
                if blob_id not in pinned:
                    pinned.add(blob_id)
                    self._refs[blob_id] += 1
                    added += 1
            if not pinned:
                del self._by_session[session_id]
        return added

    def release(self, session_id: str) -> int:
        """Drop every pin of ``session_id`` (it closed); returns how many it held."""
        with self._lock:
            pinned = self._by_session.pop(session_id, set())
            for blob_id in pinned:
                self._refs[blob_id] -= 1
                if self._refs[blob_id] <= 0:
                    del self._refs[blob_id]
        return len(pinned)

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
