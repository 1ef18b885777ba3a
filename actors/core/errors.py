"""Errors the pooled runtime raises or answers asks with."""

from __future__ import annotations

import pykka

from fore.errors import ForeError


class AskTimeout(ForeError, pykka.Timeout):
    """An ask was not answered before its deadline.

    A subclass of :class:`pykka.Timeout`, so code written against pykka keeps
    catching it.
    """


class ActorCrashed(ForeError):
    """The actor failed while handling this message (or before reaching it).

    Answers the ask whose handler raised a ``BaseException`` such as
    ``SystemExit``: the asker gets this instead of the raw ``BaseException``
    so that a ``SystemExit`` inside one actor never unwinds another thread.
    """


class UnhandledMessageError(ForeError):
    """An actor received a message type it has no handler for."""


class BlockingOnDispatcherError(ForeError, RuntimeError):
    """A handler tried to wait on a pending future on a dispatcher thread.

    A dispatcher thread runs many actors; one that sits in ``future.get()``
    (a blocking ``ask``, ``ref.stop()``, a proxy's ``.get()``) serves nobody
    until the answer comes, and a few such waits stall the whole runtime --
    or deadlock it when the answer must come from an actor queued behind
    them. Raised instead of waiting: use :meth:`PooledActor.ask_then`, a
    future's ``add_done_callback``, or :meth:`PooledActor.run_blocking`.
    """


class ActorSystemClosed(ForeError, RuntimeError):
    """An actor was started in an actor system that is shutting down (or shut down).

    Without this, an actor registered after the shutdown took its snapshot of
    the live actors would sit on a dispatcher with no threads: its asks would
    be answered only at their deadlines.
    """
