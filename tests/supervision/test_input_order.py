"""The order of a session's inputs (supervision/input_order.py): a key never overtakes a
submit or Tab sent before it, and with nothing on its way it is told at once."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pykka import ActorDeadError

from fore.messages.speculation import Keystroke
from fore.supervision.input_order import InputOrder, OnTheWay


class Front:
    """The controller's mailbox as the keys reach it."""

    def __init__(self) -> None:
        self.told: list[str] = []
        self.closed = False

    def tell(self, message: Any) -> None:
        if self.closed:
            raise ActorDeadError("closed")
        self.told.append(message.text)


def test_a_key_with_nothing_on_its_way_is_told_at_once() -> None:
    front = Front()
    order = InputOrder(front)
    order.keystroke(Keystroke(text="a"))
    assert front.told == ["a"]


def test_keys_after_a_tab_wait_for_it_then_go_in_order() -> None:
    front = Front()
    order = InputOrder(front)
    tab = order.sending()
    order.keystroke(Keystroke(text="n"))
    order.keystroke(Keystroke(text="no"))
    assert front.told == []
    tab()  # the controller handles the Tab
    assert front.told == ["n", "no"]
    tab()  # its answer: nothing more
    order.keystroke(Keystroke(text="now"))
    assert front.told == ["n", "no", "now"]


def test_keys_held_for_a_session_that_closed_are_dropped() -> None:
    front = Front()
    order = InputOrder(front)
    tab = order.sending()
    order.keystroke(Keystroke(text="n"))
    front.closed = True
    tab()  # answered with the session's end: nothing to abort any more
    assert front.told == []


# Each step: send a submit or Tab, type a key, or one input on its way arrives (or is
# answered): the index picks which, among those still on their way.
steps = st.lists(
    st.one_of(
        st.just(("send", 0)), st.just(("key", 0)), st.tuples(st.just("arrive"), st.integers(0, 5))
    ),
    max_size=40,
)


@given(steps)
def test_no_key_overtakes_an_input_sent_before_it(plan: list[tuple[str, int]]) -> None:
    """Whatever the order in which inputs arrive: keys are told in the order typed, each
    only once every input sent before it has arrived, and all of them in the end."""
    front = Front()
    order = InputOrder(front)
    on_the_way: list[tuple[int, OnTheWay]] = []
    arrived: set[int] = set()
    sent_before: dict[str, int] = {}  # a key -> how many inputs were sent before it
    typed: list[str] = []
    sent = 0

    def check() -> None:
        assert front.told == typed[: len(front.told)]  # in typing order, once each
        for key in front.told:
            assert set(range(sent_before[key])) <= arrived, key

    for kind, index in plan:
        if kind == "send":
            on_the_way.append((sent, order.sending()))
            sent += 1
        elif kind == "key":
            key = f"k{len(typed)}"
            typed.append(key)
            sent_before[key] = sent
            order.keystroke(Keystroke(text=key))
        elif on_the_way:
            number, entry = on_the_way.pop(index % len(on_the_way))
            arrived.add(number)
            entry()
            entry()  # arrived, then answered: the second call does nothing
        check()
    for number, entry in on_the_way:
        arrived.add(number)
        entry()
        check()
    assert front.told == typed
