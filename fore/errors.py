"""The root of every exception Fore raises: ``except fore.ForeError`` catches them all.

Fore's exceptions keep the builtin base that says what kind of failure they
are (``BlobNotFound`` is a ``LookupError``, ``PathOutOfScope`` a
``ValueError``, ``AskTimeout`` a ``pykka.Timeout``), and all of them are
``ForeError``\\ s, so an application can catch everything from Fore in one
clause without catching its own bugs.
"""

from __future__ import annotations

__all__ = ["ForeError"]


class ForeError(Exception):
    """Base class of every exception Fore defines."""
