"""The session store over SQL, once for both backends.

:class:`SqlSessionStore` implements every operation of
:class:`~actors.store.api.SessionStore` with the same statements on SQLite and
PostgreSQL; a backend supplies only transactions (:meth:`_transaction`, which
also translates driver errors into :mod:`actors.store.errors`), its dialect
(placeholders, the schema prefix, the database clock) and its schema
introspection. Statements are written with ``?`` placeholders, ``{s}`` for the
schema prefix and ``{now}`` for the database's clock in epoch seconds.

Encoding (items to JSON, bounds, credential checks) happens before a
transaction starts, so a write holds its lock only for the inserts. The
statements themselves, and what a backend's transaction and dialect are, are
:mod:`actors.store.statements`.
"""

from __future__ import annotations

import abc
import threading
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from fore.actors.core.logs import get_logger
from fore.actors.store import codec, migrations
from fore.actors.store.api import SessionStore
from fore.actors.store.errors import (
    InvalidRecord,
    LeaseLost,
    NotASessionStore,
    SchemaTooNew,
    SessionExists,
    SessionLeased,
    SessionNotFound,
    StoreClosed,
    StoreCorrupted,
    StoreError,
)
from fore.actors.store.owner import certainly_dead, describe
from fore.actors.store.records import (
    Appended,
    NewSession,
    SessionRecord,
    SessionSnapshot,
    SessionSummary,
    TurnBatch,
)
from fore.actors.store.statements import Dialect, Row, Statements, Tx
from fore.messages.llm import Usage

log = get_logger(__name__)


@contextmanager
def _decoding(what: str) -> Iterator[None]:
    """Values read back that are not of their column's shape: a damaged store, one error."""
    try:
        yield
    except StoreError:
        raise
    except (ValueError, TypeError, IndexError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise StoreCorrupted(f"{what}: a stored value is damaged ({detail})") from None


class SqlSessionStore(SessionStore):
    """The shared implementation; see :mod:`actors.store.sqlite` and ``.postgres``."""

    def __init__(self, *, url: str, owner: str, lease_ttl: float, dialect: Dialect) -> None:
        if (
            isinstance(lease_ttl, bool)
            or not isinstance(lease_ttl, int | float)
            or not (0.5 <= lease_ttl <= 3600.0)
        ):
            raise InvalidRecord("lease_ttl must be between 0.5 and 3600 seconds")
        self.url = url
        if not isinstance(owner, str) or not owner:
            raise InvalidRecord("the owner id must be a non-empty str")
        self.owner = codec.check_text("the owner id", owner, codec.MAX_ID_CHARS)
        self.lease_ttl = float(lease_ttl)
        self._dialect = dialect
        self._sql = Statements(dialect)
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self._closed = False
        self._renewer: _Renewer | None = None

    # -- what a backend supplies -------------------------------------------------------------

    @abc.abstractmethod
    def _transaction(self, *, write: bool) -> AbstractContextManager[Tx]:
        """A transaction (read-only and consistent, or a write that serializes with writes)."""

    @abc.abstractmethod
    def _has_version_table(self, tx: Tx) -> bool:
        """Whether the database has the store's ``schema_version`` table."""

    @abc.abstractmethod
    def _foreign_tables(self, tx: Tx) -> list[str]:
        """Tables where the store's would be (a store refuses to mix with them)."""

    @abc.abstractmethod
    def _migration_transaction(self) -> AbstractContextManager[Tx]:
        """A write transaction that also excludes other migrating processes."""

    @abc.abstractmethod
    def _close_connections(self) -> None:
        """Close every connection (those in use as they come back)."""

    # -- opening ----------------------------------------------------------------------------------

    def _migrate(self) -> None:
        """Bring the schema to :data:`migrations.LATEST`, or refuse a newer one untouched."""
        current = self._stored_version()
        if current > migrations.LATEST:
            raise SchemaTooNew(current, migrations.LATEST)
        if current == migrations.LATEST:
            return
        with self._migration_transaction() as tx:
            current = self._stored_version_in(tx)
            if current > migrations.LATEST:
                raise SchemaTooNew(current, migrations.LATEST)
            for migration in migrations.pending(current):
                for statement in migration.statements(self._dialect.name):
                    tx.run(statement)
                tx.run(self._sql.insert_version, (migration.version, migration.description))
                log.info("store_migrated", url=self.url, version=migration.version)

    def _stored_version(self) -> int:
        with self._transaction(write=False) as tx:
            return self._stored_version_in(tx)

    def _stored_version_in(self, tx: Tx) -> int:
        """The schema version (0: an empty database); refuses a database that is not a store."""
        if not self._has_version_table(tx):
            foreign = self._foreign_tables(tx)
            if foreign:
                raise NotASessionStore(
                    f"{self.url} holds other tables ({', '.join(sorted(foreign)[:5])}) and no "
                    f"Fore schema: refusing to mix the session store into it"
                )
            return 0
        value = tx.rows(self._sql.version)[0][0]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise StoreCorrupted(f"{self.url}: the schema_version table holds {value!r}")
        return value

    def _start_renewing(self, auto_renew: bool) -> None:
        if auto_renew:
            self._renewer = _Renewer(self)
            self._renewer.start()

    # -- sessions ---------------------------------------------------------------------------------

    def create_session(self, new: NewSession) -> SessionRecord:
        self._check_open()
        if not isinstance(new, NewSession):
            raise InvalidRecord(f"create_session takes a NewSession, not {type(new).__name__}")
        sid = codec.check_session_id(
            new.session_id if new.session_id is not None else codec.new_session_id()
        )
        workspace = codec.check_text("workspace", new.workspace)
        model_name = codec.check_text("model_name", new.model_name)
        title = codec.check_text("title", new.title)
        settings = codec.encode_config("model_settings", new.model_settings)
        config = codec.encode_config("session_config", new.session_config)
        with self._transaction(write=True) as tx:
            rows = tx.rows(
                self._sql.create,
                (sid, workspace, model_name, settings, config, title, self.owner, self.lease_ttl),
            )
        if not rows:
            raise SessionExists(sid)
        self._hold(sid)
        with _decoding(f"session {sid!r}"):
            created = float(rows[0][0])
        return SessionRecord(
            session_id=sid,
            workspace=workspace,
            model_name=model_name,
            model_settings=new.model_settings,
            session_config=new.session_config,
            title=title,
            created_at=created,
            updated_at=created,
            item_count=0,
            turn_count=0,
        )

    def open_session(self, session_id: str) -> SessionSnapshot:
        self._check_open()
        sid = codec.check_session_id(session_id)
        self._acquire(sid)
        try:
            return self.load(sid)
        except BaseException:
            try:
                self.release(sid)
            except StoreError:
                pass
            raise

    def _acquire(self, sid: str) -> None:
        with self._transaction(write=True) as tx:
            if tx.rows(self._sql.acquire, (self.owner, self.lease_ttl, sid, self.owner)):
                self._hold(sid)
                return
            found = tx.rows(self._sql.lease_of, (sid,))
            if not found:
                raise SessionNotFound(sid)
            holder, expires_in = found[0]
            if (
                holder is not None
                and certainly_dead(str(holder))
                and tx.rows(self._sql.take_over, (self.owner, self.lease_ttl, sid, holder))
            ):
                log.info("store_lease_taken_over", session=sid, dead_holder=holder)
                self._hold(sid)
                return
            with _decoding(f"session {sid!r}"):
                remaining = float(expires_in or 0.0)
            raise SessionLeased(sid, describe(str(holder)), remaining)

    def load(self, session_id: str) -> SessionSnapshot:
        self._check_open()
        sid = codec.check_session_id(session_id)
        with self._transaction(write=False) as tx:
            found = tx.rows(self._sql.record, (sid,))
            if not found:
                raise SessionNotFound(sid)
            item_rows = tx.rows(self._sql.items, (sid,))
            alert_rows = tx.rows(self._sql.alerts, (sid,))
            ref_rows = tx.rows(self._sql.refs, (sid,))
        with _decoding(f"session {sid!r}"):
            return self._snapshot(sid, found[0], item_rows, alert_rows, ref_rows)

    def _snapshot(
        self,
        sid: str,
        found: Row,
        item_rows: list[Row],
        alert_rows: list[Row],
        ref_rows: list[Row],
    ) -> SessionSnapshot:
        (
            workspace,
            model_name,
            settings,
            config,
            title,
            parent_id,
            forked_at,
            created_at,
            updated_at,
            next_seq,
            turn_count,
            prompt_tokens,
            completion_tokens,
            total_tokens,
            cached_tokens,
            pending,
        ) = found
        count = len(item_rows)
        if count != next_seq or (count and (item_rows[0][0] != 0 or item_rows[-1][0] != count - 1)):
            raise StoreCorrupted(
                f"session {sid!r}: {count} stored items where {next_seq} were written"
            )
        record = SessionRecord(
            session_id=sid,
            workspace=workspace,
            model_name=model_name,
            model_settings=codec.decode_config("model_settings", settings),
            session_config=codec.decode_config("session_config", config),
            title=title,
            parent_id=parent_id,
            forked_at=forked_at,
            created_at=float(created_at),
            updated_at=float(updated_at),
            item_count=int(next_seq),
            turn_count=int(turn_count),
        )
        # Every part was validated on its own just above: construct, do not re-validate
        # a thousand items (a tenth of a resume's time).
        return SessionSnapshot.model_construct(
            record=record,
            items=codec.decode_items(sid, [body for _, body in item_rows]),
            pending_actions=codec.decode_labels(sid, pending),
            alerts=codec.decode_alerts(sid, [body for (body,) in alert_rows]),
            usage=Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                total_tokens=total_tokens,
                cached_tokens=cached_tokens,
            ),
            blob_refs=tuple(str(blob) for (blob,) in ref_rows),
        )

    def append(self, session_id: str, batch: TurnBatch) -> Appended:
        self._check_open()
        sid = codec.check_session_id(session_id)
        if not isinstance(batch, TurnBatch):
            raise InvalidRecord(f"append takes a TurnBatch, not {type(batch).__name__}")
        bodies = codec.encode_items(batch.items)
        alerts = codec.encode_alerts(batch.alerts)
        pending = (
            None if batch.pending_actions is None else codec.encode_labels(batch.pending_actions)
        )
        usage = batch.usage or Usage()
        title = codec.check_text("title", codec.title_preview(batch.items))
        n = len(bodies)
        with self._transaction(write=True) as tx:
            reserved = tx.rows(
                self._sql.reserve,
                (
                    n,
                    1 if n else 0,
                    len(alerts),
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    usage.total_tokens,
                    usage.cached_tokens,
                    title,
                    pending,
                    self.lease_ttl,
                    sid,
                    self.owner,
                ),
            )
            if not reserved:
                found = tx.rows(self._sql.lease_of, (sid,))
                if not found:
                    raise SessionNotFound(sid)
                holder = found[0][0]
                self._drop(sid)
                raise LeaseLost(sid, None if holder is None else describe(str(holder)))
            with _decoding(f"session {sid!r}"):
                next_seq, turn_count, next_alert = (int(v) for v in reserved[0])
            first = next_seq - n
            turn = turn_count - 1
            if bodies:
                tx.many(
                    self._sql.insert_item,
                    [(sid, first + i, turn, body) for i, body in enumerate(bodies)],
                )
                refs = codec.blob_refs(bodies, first)
                if refs:
                    tx.many(self._sql.insert_ref, [(sid, b, seq) for b, seq in refs.items()])
            if alerts:
                first_alert = next_alert - len(alerts)
                tx.many(
                    self._sql.insert_alert,
                    [(sid, first_alert + i, body) for i, body in enumerate(alerts)],
                )
                if next_alert > codec.MAX_KEPT_ALERTS:
                    tx.run(self._sql.prune_alerts, (sid, next_alert - codec.MAX_KEPT_ALERTS))
        return Appended(
            session_id=sid, first_seq=first, next_seq=next_seq, turn=turn if n else None
        )

    def fork(
        self, session_id: str, *, new_id: str | None = None, turns: int | None = None
    ) -> SessionRecord:
        self._check_open()
        source = codec.check_session_id(session_id)
        target = codec.check_session_id(new_id if new_id is not None else codec.new_session_id())
        if turns is not None and (
            isinstance(turns, bool) or not isinstance(turns, int) or turns < 0
        ):
            raise InvalidRecord("turns must be a non-negative int (or None for all of them)")
        with self._transaction(write=True) as tx:
            found = tx.rows(self._sql.fork_source, (source,))
            if not found:
                raise SessionNotFound(source)
            with _decoding(f"session {source!r}"):
                next_seq, turn_count = int(found[0][0]), int(found[0][1])
            cut, kept_turns = next_seq, turn_count
            if turns is not None and turns < turn_count:
                with _decoding(f"session {source!r}"):
                    cut = int(tx.rows(self._sql.fork_cut, (source, turns))[0][0])
                kept_turns = turns
            created = tx.rows(
                self._sql.fork_session,
                (target, cut, cut, kept_turns, self.owner, self.lease_ttl, source),
            )
            if not created:
                raise SessionExists(target)
            tx.run(self._sql.fork_items, (target, source, cut))
            tx.run(self._sql.fork_refs, (target, source, cut))
        self._hold(target)
        return self.load(target).record

    def delete(self, session_id: str) -> None:
        self._check_open()
        sid = codec.check_session_id(session_id)
        with self._transaction(write=True) as tx:
            found = tx.rows(self._sql.lease_of, (sid,))
            if not found:
                raise SessionNotFound(sid)
            holder, expires_in = found[0]
            with _decoding(f"session {sid!r}"):
                remaining = float(expires_in or 0.0)
            if (
                holder is not None
                and holder != self.owner
                and remaining > 0
                and not certainly_dead(str(holder))
            ):
                raise SessionLeased(sid, describe(str(holder)), remaining)
            for statement in self._sql.delete:
                tx.run(statement, (sid,))
        self._drop(sid)

    def list_sessions(
        self, *, limit: int = 20, workspace: str | None = None
    ) -> tuple[SessionSummary, ...]:
        self._check_open()
        codec.check_limit(limit)
        with self._transaction(write=False) as tx:
            if workspace is None:
                rows = tx.rows(self._sql.list_all, (limit,))
            else:
                ws = codec.check_text("workspace", workspace)
                rows = tx.rows(self._sql.list_workspace, (ws, limit))
        with _decoding(f"{self.url}: the session list"):
            return tuple(self._summary(row) for row in rows)

    @staticmethod
    def _summary(row: Row) -> SessionSummary:
        (
            sid,
            title,
            workspace,
            model_name,
            created_at,
            updated_at,
            next_seq,
            turn_count,
            parent_id,
            holder,
            expires_in,
        ) = row
        leased = (
            holder is not None
            and expires_in is not None
            and float(expires_in) > 0
            and not certainly_dead(str(holder))
        )
        return SessionSummary(
            session_id=sid,
            title=title,
            workspace=workspace,
            model_name=model_name,
            created_at=float(created_at),
            updated_at=float(updated_at),
            item_count=int(next_seq),
            turn_count=int(turn_count),
            parent_id=parent_id,
            leased_by=describe(str(holder)) if leased else None,
        )

    def referenced_blobs(self) -> frozenset[str]:
        self._check_open()
        with self._transaction(write=False) as tx:
            return frozenset(blob for (blob,) in tx.rows(self._sql.all_refs))

    # -- leases -----------------------------------------------------------------------------------

    def release(self, session_id: str) -> None:
        self._check_open()
        sid = codec.check_session_id(session_id)
        with self._transaction(write=True) as tx:
            tx.run(self._sql.release, (sid, self.owner))
        self._drop(sid)

    def renew_leases(self) -> frozenset[str]:
        self._check_open()
        with self._lock:
            before = frozenset(self._held)
        if not before:
            return frozenset()
        with self._transaction(write=True) as tx:
            still = {sid for (sid,) in tx.rows(self._sql.renew, (self.lease_ttl, self.owner))}
        lost = before - still
        if lost:
            with self._lock:
                self._held -= lost
            log.warning("store_leases_lost", url=self.url, sessions=sorted(lost)[:20])
        return lost

    def held(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._held)

    def _hold(self, sid: str) -> None:
        with self._lock:
            self._held.add(sid)

    def _drop(self, sid: str) -> None:
        with self._lock:
            self._held.discard(sid)

    # -- the store -------------------------------------------------------------------------------

    def schema_version(self) -> int:
        self._check_open()
        with self._transaction(write=False) as tx:
            return self._stored_version_in(tx)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            held = bool(self._held)
            self._held.clear()
        if self._renewer is not None:
            self._renewer.stop()
        try:
            if held:
                with self._transaction(write=True) as tx:
                    tx.run(self._sql.release_all, (self.owner,))
        except StoreError as exc:  # the leases then expire on their own
            log.warning("store_release_failed", url=self.url, error=str(exc))
        finally:
            self._close_connections()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"the session store {self.url} is closed")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"


class _Renewer:
    """The store's one renewal thread: :meth:`renew_leases` every third of the TTL."""

    def __init__(self, store: SqlSessionStore) -> None:
        # A weak reference: a store dropped without close() does not live on in its thread.
        self._store = weakref.ref(store)
        self._period = store.lease_ttl / 3
        self._join = max(5.0, store.lease_ttl)
        self._url = store.url
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"fore-store-renew-{store.owner[-12:]}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=self._join)

    def _run(self) -> None:
        while not self._stop.wait(self._period):
            store = self._store()
            if store is None:
                return
            try:
                store.renew_leases()
            except StoreClosed:
                return
            except StoreError as exc:  # retried next period; an append renews too
                log.warning("store_renew_failed", url=self._url, error=str(exc))
            del store
