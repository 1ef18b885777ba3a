"""Bash's brace expansion, bounded, for the scope check's glob walk.

``{a,b}`` and ``{1..5}`` turn one word into many paths; the scope check
(:mod:`fore.actors.gate.scope`) expands them as bash would before it
resolves each one. Kept apart because it is a small parser of its own,
with no file system and no knowledge of scope.
"""

from __future__ import annotations

import itertools
import re

MAX_GLOB_PATHS = 1024
"""Paths one glob may produce (after brace expansion) before the check gives up."""
_SEQUENCE = re.compile(r"(-?\d{1,6})\.\.(-?\d{1,6})(?:\.\.(-?\d{1,6}))?|([A-Za-z])\.\.([A-Za-z])")


def expand_braces(word: str, limit: int) -> list[str] | None:
    """The words bash's brace expansion makes of ``word`` (None: more than ``limit``).

    Backslash escapes are kept (the glob walk reads them). A ``{...}`` without
    a top-level comma and that is not a sequence (``{1..5}``, ``{a..e}``) is
    literal, as in bash.
    """
    results = [word]
    done: list[str] = []
    while results:
        current = results.pop()
        group = _first_group(current)
        if group is None:
            done.append(current)
            if len(done) > limit:
                return None
            continue
        start, end, alternatives = group
        for alternative in reversed(alternatives):
            results.append(current[:start] + alternative + current[end + 1 :])
        if len(results) + len(done) > limit:
            return None
    done.reverse()
    return done


def _first_group(word: str) -> tuple[int, int, list[str]] | None:
    """The first expandable ``{...}`` of ``word``: its bounds and alternatives."""
    search = 0
    while True:
        start = _unescaped(word, "{", search)
        if start < 0:
            return None
        depth = 0
        commas: list[int] = []
        i = start
        end = -1
        while i < len(word):
            char = word[i]
            if char == "\\":
                i += 2
                continue
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    end = i
                    break
            elif char == "," and depth == 1:
                commas.append(i)
            i += 1
        if end < 0:
            return None
        inner = word[start + 1 : end]
        if commas:
            bounds = [start, *commas, end]
            return start, end, [word[a + 1 : b] for a, b in itertools.pairwise(bounds)]
        sequence = _sequence(inner)
        if sequence is not None:
            return start, end, sequence
        search = start + 1


def _unescaped(word: str, char: str, start: int) -> int:
    i = start
    while i < len(word):
        if word[i] == "\\":
            i += 2
            continue
        if word[i] == char:
            return i
        i += 1
    return -1


def _sequence(inner: str) -> list[str] | None:
    match = _SEQUENCE.fullmatch(inner)
    if match is None:
        return None
    if match.group(4) is not None:
        first, last = ord(match.group(4)), ord(match.group(5))
        step = 1 if last >= first else -1
        return [chr(code) for code in range(first, last + step, step)][: MAX_GLOB_PATHS + 1]
    first, last = int(match.group(1)), int(match.group(2))
    step = abs(int(match.group(3) or 1)) or 1
    step = step if last >= first else -step
    values = range(first, last + (1 if step > 0 else -1), step)
    if len(values) > MAX_GLOB_PATHS:
        return [str(value) for value in values[: MAX_GLOB_PATHS + 1]]
    return [str(value) for value in values]


__all__ = ["MAX_GLOB_PATHS", "expand_braces"]
