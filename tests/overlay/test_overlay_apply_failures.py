"""An apply that fails after its commit point is undone in process (issue 19, point 4).

Failures are injected deterministically through apply's syscall seam
(``apply_overlay(sys_fault=...)``: ``fault(syscall, path)`` runs before each change
to the real tree and raises ``OSError`` to make that change fail), at *every* point
an apply changes the tree, for each way a displaced file can be kept (a link in the
overlay, a link next to the file, a copy). A real full filesystem -- a 64-inode
tmpfs, mounted when the test may -- checks the same without any seam.

After every failure: the tree is exactly as before (contents, kinds, modes), no
staged or kept file is left in it, no journal is left for recovery to redo, and
``OverlayApplyFailed.applied`` is empty -- or, when the undo itself was made to fail,
names exactly the paths that kept the speculation's version.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fore.actors.overlay import OverlayApplyFailed, OverlayFs, OverlayStore, apply_overlay
from fore.actors.tools.fsclock import wait_for_tick
from fore.messages.overlay import ApplyResult

Tree = dict[str, tuple[str, bytes | None, int]]


def tree(root: Path) -> Tree:
    """Every path under ``root``: (kind, content, mode)."""
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", None, stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


def leftovers(root: Path) -> list[str]:
    return [p for p in tree(root) if ".fore-" in p]


def seed(ws: Path) -> None:
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "keep.txt").write_text("untouched\n")
    (ws / "a.txt").write_text("alpha\n")
    os.chmod(ws / "a.txt", 0o640)
    (ws / "b.txt").write_text("beta\n")
    (ws / "gone.txt").write_text("to be deleted\n")
    (ws / "old").mkdir()
    (ws / "old" / "o.txt").write_text("o\n")
    (ws / "becomes_dir").write_text("a file now\n")
    wait_for_tick()


def speculate(ov: OverlayFs) -> None:
    """Replace, create in new directories, delete a file and a directory, file -> dir."""
    ov.write_bytes("a.txt", b"new alpha\n")
    ov.write_bytes("b.txt", b"new beta\n")
    ov.write_bytes("fresh/deep/n.txt", b"brand new\n")
    ov.delete("gone.txt")
    ov.delete("old/o.txt")
    ov.delete("old")
    ov.delete("becomes_dir")
    ov.write_bytes("becomes_dir/inner.txt", b"inner\n")


KEEPS = ["overlay link", "link next to the file", "copy"]


@pytest.fixture(params=KEEPS)
def keep(request: pytest.FixtureRequest) -> str:
    """How apply keeps the files it displaces (see :mod:`actors.overlay._keep`)."""
    return str(request.param)


def prepare(tmp_path: Path, keep: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, OverlayFs]:
    ws = tmp_path / "ws"
    seed(ws)
    store = OverlayStore(tmp_path / "overlays")
    ov = store.create(ws)
    speculate(ov)
    if keep == "link next to the file":
        (ov.directory / "displaced").write_bytes(b"")  # no private directory to link into
    elif keep == "copy":
        real_link = os.link

        def stage_links_only(src: object, dst: object, **kwargs: object) -> None:
            if ".fore-apply-" not in str(dst):  # keeping by any link is refused
                raise OSError(errno.EPERM, "Operation not permitted")
            real_link(src, dst, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "link", stage_links_only)
    return ws, ov


def journal_dir(ov: OverlayFs) -> Path:
    return ov.directory.parent / "journal"


def record_points(tmp_path: Path, keep: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every change a successful apply makes to the tree, in order."""
    _, ov = prepare(tmp_path / "dry", keep, monkeypatch)
    calls: list[str] = []

    def note(syscall: str, rel: str) -> None:
        calls.append(f"{syscall}:{rel}")

    result = apply_overlay(ov, journal_dir(ov), sys_fault=note)
    assert isinstance(result, ApplyResult)
    return calls


def failing_at(point: str, *also: str) -> Callable[[str, str], None]:
    failing = {point, *also}

    def fault(syscall: str, rel: str) -> None:
        if f"{syscall}:{rel}" in failing:
            raise OSError(errno.ENOSPC, "No space left on device")

    return fault


POST_COMMIT = ("mkdir", "replace", "unlink", "rmdir")


def test_every_post_commit_failure_is_rolled_back(
    tmp_path: Path, keep: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = [p for p in record_points(tmp_path, keep, monkeypatch) if p.startswith(POST_COMMIT)]
    assert len(points) >= 8  # unlinks, rmdir, mkdirs, replaces
    for index, point in enumerate(points):
        ws, ov = prepare(tmp_path / f"run{index}", keep, monkeypatch)
        before = tree(ws)
        with pytest.raises(OverlayApplyFailed) as info:
            apply_overlay(ov, journal_dir(ov), sys_fault=failing_at(point))
        assert info.value.applied == (), point
        assert "rolled back" in str(info.value)
        assert tree(ws) == before, point  # contents, kinds and modes
        assert leftovers(ws) == [], point
        assert os.listdir(journal_dir(ov)) == [], point


def test_every_pre_commit_failure_changes_nothing(
    tmp_path: Path, keep: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = [
        p for p in record_points(tmp_path, keep, monkeypatch) if p.startswith(("stage", "keep"))
    ]
    assert points
    for index, point in enumerate(points):
        ws, ov = prepare(tmp_path / f"run{index}", keep, monkeypatch)
        before = tree(ws)
        with pytest.raises(OverlayApplyFailed) as info:
            apply_overlay(ov, journal_dir(ov), sys_fault=failing_at(point))
        assert info.value.applied == ()
        assert tree(ws) == before, point
        assert leftovers(ws) == [], point
        assert os.listdir(journal_dir(ov)) == [], point


def test_a_failed_undo_names_exactly_what_kept_the_new_version(
    tmp_path: Path, keep: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last replace fails; restoring a.txt fails too: only a.txt stays changed."""
    points = record_points(tmp_path, keep, monkeypatch)
    last_replace = [p for p in points if p.startswith("replace:")][-1]
    assert last_replace != "replace:a.txt"
    ws, ov = prepare(tmp_path / "run", keep, monkeypatch)
    before = tree(ws)
    with pytest.raises(OverlayApplyFailed) as info:
        apply_overlay(ov, journal_dir(ov), sys_fault=failing_at(last_replace, "restore:a.txt"))
    assert info.value.applied == ("a.txt",)
    assert "a.txt" in str(info.value)
    after = tree(ws)
    assert after["a.txt"][1] == b"new alpha\n"
    assert {k: v for k, v in after.items() if k != "a.txt"} == {
        k: v for k, v in before.items() if k != "a.txt"
    }
    assert leftovers(ws) == []
    assert os.listdir(journal_dir(ov)) == []


def test_a_user_edit_during_the_apply_is_kept_by_the_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """a.txt is replaced, the user rewrites it, a later operation fails: the undo
    does not put the old a.txt over the user's version (and says a.txt changed)."""
    ws, ov = prepare(tmp_path, "overlay link", monkeypatch)
    replaced: list[str] = []

    def fault(syscall: str, rel: str) -> None:
        if syscall == "replace" and replaced == ["a.txt"]:
            (ws / "a.txt").write_text("the user's version\n")  # a new inode, by rename
            raise OSError(errno.EIO, "Input/output error")
        if syscall == "replace":
            replaced.append(rel)

    with pytest.raises(OverlayApplyFailed) as info:
        apply_overlay(ov, journal_dir(ov), sys_fault=fault)
    assert (ws / "a.txt").read_text() == "the user's version\n"
    assert info.value.applied == ("a.txt",)
    assert leftovers(ws) == []


# -- a real full filesystem -----------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(mount: Path, inodes: int = 64) -> Iterator[Path]:
    """A tmpfs with ``inodes`` inodes at ``mount`` (mounting needs root: skipped where
    it is not allowed), unmounted afterwards."""
    mount.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size=4m,nr_inodes={inodes}", "tmpfs", str(mount)],
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        pytest.skip("no mount command")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "tiny") as mount:
        yield mount


def free_inodes(path: Path) -> int:
    return os.statvfs(path).f_ffree


def test_running_out_of_inodes_after_the_commit_point_rolls_back(
    tiny_fs: Path, tmp_path: Path
) -> None:
    """The reported case: staging copies (the overlay is on another filesystem) use the
    last inodes, then a new directory cannot be created after the commit point."""
    ws = tiny_fs / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "b.txt").write_text("beta\n")
    store = OverlayStore(tmp_path / "overlays")
    ov = store.create(ws)
    ov.write_bytes("a.txt", b"new alpha\n")
    ov.write_bytes("b.txt", b"new beta\n")
    ov.write_bytes("0new/x.txt", b"x\n")  # created first, before a replace frees a slot
    # Staging copies three files (three inodes) and keeps the two it replaces by
    # hard links (a tmpfs counts links too): leave exactly that many free, so that
    # the new directory cannot be created after the commit point.
    filler = 0
    while free_inodes(tiny_fs) > 5:
        (ws / f".filler{filler}").write_bytes(b"")
        filler += 1
    before = tree(ws)
    with pytest.raises(OverlayApplyFailed) as info:
        apply_overlay(ov, store.journal_dir)
    assert info.value.applied == ()
    assert "rolled back" in str(info.value) and "No space left" in str(info.value)
    assert tree(ws) == before
    assert leftovers(ws) == []
    assert os.listdir(store.journal_dir) == []


def test_the_undo_never_writes_outside_the_workspace(tmp_path: Path) -> None:
    """A directory is swapped for a symlink to outside after the commit point, then
    an operation fails: the undo works through the descriptors apply opened
    (O_NOFOLLOW) -- nothing is written into the outside directory."""
    ws = tmp_path / "ws"
    seed(ws)
    (ws / "zdir").mkdir()
    (ws / "zdir" / "z.txt").write_text("z\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    wait_for_tick()
    store = OverlayStore(tmp_path / "overlays")
    ov = store.create(ws)
    ov.write_bytes("zdir/z.txt", b"new z\n")
    ov.delete("a.txt")
    ov.write_bytes("zdir/new.txt", b"new\n")

    def swap_then_fail(syscall: str, rel: str) -> None:
        if syscall == "replace" and rel == "zdir/z.txt":
            (ws / "zdir").rename(tmp_path / "zdir-moved")
            (ws / "zdir").symlink_to(outside)
            raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(OverlayApplyFailed):
        apply_overlay(ov, journal_dir(ov), sys_fault=swap_then_fail)
    assert os.listdir(outside) == []
    assert (ws / "a.txt").read_text() == "alpha\n"  # the delete was undone
    assert [p for p in os.listdir(tmp_path / "zdir-moved") if ".fore-" in p] == []
