"""Walks never follow a directory swapped for a symlink out of the workspace (issue 19, point 5).

A separate process swaps a directory of the workspace for a symlink to an outside
directory and back, tens of thousands of times, while ``glob`` and ``grep`` walk
the workspace -- through the real workspace view and through a speculation's
overlay. No name from outside may ever appear. (Walking by path, ``os.walk`` and
``os.scandir(path)`` listed the outside directory's files as ``sub/…``.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fore.actors.overlay import OverlayStore
from fore.actors.tools import ToolContext, default_registry, invoke_tool
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.fs import MAX_WALK_DEPTH, FsView, WorkspaceFs, walk_files
from fore.messages.conversation import ToolCall
from tests.processes import fds_under

SWAPS = 20_000
REGISTRY = default_registry()

SWAPPER = r"""
import os, sys
ws, outside, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
sub, real = os.path.join(ws, "a", "sub"), os.path.join(ws, "a", ".sub-real")
print("ready", flush=True)
for _ in range(count):
    os.rename(sub, real)
    os.symlink(outside, sub)
    os.unlink(sub)
    os.rename(real, sub)
"""


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    (ws / "a" / "sub" / "deeper").mkdir(parents=True)
    (ws / "a" / "sub" / "inside.txt").write_text("inside\n")
    (ws / "a" / "sub" / "deeper" / "also_inside.txt").write_text("inside\n")
    (ws / "top.txt").write_text("top\n")
    outside = tmp_path / "outside"
    (outside / "nested").mkdir(parents=True)
    for index in range(20):
        (outside / f"secret{index}.txt").write_text("SECRET\n")
    (outside / "nested" / "secret_nested.txt").write_text("SECRET\n")
    return ws, outside


@pytest.fixture
def swapper(tree: tuple[Path, Path]) -> Iterator[subprocess.Popen[str]]:
    ws, outside = tree
    proc = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws), str(outside), str(SWAPS)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(60)
        proc.stdout.close()


def walk_until_done(fs: FsView, proc: subprocess.Popen[str]) -> tuple[int, set[str]]:
    """Glob and grep until the swapper has finished; every name seen."""
    seen: set[str] = set()
    walks = 0
    while proc.poll() is None:
        seen.update(fs.iter_files(""))
        seen.update(fs.iter_files("a"))
        for name, arguments in (("glob", {"pattern": "**/*.txt"}), ("grep", {"pattern": "S"})):
            ctx = ToolContext(
                fs=fs,
                cancel=CancelToken(),
                deadline=time.monotonic() + 30,
                session_id="s",
                call_id="c",
            )
            result = invoke_tool(REGISTRY, ToolCall(id="c", name=name, arguments=arguments), ctx)
            seen.update(str(result.output).splitlines())
        walks += 1
    assert proc.returncode == 0
    return walks, seen


def assert_inside_only(seen: set[str]) -> None:
    leaked = sorted(name for name in seen if "secret" in name or "SECRET" in name)
    assert leaked == [], leaked[:5]


def test_glob_of_the_workspace_never_lists_outside_names(
    tree: tuple[Path, Path], swapper: subprocess.Popen[str]
) -> None:
    ws, _ = tree
    walks, seen = walk_until_done(WorkspaceFs(ws), swapper)
    assert walks > 0
    assert "top.txt" in seen
    assert_inside_only(seen)


def test_glob_of_an_overlay_never_lists_outside_names(
    tree: tuple[Path, Path], swapper: subprocess.Popen[str], tmp_path: Path
) -> None:
    ws, _ = tree
    store = OverlayStore(tmp_path / "overlays")
    ov = store.create(ws)
    ov.write_bytes("a/written.txt", b"in the overlay\n")  # the union walk, overlay-aware
    try:
        walks, seen = walk_until_done(ov, swapper)
    finally:
        ov.remove()
        store.close()
    assert walks > 0
    assert "a/written.txt" in seen
    assert_inside_only(seen)


def test_the_walk_keeps_os_walk_order_and_classification(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for rel in ("b/z.txt", "b/a.txt", "a.txt", "c/d/e.txt", "node_modules/x.js", ".git/c"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("x")
    (ws / "link_to_dir").symlink_to(ws / "b")
    (ws / "link_to_file").symlink_to(ws / "a.txt")
    (ws / "dangling").symlink_to(ws / "nowhere")
    expected = []
    for dirpath, dirnames, filenames in os.walk(ws):
        dirnames[:] = sorted(d for d in dirnames if d not in {"node_modules", ".git"})
        rel = os.path.relpath(dirpath, ws)
        expected += [f if rel == "." else f"{rel}/{f}" for f in sorted(filenames)]
    assert list(WorkspaceFs(ws).iter_files("")) == expected
    assert list(WorkspaceFs(ws).iter_files("b")) == ["b/a.txt", "b/z.txt"]


def test_a_hostile_depth_is_bounded_and_descriptors_are_released(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    deep = ws
    for _ in range(MAX_WALK_DEPTH + 20):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("x")
    (ws / "top.txt").write_text("x")
    assert fds_under(ws) == []
    assert list(WorkspaceFs(ws).iter_files("")) == ["top.txt"]
    walk = walk_files(os.open(ws, os.O_RDONLY | os.O_DIRECTORY), "")
    assert next(walk) == "top.txt"
    walk.close()  # abandoned mid-walk: every descriptor is closed
    assert fds_under(ws) == []
