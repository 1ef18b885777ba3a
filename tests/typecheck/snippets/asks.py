"""Shared by the good and the bad program: a few requests, notices and an asking actor."""

from __future__ import annotations

from fore.actors.core.pooled import ForeActor
from fore.messages.address import Ask
from fore.messages.base import ControlMessage, Message


class Ping(Ask[int]):
    """Answered with an int."""

    n: int = 0


class Name(Ask[str]):
    """Answered with a str."""


class Pause(ControlMessage, Ask[bool]):
    """A control-lane request answered with a bool."""


class Note(Message):
    """A notice: told, never asked."""

    text: str = ""


PingMessage = Ping | Name | Pause | Note
"""Everything the pinged actor accepts."""


class Asker(ForeActor):
    """Continuations of each answer type."""

    def got_int(self, answer: int) -> None:
        """An int answer."""

    def got_str(self, answer: str) -> None:
        """A str answer."""

    def got_any_answer(self, answer: object) -> None:
        """Any answer."""
