"""The classifier against real bash: whatever it calls read-only must not change anything.

Hypothesis builds commands from a small grammar of the constructs where
tree-sitter and bash are most likely to disagree -- ``${...}`` operators,
quoting contexts (single, double, ``$'...'``, ``$"..."``, backslashes),
here-documents and here-strings, command and process substitutions -- around
an inner command that writes (``touch CANARY`` and friends). Every command the
classifier calls ``read-only`` is then run with ``bash -c`` in a scratch
directory whose files are snapshotted before and after: nothing may change and
no canary may appear. Commands it does not call read-only are not run.

The run is bounded: a fixed number of examples, a deadline per command (a
command that hangs is killed with its whole process group), and only the
read-only ones reach bash. Completion is an event, not a sleep: every process
the command starts inherits one end of a pipe, and the pipe reads EOF only
when the last of them -- a process substitution bash did not wait for, say --
has exited.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from fore.actors.gate.shell import classify_shell_command
from fore.bench.shell_corpus import load_corpus, make_workspace

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")

COMMAND_DEADLINE = 5.0
"""Seconds a command may run before its process group is killed (not a test assertion)."""

Snapshot = dict[str, tuple[str, int, str]]


def _snapshot(root: Path) -> Snapshot:
    """Every entry under ``root``: its kind, permission bits and content (or link target)."""
    entries: Snapshot = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(directory) / name
            info = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                entries[rel] = ("link", info.st_mode & 0o7777, os.readlink(path))
            elif path.is_dir():
                entries[rel] = ("dir", info.st_mode & 0o7777, "")
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                entries[rel] = ("file", info.st_mode & 0o7777, digest)
    return entries


def _scratch(root: Path) -> Path:
    work = root / "work"
    (work / "home").mkdir(parents=True)
    (work / "sub").mkdir()
    (work / "victim").write_text("original\n")
    (work / "sub" / "data.txt").write_text("a\nb\n")
    return work


def _run_bash(command: str, cwd: Path) -> None:
    """Run ``command`` with ``bash -c`` in ``cwd`` until every process it started has exited."""
    assert BASH is not None
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(cwd / "home"),
        "PWD": str(cwd),
        "LC_ALL": "C",
        "SET": "value",
    }
    read_end, write_end = os.pipe()
    try:
        process = subprocess.Popen(
            [BASH, "-c", command],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write_end,),
            start_new_session=True,
        )
    finally:
        os.close(write_end)
    try:
        deadline = time.monotonic() + COMMAND_DEADLINE
        while (remaining := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([read_end], [], [], remaining)
            if ready and not os.read(read_end, 4096):
                break  # EOF: the last process holding the pipe has exited
    finally:
        os.close(read_end)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def bash_changes(command: str, root: Path) -> list[str]:
    """What running ``command`` in a fresh scratch directory under ``root`` changed."""
    work = _scratch(root)
    changed = changes_in(command, work, root)
    shutil.rmtree(root / "work", ignore_errors=True)
    return changed


def changes_in(command: str, work: Path, watched: Path) -> list[str]:
    """What running ``command`` in ``work`` changed anywhere under ``watched``."""
    before = _snapshot(watched)
    _run_bash(command, work)
    after = _snapshot(watched)
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )


# ---------------------------------------------------------------------------
# The oracle itself
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "touch CANARY",
        "rm victim",
        "echo x >> victim",
        "chmod 600 victim",
        "echo ${PWD%$(touch CANARY)}",
        "cat <(touch CANARY)",
        "echo hi > >(touch CANARY)",
        "(sleep 0.2; touch CANARY) & echo started",
    ],
)
def test_the_oracle_sees_writes(command: str, tmp_path: Path) -> None:
    assert bash_changes(command, tmp_path)


@pytest.mark.parametrize("command", ["echo hi", "cat victim", "ls -la sub", "grep a sub/data.txt"])
def test_the_oracle_sees_no_change_for_reads(command: str, tmp_path: Path) -> None:
    assert classify_shell_command(command, _scratch(tmp_path)) == "read-only"
    shutil.rmtree(tmp_path / "work")
    assert bash_changes(command, tmp_path) == []


# ---------------------------------------------------------------------------
# The grammar
# ---------------------------------------------------------------------------

PAYLOADS = ["touch CANARY", "rm -f victim", "echo x >> victim", "mv victim CANARY"]
VARIABLES = ["HOME", "PWD", "SET", "x", "1", "@", "*"]
OPERATORS = [
    "#", "##", "%", "%%", "/", "//", "/#", "/%", "^", "^^", ",", ",,",
    ":-", "-", ":+", "+", ":=", "=", ":?", "?", "/a/",
]  # fmt: skip


def _substitution(payload: str) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [f"$({payload})", f"`{payload}`", f"$( {payload} )", f"<({payload})", f">({payload})"]
    )


LEAVES = st.one_of(
    st.sampled_from(PAYLOADS).flatmap(_substitution),
    st.sampled_from(["a", "$HOME", "*", "x y", "${SET}", "/", "'q'", '"d"']),
)


def _wrap(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    expansion = st.tuples(st.sampled_from(VARIABLES), st.sampled_from(OPERATORS), inner).map(
        lambda t: f"${{{t[0]}{t[1]}{t[2]}}}"
    )
    return st.one_of(
        expansion,
        expansion,
        inner.map(lambda w: f"'{w}'"),
        inner.map(lambda w: f'"{w}"'),
        inner.map(lambda w: f"$'{w}'"),
        inner.map(lambda w: f'$"{w}"'),
        inner.map(lambda w: f"\\{w}"),
        inner.map(lambda w: f"[{w}]"),
        inner.map(lambda w: f"{w}*"),
        st.tuples(inner, inner).map(lambda t: f"{t[0]}{t[1]}"),
    )


WORDS = st.recursive(LEAVES, _wrap, max_leaves=5)

FORMS = [
    "echo {w}",
    'echo "{w}"',
    "printf '%s\\n' {w}",
    "ls {w} 2>/dev/null",
    "grep x {w} 2>/dev/null",
    "cat <<< {w}",
    'cat <<< "{w}"',
    "cat <<EOF\n{w}\nEOF",
    "cat <<'EOF'\n{w}\nEOF",
    "cat <<-EOF\n\t{w}\n\tEOF",
    "echo {w} | cat",
    "true && echo {w}",
    "ls; echo {w}",
    "cat <<EOF\nline $HOME\n{w}\nEOF",
]

COMMANDS = st.tuples(st.sampled_from(FORMS), WORDS).map(lambda t: t[0].replace("{w}", t[1]))


@settings(max_examples=400, deadline=None)
@given(command=COMMANDS)
@example(command="echo ${PWD%$(touch CANARY)}")
@example(command="echo \"${x:-'$(touch CANARY)'}\"")
@example(command="cat <<EOF\n${x:-'$(touch CANARY)'}\nEOF")
@example(command="echo \"${x:-$'$(touch CANARY)'}\"")
@example(command="echo ${HOME,,`touch CANARY`}")
@example(command="echo ${PWD##<(touch CANARY)}")
@example(command="echo ${HOME#${x:-$(touch CANARY)}}")
def test_read_only_commands_change_nothing_in_real_bash(
    command: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = tmp_path_factory.mktemp("bash")
    work = _scratch(root)
    verdict = classify_shell_command(command, work)
    event(verdict)
    if verdict != "read-only":
        return
    changed = changes_in(command, work, root)
    assert changed == [], f"read-only {command!r} changed {changed}"


# ---------------------------------------------------------------------------
# The corpus in real bash
# ---------------------------------------------------------------------------


def test_every_read_only_corpus_command_changes_nothing_in_real_bash(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Each command the corpus (ours and the peers') calls read-only, run for real.

    It runs in the corpus workspace, next to the ``outside`` directory its
    symlinks lead to; neither may change. (A write the classifier missed
    would show here; reads are the scope rule's business, tested apart.)
    """
    root = tmp_path_factory.mktemp("corpus-bash")
    workspace = make_workspace(root)
    (workspace / "home").mkdir()
    commands = [entry.command for entry in load_corpus() if entry.expected == "read-only"]
    assert len(commands) > 400
    failures: list[str] = []
    for command in commands:
        assert classify_shell_command(command, workspace) == "read-only", command
        changed = changes_in(command, workspace, root)
        if changed:
            failures.append(f"{command!r} changed {changed}")
    assert failures == []
