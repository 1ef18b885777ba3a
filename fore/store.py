"""Sessions that outlive the process: the store's public names.

::

    from fore import Runtime
    from fore.store import SessionLeased, SessionNotFound

    with Runtime(store="sqlite:///sessions.db") as rt:
        for summary in rt.list_sessions():
            print(summary.session_id, summary.updated_at)
        try:
            session = rt.resume_session("a1b2c3", model=model)
        except SessionNotFound:
            ...  # no such session in this store
        except SessionLeased:
            ...  # open in another process right now

``Runtime(store=...)`` takes a URL (``sqlite:///path``, ``postgresql://...``;
the latter needs the ``postgres`` extra) or an opened :class:`SessionStore`;
a store that cannot be opened is one :class:`StoreError` at ``Runtime(...)``.
See the README's "Sessions that outlive the process" and ``docs/architecture.md``
section 8.
"""

from __future__ import annotations

from fore.actors.store import (
    SchemaTooNew,
    SessionLeased,
    SessionNotFound,
    SessionStore,
    SessionSummary,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    StoreUrlError,
    open_store,
)

__all__ = [
    "SchemaTooNew",
    "SessionLeased",
    "SessionNotFound",
    "SessionStore",
    "SessionSummary",
    "StoreCorrupted",
    "StoreError",
    "StoreUnavailable",
    "StoreUrlError",
    "open_store",
]
