"""A pooled actor's reference: pykka's ``ActorRef``, saying "gone" in Fore's words.

pykka's ``tell`` and ``ask`` check that the actor is alive before they send,
and raise ``pykka.ActorDeadError`` when it is not. Everything else Fore
answers for an actor that is not running is :class:`~fore.errors.ActorStopped`
(the mailbox's rejection, an exit's answer to queued asks, a handle whose
child is gone), which is a ``pykka.ActorDeadError`` and a
:class:`~fore.errors.ForeError`. Without this subclass one case -- sending to
a ref whose actor has already stopped, or making a proxy of it -- would still
raise pykka's bare error, which ``except fore.ForeError`` does not catch. The
check and its message are pykka's own (pykka's test suite, run against Fore,
reads the message). :func:`stopped_as_fore` does the same for other code that
makes pykka proxies (a supervised child's ``Handle``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar, overload

import pykka
from pykka import ActorDeadError, ActorProxy, ActorRef, Future
from pykka._envelope import Envelope

from fore.actors.core.errors import ActorStopped

A = TypeVar("A", bound=pykka.Actor)


@contextmanager
def stopped_as_fore() -> Iterator[None]:
    """pykka's bare ``ActorDeadError`` raised inside, re-raised as :class:`ActorStopped`
    (its message kept)."""
    try:
        yield
    except ActorStopped:
        raise
    except ActorDeadError as error:
        raise ActorStopped(str(error)) from None


class PooledRef(ActorRef[A]):
    """pykka's ``ActorRef``; a send to a stopped actor raises :class:`ActorStopped`."""

    def tell(self, message: Any) -> None:
        if not self.is_alive():
            raise ActorStopped(f"{self} not found")
        self.actor_inbox.put(Envelope(message))

    @overload
    def ask(
        self, message: Any, *, block: Literal[False], timeout: float | None = None
    ) -> Future[Any]: ...

    @overload
    def ask(self, message: Any, *, block: Literal[True], timeout: float | None = None) -> Any: ...

    @overload
    def ask(
        self, message: Any, *, block: bool = True, timeout: float | None = None
    ) -> Any | Future[Any]: ...

    def ask(
        self, message: Any, *, block: bool = True, timeout: float | None = None
    ) -> Any | Future[Any]:
        future: Future[Any] = self.actor_class._create_future()
        if self.is_alive():
            self.actor_inbox.put(Envelope(message, reply_to=future))
        else:
            error = ActorStopped(f"{self} not found")
            future.set_exception((ActorStopped, error, None))
        if block:
            return future.get(timeout=timeout)
        return future

    def proxy(self) -> ActorProxy[A]:
        with stopped_as_fore():
            return super().proxy()
