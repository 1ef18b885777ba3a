"""Path rules shared by every filesystem view (pure, property-tested).

Tools receive paths from the model. Before any syscall, a path is normalised
lexically into a workspace-relative POSIX path: ``""`` is the workspace root,
``..`` may not climb above it, an absolute path is accepted only when it lies
inside the root, and a NUL byte is refused. Symlinks are checked later, on the
real filesystem, by the view that opens the file.
"""

from __future__ import annotations

import posixpath
import re
from functools import lru_cache


class FsError(Exception):
    """A filesystem operation failed; the message is meant for the model."""


class PathOutOfScope(FsError, ValueError):
    """The path leads outside the workspace."""


def normalize(path: str, root: str, *, strip: bool = True) -> str:
    """Workspace-relative, normalised POSIX form of ``path`` ("" for the root).

    ``root`` is the workspace root's absolute path (already free of symlinks).
    Raises :class:`PathOutOfScope` for paths outside it and :class:`FsError`
    for malformed input. Names such as ``..foo`` and ``foo..`` are ordinary names.
    Surrounding whitespace (a model's stray newline) is dropped unless
    ``strip`` is False (symlink targets are taken literally).
    """
    if not isinstance(path, str):
        raise FsError("path must be a string")
    if "\x00" in path:
        raise FsError("path contains a NUL byte")
    text = path.strip() if strip else path
    if text in ("", "."):
        return ""
    if text.startswith("~"):
        raise PathOutOfScope(f"{path}: home-relative paths are outside the workspace")
    if text.startswith("/"):
        root_norm = posixpath.normpath(root)
        candidate = posixpath.normpath(text)
        if candidate == root_norm:
            return ""
        prefix = root_norm.rstrip("/") + "/"
        if not candidate.startswith(prefix):
            raise PathOutOfScope(f"{path}: absolute path outside the workspace")
        text = candidate[len(prefix) :]
    rel = posixpath.normpath(text)
    if rel == ".":
        return ""
    if rel == ".." or rel.startswith("../"):
        raise PathOutOfScope(f"{path}: climbs above the workspace root")
    return rel


def write_key(path: str, root: str | None) -> str:
    """The key under which the pool orders writes to ``path`` (lexical, no syscalls).

    ``./a``, ``a`` and ``<root>/a`` are the same key; a path that cannot be
    normalised keys as itself (the call will fail on its own anyway).
    """
    try:
        return normalize(path, root or "/nonexistent-root")
    except FsError:
        return path


def is_within(rel: str, base: str) -> bool:
    """Whether normalised ``rel`` is ``base`` or below it."""
    return base in ("", rel) or rel.startswith(base + "/")


def parent_of(rel: str) -> str:
    return posixpath.dirname(rel)


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


def split_lines(text: str) -> list[str]:
    """Lines as editors, compilers and ``grep -n`` count them.

    Only ``\n`` ends a line (``str.splitlines`` also breaks on form feeds and
    U+2028, which shifts line numbers); a trailing ``\r`` is dropped; a final
    newline does not start an extra empty line.
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
