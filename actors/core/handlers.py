"""Typed dispatch: ``@handles`` and the table ``on_receive`` dispatches by.

A typed actor is a set of small ``@handles(SomeMessage)`` methods instead of
an ``isinstance`` ladder: each class collects its handlers (its bases'
first) into a table when it is defined, and ``on_receive`` looks the
message's type up there -- walking the type's MRO once, then cached per
class -- and calls the method. A message nobody handles goes to
:meth:`TypedDispatch.on_unhandled`.

A mixin of :class:`~actors.core.pooled.PooledActor` (not used alone); kept
apart from the actor's message loop (:mod:`actors.core.pooled`) because the
table is built when a class is defined, not when an actor runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from fore.actors.core.errors import UnhandledMessageError

if TYPE_CHECKING:
    from pykka._envelope import Envelope

T = TypeVar("T")
_pykka_log = logging.getLogger("pykka")
"""pykka's logger: an unexpected message is reported there, in pykka's words."""


def handles(*message_types: type) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Mark a method as the handler of one or more message types.

    ``on_receive`` dispatches on the message's type (walking its MRO), so a
    typed actor is a set of small ``@handles(SomeMessage)`` methods instead of
    an ``isinstance`` ladder.
    """

    def decorate(fn: Callable[..., T]) -> Callable[..., T]:
        fn.__fore_handles__ = message_types  # type: ignore[attr-defined]
        return fn

    return decorate


class TypedDispatch:
    """``on_receive`` by the message's type (a mixin of ``PooledActor``)."""

    strict_messages: ClassVar[bool] = False
    """Whether an ask carrying a message without a handler fails.

    ``False`` follows pykka: the message is logged and the ask answered
    ``None``. A typed actor sets ``True``, so that an asker expecting a typed
    answer gets :class:`UnhandledMessageError` naming the message instead of
    a ``None`` it would misread.
    """

    _fore_handlers: ClassVar[dict[type, str]] = {}
    _fore_dispatch_cache: ClassVar[dict[type, str | None]] = {}

    # The actor's state these methods read (set up by PooledActor).
    pykka_logging: ClassVar[bool]
    _fore_current: Envelope[Any] | None

    if TYPE_CHECKING:  # PooledActor's member this mixin uses

        @property
        def log(self) -> Any: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type, str] = {}
        for base in reversed(cls.__mro__[1:]):
            table.update(getattr(base, "_fore_handlers", {}))
        for name, attr in cls.__dict__.items():
            for message_type in getattr(attr, "__fore_handles__", ()):
                table[message_type] = name
        cls._fore_handlers = table
        cls._fore_dispatch_cache = {}

    def on_receive(self, message: Any) -> Any:
        """Dispatch to the ``@handles`` method for the message's type.

        An unknown message is logged; an ask carrying one is answered with
        :class:`UnhandledMessageError` so nobody waits for nothing.
        """
        cls = type(self)
        kind = type(message)
        try:
            name = cls._fore_dispatch_cache[kind]
        except KeyError:
            name = None
            for base in kind.__mro__:
                name = cls._fore_handlers.get(base)
                if name is not None:
                    break
            cls._fore_dispatch_cache[kind] = name
        if name is not None:
            return getattr(self, name)(message)
        return self.on_unhandled(message)

    def on_unhandled(self, message: Any) -> Any:
        """Called for a message without a handler.

        Logs it (on the ``pykka`` logger as pykka words it, and as Fore's
        ``unhandled_message`` event) and answers ``None``, as pykka does; a
        ``strict_messages`` actor rejects an ask with
        :class:`UnhandledMessageError` instead, so nobody misreads ``None``.
        """
        if self.pykka_logging:
            _pykka_log.warning("Unexpected message received by %s: %s", self, message)
        else:
            self.log.warning("unhandled_message", message_type=type(message).__name__)
        envelope = self._fore_current
        if self.strict_messages and envelope is not None and envelope.reply_to is not None:
            raise UnhandledMessageError(
                f"{type(self).__name__} has no handler for {type(message).__name__}"
            )
        return None
