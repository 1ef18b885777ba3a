"""The PostgreSQL backend: one store shared by several processes or machines.

Driver: psycopg 3 with ``psycopg_pool`` (the ``postgres`` extra). Why psycopg
rather than SQLAlchemy Core over both backends: the store is a dozen
hand-written statements that are already the same text on both databases
(``ON CONFLICT``, ``RETURNING``; only placeholders and the clock differ), so
an SQL toolkit would add a large dependency and a layer of its own connection
and transaction handling for nothing; psycopg 3 is the maintained reference
driver, pipelines ``executemany`` (one round trip for a turn's items), prepares
repeated statements on its own, and its pool is by the same authors.

Every table lives in the ``fore`` schema. Connections are in autocommit mode
and the store writes its own ``BEGIN``/``COMMIT``: a write is a plain
transaction whose first statement locks the session's row; a read is
``REPEATABLE READ READ ONLY`` (one snapshot for the record and its items).
Every wait has a deadline: ``connect_timeout`` for a connection,
``statement_timeout`` and ``lock_timeout`` on the server, the pool's wait for
a free connection. A dead client's transaction is ended by the server: an idle
one by ``idle_in_transaction_session_timeout``, a running statement within a
second by ``client_connection_check_interval`` (PostgreSQL 14+) -- so a killed
writer's locks are freed promptly and the rest of its pipelined batch, COMMIT
included, never runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from fore.actors.store.errors import (
    StoreBusy,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    StoreUrlError,
)
from fore.actors.store.migrations import PG_MIGRATION_LOCK, PG_SCHEMA
from fore.actors.store.sql import SqlSessionStore
from fore.actors.store.statements import Dialect, Row, Tx
from fore.actors.store.url import PostgresTarget

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

DIALECT = Dialect(
    name="postgres",
    prefix=f"{PG_SCHEMA}.",
    now="(extract(epoch FROM clock_timestamp())::float8)",
    placeholder="%s",
)
BEGIN_WRITE = "BEGIN"
BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
EXTRA_HINT = "pip install 'fore-runtime[postgres]'"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def translate(exc: BaseException, shown: str) -> StoreError:
    """One typed store error for a psycopg / pool exception."""
    import psycopg
    import psycopg_pool

    message = _one_line(exc)
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return StoreBusy(f"{shown}: no database connection free in time ({message})")
    if isinstance(exc, psycopg_pool.PoolClosed):
        return StoreUnavailable(f"{shown}: the connection pool is closed")
    if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.QueryCanceled):
        return StoreBusy(f"{shown}: the database did not answer in time ({message})")
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return StoreCorrupted(f"{shown}: the store's tables are missing or altered ({message})")
    if isinstance(exc, psycopg.OperationalError | psycopg.errors.InsufficientPrivilege):
        return StoreUnavailable(f"{shown}: {message}")
    return StoreError(f"{shown}: {message}")


class _PgTx:
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._conn.execute(sql, params)

    def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(sql, params)


class PostgresSessionStore(SqlSessionStore):
    """A session store in a PostgreSQL database (see the module docstring)."""

    def __init__(
        self,
        target: PostgresTarget,
        *,
        owner: str,
        lease_ttl: float,
        timeout: float,
        max_connections: int,
        auto_renew: bool,
    ) -> None:
        super().__init__(url=target.shown, owner=owner, lease_ttl=lease_ttl, dialect=DIALECT)
        try:
            import psycopg
            import psycopg_pool
        except ImportError:
            raise StoreUnavailable(
                f"{target.shown}: PostgreSQL support is not installed ({EXTRA_HINT})"
            ) from None
        try:
            psycopg.conninfo.conninfo_to_dict(target.conninfo)
        except psycopg.Error as exc:
            raise StoreUrlError(
                f"malformed PostgreSQL URL {target.shown!r}: {_one_line(exc)}"
            ) from None
        self._timeout = timeout
        ms = int(timeout * 1000)
        self._session_settings = (
            f"SET statement_timeout = {ms * 3}",
            f"SET lock_timeout = {ms}",
            f"SET idle_in_transaction_session_timeout = {ms * 6}",
        )
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "application_name": "fore-session-store",
            "connect_timeout": max(1, round(timeout)),
        }
        # A probe connection first: its error says why (refused, auth, no such database).
        try:
            with psycopg.connect(target.conninfo, **kwargs) as probe:
                self._configure(probe)
        except psycopg.Error as exc:
            raise translate(exc, self.url) from exc
        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            target.conninfo,
            min_size=1,
            max_size=max(1, max_connections),
            kwargs=kwargs,
            configure=self._configure,
            timeout=timeout,
            open=False,
            name=f"fore-store-{owner[-12:]}",
        )
        try:
            try:
                self._pool.open(wait=True, timeout=timeout + 2)
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                raise translate(exc, self.url) from exc
            self._migrate()
        except BaseException:
            self._pool.close(timeout=timeout)
            raise
        self._start_renewing(auto_renew)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        import psycopg

        for statement in self._session_settings:
            conn.execute(statement)
        try:
            # PostgreSQL 14+: a statement whose client died (kill -9) is cancelled within a
            # second and its transaction rolled back, instead of holding its locks until a
            # timeout -- and going on with statements the client had already pipelined.
            conn.execute("SET client_connection_check_interval = 1000")
        except psycopg.errors.UndefinedObject:
            pass

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Tx]:
        import psycopg
        import psycopg_pool

        try:
            with self._pool.connection(timeout=self._timeout) as conn:
                try:
                    if write:
                        # Pipeline mode: statements whose results nobody reads travel
                        # together, so an append is two round trips (BEGIN + the
                        # reservation; then the inserts + COMMIT), not one per statement.
                        with conn.pipeline():
                            conn.execute(BEGIN_WRITE)
                            yield _PgTx(conn)
                            conn.execute("COMMIT")
                    else:
                        conn.execute(BEGIN_READ)
                        yield _PgTx(conn)
                        conn.execute("COMMIT")
                except BaseException:
                    if not conn.closed and conn.info.transaction_status != 0:  # not IDLE
                        try:
                            conn.execute("ROLLBACK")
                        except psycopg.Error:
                            pass  # the pool discards a connection left in a bad state
                    raise
        except (psycopg.Error, psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed) as exc:
            raise translate(exc, self.url) from exc

    @contextmanager
    def _migration_transaction(self) -> Iterator[Tx]:
        with self._transaction(write=True) as tx:
            tx.rows("SELECT pg_advisory_xact_lock(%s)", (PG_MIGRATION_LOCK,))  # wait here
            yield tx

    def _has_version_table(self, tx: Tx) -> bool:
        # pg_tables (an MVCC read of pg_class), not to_regclass: the latter reads the
        # catalog cache, which may not yet show tables another migrator just committed.
        return bool(
            tx.rows(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables"
                " WHERE schemaname = %s AND tablename = 'schema_version')",
                (PG_SCHEMA,),
            )[0][0]
        )

    def _foreign_tables(self, tx: Tx) -> list[str]:
        return [
            str(name)
            for (name,) in tx.rows(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (PG_SCHEMA,),
            )
        ]

    def _close_connections(self) -> None:
        self._pool.close(timeout=self._timeout)
