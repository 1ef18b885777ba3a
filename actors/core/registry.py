"""An O(1) registry of live actors, by URN, by name and by session.

pykka's ``ActorRegistry`` is one global list: every lookup is a linear scan
and every unregister a ``list.remove``. With thousands of session actors that
dominates spawn and stop; here every operation is a dict operation.
"""

from __future__ import annotations

import threading
from typing import Any

from pykka import ActorRef

from fore.actors.core.errors import ActorSystemClosed


class Registry:
    """Thread-safe index of live pooled actors."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_urn: dict[str, ActorRef[Any]] = {}
        self._by_name: dict[str, ActorRef[Any]] = {}
        self._names: dict[str, str] = {}  # urn -> name
        self._by_session: dict[str, dict[str, ActorRef[Any]]] = {}
        self._sessions: dict[str, str] = {}  # urn -> session
        self._closed_reason: str | None = None

    def close(self, reason: str) -> None:
        """Refuse every later registration (the system is shutting down).

        Taken under the same lock as :meth:`register`, so an actor is either
        in the snapshot the shutdown takes next, or refused at its start.
        """
        with self._lock:
            self._closed_reason = reason

    def register(
        self, ref: ActorRef[Any], *, name: str | None = None, session: str | None = None
    ) -> None:
        urn = ref.actor_urn
        with self._lock:
            if self._closed_reason is not None:
                raise ActorSystemClosed(
                    f"cannot start {ref.actor_class.__name__}: {self._closed_reason}"
                )
            if name is not None:
                existing = self._by_name.get(name)
                if existing is not None and existing.is_alive():
                    raise ValueError(f"an actor named {name!r} is already registered")
                self._by_name[name] = ref
                self._names[urn] = name
            self._by_urn[urn] = ref
            if session is not None:
                self._by_session.setdefault(session, {})[urn] = ref
                self._sessions[urn] = session

    def unregister(self, ref: ActorRef[Any]) -> None:
        urn = ref.actor_urn
        with self._lock:
            if self._by_urn.pop(urn, None) is None:
                return
            name = self._names.pop(urn, None)
            if name is not None and self._by_name.get(name) is ref:
                del self._by_name[name]
            session = self._sessions.pop(urn, None)
            if session is not None:
                members = self._by_session.get(session)
                if members is not None:
                    members.pop(urn, None)
                    if not members:
                        del self._by_session[session]

    def get_by_urn(self, urn: str) -> ActorRef[Any] | None:
        with self._lock:
            return self._by_urn.get(urn)

    def get_by_name(self, name: str) -> ActorRef[Any] | None:
        with self._lock:
            return self._by_name.get(name)

    def get_by_session(self, session: str) -> list[ActorRef[Any]]:
        with self._lock:
            return list(self._by_session.get(session, {}).values())

    def sessions(self) -> list[str]:
        with self._lock:
            return list(self._by_session)

    def get_all(self) -> list[ActorRef[Any]]:
        with self._lock:
            return list(self._by_urn.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_urn)
