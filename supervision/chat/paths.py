"""``@`` completion: workspace paths for the word being typed (bounded, never outside).

The person types ``@tex`` and Tab offers ``@textkit/``; the prompt sends
``@path`` references that the runtime attaches (:mod:`actors.filerefs`). The
completer only ever proposes paths *inside* the workspace: an absolute
partial path, a ``..`` component, or a directory that resolves (through a
symlink) outside the workspace yields nothing, and an entry that is a symlink
leading outside is left out. Listing is bounded (``scan_cap`` entries read,
``limit`` offered), so a directory of a million files costs no more than a
small one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

SCAN_CAP = 2_000
LIMIT = 50

_AT_WORD = re.compile(r'(?:^|(?<=\s))@("?)([^\s"]*)$')
"""The ``@`` word ending at the cursor: ``@`` at the start or after whitespace."""


def _inside(root: str, path: str) -> bool:
    try:
        return os.path.commonpath([root, path]) == root
    except ValueError:
        return False


def complete_path(
    workspace: Path, partial: str, *, limit: int = LIMIT, scan_cap: int = SCAN_CAP
) -> list[str]:
    """Workspace-relative paths starting with ``partial`` (directories end in ``/``)."""
    if "\x00" in partial or partial.startswith(("/", "~")) or "\\" in partial:
        return []
    directory, prefix = os.path.split(partial)
    parts = [p for p in directory.split("/") if p not in ("", ".")]
    if ".." in parts:
        return []
    try:
        root = os.path.realpath(workspace)
        base = os.path.realpath(os.path.join(root, *parts))
    except (OSError, ValueError):
        return []
    if not _inside(root, base) or not os.path.isdir(base):
        return []
    lead = "/".join(parts) + "/" if parts else ""
    found: list[str] = []
    try:
        with os.scandir(base) as entries:
            for scanned, entry in enumerate(entries):
                if scanned >= scan_cap:
                    break
                name = entry.name
                if not name.startswith(prefix) or not name.isprintable():
                    continue
                if name.startswith(".") and not prefix.startswith("."):
                    continue
                try:
                    target = os.path.realpath(entry.path)
                    is_dir = entry.is_dir()
                except OSError:
                    continue
                if not _inside(root, target):
                    continue  # a symlink leading out of the workspace
                found.append(lead + name + ("/" if is_dir else ""))
    except OSError:
        return []
    found.sort(key=lambda p: (not p.endswith("/"), p))
    return found[:limit]


def reference_text(path: str) -> str:
    """The ``@`` reference for ``path``, quoted when the tokenizer needs it."""
    if any(ch.isspace() for ch in path) or '"' in path or "\\" in path:
        escaped = path.replace("\\", "\\\\").replace('"', '\\"')
        return f'@"{escaped}"'
    return f"@{path}"


def at_word(text_before_cursor: str) -> str | None:
    """The partial path of the ``@`` word ending at the cursor, if one is being typed."""
    match = _AT_WORD.search(text_before_cursor)
    return match.group(2) if match else None


class PathCompleter(Completer):
    """prompt_toolkit completer for ``@`` workspace paths."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        before = document.text_before_cursor
        match = _AT_WORD.search(before)
        if match is None:
            return
        partial = match.group(2)
        start = match.start() - len(before)  # replace from the '@' on
        for path in complete_path(self.workspace, partial):
            yield Completion(
                reference_text(path),
                start_position=start,
                display=path,
            )
