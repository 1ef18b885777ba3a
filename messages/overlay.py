"""Messages of the copy-on-write overlay: bases, conflicts, apply results, recovery.

A speculation writes into an overlay, never into the workspace. When the user
accepts, the overlay is applied all at once -- but only if every real file it
touched is still what it was when the speculation *started* (a path that
changed after the start, even before the speculation first touched it, is a
conflict: the speculation's version was computed without the user's edit). The
records here are what makes that decision explainable: a :class:`FileBase` is
what a path looked like at first touch, an :class:`OverlayConflict` names a
path whose real state moved on (expected vs found), and a
:class:`ConflictReport` lists every one of them so the user sees all the files
at once instead of one per attempt.

Every path in these messages is workspace-relative (POSIX, ``""`` is the root):
the overlay's own storage location never appears in a message.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fore.messages.base import Message

FileKind = Literal["absent", "file", "dir", "other"]
"""What a real path held: nothing, a regular file, a directory, or anything else
(FIFO, socket, device, or a symlink found where a file was expected)."""


class FileBase(Message):
    """The state of a real path when the overlay first touched it.

    ``sha256`` is set for regular files (it is what the conflict check compares);
    ``size`` and ``mtime_ns`` are informational (a ``touch`` after the first
    touch, without a content change, is not a conflict). A file base without
    ``sha256`` means "content unknown": the speculation read only a prefix of a
    file that changed before its first write -- it matches no content, so apply
    reports a conflict.
    """

    kind: FileKind
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    size: int = Field(default=0, ge=0)
    mtime_ns: int = 0
    changed_since_start: bool = False
    """The path (or, for one that did not exist, its directory) had changed after
    the speculation started, before this first touch: what it held at the start
    is unknown, so apply reports a conflict whatever it finds
    (:mod:`actors.tools.fsclock`)."""

    @classmethod
    def absent(cls) -> FileBase:
        return _ABSENT

    def describe(self) -> str:
        """A short human description (for alerts and logs)."""
        if self.kind == "absent":
            return "absent"
        if self.kind == "file":
            digest = f", sha256 {self.sha256[:12]}" if self.sha256 else ""
            return f"file ({self.size} bytes{digest})"
        if self.kind == "dir":
            return "directory"
        return "special file"


_ABSENT = FileBase(kind="absent")

ConflictKind = Literal[
    "modified",
    "created",
    "deleted",
    "became_directory",
    "became_file",
    "became_special",
    "directory_changed",
    "path_changed",
    "changed_since_start",
]
"""What happened to a touched path since the overlay's first touch:

* ``modified`` -- a file's content differs (sha256);
* ``created`` -- something now exists where the overlay expected nothing;
* ``deleted`` -- the file or directory is gone;
* ``became_directory`` / ``became_file`` / ``became_special`` -- its type changed;
* ``directory_changed`` -- a directory the overlay deletes gained entries the
  overlay does not delete;
* ``path_changed`` -- a parent directory became a file or a symlink;
* ``changed_since_start`` -- it (or, for a path that did not exist, its
  directory) changed after the speculation started and before the speculation
  first touched it: the user's version must not be replaced by one computed
  without it.
"""


class OverlayConflict(Message):
    """One touched path whose real state no longer matches its base."""

    path: str
    change: ConflictKind
    expected: FileBase
    found: FileBase
    detail: str = ""

    def describe(self) -> str:
        extra = f" ({self.detail})" if self.detail else ""
        if self.change == "changed_since_start":
            return (
                f"{self.path or '.'}: changed after the speculation started -- found "
                f"{self.found.describe()}{extra}"
            )
        return (
            f"{self.path or '.'}: {self.change.replace('_', ' ')} -- expected "
            f"{self.expected.describe()}, found {self.found.describe()}{extra}"
        )


class ConflictReport(Message):
    """Apply refused: nothing was written. Lists every conflicting path."""

    overlay_id: str
    conflicts: tuple[OverlayConflict, ...] = Field(min_length=1)

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.conflicts)

    def summary(self) -> str:
        """One alert-ready text naming every file and what changed."""
        count = len(self.conflicts)
        head = (
            f"{count} file{'s' if count != 1 else ''} changed after the speculation "
            "started; nothing was applied:"
        )
        return "\n".join([head, *(f"  {c.describe()}" for c in self.conflicts)])


ChangeAction = Literal["write", "delete", "mkdir"]


class OverlayChange(Message):
    """One net change the overlay would make to the real tree."""

    path: str
    action: ChangeAction
    base: FileBase
    size: int = Field(default=0, ge=0)
    """New size in bytes (writes only)."""


class ApplyResult(Message):
    """Apply succeeded: every listed real path now holds the overlay's version.

    ``paths`` is the union of the other lists (sorted). An apply of an overlay
    that wrote nothing is an empty result and touches nothing.
    """

    overlay_id: str
    paths: tuple[str, ...] = ()
    written: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    created_dirs: tuple[str, ...] = ()
    removed_dirs: tuple[str, ...] = ()
    bytes_written: int = Field(default=0, ge=0)
    duration_s: float = Field(default=0.0, ge=0)

    @property
    def files_changed(self) -> int:
        return len(self.written) + len(self.deleted)

    @property
    def empty(self) -> bool:
        return not self.paths


RecoveryAction = Literal["rolled_forward", "rolled_back", "completed", "discarded"]


class RecoveryRecord(Message):
    """What crash recovery did with one apply journal."""

    journal_id: str
    action: RecoveryAction
    workspace: str
    """The workspace root the journal applied to (absolute)."""
    paths: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    """Paths a roll-forward left alone: they changed after the interrupted apply (an
    edit made between the crash and the recovery), so they keep that edit; each
    also has a ``problems`` line."""


class SweepReport(Message):
    """Overlays of dead processes removed at runtime start."""

    removed: tuple[str, ...] = ()
    """Process directory names (``<pid>-<start marker>``) that were removed."""
    recovered: tuple[RecoveryRecord, ...] = ()
