"""Telemetry: one ``SpeculationFinished`` per speculation, with what it cost and did.

Turns, tool calls, files written (the overlay's own count, whatever the outcome),
tokens and duration, for accepted, boundary, failed and aborted speculations.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import ScriptedModel, llm_error
from fore.actors.speculation.controller import SpeculationController
from fore.actors.worker.state import pairing_problems
from fore.messages.conversation import ToolResult
from fore.messages.gate import ApprovalMode
from fore.messages.llm import LlmRequest
from fore.messages.session import Subscribe, Unsubscribe
from fore.messages.speculation import SpeculationFinished
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    Replies,
    bump_script,
    call,
    main_reply,
    overlay_dirs,
    settled,
    spec,
    speculated,
    suggestion,
    wait_until,
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    return tmp_path


def reports(s: Any, count: int = 1) -> list[SpeculationFinished]:
    """The next ``count`` reports, and proof there is no other one."""
    found: list[SpeculationFinished] = []
    for event in s.events(timeout=WAIT):
        if isinstance(event, SpeculationFinished):
            found.append(event)
            if len(found) == count:
                break
    wait_until(lambda: overlay_dirs(s.runtime) == [])  # every cleanup is done
    s.submit("anything else?", timeout=WAIT)  # a later marker on the same event stream
    found += [e for e in s.drain_events() if isinstance(e, SpeculationFinished)]
    return found


def test_an_accepted_speculation_reports_its_work(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    model = ScriptedModel(bump_script(main_reply("Nothing else.")))
    with runtime.open_session(workspace=ws, model=model, speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        run = s.speculation
        assert run.files_written == 1  # the overlay's count, before any apply
        wait_until(lambda: s.speculation.next_suggestion == "run the tests")
        assert s.accept(timeout=WAIT).outcome == "accepted"
        assert s.speculation.suggestion == "run the tests"  # the pipelined one runs now
        s.keystroke("anything else?")
        (report,) = [r for r in reports(s, count=2) if r.suggestion == "bump x to 2"]
    assert report.outcome == "accepted" and report.state == "completed"
    assert (report.turns, report.tool_calls, report.files_written) == (2, 1, 1)
    assert report.tokens > 0 and report.duration_s > 0
    # the run's own duration: start to completion, not to the Tab that came later
    assert run.completed_at is not None and run.started_at is not None
    assert report.duration_s == pytest.approx(run.completed_at - run.started_at)
    assert report.boundary_tool is None and report.reason is None


def test_a_boundary_speculation_reports_its_boundary(runtime: Runtime, ws: Path) -> None:
    script = [
        *TWO_TURNS,
        suggestion("bump x to 2"),
        speculated(
            "Reading, then editing.",
            call("read_file", path="app.py"),
            call("edit", path="app.py", old_string="x = 1", new_string="x = 2"),
        ),
        main_reply("Bumped for real."),
        main_reply("Nothing else."),
    ]
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=spec()) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        result = s.accept(timeout=WAIT)
        assert result.outcome == "boundary" and pairing_problems(s.history) == []
        assert s.speculation.state == "accepted"
        (report,) = reports(s)
    assert report.outcome == "boundary" and report.state == "boundary"
    assert (report.turns, report.tool_calls, report.files_written) == (1, 1, 0)
    assert report.boundary_tool == "edit" and "default" in (report.boundary_reason or "")
    assert report.tokens > 0 and report.duration_s > 0


def test_a_failed_speculation_reports_what_it_spent(runtime: Runtime, ws: Path) -> None:
    def fail_second_turn(request: LlmRequest) -> Any:
        if isinstance(request.messages[-1], ToolResult):
            raise llm_error("server", "the provider fell over", retryable=False)
        return {"text": "", "tool_calls": [call("write_file", path="new.txt", content="n\n")]}

    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with (
        Replies(
            main=["Hello.", "x is 1."],
            suggestion=['{"suggestion": "write a new file"}'],
            speculation=[fail_second_turn, fail_second_turn],
        ) as r,
        runtime.open_session(workspace=ws, model=r.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "failed"
        assert any(a.level == "info" and "speculation" in a.text for a in s.alerts)
        s.keystroke("anything else?")
        (report,) = reports(s)
    assert report.outcome == "failed" and report.state == "failed"
    assert "fell over" in (report.reason or "")
    assert (report.turns, report.tool_calls, report.files_written) == (2, 1, 1)
    assert report.tokens > 0
    assert not (ws / "new.txt").exists()


def test_an_aborted_speculation_reports_the_files_it_had_written(
    runtime: Runtime, ws: Path
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    model = ScriptedModel(bump_script(main_reply("Leaving it.")))
    with runtime.open_session(workspace=ws, model=model, speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        s.keystroke("no")
        (report,) = reports(s)
    assert report.outcome == "aborted" and report.state == "completed"
    assert (report.turns, report.tool_calls, report.files_written) == (2, 1, 1)
    # It had finished before the keystroke: nothing was left to cancel, so it has no
    # cancel latency (a 0.0 here would drag the running aborts' percentiles down);
    # only the overlay's removal is timed, from the keystroke.
    assert report.was_running is False
    assert report.cancel_latency_s is None and report.cleanup_latency_s is not None
    names = [name for name, _at in report.abort_steps]
    assert names[0] == "keystroke" and "already_finished" in names
    assert names[-1] == "overlay_removed"
    assert report.duration_s > 0


class Inbox:
    """A subscriber (``tell`` only) that keeps what it is told."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self.lock = threading.Lock()

    def tell(self, event: Any) -> None:
        with self.lock:
            self.got.append(event)

    def kinds(self) -> list[str]:
        with self.lock:
            return [event.kind for event in self.got]


def test_a_subscriber_gets_only_the_kinds_it_asked_for_and_no_status_is_built_unread(
    runtime: Runtime, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Subscribe(kinds=...)``: the controller sends only those kinds, and builds a
    status (``SpeculationStatusChanged``) only while a subscriber reads that kind."""
    built: list[object] = []
    original = SpeculationController._status_now

    def counted(self: SpeculationController) -> Any:
        built.append(self)
        return original(self)

    monkeypatch.setattr(SpeculationController, "_status_now", counted)
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    model = ScriptedModel(bump_script(main_reply("Leaving it.")))
    with runtime.open_session(workspace=ws, model=model, speculation=config) as s:
        finished = Inbox()
        # As the Ray shard does: the session's own queue (every kind) goes away.
        s.controller.ask(Unsubscribe(address=s._events), timeout=WAIT)
        s.controller.ask(
            Subscribe(address=finished, kinds=frozenset({"speculation_finished"})), timeout=WAIT
        )
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"  # GetSpeculation builds the status it answers
        asked = len(built)
        s.keystroke("no")
        wait_until(lambda: finished.kinds() == ["speculation_finished"])
        wait_until(lambda: overlay_dirs(s.runtime) == [])
        assert len(built) == asked  # nobody reads statuses: none was built for them
        everything = Inbox()
        s.controller.ask(Subscribe(address=everything), timeout=WAIT)
        s.submit("anything else?", timeout=WAIT)
        wait_until(lambda: "speculation_status" in everything.kinds())
    assert len(built) > asked
    assert finished.kinds() == ["speculation_finished"]
