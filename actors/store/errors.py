"""The session store's errors: one typed, one-line error per thing that can go wrong.

Every public operation of a :class:`~actors.store.api.SessionStore` raises only
:class:`StoreError` subclasses (driver exceptions are translated at the
backend boundary and chained as ``__cause__``), so a caller -- the runtime, the
CLI -- can answer each with one clear line and never crash on a database's
own exception type. Messages never contain a password: store URLs are shown
redacted.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every session-store error."""


# -- opening a store -----------------------------------------------------------------------


class StoreUrlError(StoreError, ValueError):
    """The store URL is malformed or of a scheme no backend handles."""


class StoreUnavailable(StoreError):
    """The database cannot be reached or opened (server down, bad path, no permission)."""


class StoreCorrupted(StoreError):
    """The database file is not a database, or its contents are damaged."""


class SchemaError(StoreError):
    """The database's schema is not one this version of Fore can use."""


class SchemaTooNew(SchemaError):
    """The database was migrated by a newer Fore: refused, never downgraded."""

    def __init__(self, found: int, supported: int) -> None:
        super().__init__(
            f"the session store has schema version {found}, newer than the {supported} this "
            f"Fore supports; upgrade Fore (the store is left untouched)"
        )
        self.found = found
        self.supported = supported


class NotASessionStore(SchemaError):
    """The database holds other tables but no Fore schema: refused rather than mixed in."""


class StoreBusy(StoreError):
    """A lock or a connection could not be had before its deadline."""


class StoreClosed(StoreError):
    """The store was closed; open a new one."""


# -- sessions -------------------------------------------------------------------------------


class InvalidRecord(StoreError, ValueError):
    """What the caller asked to write breaks a rule of the store (size, id, secrets, JSON)."""


class SessionNotFound(StoreError):
    """No session of that id in the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id!r} in the store")
        self.session_id = session_id


class SessionExists(StoreError):
    """A session of that id is already in the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"a session {session_id!r} is already in the store")
        self.session_id = session_id


class SessionLeased(StoreError):
    """The session is open in another process (its lease is held and not expired)."""

    def __init__(self, session_id: str, holder: str, expires_in: float) -> None:
        super().__init__(
            f"session {session_id!r} is open in another process ({holder}); its lease "
            f"expires in {max(0.0, expires_in):.0f} s unless that process renews it"
        )
        self.session_id = session_id
        self.holder = holder
        self.expires_in = expires_in


class LeaseLost(StoreError):
    """A write to a session this store does not hold (never acquired, released or taken over)."""

    def __init__(self, session_id: str, holder: str | None) -> None:
        if holder is None:
            detail = "it is not open here (open or create it first)"
        else:
            detail = f"its lease was taken over by another process ({holder})"
        super().__init__(f"cannot write session {session_id!r}: {detail}")
        self.session_id = session_id
        self.holder = holder
