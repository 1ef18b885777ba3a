"""The store's schema, as numbered migrations per backend.

The database records which migrations it has had in ``schema_version`` (one
row per applied version). Opening a store applies the missing ones in order,
in one transaction (SQLite ``BEGIN IMMEDIATE``; PostgreSQL under an advisory
lock, so two processes opening a fresh database at once migrate it once). A
database whose version is higher than :data:`LATEST` was written by a newer
Fore and is refused untouched (:class:`~actors.store.errors.SchemaTooNew`).

A change of schema is a new :class:`Migration` appended here -- never an edit
of a released one -- with both backends' statements and a test that opens a
database of the previous version.

Why the tables look as they do:

* ``items.body`` is TEXT holding ``model_dump_json()`` verbatim (not JSONB,
  which would reorder keys and break the byte-identical round trip);
* ``sessions`` carries the lease (``lease_owner``, ``lease_expires`` in epoch
  seconds of the database's clock, so hosts with skewed clocks agree), the
  next sequence numbers and the usage totals, so an append is one ``UPDATE``
  of that row (which also locks it) followed by plain inserts;
* a fork is a copy (``INSERT … SELECT``), not a parent pointer: every
  session's history is one primary-key range, loads never walk a chain, and
  deleting a parent never touches its forks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Backend = Literal["sqlite", "postgres"]

PG_SCHEMA = "fore"
"""PostgreSQL keeps every table in this schema, away from the database's ``public`` tables."""
PG_MIGRATION_LOCK = 0x666F7265_73746F72  # "forestor": the advisory lock key of migrations


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]

    def statements(self, backend: Backend) -> tuple[str, ...]:
        return self.sqlite if backend == "sqlite" else self.postgres


_SQLITE_1 = (
    """CREATE TABLE schema_version (
        version INTEGER PRIMARY KEY,
        description TEXT NOT NULL,
        applied_at REAL NOT NULL
    )""",
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        model_name TEXT NOT NULL,
        model_settings TEXT NOT NULL,
        session_config TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        parent_id TEXT,
        forked_at INTEGER,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        next_seq INTEGER NOT NULL DEFAULT 0,
        turn_count INTEGER NOT NULL DEFAULT 0,
        next_alert_seq INTEGER NOT NULL DEFAULT 0,
        prompt_tokens INTEGER NOT NULL DEFAULT 0,
        completion_tokens INTEGER NOT NULL DEFAULT 0,
        total_tokens INTEGER NOT NULL DEFAULT 0,
        cached_tokens INTEGER NOT NULL DEFAULT 0,
        pending_actions TEXT NOT NULL DEFAULT '[]',
        lease_owner TEXT,
        lease_expires REAL
    )""",
    "CREATE INDEX sessions_recent ON sessions (updated_at DESC, id DESC)",
    "CREATE INDEX sessions_owner ON sessions (lease_owner) WHERE lease_owner IS NOT NULL",
    """CREATE TABLE items (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        turn INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE alerts (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE blob_refs (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        blob_id TEXT NOT NULL,
        first_seq INTEGER NOT NULL,
        PRIMARY KEY (session_id, blob_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX blob_refs_blob ON blob_refs (blob_id)",
)

_POSTGRES_1 = (
    f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}",
    f"""CREATE TABLE {PG_SCHEMA}.schema_version (
        version INTEGER PRIMARY KEY,
        description TEXT NOT NULL,
        applied_at DOUBLE PRECISION NOT NULL
    )""",
    f"""CREATE TABLE {PG_SCHEMA}.sessions (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        model_name TEXT NOT NULL,
        model_settings TEXT NOT NULL,
        session_config TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        parent_id TEXT,
        forked_at BIGINT,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        next_seq BIGINT NOT NULL DEFAULT 0,
        turn_count BIGINT NOT NULL DEFAULT 0,
        next_alert_seq BIGINT NOT NULL DEFAULT 0,
        prompt_tokens BIGINT NOT NULL DEFAULT 0,
        completion_tokens BIGINT NOT NULL DEFAULT 0,
        total_tokens BIGINT NOT NULL DEFAULT 0,
        cached_tokens BIGINT NOT NULL DEFAULT 0,
        pending_actions TEXT NOT NULL DEFAULT '[]',
        lease_owner TEXT,
        lease_expires DOUBLE PRECISION
    )""",
    f"CREATE INDEX sessions_recent ON {PG_SCHEMA}.sessions (updated_at DESC, id DESC)",
    f"CREATE INDEX sessions_owner ON {PG_SCHEMA}.sessions (lease_owner) "
    "WHERE lease_owner IS NOT NULL",
    f"""CREATE TABLE {PG_SCHEMA}.items (
        session_id TEXT NOT NULL REFERENCES {PG_SCHEMA}.sessions (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        turn BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    f"""CREATE TABLE {PG_SCHEMA}.alerts (
        session_id TEXT NOT NULL REFERENCES {PG_SCHEMA}.sessions (id) ON DELETE CASCADE,
        seq BIGINT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    f"""CREATE TABLE {PG_SCHEMA}.blob_refs (
        session_id TEXT NOT NULL REFERENCES {PG_SCHEMA}.sessions (id) ON DELETE CASCADE,
        blob_id TEXT NOT NULL,
        first_seq BIGINT NOT NULL,
        PRIMARY KEY (session_id, blob_id)
    )""",
    f"CREATE INDEX blob_refs_blob ON {PG_SCHEMA}.blob_refs (blob_id)",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "sessions with leases, items, alerts, blob references",
        _SQLITE_1,
        _POSTGRES_1,
    ),
)
LATEST = MIGRATIONS[-1].version


def pending(current: int) -> tuple[Migration, ...]:
    """The migrations a database at version ``current`` still needs, in order."""
    return tuple(m for m in MIGRATIONS if m.version > current)
