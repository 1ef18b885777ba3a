"""``WorkspaceFs`` on real temp dirs: operations, atomic writes, symlink-safe scoping (issue 3)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.tools.fs import (
    FsView,
    IsADirectory,
    NotADirectory,
    NotFound,
    WorkspaceFs,
)
from fore.actors.tools.paths import FsError, PathOutOfScope
from tests.processes import fds_under


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("SECRET")
    return out


@pytest.fixture
def fs(ws: Path) -> WorkspaceFs:
    return WorkspaceFs(ws)


def tmp_leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if ".fore-tmp-" in name]


def run_bounded(fn: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Run ``fn`` on a thread; fail (instead of hanging) when it does not finish."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"call did not finish within {timeout}s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


# -- basics -------------------------------------------------------------------


def test_is_an_fs_view(fs: WorkspaceFs) -> None:
    assert isinstance(fs, FsView)


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectory):
        WorkspaceFs(tmp_path / "f")
    with pytest.raises(NotADirectory):
        WorkspaceFs(tmp_path / "missing")


def test_root_is_canonicalised(tmp_path: Path, ws: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(ws)
    fs = WorkspaceFs(alias)
    assert str(fs.root) == os.path.realpath(ws)
    fs.write_bytes("a.txt", b"hi")
    assert (ws / "a.txt").read_bytes() == b"hi"


def test_write_then_read(fs: WorkspaceFs, ws: Path) -> None:
    fs.write_bytes("a.txt", b"hello\x00world")
    assert (ws / "a.txt").read_bytes() == b"hello\x00world"
    assert fs.read_bytes("a.txt") == b"hello\x00world"
    assert fs.read_bytes("./a.txt") == b"hello\x00world"
    assert fs.read_bytes(str(ws / "a.txt")) == b"hello\x00world"
    assert fs.read_bytes("a.txt", limit=5) == b"hello"


def test_write_creates_parent_dirs(fs: WorkspaceFs, ws: Path) -> None:
    fs.write_bytes("a/b/c/d.txt", b"deep")
    assert (ws / "a" / "b" / "c" / "d.txt").read_bytes() == b"deep"
    assert (ws / "a" / "b").is_dir()


def test_overwrite_replaces_content(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "f.txt").write_bytes(b"a much longer original content")
    fs.write_bytes("f.txt", b"short")
    assert (ws / "f.txt").read_bytes() == b"short"
    fs.write_bytes("f.txt", b"")
    assert (ws / "f.txt").read_bytes() == b""


def test_write_leaves_no_temp_file(fs: WorkspaceFs, ws: Path) -> None:
    fs.write_bytes("x.txt", b"1")
    fs.write_bytes("x.txt", b"2")
    fs.write_bytes("sub/y.txt", b"3")
    assert tmp_leftovers(ws) == []
    assert tmp_leftovers(ws / "sub") == []
    assert sorted(os.listdir(ws)) == ["sub", "x.txt"]


def test_failed_replace_leaves_old_content_and_no_temp_file(
    fs: WorkspaceFs, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "f.txt").write_bytes(b"original")

    def failing_replace(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "simulated I/O error")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises((OSError, FsError)):
        fs.write_bytes("f.txt", b"new content")
    with pytest.raises((OSError, FsError)):
        fs.write_bytes("new.txt", b"new file")
    monkeypatch.undo()
    assert (ws / "f.txt").read_bytes() == b"original"
    assert not (ws / "new.txt").exists()
    assert tmp_leftovers(ws) == []
    assert sorted(os.listdir(ws)) == ["f.txt"]


def test_failed_write_of_data_leaves_no_temp_file(
    fs: WorkspaceFs, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "f.txt").write_bytes(b"original")

    def failing_write(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "simulated: no space left")

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises((OSError, FsError)):
        fs.write_bytes("f.txt", b"new content")
    monkeypatch.undo()
    assert (ws / "f.txt").read_bytes() == b"original"
    assert tmp_leftovers(ws) == []


@pytest.mark.parametrize("mode", [0o600, 0o755, 0o640, 0o664, 0o666], ids=oct)
def test_write_preserves_existing_mode(fs: WorkspaceFs, ws: Path, mode: int) -> None:
    target = ws / "script.sh"
    target.write_bytes(b"#!/bin/sh\n")
    os.chmod(target, mode)
    old_umask = os.umask(0o022)
    try:
        fs.write_bytes("script.sh", b"#!/bin/sh\necho hi\n")
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"#!/bin/sh\necho hi\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == mode


def test_new_file_is_a_regular_file(fs: WorkspaceFs, ws: Path) -> None:
    fs.write_bytes("n.txt", b"x")
    st = os.lstat(ws / "n.txt")
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) & 0o600 == 0o600


def test_write_to_directory_or_root_fails(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "d").mkdir()
    with pytest.raises(IsADirectory):
        fs.write_bytes("d", b"x")
    with pytest.raises(FsError):
        fs.write_bytes(".", b"x")
    assert (ws / "d").is_dir()


def test_write_below_a_file_fails(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "f").write_text("x")
    with pytest.raises(FsError):
        fs.write_bytes("f/g.txt", b"x")
    assert (ws / "f").read_text() == "x"


def test_stat(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "f.txt").write_bytes(b"12345")
    (ws / "d").mkdir()
    st = fs.stat("f.txt")
    assert st is not None
    assert (st.kind, st.size) == ("file", 5)
    assert st.mtime_ns == os.stat(ws / "f.txt").st_mtime_ns
    d = fs.stat("d")
    assert d is not None and d.kind == "dir"
    root = fs.stat("")
    assert root is not None and root.kind == "dir"
    assert fs.stat(".") == root
    assert fs.stat("missing") is None
    assert fs.stat("missing/deeper/x") is None


def test_stat_of_fifo_is_other(fs: WorkspaceFs, ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    st = fs.stat("pipe")
    assert st is not None and st.kind == "other"


def test_read_errors(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "f").write_text("x")
    with pytest.raises(NotFound):
        fs.read_bytes("missing.txt")
    with pytest.raises(NotFound):
        fs.read_bytes("nodir/missing.txt")
    with pytest.raises(IsADirectory):
        fs.read_bytes("")
    with pytest.raises(FsError):
        fs.read_bytes("f/x")


def test_read_of_a_directory_is_an_fs_error_and_leaks_no_fd(fs: WorkspaceFs, ws: Path) -> None:
    # FsView: "Errors are FsError subclasses". A directory must not surface as a raw
    # IsADirectoryError, and each failed attempt must not leak its descriptor.
    (ws / "d").mkdir()
    before = fds_under(ws)
    errors: list[Exception] = []
    for _ in range(5):
        try:
            fs.read_bytes("d")
        except Exception as exc:
            errors.append(exc)
    leaked = len(fds_under(ws)) - len(before)
    kinds = [type(e).__name__ for e in errors]
    assert kinds == ["IsADirectory"] * 5 and leaked == 0, f"raised {kinds}, leaked {leaked} fds"


def test_too_long_name_is_an_fs_error(fs: WorkspaceFs) -> None:
    # ENAMETOOLONG from a syscall must come back as an FsError, like every other failure.
    with pytest.raises(FsError):
        fs.read_bytes("n" * 300)
    with pytest.raises(FsError):
        fs.write_bytes("n" * 300, b"x")


def test_list_dir(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "b.txt").write_bytes(b"123")
    (ws / "a").mkdir()
    (ws / "c").mkdir()
    (ws / "..foo").write_bytes(b"")
    entries = fs.list_dir(".")
    assert [e.name for e in entries] == ["..foo", "a", "b.txt", "c"]
    by_name = {e.name: e for e in entries}
    assert by_name["a"].kind == "dir"
    assert (by_name["b.txt"].kind, by_name["b.txt"].size) == ("file", 3)
    assert fs.list_dir("") == entries
    assert fs.list_dir(str(ws)) == entries
    assert fs.list_dir("a") == []


def test_list_dir_errors(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "f").write_text("x")
    with pytest.raises(NotADirectory):
        fs.list_dir("f")
    with pytest.raises(NotFound):
        fs.list_dir("missing")
    with pytest.raises(PathOutOfScope):
        fs.list_dir("..")


def test_list_dir_shows_symlinks_by_target(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "real.txt").write_bytes(b"1234")
    (ws / "sub").mkdir()
    (ws / "link.txt").symlink_to("real.txt")
    (ws / "link_dir").symlink_to("sub")
    (ws / "escape").symlink_to(outside / "secret.txt")
    (ws / "dangling").symlink_to("nowhere")
    by_name = {e.name: e for e in fs.list_dir(".")}
    assert (by_name["link.txt"].kind, by_name["link.txt"].size) == ("file", 4)
    assert by_name["link_dir"].kind == "dir"
    assert by_name["escape"].kind == "other"
    assert by_name["escape"].size == 0
    assert by_name["dangling"].kind == "other"


def test_iter_files_sorted_and_skipping(fs: WorkspaceFs, ws: Path) -> None:
    for rel in [
        "z.txt",
        "a.txt",
        "b/2.txt",
        "b/1.txt",
        "a_dir/x.txt",
        "a_dir/sub/y.txt",
        ".git/config",
        ".git/objects/ab",
        "node_modules/pkg/index.js",
        "b/node_modules/deep.js",
        ".hidden/ok.txt",
    ]:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(rel)
    files = list(fs.iter_files())
    assert files == [
        "a.txt",
        "z.txt",
        ".hidden/ok.txt",
        "a_dir/x.txt",
        "a_dir/sub/y.txt",
        "b/1.txt",
        "b/2.txt",
    ]
    assert list(fs.iter_files("b")) == ["b/1.txt", "b/2.txt"]
    assert list(fs.iter_files("a_dir/sub")) == ["a_dir/sub/y.txt"]
    assert list(fs.iter_files("z.txt")) == ["z.txt"]


def test_iter_files_out_of_scope(fs: WorkspaceFs) -> None:
    with pytest.raises(PathOutOfScope):
        list(fs.iter_files(".."))


def test_mkdir(fs: WorkspaceFs, ws: Path) -> None:
    fs.mkdir("a/b/c")
    assert (ws / "a" / "b" / "c").is_dir()
    fs.mkdir("a/b/c")  # exists: no error
    fs.mkdir(".")
    with pytest.raises(PathOutOfScope):
        fs.mkdir("../evil")
    assert not (ws.parent / "evil").exists()
    (ws / "f").write_text("x")
    with pytest.raises(FsError):
        fs.mkdir("f/sub")


def test_delete(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    (ws / "empty").mkdir()
    (ws / "full").mkdir()
    (ws / "full" / "keep").write_text("k")
    fs.delete("f.txt")
    assert not (ws / "f.txt").exists()
    fs.delete("empty")
    assert not (ws / "empty").exists()
    with pytest.raises(FsError):
        fs.delete("full")
    assert (ws / "full" / "keep").exists()
    with pytest.raises(NotFound):
        fs.delete("missing")
    with pytest.raises(FsError):
        fs.delete(".")
    assert ws.is_dir()


def test_delete_through_a_symlink_leading_outside_is_refused(
    fs: WorkspaceFs, ws: Path, outside: Path
) -> None:
    (ws / "escape").symlink_to(outside / "secret.txt")
    with pytest.raises(PathOutOfScope):
        fs.delete("escape")
    assert (outside / "secret.txt").read_text() == "SECRET"


def test_exec_dir(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "f").write_text("x")
    real_root = os.path.realpath(ws)
    assert fs.exec_dir(".") == real_root
    assert fs.exec_dir("") == real_root
    assert fs.exec_dir("sub") == os.path.join(real_root, "sub")
    with pytest.raises(NotADirectory):
        fs.exec_dir("f")
    with pytest.raises(NotFound):
        fs.exec_dir("missing")
    with pytest.raises(PathOutOfScope):
        fs.exec_dir("..")


def test_resolve(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "a").mkdir()
    (ws / "a" / "f").write_text("x")
    (ws / "link").symlink_to("a")
    assert fs.resolve(".") == ""
    assert fs.resolve("a/./f") == "a/f"
    assert fs.resolve("link/f") == "a/f"
    assert fs.resolve("link") == "a"
    assert fs.resolve("new/dir/file") == "new/dir/file"
    assert fs.resolve(str(ws / "a" / "f")) == "a/f"


def test_dotted_names_are_ordinary(fs: WorkspaceFs, ws: Path) -> None:
    fs.write_bytes("..foo", b"1")
    fs.write_bytes("foo..", b"2")
    fs.write_bytes("..d/..e", b"3")
    assert (ws / "..foo").read_bytes() == b"1"
    assert (ws / "foo..").read_bytes() == b"2"
    assert (ws / "..d" / "..e").read_bytes() == b"3"
    assert fs.read_bytes("..foo") == b"1"
    assert fs.read_bytes("..d/..e") == b"3"
    assert not (ws.parent / "foo").exists()


# -- escapes --------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["..", "../x", "../../etc/passwd", "a/../../x", "/etc/passwd", "~/x"]
)
def test_lexical_escapes_refused(fs: WorkspaceFs, path: str) -> None:
    with pytest.raises(PathOutOfScope):
        fs.read_bytes(path)
    with pytest.raises(PathOutOfScope):
        fs.write_bytes(path, b"evil")
    with pytest.raises(PathOutOfScope):
        fs.stat(path)


def test_absolute_path_outside_refused(fs: WorkspaceFs, outside: Path) -> None:
    with pytest.raises(PathOutOfScope):
        fs.read_bytes(str(outside / "secret.txt"))
    with pytest.raises(PathOutOfScope):
        fs.write_bytes(str(outside / "secret.txt"), b"evil")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes(str(outside / "new.txt"), b"evil")
    assert (outside / "secret.txt").read_text() == "SECRET"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_write_to_parent_refused_leaves_parent_untouched(fs: WorkspaceFs, ws: Path) -> None:
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("../planted.txt", b"evil")
    assert not (ws.parent / "planted.txt").exists()


def test_symlink_file_pointing_outside(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "leak").symlink_to(outside / "secret.txt")
    with pytest.raises(PathOutOfScope):
        fs.read_bytes("leak")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("leak", b"overwritten")
    with pytest.raises(PathOutOfScope):
        fs.stat("leak")
    assert (outside / "secret.txt").read_text() == "SECRET"
    assert (ws / "leak").is_symlink()


def test_symlinked_directory_in_the_middle(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "out").symlink_to(outside)
    with pytest.raises(PathOutOfScope):
        fs.read_bytes("sub/out/secret.txt")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("sub/out/secret.txt", b"overwritten")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("sub/out/new.txt", b"planted")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("sub/out/deeper/new.txt", b"planted")
    with pytest.raises(PathOutOfScope):
        fs.list_dir("sub/out")
    with pytest.raises(PathOutOfScope):
        fs.mkdir("sub/out/newdir")
    with pytest.raises(PathOutOfScope):
        fs.exec_dir("sub/out")
    with pytest.raises(PathOutOfScope):
        list(fs.iter_files("sub/out"))
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "SECRET"


def test_relative_symlink_climbing_out(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "up").symlink_to("../../../outside/secret.txt")
    (ws / "a" / "updir").symlink_to("../../outside")
    assert (ws / "a" / "b" / "up").read_text() == "SECRET"  # the link really leads out
    with pytest.raises(PathOutOfScope):
        fs.read_bytes("a/b/up")
    with pytest.raises(PathOutOfScope):
        fs.read_bytes("a/updir/secret.txt")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("a/updir/secret.txt", b"x")
    assert (outside / "secret.txt").read_text() == "SECRET"


def test_symlink_chain_ending_outside(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "d").mkdir()
    (ws / "one").symlink_to("d/two")
    (ws / "d" / "two").symlink_to("../three")
    (ws / "three").symlink_to(outside / "secret.txt")
    with pytest.raises(PathOutOfScope):
        fs.read_bytes("one")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("one", b"x")
    assert (outside / "secret.txt").read_text() == "SECRET"
    assert (ws / "three").is_symlink()


def test_dangling_symlink_to_outside_refused(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "plant").symlink_to(outside / "not-yet.txt")
    with pytest.raises(PathOutOfScope):
        fs.write_bytes("plant", b"planted")
    assert not (outside / "not-yet.txt").exists()


def test_symlink_to_absolute_path_inside_is_followed(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "target.txt").write_text("inside")
    (ws / "abs").symlink_to(ws / "target.txt")
    assert fs.read_bytes("abs") == b"inside"


def test_symlink_inside_to_inside(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "dir").mkdir()
    (ws / "dir" / "target.txt").write_text("original")
    (ws / "alias.txt").symlink_to("dir/target.txt")
    (ws / "dlink").symlink_to("dir")
    assert fs.read_bytes("alias.txt") == b"original"
    assert fs.read_bytes("dlink/target.txt") == b"original"
    fs.write_bytes("alias.txt", b"via link")
    assert (ws / "dir" / "target.txt").read_bytes() == b"via link"
    assert (ws / "alias.txt").is_symlink()
    fs.write_bytes("dlink/new.txt", b"new")
    assert (ws / "dir" / "new.txt").read_bytes() == b"new"
    assert (ws / "dlink").is_symlink()
    st = fs.stat("alias.txt")
    assert st is not None and (st.kind, st.size) == ("file", 8)


def test_dangling_symlink_inside_writes_the_target(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "later").symlink_to("made/later.txt")
    assert fs.stat("later") is None
    fs.write_bytes("later", b"now")
    assert (ws / "made" / "later.txt").read_bytes() == b"now"


def test_root_is_a_valid_directory(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "x").write_text("1")
    assert [e.name for e in fs.list_dir(".")] == ["x"]
    assert fs.exec_dir(".") == os.path.realpath(ws)
    assert fs.resolve(str(ws)) == ""
    (ws / "self").symlink_to(".")
    assert fs.resolve("self") == ""
    assert fs.read_bytes("self/x") == b"1"


@pytest.mark.parametrize(
    "links",
    [
        {"loop": "loop"},
        {"a": "b", "b": "a"},
        {"a": "b", "b": "c", "c": "a"},
        {"grow": "grow/x"},
    ],
)
def test_symlink_loop_is_an_error_not_a_hang(
    fs: WorkspaceFs, ws: Path, links: dict[str, str]
) -> None:
    for name, target in links.items():
        (ws / name).symlink_to(target)
    first = next(iter(links))
    with pytest.raises(FsError) as info:
        run_bounded(lambda: fs.read_bytes(first))
    assert not isinstance(info.value, PathOutOfScope)
    with pytest.raises(FsError):
        run_bounded(lambda: fs.write_bytes(first, b"x"))
    with pytest.raises(FsError):
        run_bounded(lambda: fs.read_bytes(first + "/deeper"))


# -- check-then-open swaps -------------------------------------------------------


def swap_after_check(
    monkeypatch: pytest.MonkeyPatch, when: str, swap: Callable[[], None]
) -> list[str]:
    """Let ``_canonical`` check the real tree, then swap it before the open."""
    real = WorkspaceFs._canonical
    swapped: list[str] = []

    def wrapper(self: WorkspaceFs, rel: str) -> str:
        result = real(self, rel)
        if result == when and not swapped:
            swap()
            swapped.append(result)
        return result

    monkeypatch.setattr(WorkspaceFs, "_canonical", wrapper)
    return swapped


def test_directory_swapped_for_symlink_is_not_followed_on_read(
    fs: WorkspaceFs, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "secret.txt").write_text("inside")

    def swap() -> None:
        shutil.rmtree(ws / "d")
        (ws / "d").symlink_to(outside)

    swapped = swap_after_check(monkeypatch, "d/secret.txt", swap)
    with pytest.raises(FsError):
        fs.read_bytes("d/secret.txt")
    assert swapped == ["d/secret.txt"]
    # the path now really leads outside: a naive open would have read it
    assert (ws / "d" / "secret.txt").read_text() == "SECRET"


def test_directory_swapped_for_symlink_is_not_followed_on_write(
    fs: WorkspaceFs, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "secret.txt").write_text("inside")

    def swap() -> None:
        shutil.rmtree(ws / "d")
        (ws / "d").symlink_to(outside)

    swapped = swap_after_check(monkeypatch, "d/secret.txt", swap)
    with pytest.raises(FsError):
        fs.write_bytes("d/secret.txt", b"overwritten")
    assert swapped
    assert (outside / "secret.txt").read_text() == "SECRET"
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_deep_directory_swapped_for_symlink(
    fs: WorkspaceFs, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (outside / "inner").mkdir()
    (outside / "inner" / "f.txt").write_text("SECRET2")
    (ws / "a" / "inner").mkdir(parents=True)
    (ws / "a" / "inner" / "f.txt").write_text("inside")

    def swap() -> None:
        shutil.rmtree(ws / "a")
        (ws / "a").symlink_to(outside)

    swap_after_check(monkeypatch, "a/inner/f.txt", swap)
    with pytest.raises(FsError):
        fs.read_bytes("a/inner/f.txt")


def test_file_swapped_for_symlink_is_not_followed(
    fs: WorkspaceFs, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "f.txt").write_text("inside")

    def swap() -> None:
        (ws / "f.txt").unlink()
        (ws / "f.txt").symlink_to(outside / "secret.txt")

    swapped = swap_after_check(monkeypatch, "f.txt", swap)
    with pytest.raises(FsError):
        fs.read_bytes("f.txt")
    assert swapped


def test_file_swapped_for_symlink_write_does_not_write_outside(
    fs: WorkspaceFs, ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "f.txt").write_text("inside")

    def swap() -> None:
        (ws / "f.txt").unlink()
        (ws / "f.txt").symlink_to(outside / "secret.txt")

    swap_after_check(monkeypatch, "f.txt", swap)
    try:
        fs.write_bytes("f.txt", b"overwritten")
    except FsError:
        pass
    assert (outside / "secret.txt").read_text() == "SECRET"


# -- property: resolve never leaves the root --------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("prop")
    root = base / "root"
    out = base / "out"
    out.mkdir()
    (out / "s").write_text("SECRET")
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f").write_text("f")
    (root / "a" / "b" / "g").write_text("g")
    (root / "a" / "up").symlink_to("..")  # the root
    (root / "a" / "out").symlink_to("../../out")  # outside
    (root / "a" / "b" / "in").symlink_to("../f")  # inside file
    (root / "a" / "b" / "far").symlink_to("../../../out/s")  # outside file
    (root / "a" / "abs").symlink_to(out)  # absolute, outside
    (root / "b").symlink_to("a/b")  # inside dir
    (root / "loop").symlink_to("loop")
    (root / "f").symlink_to(root / "a" / "f")  # absolute, inside
    yield root


PROP_SEGMENTS = st.sampled_from(
    ["..", ".", "a", "b", "f", "g", "up", "out", "in", "far", "abs", "loop", "new"]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(PROP_SEGMENTS, min_size=1, max_size=6))
def test_resolve_never_returns_a_path_outside(tree: Path, parts: list[str]) -> None:
    fs = WorkspaceFs(tree)
    root_real = os.path.realpath(tree)
    path = "/".join(parts)
    try:
        rel = fs.resolve(path)
    except (PathOutOfScope, FsError):
        return
    assert not rel.startswith("/")
    assert ".." not in rel.split("/")
    joined = os.path.join(root_real, rel) if rel else root_real
    real = os.path.realpath(joined)
    assert real == root_real or real.startswith(root_real + os.sep)
    # canonical: no symlink left on the existing part of the path
    assert real == os.path.normpath(joined)
