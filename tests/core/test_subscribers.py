"""Event subscribers with the kinds each one reads (``Subscribe(kinds=...)``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pykka import ActorDeadError

from fore.actors.core.subscribers import Subscribers

KINDS = ("a", "b", "c")


class Inbox:
    def __init__(self, *, dead: bool = False) -> None:
        self.got: list[Any] = []
        self.dead = dead

    def tell(self, event: Any) -> None:
        if self.dead:
            raise ActorDeadError("gone")
        self.got.append(event)


class Event:
    def __init__(self, kind: str) -> None:
        self.kind = kind


def test_an_event_goes_only_to_the_subscribers_of_its_kind() -> None:
    subscribers = Subscribers()
    everything, only_a = Inbox(), Inbox()
    subscribers.add(everything)
    subscribers.add(only_a, {"a"})
    a, b = Event("a"), Event("b")
    subscribers.emit(a)
    subscribers.emit(b)
    assert everything.got == [a, b]
    assert only_a.got == [a]
    assert subscribers.wants("a") and subscribers.wants("b")
    subscribers.remove(everything)
    assert subscribers.wants("a") and not subscribers.wants("b")


def test_subscribing_again_replaces_the_kinds_and_a_dead_subscriber_is_dropped() -> None:
    subscribers = Subscribers()
    inbox, dead = Inbox(), Inbox(dead=True)
    subscribers.add(inbox, {"a"})
    subscribers.add(inbox, {"b"})
    subscribers.add(dead)
    assert len(subscribers) == 2
    subscribers.emit(Event("a"))
    assert inbox.got == [] and len(subscribers) == 1  # the dead one is gone
    assert list(subscribers) == [inbox]
    assert not subscribers.remove(dead)
    assert subscribers.remove(inbox) and len(subscribers) == 0
    assert not subscribers.wants("a")


@given(
    st.lists(st.one_of(st.none(), st.frozensets(st.sampled_from(KINDS))), min_size=0, max_size=5),
    st.lists(st.sampled_from(KINDS), max_size=10),
)
def test_each_subscriber_gets_exactly_its_kinds_in_order(
    asked: list[frozenset[str] | None], kinds: list[str]
) -> None:
    subscribers = Subscribers()
    inboxes = [Inbox() for _ in asked]
    for inbox, wanted in zip(inboxes, asked, strict=True):
        subscribers.add(inbox, wanted)
    events = [Event(kind) for kind in kinds]
    for event in events:
        assert subscribers.wants(event.kind) == any(w is None or event.kind in w for w in asked)
        subscribers.emit(event)
    for inbox, wanted in zip(inboxes, asked, strict=True):
        assert inbox.got == [e for e in events if wanted is None or e.kind in wanted]
