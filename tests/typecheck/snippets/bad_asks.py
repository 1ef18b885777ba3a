"""Typed asks that mypy --strict must reject, each on the line marked ``# E: <code>``."""

from __future__ import annotations

from fore.actors.core.continuations import tell_quietly
from fore.actors.core.future import PooledFuture
from fore.messages.address import Address, Recipient
from fore.supervision.session_events import EventQueue
from tests.typecheck.snippets.asks import Asker, Name, Note, Ping, PingMessage


class BadAsker(Asker):
    """Each marked line is a mistake the types must catch."""

    def asks(
        self, target: Address[PingMessage], names: Address[Name], notes: Recipient[Note]
    ) -> None:
        # The continuation expects a str; a Ping is answered with an int.
        self.ask_typed(target, Ping(), self.got_str)  # E: arg-type
        # The target does not accept a Ping.
        self.ask_typed(names, Ping(), self.got_int)  # E: misc
        # A notice is not a request: it declares no answer.
        self.ask_typed(target, Note(), self.got_any_answer)  # E: arg-type
        # The recipient does not accept a Ping.
        tell_quietly(notes, Ping())  # E: misc
        # An event queue can be told, not asked.
        queue: Address[Note] = EventQueue()  # E: assignment
        # The future carries the declared answer type.
        wrong: PooledFuture[str] = self.ask_typed(target, Ping(), print)  # E: arg-type
        # ask_then checks the same: a mistyped ask falls to its deprecated, untyped overload,
        self.ask_then(target, Ping(), self.got_str)  # E: deprecated
        # and so does a message that declares no answer.
        self.ask_then(target, Note(), self.got_any_answer)  # E: deprecated
        assert queue and wrong
