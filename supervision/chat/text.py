"""Text made safe and short for a terminal (pure helpers)."""

from __future__ import annotations

MAX_SUMMARY = 72
"""The longest one-line summary of a tool call's arguments."""

_INVISIBLE_MOVERS = frozenset("\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Characters that break a line or reorder what follows it without being seen."""


def sanitize(text: str) -> str:
    """Model or tool text made safe to print: no escape sequences, no control characters.

    Newlines stay; tabs become spaces; every other C0/C1 control character
    (ESC included, so no cursor moves, colours or title changes) becomes a
    visible ``\\xNN``; line separators, bidi overrides and lone surrogates
    (which no terminal encoding can write) a visible ``\\uNNNN``.
    """
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if ch == "\n":
            out.append(ch)
        elif ch == "\t":
            out.append("    ")
        elif ch == "\r":
            continue
        elif ch < " " or ch == "\x7f" or "\x80" <= ch <= "\x9f":
            out.append(f"\\x{ord(ch):02x}")
        elif "\ud800" <= ch <= "\udfff":
            out.append(f"\\u{ord(ch):04x}")  # a lone surrogate cannot even be encoded
        elif ch in _INVISIBLE_MOVERS:
            out.append(f"\\u{ord(ch):04x}")  # line separators and bidi overrides
        else:
            out.append(ch)
    return "".join(out)


def format_duration(seconds: float) -> str:
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60.0:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def one_line(text: str, limit: int = MAX_SUMMARY) -> str:
    """``text`` sanitized, on one line (whitespace runs become one space), at most ``limit``."""
    clipped = sanitize(text[: limit * 4]).replace("\n", " ")
    line = " ".join(clipped.split())
    return line if len(line) <= limit else line[: max(0, limit - 1)] + "…"


def plural(n: int, word: str) -> str:
    """``1 file``, ``2 files``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
