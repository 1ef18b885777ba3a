"""The runtime's session store: opening it, and each session's life in it.

``Runtime(store=...)`` keeps its sessions in a :class:`~actors.store.api.SessionStore`
(SQLite or PostgreSQL, see :mod:`actors.store`). :class:`RuntimeStore` is the
runtime's side of it, so the runtime itself only delegates:

* **Opening** happens first in ``Runtime(...)``, before any thread or actor
  starts, so a bad URL, an unreachable server, a database of a newer schema or
  a corrupted file is one :class:`~actors.store.errors.StoreError` from the
  constructor and nothing is left half-open.
* **A new session** is created in the store (leased to this process) before its
  actors start; **a resumed one** is leased and loaded
  (:class:`~actors.store.errors.SessionLeased` if another live process has it
  open, :class:`~actors.store.errors.SessionNotFound` if there is none); **a
  fork** is the store's copy of the durable history under a new id. Each gets
  a :class:`~actors.worker.persistence.Persistence` its worker writes through,
  and an :class:`~actors.worker.persistence.AlertTap` on the alert sink, so its
  alerts are stored too.
* **Closing a session** waits for its last append, then gives up the lease;
  closing the runtime closes the store (which releases every lease), after the
  actor system -- and with it every append on the blocking lane -- has stopped.

The calls here block on the database: they run on the thread that called the
runtime's method (an application thread), never on a dispatcher thread.
"""

from __future__ import annotations

import os
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from fore.actors.core.logs import get_logger
from fore.actors.store import (
    NewSession,
    SessionSnapshot,
    SessionStore,
    SessionSummary,
    StoreError,
    open_store,
)
from fore.actors.store.url import SqliteTarget, parse_store_url
from fore.actors.worker.persistence import Persistence
from fore.messages.alerts import SubscribeAlerts, UnsubscribeAlerts
from fore.supervision.resume import SessionArgs, model_settings, session_config

__all__ = ["RuntimeStore", "default_store_dir"]

log = get_logger(__name__)

CLOSE_WAIT_S = 30.0
"""How long closing a session waits for its last append before giving up the lease."""


def default_store_dir() -> Path:
    """Where ``fore run`` / ``fore chat`` keep their store by default: the user's data dir.

    ``$XDG_DATA_HOME/fore`` on Linux (``~/.local/share/fore``),
    ``~/Library/Application Support/fore`` on macOS (by :mod:`platformdirs`).
    """
    import platformdirs

    return Path(platformdirs.user_data_dir("fore", appauthor=False))


class RuntimeStore:
    """A runtime's session store and the sessions it has open in it (see the module docs)."""

    def __init__(self, store: SessionStore, *, owned: bool, blob_dir: Path | None) -> None:
        self.store = store
        self.owned = owned
        """Opened by the runtime from a URL (closed with it), or the caller's own."""
        self.blob_dir = blob_dir
        """Where the runtime keeps blobs when not told: next to a SQLite file."""
        self._sessions: dict[str, Persistence] = {}
        self._taps: dict[str, Any] = {}

    @classmethod
    def open(cls, spec: str | SessionStore | None) -> RuntimeStore | None:
        """The store ``spec`` names (a URL or an open store), or ``None`` for none."""
        if spec is None:
            return None
        if isinstance(spec, SessionStore):
            return cls(spec, owned=False, blob_dir=None)
        target = parse_store_url(spec)  # StoreUrlError before any I/O
        blob_dir: Path | None = None
        if isinstance(target, SqliteTarget):
            blob_dir = target.path.expanduser().absolute().parent
        else:
            blob_dir = default_store_dir()
        return cls(open_store(spec), owned=True, blob_dir=blob_dir)

    @property
    def url(self) -> str:
        return self.store.url

    # -- sessions ---------------------------------------------------------------------------

    def create(
        self, args: SessionArgs, session_id: str | None
    ) -> tuple[str, Persistence, list[str]]:
        """A new session in the store: ``(its id, its write-ahead, notes for the user)``."""
        config, notes = session_config(args)
        workspace = "" if args.workspace is None else str(Path(args.workspace).absolute())
        record = self.store.create_session(
            NewSession(
                session_id=session_id,
                workspace=workspace,
                model_name=args.model_name or str(getattr(args.model, "name", "")),
                model_settings=model_settings(args.model),
                session_config=config,
            )
        )
        return record.session_id, self._track(record.session_id, None), notes

    def resume(self, session_id: str) -> SessionSnapshot:
        """Lease and load a stored session (``SessionLeased``, ``SessionNotFound``)."""
        return self.store.open_session(session_id)

    def fork(self, session_id: str) -> SessionSnapshot:
        """A copy of ``session_id``'s stored history under a new id, leased here."""
        record = self.store.fork(session_id)
        try:
            return self.store.load(record.session_id)
        except BaseException:
            self.release(record.session_id)
            raise

    def persistence(self, snapshot: SessionSnapshot) -> Persistence:
        """The write-ahead of a resumed or forked session: its stored items are saved."""
        return self._track(snapshot.record.session_id, snapshot)

    def _track(self, session_id: str, snapshot: SessionSnapshot | None) -> Persistence:
        count = 0 if snapshot is None else len(snapshot.items)
        persistence = Persistence(
            store=self.store,
            session_id=session_id,
            saved=count,
            owed=count,
            labels=None if snapshot is None else snapshot.pending_actions,
        )
        self._sessions[session_id] = persistence
        return persistence

    def attach(self, session_id: str, alert_sink: Any) -> None:
        """Store the session's alerts: its tap subscribes to the alert sink."""
        persistence = self._sessions.get(session_id)
        if persistence is None:
            return
        tap = persistence.alerts
        alert_sink.ask(SubscribeAlerts(address=tap, session=session_id), timeout=30)
        self._taps[session_id] = tap

    def detach(self, session_id: str, alert_sink: Any, *, timeout: float = CLOSE_WAIT_S) -> None:
        """The session closed (its actors stopped): last append done, then the lease goes."""
        tap = self._taps.pop(session_id, None)
        if tap is not None and alert_sink is not None:
            try:
                alert_sink.tell(UnsubscribeAlerts(address=tap))
            except Exception as exc:  # the sink is restarting or gone
                log.debug("store_tap_unsubscribe_skipped", session=session_id, error=repr(exc))
        persistence = self._sessions.pop(session_id, None)
        if persistence is not None and persistence.writing is not None:
            try:
                persistence.writing.result(timeout=timeout)
            except FutureTimeout:
                log.warning("store_append_still_running", session=session_id)
            except BaseException:
                pass  # its failure was reported to the session already
        self.release(session_id)

    def release(self, session_id: str) -> None:
        try:
            self.store.release(session_id)
        except StoreError as exc:  # the lease expires on its own
            log.warning("store_release_failed", session=session_id, error=str(exc))

    def discard(self, session_id: str, *, delete: bool) -> None:
        """A session that failed to start: forget it (and delete a just-created one)."""
        self._sessions.pop(session_id, None)
        self._taps.pop(session_id, None)
        if delete:
            try:
                self.store.delete(session_id)
                return
            except StoreError as exc:
                log.warning("store_delete_failed", session=session_id, error=str(exc))
        self.release(session_id)

    def list_sessions(
        self, *, limit: int = 20, workspace: str | os.PathLike[str] | None = None
    ) -> tuple[SessionSummary, ...]:
        where = None if workspace is None else str(Path(workspace).absolute())
        return self.store.list_sessions(limit=limit, workspace=where)

    def referenced_blobs(self) -> frozenset[str]:
        """What blob retention must keep for stored sessions (called on the blocking lane)."""
        return self.store.referenced_blobs()

    def close(self) -> None:
        """The runtime closed: close an owned store, else give up this runtime's leases."""
        sessions = list(self._sessions)
        self._sessions.clear()
        self._taps.clear()
        if self.owned:
            try:
                self.store.close()
            except StoreError as exc:
                log.warning("store_close_failed", error=str(exc))
            return
        for session_id in sessions:
            self.release(session_id)
