"""The session store's interface: what the runtime may ask of any backend.

A :class:`SessionStore` keeps sessions beyond the process: each session's
metadata, its history items in order, the labels of its pending actions, its
alerts, its token usage and the blob ids its history quotes. Open one with
:func:`actors.store.open_store` from a URL.

**Blocking and thread-safe.** Every method does database I/O and blocks until
it is done or its deadline passes (a busy lock, a connection wait and a
statement each have one; the error is then :class:`StoreBusy` or
:class:`StoreUnavailable`). Call it from a blocking-lane thread
(``system.blocking``), never from a dispatcher thread. Any number of threads
may call one store at once; each call takes its own connection from a small
pool.

**Leases.** A session is written only by the store that holds its lease: the
store that created it, forked it or opened it (:meth:`open_session`). Another
process's :meth:`open_session` of a held session raises :class:`SessionLeased`
naming the holder. A lease is renewed by every append and by
:meth:`renew_leases` (the store renews its leases on its own thread unless it
was opened with ``auto_renew=False``); it ends at :meth:`release`,
:meth:`close`, or when it expires unrenewed -- or at once when its holder is a
process of this machine that no longer exists (``kill -9``). Reading
(:meth:`load`, :meth:`list_sessions`, :meth:`fork`) needs no lease.

**Atomic turns.** :meth:`append` writes a whole :class:`TurnBatch` in one
transaction: all of its items (numbered on from the session's last), or none
of them if anything fails or the process dies first. Two writers can never
interleave a session's items: the lease check, the sequence reservation and
the inserts are one transaction on the session's row.
"""

from __future__ import annotations

import abc
from types import TracebackType

from fore.actors.store.records import (
    Appended,
    NewSession,
    SessionRecord,
    SessionSnapshot,
    SessionSummary,
    TurnBatch,
)


class SessionStore(abc.ABC):
    """A durable home for sessions (see the module docstring for the rules)."""

    url: str
    """The store's URL as it may be shown (no password)."""
    owner: str
    """This store's owner id: what other processes see as the holder of its leases."""
    lease_ttl: float
    """Seconds a lease lives unrenewed."""

    # -- sessions -------------------------------------------------------------------------

    @abc.abstractmethod
    def create_session(self, new: NewSession) -> SessionRecord:
        """Create a session, leased to this store. :class:`SessionExists` if the id is taken."""

    @abc.abstractmethod
    def open_session(self, session_id: str) -> SessionSnapshot:
        """Lease a session to this store and load it (resume).

        :class:`SessionLeased` if another live process holds it,
        :class:`SessionNotFound` if there is none. Opening a session this
        store already holds renews the lease and loads it again.
        """

    @abc.abstractmethod
    def load(self, session_id: str) -> SessionSnapshot:
        """Everything kept for a session, read in one consistent transaction (no lease)."""

    @abc.abstractmethod
    def append(self, session_id: str, batch: TurnBatch) -> Appended:
        """Write one turn's batch, all or nothing; renews the lease.

        :class:`LeaseLost` if this store does not hold the session's lease;
        :class:`InvalidRecord` (before any database work) if the batch breaks
        a bound or cannot be written as JSON.
        """

    @abc.abstractmethod
    def fork(
        self, session_id: str, *, new_id: str | None = None, turns: int | None = None
    ) -> SessionRecord:
        """Copy a session's history (its first ``turns`` turns, or all) under a new id.

        The fork is leased to this store; its metadata and blob references come
        along, its alerts, usage and pending actions do not (they belong to the
        original's life). The source may be open anywhere.
        """

    @abc.abstractmethod
    def delete(self, session_id: str) -> None:
        """Delete a session and everything kept for it; :class:`SessionLeased` if held elsewhere."""

    @abc.abstractmethod
    def list_sessions(
        self, *, limit: int = 20, workspace: str | None = None
    ) -> tuple[SessionSummary, ...]:
        """Sessions, most recently updated first (optionally of one workspace)."""

    @abc.abstractmethod
    def referenced_blobs(self) -> frozenset[str]:
        """Every blob id any stored session's history quotes (what blob retention must keep)."""

    # -- leases ---------------------------------------------------------------------------

    @abc.abstractmethod
    def release(self, session_id: str) -> None:
        """Give up this store's lease on a session (nothing if it holds none)."""

    @abc.abstractmethod
    def renew_leases(self) -> frozenset[str]:
        """Extend every lease this store holds; returns the ids it no longer holds (lost)."""

    @abc.abstractmethod
    def held(self) -> frozenset[str]:
        """The ids of the sessions this store holds leases on, as far as it knows."""

    # -- the store --------------------------------------------------------------------------

    @abc.abstractmethod
    def schema_version(self) -> int:
        """The schema version of the database (the store refuses ones it does not know)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every lease, stop renewing, close the connections. Idempotent."""

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
