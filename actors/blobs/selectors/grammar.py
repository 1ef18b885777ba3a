"""The selector grammar of ``inspect``: what the model may ask for, parsed safely.

``lines:N-M``, ``bytes:N..M``, ``slice:N..M``, ``key:NAME`` and
``pointer:/a/0/b`` (or nothing, for an overview) become one of the frozen
selector values below. Hostile text is bounded before it costs anything, and
:func:`parse_selector` raises nothing but :class:`InspectError`, whose
message quotes the selector cut to a readable length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fore.errors import InspectError

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["InspectError"]

SELECTOR_HELP = (
    "lines:N-M or lines:N- (text, 1-based, inclusive), bytes:N..M or bytes:N.. (text, "
    "0-based byte offsets, end-exclusive: parts of very long lines), slice:N..M or slice:N.. "
    "(arrays, 0-based, end-exclusive), key:NAME (objects) or pointer:/a/0/b "
    "(JSON Pointer into nested values); omit the selector for an overview"
)

# ASCII digits only: ``\d`` would accept e.g. fullwidth digits ("lines:１-2"), which
# ``int()`` converts silently -- a selector the model can never see echoed back.
_LINES_RE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]*)\s*", re.ASCII)
_SLICE_RE = re.compile(r"\s*([0-9]+)\s*\.\.\s*([0-9]*)\s*", re.ASCII)
MAX_SELECTOR_CHARS = 8192
"""Longest selector accepted (a ``key:`` or ``pointer:`` names keys of that length at most)."""
MAX_NUMBER_DIGITS = 15
"""Significant digits of a number in a selector: 10**15 lines or bytes is past any blob."""
MAX_POINTER_DEPTH = 1024
"""Tokens of a JSON pointer (a stored JSON value cannot nest deeper than the parser allows)."""
_ECHO_CHARS = 100
"""Characters of a selector, key or token quoted back in an error message."""
_BAD_ESCAPE_RE = re.compile(r"~(?![01])")


@dataclass(frozen=True)
class Overview:
    """No selector: type, size, counts and a preview."""


@dataclass(frozen=True)
class Lines:
    """``lines:N-M`` / ``lines:N-``: 1-based inclusive ``start``/``end``."""

    start: int
    end: int | None


@dataclass(frozen=True)
class Bytes:
    """``bytes:N..M`` / ``bytes:N..``: 0-based byte ``start``, exclusive ``stop``."""

    start: int
    stop: int | None


@dataclass(frozen=True)
class Slice:
    """``slice:N..M`` / ``slice:N..``: 0-based ``start``, exclusive ``stop``."""

    start: int
    stop: int | None


@dataclass(frozen=True)
class Key:
    """``key:NAME``."""

    name: str


@dataclass(frozen=True)
class Pointer:
    """``pointer:/a/0/b``: the raw pointer and its unescaped tokens."""

    raw: str
    tokens: tuple[str, ...]


Selector = Overview | Lines | Bytes | Slice | Key | Pointer


def parse_selector(selector: str | None) -> Selector:
    """Parse a selector string; :class:`InspectError` if it is not valid.

    The kind before the first ``:`` is case-insensitive; ``None`` or a blank
    string is the overview. Checks that need the blob (past-the-end, wrong
    type) happen in :func:`inspect_blob`.
    """
    if selector is None:
        return Overview()
    if not isinstance(selector, str):  # a caller bypassing the args model; be robust
        raise InspectError(
            f"Malformed selector: a selector is text, not {type(selector).__name__}. "
            f"Use {SELECTOR_HELP}."
        )
    if len(selector) > MAX_SELECTOR_CHARS:
        raise InspectError(
            f"Selector too long ({len(selector)} characters, at most {MAX_SELECTOR_CHARS}): "
            f"{_quote(selector)}. Use {SELECTOR_HELP}."
        )
    if not selector.strip():
        return Overview()
    kind, colon, arg = selector.partition(":")
    kind = kind.strip().lower()
    if not colon:
        if kind in ("lines", "bytes", "slice", "key", "pointer"):
            raise InspectError(_malformed(kind, selector))
        raise InspectError(
            f"Malformed selector {_quote(selector)}: a selector is KIND:ARGUMENT. "
            f"Use {SELECTOR_HELP}."
        )
    if kind == "lines":
        match = _LINES_RE.fullmatch(arg)
        if match is None:
            raise InspectError(_malformed(kind, selector))
        start = _number(match.group(1), kind, selector)
        end = _number(match.group(2), kind, selector) if match.group(2) else None
        if start == 0 or end == 0:
            raise InspectError(
                f"Line numbers start at 1, so {_quote(selector.strip())} is invalid; "
                f"use e.g. {_zero_fix(start, end)} (1-based, inclusive)."
            )
        if end is not None and end < start:
            raise InspectError(
                f"Inverted range {_quote(selector.strip())}: the end line must not be before "
                f"the start line; use lines:{end}-{start}."
            )
        return Lines(start, end)
    if kind in ("slice", "bytes"):
        match = _SLICE_RE.fullmatch(arg)
        if match is None:
            raise InspectError(_malformed(kind, selector))
        start = _number(match.group(1), kind, selector)
        stop = _number(match.group(2), kind, selector) if match.group(2) else None
        if stop is not None and stop <= start:
            fix = f"{kind}:{stop}..{start}" if stop < start else f"{kind}:{start}..{start + 1}"
            raise InspectError(
                f"Empty or inverted range {_quote(selector.strip())}: the end is exclusive and "
                f"must be greater than the start; use e.g. {fix}."
            )
        return Slice(start, stop) if kind == "slice" else Bytes(start, stop)
    if kind == "key":
        if not arg:
            raise InspectError(_malformed(kind, selector))
        return Key(arg)
    if kind == "pointer":
        return Pointer(arg, _pointer_tokens(arg, selector))
    raise InspectError(
        f"Unknown selector kind {_quote(kind)} in {_quote(selector)}. Use {SELECTOR_HELP}."
    )


def _quote(text: str) -> str:
    """``text`` quoted for an error message: escaped (one line) and cut to a readable length."""
    if len(text) <= _ECHO_CHARS:
        return repr(text)
    return f"{text[:_ECHO_CHARS]!r}… ({len(text)} characters)"


def _inline(text: str) -> str:
    """``text`` as it is when short and printable (a path, an index), else :func:`_quote` d."""
    if len(text) <= _ECHO_CHARS and text.isprintable():
        return text
    return _quote(text)


def _number(digits: str, kind: str, selector: str) -> int:
    """The value of ``digits`` (ASCII, from the grammar), bounded in length before ``int()``."""
    value = digits.lstrip("0")  # int() counts leading zeros against its own digit limit
    significant = len(value)
    if significant > MAX_NUMBER_DIGITS:
        raise InspectError(
            f"Number too large in {kind} selector {_quote(selector.strip())}: it has "
            f"{significant} digits, at most {MAX_NUMBER_DIGITS} are accepted (no blob is that "
            "big); omit the selector to see the blob's size."
        )
    return int(value or "0")


def _zero_fix(start: int, end: int | None) -> str:
    """What to suggest for a line range with a 0 in it (one end is 0).

    ``lines:0-5`` -> ``lines:1-5``; ``lines:0-`` / ``lines:0-0`` -> ``lines:1-``;
    ``lines:3-0`` (a 0 end: probably an inverted ``0-3``) -> ``lines:1-3`` or
    ``lines:3-``.
    """
    if start == 0:
        return f"lines:1-{end}" if end else "lines:1-"
    return f"lines:1-{start} or lines:{start}-"


def _malformed(kind: str, selector: str) -> str:
    usage = {
        "lines": "use lines:N-M (1-based, inclusive, e.g. lines:1-50) or lines:N- "
        "(from line N to the end)",
        "slice": "use slice:N..M (0-based, end-exclusive, e.g. slice:0..10) or slice:N.. "
        "(from entry N to the end)",
        "bytes": "use bytes:N..M (0-based byte offsets, end-exclusive, e.g. bytes:0..4000) or "
        "bytes:N.. (from byte N to the end)",
        "key": "put the key after the colon, e.g. key:results (omit the selector to list keys)",
        "pointer": "use a JSON Pointer such as pointer:/results/0/name",
    }[kind]
    return f"Malformed {kind} selector {_quote(selector)}: {usage}."


def _pointer_tokens(pointer: str, selector: str) -> tuple[str, ...]:
    """RFC 6901: ``""`` is the root, else ``/``-separated tokens with ~0/~1 escapes."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise InspectError(
            f"Malformed pointer in {_quote(selector)}: a JSON Pointer is empty (the whole value) "
            "or starts with '/', e.g. pointer:/results/0/name."
        )
    if _BAD_ESCAPE_RE.search(pointer):
        raise InspectError(
            f"Malformed pointer in {_quote(selector)}: '~' must be written ~0 and '/' inside a "
            "key ~1 (e.g. key 'a/b' is pointer:/a~1b)."
        )
    depth = pointer.count("/")
    if depth > MAX_POINTER_DEPTH:
        raise InspectError(
            f"Pointer too deep in {_quote(selector)}: {depth} tokens, at most "
            f"{MAX_POINTER_DEPTH}; read a shallower value first."
        )
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


def escape_pointer_token(token: str) -> str:
    """One pointer token with ``~`` and ``/`` escaped (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")
