"""A tolerant reader of git's own files, for the git-config probe.

The probe (:mod:`fore.actors.gate.git_config`) must not run git to ask what
a repository's config says -- that would itself run git there -- so it reads
the files: config files (git's INI dialect), ``.git`` files (``gitdir:``)
and ``commondir``. Anything the reader cannot follow for sure raises
:class:`_Doubt`; it never guesses. Kept apart because both the probe and
:mod:`fore.actors.gate.git_submodules` read these files.
"""

from __future__ import annotations

import os
import re

_MAX_CONFIG_BYTES = 1 << 20

_SECTION = re.compile(r'\[\s*([A-Za-z0-9.-]+)\s*(?:"((?:[^"\\\n]|\\.)*)"\s*)?\]')
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9-]*)\s*(?:$|[=#;])")


class _Doubt(Exception):
    """The reader cannot tell for sure what the config says."""


def _read_text(path: str) -> str:
    with open(path, "rb") as handle:
        data = handle.read(_MAX_CONFIG_BYTES + 1)
    if len(data) > _MAX_CONFIG_BYTES:
        raise _Doubt(f"{path!r} is too large")
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


def _gitdir_from_file(dotgit: str) -> str:
    """Follow a ``.git`` file (``gitdir: <path>``) as worktrees and submodules use."""
    text = _read_text(dotgit).strip()
    if not text.startswith("gitdir:") or "\n" in text:
        raise _Doubt(f"{dotgit!r} is not a 'gitdir:' file")
    target = text.removeprefix("gitdir:").strip()
    gitdir = os.path.join(os.path.dirname(dotgit), target)
    if not os.path.isdir(gitdir):
        raise _Doubt(f"{dotgit!r} points to a missing git directory")
    return os.path.normpath(gitdir)


def _config_entries(path: str) -> list[tuple[str, str | None]]:
    """``(section[.subsection].key, value)`` pairs of one config file, keys lower-cased.

    ``value`` is ``None`` for a bare key (boolean true). Constructs whose key
    or value could be misread -- a value continued with a trailing backslash,
    an unbalanced quote, an unknown escape, a line that is neither a section,
    a key nor a comment -- are doubt rather than guesses.
    """
    entries: list[tuple[str, str | None]] = []
    section: str | None = None
    for line in _read_text(path).splitlines():
        rest = line.strip()
        if rest.startswith("["):
            match = _SECTION.match(rest)
            if match is None:
                raise _Doubt(f"an unreadable section header in {path!r}")
            name, subsection = match.group(1).lower(), match.group(2)
            section = name if subsection is None else f"{name}.{subsection.lower()}"
            rest = rest[match.end() :].strip()
        if not rest or rest[0] in "#;":
            continue
        match = _KEY.match(rest)
        if match is None or section is None:
            raise _Doubt(f"an unreadable line in {path!r}")
        value = _parse_value(rest[match.end(1) :], path)
        entries.append((f"{section}.{match.group(1).lower()}", value))
    return entries


_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", "\\": "\\", '"': '"'}


def _parse_value(text: str, path: str) -> str | None:
    """What follows a key: ``None`` without ``=``, else the value as git reads it."""
    text = text.lstrip()
    if not text or text[0] in "#;":
        return None
    if text[0] != "=":
        raise _Doubt(f"an unreadable line in {path!r}")
    out: list[str] = []
    pending_blanks = ""
    quoted = False
    i = 1
    while i < len(text):
        char = text[i]
        i += 1
        if char == "\\":
            if i >= len(text) or text[i] not in _ESCAPES:
                raise _Doubt(f"a multi-line or unusual value in {path!r}")
            out.append(pending_blanks + _ESCAPES[text[i]])
            pending_blanks = ""
            i += 1
        elif char == '"':
            quoted = not quoted
        elif not quoted and char in "#;":
            break
        elif not quoted and char in " \t":
            if out:
                pending_blanks += char
        else:
            out.append(pending_blanks + char)
            pending_blanks = ""
    if quoted:
        raise _Doubt(f"a multi-line or unterminated value in {path!r}")
    return "".join(out)
