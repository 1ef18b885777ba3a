"""The overlay's records: what it holds for each touched path, and what it saw.

:class:`~fore.actors.overlay.fs.OverlayFs` keeps one entry per touched path
(a :class:`_File` in the upper layer, a :class:`_Dir` the speculation made,
the :data:`_WHITEOUT` of a deletion), what the speculation saw at its first
read of a real path (:class:`_Seen`), and hands apply one
:class:`PlannedEntry` per path. Plain values, no state and no locking: the
overlay's one lock guards the tables that hold them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fore.actors.overlay._realfs import Ident
from fore.messages.overlay import FileBase


@dataclass(slots=True)
class _File:
    upper: str
    size: int
    mtime_ns: int
    sha256: str | None = None
    """The content's hash (apply journals it: recovery tells "new" from a later edit)."""


@dataclass(slots=True)
class _Dir:
    mtime_ns: int


class _Whiteout:
    __slots__ = ()

    def __repr__(self) -> str:
        return "WHITEOUT"


class _Hidden:
    __slots__ = ()


_WHITEOUT = _Whiteout()
_HIDDEN = _Hidden()
"""Lookup result: no entry of its own, but an ancestor is a whiteout or a file."""

_Entry = _File | _Dir | _Whiteout


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the speculation saw at its first read of a real path (kept small:
    grep may read thousands of files).

    ``sha256`` is the hash of the whole content read (``kind == "absent"``:
    the read found no file). A read cut short by ``limit`` has no hash; its
    ``ident`` is the identity of the file at the read instead.
    """

    kind: Literal["file", "absent"]
    sha256: str | None = None
    size: int = 0
    mtime_ns: int = 0
    ident: Ident | None = None

    def base(self) -> FileBase:
        if self.kind == "absent":
            return FileBase.absent()
        return FileBase(kind="file", sha256=self.sha256, size=self.size, mtime_ns=self.mtime_ns)


_ABSENT_SEEN = _Seen("absent")
UnionKind = Literal["file", "dir", "other", "absent"]


@dataclass(frozen=True, slots=True)
class PlannedEntry:
    """One touched path as apply sees it: the final state and the base."""

    rel: str
    final: Literal["file", "dir", "absent"]
    base: FileBase
    upper: str | None = None
    """Absolute path of the upper file (``final == "file"``); never shown to tools."""
    size: int = 0
    sha256: str | None = None
    """The new content's sha256 (``final == "file"``)."""


def path_key(rel: str) -> tuple[str, ...]:
    """The order of workspace-relative paths: by component, so a directory sorts
    right before what it holds (``a``, ``a/b``, ``a-b``), which plain string order
    (``a``, ``a-b``, ``a/b``) does not give."""
    return tuple(rel.split("/"))
