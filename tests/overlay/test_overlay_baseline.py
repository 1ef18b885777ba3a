"""The conflict baseline is the speculation's *start*, not its first write (issue 19, point 3).

A speculation computes its edits from history. Whatever the user does to a real
path after the speculation started -- edit it, save it through a rename, delete
it, create it, swap a directory and a file -- before or after the speculation's
first touch of that path, and whether or not the speculation read it, apply must
report a conflict and leave the user's version exactly as it is.

Real files, real overlays; a hypothesis test runs random user changes against
random speculative changes. Both clock modes are exercised: the exact one
(multigrain filesystems, Linux 6.13+) and the coarse one every other filesystem
gets (forced with ``overlay._multigrain = False``).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fore.actors.overlay import OverlayFs, OverlayStore, apply_overlay
from fore.actors.tools.fs import NotFound, WorkspaceFs
from fore.actors.tools.fsclock import (
    Instant,
    OwnChanges,
    Stamp,
    changed_since,
    multigrain,
    stamped_since,
    wait_for_tick,
)
from fore.messages.overlay import ApplyResult, ConflictReport

CLOCKS = ["exact", "coarse"]


def state(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (files with content, directories as None)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root)] = None
        for name in filenames:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("x = 1\n")
    (root / "other.py").write_text("y = 1\n")
    (root / "pkg").mkdir()
    (root / "pkg" / "mod.py").write_text("z = 1\n")
    wait_for_tick()
    return root


@pytest.fixture
def store(tmp_path: Path) -> Iterator[OverlayStore]:
    s = OverlayStore(tmp_path / "overlays")
    yield s
    s.close()


def started(store: OverlayStore, ws: Path, clock: str) -> OverlayFs:
    ov = store.create(ws)
    if clock == "coarse":
        ov._multigrain = False  # what a filesystem without multigrain stamps gets
    return ov


# -- what the user does after the start ------------------------------------------------------


def edit_in_place(ws: Path, rel: str) -> None:
    with open(ws / rel, "r+b") as handle:  # same inode, same size
        data = handle.read()
        handle.seek(0)
        handle.write(data.upper())


def save_by_rename(ws: Path, rel: str) -> None:
    """What editors do: write a new file, rename it over the old one."""
    tmp = ws / f".{Path(rel).name}.swp"
    tmp.write_bytes((ws / rel).read_bytes() + b"# edited\n")
    os.replace(tmp, ws / rel)


def delete(ws: Path, rel: str) -> None:
    (ws / rel).unlink()


def chmod(ws: Path, rel: str) -> None:
    os.chmod(ws / rel, 0o600)


def dir_to_file(ws: Path, rel: str) -> None:
    shutil.rmtree(ws / rel)
    (ws / rel).write_text("a file now\n")


USER_CHANGES: dict[str, Callable[[Path, str], None]] = {
    "edit in place": edit_in_place,
    "save by rename": save_by_rename,
    "delete": delete,
    "chmod": chmod,
}


@pytest.mark.parametrize("clock", CLOCKS)
@pytest.mark.parametrize("user", list(USER_CHANGES))
@pytest.mark.parametrize("spec", ["write", "delete", "read, write", "read, delete"])
def test_a_user_change_after_the_start_is_never_overwritten(
    store: OverlayStore, ws: Path, clock: str, user: str, spec: str
) -> None:
    ov = started(store, ws, clock)
    if spec.startswith("read, "):
        assert ov.read_bytes("app.py") == b"x = 1\n"
        spec = spec.removeprefix("read, ")
    USER_CHANGES[user](ws, "app.py")  # after the start, before the first touch
    theirs = state(ws)
    mode = (ws / "app.py").stat().st_mode if (ws / "app.py").exists() else None
    if spec == "write":
        ov.write_bytes("app.py", b"x = 2\n")  # from history, not from the file
    elif user == "delete":
        with pytest.raises(NotFound):  # deleting what the user deleted: nothing to apply
            ov.delete("app.py")
        return
    else:
        ov.delete("app.py")
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport), report
    assert report.paths == ("app.py",)
    assert state(ws) == theirs
    if mode is not None:
        assert (ws / "app.py").stat().st_mode == mode


@pytest.mark.parametrize("clock", CLOCKS)
def test_the_user_creating_a_file_the_speculation_creates_is_a_conflict(
    store: OverlayStore, ws: Path, clock: str
) -> None:
    ov = started(store, ws, clock)
    (ws / "new.py").write_text("the user's\n")
    ov.write_bytes("new.py", b"the speculation's\n")  # replaces it in the overlay view
    ov.write_bytes("pkg/later.py", b"first\n")
    (ws / "pkg" / "later.py").write_text("the user's, after the first write\n")
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert report.paths == ("new.py", "pkg/later.py")
    assert (ws / "new.py").read_text() == "the user's\n"
    assert (ws / "pkg" / "later.py").read_text() == "the user's, after the first write\n"


@pytest.mark.parametrize("clock", CLOCKS)
def test_a_file_the_user_deleted_is_not_recreated(
    store: OverlayStore, ws: Path, clock: str
) -> None:
    """Deleted after the start, never seen by the speculation: its directory's ctime
    tells, so the speculation's version does not bring it back."""
    ov = started(store, ws, clock)
    (ws / "pkg" / "mod.py").unlink()
    shutil.rmtree(ws / "pkg")
    (ws / "other.py").unlink()
    ov.write_bytes("other.py", b"y = 2\n")
    ov.write_bytes("pkg/mod.py", b"z = 2\n")
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert set(report.paths) >= {"other.py", "pkg/mod.py"}
    assert {c.change for c in report.conflicts} == {"changed_since_start"}
    assert not (ws / "other.py").exists() and not (ws / "pkg").exists()


@pytest.mark.parametrize("clock", CLOCKS)
def test_directory_and_file_swaps_are_conflicts(store: OverlayStore, ws: Path, clock: str) -> None:
    ov = started(store, ws, clock)
    ov.write_bytes("pkg/mod.py", b"z = 2\n")  # touched first, then the user swaps
    dir_to_file(ws, "pkg")
    (ws / "other.py").unlink()
    (ws / "other.py").mkdir()  # a file became a directory before the delete
    (ws / "other.py" / "inside.txt").write_text("the user's\n")
    theirs = state(ws)
    report = apply_overlay(ov, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert report.paths == ("pkg/mod.py",)
    assert state(ws) == theirs
    ov2 = started(store, ws, clock)
    (ws / "other.py" / "inside.txt").unlink()
    ov2.delete("other.py")  # an empty directory the user made after the start
    report = apply_overlay(ov2, store.journal_dir)
    assert isinstance(report, ConflictReport)
    assert (ws / "other.py").is_dir()


@pytest.mark.parametrize("clock", CLOCKS)
def test_user_changes_elsewhere_are_no_conflict(store: OverlayStore, ws: Path, clock: str) -> None:
    ov = started(store, ws, clock)
    ov.write_bytes("app.py", b"x = 2\n")
    ov.write_bytes("fresh/dir/n.py", b"n\n")
    ov.delete("other.py")
    (ws / "pkg" / "notes.txt").write_text("the user writes elsewhere\n")
    edit_in_place(ws, "pkg/mod.py")
    result = apply_overlay(ov, store.journal_dir)
    assert isinstance(result, ApplyResult), result
    assert (ws / "app.py").read_text() == "x = 2\n"
    assert (ws / "pkg" / "mod.py").read_text() == "Z = 1\n"


@pytest.mark.parametrize("clock", CLOCKS)
def test_nothing_changed_by_the_user_applies(store: OverlayStore, ws: Path, clock: str) -> None:
    ov = started(store, ws, clock)
    ov.write_bytes("app.py", b"x = 2\n")
    ov.write_bytes("pkg/new.py", b"new\n")
    ov.write_bytes("fresh/dir/n.py", b"n\n")
    ov.delete("other.py")
    result = apply_overlay(ov, store.journal_dir)
    assert isinstance(result, ApplyResult), result
    assert state(ws) == {
        "app.py": b"x = 2\n",
        "pkg": None,
        "pkg/mod.py": b"z = 1\n",
        "pkg/new.py": b"new\n",
        "fresh": None,
        "fresh/dir": None,
        "fresh/dir/n.py": b"n\n",
    }


# -- Fore's own writes are the baseline ---------------------------------------------------------


def test_foreign_and_own_changes_are_told_apart(ws: Path) -> None:
    """The clock alone cannot tell (a start "in the same tick": ``wall_ns=0``); the
    record of Fore's own writes can."""
    before = Instant.now()
    WorkspaceFs(ws).write_bytes("app.py", b"x = 2\n")  # a main turn's tool
    after = Instant(wall_ns=0, mono_ns=time.monotonic_ns())
    st_own = os.stat(ws / "app.py")
    assert not changed_since(st_own, after)  # Fore's own, before the start
    assert changed_since(st_own, before)  # made after ``before``
    (ws / "app.py").write_text("x = 3\n")  # the user, in place
    assert changed_since(os.stat(ws / "app.py"), after)


def test_a_pipelined_speculation_is_not_in_conflict_with_the_accept_before_it(
    store: OverlayStore, ws: Path
) -> None:
    """Tab-Tab: the next speculation starts right after an accept (here: "in the
    same tick", the worst case) and edits the same file -- even once the first
    overlay is removed (which would move the applied file's ctime if it still
    shared its inode)."""
    first = store.create(ws)
    first.write_bytes("app.py", b"x = 2\n")
    first.write_bytes("pkg/new.py", b"new\n")
    assert isinstance(apply_overlay(first, store.journal_dir), ApplyResult)
    second = store.create(ws, started=Instant(wall_ns=0, mono_ns=time.monotonic_ns()))
    second._multigrain = False
    assert first.remove()
    second.write_bytes("app.py", b"x = 3\n")
    second.write_bytes("pkg/new.py", b"newer\n")
    second.write_bytes("pkg/another.py", b"another\n")
    result = apply_overlay(second, store.journal_dir)
    assert isinstance(result, ApplyResult), result
    assert (ws / "app.py").read_text() == "x = 3\n"


def test_the_own_change_record_is_bounded(ws: Path) -> None:
    own = OwnChanges(capacity=2)
    stamps = []
    for name in ("app.py", "other.py", "pkg/mod.py"):
        stamps.append(Stamp.of(os.stat(ws / name)))
        own.record(stamps[-1])
    later = time.monotonic_ns()
    assert not own.left_before(stamps[0], later)  # forgotten: a conflict, never a miss
    assert own.left_before(stamps[1], later) and own.left_before(stamps[2], later)
    assert not own.left_before(stamps[2], 0)  # recorded after that start


# -- the clock rule -----------------------------------------------------------------------------


def test_stamps_of_coarse_filesystems_compare_at_their_granularity() -> None:
    start = Instant(wall_ns=1_700_000_000_500_000_000, mono_ns=0)
    assert stamped_since(1_700_000_000_000_000_000, start)  # 1 s stamps: same second
    assert not stamped_since(1_699_999_999_000_000_000, start)
    assert not stamped_since(1_700_000_000_000_000_000, Instant(1_700_000_002_500_000_000, 0))
    assert stamped_since(1_700_000_000_500_000_001, start)
    assert not stamped_since(1_700_000_000_499_999_999, start)


def test_a_change_made_after_an_instant_is_always_stamped_at_or_after_it(tmp_path: Path) -> None:
    """The property the rule rests on, on this machine's filesystem (both modes)."""
    exact = multigrain(tmp_path)
    probe = tmp_path / "probe"
    for index in range(500):
        start = Instant.now()
        probe.write_bytes(b"%d" % index)
        st_probe = probe.stat()
        assert stamped_since(st_probe.st_ctime_ns, start, multigrain=False)
        assert stamped_since(st_probe.st_ctime_ns, start, multigrain=exact)
    if exact:  # and, there, nothing made before an instant is stamped after it
        for index in range(500):
            probe.write_bytes(b"%d" % index)
            st_probe = probe.stat()
            assert not stamped_since(st_probe.st_ctime_ns, Instant.now(), multigrain=True)


# -- random user changes against random speculative changes -------------------------------------

PATHS = ["a", "b", "d/x", "d/y"]
USER_OPS = st.lists(
    st.tuples(
        st.sampled_from(["edit", "rename", "delete", "create", "chmod", "none"]),
        st.sampled_from(PATHS),
        st.booleans(),  # before (True) or after the speculation's first touch of it
    ),
    max_size=3,
)
SPEC_OPS = st.lists(
    st.tuples(st.sampled_from(["write", "delete"]), st.sampled_from(PATHS)),
    min_size=1,
    max_size=4,
)


def user_op(ws: Path, op: str, rel: str) -> bool:
    """Apply one user change; True if it changed anything."""
    path = ws / rel
    if op == "none":
        return False
    if op == "create":
        if path.exists() or not path.parent.is_dir():
            return False
        path.write_text("created by the user\n")
        return True
    if not path.is_file():
        return False
    if op == "edit":
        path.write_text(path.read_text() + "edited\n")
    elif op == "rename":
        save_by_rename(ws, rel)
    elif op == "delete":
        path.unlink()
    else:
        os.chmod(path, stat.S_IMODE(path.stat().st_mode) ^ 0o100)
    return True


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(user=USER_OPS, spec=SPEC_OPS, coarse=st.booleans())
def test_no_user_change_made_after_the_start_is_ever_overwritten(
    user: list[tuple[str, str, bool]], spec: list[tuple[str, str]], coarse: bool
) -> None:
    with tempfile.TemporaryDirectory(prefix="fore-baseline-") as tmp:
        ws = Path(tmp) / "ws"
        (ws / "d").mkdir(parents=True)
        for rel in ("a", "d/x"):
            (ws / rel).write_text(f"{rel} at the start\n")
        wait_for_tick()
        store = OverlayStore(Path(tmp) / "overlays")
        ov = store.create(ws)
        if coarse:
            ov._multigrain = False
        changed_by_user: set[str] = set()
        # Only the mode changed after the first touch: the content the speculation
        # replaces is still the start's, and apply carries the user's mode over.
        chmodded: set[str] = set()
        for op, rel, before_touch in user:
            if before_touch and user_op(ws, op, rel):
                changed_by_user.add(rel)
        for op, rel in spec:
            try:
                if op == "write":
                    ov.write_bytes(rel, f"{rel} by the speculation\n".encode())
                else:
                    ov.delete(rel)
            except Exception:
                continue
        for op, rel, before_touch in user:
            if not before_touch and user_op(ws, op, rel):
                (chmodded if op == "chmod" else changed_by_user).add(rel)
        theirs = state(ws)
        modes = {p: os.lstat(ws / p).st_mode for p in theirs}
        result = apply_overlay(ov, store.journal_dir)
        net = {c.path for c in ov.changes()}
        at_risk = changed_by_user & net
        if at_risk:
            assert isinstance(result, ConflictReport), (user, spec, result)
            assert at_risk <= set(result.paths)
        if isinstance(result, ConflictReport):
            assert state(ws) == theirs  # nothing was written
            assert {p: os.lstat(ws / p).st_mode for p in theirs} == modes
        else:
            for rel in changed_by_user:  # never a user change replaced
                assert rel not in net
            for rel in chmodded - changed_by_user:  # the user's mode survives a replace
                if (ws / rel).is_file():
                    assert os.lstat(ws / rel).st_mode == modes[rel]
        assert [p for p in state(ws) if ".fore-" in p] == []
        ov.remove()
        store.close()
