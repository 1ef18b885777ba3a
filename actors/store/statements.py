"""Every SQL statement of the session store, written once for both backends.

Statements are written with ``?`` placeholders, ``{s}`` for the schema prefix
and ``{now}`` for the database's clock in epoch seconds; a :class:`Dialect`
renders them for its backend (SQLite or PostgreSQL) once, when a store opens
(:class:`Statements`). :class:`Tx` is what a backend's transaction offers
:class:`~actors.store.sql.SqlSessionStore`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fore.actors.store import migrations

Row = tuple[Any, ...]


class Tx(Protocol):
    """One open transaction of a backend."""

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """Run one statement that returns rows; its rows (waits for the answer)."""
        ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement whose result nobody reads (a backend may send it later, batched)."""
        ...

    def many(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each parameter tuple."""
        ...


@dataclass(frozen=True)
class Dialect:
    name: migrations.Backend
    prefix: str
    """The schema prefix of table names (``fore.`` or nothing)."""
    now: str
    """An SQL expression of the database clock's time in epoch seconds (float)."""
    placeholder: str

    def render(self, sql: str) -> str:
        text = sql.format(s=self.prefix, now=self.now)
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)


class Statements:
    """Every statement of the store, rendered once for a dialect."""

    def __init__(self, dialect: Dialect) -> None:
        r = dialect.render
        self.insert_version = r(
            "INSERT INTO {s}schema_version (version, description, applied_at) VALUES (?, ?, {now})"
        )
        self.version = r("SELECT MAX(version) FROM {s}schema_version")
        self.create = r(
            "INSERT INTO {s}sessions (id, workspace, model_name, model_settings, session_config,"
            " title, created_at, updated_at, lease_owner, lease_expires)"
            " VALUES (?, ?, ?, ?, ?, ?, {now}, {now}, ?, {now} + ?)"
            " ON CONFLICT (id) DO NOTHING RETURNING created_at"
        )
        self.acquire = r(
            "UPDATE {s}sessions SET lease_owner = ?, lease_expires = {now} + ?"
            " WHERE id = ? AND (lease_owner IS NULL OR lease_owner = ? OR lease_expires <= {now})"
            " RETURNING id"
        )
        self.take_over = r(
            "UPDATE {s}sessions SET lease_owner = ?, lease_expires = {now} + ?"
            " WHERE id = ? AND lease_owner = ? RETURNING id"
        )
        self.lease_of = r("SELECT lease_owner, lease_expires - {now} FROM {s}sessions WHERE id = ?")
        self.reserve = r(
            "UPDATE {s}sessions SET next_seq = next_seq + ?, turn_count = turn_count + ?,"
            " next_alert_seq = next_alert_seq + ?,"
            " prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?,"
            " total_tokens = total_tokens + ?, cached_tokens = cached_tokens + ?,"
            " title = CASE WHEN title = '' THEN ? ELSE title END,"
            " pending_actions = COALESCE(?, pending_actions),"
            " updated_at = {now}, lease_expires = {now} + ?"
            " WHERE id = ? AND lease_owner = ?"
            " RETURNING next_seq, turn_count, next_alert_seq"
        )
        self.insert_item = r(
            "INSERT INTO {s}items (session_id, seq, turn, body) VALUES (?, ?, ?, ?)"
        )
        self.insert_ref = r(
            "INSERT INTO {s}blob_refs (session_id, blob_id, first_seq) VALUES (?, ?, ?)"
            " ON CONFLICT (session_id, blob_id) DO NOTHING"
        )
        self.insert_alert = r("INSERT INTO {s}alerts (session_id, seq, body) VALUES (?, ?, ?)")
        self.prune_alerts = r("DELETE FROM {s}alerts WHERE session_id = ? AND seq < ?")
        self.record = r(
            "SELECT workspace, model_name, model_settings, session_config, title, parent_id,"
            " forked_at, created_at, updated_at, next_seq, turn_count, prompt_tokens,"
            " completion_tokens, total_tokens, cached_tokens, pending_actions"
            " FROM {s}sessions WHERE id = ?"
        )
        self.items = r("SELECT seq, body FROM {s}items WHERE session_id = ? ORDER BY seq")
        self.alerts = r("SELECT body FROM {s}alerts WHERE session_id = ? ORDER BY seq")
        self.refs = r(
            "SELECT blob_id FROM {s}blob_refs WHERE session_id = ? ORDER BY first_seq, blob_id"
        )
        self.fork_source = r("SELECT next_seq, turn_count FROM {s}sessions WHERE id = ?")
        self.fork_cut = r("SELECT MIN(seq) FROM {s}items WHERE session_id = ? AND turn >= ?")
        self.fork_session = r(
            "INSERT INTO {s}sessions (id, workspace, model_name, model_settings, session_config,"
            " title, parent_id, forked_at, created_at, updated_at, next_seq, turn_count,"
            " lease_owner, lease_expires)"
            " SELECT ?, workspace, model_name, model_settings, session_config, title, id, ?,"
            " {now}, {now}, ?, ?, ?, {now} + ? FROM {s}sessions WHERE id = ?"
            " ON CONFLICT (id) DO NOTHING RETURNING created_at"
        )
        self.fork_items = r(
            "INSERT INTO {s}items (session_id, seq, turn, body)"
            " SELECT ?, seq, turn, body FROM {s}items WHERE session_id = ? AND seq < ?"
        )
        self.fork_refs = r(
            "INSERT INTO {s}blob_refs (session_id, blob_id, first_seq)"
            " SELECT ?, blob_id, first_seq FROM {s}blob_refs WHERE session_id = ? AND first_seq < ?"
        )
        self.delete = tuple(
            r(f"DELETE FROM {{s}}{table} WHERE {column} = ?")
            for table, column in (
                ("items", "session_id"),
                ("alerts", "session_id"),
                ("blob_refs", "session_id"),
                ("sessions", "id"),
            )
        )
        columns = (
            "SELECT id, title, workspace, model_name, created_at, updated_at, next_seq,"
            " turn_count, parent_id, lease_owner, lease_expires - {now} FROM {s}sessions"
        )
        order = " ORDER BY updated_at DESC, id DESC LIMIT ?"
        self.list_all = r(columns + order)
        self.list_workspace = r(columns + " WHERE workspace = ?" + order)
        self.all_refs = r("SELECT DISTINCT blob_id FROM {s}blob_refs")
        self.renew = r(
            "UPDATE {s}sessions SET lease_expires = {now} + ? WHERE lease_owner = ? RETURNING id"
        )
        self.release = r(
            "UPDATE {s}sessions SET lease_owner = NULL, lease_expires = NULL"
            " WHERE id = ? AND lease_owner = ?"
        )
        self.release_all = r(
            "UPDATE {s}sessions SET lease_owner = NULL, lease_expires = NULL WHERE lease_owner = ?"
        )
