"""Closing a session or the runtime leaves no speculation overlay behind (issue 30).

``Session.close()`` and ``Runtime.close()`` return only once every overlay
they are responsible for is gone from disk -- or say they could not (the
close returns False, and what is left is named with its reason). The
failures reproduced here were all in the hand-off: the overlay's removal is
asynchronous (a speculation's teardown, the blocking lane), and a close that did
not wait for it returned "clean" with overlays on disk, some of which were
never removed at all.

Each scenario is made deterministic by event order: a job that holds the
blocking lane until the lane shuts down, a speculation's model request held
by the test, an apply held at a fault hook. Nothing is timed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import fore.actors.speculation.accept as accept_module
from fore.actors.llm import ScriptedModel
from fore.actors.overlay import apply_overlay
from fore.actors.speculation.controller import SpeculationController
from fore.actors.speculation.governor import LoadGovernor
from fore.messages.gate import ApprovalMode
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    WAIT,
    Replies,
    bump_script,
    overlay_dirs,
    settled,
    spec,
    wait_until,
)

AUTO_EDIT = spec(approval_mode=ApprovalMode.AUTO_EDIT)


def make_runtime(tmp_path: Path, name: str, **options: Any) -> Runtime:
    return Runtime(
        name=name,
        overlay_root=tmp_path / "overlays",
        speculation_governor=LoadGovernor(enabled=False),
        **options,
    )


def workspace(tmp_path: Path, name: str = "ws") -> Path:
    ws = tmp_path / name
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    return ws


def completed_speculation(rt: Runtime, ws: Path) -> Any:
    """A session whose speculation has completed (its overlay holds ``app.py``)."""
    before = len(overlay_dirs(rt))
    s = rt.open_session(workspace=ws, model=ScriptedModel(bump_script()), speculation=AUTO_EDIT)
    s.submit("hi", timeout=WAIT)
    s.submit("what is x?", timeout=WAIT)
    assert settled(s) == "completed"
    assert len(overlay_dirs(rt)) == before + 1
    return s


@pytest.fixture
def runtimes() -> Iterator[list[Runtime]]:
    """Runtimes a test opens; closed at the end whatever the test did."""
    opened: list[Runtime] = []
    yield opened
    for rt in opened:
        rt.close(timeout=10)


# -- the runtime ---------------------------------------------------------------------


def test_runtime_close_does_not_return_clean_with_an_overlay_on_disk(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    """The benchmark's leak: the removal, queued on the blocking lane, dropped at its shutdown.

    A speculation's overlay is removed by its teardown through the blocking
    lane. Here the lane's one thread is busy until the lane shuts down, so
    that removal is still queued then -- and a lane drops queued work when it
    shuts down. ``close()`` used to return True with the overlay still on
    disk, and nothing removed it afterwards.
    """
    rt = make_runtime(tmp_path, "close-lane", blocking_threads=1)
    runtimes.append(rt)
    completed_speculation(rt, workspace(tmp_path))
    lane = rt.system.blocking
    released = threading.Event()

    def busy_until_the_lane_shuts_down() -> None:
        while not lane._shutdown:  # read-only look at the lane's own flag
            released.wait(0.001)

    lane.submit(busy_until_the_lane_shuts_down)
    clean = rt.close(timeout=30)  # the suite's close budget: a loaded machine is slow
    assert overlay_dirs(rt) == []
    assert clean
    assert rt.overlays_left == ()


def test_runtime_close_names_an_overlay_it_cannot_remove(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    """A write that never finishes keeps its overlay: the close says so, and which, and why."""
    rt = make_runtime(tmp_path, "close-stuck")
    runtimes.append(rt)
    overlay = rt.overlays.create(workspace(tmp_path), owner="sess-1")
    writing, release = threading.Event(), threading.Event()

    def stuck_write() -> None:
        with overlay._operation():  # what every overlay write holds while it runs
            writing.set()
            release.wait(WAIT)

    thread = threading.Thread(target=stuck_write)
    thread.start()
    try:
        assert writing.wait(WAIT)
        assert not rt.close(timeout=1)
        (left,) = rt.overlays_left
        assert left.overlay_id == overlay.overlay_id and left.session_id == "sess-1"
        assert "in flight" in left.reason
        assert overlay_dirs(rt) != []
    finally:
        release.set()
        thread.join(WAIT)
    # the write was the last user: it removed the overlay as it finished
    assert overlay.gone.wait(WAIT)
    assert overlay_dirs(rt) == []


def test_runtime_close_removes_overlays_of_open_sessions(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    rt = make_runtime(tmp_path, "close-open")
    runtimes.append(rt)
    for i in range(3):
        completed_speculation(rt, workspace(tmp_path, f"ws{i}"))
    assert len(overlay_dirs(rt)) == 3
    assert rt.close(timeout=20)
    assert overlay_dirs(rt) == []


# -- a session -----------------------------------------------------------------------


def test_session_close_returns_only_after_its_overlays_are_removed(
    tmp_path: Path, runtimes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The teardown still waits for the speculation's model request when the session closes.

    The request is held by the test for the whole close, so the overlay's
    removal waits for the request to end, or for its deadline (shortened
    here): a close that does not wait for the removal returns with the
    overlay still there.
    """
    monkeypatch.setattr(SpeculationController, "stop_timeout", 1.0)
    monkeypatch.setattr(SpeculationController, "settle_timeout", 1.0)
    rt = make_runtime(tmp_path, "close-session")
    runtimes.append(rt)
    ws = workspace(tmp_path)
    with Replies(main=["Hello.", "x is 1."], suggestion=['{"suggestion": "bump x"}']) as replies:
        replies.hold("speculation")  # released only when the test ends
        s = rt.open_session(workspace=ws, model=replies.model, speculation=AUTO_EDIT)
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: len(replies.seen("speculation")) == 1)
        assert len(overlay_dirs(rt)) == 1
        closed = s.close(timeout=WAIT)
        assert overlay_dirs(rt) == []
        assert closed
        assert rt.overlays.outstanding(s.id) == []


def test_session_close_reports_what_it_could_not_remove(
    tmp_path: Path, runtimes: list[Runtime]
) -> None:
    rt = make_runtime(tmp_path, "close-session-stuck")
    runtimes.append(rt)
    ws = workspace(tmp_path)
    s = rt.open_session(workspace=ws, model=ScriptedModel([]))
    overlay = rt.overlays.create(ws, owner=s.id)
    # nothing removes an overlay that no speculation owns: the close says so
    assert not s.close(timeout=0.5)
    (left,) = rt.overlays.outstanding(s.id)
    assert (left.overlay_id, left.session_id) == (overlay.overlay_id, s.id)
    assert (
        left.reason == "its removal has not started (its speculation's cleanup is still under way)"
    )
    assert rt.close(timeout=10)  # the runtime's close removes it
    assert overlay_dirs(rt) == []


# -- an apply in flight ----------------------------------------------------------------


def test_a_session_closed_during_an_apply_never_removes_the_overlay_under_it(
    tmp_path: Path, runtimes: list[Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removal waits for the apply, even when the controller stops under it.

    Tab's apply runs on the blocking lane, held at a fault hook; the session
    closes meanwhile, so its controller lets the speculation go while the
    apply runs. Removing the overlay then (as a shutdown's last resort once
    did) would pull the upper layer from under the apply, which would write
    ``displaced/`` -- the old inodes it keeps until the overlay goes -- into
    the overlay's directory again, and that directory would stay.
    """
    staged, release, applied = threading.Event(), threading.Event(), threading.Event()

    def hold(stage: str, _count: int) -> None:
        if stage == "staged":
            staged.set()
            release.wait(WAIT)

    def held_apply(*args: Any, **kwargs: Any) -> Any:
        try:
            return apply_overlay(*args, fault=hold, **kwargs)
        finally:
            applied.set()

    monkeypatch.setattr(accept_module, "apply_overlay", held_apply)
    # two lane threads: the apply holds one; the other runs everything else in order
    rt = make_runtime(tmp_path, "close-apply", blocking_threads=2)
    runtimes.append(rt)
    ws = workspace(tmp_path)
    s = completed_speculation(rt, ws)
    answers: list[Any] = []

    def tab() -> None:
        try:
            answers.append(s.accept(timeout=WAIT))
        except Exception as exc:  # the controller stopped under the accept
            answers.append(exc)

    accepting = threading.Thread(target=tab)
    accepting.start()
    closes: list[bool] = []
    try:
        assert staged.wait(WAIT)
        closing = threading.Thread(target=lambda: closes.append(s.close(timeout=WAIT)))
        closing.start()
        wait_until(lambda: _no_session(rt, s.id))  # its controller has stopped
        # Whatever the controller left queued on the free lane thread has run
        # once a job queued after it has: the overlay is still there, untouched.
        rt.system.blocking.submit(lambda: None).result(WAIT)
        assert len(overlay_dirs(rt)) == 1
    finally:
        release.set()
    assert applied.wait(WAIT)
    closing.join(WAIT)
    accepting.join(WAIT)
    assert closes == [True]  # the close waited for the removal, after the apply
    assert overlay_dirs(rt) == []
    assert (ws / "app.py").read_text() == "x = 2\n"  # the apply itself completed
    assert len(answers) == 1


def _no_session(rt: Runtime, session_id: str) -> bool:
    sessions = next(c for c in rt.tree().children if c.id == "sessions")
    return not any(c.id == f"session:{session_id}" for c in sessions.children)
