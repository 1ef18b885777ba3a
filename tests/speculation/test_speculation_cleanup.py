"""Ending a speculation's work: the abort order, and crashes (of the speculation's worker).

Abort order (the seed's): the LLM request is cancelled and the running tool calls
are cancelled, the worker stops, and only then is the overlay removed. It is asserted
by event order -- the telemetry's recorded steps, a tool's own cancel callback looking
for the overlay, the mock server's disconnect -- never by durations.

A crash is injected for real: the speculation's worker is made buggy for one
message type (``Boom``) that the test sends it at the moment it chooses.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import OpenAICompatible, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.tools.base import FunctionTool, ToolArgs, ToolContext
from fore.messages.gate import ApprovalMode
from fore.messages.runtime import GetChild
from fore.messages.speculation import SpeculationFinished
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    Boom,
    Replies,
    bump_script,
    call,
    main_reply,
    overlay_dirs,
    settled,
    spec,
    speculated,
    suggestion,
    tails,
    wait_until,
)

TOOLS_BEFORE_OVERLAY = ("abort_requested", "worker_stopped")
"""The abort steps that must precede the cancellations' confirmations."""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("alpha\n")
    return tmp_path


def crash_speculation(s: Any) -> None:
    """Crash the running speculation's worker (found through the controller)."""
    child = f"speculation:{s.speculation.speculation_id}"
    handle = s.controller.ask(GetChild(child_id=child), timeout=WAIT)
    assert handle is not None
    handle.tell(Boom(session_id=s.id))


def finished(s: Any) -> SpeculationFinished:
    for event in s.events(timeout=WAIT):
        if isinstance(event, SpeculationFinished):
            return event
    raise AssertionError("no SpeculationFinished event")


def assert_in_order(steps: tuple[tuple[str, float], ...]) -> None:
    """Every step happened, in the abort's order (times never go backwards).

    An abort the user caused starts with its ``keystroke`` (the latency's origin).
    """
    if steps and steps[0][0] == "keystroke":
        assert steps[0][1] <= steps[1][1]
        steps = steps[1:]
    names = [name for name, _at in steps]
    assert names[:2] == list(TOOLS_BEFORE_OVERLAY)
    assert sorted(names[2:4]) == ["llm_cancelled", "tools_cancelled"]
    assert names[4:] == ["overlay_removed"]
    times = [at for _name, at in steps]
    assert times == sorted(times)


# -- crashes --


def test_a_crash_during_a_running_tool_cancels_it_then_removes_the_overlay(
    runtime: Runtime, ws: Path, buggy_worker: None
) -> None:
    script = [
        *TWO_TURNS,
        suggestion("follow the notes"),
        speculated("", call("shell", command="tail -f notes.txt")),
        main_reply("still fine"),
    ]
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=spec()) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: len(tails()) == 1)  # the speculative tool is running
        before = s.history
        crash_speculation(s)
        wait_until(lambda: s.speculation.state == "failed")
        # the worker was stopped in order (its on_stop cancelled the tool) ...
        wait_until(lambda: tails() == [])
        # ... and the overlay went after it
        wait_until(lambda: overlay_dirs(runtime) == [])
        assert any(a.level == "info" and "speculation" in a.text for a in s.alerts)
        report = finished(s)
        assert report.outcome == "failed" and "speculation worker bug" in (report.reason or "")
        # the main session is untouched and goes on
        assert s.history == before
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert s.submit("and now?", timeout=WAIT).items[-1].text == "still fine"


def test_a_crash_while_tab_waits_runs_the_prompt_normally_and_reports_once(
    runtime: Runtime, ws: Path, buggy_worker: None
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    edit = {"text": "", "tool_calls": [call("edit", path="app.py", old_string="x", new_string="y")]}
    with Replies(
        main=["Hello.", "x is 1.", "Ran it normally."],
        suggestion=['{"suggestion": "rename x"}'],
        speculation=[edit],
    ) as replies:
        replies.hold("speculation")  # never released before the crash
        with runtime.open_session(workspace=ws, model=replies.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(replies.seen("speculation")) == 1)
            s.drain_events()
            results: list[Any] = []
            thread = threading.Thread(target=lambda: results.append(s.accept(timeout=WAIT)))
            thread.start()
            wait_until(lambda: s.speculation.accepting)
            crash_speculation(s)
            thread.join(WAIT)
            (result,) = results
            assert result.outcome == "failed"
            assert result.turn is not None and result.turn.items[-1].text == "Ran it normally."
            wait_until(lambda: overlay_dirs(runtime) == [])
            assert s.submit("more", timeout=WAIT).status == "completed"  # a later marker
            reports = [e for e in s.drain_events() if isinstance(e, SpeculationFinished)]
            assert [r.outcome for r in reports] == ["failed"]
            assert (ws / "app.py").read_text() == "x = 1\n"


# -- the abort order --


class Blocking(ToolArgs):
    pattern: str = ""


def test_tools_are_cancelled_before_the_overlay_is_removed(runtime: Runtime, ws: Path) -> None:
    running = threading.Event()
    overlay_at_cancel: list[bool] = []

    def grep(args: Blocking, ctx: ToolContext) -> str:
        # Runs in the pool as the cancel is processed: the overlay must still exist.
        ctx.cancel.on_cancel(lambda _reason: overlay_at_cancel.append(bool(overlay_dirs(runtime))))
        running.set()
        ctx.cancel.wait(WAIT)
        return "cancelled" if ctx.cancel.cancelled else "no match"

    # "grep" is a read tool to the gate, so the speculation runs it.
    tool = FunctionTool("grep", "Search files (blocks until cancelled).", Blocking, grep)
    script = [*TWO_TURNS, suggestion("search for x"), speculated("", call("grep", pattern="x"))]
    with runtime.open_session(
        workspace=ws, model=ScriptedModel(script), speculation=spec(), builtin=False, tools=[tool]
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert running.wait(WAIT)
        assert overlay_dirs(runtime) != []
        s.drain_events()
        s.keystroke("no")
        report = finished(s)
        assert report.outcome == "aborted"
        assert overlay_at_cancel == [True]  # the tool was cancelled while the overlay existed
        assert_in_order(report.abort_steps)
        wait_until(lambda: overlay_dirs(runtime) == [])


def test_the_llm_stream_is_cancelled_before_the_overlay_is_removed(
    runtime: Runtime, ws: Path
) -> None:
    script = ScriptFile.model_validate(
        {
            "replies": [
                *TWO_TURNS,
                suggestion("watch the file"),
                {
                    "when": {"purpose": "speculation"},
                    "text": "Watching. " + "word " * 400,
                    "tokens_per_s": 5,
                },
            ]
        }
    )
    with MockLlmServer(script) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(workspace=ws, model=model, speculation=spec()) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: any(r.purpose == "speculation" for r in server.requests()))
            s.drain_events()
            s.keystroke("no, something else")
            report = finished(s)
            assert report.outcome == "aborted"
            assert_in_order(report.abort_steps)
            (spec_id,) = [r.request_id for r in server.requests() if r.purpose == "speculation"]
            server.wait_for_stats(lambda st: spec_id in st.disconnected_request_ids, timeout_s=WAIT)
            wait_until(lambda: overlay_dirs(runtime) == [])


# -- the records ------------------------------------------------------------------


def test_the_controller_keeps_no_record_of_a_speculation_that_is_done(
    runtime: Runtime, ws: Path
) -> None:
    """Accepted, aborted: once its overlay is gone and nothing is owed, its record goes
    (only the offered speculation, if any, is left)."""
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with runtime.open_session(
        workspace=ws, model=ScriptedModel(bump_script()), speculation=config
    ) as s:
        controller = s.controller._actor_weakref()
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        accepted = s.speculation.speculation_id
        assert s.accept(timeout=WAIT).outcome == "accepted"
        wait_until(lambda: s.speculation.speculation_id not in (None, accepted))
        pipelined = s.speculation.speculation_id  # Tab-Tab-Tab: the next one runs
        wait_until(lambda: set(dict(controller._specs)) == {pipelined})
        s.keystroke("no")
        wait_until(lambda: overlay_dirs(runtime) == [])
        wait_until(lambda: not controller._specs)
