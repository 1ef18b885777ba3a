"""A speculation's ``git status`` never takes ``index.lock`` or rewrites ``.git/index``.

``git status`` refreshes a stale index (stat data that no longer matches the
files) and writes it back under ``.git/index.lock``: run by a speculation the
user never approved, that can make the user's own ``git commit`` fail at that
moment ("Another git process seems to be running"). Every shell command runs
with ``GIT_OPTIONAL_LOCKS=0``, so the index is left byte for byte and its mtime
unchanged. Each test first shows, with a plain ``git status`` in a copy of the
same repository, that the index there *is* stale enough to be rewritten, so the
check cannot pass vacuously.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from fore.actors.overlay import OverlayStore
from fore.actors.tools import ToolContext, ToolRegistry, WorkspaceFs, invoke_tool
from fore.actors.tools.builtin import Shell
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.fs import FsView
from fore.actors.tools.gitindex import git_dir, private_index
from fore.messages.conversation import ToolCall

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(repo: Path, *args: str, optional_locks: bool = True) -> str:
    env = {**os.environ, **GIT_ENV}
    env.pop("GIT_OPTIONAL_LOCKS", None)
    if not optional_locks:
        env["GIT_OPTIONAL_LOCKS"] = "0"
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout


def stale_repo(root: Path) -> Path:
    """A repository whose index holds stat data older than its files' (same contents)."""
    root.mkdir()
    git(root, "init", "-q")
    for i in range(20):
        (root / f"f{i}.txt").write_text(f"content {i}\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "init")
    later = time.time() + 5
    for i in range(20):  # same bytes, new mtimes: every entry's stat data is stale
        os.utime(root / f"f{i}.txt", (later, later))
    return root


def snapshot(index: Path) -> tuple[bytes, int]:
    return index.read_bytes(), index.stat().st_mtime_ns


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return stale_repo(tmp_path / "ws")


@pytest.fixture
def control(tmp_path: Path) -> Path:
    """A copy of the same kind of repository, for the plain ``git status``."""
    return stale_repo(tmp_path / "control")


def run_shell(fs: FsView, command: str) -> str:
    ctx = ToolContext(
        fs=fs, cancel=CancelToken(), deadline=time.monotonic() + 60, session_id="s", call_id="c"
    )
    call = ToolCall(id="c", name="shell", arguments={"command": command})
    result = invoke_tool(ToolRegistry([Shell()]), call, ctx)
    assert result.outcome == "ok", result.output
    return str(result.output)


def test_plain_git_status_rewrites_a_stale_index(control: Path) -> None:
    """The premise: without the setting, git status takes the lock and rewrites."""
    before = snapshot(control / ".git" / "index")
    git(control, "status", "--porcelain")
    assert snapshot(control / ".git" / "index") != before


@pytest.mark.parametrize(
    "command", ["git status", "git status --porcelain", "git diff", "git describe --always --dirty"]
)
def test_a_speculative_git_read_leaves_the_index_untouched(
    repo: Path,
    control: Path,
    overlay_store: OverlayStore,
    command: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GIT_OPTIONAL_LOCKS", raising=False)
    before = snapshot(repo / ".git" / "index")
    overlay = overlay_store.create(repo)  # a speculation's view: commands run in the real tree
    out = run_shell(overlay, command)
    assert "exit code: 0" in out
    assert snapshot(repo / ".git" / "index") == before, "the speculation rewrote .git/index"
    assert not (repo / ".git" / "index.lock").exists()


def test_the_main_turns_git_reads_take_no_optional_lock_either(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    before = snapshot(repo / ".git" / "index")
    run_shell(WorkspaceFs(repo), "git status")
    assert snapshot(repo / ".git" / "index") == before
    # while a write git needs still works (its locks are not optional)
    run_shell(WorkspaceFs(repo), "echo more >> f0.txt && git add f0.txt && git commit -qm x")
    assert git(repo, "log", "--oneline").count("\n") == 2


def test_a_speculation_sees_the_same_status_as_the_user(
    repo: Path, overlay_store: OverlayStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in GIT_ENV.items():
        monkeypatch.setenv(name, value)
    (repo / "f3.txt").write_text("changed\n")
    (repo / "new.txt").write_text("new\n")
    expected = git(repo, "status", "--porcelain", optional_locks=False)
    before = snapshot(repo / ".git" / "index")
    out = run_shell(overlay_store.create(repo), "git status --porcelain")
    assert out == "exit code: 0\nstdout:\n" + expected.rstrip("\n")
    assert snapshot(repo / ".git" / "index") == before


def test_the_repository_is_found_as_git_finds_it(tmp_path: Path) -> None:
    main = stale_repo(tmp_path / "main")
    (main / "sub" / "dir").mkdir(parents=True)
    assert git_dir(str(main / "sub" / "dir"), {}) == str(main / ".git")
    linked = tmp_path / "linked"
    git(main, "worktree", "add", "-q", str(linked))
    gitdir = git_dir(str(linked), {})
    assert gitdir is not None and Path(gitdir).parent == main / ".git" / "worktrees"
    assert git_dir(str(tmp_path), {"GIT_DIR": "main/.git"}) == str(main / ".git")
    assert git_dir("/", {}) is None or Path("/.git").exists()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    extra = private_index(str(linked), {}, str(scratch))
    assert Path(extra["GIT_INDEX_FILE"]).read_bytes() == (Path(gitdir) / "index").read_bytes()
