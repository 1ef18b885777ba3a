"""The ``@path`` resolver on real temp directories (issue 7, points 2-4).

Files become ``[File: <path>]`` system messages capped on a character
boundary, directories ``[Dir: <path>]`` listings; everything out of scope,
missing, binary or unreadable becomes a Warn alert plus a placeholder, and
nothing from outside the workspace is ever attached.
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.filerefs.resolver import (
    DEFAULT_SCAN_LIMIT,
    ResolveError,
    ResolveErrorKind,
    prepare_submit,
    resolve_file_ref,
    resolve_input,
)
from fore.actors.filerefs.tokenizer import parse_input
from fore.actors.tools.fs import (
    DirEntry,
    FileStat,
    FsView,
    IsADirectory,
    NotADirectory,
    NotFound,
    WorkspaceFs,
)
from fore.actors.tools.paths import FsError, PathOutOfScope
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import FileRef, Item, Paste, SystemMessage, TextSegment
from fore.messages.session import Submit

SENTINEL = "SENTINEL-FROM-OUTSIDE-THE-WORKSPACE"
MARKER = "\n[...truncated, {total} bytes total — use read_file for the rest]"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(SENTINEL)
    return out


@pytest.fixture
def fs(ws: Path) -> WorkspaceFs:
    return WorkspaceFs(ws)


def error_of(fs: FsView, path: str, **kwargs: Any) -> ResolveError:
    with pytest.raises(ResolveError) as info:
        resolve_file_ref(fs, path, **kwargs)
    return info.value


def run_bounded(fn: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Run ``fn`` on a thread; fail (instead of hanging the suite) when it never returns."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the call hung"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def texts(items: Iterable[Item]) -> list[str]:
    """The texts of prepared items, which must all be system messages."""
    out = []
    for item in items:
        assert isinstance(item, SystemMessage)
        out.append(item.text)
    return out


def longest_prefix(text: str, cap: int) -> str:
    """Reference model: the longest prefix of ``text`` that fits in ``cap`` UTF-8 bytes."""
    size = 0
    for index, char in enumerate(text):
        size += len(char.encode())
        if size > cap:
            return text[:index]
    return text


def split_message(text: str, path: str, total: int | None) -> str:
    """The body of a ``[File: path]`` message; ``total`` is the expected marker's total."""
    header = f"[File: {path}]\n"
    assert text.startswith(header)
    body = text[len(header) :]
    if total is not None:
        marker = MARKER.format(total=total)
        assert body.endswith(marker)
        body = body[: -len(marker)]
    else:
        assert "[...truncated" not in body
    return body


# --------------------------------------------------------------------------- #
# Files
# --------------------------------------------------------------------------- #


def test_file_becomes_one_system_message(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("print('hi')\n")
    message = resolve_file_ref(fs, "src/app.py")
    assert isinstance(message, SystemMessage)
    assert message.text == "[File: src/app.py]\nprint('hi')\n"


def test_header_keeps_the_path_as_typed(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("x = 1\n")
    for typed in ("./src/app.py", "src/../src/app.py", str(ws / "src" / "app.py")):
        assert resolve_file_ref(fs, typed).text == f"[File: {typed}]\nx = 1\n"


def test_empty_file_and_crlf_are_verbatim(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "empty.txt").write_bytes(b"")
    (ws / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    assert resolve_file_ref(fs, "empty.txt").text == "[File: empty.txt]\n"
    assert resolve_file_ref(fs, "crlf.txt").text == "[File: crlf.txt]\na\r\nb\r\n"


def test_truncation_at_the_cap_with_marker_and_total(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "big.txt").write_text("x" * 20_000)
    text = resolve_file_ref(fs, "big.txt").text
    assert split_message(text, "big.txt", total=20_000) == "x" * 16_384
    assert text.endswith("[...truncated, 20000 bytes total — use read_file for the rest]")


def test_exactly_the_cap_is_not_truncated(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "exact.txt").write_text("y" * 16_384)
    (ws / "over.txt").write_text("y" * 16_385)
    assert split_message(resolve_file_ref(fs, "exact.txt").text, "exact.txt", None) == "y" * 16_384
    over = resolve_file_ref(fs, "over.txt").text
    assert split_message(over, "over.txt", total=16_385) == "y" * 16_384


def test_cap_is_configurable(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "f.txt").write_text("0123456789")
    assert resolve_file_ref(fs, "f.txt", cap=4).text == "[File: f.txt]\n0123" + MARKER.format(
        total=10
    )
    assert resolve_file_ref(fs, "f.txt", cap=0).text == "[File: f.txt]\n" + MARKER.format(total=10)
    with pytest.raises(ValueError):
        resolve_file_ref(fs, "f.txt", cap=-1)


@pytest.mark.parametrize("char", ["é", "€", "😀"], ids=["2-byte", "3-byte", "4-byte"])
@pytest.mark.parametrize("cap", [16, 16_384])
def test_multibyte_character_around_the_cap(fs: WorkspaceFs, ws: Path, char: str, cap: int) -> None:
    width = len(char.encode())
    assert width in (2, 3, 4)
    # The character starts at every offset from "ends two bytes before the
    # cap" to "starts one byte after it"; in between it straddles the cap.
    for start in range(cap - width - 2, cap + 2):
        content = "a" * start + char + "b" * 5
        data = content.encode()
        (ws / "m.txt").write_bytes(data)
        body = split_message(
            resolve_file_ref(fs, "m.txt", cap=cap).text,
            "m.txt",
            total=len(data) if len(data) > cap else None,
        )
        assert body == longest_prefix(content, cap)
        if start < cap < start + width:
            assert body == "a" * start, "cut before the straddling character"
        assert len(body.encode()) <= cap


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_file_ending_in_a_straddling_character_is_text(
    fs: WorkspaceFs, ws: Path, char: str
) -> None:
    data = ("a" * 15 + char).encode()
    (ws / "end.txt").write_bytes(data)
    text = resolve_file_ref(fs, "end.txt", cap=16).text
    assert split_message(text, "end.txt", total=len(data)) == "a" * 15


@pytest.mark.parametrize(
    "data",
    [
        b"abc\xff def",  # never valid in UTF-8
        b"caf\xe9 latin-1",  # a Latin-1 file
        b"\x80 stray continuation",
        b"ab\xe2\x82",  # the whole file ends inside a character: invalid, not truncated
        b"nul\x00byte",
        b"\x00",
    ],
)
def test_binary_content_is_refused(fs: WorkspaceFs, ws: Path, data: bytes) -> None:
    (ws / "bin").write_bytes(data)
    error = error_of(fs, "bin")
    assert error.kind is ResolveErrorKind.BINARY
    assert error.reason == "binary file"
    assert error.path == "bin"


@pytest.mark.parametrize(
    ("sequence", "invalid_after"),
    [
        (b"\xc0\x80", 1),  # C0 never starts a character (overlong)
        (b"\xf5\x80\x80\x80", 1),  # lead byte above F4
        (b"\xed\xa0\x80", 2),  # a UTF-16 surrogate: ED A0 can never complete
        (b"\xf4\x90\x80\x80", 2),  # beyond U+10FFFF
        (b"\xe0\x80\x80", 2),  # overlong three-byte form
        (b"\xe2\x41\x41", 2),  # lead byte followed by ASCII
    ],
)
def test_invalid_sequence_at_the_cut_is_binary(
    fs: WorkspaceFs, ws: Path, sequence: bytes, invalid_after: int
) -> None:
    # The judged window (here: the cap, scan_limit=0) ends inside an
    # impossible sequence: once the judged bytes prove no character can
    # start that way, it is invalid UTF-8, not an incomplete character.
    # Fewer judged bytes are still a valid beginning (``ED`` alone may become
    # ``ED 9F BF``), and bytes past the window are not judged, so the file is
    # text there. (With the default scan window the whole sequence is judged:
    # see test_bytes_past_the_cap_are_judged_up_to_the_scan_limit.)
    cap = 10
    for keep in range(1, len(sequence)):
        (ws / "bad").write_bytes(b"a" * (cap - keep) + sequence + b"zzz")
        assert error_of(fs, "bad", cap=cap).kind is ResolveErrorKind.BINARY, keep
        if keep >= invalid_after:
            assert error_of(fs, "bad", cap=cap, scan_limit=0).kind is ResolveErrorKind.BINARY
        else:
            body = split_message(
                resolve_file_ref(fs, "bad", cap=cap, scan_limit=0).text,
                "bad",
                total=cap - keep + len(sequence) + 3,
            )
            assert body == "a" * (cap - keep)


def test_only_the_scan_window_decides_binary(fs: WorkspaceFs, ws: Path) -> None:
    # Bytes past the judged window (cap or scan_limit, whichever is larger)
    # are not judged; inside it, garbage refuses the file even when not shown.
    (ws / "f").write_bytes(b"a" * 8 + b"\x00\xff")
    assert resolve_file_ref(fs, "f", cap=8, scan_limit=0).text == (
        "[File: f]\naaaaaaaa" + MARKER.format(total=10)
    )
    assert error_of(fs, "f", cap=9, scan_limit=0).kind is ResolveErrorKind.BINARY
    assert error_of(fs, "f", cap=8).kind is ResolveErrorKind.BINARY  # default window: judged
    assert resolve_file_ref(fs, "f", cap=4, scan_limit=8).text.startswith("[File: f]\naaaa\n")


@pytest.mark.parametrize(
    "garbage",
    [b"\x00", b"\xff", b"\xc3(", b"\xed\xa0\x80"],
    ids=["nul", "ff", "bad-continuation", "surrogate"],
)
def test_bytes_past_the_cap_are_judged_up_to_the_scan_limit(
    fs: WorkspaceFs, ws: Path, garbage: bytes
) -> None:
    # Audit G8: a text head on a binary file used to be attached as "text"
    # because only the first 16 KB (the shown part) were judged.
    (ws / "mixed.bin").write_bytes(b"x" * 20_000 + garbage + b"y" * 100)
    error = error_of(fs, "mixed.bin")
    assert error.kind is ResolveErrorKind.BINARY and error.reason == "binary file"
    # The same garbage just past the scan window is not judged (documented).
    (ws / "late.txt").write_bytes(b"x" * DEFAULT_SCAN_LIMIT + garbage)
    body = split_message(
        resolve_file_ref(fs, "late.txt").text, "late.txt", total=DEFAULT_SCAN_LIMIT + len(garbage)
    )
    assert body == "x" * 16_384


def test_a_valid_character_cut_by_the_scan_window_is_text(fs: WorkspaceFs, ws: Path) -> None:
    data = ("é" * 20).encode()
    (ws / "t.txt").write_bytes(data)
    for scan_limit in range(len(data) + 1):
        body = split_message(
            resolve_file_ref(fs, "t.txt", cap=6, scan_limit=scan_limit).text,
            "t.txt",
            total=len(data),
        )
        assert body == "ééé"


class RecordingFs:
    """A view that delegates to a real one and records every read."""

    def __init__(self, inner: WorkspaceFs, *, stat_size: int | None = None) -> None:
        self.inner = inner
        self.reads: list[tuple[str, int | None]] = []
        self.stat_size = stat_size

    def resolve(self, path: str) -> str:
        return self.inner.resolve(path)

    def stat(self, path: str) -> FileStat | None:
        info = self.inner.stat(path)
        if info is not None and self.stat_size is not None:
            return FileStat(info.kind, self.stat_size, info.mtime_ns)
        return info

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        self.reads.append((path, limit))
        return self.inner.read_bytes(path, limit)

    def list_dir(self, path: str) -> list[DirEntry]:
        return self.inner.list_dir(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_reads_only_the_cap_plus_one_byte_and_takes_total_from_stat(
    fs: WorkspaceFs, ws: Path
) -> None:
    (ws / "huge.txt").write_bytes(b"z" * 3_000_000)
    view = RecordingFs(fs)
    assert isinstance(view, FsView)
    text = resolve_file_ref(view, "huge.txt", cap=100, scan_limit=0).text
    assert view.reads == [("huge.txt", 101)]
    assert text == "[File: huge.txt]\n" + "z" * 100 + MARKER.format(total=3_000_000)
    # By default one read covers the scan window too -- and never the whole file.
    assert resolve_file_ref(view, "huge.txt", cap=100).text == text
    assert view.reads[1:] == [("huge.txt", DEFAULT_SCAN_LIMIT + 1)]


def test_total_is_never_below_what_was_read(fs: WorkspaceFs, ws: Path) -> None:
    # stat is stale (the file grew after it): the total still covers the read.
    (ws / "grew.txt").write_bytes(b"q" * 50)
    stale = RecordingFs(fs, stat_size=3)
    assert resolve_file_ref(stale, "grew.txt", cap=10, scan_limit=0).text.endswith(
        "[...truncated, 11 bytes total — use read_file for the rest]"
    )
    assert resolve_file_ref(stale, "grew.txt", cap=10).text.endswith(  # the read saw it all
        "[...truncated, 50 bytes total — use read_file for the rest]"
    )
    # stat says bigger than what is there (it shrank): not truncated.
    shrunk = RecordingFs(fs, stat_size=10_000)
    assert resolve_file_ref(shrunk, "grew.txt", cap=50).text == "[File: grew.txt]\n" + "q" * 50


# --------------------------------------------------------------------------- #
# Scope and errors
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("path", ["missing.txt", "src/missing.txt", "no/such/dir/f"])
def test_missing_is_not_found(fs: WorkspaceFs, path: str) -> None:
    error = error_of(fs, path)
    assert (error.kind, error.reason, error.path) == (ResolveErrorKind.NOT_FOUND, "not found", path)


def test_a_file_used_as_a_directory_is_not_found(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    assert error_of(fs, "f.txt/inner").kind is ResolveErrorKind.NOT_FOUND


def test_unnameable_paths_are_errors_not_crashes(fs: WorkspaceFs) -> None:
    # Explicit FileRef segments can carry what the tokenizer never produces.
    assert error_of(fs, "a\ud800").kind is ResolveErrorKind.NOT_FOUND
    nul = error_of(fs, "a\x00b")
    assert (nul.kind, nul.reason) == (ResolveErrorKind.IO, "I/O error: path contains a NUL byte")


def test_out_of_scope_via_dotdot(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "a").mkdir()
    for path in ("../outside/secret.txt", "a/../../outside/secret.txt", "..", "~/.bashrc"):
        error = error_of(fs, path)
        assert error.kind is ResolveErrorKind.OUT_OF_SCOPE, path
        assert error.reason == "outside the workspace"


def test_out_of_scope_via_absolute_path(fs: WorkspaceFs, outside: Path) -> None:
    assert error_of(fs, str(outside / "secret.txt")).kind is ResolveErrorKind.OUT_OF_SCOPE
    assert error_of(fs, "/etc/passwd").kind is ResolveErrorKind.OUT_OF_SCOPE


def test_out_of_scope_via_symlinks(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    (ws / "abs_link").symlink_to(outside / "secret.txt")
    (ws / "rel_link").symlink_to(Path("..") / "outside" / "secret.txt")
    (ws / "dir_link").symlink_to(outside)
    (ws / "sub").mkdir()
    (ws / "sub" / "deep_link").symlink_to(Path("..") / ".." / "outside")
    for path in (
        "abs_link",
        "rel_link",
        "dir_link",
        "dir_link/secret.txt",  # a symlinked directory in the middle of the path
        "sub/deep_link/secret.txt",
        "./sub/../dir_link/secret.txt",
    ):
        error = error_of(fs, path)
        assert error.kind is ResolveErrorKind.OUT_OF_SCOPE, path
        assert SENTINEL not in str(error)


def test_symlink_inside_to_inside_resolves(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("inside")
    (ws / "file_link").symlink_to(Path("real") / "f.txt")
    (ws / "dir_link").symlink_to(ws / "real")
    (ws / "real" / "up").symlink_to(Path("..") / "real" / "f.txt")
    assert resolve_file_ref(fs, "file_link").text == "[File: file_link]\ninside"
    assert resolve_file_ref(fs, "dir_link/f.txt").text == "[File: dir_link/f.txt]\ninside"
    assert resolve_file_ref(fs, "real/up").text == "[File: real/up]\ninside"
    assert resolve_file_ref(fs, "dir_link/").text == "[Dir: dir_link/]\nf.txt\nup"


class SwappingFs:
    """A real view whose ``resolve`` or ``stat`` (the resolver's checks) swaps the tree after.

    The resolver checks (resolve, stat) and then opens (read_bytes,
    list_dir); ``swap`` runs between the two, once, as an attacker racing
    the submit would.
    """

    def __init__(self, inner: WorkspaceFs, when: str, swap: Callable[[], None]) -> None:
        self.inner = inner
        self.when = when
        self.swap = swap
        self.swapped = False

    def _fire(self, step: str) -> None:
        if step == self.when and not self.swapped:
            self.swapped = True
            self.swap()

    def resolve(self, path: str) -> str:
        result = self.inner.resolve(path)
        self._fire("resolve")
        return result

    def stat(self, path: str) -> FileStat | None:
        info = self.inner.stat(path)
        self._fire("stat")
        return info

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("when", ["resolve", "stat"])
@pytest.mark.parametrize("what", ["file", "parent", "dir"])
def test_a_symlink_swapped_in_between_check_and_open_is_never_followed(
    fs: WorkspaceFs, ws: Path, outside: Path, when: str, what: str
) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "secret.txt").write_text("inside")
    (outside / "dir_only_outside").mkdir()

    def swap() -> None:
        if what == "file":
            (ws / "d" / "secret.txt").unlink()
            (ws / "d" / "secret.txt").symlink_to(outside / "secret.txt")
        else:
            (ws / "d" / "secret.txt").unlink()
            (ws / "d").rmdir()
            (ws / "d").symlink_to(outside)

    path = "d/" if what == "dir" else "d/secret.txt"
    view = SwappingFs(fs, when, swap)
    try:
        outcome = resolve_file_ref(view, path).text
    except ResolveError as error:
        outcome = str(error)
        assert error.kind in (ResolveErrorKind.OUT_OF_SCOPE, ResolveErrorKind.IO), error
    assert view.swapped, "the swap must have happened between the check and the open"
    assert SENTINEL not in outcome and "dir_only_outside" not in outcome
    # The swapped path really leads outside now: a naive open would have read it.
    assert SENTINEL in (ws / "d" / "secret.txt").read_text()
    prepared = resolve_input(fs, [FileRef(path=path)])  # and checked afresh it is refused
    assert prepared.items == () and len(prepared.alerts) == 1


def test_a_racing_swap_never_leaks_outside_content(
    fs: WorkspaceFs, ws: Path, outside: Path
) -> None:
    """A thread flips a file between a real file and a symlink to outside while we resolve."""
    target = ws / "flip.txt"
    target.write_text("inside")
    stop = threading.Event()

    def flipper() -> None:
        staged = ws / ".flip-link"
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError):
                staged.unlink()
            staged.symlink_to(outside / "secret.txt")
            os.replace(staged, target)  # atomically a symlink to outside
            staged.write_text("inside")
            os.replace(staged, target)  # atomically a file again

    thread = threading.Thread(target=flipper, daemon=True)
    thread.start()
    outcomes: set[str] = set()
    try:
        for _ in range(300):
            try:
                outcomes.add(resolve_file_ref(fs, "flip.txt").text)
            except ResolveError as error:
                assert SENTINEL not in str(error)
                outcomes.add(error.kind.value)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert all(SENTINEL not in outcome for outcome in outcomes)
    assert outcomes <= {"[File: flip.txt]\ninside", "io", "out_of_scope", "not_found"}


def test_fifo_is_an_io_error_and_does_not_hang(fs: WorkspaceFs, ws: Path) -> None:
    os.mkfifo(ws / "pipe")  # Fore runs on POSIX systems only
    (ws / "pipe_link").symlink_to("pipe")
    for path in ("pipe", "pipe_link"):
        error = run_bounded(functools.partial(error_of, fs, path))
        assert error.kind is ResolveErrorKind.IO
        assert error.reason.startswith("I/O error: ")
        assert "not a regular file" in error.reason


def test_symlink_loop_is_an_io_error(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "loop1").symlink_to("loop2")
    (ws / "loop2").symlink_to("loop1")
    error = error_of(fs, "loop1")
    assert error.kind is ResolveErrorKind.IO
    assert error.reason.startswith("I/O error: ")
    assert "symbolic links" in error.reason


class RaisingFs(RecordingFs):
    """A view whose every operation fails with ``error`` (a view other than WorkspaceFs)."""

    def __init__(self, inner: WorkspaceFs, error: Exception, *, on: str) -> None:
        super().__init__(inner)
        self.error = error
        self.on = on

    def resolve(self, path: str) -> str:
        if self.on == "resolve":
            raise self.error
        return super().resolve(path)

    def read_bytes(self, path: str, limit: int | None = None) -> bytes:
        if self.on == "read":
            raise self.error
        return super().read_bytes(path, limit)

    def list_dir(self, path: str) -> list[DirEntry]:
        if self.on == "list":
            raise self.error
        return super().list_dir(path)


@pytest.mark.parametrize(
    ("error", "on", "expected"),
    [
        (PathOutOfScope("x: climbs above the workspace root"), "resolve", ("out_of_scope", None)),
        (NotFound("x: no such file or directory"), "read", ("not_found", "not found")),
        (NotADirectory("d: a parent is not a directory"), "resolve", ("not_found", None)),
        (FsError("d/x.txt: permission denied"), "read", ("io", "I/O error: permission denied")),
        (PermissionError(13, "Permission denied"), "list", ("io", "I/O error: permission denied")),
        (OSError(5, "Input/output error"), "read", ("io", "I/O error: input/output error")),
        (
            FsError("path contains a NUL byte"),
            "resolve",
            ("io", "I/O error: path contains a NUL byte"),
        ),
        (
            IsADirectory("d/x.txt is a directory"),
            "read",
            ("io", "I/O error: changed while reading"),
        ),
    ],
)
def test_view_errors_map_to_the_four_kinds(
    fs: WorkspaceFs, ws: Path, error: Exception, on: str, expected: tuple[str, str | None]
) -> None:
    kind, reason = expected
    (ws / "d").mkdir()
    (ws / "d" / "x.txt").write_text("x")
    target = "d" if on == "list" else "d/x.txt"
    resolved = error_of(RaisingFs(fs, error, on=on), target)
    assert resolved.kind == kind
    assert resolved.path == target
    if reason is not None:
        assert resolved.reason == reason
    assert resolved.__cause__ is error


def test_resolve_error_carries_kind_path_and_reason() -> None:
    error = ResolveError(ResolveErrorKind.NOT_FOUND, "src/lib.rs")
    assert (error.kind, error.path, error.reason) == ("not_found", "src/lib.rs", "not found")
    assert str(error) == "file ref @src/lib.rs could not be resolved: not found"
    custom = ResolveError(ResolveErrorKind.IO, "p", "I/O error: disk on fire")
    assert custom.reason == "I/O error: disk on fire"
    assert {kind.value for kind in ResolveErrorKind} == {
        "out_of_scope",
        "not_found",
        "binary",
        "io",
    }


# --------------------------------------------------------------------------- #
# Directories
# --------------------------------------------------------------------------- #


def test_directory_lists_dirs_first_then_files(fs: WorkspaceFs, ws: Path, outside: Path) -> None:
    docs = ws / "docs"
    docs.mkdir()
    for name in ("b.md", "a.md", "Z.md"):
        (docs / name).write_text(name)
    for name in ("zeta", "alpha"):
        (docs / name).mkdir()
    (docs / "escape").symlink_to(outside / "secret.txt")
    message = resolve_file_ref(fs, "docs/")
    assert message.text == "[Dir: docs/]\nalpha/\nzeta/\nZ.md\na.md\nb.md\nescape"
    assert SENTINEL not in message.text


def test_directory_listing_is_capped_with_a_marker(fs: WorkspaceFs, ws: Path) -> None:
    big = ws / "big"
    big.mkdir()
    for index in range(3):
        (big / f"dir{index}").mkdir()
    for index in range(134):
        (big / f"f{index:03}.txt").write_text("")
    lines = resolve_file_ref(fs, "big").text.split("\n")
    assert lines[0] == "[Dir: big]"
    assert lines[1:4] == ["dir0/", "dir1/", "dir2/"]
    assert lines[4:101] == [f"f{index:03}.txt" for index in range(97)]
    assert lines[101:] == ["… 37 more entries not shown"]
    assert resolve_file_ref(fs, "big", dir_limit=136).text.endswith("\n… 1 more entry not shown")
    assert resolve_file_ref(fs, "big", dir_limit=137).text.endswith("\nf133.txt")
    assert (
        resolve_file_ref(fs, "big", dir_limit=0).text == "[Dir: big]\n… 137 more entries not shown"
    )


def test_directory_listing_is_byte_capped_too(fs: WorkspaceFs, ws: Path) -> None:
    # Audit G11: 100 long names (~22 KB) used to exceed the 16 KB cap.
    long = ws / "long"
    long.mkdir()
    names = [f"{index:03}-" + "n" * 216 for index in range(100)]  # 220 bytes each
    for name in names:
        (long / name).write_text("")
    text = resolve_file_ref(fs, "long").text
    header = "[Dir: long]\n"
    listing = text.removeprefix(header)
    assert len(listing.encode()) <= 16_384
    *shown, marker = listing.split("\n")
    assert shown == names[: len(shown)] and len(shown) == 74
    assert marker == f"… {100 - len(shown)} more entries not shown"
    # A small cap: whole names only, and the marker always fits.
    small = resolve_file_ref(fs, "long", cap=500).text.removeprefix(header)
    assert len(small.encode()) <= 500 and small.split("\n") == [
        *names[:2],
        "… 98 more entries not shown",
    ]
    assert resolve_file_ref(fs, "long", cap=10).text == header + "… 100 more entries not shown"
    assert resolve_file_ref(fs, "long", cap=10**6).text.count("\n") == 100  # no marker


def test_empty_directory_and_the_root(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "empty").mkdir()
    assert resolve_file_ref(fs, "empty").text == "[Dir: empty]\n(empty directory)"
    assert resolve_file_ref(fs, ".").text == "[Dir: .]\nempty/"
    assert resolve_file_ref(fs, str(ws)).text == f"[Dir: {ws}]\nempty/"


# --------------------------------------------------------------------------- #
# A whole submit
# --------------------------------------------------------------------------- #


def test_several_references_in_order(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "a.txt").write_text("A")
    (ws / "b.txt").write_text("B")
    (ws / "docs").mkdir()
    segments = parse_input("see @b.txt, then @docs/ and @a.txt.")
    prepared = resolve_input(fs, segments)
    assert texts(prepared.items) == [
        "[File: b.txt]\nB",
        "[Dir: docs/]\n(empty directory)",
        "[File: a.txt]\nA",
    ]
    assert prepared.text == "see @b.txt, then @docs/ and @a.txt."
    assert prepared.segments == segments
    assert prepared.alerts == ()


def test_the_same_path_twice_is_attached_once(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "a.txt").write_text("A")
    prepared = resolve_input(fs, parse_input("@a.txt and again @a.txt"))
    assert texts(prepared.items) == ["[File: a.txt]\nA"]
    assert prepared.text == "@a.txt and again @a.txt"


def test_one_path_in_different_spellings_is_attached_once(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "a.txt").write_text("A")
    (ws / "src").mkdir()
    (ws / "src" / "b.txt").write_text("B")
    text = f"@a.txt @./a.txt @src/b.txt @src/../a.txt @{ws}/a.txt @./src//b.txt"
    prepared = resolve_input(fs, parse_input(text))
    # one message per file, under the spelling typed first
    assert texts(prepared.items) == ["[File: a.txt]\nA", "[File: src/b.txt]\nB"]
    assert prepared.text == text  # every spelling resolved: all stay references
    assert prepared.alerts == ()


def test_a_missing_path_in_two_spellings_alerts_once(fs: WorkspaceFs, ws: Path) -> None:
    prepared = resolve_input(fs, parse_input("@gone.txt and @./gone.txt"))
    assert prepared.items == ()
    assert prepared.text == (
        "[unresolved file ref: gone.txt] and [unresolved file ref: ./gone.txt]"
    )
    assert prepared.alerts == (
        (AlertLevel.WARN, "file ref @gone.txt could not be resolved: not found", "file_ref"),
    )


def test_unresolved_references_alert_and_leave_a_placeholder(
    fs: WorkspaceFs, ws: Path, outside: Path
) -> None:
    (ws / "a.txt").write_text("A")
    (ws / "bin").write_bytes(b"\x00\x01")
    text = "see @a.txt, @src/lib.rs and @../outside/secret.txt plus @bin; again @src/lib.rs"
    prepared = resolve_input(fs, parse_input(text))
    assert texts(prepared.items) == ["[File: a.txt]\nA"]
    assert prepared.text == (
        "see @a.txt, [unresolved file ref: src/lib.rs] and "
        "[unresolved file ref: ../outside/secret.txt] plus [unresolved file ref: bin]; "
        "again [unresolved file ref: src/lib.rs]"
    )
    assert prepared.alerts == (
        (AlertLevel.WARN, "file ref @src/lib.rs could not be resolved: not found", "file_ref"),
        (
            AlertLevel.WARN,
            "file ref @../outside/secret.txt could not be resolved: outside the workspace",
            "file_ref",
        ),
        (AlertLevel.WARN, "file ref @bin could not be resolved: binary file", "file_ref"),
    )
    assert all(SENTINEL not in text for text in texts(prepared.items))


def test_email_address_is_left_alone(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "example.com").write_text("not to be attached")
    prepared = prepare_submit(fs, Submit(text="mail user@example.com about it"))
    assert prepared.items == ()
    assert prepared.alerts == ()
    assert prepared.text == "mail user@example.com about it"


def test_quoted_path_with_spaces(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "my notes.txt").write_text("remember")
    prepared = prepare_submit(fs, Submit(text='read @"my notes.txt" please'))
    assert texts(prepared.items) == ["[File: my notes.txt]\nremember"]
    assert prepared.text == 'read @"my notes.txt" please'
    assert prepared.segments[1] == FileRef(path="my notes.txt")


def test_prepare_submit_with_text(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "a.txt").write_text("A")
    prepared = prepare_submit(fs, Submit(text="look at @a.txt and @gone.txt"))
    assert prepared.segments == parse_input("look at @a.txt and @gone.txt")
    assert texts(prepared.items) == ["[File: a.txt]\nA"]
    assert prepared.text == "look at @a.txt and [unresolved file ref: gone.txt]"
    assert len(prepared.alerts) == 1


def test_prepare_submit_with_segments(fs: WorkspaceFs, ws: Path) -> None:
    (ws / "a.txt").write_text("A")
    (ws / "b.txt").write_text("B")
    segments = (
        TextSegment(text="compare "),
        FileRef(path="b.txt"),
        TextSegment(text=" with "),
        FileRef(path="a.txt"),
        Paste(text="\n@b.txt in a paste is just text\n"),
    )
    prepared = prepare_submit(fs, Submit(segments=segments), cap=1)
    assert prepared.segments == segments
    assert texts(prepared.items) == ["[File: b.txt]\nB", "[File: a.txt]\nA"]
    assert prepared.text == "compare @b.txt with @a.txt\n@b.txt in a paste is just text\n"
    assert prepared.alerts == ()


def test_prepare_submit_without_references(fs: WorkspaceFs) -> None:
    prepared = prepare_submit(fs, Submit(text="just words"))
    assert (prepared.text, prepared.items, prepared.alerts) == ("just words", (), ())
    empty = prepare_submit(fs, Submit())
    assert (empty.text, empty.segments, empty.items) == ("", (), ())


# --------------------------------------------------------------------------- #
# Properties
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def scope_tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A workspace full of symlinks in and out, inside a tree holding the sentinel.

    Every directory, inside and outside, has an ``f.txt``: inside ones hold
    their own path, outside ones the sentinel, so any path that reaches an
    outside directory has a file to (wrongly) attach.
    """
    base = Path(os.path.realpath(tmp_path_factory.mktemp("scope")))
    outside = base / "outside"
    ws = base / "ws"
    for directory in (outside / "sub", outside / "ws", ws / "a" / "b"):
        directory.mkdir(parents=True)
    for directory in (base, outside, outside / "sub", outside / "ws"):
        (directory / "f.txt").write_text(SENTINEL)
    for directory in (ws, ws / "a", ws / "a" / "b"):
        (directory / "f.txt").write_text(f"inside {directory.relative_to(base)}")
    (ws / "in_file").symlink_to(Path("a") / "f.txt")
    (ws / "in_dir").symlink_to("a")
    (ws / "in_abs").symlink_to(ws / "a" / "b")
    (ws / "a" / "up_in").symlink_to(Path("..") / "f.txt")
    (ws / "a" / "b" / "up_dir").symlink_to(Path("..") / "..")
    (ws / "out_file").symlink_to(Path("..") / "outside" / "f.txt")
    (ws / "out_dir").symlink_to(Path("..") / "outside")
    (ws / "out_abs").symlink_to(outside)
    (ws / "a" / "out_rel").symlink_to(Path("..") / ".." / "outside" / "sub")
    (ws / "a" / "b" / "out_deep").symlink_to(Path("..") / ".." / ".." / "outside" / "ws")
    (ws / "a" / "b" / "out_up").symlink_to(Path("..") / ".." / "..")
    (ws / "loop1").symlink_to("loop2")
    (ws / "loop2").symlink_to("loop1")
    (ws / "dangling").symlink_to("nowhere")
    if hasattr(os, "mkfifo"):
        os.mkfifo(ws / "fifo")
    return base, ws


COMPONENTS = [
    *["..", ".", ""],
    *["a", "b", "ws", "outside", "sub", "missing"],
    *["f.txt"] * 4,  # weighted: most paths should end at a file
    *["in_file", "in_dir", "in_abs", "up_in", "up_dir"],
    *["out_file", "out_dir", "out_abs", "out_rel", "out_deep", "out_up"],
    *["loop1", "dangling", "fifo"],
]


@settings(max_examples=400, deadline=None)
@given(
    prefix=st.sampled_from(["", "", "ws", "outside", "base"]),
    parts=st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=5),
)
def test_scope_property_never_attaches_outside_content(
    scope_tree: tuple[Path, Path], prefix: str, parts: list[str]
) -> None:
    base, ws = scope_tree
    roots = {"": "", "ws": f"{ws}/", "outside": f"{base}/outside/", "base": f"{base}/"}
    path = roots[prefix] + "/".join(parts) or "."
    fs = WorkspaceFs(ws)
    try:
        message = resolve_file_ref(fs, path)
    except ResolveError as error:
        assert error.kind in (
            ResolveErrorKind.OUT_OF_SCOPE,
            ResolveErrorKind.NOT_FOUND,
            ResolveErrorKind.IO,
        ), (path, error.kind)
        assert error.path == path
        assert SENTINEL not in str(error)
        return
    assert SENTINEL not in message.text
    # Model: ``..`` is lexical (as the view documents), then the kernel
    # follows the symlinks. What was attached must be what sits there, and
    # it must be inside the workspace.
    target = Path(os.path.realpath(os.path.join(ws, posixpath.normpath(path))))
    assert target == ws or ws in target.parents, (path, target)
    if message.text.startswith("[File: "):
        assert split_message(message.text, path, None) == target.read_text()
    else:
        assert message.text.startswith(f"[Dir: {path}]\n")
        assert target.is_dir()
    prepared = resolve_input(fs, [FileRef(path=path)])
    assert [message.text] == texts(prepared.items)


@pytest.fixture(scope="module")
def cap_ws(tmp_path_factory: pytest.TempPathFactory) -> WorkspaceFs:
    return WorkspaceFs(tmp_path_factory.mktemp("cap"))


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(
        alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40
    ),
    cap=st.integers(min_value=0, max_value=80),
)
def test_cap_property_longest_character_boundary_prefix(
    cap_ws: WorkspaceFs, text: str, cap: int
) -> None:
    data = text.encode()
    (cap_ws.root / "t.txt").write_bytes(data)
    message = resolve_file_ref(cap_ws, "t.txt", cap=cap)
    body = split_message(message.text, "t.txt", total=len(data) if len(data) > cap else None)
    assert text.startswith(body)
    assert len(body.encode()) <= cap
    assert body == longest_prefix(text, cap)
    if body != text:
        # The longest: one more character would not fit.
        assert len(text[: len(body) + 1].encode()) > cap
