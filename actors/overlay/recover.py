"""Crash recovery of interrupted applies: finish or undo each journaled one.

Run at start for the journals of dead processes (see
:mod:`fore.actors.overlay.store`): a PREPARED journal is rolled forward --
every operation is idempotent -- and any other rolled back, so each real
file ends up entirely old or entirely new. Roll-forward never clobbers an
edit made after the crash: a target that is neither the base nor the new
content is left as the user left it and reported. The journal format and
the operations are :mod:`.journal`'s; the apply itself is :mod:`.apply`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fore.actors.core.logs import get_logger
from fore.actors.overlay._realfs import DirCache, PathChanged, observe, parent_and_name
from fore.actors.overlay.journal import (
    JOURNAL_SUFFIX,
    _active_journals,
    _describe,
    _execute,
    _locks_guard,
    _Op,
)
from fore.messages.overlay import RecoveryAction, RecoveryRecord

# Apply's one logger: its events keep the name they had before the split.
log = get_logger("fore.actors.overlay.apply")


def recover(journal_dir: str | os.PathLike[str]) -> list[RecoveryRecord]:
    """Finish or undo every interrupted apply journaled in ``journal_dir``.

    Call it only for journals no other live process is using (the store calls
    it for dead processes); journals of applies running in this process are
    skipped. A PREPARED journal is rolled forward (each operation is
    idempotent); any other is rolled back (its staged temps are deleted, real
    files were never touched). Journals are removed afterwards.
    """
    directory = Path(journal_dir)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    records = []
    for name in names:
        path = directory / name
        with _locks_guard:
            busy = str(path) in _active_journals
        if name.endswith(JOURNAL_SUFFIX) and not busy:
            records.append(_recover_one(path))
    return records


def _recover_one(path: Path) -> RecoveryRecord:
    journal_id = path.name[: -len(JOURNAL_SUFFIX)]
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
        header = json.loads(lines[0])
        ops = [_Op(**raw) for raw in header["ops"]]
        root = str(header["workspace"])
    except (OSError, ValueError, KeyError, TypeError):
        # A torn header: the crash came before anything was staged.
        path.unlink(missing_ok=True)
        log.warning("overlay_journal_unreadable", journal=journal_id)
        return RecoveryRecord(journal_id=journal_id, action="discarded", workspace="")
    states = set()
    for line in lines[1:]:
        try:
            states.add(json.loads(line).get("state"))
        except (ValueError, AttributeError):
            continue
    problems: list[str] = []
    skipped: list[str] = []
    action: RecoveryAction
    paths: list[str] = []
    try:
        cache = DirCache(root)
    except OSError as exc:
        path.unlink(missing_ok=True)
        return RecoveryRecord(
            journal_id=journal_id,
            action="discarded",
            workspace=root,
            problems=(f"workspace unavailable: {exc.strerror}",),
        )
    with cache:
        if "DONE" in states:
            action = "completed"
            for op in ops:
                _drop_keep(cache, op)
        elif "PREPARED" in states:
            action = "rolled_forward"
            created: list[str] = []
            finals = _final_kinds(ops)
            for op in ops:
                try:
                    if op.path in skipped or not _still_ours(cache, op, finals):
                        _drop_staged(cache, op)
                        if op.path not in skipped:
                            skipped.append(op.path)
                            problems.append(
                                f"{op.path}: changed after the interrupted apply; left as it is"
                            )
                        continue
                    if _execute(cache, op, created, recovering=True):
                        paths.append(op.path)
                except (OSError, PathChanged) as exc:
                    problems.append(_describe(exc, op.path))
            for op in ops:  # the kept links are needed no more, whatever happened
                _drop_keep(cache, op)
        else:
            action = "rolled_back"
            for op in ops:
                _drop_keep(cache, op)
                if op.op != "replace" or op.tmp is None or op.tmp_dir is None:
                    continue
                try:
                    os.unlink(op.tmp, dir_fd=cache.open(op.tmp_dir))
                    paths.append(op.path)
                except (OSError, PathChanged):
                    continue
    path.unlink(missing_ok=True)
    log.info(
        "overlay_journal_recovered",
        journal=journal_id,
        action=action,
        paths=len(paths),
        problems=problems,
    )
    if skipped:
        log.warning(
            "overlay_recovery_skipped",
            journal=journal_id,
            workspace=root,
            paths=skipped,
            detail="changed after the interrupted apply; left as the user left them",
        )
    return RecoveryRecord(
        journal_id=journal_id,
        action=action,
        workspace=root,
        paths=tuple(paths),
        problems=tuple(problems),
        skipped=tuple(skipped),
    )


def _final_kinds(ops: list[_Op]) -> dict[str, str]:
    """What the apply leaves at each path it creates something at."""
    finals: dict[str, str] = {}
    for op in ops:
        if op.op == "replace":
            finals[op.path] = "file"
        elif op.op == "mkdir":
            finals[op.path] = "dir"
    return finals


def _still_ours(cache: DirCache, op: _Op, finals: dict[str, str]) -> bool:
    """Whether recovery may (re)run ``op``: its target is still the base, or already done.

    A version-1 journal records no base: its operations are replayed as before.
    """
    if op.base_kind is None or op.op == "mkdir":
        return True
    try:
        now = observe(cache, op.path, hash_files=True).base
    except PathChanged:
        return False  # a parent became a file or a symlink: not what this apply left
    if now.kind == "absent":
        # Removed by this apply (its unlink or rmdir ran first), or never there.
        # Only a file that was there and is gone now is a user's change to respect.
        return not (op.op == "replace" and op.base_kind == "file")
    if op.op == "replace" and now.kind == "file" and now.sha256 == op.new_sha256:
        return True  # already the new content
    if op.op in ("unlink", "rmdir") and finals.get(op.path) == now.kind:
        return True  # what this apply creates there is in place: the removal is a no-op
    if now.kind != op.base_kind:
        return False
    if now.kind == "file":
        return op.base_sha256 is not None and now.sha256 == op.base_sha256
    return True  # a directory (still to remove) or a special file, as it was


def _drop_keep(cache: DirCache, op: _Op) -> None:
    """Delete the link ``op``'s displaced file was kept under in the tree, if there is one."""
    if op.keep is None:
        return
    keep_dir = op.keep_dir if op.keep_dir is not None else parent_and_name(op.path)[0]
    try:
        os.unlink(op.keep, dir_fd=cache.open(keep_dir))
    except (OSError, PathChanged):
        pass


def _drop_staged(cache: DirCache, op: _Op) -> None:
    """Delete ``op``'s staged temp, if it has one left (it is never moved into place)."""
    if op.op != "replace" or op.tmp is None or op.tmp_dir is None:
        return
    try:
        os.unlink(op.tmp, dir_fd=cache.open(op.tmp_dir))
    except (OSError, PathChanged):
        pass
