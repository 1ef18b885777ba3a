"""The conflict check of an apply: is every touched real path still what the overlay saw?

Before anything is written, every path the overlay changes must still match
the base it recorded (same sha256 for a file, still absent for a new one,
still a directory -- holding nothing the overlay does not delete -- for a
deleted one); any mismatch is an :class:`~fore.messages.overlay.OverlayConflict`
and the apply writes nothing. After staging, the targets are re-checked
cheaply (:func:`_recheck`) to narrow the window for a concurrent edit.
"""

from __future__ import annotations

import os
import posixpath

from fore.actors.overlay._realfs import DirCache, Ident, PathChanged, identity, observe
from fore.actors.overlay.fs import PlannedEntry
from fore.messages.overlay import ConflictKind, FileBase, OverlayConflict


def _check(
    cache: DirCache, entries: list[PlannedEntry]
) -> tuple[list[OverlayConflict], dict[str, Ident | None], dict[str, int]]:
    """Conflicts, the identity each path was seen with, and modes of existing files."""
    replaced_by_dir = {
        e.rel for e in entries if e.final == "dir" and e.base.kind in ("file", "other")
    }
    final_absent = {e.rel for e in entries if e.final == "absent"}
    conflicts: list[OverlayConflict] = []
    seen: dict[str, Ident | None] = {}
    modes: dict[str, int] = {}
    for entry in entries:
        conflict, ident, mode = _check_one(cache, entry, replaced_by_dir, final_absent)
        if conflict is not None:
            conflicts.append(conflict)
        seen[entry.rel] = ident
        if mode is not None:
            modes[entry.rel] = mode
    return conflicts, seen, modes


def _check_one(
    cache: DirCache,
    entry: PlannedEntry,
    replaced_by_dir: set[str],
    final_absent: set[str],
) -> tuple[OverlayConflict | None, Ident | None, int | None]:
    expected = entry.base
    try:
        obs = observe(
            cache,
            entry.rel,
            hash_files=expected.kind == "file",
            expect_size=expected.size if expected.kind == "file" else None,
        )
    except PathChanged as exc:
        if _has_ancestor_in(entry.rel, replaced_by_dir):
            found = FileBase.absent()  # its parent is a real file the overlay replaces
            return _conflict(entry, found), None, None
        return (
            OverlayConflict(
                path=entry.rel,
                change="path_changed",
                expected=expected,
                found=FileBase(kind="other"),
                detail=exc.detail,
            ),
            None,
            None,
        )
    conflict = _conflict(entry, obs.base)
    if conflict is None and expected.kind == "dir" and entry.final == "absent":
        conflict = _leftover_children(cache, entry, obs.base, final_absent)
    mode = obs.mode if obs.base.kind == "file" else None
    return conflict, obs.ident, mode


def _conflict(entry: PlannedEntry, found: FileBase) -> OverlayConflict | None:
    change = _compare(entry.base, found, entry.final)
    if change is None:
        return None
    return OverlayConflict(path=entry.rel, change=change, expected=entry.base, found=found)


def _compare(expected: FileBase, found: FileBase, final: str) -> ConflictKind | None:
    if expected.changed_since_start:
        return "changed_since_start"  # what it held at the start is unknown
    was, now = expected.kind, found.kind
    if was == "absent":
        if now == "absent" or (now == "dir" and final == "dir"):
            return None
        return "created"
    if was == "file":
        if now == "file":
            # A base without a hash (the speculation saw only a prefix of a file
            # that changed before its write) matches no content at all.
            same = expected.sha256 is not None and found.sha256 == expected.sha256
            return None if same else "modified"
        return {"absent": "deleted", "dir": "became_directory"}.get(now, "became_special")  # type: ignore[return-value]
    if was == "dir":
        if now == "dir":
            return None
        return {"absent": "deleted", "file": "became_file"}.get(now, "became_special")  # type: ignore[return-value]
    if now == "other":
        return None if found.mtime_ns == expected.mtime_ns else "modified"
    return {"absent": "deleted", "file": "became_file"}.get(now, "became_directory")  # type: ignore[return-value]


def _leftover_children(
    cache: DirCache, entry: PlannedEntry, found: FileBase, final_absent: set[str]
) -> OverlayConflict | None:
    """A deleted directory must hold nothing the overlay does not delete too."""
    try:
        names = os.listdir(cache.open(entry.rel))
    except (OSError, PathChanged):
        return None
    extra = sorted(name for name in names if posixpath.join(entry.rel, name) not in final_absent)
    if not extra:
        return None
    return OverlayConflict(
        path=entry.rel,
        change="directory_changed",
        expected=entry.base,
        found=found,
        detail="it now contains " + ", ".join(extra[:5]) + (" …" if len(extra) > 5 else ""),
    )


def _recheck(
    cache: DirCache, entries: list[PlannedEntry], seen: dict[str, Ident | None]
) -> list[OverlayConflict]:
    """Re-verify after staging: an unchanged identity needs no re-hash."""
    replaced_by_dir = {
        e.rel for e in entries if e.final == "dir" and e.base.kind in ("file", "other")
    }
    final_absent = {e.rel for e in entries if e.final == "absent"}
    late: list[OverlayConflict] = []
    for entry in entries:
        try:
            now = identity(cache, entry.rel)
        except PathChanged:
            now = None
        if now == seen.get(entry.rel) and entry.base.kind != "dir":
            continue
        conflict, _, _ = _check_one(cache, entry, replaced_by_dir, final_absent)
        if conflict is not None:
            late.append(conflict)
    return late


def _has_ancestor_in(rel: str, paths: set[str]) -> bool:
    while rel:
        rel = posixpath.dirname(rel)
        if rel in paths:
            return True
    return False
