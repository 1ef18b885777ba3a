"""Typed asks that mypy --strict must accept (no error anywhere in this file)."""

from __future__ import annotations

from typing import Any

from pykka import ActorRef

from fore.actors.core.cancel import CancelScope
from fore.actors.core.continuations import tell_quietly
from fore.actors.core.future import PooledFuture
from fore.messages.address import Address, Recipient
from fore.messages.base import Message
from fore.supervision.handle import Handle
from fore.supervision.session_events import EventQueue
from tests.typecheck.snippets.asks import Asker, Name, Note, Pause, Ping, PingMessage


class GoodAsker(Asker):
    """Each call here is well typed."""

    def addresses(self, ref: ActorRef[Any], handle: Handle[Any]) -> None:
        # ActorRef and Handle are addresses; an event queue is a recipient.
        by_ref: Address[PingMessage] = ref
        by_handle: Address[Ping] = handle
        events: Recipient[Note] = EventQueue()
        assert by_ref and by_handle and events

    def asks(
        self,
        target: Address[PingMessage],
        anything: Address[Message],
        handle: Handle[Any],
        events: Recipient[Note],
    ) -> None:
        answer: PooledFuture[int] = self.ask_typed(target, Ping(n=1), self.got_int)
        name: PooledFuture[str] = self.ask_typed(
            handle, Name(), self.got_str, timeout=5.0, scope=CancelScope()
        )
        # An address of every message accepts each request (contravariance).
        self.ask_typed(anything, Pause(), lambda paused: print(paused is True))
        # A continuation may take a wider type than the answer.
        self.ask_typed(target, Ping(), self.got_any_answer, on_error=print)
        # ask_then is typed the same way (its untyped overload is deprecated).
        doubled: PooledFuture[int] = self.ask_then(target, Ping(n=2), self.got_int)
        self.ask_then(handle, Name(), self.got_str, on_error=print, timeout=5.0)
        told: bool = tell_quietly(events, Note(text="hi"))
        assert answer and name and doubled and told
        tell_quietly(target, Note())
        self.post_urgent(self.got_int, 1)
