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

**A release never overtakes a pin announced before it.** The blob-store
actor pins on the blocking lane (scanning texts is CPU work, publishing is
disk I/O) but receives releases on its dispatcher. When session B quotes a
blob of session A and A then closes, B's ``ReferenceBlobs`` arrives first,
yet its pin may still be queued on the lane when A's release arrives; had
the release taken effect at once, a collection in between would have found
the blob pinned by nobody and deleted what B's history shows. So work that
will pin is *announced* where its request is received (:meth:`PinTable.announce`,
a ticket on one logical clock), the pins it lands carry that ticket, and
:meth:`PinTable.retire` marks it done. A release is held until every pin
announced before it has landed, and then drops only the pins older than
itself: a session closed and reopened under the same id meanwhile keeps its
new pins. A collection likewise starts once the pins announced before it
have landed (:meth:`PinTable.when_settled`), so it honours every quote
received before it, even of a blob nothing else pins. The order lives here,
not in the actor, so it survives the actor's restarts like the pins do.
Across processes nothing orders a release here before a pin still on another
process's lane: there a quote protects its blob once its pin is published.

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
from collections import Counter, deque
from collections.abc import Callable, Iterable

from fore.actors.blobs.shared_pins import PinJournal
from fore.actors.core.logs import get_logger

__all__ = ["PinTable"]

log = get_logger(__name__)


class PinTable:
    """Blob ids pinned per session; a blob is pinned while any session pins it.

    ``journal`` publishes the pinned ids for other processes (see
    :mod:`actors.blobs.shared_pins`); a publishing failure is logged and
    retried with the next pin, never raised -- the pin holds in memory.
    Announcements order pins before later releases (see the module docs).
    """

    def __init__(self, journal: PinJournal | None = None) -> None:
        self._lock = threading.Lock()
        self._publish = threading.Lock()
        """Orders journal appends and rewrites, so a rewrite never drops a newer pin."""
        self._by_session: dict[str, dict[uuid.UUID, int]] = {}
        """Each session's pins, with the clock time of the pin (its ticket, if announced)."""
        self._refs: Counter[uuid.UUID] = Counter()
        self._clock = 0
        """Orders announcements, pins and releases."""
        self._announced: deque[int] = deque()
        """Tickets not yet retired, oldest first (a retired one leaves once it is first)."""
        self._retired: set[int] = set()
        self._held: deque[tuple[int, str]] = deque()
        """Releases (clock time, session) waiting for older announced pins, in order."""
        self._settled_waiters: list[tuple[int, Callable[[], object]]] = []
        self.journal = journal

    def __repr__(self) -> str:
        with self._lock:
            return f"PinTable({len(self._by_session)} sessions, {len(self._refs)} blobs)"

    # -- ordering ------------------------------------------------------------------

    def _tick(self) -> int:
        now = self._clock
        self._clock += 1
        return now

    def _settled(self, position: int) -> bool:
        return not self._announced or self._announced[0] >= position

    def announce(self) -> int:
        """A pin is on its way (call where its request is received); returns its ticket.

        Pass the ticket to :meth:`pin` and always :meth:`retire` it (whether or
        not anything was pinned): releases and collections after it wait for it.
        """
        with self._lock:
            ticket = self._tick()
            self._announced.append(ticket)
            return ticket

    def position(self) -> int:
        """Now, on the table's clock: every ticket announced so far is before it."""
        with self._lock:
            return self._clock

    def when_settled(self, position: int, callback: Callable[[], object]) -> bool:
        """Whether every pin announced before ``position`` has landed.

        If not, ``callback()`` runs once they have, on the thread that retires
        the last of them (keep it short: post a message), and False is returned.
        """
        with self._lock:
            if self._settled(position):
                return True
            self._settled_waiters.append((position, callback))
            return False

    def retire(self, ticket: int) -> bool:
        """The announced work is over (its pins landed, or it failed or was called off).

        Applies the releases it held back; returns whether they dropped pins
        (then the journal is stale: :meth:`sync`, on a thread that may block).
        """
        with self._lock:
            self._retired.add(ticket)
            while self._announced and self._announced[0] in self._retired:
                self._retired.discard(self._announced.popleft())
            dropped = 0
            while self._held and self._settled(self._held[0][0]):
                when, session_id = self._held.popleft()
                dropped += self._drop(session_id, before=when)
            ready = [cb for pos, cb in self._settled_waiters if self._settled(pos)]
            if ready:
                self._settled_waiters = [
                    (pos, cb) for pos, cb in self._settled_waiters if not self._settled(pos)
                ]
        if dropped and self.journal is not None:
            self.journal.mark_stale()
        for callback in ready:
            try:
                callback()
            except Exception as exc:  # a waiter's failure must not fail the pinning work
                log.warning("blob_pins_settled_callback_failed", error=repr(exc))
        return dropped > 0

    # -- pins ----------------------------------------------------------------------

    def pin(
        self, session_id: str, blob_ids: Iterable[uuid.UUID], *, ticket: int | None = None
    ) -> int:
        """Pin ``blob_ids`` for ``session_id``; returns how many were new for it.

        ``ticket``: the :meth:`announce` ticket of the work pinning them
        (releases held behind it drop these pins; later ones keep them).
        """
        journal = self.journal
        if journal is None:
            return self._pin(session_id, blob_ids, ticket)[0]
        with self._publish, journal.guard():
            added, fresh = self._pin(session_id, blob_ids, ticket)
            if fresh:
                try:
                    journal.append(fresh, self.pinned)
                except OSError as exc:
                    log.warning("blob_pins_not_published", error=str(exc))
                    with contextlib.suppress(OSError):
                        journal.close()  # the next pin publishes everything afresh
            return added

    def _pin(
        self, session_id: str, blob_ids: Iterable[uuid.UUID], ticket: int | None
    ) -> tuple[int, list[uuid.UUID]]:
        """The in-memory pin: (new for the session, new for the table)."""
        added = 0
        fresh: list[uuid.UUID] = []
        with self._lock:
            when = self._tick() if ticket is None else ticket
            pinned = self._by_session.setdefault(session_id, {})
            for blob_id in blob_ids:
                since = pinned.get(blob_id)
                if since is None:
                    pinned[blob_id] = when
                    self._refs[blob_id] += 1
                    added += 1
                    if self._refs[blob_id] == 1:
                        fresh.append(blob_id)
                elif since < when:
                    pinned[blob_id] = when  # pinned again: a later release decides
            if not pinned:
                del self._by_session[session_id]
        return added, fresh

    def release(self, session_id: str) -> int:
        """Drop every pin of ``session_id`` (it closed); returns how many went now.

        Held (0 now) while pins announced before it are still on their way;
        :meth:`retire` applies it then, to the pins older than this call. In
        memory only: a journal is marked stale, and :meth:`sync` compacts it.
        """
        with self._lock:
            now = self._tick()
            if not self._settled(now):
                self._held.append((now, session_id))
                return 0
            dropped = self._drop(session_id, before=now)
        if dropped and self.journal is not None:
            self.journal.mark_stale()
        return dropped

    def _drop(self, session_id: str, *, before: int) -> int:
        """Unpin the session's pins taken before ``before`` (under the lock)."""
        pinned = self._by_session.get(session_id)
        if not pinned:
            return 0
        gone = [blob_id for blob_id, when in pinned.items() if when < before]
        for blob_id in gone:
            del pinned[blob_id]
            self._refs[blob_id] -= 1
            if self._refs[blob_id] <= 0:
                del self._refs[blob_id]
        if not pinned:
            del self._by_session[session_id]
        return len(gone)

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
