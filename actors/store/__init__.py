"""Sessions that outlive the process: the session store.

``open_store(url)`` opens a :class:`SessionStore` -- SQLite
(``sqlite:///path/sessions.db``, the embedded default) or PostgreSQL
(``postgresql://…``, shared by several processes or machines; needs the
``postgres`` extra). Its API is blocking and thread-safe: call it from the
blocking lane, never from a dispatcher thread. See :mod:`actors.store.api` for
the rules (leases, atomic turns), :mod:`actors.store.migrations` for the
schema and :mod:`actors.store.codec` for what is stored and how.

Opening either succeeds completely or raises one :class:`StoreError` and
leaves nothing open: an unknown scheme (:class:`StoreUrlError`), an
unreachable server or unusable path (:class:`StoreUnavailable`), a damaged
SQLite file (:class:`StoreCorrupted`), a database of a newer schema
(:class:`SchemaTooNew`) or of another application (:class:`NotASessionStore`).
"""

from __future__ import annotations

from fore.actors.store.api import SessionStore
from fore.actors.store.errors import (
    InvalidRecord,
    LeaseLost,
    NotASessionStore,
    SchemaError,
    SchemaTooNew,
    SessionExists,
    SessionLeased,
    SessionNotFound,
    StoreBusy,
    StoreClosed,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    StoreUrlError,
)
from fore.actors.store.owner import this_process
from fore.actors.store.records import (
    Appended,
    NewSession,
    SessionRecord,
    SessionSnapshot,
    SessionSummary,
    TurnBatch,
)
from fore.actors.store.url import PostgresTarget, parse_store_url

DEFAULT_LEASE_TTL = 30.0
DEFAULT_TIMEOUT = 10.0

__all__ = [
    "DEFAULT_LEASE_TTL",
    "Appended",
    "InvalidRecord",
    "LeaseLost",
    "NewSession",
    "NotASessionStore",
    "SchemaError",
    "SchemaTooNew",
    "SessionExists",
    "SessionLeased",
    "SessionNotFound",
    "SessionRecord",
    "SessionSnapshot",
    "SessionStore",
    "SessionSummary",
    "StoreBusy",
    "StoreClosed",
    "StoreCorrupted",
    "StoreError",
    "StoreUnavailable",
    "StoreUrlError",
    "TurnBatch",
    "open_store",
]


def open_store(
    url: str,
    *,
    owner: str | None = None,
    lease_ttl: float = DEFAULT_LEASE_TTL,
    timeout: float = DEFAULT_TIMEOUT,
    max_connections: int = 4,
    auto_renew: bool = True,
) -> SessionStore:
    """Open (and, if new, create and migrate) the session store at ``url``.

    ``owner`` names this store as a lease holder (default: this process, with
    its host and pid, which lets a later process of this machine take over the
    leases at once if this one dies). ``lease_ttl`` is how long a lease lives
    unrenewed; with ``auto_renew`` a thread of the store renews its leases every
    third of it (without, call :meth:`SessionStore.renew_leases` yourself).
    ``timeout`` bounds every wait: a lock, a connection, a server's answer.
    """
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not (0.1 <= timeout <= 600.0)
    ):
        raise InvalidRecord("timeout must be between 0.1 and 600 seconds")
    if (
        isinstance(max_connections, bool)
        or not isinstance(max_connections, int)
        or not 1 <= max_connections <= 64
    ):
        raise InvalidRecord("max_connections must be from 1 to 64")
    target = parse_store_url(url)
    who = owner if owner is not None else str(this_process())
    if isinstance(target, PostgresTarget):
        from fore.actors.store.postgres import PostgresSessionStore

        return PostgresSessionStore(
            target,
            owner=who,
            lease_ttl=lease_ttl,
            timeout=timeout,
            max_connections=max_connections,
            auto_renew=auto_renew,
        )
    from fore.actors.store.sqlite import SqliteSessionStore

    return SqliteSessionStore(
        target,
        owner=who,
        lease_ttl=lease_ttl,
        timeout=timeout,
        max_connections=max_connections,
        auto_renew=auto_renew,
    )
