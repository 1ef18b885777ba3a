"""The hand-written glob the tools used before issue 23.5, kept as a test reference.

``glob_regex`` compiled a glob over workspace-relative paths; the built-ins now
match with :mod:`fore.actors.tools.matching` (braces, ``.gitignore``), and
nothing in Fore calls it any more. It stays here because the property tests
of the new matcher check it against this one for brace-free patterns
(``test_builtin_matching.py``), and its own rules are pinned by
``test_paths.py``.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=512)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a glob over workspace-relative paths.

    ``*`` and ``?`` never cross ``/``; ``**`` as a whole segment matches any
    number of segments (including none); ``[...]`` is a character class; a
    pattern without ``/`` matches the basename at any depth (as ``**/pat``).
    """
    if "/" not in pattern.strip("/"):
        pattern = "**/" + pattern.lstrip("/")
    segments = pattern.strip("/").split("/")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]*/)*")
            continue
        parts.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def _segment_regex(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = segment[i + 1 : end].replace("\\", "\\\\").replace("/", "")
                if body.startswith("!"):
                    body = "^/" + body[1:]  # a negated class must not match "/" either
                out.append("[" + body + "]")
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)
