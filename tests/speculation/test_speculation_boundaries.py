"""Boundaries that are not a refused tool: the overlay's size bound, the session's own
interceptor, and hard time and token budgets.

Each ends the speculation at a boundary -- never ``failed`` -- with a transcript that
passes the pairing check; where a call must run for real (the write that did not fit,
the calls a budget cancelled), Tab runs it through the main worker's normal flow.
Ordering comes from held replies and events, never from timings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import OpenAICompatible
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.worker.hooks import Continue, Skip, ToolCallContext
from fore.actors.worker.interceptor import Interceptor
from fore.actors.worker.state import pairing_problems
from fore.messages.conversation import AssistantMessage, ToolResult, UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import TokenBudgetReached
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    Replies,
    call,
    overlay_dirs,
    settled,
    spec,
    suggestion,
    tails,
    wait_until,
)

MAIN = ["Hello.", "x is 1. Shall I look around?"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("alpha\n")
    (tmp_path / "rep.txt").write_text("a\n" * 300)  # 600 bytes
    return tmp_path


def start(s: Any) -> None:
    s.submit("hi", timeout=WAIT)
    s.submit("what is x?", timeout=WAIT)


def tool_calls(item: Any) -> list[str]:
    return [c.name for c in item.tool_calls] if isinstance(item, AssistantMessage) else []


# -- the overlay's size bound --


def test_a_write_that_would_overflow_the_overlay_is_a_boundary_and_tab_writes_it(
    runtime: Runtime, ws: Path
) -> None:
    big = {"text": "", "tool_calls": [call("write_file", path="big.txt", content="y" * 5000)]}
    with Replies(
        main=[*MAIN, "Wrote it for real."],
        suggestion=['{"suggestion": "write a big file"}'],
        speculation=[big, "Wrote it."],
    ) as r:
        config = spec(approval_mode=ApprovalMode.YOLO, overlay_max_bytes=1024)
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            start(s)
            assert settled(s) == "boundary"  # not "failed"
            status = s.speculation
            assert status.boundary_tool == "write_file"
            assert "overlay is full" in (status.boundary_reason or "")
            assert not (ws / "big.txt").exists()
            result = s.accept(timeout=WAIT)
            assert result.outcome == "boundary" and result.turn is not None
            assert result.turn.status == "completed"
            assert (ws / "big.txt").read_text() == "y" * 5000  # the refused write ran for real
            assert s.history[-1].text == "Wrote it for real."
            assert pairing_problems(s.history) == []


def test_an_overlay_full_error_at_run_time_is_a_late_boundary(runtime: Runtime, ws: Path) -> None:
    """The estimate (size + one replacement) lets a replace_all through that then needs
    more room than the bound: its OverlayFull error is handed over as the boundary."""
    grow = {
        "text": "Growing every line.",
        "tool_calls": [
            call("edit", path="rep.txt", old_string="a", new_string="abcd", replace_all=True)
        ],
    }
    with Replies(
        main=[*MAIN, "Edited for real."],
        suggestion=['{"suggestion": "grow every line"}'],
        speculation=[grow, "Grown."],
    ) as r:
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT, overlay_max_bytes=1024)
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            start(s)
            assert settled(s) == "boundary"
            status = s.speculation
            assert status.boundary_tool == "edit"
            assert status.boundary_reason == "the speculation's overlay is full"
            assert len(r.seen("speculation")) == 1  # stopped before asking the model again
            result = s.accept(timeout=WAIT)
            assert result.outcome == "boundary"
            # the speculation's own failed attempt is not in the transcript
            assert not any(isinstance(i, ToolResult) for i in result.items)
            assert result.turn is not None and result.turn.status == "completed"
            assert (ws / "rep.txt").read_text() == "abcd\n" * 300
            history = s.history
            assert pairing_problems(history) == []
            assert [n for i in history for n in tool_calls(i)] == ["edit"]
            assert history[-1].text == "Edited for real."


# -- the session's own interceptor --


class NoNotes(Interceptor):
    """A session policy: never read notes.txt (and remember who asked)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def pre_tool_call(self, ctx: ToolCallContext) -> Any:
        self.seen.append((ctx.purpose, ctx.name))
        if ctx.arguments.get("path") == "notes.txt":
            return Skip("private")
        return Continue()


class Rewriter(Interceptor):
    """A session policy that edits a shell command (allowed in a main run)."""

    def pre_tool_call(self, ctx: ToolCallContext) -> Any:
        if ctx.name == "shell":
            ctx.arguments["command"] = "touch SIDE_EFFECT"
        return Continue()


def test_the_sessions_interceptor_runs_during_speculation_strictly(
    runtime: Runtime, ws: Path
) -> None:
    policy = NoNotes()
    read = {"text": "", "tool_calls": [call("read_file", path="notes.txt")]}
    with (
        Replies(
            main=MAIN, suggestion=['{"suggestion": "read the notes"}'], speculation=[read]
        ) as r,
        runtime.open_session(
            workspace=ws, model=r.model, speculation=spec(), interceptor=policy
        ) as s,
    ):
        start(s)
        assert settled(s) == "boundary"
        status = s.speculation
        assert status.boundary_tool == "read_file"
        assert "NoNotes" in (status.boundary_reason or "")
        assert "Skip" in (status.boundary_reason or "")
    assert ("speculation", "read_file") in policy.seen  # consulted, after the gate allowed it


def test_an_interceptor_rewriting_arguments_is_a_boundary(runtime: Runtime, ws: Path) -> None:
    look = {"text": "", "tool_calls": [call("shell", command="cat notes.txt")]}
    with (
        Replies(
            main=MAIN, suggestion=['{"suggestion": "show the notes"}'], speculation=[look, "Shown."]
        ) as r,
        runtime.open_session(
            workspace=ws, model=r.model, speculation=spec(), interceptor=Rewriter()
        ) as s,
    ):
        start(s)
        assert settled(s) == "boundary"
        assert "rewrote the arguments" in (s.speculation.boundary_reason or "")
        assert not (ws / "SIDE_EFFECT").exists()  # the gate never saw that command
        s.keystroke("no")
        wait_until(lambda: overlay_dirs(runtime) == [])
    assert not (ws / "SIDE_EFFECT").exists()


# -- hard budgets --


def test_the_time_budget_cancels_the_request_in_flight(runtime: Runtime, ws: Path) -> None:
    """The speculation's request is held and never answered: only a budget enforced at
    its deadline (not at the next safe point) can end it."""
    with Replies(
        main=[*MAIN, "Looked around for real."],
        suggestion=['{"suggestion": "look around"}'],
        speculation=["never sent"],
    ) as r:
        r.hold("speculation")  # released only when the test is over
        config = spec(time_budget_s=0.3)
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            start(s)
            assert settled(s) == "boundary"
            status = s.speculation
            assert status.boundary_reason == "speculation time budget reached"
            assert status.tokens > 0  # the cancelled request's prompt, estimated
            result = s.accept(timeout=WAIT)
            assert result.outcome == "boundary"
            assert [type(i) for i in result.items] == [UserMessage]
            # the main worker continued the turn: the same prompt, asked for real
            assert result.turn is not None and result.turn.status == "completed"
            history = s.history
            assert history[-2].text == "look around" and history[-1].text == (
                "Looked around for real."
            )
            assert pairing_problems(history) == []


def test_a_hard_budget_cancels_running_tool_calls_and_hands_them_over(
    runtime: Runtime, ws: Path
) -> None:
    script = [
        *TWO_TURNS,
        suggestion("follow the notes"),
        {
            "when": {"purpose": "speculation"},
            "text": "Following.",
            "tool_calls": [call("shell", command="tail -f notes.txt")],
        },
    ]
    from fore.actors.llm import ScriptedModel

    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=spec()) as s:
        start(s)
        wait_until(lambda: len(tails()) == 1)  # the batch is running
        # what the metered model tells the controller when the spend passes the budget
        spec_id = s.speculation.speculation_id
        s.controller.tell(TokenBudgetReached(speculation_id=spec_id, spent=10**9))
        assert settled(s) == "boundary"
        wait_until(lambda: tails() == [])  # the tool's process is gone
        status = s.speculation
        assert status.boundary_reason == "speculation token budget reached"
        assert status.boundary_tool == "shell"  # the cancelled call is handed over
        s.keystroke("no")
        wait_until(lambda: overlay_dirs(runtime) == [])


FORK_SCRIPT = ScriptFile.model_validate(
    {
        "replies": [
            *TWO_TURNS,
            suggestion("say hello"),
            {"when": {"purpose": "speculation"}, "text": "hello"},
        ]
    }
)

LONG_SPECULATION = ScriptFile.model_validate(
    {
        "replies": [
            *TWO_TURNS,
            suggestion("explain at length"),
            {
                "when": {"purpose": "speculation"},
                "text": "word " * 400,
                "tokens_per_s": 20,  # 20 s to complete: the budget must not wait for it
            },
        ]
    }
)


def test_the_token_budget_stops_a_stream_before_it_completes(runtime: Runtime, ws: Path) -> None:
    script = LONG_SPECULATION
    with MockLlmServer(script) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        # the prompt and a few words of the answer, counted as they stream
        config = spec(token_budget=60, stream_forks=True)
        with runtime.open_session(workspace=ws, model=model, speculation=config) as s:
            start(s)
            assert settled(s) == "boundary"
            assert s.speculation.boundary_reason == "speculation token budget reached"
            assert s.speculation.tokens > 60
            (rid,) = [r.request_id for r in server.requests() if r.purpose == "speculation"]
            server.wait_for_stats(lambda st: rid in st.disconnected_request_ids, timeout_s=WAIT)
            s.keystroke("no")
            wait_until(lambda: overlay_dirs(runtime) == [])


def test_a_fork_that_is_not_streamed_carries_the_token_budget_as_max_tokens(
    runtime: Runtime, ws: Path
) -> None:
    """Forks not streamed (``stream_forks=False``): the provider stops the answer where the
    budget ends."""
    with MockLlmServer(LONG_SPECULATION) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(
            workspace=ws, model=model, speculation=spec(token_budget=60, stream_forks=False)
        ) as s:
            start(s)
            assert settled(s) == "boundary"
            assert s.speculation.boundary_reason == "speculation token budget reached"
            (request,) = [r for r in server.requests() if r.purpose == "speculation"]
            assert request.stream is False
            assert isinstance(request.body, dict)
            cap = request.body["max_tokens"]
            assert isinstance(cap, int) and 1 <= cap < 60  # what the prompt left of 60
            assert request.outcome == "completed"  # cut by the provider, not by a cancel
            assert s.speculation.tokens > 60 - cap  # its usage is counted
            s.keystroke("no")
            wait_until(lambda: overlay_dirs(runtime) == [])


def test_forks_are_streamed_as_configured_and_main_turns_always_are(
    runtime: Runtime, ws: Path
) -> None:
    for stream_forks in (False, True):
        with MockLlmServer(FORK_SCRIPT) as server:
            model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
            config = spec(stream_forks=stream_forks)
            with runtime.open_session(workspace=ws, model=model, speculation=config) as s:
                start(s)
                assert settled(s) == "completed"
                s.keystroke("no")
                wait_until(lambda: overlay_dirs(runtime) == [])
            requests = server.requests()
            assert {"main", "suggestion", "speculation"} <= {r.purpose for r in requests}
            for r in requests:
                assert r.stream is (r.purpose == "main" or stream_forks), r
