"""The one scope rule (``resolve_in_workspace``): pure examples, the kernel as oracle, and
the file tools and the shell gate agreeing on every path (issue 19, point 2)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fore.actors.gate.rules import Severity
from fore.actors.gate.shell import explain_shell_command
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.paths import (
    Entry,
    FsError,
    PathOutOfScope,
    lstat_lookup,
    resolve_in_workspace,
)

ROOT = "/ws"
TREE = {
    "a": Entry("dir"),
    "a/f": Entry("file"),
    "a/b": Entry("dir"),
    "in": Entry("link", "a"),
    "up": Entry("link", "../x"),
    "abs_in": Entry("link", "/ws/a/f"),
    "abs_out": Entry("link", "/etc"),
    "deep": Entry("link", "a/b/../../../x"),
    "loop": Entry("link", "loop"),
}


def _lookup(rel: str) -> Entry:
    return TREE.get(rel, Entry("missing"))


@pytest.mark.parametrize(
    ("path", "rel", "stop"),
    [
        ("a/f", "a/f", "ok"),
        ("./a//f", "a/f", "ok"),
        ("in/f", "a/f", "ok"),
        ("in/../a/f", "a/f", "ok"),  # physical: in -> a, then up to the root
        ("abs_in", "a/f", "ok"),
        ("/ws/a/f", "a/f", "ok"),
        ("/ws", "", "ok"),
        ("a/f/x", "a/f/x", "not_dir"),
        ("nope/../../x", "nope/../../x", "missing"),  # the kernel stops at "nope"
    ],
)
def test_paths_in_scope(path: str, rel: str, stop: str) -> None:
    found = resolve_in_workspace(path, ROOT, _lookup)
    assert (found.rel, found.stop) == (rel, stop)


@pytest.mark.parametrize(
    "path",
    ["..", "../ws/a", "a/../..", "up", "abs_out/passwd", "deep", "/etc/passwd", "/", "/wsx/a",
     "~/x", "~", "in/../../x", "/ws/../ws/a"],
)  # fmt: skip
def test_paths_out_of_scope(path: str) -> None:
    with pytest.raises(PathOutOfScope):
        resolve_in_workspace(path, ROOT, _lookup)


def test_a_symlink_loop_and_a_nul_are_errors_not_hangs() -> None:
    with pytest.raises(FsError, match="too many levels"):
        resolve_in_workspace("loop", ROOT, _lookup)
    with pytest.raises(FsError, match="NUL"):
        resolve_in_workspace("a\x00b", ROOT, _lookup)


def test_relative_paths_start_at_the_given_directory() -> None:
    assert resolve_in_workspace("../f", ROOT, _lookup, cwd="a/b").rel == "a/f"
    with pytest.raises(PathOutOfScope):
        resolve_in_workspace("../../..", ROOT, _lookup, cwd="a/b")


# ---------------------------------------------------------------------------
# Against the kernel: a random tree on disk, random paths
# ---------------------------------------------------------------------------

NAMES = ["a", "b", "c", ".", ".."]
_COMPONENT = st.sampled_from(NAMES)
_RELATIVE = st.lists(_COMPONENT, min_size=1, max_size=5).map("/".join)


@st.composite
def _trees(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """Entries ``(path, kind, target)``: directories, files and symlinks in and out."""
    entries: list[tuple[str, str, str]] = []
    for parent in ("", "a", "b"):
        for name in ("a", "b", "c"):
            path = f"{parent}/{name}".lstrip("/")
            if parent and parent not in [e[0] for e in entries if e[1] == "dir"]:
                continue
            kind = draw(st.sampled_from(["dir", "file", "link", "none"]))
            target = ""
            if kind == "link":
                target = draw(
                    st.one_of(
                        _RELATIVE,
                        st.sampled_from(
                            ["/OUT", "/OUT/d", "/ROOT/a", "/ROOT", "../..", "../OUTSIDE"]
                        ),
                    )
                )
            if kind != "none":
                entries.append((path, kind, target))
    return entries


def _materialise(base: Path, entries: list[tuple[str, str, str]]) -> Path:
    root = base / "root"
    outside = base / "OUT"
    for directory in (root, outside, outside / "d", base / "OUTSIDE"):
        directory.mkdir(parents=True, exist_ok=True)
    for path, kind, target in entries:
        full = root / path
        if not full.parent.is_dir() or full.parent.is_symlink() or os.path.lexists(full):
            continue
        if kind == "dir":
            full.mkdir()
        elif kind == "file":
            full.write_text("x")
        else:
            real = target.replace("/OUT", str(outside)).replace("/ROOT", str(root))
            full.symlink_to(real)
    return Path(os.path.realpath(root))


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tree=_trees(), path=st.one_of(_RELATIVE, _RELATIVE.map(lambda p: "/ROOT/" + p)))
def test_never_in_scope_where_the_kernel_lands_outside(
    tree: list[tuple[str, str, str]], path: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root = _materialise(tmp_path_factory.mktemp("tree"), tree)
    text = path.replace("/ROOT", str(root))
    landed = os.path.realpath(os.path.join(root, text))
    inside = landed == str(root) or landed.startswith(str(root) + os.sep)
    try:
        found = resolve_in_workspace(text, str(root), lstat_lookup(str(root)))
    except PathOutOfScope:
        return  # refusing is always safe
    except FsError:
        return
    if found.stop == "ok":
        # Where the rule says the path lands is where the kernel lands.
        assert landed == os.path.join(root, found.rel).rstrip("/") or found.rel == ""
        assert inside, (text, landed)
    elif os.path.exists(landed):
        # The kernel could not finish either (a missing name, a file used as a directory).
        assert not os.path.exists(os.path.join(root, text)) or inside


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tree=_trees(), path=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4))
def test_the_file_tools_and_the_shell_gate_refuse_the_same_paths(
    tree: list[tuple[str, str, str]], path: list[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """One rule: a path without ``..`` is out of scope for ``read_file`` iff for ``cat``."""
    root = _materialise(tmp_path_factory.mktemp("tree"), tree)
    text = "/".join(path)
    try:
        WorkspaceFs(root).resolve(text)
        tools_refuse = False
    except PathOutOfScope:
        tools_refuse = True
    except FsError:
        return  # not a scope question (a loop, a file used as a directory)
    verdict = explain_shell_command(f"cat {shlex.quote(text)}", root)
    shell_refuses = verdict.severity is not Severity.READ_ONLY
    assert shell_refuses == tools_refuse, (text, verdict.reason)
    if shell_refuses:
        assert "outside the workspace" in verdict.reason
