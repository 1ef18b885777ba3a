"""Errors the pooled runtime raises or answers asks with."""

from __future__ import annotations

import pykka


class AskTimeout(pykka.Timeout):
    """An ask was not answered before its deadline.

    A subclass of :class:`pykka.Timeout`, so code written against pykka keeps
    catching it.
    """


class ActorCrashed(Exception):
    """The actor failed while handling this message (or before reaching it).

    Answers the ask whose handler raised a ``BaseException`` such as
    ``SystemExit``: the asker gets this instead of the raw ``BaseException``
    so that a ``SystemExit`` inside one actor never unwinds another thread.
    """


class UnhandledMessageError(Exception):
    """An actor received a message type it has no handler for."""
