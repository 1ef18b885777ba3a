"""Store URLs: which backend, where, and how to show the URL without its password.

``sqlite:///abs/path/sessions.db`` (three slashes and an absolute path, like a
``file:`` URL; ``sqlite:relative/sessions.db`` for a path relative to the
working directory) and ``postgresql://user@host:port/db`` (also
``postgres://``; anything libpq accepts after the scheme, e.g.
``postgresql:///fore?host=/run/postgresql`` for a unix socket). Any other
scheme is refused with the list of the ones that exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from fore.actors.store.errors import StoreUrlError

SCHEMES = ("sqlite", "postgresql", "postgres")


@dataclass(frozen=True)
class SqliteTarget:
    path: Path
    shown: str
    """The URL as error messages show it."""


@dataclass(frozen=True)
class PostgresTarget:
    conninfo: str
    """The URL as given, for libpq."""
    shown: str
    """The URL with any password replaced by ``***``."""


def redact(url: str) -> str:
    """``url`` with the password of its user part and any ``password=`` parameter hidden."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode(
            [(k, "***" if k.lower() == "password" else v) for k, v in pairs], safe="/:"
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def parse_store_url(url: object) -> SqliteTarget | PostgresTarget:
    """The backend and location ``url`` names, or :class:`StoreUrlError` saying what is wrong."""
    if not isinstance(url, str):
        raise StoreUrlError(f"a store URL must be a str, not {type(url).__name__}")
    text = url.strip()
    if any(ord(c) < 32 for c in text):
        raise StoreUrlError("the store URL has control characters")
    scheme, sep, _ = text.partition(":")
    if not sep or not scheme:
        raise StoreUrlError(
            f"{redact(text)!r} is not a store URL (expected one of: "
            f"{', '.join(s + '://' for s in SCHEMES)})"
        )
    scheme = scheme.lower()
    if scheme == "sqlite":
        return _sqlite(text)
    if scheme in ("postgresql", "postgres"):
        try:
            urlsplit(text)
        except ValueError as exc:
            raise StoreUrlError(f"malformed PostgreSQL URL {redact(text)!r}: {exc}") from None
        return PostgresTarget(conninfo=text, shown=redact(text))
    raise StoreUrlError(
        f"unknown store URL scheme {scheme!r} in {redact(text)!r}; "
        f"use sqlite:///path/sessions.db or postgresql://…"
    )


def _sqlite(text: str) -> SqliteTarget:
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise StoreUrlError(f"malformed SQLite URL {text!r}: {exc}") from None
    if parts.netloc:
        raise StoreUrlError(
            f"a SQLite URL names a file, not a host: {text!r} (use sqlite:///absolute/path.db)"
        )
    if parts.query or parts.fragment:
        raise StoreUrlError(f"a SQLite URL takes no options: {text!r}")
    path = unquote(parts.path)
    if not path or path in ("/", "//"):
        raise StoreUrlError(f"the SQLite URL {text!r} names no file (sqlite:///path/sessions.db)")
    if "\x00" in path:
        raise StoreUrlError("the SQLite path has a NUL character")
    return SqliteTarget(path=Path(path), shown=text)
