"""An actor's event subscribers, each with the kinds of event it asked for.

A subscriber (``Subscribe(address=..., kinds=...)``) names the event kinds it
reads -- the ``kind`` field every session event carries -- or ``None`` for
all of them. An event goes only to the subscribers that asked for its kind,
and an emitter asks :meth:`Subscribers.wants` before it *builds* an event
nobody would read (the speculation controller's status, for one, is built
only when a subscriber asked for ``speculation_status``). A subscriber that is
gone (its tell raises ``ActorDeadError``) is dropped on the spot.

Owned by one actor (its thread only); nothing here locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pykka import ActorDeadError

__all__ = ["Subscribers"]


class Subscribers:
    """Addresses with the event kinds each one reads (``None``: every kind)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: list[tuple[Any, frozenset[str] | None]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Any]:
        return iter([address for address, _kinds in self._entries])

    def __repr__(self) -> str:
        return f"Subscribers({len(self._entries)})"

    def add(self, address: Any, kinds: Iterable[str] | None = None) -> None:
        """Subscribe ``address`` to ``kinds`` (None: all); a second add replaces the first."""
        self.remove(address)
        self._entries.append((address, None if kinds is None else frozenset(kinds)))

    def remove(self, address: Any) -> bool:
        """Unsubscribe ``address``; False if it was not subscribed."""
        before = len(self._entries)
        self._entries = [(a, k) for a, k in self._entries if a != address]
        return len(self._entries) != before

    def wants(self, kind: str) -> bool:
        """Whether any subscriber reads events of ``kind`` (build one only then)."""
        return any(kinds is None or kind in kinds for _address, kinds in self._entries)

    def emit(self, event: Any) -> None:
        """Tell ``event`` to every subscriber of its kind; drop the ones that are gone."""
        kind = getattr(event, "kind", None)
        for address, kinds in list(self._entries):
            if kinds is not None and kind not in kinds:
                continue
            try:
                address.tell(event)
            except ActorDeadError:
                self._entries = [(a, k) for a, k in self._entries if a is not address]
