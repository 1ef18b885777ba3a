"""The git-config probe and submodules: ``git status``/``git diff`` run git in each of them.

A superproject's ``git status`` runs ``git status`` inside every populated
gitlink of its index -- ``.gitmodules`` or not, absorbed into ``.git/modules``
or not -- and that git reads the submodule's own config (an fsmonitor hook
there runs). These tests build real repositories with real submodule layouts
and check that the probe reads every such config, and that layouts it cannot
follow are doubt. The index parser gets property tests of its own.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.gate import git_files
from fore.actors.gate.git_config import program_setting
from fore.actors.gate.git_submodules import parse_index_gitlinks
from fore.actors.gate.shell import classify_shell_command, explain_shell_command

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(*args: str, cwd: Path) -> str:
    result = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env=_ENV,
    )
    return result.stdout


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """A repository with one commit, cloned into the superprojects below."""
    path = tmp_path / "upstream"
    path.mkdir()
    git("init", "-q", cwd=path)
    (path / "README").write_text("upstream\n")
    git("add", "README", cwd=path)
    git("commit", "-q", "-m", "init", cwd=path)
    return path


@pytest.fixture
def superproject(tmp_path: Path) -> Path:
    path = tmp_path / "super"
    path.mkdir()
    git("init", "-q", cwd=path)
    (path / "src").mkdir()
    return path


def embed(superproject: Path, upstream: Path, rel: str) -> Path:
    """Clone ``upstream`` to ``rel`` and stage it as a gitlink: its ``.git`` is a directory."""
    target = superproject / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", str(upstream), str(target), cwd=superproject)
    git("add", rel, cwd=superproject)
    return target


GIT_READS = ["git status", "git diff", "git status --short", "git log --oneline"]


def test_a_clean_superproject_with_submodules_stays_read_only(
    superproject: Path, upstream: Path
) -> None:
    embed(superproject, upstream, "vendored")
    git("submodule", "add", "-q", str(upstream), "absorbed", cwd=superproject)
    for command in GIT_READS:
        assert classify_shell_command(command, superproject) == "read-only", command


@pytest.mark.parametrize("key", ["core.fsmonitor", "core.pager", "diff.external", "include.path"])
def test_an_embedded_gitlink_config_is_probed(superproject: Path, upstream: Path, key: str) -> None:
    sub = embed(superproject, upstream, "sub")
    assert (sub / ".git").is_dir()
    assert not (superproject / ".gitmodules").exists()  # the index alone makes it a submodule
    git("config", key, "/tmp/hook", cwd=sub)
    for cwd in (superproject, superproject / "src"):
        assert classify_shell_command("git status", cwd) == "unknown"
        assert classify_shell_command("git diff", cwd) == "unknown"
    reason = explain_shell_command("git status", superproject).reason
    assert "'sub'" in reason and key in reason
    assert classify_shell_command("ls -la", superproject) == "read-only"


def test_a_submodule_with_gitmodules_and_its_own_git_directory(
    superproject: Path, upstream: Path
) -> None:
    git("submodule", "add", "-q", str(upstream), "libs/one", cwd=superproject)
    sub = superproject / "libs" / "one"
    git("submodule", "absorbgitdirs", cwd=superproject)
    # Undo the absorption by hand: move the git directory back into the submodule.
    shutil.rmtree(sub)
    git("clone", "-q", str(upstream), str(sub), cwd=superproject)
    assert (sub / ".git").is_dir()
    assert classify_shell_command("git status", superproject) == "read-only"
    git("config", "core.fsmonitor", "/tmp/hook", cwd=sub)
    assert classify_shell_command("git status", superproject) == "unknown"


def test_a_nested_submodule_is_probed(superproject: Path, upstream: Path, tmp_path: Path) -> None:
    middle = tmp_path / "middle"
    middle.mkdir()
    git("init", "-q", cwd=middle)
    git("commit", "-q", "--allow-empty", "-m", "init", cwd=middle)
    outer = embed(superproject, middle, "outer")
    inner = embed(outer, upstream, "inner")
    assert classify_shell_command("git status", superproject) == "read-only"
    git("config", "diff.foo.textconv", "cat", cwd=inner)
    reason = explain_shell_command("git diff", superproject).reason
    assert "outer/inner" in reason


def test_a_path_only_in_gitmodules_is_probed(superproject: Path, upstream: Path) -> None:
    sub = superproject / "pending"
    git("clone", "-q", str(upstream), str(sub), cwd=superproject)
    (superproject / ".gitmodules").write_text('[submodule "p"]\n\tpath = pending\n\turl = x\n')
    git("config", "core.fsmonitor", "/tmp/hook", cwd=sub)
    assert classify_shell_command("git status", superproject) == "unknown"


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_every_index_version_is_read(superproject: Path, upstream: Path, version: str) -> None:
    for index in range(30):
        (superproject / "src" / f"file{index:02}.py").write_text("x\n")
    git("add", "src", cwd=superproject)
    sub = embed(superproject, upstream, "src/zz/vendored")
    (superproject / "later.py").write_text("y\n")
    git("add", "-N", "later.py", cwd=superproject)  # intent-to-add: an extended entry
    git("update-index", "--index-version", version, cwd=superproject)
    links = parse_index_gitlinks((superproject / ".git" / "index").read_bytes())
    assert links == ("src/zz/vendored",)
    git("config", "core.fsmonitor", "/tmp/hook", cwd=sub)
    assert classify_shell_command("git status", superproject) == "unknown"


def test_a_gitdir_file_pointing_outside_modules_is_doubt(
    superproject: Path, upstream: Path, tmp_path: Path
) -> None:
    sub = embed(superproject, upstream, "sub")
    elsewhere = tmp_path / "elsewhere.git"
    (sub / ".git").rename(elsewhere)
    (sub / ".git").write_text(f"gitdir: {elsewhere}\n")
    assert classify_shell_command("git status", superproject) == "unknown"
    assert "outside" in explain_shell_command("git status", superproject).reason


def test_a_symlinked_submodule_is_doubt(superproject: Path, upstream: Path, tmp_path: Path) -> None:
    real = tmp_path / "real-sub"
    git("clone", "-q", str(upstream), str(real), cwd=tmp_path)
    head = git("rev-parse", "HEAD", cwd=real).strip()
    git("update-index", "--add", "--cacheinfo", f"160000,{head},linked", cwd=superproject)
    (superproject / "linked").symlink_to(real)
    assert classify_shell_command("git status", superproject) == "unknown"


def test_a_linked_worktree_as_a_submodule_is_doubt(
    superproject: Path, upstream: Path, tmp_path: Path
) -> None:
    main = tmp_path / "main-clone"
    git("clone", "-q", str(upstream), str(main), cwd=tmp_path)
    git("worktree", "add", "-q", "--detach", str(superproject / "wt"), cwd=main)
    head = git("rev-parse", "HEAD", cwd=main).strip()
    git("update-index", "--add", "--cacheinfo", f"160000,{head},wt", cwd=superproject)
    assert classify_shell_command("git status", superproject) == "unknown"


def test_too_many_gitlinks_is_doubt(superproject: Path, upstream: Path) -> None:
    head = git("rev-parse", "HEAD", cwd=upstream).strip()
    lines = "".join(f"160000 {head}\tmod{index:03}\n" for index in range(300))
    subprocess.run(
        ["git", "update-index", "--index-info"],
        cwd=superproject,
        input=lines,
        text=True,
        check=True,
        env=_ENV,
    )
    assert classify_shell_command("git status", superproject) == "unknown"
    assert "too many" in explain_shell_command("git status", superproject).reason


def test_unpopulated_submodules_are_not_probed(superproject: Path, upstream: Path) -> None:
    git("submodule", "add", "-q", str(upstream), "lib", cwd=superproject)
    git("commit", "-q", "-m", "with a submodule", cwd=superproject)
    clone = superproject.parent / "fresh"
    git("clone", "-q", str(superproject), str(clone), cwd=superproject.parent)
    assert (clone / "lib").is_dir() and not (clone / "lib" / ".git").exists()
    assert classify_shell_command("git status", clone) == "read-only"


@pytest.mark.parametrize(
    ("key", "value"),
    [("core.worktree", "/somewhere/else"), ("core.splitIndex", "true")],
)
def test_config_that_moves_the_tree_or_the_index_is_doubt(
    superproject: Path, key: str, value: str
) -> None:
    git("config", key, value, cwd=superproject)
    assert classify_shell_command("git status", superproject) == "unknown"


@pytest.mark.parametrize(
    "name", ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG_COUNT", "GIT_EXTERNAL_DIFF"]
)
def test_environment_that_redirects_git_is_doubt(
    superproject: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "1")
    assert classify_shell_command("git status", superproject) == "unknown"
    assert name in explain_shell_command("git status", superproject).reason
    # Without a workspace there is nothing to probe: git is doubt, never read-only.
    assert classify_shell_command("git status", None) == "unknown"


def test_a_relative_directory_is_never_probed(
    superproject: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(superproject)  # a relative path would otherwise resolve in here
    assert program_setting("src") is not None
    assert classify_shell_command("git log", "src") == "unknown"
    # A relative workspace cannot hold any path to the scope rule either.
    assert classify_shell_command("ls", "src") == "unknown"
    assert "absolute" in explain_shell_command("cat x", "src").reason


# ---------------------------------------------------------------------------
# The index parser
# ---------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = [value & 0x7F]
    value >>= 7
    while value:
        value -= 1
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(out))


def build_index(
    entries: list[tuple[str, int, bool]], version: int, hash_size: int = 20, tree: bool = False
) -> bytes:
    """An index file as git writes it: (path, mode, extended) entries, sorted by path."""
    out = bytearray(b"DIRC" + struct.pack(">II", version, len(entries)))
    previous = b""
    for path, mode, extended in sorted(entries):
        name = path.encode()
        start = len(out)
        out += bytes(24) + struct.pack(">I", mode) + bytes(12) + bytes(hash_size)
        out += struct.pack(">H", min(len(name), 0xFFF) | (0x4000 if extended else 0))
        if extended:
            out += struct.pack(">H", 0x2000)
        if version == 4:
            common = 0
            while common < min(len(previous), len(name)) and previous[common] == name[common]:
                common += 1
            out += _varint(len(previous) - common) + name[common:] + b"\0"
        else:
            out += name
            size = (len(out) - start + 8) & ~7
            out += bytes(start + size - len(out))
        previous = name
    if tree:
        out += b"TREE" + struct.pack(">I", 6) + b"\0-1 0\n"
    return bytes(out + bytes(hash_size))


_PATHS = st.text(alphabet="abc/._-é", min_size=1, max_size=30).filter(
    lambda p: not p.startswith("/") and "//" not in p
)
_ENTRIES = st.lists(
    st.tuples(_PATHS, st.sampled_from([0o100644, 0o100755, 0o120000, 0o160000]), st.booleans()),
    max_size=40,
    unique_by=lambda entry: entry[0],
)


@settings(max_examples=300, deadline=None)
@given(_ENTRIES, st.sampled_from([2, 3, 4]), st.sampled_from([20, 32]), st.booleans())
def test_index_parser_finds_exactly_the_gitlinks(
    entries: list[tuple[str, int, bool]], version: int, hash_size: int, tree: bool
) -> None:
    if version == 2:
        entries = [(path, mode, False) for path, mode, _ in entries]
    data = build_index(entries, version, hash_size, tree)
    expected = tuple(path for path, mode, _ in sorted(entries) if mode == 0o160000)
    assert parse_index_gitlinks(data, hash_size) == expected


@settings(max_examples=500, deadline=None)
@given(_ENTRIES, st.sampled_from([2, 3, 4]), st.data())
def test_a_damaged_index_is_parsed_or_doubted_never_crashes(
    entries: list[tuple[str, int, bool]], version: int, data: st.DataObject
) -> None:
    raw = bytearray(build_index(entries, version))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        raw[position] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(raw)))
    for candidate in (bytes(raw), bytes(raw[:cut])):
        try:
            links = parse_index_gitlinks(candidate)
        except git_files._Doubt:
            continue
        assert all(isinstance(link, str) for link in links)


def test_a_split_index_is_doubt() -> None:
    data = bytearray(build_index([("a", 0o100644, False)], 2))
    trailer = data[-20:]
    del data[-20:]
    data += b"link" + struct.pack(">I", 20) + bytes(20) + trailer
    with pytest.raises(git_files._Doubt):
        parse_index_gitlinks(bytes(data))


def test_a_real_split_index_is_doubt(superproject: Path) -> None:
    (superproject / "a.txt").write_text("a\n")
    git("add", "a.txt", cwd=superproject)
    assert classify_shell_command("git status", superproject) == "read-only"
    git("update-index", "--split-index", cwd=superproject)
    assert classify_shell_command("git status", superproject) == "unknown"


def test_the_public_classifier_always_sees_a_submodule_fsmonitor(
    superproject: Path, upstream: Path
) -> None:
    # classify_shell_command(cmd) once skipped the probe without a directory;
    # the workspace is now required, and without one git is doubt.
    sub = embed(superproject, upstream, "lib")
    git("config", "core.fsmonitor", "/tmp/hook", cwd=sub)
    for workspace in (superproject, superproject / "src", None):
        assert classify_shell_command("git status", workspace) == "unknown", workspace
    assert "fsmonitor" in explain_shell_command("git diff", superproject).reason
