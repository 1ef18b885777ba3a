"""The session store's errors: one typed, one-line error per thing that can go wrong.

Every public operation of a :class:`~actors.store.api.SessionStore` raises only
:class:`StoreError` subclasses (driver exceptions are translated at the
backend boundary and chained as ``__cause__``), so a caller -- the runtime, the
CLI -- can answer each with one clear line and never crash on a database's
own exception type. Messages never contain a password: store URLs are shown
redacted.
"""

from __future__ import annotations

from fore.errors import (
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

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = [
    "InvalidRecord",
    "LeaseLost",
    "NotASessionStore",
    "SchemaError",
    "SchemaTooNew",
    "SessionExists",
    "SessionLeased",
    "SessionNotFound",
    "StoreBusy",
    "StoreClosed",
    "StoreCorrupted",
    "StoreError",
    "StoreUnavailable",
    "StoreUrlError",
]
