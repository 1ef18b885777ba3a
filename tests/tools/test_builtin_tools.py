"""The built-in coding tools through ``invoke_tool`` on real temp dirs (issue 3)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.tools.base import (
    FunctionTool,
    Invocation,
    ToolArgs,
    ToolContext,
    ToolRegistry,
    invoke_tool,
)
from fore.actors.tools.builtin import ReadFile, Shell, default_registry
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.fs import WorkspaceFs
from fore.messages.conversation import ToolCall
from fore.testing import wait_until

REGISTRY = default_registry()
BUILTIN_NAMES = ["edit", "glob", "grep", "list_directory", "read_file", "shell", "write_file"]


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return make_ctx(ws)


def make_ctx(root: Path) -> ToolContext:
    return ToolContext(
        fs=WorkspaceFs(root),
        cancel=CancelToken(),
        deadline=time.monotonic() + 30,
        session_id="s",
        call_id="c",
    )


def call(
    ctx: ToolContext, name: str, registry: ToolRegistry = REGISTRY, **arguments: Any
) -> Invocation:
    return invoke_tool(registry, ToolCall(id="c", name=name, arguments=arguments), ctx)


def ok(ctx: ToolContext, name: str, **arguments: Any) -> str:
    result = call(ctx, name, **arguments)
    assert result.outcome == "ok", result.output
    assert result.is_error is False
    return result.output


def err(ctx: ToolContext, name: str, **arguments: Any) -> str:
    result = call(ctx, name, **arguments)
    assert result.outcome == "error", result
    assert result.is_error is True
    return result.output


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def assert_group_gone(pgid: int) -> None:
    wait_until(lambda: group_gone(pgid), message=f"process group {pgid} still alive")
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        box["value"] = fn()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


# -- read_file --------------------------------------------------------------------


def test_read_file_numbers_lines(ctx: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_text("first\nsecond\n\tthird\n")
    assert ok(ctx, "read_file", path="a.txt") == "     1\tfirst\n     2\tsecond\n     3\t\tthird"


def test_read_file_paging(ctx: ToolContext, ws: Path) -> None:
    (ws / "p.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = ok(ctx, "read_file", path="p.txt", offset=3, limit=4)
    lines = out.split("\n")
    assert lines[:4] == ["     3\tline 3", "     4\tline 4", "     5\tline 5", "     6\tline 6"]
    assert "use offset=7" in lines[4]
    assert "3-6 of 10" in lines[4]
    assert len(lines) == 5
    # the trailer's offset reads on
    out = ok(ctx, "read_file", path="p.txt", offset=7, limit=4)
    assert out.split("\n") == [
        "     7\tline 7",
        "     8\tline 8",
        "     9\tline 9",
        "    10\tline 10",
    ]
    # the whole file: no trailer
    assert "offset=" not in ok(ctx, "read_file", path="p.txt")
    # the last line alone
    assert ok(ctx, "read_file", path="p.txt", offset=10) == "    10\tline 10"


def test_read_file_default_limit_pages(ctx: ToolContext, ws: Path) -> None:
    (ws / "long.txt").write_text("x\n" * 2500)
    out = ok(ctx, "read_file", path="long.txt")
    lines = out.split("\n")
    assert len(lines) == 2001
    assert lines[1999] == "  2000\tx"
    assert "use offset=2001" in lines[2000]


def test_read_file_offset_past_end(ctx: ToolContext, ws: Path) -> None:
    (ws / "short.txt").write_text("a\nb\n")
    out = err(ctx, "read_file", path="short.txt", offset=3)
    assert "offset 3" in out
    assert "2 lines" in out


def test_read_file_empty(ctx: ToolContext, ws: Path) -> None:
    (ws / "empty.txt").write_text("")
    out = ok(ctx, "read_file", path="empty.txt")
    assert "empty" in out
    assert "\t" not in out


def test_read_file_binary(ctx: ToolContext, ws: Path) -> None:
    (ws / "bin.dat").write_bytes(b"\x7fELF\x00\x01\x02text")
    out = err(ctx, "read_file", path="bin.dat")
    assert "binary" in out
    assert "bin.dat" in out


def test_read_file_invalid_utf8(ctx: ToolContext, ws: Path) -> None:
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    out = err(ctx, "read_file", path="latin1.txt")
    assert "UTF-8" in out


def test_read_file_missing_and_directory(ctx: ToolContext, ws: Path) -> None:
    (ws / "d").mkdir()
    assert "no such file" in err(ctx, "read_file", path="missing.txt")
    assert "directory" in err(ctx, "read_file", path="d")
    assert "directory" in err(ctx, "read_file", path=".")


def test_read_file_long_line_truncated(ctx: ToolContext, ws: Path) -> None:
    (ws / "wide.txt").write_text("A" * 5000 + "\nshort\n")
    out = ok(ctx, "read_file", path="wide.txt")
    first, second = out.split("\n")
    assert first.startswith("     1\t" + "A" * 2000)
    assert "A" * 2001 not in first
    assert "truncated" in first
    assert second == "     2\tshort"


def test_read_file_crlf_and_unicode(ctx: ToolContext, ws: Path) -> None:
    (ws / "u.txt").write_bytes("héllo 🌍\r\nzwei\r\n".encode())
    assert ok(ctx, "read_file", path="u.txt") == "     1\théllo 🌍\n     2\tzwei"


def test_read_file_line_numbers_follow_newlines_only(ctx: ToolContext, ws: Path) -> None:
    # Line numbers must match the file's lines (editors, compilers, sed -n, grep -n):
    # a form feed or U+2028 inside a line does not start a new line.
    (ws / "ff.py").write_text("x = 1\n\x0c\ny = 'a\u2028b'\nz = 3\n")
    out = ok(ctx, "read_file", path="ff.py")
    assert out.split("\n")[-1] == "     4\tz = 3"


def test_read_file_escape_refused(ctx: ToolContext, ws: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("SECRET")
    (ws / "leak").symlink_to(tmp_path / "secret.txt")
    for path in ["../secret.txt", str(tmp_path / "secret.txt"), "leak"]:
        out = err(ctx, "read_file", path=path)
        assert "SECRET" not in out
        assert "outside" in out or "above" in out


def test_read_file_of_a_fifo_does_not_hang(ctx: ToolContext, ws: Path) -> None:
    fifo = ws / "pipe"
    os.mkfifo(fifo)
    thread, box = run_in_thread(lambda: call(ctx, "read_file", path="pipe"))
    thread.join(3)
    hung = thread.is_alive()
    if hung:  # release the blocked open so the thread ends
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(5)
    assert not hung, "read_file blocked opening a FIFO"
    assert box["value"].is_error


# -- write_file -----------------------------------------------------------------------


def test_write_file_creates_and_overwrites(ctx: ToolContext, ws: Path) -> None:
    out = ok(ctx, "write_file", path="new/dir/f.txt", content="hello\n")
    assert out.startswith("Created new/dir/f.txt")
    assert "6 bytes" in out
    assert (ws / "new" / "dir" / "f.txt").read_bytes() == b"hello\n"
    out = ok(ctx, "write_file", path="new/dir/f.txt", content="bye")
    assert out.startswith("Overwrote new/dir/f.txt")
    assert (ws / "new" / "dir" / "f.txt").read_bytes() == b"bye"


def test_write_file_exact_content(ctx: ToolContext, ws: Path) -> None:
    content = "héllo wörld 🌍\r\nno trailing newline\ttab  "
    ok(ctx, "write_file", path="u.txt", content=content)
    assert (ws / "u.txt").read_bytes() == content.encode("utf-8")
    ok(ctx, "write_file", path="empty.txt", content="")
    assert (ws / "empty.txt").read_bytes() == b""


def test_write_file_reports_workspace_relative_path(ctx: ToolContext, ws: Path) -> None:
    out = ok(ctx, "write_file", path=str(ws / "abs.txt"), content="x")
    assert out.startswith("Created abs.txt")
    assert (ws / "abs.txt").read_text() == "x"


def test_write_file_escapes_refused(ctx: ToolContext, ws: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("keep")
    (ws / "leak").symlink_to(tmp_path / "outside.txt")
    for path in ["../outside.txt", "../planted.txt", str(tmp_path / "outside.txt"), "leak"]:
        err(ctx, "write_file", path=path, content="evil")
    assert (tmp_path / "outside.txt").read_text() == "keep"
    assert not (tmp_path / "planted.txt").exists()


def test_write_file_to_directory_is_an_error(ctx: ToolContext, ws: Path) -> None:
    (ws / "d").mkdir()
    err(ctx, "write_file", path="d", content="x")
    assert (ws / "d").is_dir()


# -- edit ----------------------------------------------------------------------------


def test_edit_unique_replace(ctx: ToolContext, ws: Path) -> None:
    (ws / "e.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    out = ok(ctx, "edit", path="e.py", old_string="return 1", new_string="return 10")
    assert "1 occurrence" in out
    assert (ws / "e.py").read_text() == "def f():\n    return 10\n\ndef g():\n    return 2\n"


def test_edit_not_found(ctx: ToolContext, ws: Path) -> None:
    (ws / "e.txt").write_text("alpha beta\n")
    out = err(ctx, "edit", path="e.txt", old_string="gamma", new_string="delta")
    assert "not found" in out
    assert (ws / "e.txt").read_text() == "alpha beta\n"


def test_edit_ambiguous_names_the_count(ctx: ToolContext, ws: Path) -> None:
    (ws / "e.txt").write_text("x = 1\nx = 1\nx = 1\n")
    out = err(ctx, "edit", path="e.txt", old_string="x = 1", new_string="x = 2")
    assert "3 times" in out
    assert "replace_all" in out
    assert (ws / "e.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


def test_edit_replace_all(ctx: ToolContext, ws: Path) -> None:
    (ws / "e.txt").write_text("x = 1\nx = 1\ny\nx = 1\n")
    out = ok(ctx, "edit", path="e.txt", old_string="x = 1", new_string="x = 2", replace_all=True)
    assert "3 occurrences" in out
    assert (ws / "e.txt").read_text() == "x = 2\nx = 2\ny\nx = 2\n"


def test_edit_identical_strings(ctx: ToolContext, ws: Path) -> None:
    (ws / "e.txt").write_text("same\n")
    out = err(ctx, "edit", path="e.txt", old_string="same", new_string="same")
    assert "identical" in out


def test_edit_preserves_crlf(ctx: ToolContext, ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    ok(ctx, "edit", path="w.txt", old_string="two", new_string="TWO")
    assert (ws / "w.txt").read_bytes() == b"one\r\nTWO\r\nthree\r\n"


def test_edit_unicode_and_multiline(ctx: ToolContext, ws: Path) -> None:
    (ws / "u.txt").write_text("naïve\ncafé\nend\n")
    ok(ctx, "edit", path="u.txt", old_string="naïve\ncafé", new_string="🌍")
    assert (ws / "u.txt").read_text() == "🌍\nend\n"


def test_edit_missing_file_and_empty_old_string(ctx: ToolContext, ws: Path) -> None:
    assert "no such file" in err(ctx, "edit", path="nope.txt", old_string="a", new_string="b")
    (ws / "e.txt").write_text("abc")
    result = call(ctx, "edit", path="e.txt", old_string="", new_string="b")
    assert result.outcome == "invalid"
    assert "old_string" in result.output
    assert (ws / "e.txt").read_text() == "abc"


def test_edit_escape_refused(ctx: ToolContext, ws: Path, tmp_path: Path) -> None:
    (tmp_path / "o.txt").write_text("keep me")
    (ws / "leak").symlink_to(tmp_path / "o.txt")
    err(ctx, "edit", path="leak", old_string="keep", new_string="lost")
    err(ctx, "edit", path="../o.txt", old_string="keep", new_string="lost")
    assert (tmp_path / "o.txt").read_text() == "keep me"


# -- list_directory --------------------------------------------------------------------


def test_list_directory(ctx: ToolContext, ws: Path) -> None:
    (ws / "zdir").mkdir()
    (ws / "adir").mkdir()
    (ws / "b.txt").write_bytes(b"12345")
    (ws / "a.txt").write_bytes(b"")
    out = ok(ctx, "list_directory", path=".")
    lines = out.split("\n")
    assert "2 directories" in lines[0]
    assert "2 files" in lines[0]
    assert lines[1:] == ["adir/", "zdir/", "a.txt (0 bytes)", "b.txt (5 bytes)"]
    assert ok(ctx, "list_directory") == out


def test_list_directory_subdir_and_empty(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub" / "inner").mkdir(parents=True)
    (ws / "sub" / "f").write_text("abc")
    (ws / "empty").mkdir()
    out = ok(ctx, "list_directory", path="sub").split("\n")
    assert out[0].startswith("sub/")
    assert out[1:] == ["inner/", "f (3 bytes)"]
    out_empty = ok(ctx, "list_directory", path="empty")
    assert "empty" in out_empty.split("\n")[-1]
    assert "0 files" in out_empty


def test_list_directory_errors(ctx: ToolContext, ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    assert "not a directory" in err(ctx, "list_directory", path="f.txt")
    assert "no such directory" in err(ctx, "list_directory", path="missing")
    err(ctx, "list_directory", path="..")


# -- glob -----------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Path) -> Path:
    for rel, text in {
        "main.py": "print('hello')\n",
        "README.md": "Hello world\n",
        "src/app.py": "import os\nHELLO = 1\n",
        "src/util.py": "def helper():\n    return 'hello'\n",
        "src/pkg/deep.py": "x = 'HeLLo'\n",
        "src/pkg/data.json": '{"hello": true}\n',
        "tests/test_app.py": "def test_hello():\n    pass\n",
        ".git/config": "hello from git\n",
        "node_modules/m/index.py": "hello\n",
    }.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    (ws / "src" / "blob.bin").write_bytes(b"hello\x00\x01binary hello")
    return ws


def test_glob_patterns(ctx: ToolContext, tree: Path) -> None:
    assert ok(ctx, "glob", pattern="*.py").split("\n") == [
        "main.py",
        "src/app.py",
        "src/util.py",
        "src/pkg/deep.py",
        "tests/test_app.py",
    ]
    assert ok(ctx, "glob", pattern="src/*.py").split("\n") == ["src/app.py", "src/util.py"]
    assert ok(ctx, "glob", pattern="**/test_*.py").split("\n") == ["tests/test_app.py"]
    assert ok(ctx, "glob", pattern="src/**").split("\n") == [
        "src/app.py",
        "src/blob.bin",
        "src/util.py",
        "src/pkg/data.json",
        "src/pkg/deep.py",
    ]
    assert ok(ctx, "glob", pattern="src/[au]*.py").split("\n") == ["src/app.py", "src/util.py"]


def test_glob_with_path_is_workspace_relative(ctx: ToolContext, tree: Path) -> None:
    assert ok(ctx, "glob", pattern="*.py", path="src/pkg") == "src/pkg/deep.py"
    assert ok(ctx, "glob", pattern="pkg/*.json", path="src") == "src/pkg/data.json"
    assert ok(ctx, "glob", pattern="*.py", path=str(tree / "tests")) == "tests/test_app.py"


def test_glob_no_match(ctx: ToolContext, tree: Path) -> None:
    out = ok(ctx, "glob", pattern="*.rs")
    assert out.startswith("No files match")
    assert "*.rs" in out


def test_glob_escape_refused(ctx: ToolContext, tree: Path) -> None:
    err(ctx, "glob", pattern="*", path="..")


# -- grep -----------------------------------------------------------------------------

GREP_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): (?P<text>.*)$")


def test_grep_regex_and_format(ctx: ToolContext, tree: Path) -> None:
    out = ok(ctx, "grep", pattern=r"hel+o")
    lines = out.split("\n")
    for line in lines:
        assert GREP_LINE.match(line), line
    assert lines == [
        "main.py:1: print('hello')",
        "src/util.py:2:     return 'hello'",
        'src/pkg/data.json:1: {"hello": true}',
        "tests/test_app.py:1: def test_hello():",
    ]


def test_grep_skips_binary_and_ignored_dirs(ctx: ToolContext, tree: Path) -> None:
    out = ok(ctx, "grep", pattern="hello")
    assert "blob.bin" not in out
    assert ".git" not in out
    assert "node_modules" not in out


def test_grep_case_insensitive(ctx: ToolContext, tree: Path) -> None:
    out = ok(ctx, "grep", pattern="hello", case_insensitive=True, path="src")
    assert out.split("\n") == [
        "src/app.py:2: HELLO = 1",
        "src/util.py:2:     return 'hello'",
        'src/pkg/data.json:1: {"hello": true}',
        "src/pkg/deep.py:1: x = 'HeLLo'",
    ]


def test_grep_include_filter(ctx: ToolContext, tree: Path) -> None:
    out = ok(ctx, "grep", pattern="hello", include="*.json")
    assert out == 'src/pkg/data.json:1: {"hello": true}'
    out = ok(ctx, "grep", pattern="(?i)hello", include="src/*.py")
    assert out.split("\n") == ["src/app.py:2: HELLO = 1", "src/util.py:2:     return 'hello'"]


def test_grep_single_file_path(ctx: ToolContext, tree: Path) -> None:
    assert ok(ctx, "grep", pattern="return", path="src/util.py") == (
        "src/util.py:2:     return 'hello'"
    )


def test_grep_invalid_regex(ctx: ToolContext, tree: Path) -> None:
    out = err(ctx, "grep", pattern="(unclosed")
    assert "invalid regular expression" in out


def test_grep_no_match(ctx: ToolContext, tree: Path) -> None:
    out = ok(ctx, "grep", pattern="zzz_never")
    assert out.startswith("No matches")


def test_grep_output_capped(ctx: ToolContext, ws: Path) -> None:
    (ws / "many.txt").write_text("".join(f"match {i}\n" for i in range(50)))
    out = ok(ctx, "grep", pattern="match", max_results=5)
    lines = out.split("\n")
    assert lines[:5] == [f"many.txt:{i + 1}: match {i}" for i in range(5)]
    assert len(lines) == 6
    assert "capped" in lines[5]
    # not capped when everything fits
    out = ok(ctx, "grep", pattern="match", max_results=50)
    assert "capped" not in out
    assert len(out.split("\n")) == 50


def test_grep_line_numbers_follow_newlines_only(ctx: ToolContext, ws: Path) -> None:
    (ws / "ff.py").write_text("a = 1\n\x0c\nb = 'x\u2028y'\nneedle = 3\n")
    assert ok(ctx, "grep", pattern="needle") == "ff.py:4: needle = 3"


def test_grep_does_not_read_through_symlink_outside(
    ctx: ToolContext, ws: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("TOPSECRET\n")
    (ws / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (ws / "ok.txt").write_text("TOPSECRET? no, public\n")
    out = ok(ctx, "grep", pattern="TOPSECRET")
    assert out == "ok.txt:1: TOPSECRET? no, public"
    err(ctx, "grep", pattern="x", path="..")


def test_grep_with_a_fifo_in_the_tree_does_not_hang(ctx: ToolContext, ws: Path) -> None:
    (ws / "a.txt").write_text("needle\n")
    fifo = ws / "pipe"
    os.mkfifo(fifo)
    thread, box = run_in_thread(lambda: call(ctx, "grep", pattern="needle"))
    thread.join(3)
    hung = thread.is_alive()
    if hung:  # release the blocked open so the thread ends
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(5)
    assert not hung, "grep blocked opening a FIFO"
    assert box["value"].output == "a.txt:1: needle"


# -- shell ----------------------------------------------------------------------------


def test_shell_exit_code_stdout_stderr(ctx: ToolContext) -> None:
    out = ok(ctx, "shell", command="echo out; echo err >&2; exit 3")
    assert out.startswith("exit code: 3")
    assert "stdout:\nout" in out
    assert "stderr:\nerr" in out


def test_shell_success_and_no_output(ctx: ToolContext) -> None:
    assert ok(ctx, "shell", command="true") == "exit code: 0\n(no output)"


def test_shell_runs_in_workspace_and_cwd(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub").mkdir()
    real = os.path.realpath(ws)
    assert f"stdout:\n{real}" in ok(ctx, "shell", command="pwd")
    assert f"stdout:\n{os.path.join(real, 'sub')}" in ok(ctx, "shell", command="pwd", cwd="sub")
    ok(ctx, "shell", command="echo made > here.txt", cwd="sub")
    assert (ws / "sub" / "here.txt").read_text() == "made\n"


def test_shell_cwd_escape_refused(ctx: ToolContext, ws: Path, tmp_path: Path) -> None:
    (ws / "out").symlink_to(tmp_path)
    (ws / "f.txt").write_text("x")
    for cwd in ["..", "../..", "/", str(tmp_path), "out", "missing", "f.txt"]:
        result = call(ctx, "shell", command="touch planted", cwd=cwd)
        assert result.outcome == "error", (cwd, result)
        assert result.is_error
    assert not (tmp_path / "planted").exists()
    assert not Path("/planted").exists()


def test_shell_stdin_is_eof(ctx: ToolContext) -> None:
    out = ok(ctx, "shell", command="cat; read -r line; echo after:$?", timeout=10)
    assert "after:1" in out


def test_shell_timeout_kills_group(ctx: ToolContext, ws: Path) -> None:
    # 5 s: a loaded machine may take a second or more to start bash and run its first line
    result = call(ctx, "shell", command="echo $$ > pid; echo started; sleep 30", timeout=5)
    assert result.outcome == "error"
    assert result.is_error
    assert "timed out" in result.output
    assert "5s" in result.output
    assert "started" in result.output
    pgid = int((ws / "pid").read_text())
    assert_group_gone(pgid)


def test_shell_deadline_of_context_applies(ws: Path) -> None:
    ctx = make_ctx(ws)
    ctx.deadline = time.monotonic() + 5  # time enough for bash to write its pid, loaded or not
    result = call(ctx, "shell", command="echo $$ > pid; sleep 30", timeout=60)
    assert result.is_error
    assert "timed out" in result.output
    assert_group_gone(int((ws / "pid").read_text()))


def test_shell_cancel_from_another_thread(ctx: ToolContext, ws: Path) -> None:
    thread, box = run_in_thread(
        lambda: call(ctx, "shell", command="echo $$ > pid; sleep 30 & sleep 30", timeout=60)
    )
    pid_file = ws / "pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    pgid = int(pid_file.read_text())
    ctx.cancel.cancel("user pressed stop")
    thread.join(10)
    assert not thread.is_alive(), "shell did not return after cancellation"
    result: Invocation = box["value"]
    assert result.outcome == "cancelled"
    assert result.is_error
    assert_group_gone(pgid)


def test_shell_already_cancelled_does_not_run(ctx: ToolContext, ws: Path) -> None:
    ctx.cancel.cancel()
    result = call(ctx, "shell", command="touch ran")
    assert result.outcome == "cancelled"
    assert not (ws / "ran").exists()


@pytest.mark.parametrize(
    "command",
    [
        "sleep 30 & echo $! > bg; echo $$ > pid; echo done",  # leftover holds the pipes
        "sleep 30 >/dev/null 2>&1 & echo $! > bg; echo $$ > pid; echo done",
    ],
)
def test_shell_background_child_is_killed(ctx: ToolContext, ws: Path, command: str) -> None:
    out = ok(ctx, "shell", command=command, timeout=20)
    assert out.startswith("exit code: 0")
    assert "done" in out
    pgid = int((ws / "pid").read_text())
    bg = int((ws / "bg").read_text())
    assert_group_gone(pgid)
    wait_until(lambda: process_gone(bg))


def test_shell_output_capped_head_and_tail(ctx: ToolContext) -> None:
    command = "printf HEAD; head -c 100000 /dev/zero | tr '\\0' x; printf TAIL"
    out = ok(ctx, "shell", command=command)
    assert out.startswith("exit code: 0\nstdout:\nHEAD")
    assert out.endswith("TAIL")
    assert "[… 70008 bytes omitted …]" in out
    assert len(out) < 31_000


def test_shell_stderr_capped_separately(ctx: ToolContext) -> None:
    out = ok(ctx, "shell", command="echo small; head -c 50000 /dev/zero | tr '\\0' e >&2")
    assert "stdout:\nsmall" in out
    assert "[… 20000 bytes omitted …]" in out


def test_shell_exit_code_of_signal(ctx: ToolContext) -> None:
    out = ok(ctx, "shell", command="kill -TERM $$")
    assert re.match(r"exit code: (-15|143)\n", out), out


# -- invoke_tool and the registry ---------------------------------------------------------


def test_unknown_tool(ctx: ToolContext) -> None:
    result = call(ctx, "rm_rf")
    assert result.outcome == "unknown_tool"
    assert result.is_error
    assert "rm_rf" in result.output
    for name in BUILTIN_NAMES:
        assert name in result.output


def test_invalid_arguments_name_each_field(ctx: ToolContext) -> None:
    missing = call(ctx, "read_file")
    assert missing.outcome == "invalid"
    assert missing.is_error
    assert "path" in missing.output

    wrong = call(ctx, "read_file", path="a", offset="ten")
    assert wrong.outcome == "invalid"
    assert "offset" in wrong.output

    extra = call(ctx, "read_file", path="a", bogus=1)
    assert extra.outcome == "invalid"
    assert "bogus" in extra.output

    several = call(ctx, "write_file", content=5, extra_field=True)
    assert several.outcome == "invalid"
    for field in ["path", "content", "extra_field"]:
        assert field in several.output

    out_of_range = call(ctx, "read_file", path="a", offset=0)
    assert out_of_range.outcome == "invalid"
    assert "offset" in out_of_range.output

    shell_timeout = call(ctx, "shell", command="true", timeout=-1)
    assert shell_timeout.outcome == "invalid"
    assert "timeout" in shell_timeout.output


def test_invalid_arguments_do_not_run_the_tool(ctx: ToolContext, ws: Path) -> None:
    result = call(ctx, "write_file", path="x.txt", content="a", mode="append")
    assert result.outcome == "invalid"
    assert not (ws / "x.txt").exists()


class EmptyArgs(ToolArgs):
    pass


def test_tool_raising_plain_exception(ctx: ToolContext) -> None:
    def boom(args: EmptyArgs, ctx: ToolContext) -> str:
        raise KeyError("the key")

    registry = REGISTRY.with_tool(FunctionTool("boom", "explodes", EmptyArgs, boom))
    result = call(ctx, "boom", registry=registry)
    assert result.outcome == "error"
    assert result.is_error
    assert "KeyError" in result.output
    assert "the key" in result.output


def test_registry_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="read_file"):
        ToolRegistry([ReadFile(), ReadFile()])
    with pytest.raises(ValueError):
        default_registry().with_tool(Shell())


def test_with_tool_returns_a_new_registry(ctx: ToolContext) -> None:
    base = default_registry()
    tool = FunctionTool("hello", "says hi", EmptyArgs, lambda args, ctx: "hi")
    extended = base.with_tool(tool)
    assert extended is not base
    assert "hello" in extended
    assert "hello" not in base
    assert len(extended) == len(base) + 1
    assert sorted(base.names()) == BUILTIN_NAMES
    assert call(ctx, "hello", registry=extended).output == "hi"
    assert call(ctx, "hello", registry=base).outcome == "unknown_tool"
    shrunk = extended.without("shell")
    assert "shell" not in shrunk
    assert "shell" in extended


@pytest.mark.parametrize(
    ("name", "required", "properties"),
    [
        ("read_file", {"path"}, {"path", "offset", "limit"}),
        ("write_file", {"path", "content"}, {"path", "content"}),
        (
            "edit",
            {"path", "old_string", "new_string"},
            {"path", "old_string", "new_string", "replace_all", "preview"},
        ),
        ("list_directory", set(), {"path"}),
        ("glob", {"pattern"}, {"pattern", "path"}),
        ("grep", {"pattern"}, {"pattern", "path", "include", "case_insensitive", "max_results"}),
        ("shell", {"command"}, {"command", "timeout", "cwd"}),
    ],
)
def test_definition_schemas(name: str, required: set[str], properties: set[str]) -> None:
    tool = REGISTRY.get(name)
    assert tool is not None
    definition = tool.definition()
    assert definition.name == name
    assert definition.description
    schema = definition.parameters
    assert schema["type"] == "object"
    assert set(schema.get("required", [])) == required  # type: ignore[arg-type]
    assert set(schema["properties"]) == properties  # type: ignore[arg-type]
    assert schema.get("additionalProperties") is False
    assert "title" not in schema


def test_registry_definitions_cover_every_builtin() -> None:
    names = [d.name for d in REGISTRY.definitions()]
    assert sorted(names) == BUILTIN_NAMES
    assert "shell" not in [d.name for d in REGISTRY.definitions(exclude=["shell"])]


def test_results_are_plain_strings(ctx: ToolContext, ws: Path) -> None:
    class Value(BaseModel):
        n: int

    registry = REGISTRY.with_tool(
        FunctionTool("model", "returns a model", EmptyArgs, lambda a, c: Value(n=3))
    ).with_tool(FunctionTool("json", "returns json", EmptyArgs, lambda a, c: {"k": [1, "é"]}))
    assert call(ctx, "model", registry=registry).output == '{"n":3}'
    assert call(ctx, "json", registry=registry).output == '{"k": [1, "é"]}'
