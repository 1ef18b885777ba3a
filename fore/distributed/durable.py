"""Interim adapter: a shard's sessions kept in the session store (stands in for issue #25).

The distributed runtime needs what issue #25 gives ``Runtime``:
``Runtime(store=url)`` writing each turn's items before the turn is reported,
``rt.resume_session(session_id, model=...)`` rebuilding a session from the
store, and leases that keep one session open in one process at a time. That
work is being integrated in parallel; the store layer it builds on
(:mod:`fore.actors.store`, ``open_store``) is already here. Until it lands, a
shard keeps its sessions durable through this adapter, on the store layer
directly -- and nothing else in :mod:`fore.distributed` touches the store.

What it assumes of #25, and what the merge does with it:

* ``Runtime(store=url)`` creates a session's record when the session opens
  (:meth:`DurableSessions.create`) and holds its lease while it is open;
* a turn's items are durable before the turn is reported: here the shard calls
  :meth:`append` with the items the turn added before it answers the caller;
* ``resume_session`` leases the session (taking over at once from a dead
  holder of this machine, :class:`~fore.actors.store.SessionLeased` from a live
  one) and restores its history: here :meth:`resume` returns the snapshot and
  the shard inserts the items into the new session's worker;
* closing a session releases its lease (:meth:`release`).

When #25 is merged, ``ShardServer`` opens ``Runtime(store=url)``, calls
``rt.resume_session`` instead of :meth:`resume` + the history insert, drops
its ``_persist`` calls, and this module goes.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import JsonValue

from fore.actors.store import (
    DEFAULT_LEASE_TTL,
    NewSession,
    SessionSnapshot,
    SessionStore,
    SessionSummary,
    TurnBatch,
    open_store,
)
from fore.messages.conversation import Item
from fore.messages.llm import Usage

__all__ = ["DurableSessions"]


class DurableSessions:
    """One shard's view of the session store (blocking: call it off the event loop)."""

    def __init__(self, url: str, *, lease_ttl: float = DEFAULT_LEASE_TTL) -> None:
        self.store: SessionStore = open_store(url, lease_ttl=lease_ttl)

    def create(
        self,
        session_id: str,
        *,
        workspace: str,
        model_name: str,
        model_settings: dict[str, JsonValue],
        session_config: dict[str, JsonValue],
    ) -> None:
        """Record a new session, leased to this shard (``SessionExists`` if the id is taken)."""
        self.store.create_session(
            NewSession(
                session_id=session_id,
                workspace=workspace,
                model_name=model_name,
                model_settings=model_settings,
                session_config=session_config,
            )
        )

    def resume(self, session_id: str) -> SessionSnapshot:
        """Lease a stored session here and read it (``SessionLeased``, ``SessionNotFound``)."""
        return self.store.open_session(session_id)

    def load(self, session_id: str) -> SessionSnapshot:
        """Read a stored session without leasing it."""
        return self.store.load(session_id)

    def append(self, session_id: str, items: Sequence[Item], usage: Usage | None = None) -> None:
        """Write one turn's items (and usage), all or nothing."""
        self.store.append(session_id, TurnBatch(items=tuple(items), usage=usage))

    def release(self, session_id: str) -> None:
        self.store.release(session_id)

    def list_sessions(self, *, limit: int = 20) -> tuple[SessionSummary, ...]:
        return self.store.list_sessions(limit=limit)

    def close(self) -> None:
        """Release every lease and close the connections (idempotent)."""
        self.store.close()
