"""Apply (accept) an overlay to the real workspace: all or nothing, crash-safe.

Copying overlay files back one by one (the reference design) leaves a
half-applied tree when anything fails midway, and silently overwrites edits
the user made while the speculation ran. Apply here is a small transaction:

1. **Conflict check.** Every touched real path must still match the base the
   overlay recorded: same sha256 for a file, still absent for a new one, still
   a directory for a deleted directory (and holding nothing the overlay does
   not delete); a base marked ``changed_since_start`` (the path changed after
   the speculation started, before its first touch: see
   :mod:`actors.overlay.fs`) matches nothing. Any mismatch -> a
   :class:`ConflictReport` naming every such path and what changed; nothing is
   written.
2. **Stage.** A journal (JSON lines, ``<journal_dir>/<id>.journal``) is
   created listing every operation, the temp name of every staged file and
   the name each displaced file may be kept under; then each new file is
   placed at its temp name next to its target -- a hard link to the upper
   file when both are on one filesystem, else a copy -- in the deepest
   directory of the target's parent chain that already exists, so nothing but
   hidden temp files appears in the real tree before the commit point. Every
   directory is opened with ``O_NOFOLLOW`` along the whole path, so a symlink
   swapped in cannot redirect a write outside the workspace. The targets are
   re-checked (a cheap ``lstat`` identity; a re-hash only when it moved) to
   narrow the window for a concurrent user edit. Then every real file the
   apply will replace or delete is **kept** (:mod:`actors.overlay._keep`: a
   hard link in the overlay's private ``displaced`` directory, else one next
   to it, else a copy); a file that cannot be kept stops the apply here.
3. **Commit point.** ``{"state": "PREPARED"}`` is appended to the journal
   (fsynced, with its directory, when ``durable``).
4. **Execute.** Removals (deepest first), then directory creations and
   ``os.replace`` of each staged file (parents first; missing parents are
   created). Then the upper files the staged links shared are unlinked (so the
   overlay's later removal does not move the applied files' ctimes), the kept
   links next to files are removed, every path written is recorded as Fore's
   own change (:mod:`actors.tools.fsclock`), ``DONE`` is appended and the
   journal removed. A kept file in ``displaced`` stays there until the overlay
   is removed, after the accept: its inode is freed then instead of inside the
   Tab (on ext4 that freeing is most of a ``rename``'s cost: 100 replaces took
   ~7 ms with it, ~1.5 ms without it).
5. **Undo, in process.** When an operation fails after the commit point (a
   full disk, a directory made read-only, a parent swapped mid-apply), apply
   does not leave the tree half-applied for the next start to repair: it undoes
   every operation done, newest first -- kept files go back (only over the
   exact version apply put there: a user's edit made meanwhile stays), new
   files and directories go, removed directories come back -- removes every
   staged temp and kept link, discards the journal and raises
   :class:`OverlayApplyFailed` whose ``applied`` names exactly the paths that could
   not be restored (normally none), before the Tab returns.

:func:`recover` (run at start for journals of dead processes, see
:mod:`actors.overlay.store`) rolls a PREPARED journal forward -- every
operation is idempotent -- and rolls any other back by deleting the staged
temps, so each real file ends up entirely old or entirely new and the whole
set consistently old or new. Either way it deletes the links displaced files
were kept under next to them (journal version 3).

Roll-forward never clobbers an edit made *after* the crash. The journal
records, per operation, the target's base (kind and sha256 when the apply
checked it) and the new content's sha256; recovery replaces or deletes a
target only while it is still the base (or already the new content, or
already gone for a delete). A target the user changed in between -- the next
start may come much later -- is left exactly as it is, its staged temp is
deleted, and the path is reported (:attr:`RecoveryRecord.skipped`, a
``problems`` line and a warning log). The rest of the set is still rolled
forward: the user's edit wins over the speculation's for that one file.

Durability: a process crash loses nothing the kernel already has, so the
journal's writes alone make apply safe against a process crash (the crash
the recovery tests simulate) -- no fsync on the accept path, which is the
user's Tab. ``durable=True`` adds power-loss safety: every staged file and
the journal are fsynced before the commit point and every touched directory
after it (an fsync of the journal alone would not be enough: after a power
loss it could roll forward staged files that never reached the disk).

Layout: this module is the accept's entry point -- close the overlay, check
for conflicts, plan the operations, run the transaction, report the result.
The conflict check is :mod:`.conflicts`; staging, keeping, executing and
undoing (steps 2-5) are :mod:`.transaction`; the operations, their journal
and the process's registry of applies in flight are :mod:`.journal`; crash
recovery is :mod:`.recover` (:func:`recover` is importable from here too).
"""

from __future__ import annotations

import functools
import os
import posixpath
import secrets
import time
from pathlib import Path
from typing import Literal

from fore.actors.core.logs import get_logger
from fore.actors.overlay._keep import Keeper, SysFault, no_fault
from fore.actors.overlay._realfs import (
    DirCache,
    PathChanged,
    parent_and_name,
)
from fore.actors.overlay.conflicts import _check, _has_ancestor_in
from fore.actors.overlay.fs import OverlayClosed, OverlayFs
from fore.actors.overlay.journal import _describe, _Journal, _Op, _workspace_lock
from fore.actors.overlay.recover import recover
from fore.actors.overlay.transaction import FaultHook, _Failure, _failure, _Transaction
from fore.actors.overlay.tree import PlannedEntry, path_key
from fore.errors import OverlayApplyFailed
from fore.messages.overlay import ApplyResult, ConflictReport

log = get_logger(__name__)

SYSCALL_FAULT: SysFault | None = None
"""Test seam: the :data:`~actors.overlay._keep.SysFault` every apply uses when it
is given none (``fault(syscall, rel)`` before each change to the real tree:
``stage``, ``keep``, ``mkdir``, ``replace``, ``unlink``, ``rmdir``, ``restore``;
raising ``OSError`` makes that change fail). Tests of a whole runtime set it."""

__all__ = ["SYSCALL_FAULT", "OverlayApplyFailed", "apply_overlay", "recover"]


# -- apply ---------------------------------------------------------------------


def apply_overlay(
    overlay: OverlayFs,
    journal_dir: str | os.PathLike[str],
    *,
    durable: bool = False,
    fault: FaultHook | None = None,
    sys_fault: SysFault | None = None,
    close_timeout: float = 10.0,
) -> ApplyResult | ConflictReport:
    """Apply every change of ``overlay`` to its workspace, or none of them.

    The overlay is closed first (no new writes; in-flight ones are waited for
    up to ``close_timeout`` seconds). Returns the real paths changed, or a
    :class:`ConflictReport` when any touched path moved on since its base (then
    nothing was written). Raises :class:`OverlayApplyFailed` for other failures
    (messages are workspace-relative); an apply that fails after its commit
    point is rolled back first, and ``OverlayApplyFailed.applied`` names exactly the
    paths that could not be restored (normally none). ``sys_fault`` (default:
    :data:`SYSCALL_FAULT`) is the test seam for failing changes to the real tree.
    """
    started = time.perf_counter()
    if not overlay.close(close_timeout):
        raise OverlayApplyFailed("tool calls are still writing into the speculation overlay")
    if overlay.removed:
        raise OverlayClosed("the speculation overlay was discarded")
    overlay_id = overlay.overlay_id
    if not overlay.has_writes:
        return ApplyResult(overlay_id=overlay_id)
    # A path the overlay created and deleted again is no change at all: it
    # must not be checked either (its real parent may be a file the overlay
    # deletes, which the check would report as a moved path).
    entries = [e for e in overlay.plan() if not (e.final == "absent" and e.base.kind == "absent")]
    root = str(overlay.root)
    sysf: SysFault = sys_fault or SYSCALL_FAULT or no_fault
    try:
        cache = DirCache(root)
    except OSError as exc:
        raise _failure(exc, "opening the workspace") from None
    cache.before_mkdir = functools.partial(sysf, "mkdir")
    with _workspace_lock(root), cache:
        try:
            conflicts, seen, modes = _check(cache, entries)
        except (OSError, PathChanged) as exc:
            raise _failure(exc, "checking for conflicts") from None
        if conflicts:
            report = ConflictReport(overlay_id=overlay_id, conflicts=tuple(conflicts))
            log.info("overlay_apply_conflict", overlay=overlay_id, paths=list(report.paths))
            return report
        ops = _plan(entries)
        if not ops:
            return ApplyResult(overlay_id=overlay_id, duration_s=time.perf_counter() - started)
        journal_id = f"{overlay_id}-{secrets.token_hex(6)}"
        tag = journal_id[-12:]
        removed = {op.path for op in ops if op.op == "rmdir"}
        try:
            for index, op in enumerate(ops):
                name = parent_and_name(op.path)[1][:64]
                if op.op == "replace":
                    op.tmp_dir = _staging_dir(cache, op.path)
                    op.tmp = f".{name}.fore-apply-{tag}-{index}"
                if _displaces(op):
                    op.keep_dir = _keep_dir(op.path, removed)
                    op.keep = f".{name}.fore-keep-{tag}-{index}"
            journal = _Journal.create(Path(journal_dir), journal_id, root, overlay_id, ops)
        except (OSError, PathChanged) as exc:
            raise _failure(exc, "writing the apply journal") from None
        txn = _Transaction(cache, ops, Keeper(cache, _graveyard_dir(overlay), tag, sysf), sysf)
        try:
            late = txn.prepare(entries, seen, modes, journal, durable=durable, fault=fault)
            if late:
                report = ConflictReport(overlay_id=overlay_id, conflicts=tuple(late))
                log.info("overlay_apply_conflict", overlay=overlay_id, paths=list(report.paths))
                return report
            if fault is not None:
                fault("prepared", 0)
            failure = txn.execute(fault=fault)
            if failure is not None:
                changed, problems = txn.roll_back(failure)
                journal.discard()  # rolled back in process: nothing left for recovery
                raise _rolled_back(failure, changed, problems, overlay_id)
            if txn.finish(durable=durable):
                journal.finish()
            else:
                journal.close()  # a kept link stayed behind: recovery removes it
        finally:
            txn.close()
    result = _result(overlay_id, ops, txn.created, time.perf_counter() - started)
    log.info(
        "overlay_applied",
        overlay=overlay_id,
        files=len(result.written) + len(result.deleted),
        bytes=result.bytes_written,
        duration_ms=round(result.duration_s * 1e3, 3),
    )
    return result


def _graveyard_dir(overlay: OverlayFs) -> str | None:
    try:
        return overlay.displaced_dir()
    except OSError:
        return None


def _keep_dir(rel: str, removed: set[str]) -> str:
    """The nearest directory above ``rel`` that survives the apply (a kept link
    inside a directory the apply removes would keep it from being removed)."""
    parent = posixpath.dirname(rel)
    while parent and (parent in removed or _has_ancestor_in(parent, removed)):
        parent = posixpath.dirname(parent)
    return parent


def _displaces(op: _Op) -> bool:
    """Whether ``op`` replaces or removes an existing real file (which apply keeps)."""
    return op.op in ("replace", "unlink") and op.base_kind in ("file", "other")


def _rolled_back(
    failure: _Failure, changed: list[str], problems: list[str], overlay_id: str
) -> OverlayApplyFailed:
    reason = _describe(failure.error, failure.op.path)
    if changed:
        message = (
            f"apply failed ({reason}) and could not be undone entirely: "
            f"{', '.join(changed)} keep the speculation's version ({'; '.join(problems)})"
        )
        log.error("overlay_apply_failed", overlay=overlay_id, reason=reason, changed=changed)
    else:
        message = f"apply failed ({reason}); it was rolled back: no file changed"
        log.warning("overlay_apply_rolled_back", overlay=overlay_id, reason=reason)
    return OverlayApplyFailed(message, changed)


def _result(overlay_id: str, ops: list[_Op], created: list[str], duration: float) -> ApplyResult:
    final_kind: dict[str, str] = {}
    for op in ops:
        if op.op == "replace":
            final_kind[op.path] = "file"
        elif op.op == "mkdir":
            final_kind[op.path] = "dir"
    written = [op.path for op in ops if op.op == "replace"]
    deleted = [op.path for op in ops if op.op == "unlink" and op.path not in final_kind]
    removed_dirs = [op.path for op in ops if op.op == "rmdir" and op.path not in final_kind]
    created_dirs = sorted({op.path for op in ops if op.op == "mkdir"} | set(created))
    paths = sorted({*written, *deleted, *removed_dirs, *created_dirs}, key=path_key)
    return ApplyResult(
        overlay_id=overlay_id,
        paths=tuple(paths),
        written=tuple(written),
        deleted=tuple(deleted),
        created_dirs=tuple(sorted(created_dirs, key=path_key)),
        removed_dirs=tuple(removed_dirs),
        bytes_written=sum(op.size for op in ops if op.op == "replace"),
        duration_s=duration,
    )


def _plan(entries: list[PlannedEntry]) -> list[_Op]:
    """Removals deepest first, then creations parents first."""
    removals: list[_Op] = []
    creations: list[_Op] = []
    for entry in entries:
        was = entry.base.kind
        op = functools.partial(_op_for, entry)
        if entry.final == "absent":
            if was in ("file", "other"):
                removals.append(op("unlink"))
            elif was == "dir":
                removals.append(op("rmdir"))
        elif entry.final == "dir":
            if was in ("file", "other"):
                removals.append(op("unlink"))
            if was != "dir":
                creations.append(op("mkdir"))
        else:
            if was == "dir":
                removals.append(op("rmdir"))
            creations.append(op("replace"))
    removals.sort(key=lambda op: (-op.path.count("/"), op.path))
    creations.sort(key=lambda op: path_key(op.path))
    return removals + creations


def _op_for(entry: PlannedEntry, kind: Literal["unlink", "rmdir", "mkdir", "replace"]) -> _Op:
    """One operation on ``entry``'s path, with what recovery needs to check it."""
    op = _Op(kind, entry.rel, base_kind=entry.base.kind, base_sha256=entry.base.sha256)
    if kind == "replace":
        op.size, op.new_sha256 = entry.size, entry.sha256
    return op


def _staging_dir(cache: DirCache, rel: str) -> str:
    """The deepest existing real directory on the way to ``rel``'s parent."""
    parent = posixpath.dirname(rel)
    best = ""
    if not parent:
        return best
    parts = parent.split("/")
    for index in range(1, len(parts) + 1):
        prefix = "/".join(parts[:index])
        try:
            cache.open(prefix)
        except (FileNotFoundError, NotADirectoryError, PathChanged):
            break
        best = prefix
    return best
