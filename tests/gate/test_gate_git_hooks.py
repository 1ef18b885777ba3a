"""The git-config probe and what else makes a "read-only" git command run a program.

Besides config keys that name programs, three things in a repository make
``git status``/``git diff``/``git log`` run something: an executable hook in
the git directory (``git status`` runs ``post-index-change`` when it refreshes
the index), a log format with a signature placeholder (``format.pretty`` or a
``pretty.<name>`` alias holding ``%G?`` runs gpg), and a partial clone (a
missing object is fetched from the promisor remote). Each test first shows on
a real repository that git really does run the program, then that the
classifier and the gate refuse the command there.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from fore.actors.gate.git_config import program_setting
from fore.actors.gate.shell import classify_shell_command, explain_shell_command
from fore.actors.gate.tool_gate import evaluate_tool_call
from fore.messages.gate import GateAction

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


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        env=env or _ENV,
        timeout=60,
    )
    return result.stdout


def canary_script(path: Path, canary: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch '{canary}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one tracked file and git's default (sample) hooks."""
    path = tmp_path / "repo"
    path.mkdir()
    git("init", "-q", cwd=path)
    (path / "f.txt").write_text("one\n")
    (path / "src").mkdir()
    git("add", "f.txt", cwd=path)
    git("commit", "-q", "-m", "init", cwd=path)
    return path


def touch_tracked(repo: Path, name: str = "f.txt") -> None:
    """Change a tracked file's stat data so the next ``git status`` refreshes the index."""
    target = repo / name
    stat_result = target.stat()
    os.utime(target, ns=(stat_result.st_atime_ns, stat_result.st_mtime_ns + 2_000_000_000))


READ_ONLY_GIT = ["git status", "git diff", "git describe --dirty --always", "git log --oneline"]


def test_default_sample_hooks_keep_git_read_only(repo: Path) -> None:
    samples = list((repo / ".git" / "hooks").glob("*.sample"))
    if not any(os.access(sample, os.X_OK) for sample in samples):
        pytest.skip("this git's template has no executable sample hooks")
    for command in READ_ONLY_GIT:
        assert classify_shell_command(command, repo) == "read-only", command


def test_post_index_change_hook_makes_git_reads_unknown(repo: Path, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    canary_script(repo / ".git" / "hooks" / "post-index-change", canary)
    # The premise: a plain `git status` really runs the hook.
    touch_tracked(repo)
    git("status", "--short", cwd=repo)
    assert canary.exists(), "git status did not run post-index-change"

    for command in READ_ONLY_GIT:
        for cwd in (repo, repo / "src"):
            assert classify_shell_command(command, cwd) == "unknown", (command, cwd)
    reason = explain_shell_command("git status", repo).reason
    assert "post-index-change" in reason
    decision = evaluate_tool_call("shell", {"command": "git status"}, "yolo", cwd=repo)
    assert decision.action is GateAction.BOUNDARY
    assert "hook" in decision.reason
    # Only git is affected, and writes stay writes.
    assert classify_shell_command("ls -la", repo) == "read-only"
    assert classify_shell_command("git commit -m x", repo) == "write"


@pytest.mark.parametrize(
    "name", ["post-index-change", "fsmonitor-watchman", "reference-transaction", "anything"]
)
def test_any_executable_hook_is_doubt(repo: Path, tmp_path: Path, name: str) -> None:
    canary_script(repo / ".git" / "hooks" / name, tmp_path / "CANARY")
    assert classify_shell_command("git status", repo) == "unknown"
    assert program_setting(repo) is not None


def test_a_hook_that_is_not_executable_does_not_run(repo: Path, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    hook = canary_script(repo / ".git" / "hooks" / "post-index-change", canary)
    hook.chmod(0o644)
    if os.access(hook, os.X_OK):
        pytest.skip("running with privileges that make every file executable")
    touch_tracked(repo)
    git("status", "--short", cwd=repo)
    assert not canary.exists()
    assert classify_shell_command("git status", repo) == "read-only"
    hook.chmod(0o755)
    assert classify_shell_command("git status", repo) == "unknown"


def test_a_symlinked_hook_counts(repo: Path, tmp_path: Path) -> None:
    target = canary_script(tmp_path / "elsewhere" / "hook", tmp_path / "CANARY")
    (repo / ".git" / "hooks" / "post-index-change").symlink_to(target)
    assert classify_shell_command("git diff", repo) == "unknown"


def test_a_hooks_directory_too_large_to_check_is_doubt(repo: Path) -> None:
    hooks = repo / ".git" / "hooks"
    for index in range(300):
        (hooks / f"note{index}.sample").write_text("")
    assert classify_shell_command("git status", repo) == "unknown"
    assert "too many" in explain_shell_command("git status", repo).reason


def test_core_hooks_path_is_doubt_wherever_it_points(repo: Path, tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    canary = tmp_path / "CANARY"
    canary_script(hooks / "post-index-change", canary)
    git("config", "core.hooksPath", str(hooks), cwd=repo)
    touch_tracked(repo)
    git("status", "--short", cwd=repo)
    assert canary.exists(), "git status did not run the hook from core.hooksPath"
    assert classify_shell_command("git status", repo) == "unknown"
    assert "core.hookspath" in explain_shell_command("git status", repo).reason


def test_hooks_of_a_linked_worktree_live_in_the_common_directory(
    repo: Path, tmp_path: Path
) -> None:
    worktree = tmp_path / "wt"
    git("worktree", "add", "-q", str(worktree), cwd=repo)
    assert classify_shell_command("git status", worktree) == "read-only"
    canary = tmp_path / "CANARY"
    canary_script(repo / ".git" / "hooks" / "post-index-change", canary)
    touch_tracked(worktree)
    git("status", "--short", cwd=worktree)
    assert canary.exists(), "git status in the worktree did not run the common hook"
    assert classify_shell_command("git status", worktree) == "unknown"


def test_hooks_of_a_submodule_are_probed(repo: Path, tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git("init", "-q", cwd=upstream)
    (upstream / "README").write_text("up\n")
    git("add", "README", cwd=upstream)
    git("commit", "-q", "-m", "init", cwd=upstream)
    git("submodule", "add", "-q", str(upstream), "lib", cwd=repo)
    git("commit", "-q", "-m", "sub", cwd=repo)
    assert classify_shell_command("git status", repo) == "read-only"
    module_hooks = repo / ".git" / "modules" / "lib" / "hooks"
    canary = tmp_path / "CANARY"
    canary_script(module_hooks / "post-index-change", canary)
    touch_tracked(repo / "lib", "README")
    git("status", "--short", cwd=repo)
    assert canary.exists(), "the superproject's git status did not run the submodule's hook"
    assert classify_shell_command("git status", repo) == "unknown"
    assert "post-index-change" in explain_shell_command("git status", repo).reason


def test_an_absorbed_module_that_is_not_checked_out_is_probed_too(repo: Path) -> None:
    module = repo / ".git" / "modules" / "lib"
    (module / "hooks").mkdir(parents=True)
    (module / "config").write_text("[core]\n\tbare = false\n")
    assert classify_shell_command("git status", repo) == "read-only"
    hook = module / "hooks" / "post-index-change"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    assert classify_shell_command("git status", repo) == "unknown"


# ---------------------------------------------------------------------------
# Signature placeholders in configured log formats
# ---------------------------------------------------------------------------


def signed_head(repo: Path) -> None:
    """Point HEAD at a commit that carries a (bogus) gpgsig header."""
    tree = git("write-tree", cwd=repo).strip()
    body = (
        f"tree {tree}\nauthor t <t@e> 1 +0000\ncommitter t <t@e> 1 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n abc\n -----END PGP SIGNATURE-----\n\nsigned\n"
    )
    commit = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
        cwd=repo,
        input=body,
        check=True,
        capture_output=True,
        text=True,
        env=_ENV,
    ).stdout.strip()
    git("update-ref", "HEAD", commit, cwd=repo)


def gpg_runs(repo: Path, tmp_path: Path, *log_args: str) -> bool:
    """Whether ``git log`` would run gpg: gpg.program is pointed at a canary on the command line."""
    canary = tmp_path / "GPG_RAN"
    fake_gpg = canary_script(tmp_path / "fake-gpg", canary)
    git("-c", f"gpg.program={fake_gpg}", "log", "-1", *log_args, cwd=repo)
    return canary.exists()


@pytest.mark.parametrize(
    ("key", "value", "log_args"),
    [
        ("format.pretty", "format:%h %G?", ()),
        ("format.pretty", "%GS", ()),
        ("pretty.sig", "format:%h %GK", ("--pretty=sig",)),
    ],
)
def test_a_log_format_with_a_signature_placeholder_is_doubt(
    repo: Path, tmp_path: Path, key: str, value: str, log_args: tuple[str, ...]
) -> None:
    signed_head(repo)
    assert classify_shell_command("git log -1", repo) == "read-only"
    git("config", key, value, cwd=repo)
    assert gpg_runs(repo, tmp_path, *log_args), "git log did not run gpg"
    for command in ("git log -1", f"git log -1 {' '.join(log_args)}".strip(), "git show"):
        assert classify_shell_command(command, repo) == "unknown", command
    assert "gpg" in explain_shell_command("git log", repo).reason


@pytest.mark.parametrize(
    ("key", "value"), [("format.pretty", "format:%h %s"), ("pretty.short1", "%h %an")]
)
def test_a_log_format_without_signatures_stays_read_only(repo: Path, key: str, value: str) -> None:
    git("config", key, value, cwd=repo)
    assert classify_shell_command("git log -1", repo) == "read-only"


# ---------------------------------------------------------------------------
# Partial clones
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("remote.origin.promisor", "true"),
        ("remote.origin.partialclonefilter", "blob:none"),
        ("extensions.partialClone", "origin"),
    ],
)
def test_a_partial_clone_is_doubt(repo: Path, key: str, value: str) -> None:
    git("config", key, value, cwd=repo)
    assert classify_shell_command("git show HEAD", repo) == "unknown"
    assert "remote" in explain_shell_command("git show HEAD", repo).reason


def test_a_real_partial_clone_is_doubt(repo: Path, tmp_path: Path) -> None:
    clone = tmp_path / "partial"
    git("config", "uploadpack.allowFilter", "true", cwd=repo)
    git(
        "clone",
        "-q",
        "--filter=blob:none",
        "--no-checkout",
        f"file://{repo}",
        str(clone),
        cwd=tmp_path,
    )
    assert classify_shell_command("git log -p", clone) == "unknown"


# ---------------------------------------------------------------------------
# git --no-pager / -P: read-only, and still probed
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", ["git --no-pager log -1", "git -P diff", "git --no-optional-locks status"]
)
def test_pager_free_forms_are_read_only_and_still_probed(
    repo: Path, tmp_path: Path, command: str
) -> None:
    assert classify_shell_command(command, repo) == "read-only"
    allowed = evaluate_tool_call("shell", {"command": command}, "default", cwd=repo)
    assert allowed.action is GateAction.ALLOW
    canary_script(repo / ".git" / "hooks" / "post-index-change", tmp_path / "CANARY")
    assert classify_shell_command(command, repo) == "unknown"


# ---------------------------------------------------------------------------
# Keys that name a program, by pattern (issue 19, point 8)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        # git 2.54 config-based hooks: `git status` runs this on post-index-change.
        '[hook "audit"]\n\tevent = post-index-change\n\tcommand = touch /tmp/x\n',
        '[hook "audit"]\n\tevent = post-index-change\n',
        "[sendemail]\n\ttoCmd = ./who\n",
        '[gpg "ssh"]\n\tdefaultKeyCommand = ssh-add -L\n',
        '[merge "ours"]\n\tdriver = ./merge %O %A %B\n',
        "[newfeature]\n\tprogram = ./x\n",
        '[something "x"]\n\thelper = ./x\n',
        "[future]\n\tpostCmd = ./x\n",
        '[frob "y"]\n\ttool = ./x\n',
        "[uploadpack]\n\tpackObjectsHook = ./x\n",
    ],
)
def test_any_key_whose_last_part_names_a_program_makes_git_unknown(repo: Path, text: str) -> None:
    with (repo / ".git" / "config").open("a") as config:
        config.write(text)
    for command in READ_ONLY_GIT:
        assert classify_shell_command(command, repo) == "unknown", (command, text)
    assert "can run a program" in explain_shell_command("git status", repo).reason


@pytest.mark.parametrize(
    "text",
    ["[user]\n\tname = x\n", '[submodule "lib"]\n\tpath = lib\n', "[core]\n\tautocrlf = false\n"],
)
def test_keys_that_name_no_program_keep_git_read_only(repo: Path, text: str) -> None:
    with (repo / ".git" / "config").open("a") as config:
        config.write(text)
    assert classify_shell_command("git status", repo) == "read-only"


def test_without_a_workspace_git_is_never_read_only(repo: Path) -> None:
    # The public classifier used to skip the config probe when no directory was given.
    with (repo / ".git" / "config").open("a") as config:
        config.write("[core]\n\tfsmonitor = ./x\n")
    assert classify_shell_command("git status", repo) == "unknown"
    assert classify_shell_command("git status", None) == "unknown"
    with pytest.raises(TypeError):
        classify_shell_command("git status")  # type: ignore[call-arg]
