"""Apply (accept) of an overlay: conflicts, atomic staging, crash recovery (issue 9).

Crashes are real: a child process applies with a fault hook that stops it at
a chosen point, the test SIGKILLs it, then runs recovery and checks that every
real file is entirely old or entirely new -- and all of them the same way.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fore.actors.overlay import (
    OverlayApplyFailed,
    OverlayClosed,
    OverlayFs,
    OverlayStore,
    apply_overlay,
    recover,
    sweep_dead,
)
from fore.actors.tools.fsclock import wait_for_tick
from fore.messages.overlay import ApplyResult, ConflictReport

WAIT = 15.0
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace whose files are stamped before any overlay the test creates."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "b.txt").write_text("beta\n")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hi')\n")
    wait_for_tick()
    return root


@pytest.fixture
def store(tmp_path: Path) -> Iterator[OverlayStore]:
    s = OverlayStore(tmp_path / "overlays")
    yield s
    s.close()


@pytest.fixture
def ov(store: OverlayStore, ws: Path) -> OverlayFs:
    return store.create(ws)


def fresh(store: OverlayStore, ws: Path) -> OverlayFs:
    """An overlay started after the test's own changes to ``ws`` (they are its baseline)."""
    wait_for_tick()
    return store.create(ws)


def snapshot(root: Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for d in dirnames:
            out[os.path.normpath(os.path.join(rel, d))] = None
        for f in filenames:
            out[os.path.normpath(os.path.join(rel, f))] = Path(dirpath, f).read_bytes()
    return out


def leftovers(root: Path) -> list[str]:
    return [p for p in snapshot(root) if ".fore-" in p]


def applied(result: ApplyResult | ConflictReport) -> ApplyResult:
    assert isinstance(result, ApplyResult), result
    return result


# -- the reference behaviours -------------------------------------------------------------


def test_apply_copies_back_and_creates_missing_directories(ws: Path, store: OverlayStore) -> None:
    os.chmod(ws / "a.txt", 0o755)
    ov = fresh(store, ws)
    ov.write_bytes("a.txt", b"changed\n")
    ov.write_bytes("deep/new/dir/file.txt", b"new\n")
    ov.mkdir("empty/dir")
    result = applied(apply_overlay(ov, store.journal_dir))
    assert (ws / "a.txt").read_bytes() == b"changed\n"
    assert (ws / "a.txt").stat().st_mode & 0o777 == 0o755  # the mode is kept
    assert (ws / "deep" / "new" / "dir" / "file.txt").read_bytes() == b"new\n"
    assert (ws / "empty" / "dir").is_dir()
    assert result.written == ("a.txt", "deep/new/dir/file.txt")
    assert result.created_dirs == ("deep", "deep/new", "deep/new/dir", "empty", "empty/dir")
    assert result.paths == (
        "a.txt",
        "deep",
        "deep/new",
        "deep/new/dir",
        "deep/new/dir/file.txt",
        "empty",
        "empty/dir",
    )
    assert result.bytes_written == len(b"changed\n") + len(b"new\n")
    assert leftovers(ws) == []
    assert os.listdir(store.journal_dir) == []


def test_apply_with_nothing_written_is_empty_and_touches_nothing(
    ov: OverlayFs, ws: Path, tmp_path: Path
) -> None:
    before = snapshot(ws)
    mtime = ws.stat().st_mtime_ns
    ov.read_bytes("a.txt")
    journal_dir = tmp_path / "journal-never-created"
    result = applied(apply_overlay(ov, journal_dir))
    assert result.empty and result.paths == () and result.files_changed == 0
    assert snapshot(ws) == before
    assert ws.stat().st_mtime_ns == mtime
    assert not journal_dir.exists()


def test_apply_deletes_recreates_and_changes_types(ws: Path, store: OverlayStore) -> None:
    (ws / "gone").mkdir()
    (ws / "gone" / "x").write_text("x")
    (ws / "dir2file").mkdir()
    (ws / "dir2file" / "y").write_text("y")
    ov = fresh(store, ws)
    ov.delete("b.txt")
    ov.delete("gone/x")
    ov.delete("gone")
    ov.delete("a.txt")
    ov.write_bytes("a.txt", b"reborn")
    ov.delete("src/main.py")
    ov.mkdir("src/main.py")
    ov.write_bytes("src/main.py/inner.py", b"inner")
    ov.delete("dir2file/y")
    ov.delete("dir2file")
    ov.write_bytes("dir2file", b"now a file")
    result = applied(apply_overlay(ov, store.journal_dir))
    assert snapshot(ws) == {
        "a.txt": b"reborn",
        "src": None,
        "src/main.py": None,
        "src/main.py/inner.py": b"inner",
        "dir2file": b"now a file",
    }
    assert set(result.deleted) == {"b.txt", "gone/x", "dir2file/y"}
    assert result.removed_dirs == ("gone",)
    assert set(result.written) == {"a.txt", "src/main.py/inner.py", "dir2file"}


def test_writes_after_apply_are_refused(ov: OverlayFs, store: OverlayStore) -> None:
    ov.write_bytes("a.txt", b"x")
    applied(apply_overlay(ov, store.journal_dir))
    with pytest.raises(OverlayClosed):
        ov.write_bytes("a.txt", b"y")


def test_durable_apply(ov: OverlayFs, ws: Path, store: OverlayStore) -> None:
    ov.write_bytes("a.txt", b"durable")
    ov.write_bytes("n/new.txt", b"n")
    applied(apply_overlay(ov, store.journal_dir, durable=True))
    assert (ws / "a.txt").read_bytes() == b"durable"
    assert (ws / "n" / "new.txt").read_bytes() == b"n"


def test_replaced_and_deleted_files_are_freed_only_when_the_overlay_is_removed(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    """Apply parks the old inodes in the overlay: their freeing is off the accept path."""
    old = {name: (ws / name).stat().st_ino for name in ("a.txt", "b.txt")}
    ov.write_bytes("a.txt", b"changed\n")
    ov.delete("b.txt")
    ov.write_bytes("brand/new.txt", b"new\n")  # no old file: nothing to park
    applied(apply_overlay(ov, store.journal_dir))
    assert snapshot(ws) == {
        "a.txt": b"changed\n",
        "brand": None,
        "brand/new.txt": b"new\n",
        "src": None,
        "src/main.py": b"print('hi')\n",
    }
    displaced = ov.directory / "displaced"
    parked = {p.stat().st_ino: p.read_bytes() for p in displaced.iterdir()}
    assert parked == {old["a.txt"]: b"alpha\n", old["b.txt"]: b"beta\n"}
    assert all(p.stat().st_nlink == 1 for p in displaced.iterdir())  # gone from the tree
    assert ov.remove()
    assert not ov.directory.exists()


def test_apply_works_when_old_files_cannot_be_parked(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    (ov.directory / "displaced").write_bytes(b"not a directory")  # parking is impossible
    ov.write_bytes("a.txt", b"changed\n")
    ov.delete("b.txt")
    result = applied(apply_overlay(ov, store.journal_dir))
    assert result.written == ("a.txt",) and result.deleted == ("b.txt",)
    assert (ws / "a.txt").read_bytes() == b"changed\n"
    assert not (ws / "b.txt").exists()
    assert leftovers(ws) == []


# -- conflicts: the user edited meanwhile -------------------------------------------------


def test_user_edit_of_a_touched_file_is_a_conflict_and_nothing_is_written(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    ov.write_bytes("a.txt", b"speculated")
    ov.write_bytes("new/file.txt", b"new")
    ov.delete("b.txt")
    (ws / "a.txt").write_text("the user's edit\n")
    before = snapshot(ws)
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert len(report.conflicts) == 1
    conflict = report.conflicts[0]
    assert (conflict.path, conflict.change) == ("a.txt", "modified")
    assert conflict.expected.sha256 == hashlib.sha256(b"alpha\n").hexdigest()
    assert conflict.found.kind == "file" and conflict.found.size == len("the user's edit\n")
    assert snapshot(ws) == before
    assert "a.txt" in report.summary() and "modified" in report.summary()
    assert os.listdir(store.journal_dir) == []


def test_user_creating_a_file_the_overlay_creates_is_a_conflict(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    ov.write_bytes("fresh.txt", b"speculated")
    ov.write_bytes("a.txt", b"fine")
    (ws / "fresh.txt").write_text("the user's file")
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert [(c.path, c.change, c.expected.kind, c.found.kind) for c in report.conflicts] == [
        ("fresh.txt", "created", "absent", "file")
    ]
    assert (ws / "fresh.txt").read_text() == "the user's file"
    assert (ws / "a.txt").read_text() == "alpha\n"


def test_every_conflicting_file_is_named(ov: OverlayFs, ws: Path, store: OverlayStore) -> None:
    ov.write_bytes("a.txt", b"1")
    ov.write_bytes("b.txt", b"2")
    ov.delete("src/main.py")
    ov.write_bytes("x/new.txt", b"3")
    (ws / "a.txt").unlink()
    (ws / "b.txt").unlink()
    (ws / "b.txt").mkdir()
    (ws / "src" / "main.py").write_text("changed")
    (ws / "x").write_text("a file where the overlay needs a directory")
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert {(c.path, c.change) for c in report.conflicts} == {
        ("a.txt", "deleted"),
        ("b.txt", "became_directory"),
        ("src/main.py", "modified"),
        ("x", "created"),
        ("x/new.txt", "path_changed"),
    }
    summary = report.summary()
    for path in report.paths:
        assert path in summary


def test_a_touch_without_a_content_change_is_not_a_conflict(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    ov.write_bytes("a.txt", b"speculated")
    os.utime(ws / "a.txt", ns=(1, 1))
    applied(apply_overlay(ov, store.journal_dir))
    assert (ws / "a.txt").read_bytes() == b"speculated"


def test_a_deleted_directory_that_gained_files_is_a_conflict(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    ov.delete("src/main.py")
    ov.delete("src")
    (ws / "src" / "added.py").write_text("new")
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert [(c.path, c.change) for c in report.conflicts] == [("src", "directory_changed")]
    assert "added.py" in report.conflicts[0].detail
    assert (ws / "src" / "main.py").exists()


def test_retry_after_the_user_reverts(ov: OverlayFs, ws: Path, store: OverlayStore) -> None:
    ov.write_bytes("a.txt", b"speculated")
    (ws / "a.txt").write_text("edit")
    assert isinstance(apply_overlay(ov, store.journal_dir), ConflictReport)
    (ws / "a.txt").write_text("alpha\n")
    applied(apply_overlay(ov, store.journal_dir))
    assert (ws / "a.txt").read_bytes() == b"speculated"


# -- symlinks swapped in ------------------------------------------------------------------


def test_parent_replaced_by_a_symlink_before_apply_is_a_conflict(
    ov: OverlayFs, ws: Path, store: OverlayStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    ov.write_bytes("src/main.py", b"speculated")
    ov.write_bytes("src/new.py", b"new")
    (ws / "src").rename(tmp_path / "moved-src")
    (ws / "src").symlink_to(outside)
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert {c.change for c in report.conflicts} == {"path_changed"}
    assert os.listdir(outside) == []


def test_symlink_swapped_in_during_staging_cannot_redirect_a_write(
    ws: Path, store: OverlayStore, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "zdir").mkdir()
    (ws / "zdir" / "z.txt").write_text("z")
    ov = fresh(store, ws)
    ov.write_bytes("a.txt", b"new a")
    ov.write_bytes("zdir/z.txt", b"new z")
    before = snapshot(ws)

    def swap(phase: str, n: int) -> None:
        if phase == "staged" and n == 1:
            # a.txt is staged; now make zdir lead outside before it is staged.
            (ws / "zdir").rename(tmp_path / "zdir-moved")
            (ws / "zdir").symlink_to(outside)

    with pytest.raises(OverlayApplyFailed) as info:
        apply_overlay(ov, store.journal_dir, fault=swap)
    assert str(tmp_path) not in str(info.value)
    assert os.listdir(outside) == []
    (ws / "zdir").unlink()
    (tmp_path / "zdir-moved").rename(ws / "zdir")
    assert snapshot(ws) == before  # rolled back: the staged temp of a.txt is gone too
    assert os.listdir(store.journal_dir) == []


def test_a_late_user_edit_during_staging_is_caught(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    ov.write_bytes("a.txt", b"new a")
    ov.write_bytes("b.txt", b"new b")

    def edit(phase: str, n: int) -> None:
        if phase == "staged" and n == 2:
            (ws / "b.txt").write_text("the user was faster\n")

    report = apply_overlay(ov, store.journal_dir, fault=edit)
    assert isinstance(report, ConflictReport)
    assert report.paths == ("b.txt",)
    assert (ws / "a.txt").read_text() == "alpha\n"
    assert leftovers(ws) == []


def test_an_operation_failing_after_the_commit_point_is_rolled_back(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    """Past the commit point an operation can still fail: apply undoes what it did,
    before it returns, and says nothing changed (issue 19, point 4)."""
    ov.write_bytes("a.txt", b"new a")
    ov.write_bytes("b.txt", b"new b")
    before = snapshot(ws)

    def lose_b(phase: str, n: int) -> None:
        if phase == "prepared":  # b's staged temp vanishes before it is moved
            (staged,) = [p for p in leftovers(ws) if p.startswith(".b.txt")]
            (ws / staged).unlink()

    with pytest.raises(OverlayApplyFailed) as info:
        apply_overlay(ov, store.journal_dir, fault=lose_b)
    assert info.value.applied == ()
    assert "rolled back" in str(info.value)
    assert snapshot(ws) == before
    assert os.listdir(store.journal_dir) == []  # nothing left for recovery to redo


# -- crash recovery -----------------------------------------------------------------------

CHILD = r"""
import os, sys, threading
from fore.actors.core.logs import configure_logging
configure_logging(stream=sys.stderr)
from fore.actors.overlay import OverlayStore, apply_overlay

ws, root, phase, stop_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
keep = sys.argv[5] if len(sys.argv) > 5 else "overlay"
store = OverlayStore(root)
ov = store.create(ws)
if keep == "next to the file":  # no private directory: displaced files are kept in the tree
    with open(os.path.join(ov.directory, "displaced"), "wb"):
        pass
for i in range(8):
    ov.write_bytes(f"f{i}.txt", f"new {i}\n".encode())
ov.write_bytes("fresh/dir/n.txt", b"brand new\n")
ov.delete("doomed.txt")
ov.delete("olddir/o.txt")
ov.delete("olddir")

def fault(p, n):
    if p == phase and n == stop_at:
        sys.stdout.write(f"STOPPED {p} {n} {store.journal_dir}\n")
        sys.stdout.flush()
        threading.Event().wait()  # until SIGKILL

apply_overlay(ov, store.journal_dir, fault=fault)
sys.stdout.write("FINISHED\n")
sys.stdout.flush()
"""

OLD = {
    **{f"f{i}.txt": f"old {i}\n".encode() for i in range(8)},
    "doomed.txt": b"doomed\n",
    "olddir": None,
    "olddir/o.txt": b"o\n",
}
NEW = {
    **{f"f{i}.txt": f"new {i}\n".encode() for i in range(8)},
    "fresh": None,
    "fresh/dir": None,
    "fresh/dir/n.txt": b"brand new\n",
}
OPS = 3 + 2 + 9  # removals (doomed, olddir/o.txt, olddir) + mkdirs + replaces


def crash_workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "crash-ws"
    ws.mkdir()
    for rel, data in OLD.items():
        if data is None:
            (ws / rel).mkdir()
        else:
            (ws / rel).write_bytes(data)
    wait_for_tick()
    return ws


def run_child_until(ws: Path, root: Path, phase: str, stop_at: int, keep: str = "overlay") -> Path:
    """Start an applying child, wait until it stops at the fault point, SIGKILL it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ws), str(root), phase, str(stop_at), keep],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the applying child never reached its fault point"
        line = proc.stdout.readline()
        assert line.startswith(f"STOPPED {phase} {stop_at}"), line
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(WAIT) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT)
        if proc.stdout is not None:
            proc.stdout.close()
    return Path(line.split(" ", 3)[3].strip())


def assert_all_old_or_all_new(ws: Path) -> str:
    state = snapshot(ws)
    assert leftovers(ws) == [], leftovers(ws)
    if state == OLD:
        return "old"
    assert state == NEW, state
    return "new"


@pytest.mark.parametrize(
    ("phase", "stop_at", "expected"),
    [
        ("staged", 1, "old"),
        ("staged", 9, "old"),  # every file staged, commit point not reached
        ("prepared", 0, "new"),  # committed, nothing moved yet
        ("op", 1, "new"),
        ("op", 7, "new"),  # removals done, some replaces done
        ("op", OPS - 1, "new"),
    ],
)
@pytest.mark.parametrize("keep", ["overlay", "next to the file"])
def test_crash_mid_apply_recovers_all_old_or_all_new(
    tmp_path: Path, phase: str, stop_at: int, expected: str, keep: str
) -> None:
    """Whichever way displaced files were kept, recovery leaves no temp file and no
    kept link behind (they are in the tree when the overlay's directory is unusable)."""
    ws = crash_workspace(tmp_path)
    journal_dir = run_child_until(ws, tmp_path / "overlays", phase, stop_at, keep)
    journals = [n for n in os.listdir(journal_dir) if n.endswith(".journal")]
    assert len(journals) == 1
    header = json.loads((journal_dir / journals[0]).read_text().splitlines()[0])
    assert len(header["ops"]) == OPS
    if phase == "staged":
        assert leftovers(ws) != []  # staged temps exist next to their targets
        assert {k: v for k, v in snapshot(ws).items() if ".fore-" not in k} == OLD
    if phase == "prepared" and keep == "next to the file":
        assert [p for p in leftovers(ws) if ".fore-keep-" in p] != []
    records = recover(journal_dir)
    assert [r.action for r in records] == ["rolled_back" if expected == "old" else "rolled_forward"]
    assert records[0].problems == ()
    assert assert_all_old_or_all_new(ws) == expected
    assert os.listdir(journal_dir) == []
    assert recover(journal_dir) == []  # idempotent: nothing left to do


@pytest.mark.parametrize(
    ("phase", "stop_at", "edited"),
    [
        ("prepared", 0, ("f2.txt",)),  # committed, nothing moved yet
        ("op", 7, ("f1.txt", "f6.txt")),  # f0-f3 already replaced, f4-f7 not yet
    ],
)
def test_recovery_never_clobbers_an_edit_made_after_the_crash(
    tmp_path: Path, phase: str, stop_at: int, edited: tuple[str, ...]
) -> None:
    """A child applying is killed; the user edits files before the next start; the
    roll-forward finishes everything else but leaves those files as the user left them."""
    ws = crash_workspace(tmp_path)
    journal_dir = run_child_until(ws, tmp_path / "overlays", phase, stop_at)
    for rel in edited:
        (ws / rel).write_bytes(b"the user's edit after the crash\n")
    (record,) = recover(journal_dir)
    assert record.action == "rolled_forward"
    assert record.skipped == edited
    assert [p.split(":")[0] for p in record.problems] == list(edited)
    expected = {**NEW, **{rel: b"the user's edit after the crash\n" for rel in edited}}
    assert snapshot(ws) == expected
    assert leftovers(ws) == []  # the skipped files' staged temps are gone too
    assert os.listdir(journal_dir) == []


def test_recovery_is_idempotent_when_interrupted_itself(tmp_path: Path) -> None:
    ws = crash_workspace(tmp_path)
    journal_dir = run_child_until(ws, tmp_path / "overlays", "op", 5)
    name = next(n for n in os.listdir(journal_dir) if n.endswith(".journal"))
    saved = (journal_dir / name).read_bytes()
    recover(journal_dir)
    assert assert_all_old_or_all_new(ws) == "new"
    (journal_dir / name).write_bytes(saved)  # as if recovery had crashed before removing it
    records = recover(journal_dir)
    assert [r.action for r in records] == ["rolled_forward"]
    assert records[0].problems == ()
    assert assert_all_old_or_all_new(ws) == "new"


def test_sweep_at_start_recovers_a_dead_process_apply(tmp_path: Path) -> None:
    ws = crash_workspace(tmp_path)
    root = tmp_path / "overlays"
    journal_dir = run_child_until(ws, root, "op", 3)
    report = sweep_dead(root)
    assert report.removed == (journal_dir.parent.name,)
    assert [r.action for r in report.recovered] == ["rolled_forward"]
    assert assert_all_old_or_all_new(ws) == "new"
    assert os.listdir(root) == []


def test_an_unfinished_journal_is_rolled_back_without_touching_real_files(
    tmp_path: Path,
) -> None:
    ws = crash_workspace(tmp_path)
    journal_dir = run_child_until(ws, tmp_path / "overlays", "staged", 4)
    name = next(n for n in os.listdir(journal_dir) if n.endswith(".journal"))
    lines = (journal_dir / name).read_text().splitlines()
    assert len(lines) == 1  # the header only: not PREPARED
    recover(journal_dir)
    assert assert_all_old_or_all_new(ws) == "old"


def test_a_torn_journal_header_is_discarded(tmp_path: Path) -> None:
    journal_dir = tmp_path / "journal"
    journal_dir.mkdir()
    (journal_dir / "x.journal").write_text('{"journal": 1, "ops": [')
    records = recover(journal_dir)
    assert [r.action for r in records] == ["discarded"]
    assert os.listdir(journal_dir) == []


def test_apply_copies_when_hard_links_are_impossible(
    ws: Path, store: OverlayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def no_link(*args: object, **kwargs: object) -> None:
        calls.append("link")
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    os.chmod(ws / "a.txt", 0o640)
    ov = fresh(store, ws)
    monkeypatch.setattr(os, "link", no_link)
    ov.write_bytes("a.txt", b"copied")
    ov.write_bytes("b.txt", b"copied too")
    ov.write_bytes("n/new.txt", b"new")
    applied(apply_overlay(ov, store.journal_dir))
    # Each kind of link is tried once (staging, keeping in the overlay, keeping
    # next to the file), then every file is copied.
    assert calls == ["link"] * 3
    assert (ws / "a.txt").read_bytes() == b"copied"
    assert (ws / "b.txt").read_bytes() == b"copied too"
    assert (ws / "a.txt").stat().st_mode & 0o777 == 0o640
    assert (ws / "n" / "new.txt").read_bytes() == b"new"
    assert (ws / "a.txt").stat().st_nlink == 1
    assert leftovers(ws) == []


def test_applied_files_do_not_change_with_the_discarded_overlay(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    ov.write_bytes("a.txt", b"applied")
    applied(apply_overlay(ov, store.journal_dir))
    assert ov.remove()
    assert (ws / "a.txt").read_bytes() == b"applied"
    assert (ws / "a.txt").stat().st_nlink == 1


def test_recovery_leaves_an_apply_running_in_this_process_alone(
    ov: OverlayFs, ws: Path, store: OverlayStore
) -> None:
    ov.write_bytes("a.txt", b"new a")
    ov.write_bytes("b.txt", b"new b")
    seen: list[object] = []

    def recover_midway(phase: str, n: int) -> None:
        if phase in ("staged", "prepared", "op") and n <= 1:
            seen.append(recover(store.journal_dir))

    applied(apply_overlay(ov, store.journal_dir, fault=recover_midway))
    assert seen == [[], [], []]
    assert (ws / "a.txt").read_bytes() == b"new a" and (ws / "b.txt").read_bytes() == b"new b"
    assert leftovers(ws) == []


def test_an_unusable_journal_fails_cleanly_and_writes_nothing(
    ov: OverlayFs, ws: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the journal directory should be")
    ov.write_bytes("a.txt", b"never applied")
    before = snapshot(ws)
    with pytest.raises(OverlayApplyFailed) as info:
        apply_overlay(ov, blocker / "journal")
    assert "journal" in str(info.value) and str(tmp_path) not in str(info.value)
    assert snapshot(ws) == before
