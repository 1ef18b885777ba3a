"""The SQLite backend: the embedded default, one file, WAL mode.

Connections come from a small pool (at most ``max_connections``, created on
demand, shared by any threads: sqlite3 connections are used by one thread at a
time, never concurrently). Every connection runs with

* ``journal_mode=WAL`` -- readers never block the writer and a crash leaves
  the last committed transaction intact;
* ``synchronous=FULL`` -- a commit is on disk before it returns, so an item is
  durable when ``append`` returns (the write-ahead rule), power loss included;
* ``busy_timeout`` -- a writer waits that long for another process's write
  lock, then fails with :class:`~actors.store.errors.StoreBusy`;
* ``foreign_keys=ON``.

A write transaction is ``BEGIN IMMEDIATE`` (it takes the write lock first, so
two processes never both read a session row and then both write it); a read
is a deferred ``BEGIN`` (one WAL snapshot for all its statements).

Opening checks the file before anything is written: a path that is not a
regular file (a FIFO would block ``open`` forever), a file that is not a
database, a damaged one (``PRAGMA quick_check``), a foreign database and a
newer schema are each refused with one clear error and nothing left open.
"""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fore.actors.store.errors import (
    StoreBusy,
    StoreClosed,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
)
from fore.actors.store.sql import SqlSessionStore
from fore.actors.store.statements import Dialect, Row, Tx
from fore.actors.store.url import SqliteTarget

DIALECT = Dialect(
    name="sqlite",
    prefix="",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    placeholder="?",
)
MIN_SQLITE = (3, 35, 0)
"""``RETURNING`` and ``ON CONFLICT DO NOTHING`` on an ``INSERT … SELECT``."""
QUICK_CHECK_MAX_BYTES = 512 * 1024 * 1024
"""Files up to this size get a full ``PRAGMA quick_check`` at open (about a second per GB
here, warm page cache); larger ones only the structural checks, their damage found when
it is read."""

_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_CORRUPT = {"SQLITE_CORRUPT", "SQLITE_NOTADB"}


def translate(exc: sqlite3.Error, shown: str) -> StoreError:
    """One typed store error for a sqlite3 exception (chain the original as its cause)."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    name = str(getattr(exc, "sqlite_errorname", ""))
    base = name.split("_", 2)
    family = "_".join(base[:2]) if len(base) >= 2 else name
    lowered = message.lower()
    if family in _BUSY or "database is locked" in lowered:
        return StoreBusy(f"{shown}: the database stayed locked past the busy timeout ({message})")
    if family in _CORRUPT or "malformed" in lowered or "not a database" in lowered:
        return StoreCorrupted(f"{shown} is not a usable SQLite database: {message}")
    if isinstance(exc, sqlite3.OperationalError):
        return StoreUnavailable(f"{shown}: {message}")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(f"{shown}: integrity error: {message}")
    if isinstance(exc, sqlite3.DatabaseError):
        return StoreCorrupted(f"{shown} is not a usable SQLite database: {message}")
    return StoreError(f"{shown}: {message}")


class _SqliteTx:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._conn.execute(sql, params).fetchall()

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._conn.execute(sql, params)

    def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(sql, params)


class _Pool:
    """At most ``size`` connections, made on demand; a wait for one has a deadline."""

    def __init__(self, target: SqliteTarget, size: int, timeout: float) -> None:
        self._target = target
        self._size = size
        self._timeout = timeout
        self._idle: list[sqlite3.Connection] = []
        self._count = 0
        self._closed = False
        self._cond = threading.Condition()

    @property
    def timeout(self) -> float:
        """The busy timeout: how long a connection waits for another's lock."""
        return self._timeout

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            str(self._target.path),
            timeout=self._timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=64,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def get(self) -> sqlite3.Connection:
        deadline = time.monotonic() + self._timeout
        with self._cond:
            while True:
                if self._closed:
                    raise StoreClosed(f"the session store {self._target.shown} is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self._size:
                    self._count += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreBusy(
                        f"{self._target.shown}: no free connection within {self._timeout:g} s"
                    )
                self._cond.wait(left)
        try:
            return self.connect()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def put(self, conn: sqlite3.Connection, *, broken: bool) -> None:
        with self._cond:
            if broken or self._closed:
                self._count -= 1
                conn.close()
            else:
                self._idle.append(conn)
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            conn.close()


class SqliteSessionStore(SqlSessionStore):
    """A session store in one SQLite file (see the module docstring)."""

    def __init__(
        self,
        target: SqliteTarget,
        *,
        owner: str,
        lease_ttl: float,
        timeout: float,
        max_connections: int,
        auto_renew: bool,
    ) -> None:
        super().__init__(url=target.shown, owner=owner, lease_ttl=lease_ttl, dialect=DIALECT)
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StoreUnavailable(
                f"the session store needs SQLite {'.'.join(map(str, MIN_SQLITE))} or newer, "
                f"this Python has {sqlite3.sqlite_version}"
            )
        self._target = target
        self._check_path()
        self._pool = _Pool(target, max(1, max_connections), timeout)
        try:
            self._first_open()
            self._migrate()
        except BaseException:
            self._pool.close()
            raise
        self._start_renewing(auto_renew)

    def _check_path(self) -> None:
        path = self._target.path
        try:
            info = path.stat()
        except FileNotFoundError:
            if not path.parent.is_dir():
                raise StoreUnavailable(
                    f"{self.url}: the directory {str(path.parent)!r} does not exist"
                ) from None
            return
        except OSError as exc:
            raise StoreUnavailable(f"{self.url}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode):
            raise StoreUnavailable(f"{self.url}: {str(path)!r} is not a regular file")

    def _first_open(self) -> None:
        """The checks that say "not a database" or "damaged" (reading only), then WAL on.

        Several processes may open one new file at once (the shards of a
        ``RayRuntime``, two ``fore run``): switching it to WAL takes a lock
        SQLite does not wait for with its busy handler -- the switch answers
        "database is locked" at once while another connection holds it. So
        a busy answer here is retried, spaced out, until the store's own
        busy timeout has passed; only then is it :class:`StoreBusy`.
        """
        deadline = time.monotonic() + self._pool.timeout
        pause = 0.005
        while True:
            try:
                self._first_open_once()
                return
            except StoreBusy:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.1)

    def _first_open_once(self) -> None:
        try:
            conn = self._pool.connect()
        except sqlite3.Error as exc:
            raise translate(exc, self.url) from exc
        try:
            self._check_file(conn)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise StoreUnavailable(f"{self.url}: cannot use WAL mode here (got {mode!r})")
        except sqlite3.Error as exc:
            raise translate(exc, self.url) from exc
        except OSError as exc:
            raise StoreUnavailable(f"{self.url}: {exc}") from None
        finally:
            conn.close()

    def _check_file(self, conn: sqlite3.Connection) -> None:
        """Refuse a damaged file before anything writes to it (not even the WAL switch)."""
        path = self._target.path
        if not path.exists():
            return  # a new store
        size = path.stat().st_size
        wal = Path(f"{path}-wal")
        wal_size = wal.stat().st_size if wal.exists() else 0
        if size + wal_size <= QUICK_CHECK_MAX_BYTES:
            problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(3)").fetchall()]
            if problems != ["ok"]:
                found = " ".join("; ".join(problems).split())
                raise StoreCorrupted(f"{self.url} is damaged: {found[:300]}")
            return
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        if wal_size == 0 and size < page_size * pages:
            raise StoreCorrupted(f"{self.url} is truncated ({size} of {page_size * pages} bytes)")

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Tx]:
        conn = self._pool.get()
        broken = True
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield _SqliteTx(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            broken = False
        except StoreError:
            broken = False  # the rollback went through: the connection is fine
            raise
        except sqlite3.Error as exc:
            raise translate(exc, self.url) from exc
        finally:
            self._pool.put(conn, broken=broken)

    def _migration_transaction(self) -> Any:
        return self._transaction(write=True)

    def _has_version_table(self, tx: Tx) -> bool:
        return bool(
            tx.rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'")
        )

    def _foreign_tables(self, tx: Tx) -> list[str]:
        return [
            str(name)
            for (name,) in tx.rows(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
                " AND name NOT LIKE 'sqlite_%'"
            )
        ]

    def _close_connections(self) -> None:
        self._pool.close()
