"""Typed addresses and typed asks: what an actor accepts, and what a request is answered with.

Actors talk through ``ActorRef``\\ s, supervision ``Handle``\\ s and a session's
event queue; until now every such link was typed ``Any``, and so was every
answer that :meth:`~actors.core.pooled.PooledActor.ask_then` handed to its
continuation. The types here let mypy check both ends of a link, following
pykka's ``Protocol`` extension points:

* :class:`Recipient` ``[M]`` -- anything that can be *told* an ``M``
  (``ActorRef``, ``Handle``, ``EventQueue``, a test's collector).
* :class:`Address` ``[M]`` -- a recipient that can also be *asked*
  (``ActorRef``, ``Handle``): what an ask is sent to.
* :class:`Ask` ``[R]`` -- the base of a request message answered with an
  ``R``: ``class GetHistory(Ask[tuple[Item, ...]])``.
* :class:`Replying` ``[M, R]`` -- "a message of type ``M`` answered with an
  ``R``"; every ``Ask[R]`` subclass ``M`` is one. A typed ask is declared as
  ``ask(target: Address[M], message: Replying[M, R], then: Callable[[R], object])``,
  so mypy rejects a target that does not accept the message, a ``then``
  that expects another answer, and a message that is not a request.

An actor's accepted messages are a union (``WorkerMessage = Submit |
GetHistory | ...``), so ``Address[WorkerMessage]`` accepts exactly those.
The protocols are contravariant in the message: an address that accepts
every :class:`~messages.base.Message` is an ``Address[Submit]`` too.

This module is layer 0 (messages): pure typing over :mod:`messages.base`,
with nothing to run.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, Protocol, Self, TypeVar, overload

from fore.messages.base import Message

__all__ = ["Address", "Ask", "Recipient", "Replying"]

M_contra = TypeVar("M_contra", contravariant=True)
M_co = TypeVar("M_co", covariant=True)
R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")


class Recipient(Protocol[M_contra]):
    """Anything that can be told an ``M``: an actor's ref or handle, an event queue.

    ``tell`` raises ``ActorStopped`` (a ``pykka.ActorDeadError``) once the recipient is gone
    (:func:`~actors.core.pooled.tell_quietly` swallows it).
    """

    def tell(self, message: M_contra, /) -> None: ...


class Address(Recipient[M_contra], Protocol[M_contra]):
    """A recipient that can also be asked: ``ActorRef`` and ``Handle`` conform.

    Two forms: ``ask(message, block=False)`` returns a future (what an actor
    uses, through :meth:`~actors.core.pooled.PooledActor.ask_typed`), and
    ``ask(message, timeout=...)`` waits for the answer (a caller's own
    thread). An explicit ``block=True`` is not part of the protocol: pykka's
    ``ActorRef`` declares that overload without a default and supervision's
    ``Handle`` with one, so no single declaration of it fits both.
    """

    @overload
    def ask(
        self, message: M_contra, /, *, block: Literal[False], timeout: float | None = ...
    ) -> Any: ...
    @overload
    def ask(self, message: M_contra, /, *, timeout: float | None = ...) -> Any: ...


class Replying(Protocol[M_co, R_co]):
    """A message of type ``M`` that is answered with an ``R`` (see :class:`Ask`).

    The two methods exist only for the type checker: ``_self`` names the
    message's own type, ``_reply`` its answer's.
    """

    def _self(self) -> M_co: ...

    def _reply(self) -> R_co: ...


class Ask(Message, Generic[R]):
    """The base of a request message answered with an ``R``.

    ``class Submit(Ask[TurnResult])`` declares that whoever asks a ``Submit``
    gets a ``TurnResult``; a control-lane request derives from both
    ``ControlMessage`` and ``Ask[R]``. Nothing changes at run time: the
    answer is whatever the handler returns, and the declaration is what mypy
    checks the askers' continuations against.
    """

    def _self(self) -> Self:
        return self

    def _reply(self) -> R:
        raise TypeError(f"{type(self).__name__}._reply is a type declaration; it has no value")
