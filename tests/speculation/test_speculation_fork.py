"""Cache-safe forks on the wire: the fast model's name, the byte-equal prefix, staleness.

The mock server records every request body, so "what the fork sent" is compared with
"what the main request sent" exactly as a provider's prefix cache would see it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import OpenAICompatible
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.actors.tools.base import FunctionTool, ToolArgs, ToolContext
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import SpeculationFinished
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    WAIT,
    Replies,
    bump_script,
    call,
    next_suggestion,
    overlay_dirs,
    settled,
    spec,
    wait_until,
)

MAIN = ["Hello.", "x is 1. Shall I bump it?"]
SUGGEST = ['{"suggestion": "bump x to 2"}']


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    return tmp_path


def bodies(server: MockLlmServer, purpose: str) -> list[dict[str, Any]]:
    found = [r.body for r in server.requests() if r.purpose == purpose]
    assert all(isinstance(b, dict) for b in found)
    return found  # type: ignore[return-value]


def run_bump(s: Any) -> None:
    s.submit("hi", timeout=WAIT)
    s.submit("what is x?", timeout=WAIT)
    assert settled(s) == "completed"
    next_suggestion(s, "run the tests")


# -- the fast model --


def test_every_fork_goes_to_the_fast_model_by_name(runtime: Runtime, ws: Path) -> None:
    script = ScriptFile.model_validate({"replies": bump_script()})
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with MockLlmServer(script) as server:
        main = OpenAICompatible(base_url=server.base_url, api_key="k", model="main-model")
        fast = OpenAICompatible(base_url=server.base_url, api_key="k", model="fast-model")
        with runtime.open_session(
            workspace=ws, model=main, fast_model=fast, speculation=config
        ) as s:
            run_bump(s)
        sent = {(r.purpose, r.body["model"]) for r in server.requests()}  # type: ignore[index]
    assert sent == {
        ("main", "main-model"),
        ("suggestion", "fast-model"),
        ("speculation", "fast-model"),
        ("pipelined", "fast-model"),
    }


def test_a_fast_model_name_alone_uses_the_main_endpoint(runtime: Runtime, ws: Path) -> None:
    script = ScriptFile.model_validate({"replies": bump_script()})
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT, fast_model_name="small-model")
    with MockLlmServer(script) as server:
        main = OpenAICompatible(base_url=server.base_url, api_key="k", model="main-model")
        with runtime.open_session(workspace=ws, model=main, speculation=config) as s:
            run_bump(s)
        sent = {(r.purpose, r.body["model"]) for r in server.requests()}  # type: ignore[index]
    assert {name for purpose, name in sent if purpose != "main"} == {"small-model"}
    assert {name for purpose, name in sent if purpose == "main"} == {"main-model"}


# -- the byte-equal prefix --


def test_speculation_and_pipelined_requests_share_the_main_requests_prefix(
    runtime: Runtime, ws: Path
) -> None:
    script = ScriptFile.model_validate({"replies": bump_script()})
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with MockLlmServer(script) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(
            workspace=ws, model=model, speculation=config, system_prompt="Be brief."
        ) as s:
            run_bump(s)
        main = bodies(server, "main")[-1]  # the request the snapshot was taken after
        forks = [
            *bodies(server, "suggestion"),
            *bodies(server, "speculation"),
            *bodies(server, "pipelined"),
        ]
    assert len(forks) == 4  # suggestion, two speculation turns, pipelined
    prefix = main["messages"]
    assert prefix[0] == {"role": "system", "content": "Be brief."}
    for fork in forks:
        assert fork["tools"] == main["tools"]  # same tools, same order, same schemas
        assert fork["messages"][: len(prefix)] == prefix  # system prompt + history prefix
        assert fork["model"] == main["model"]
    # the speculation's second turn extends its first: the fork keeps growing its own prefix
    first, second = bodies(server, "speculation")[:2]
    assert second["messages"][: len(first["messages"])] == first["messages"]


# -- staleness --


class Args(ToolArgs):
    q: str = ""


def extra_tool(name: str = "lookup") -> FunctionTool[Args]:
    def run(args: Args, ctx: ToolContext) -> str:
        return "found"

    return FunctionTool(name, "Look something up.", Args, run)


EDIT = {
    "text": "",
    "tool_calls": [call("edit", path="app.py", old_string="x = 1", new_string="x = 2")],
}


def test_a_tool_change_aborts_the_running_speculation_as_stale(runtime: Runtime, ws: Path) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(main=[*MAIN, "Bumped it myself."], suggestion=SUGGEST, speculation=[EDIT]) as r:
        held = r.hold("speculation")
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(r.seen("speculation")) == 1)
            s.drain_events()
            s.add_tool(extra_tool())
            wait_until(lambda: s.speculation.state == "stale")
            assert "tools" in (s.speculation.reason or "")
            held.set()
            reports = []
            for event in s.events(timeout=WAIT):
                if isinstance(event, SpeculationFinished):
                    reports.append(event)
                    break
            assert [e.outcome for e in reports] == ["stale"]
            wait_until(lambda: overlay_dirs(runtime) == [])
            assert (ws / "app.py").read_text() == "x = 1\n"
            # the worker has the tool: the next main request describes it
            s.submit("bump it", timeout=WAIT)
            names = [t.name for t in r.seen("main")[-1].tools]
            assert "lookup" in names


def test_no_speculation_starts_on_a_snapshot_older_than_the_tools(
    runtime: Runtime, ws: Path
) -> None:
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with Replies(main=[*MAIN, "Bumped."], suggestion=SUGGEST, speculation=[EDIT]) as r:
        held = r.hold("suggestion")
        with runtime.open_session(workspace=ws, model=r.model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(r.seen("suggestion")) == 1)
            s.add_tool(extra_tool())  # between the snapshot and the speculation's start
            held.set()
            wait_until(lambda: s.suggestion == "bump x to 2")  # still a good prediction ...
            assert s.speculation.state == "stale"  # ... but not speculated on the old prefix
            assert r.seen("speculation") == []
            result = s.accept(timeout=WAIT)  # Tab runs it normally, with the new tools
            assert result.turn is not None and result.turn.items[-1].text == "Bumped."
            assert "lookup" in [t.name for t in r.seen("main")[-1].tools]


# -- trimming at stable checkpoints --


def test_trim_points_move_in_fixed_steps() -> None:
    from fore.actors.speculation.fork import trim_start

    # at most max entries kept; the cut is a multiple of the step; it stays put
    # while the history grows within one step
    for length in range(0, 60):
        start = trim_start(length, 10, 4)
        assert length - start <= 10 and start % 4 == 0
        assert start == 0 or length - start > 10 - 4
    assert [trim_start(n, 10, 4) for n in (10, 11, 12, 13, 14, 15)] == [0, 4, 4, 4, 4, 8]
    assert [trim_start(n, 10, 1) for n in (11, 12)] == [1, 2]  # step 1: the last N


def test_consecutive_forks_over_a_long_history_share_their_trimmed_prefix(
    runtime: Runtime, ws: Path
) -> None:
    """Past ``max_history`` a fork no longer starts like the main request, but
    consecutive forks start at the same checkpoint: the later one's request is the
    earlier one's trimmed prefix plus what came since, byte for byte on the wire."""
    turns = 6
    replies: list[dict[str, Any]] = [
        {"when": {"purpose": "main"}, "text": f"answer {i}"} for i in range(turns)
    ]
    replies += [
        {"when": {"purpose": "suggestion"}, "text": f'{{"suggestion": "do step {i}"}}'}
        for i in range(1, turns)
    ]
    config = spec(speculate=False, max_history=8, history_trim_step=4)
    with MockLlmServer(ScriptFile.model_validate({"replies": replies})) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(
            workspace=ws, model=model, speculation=config, system_prompt="Be brief."
        ) as s:
            for i in range(turns):
                s.submit(f"question {i}", timeout=WAIT)
                if i >= 1:
                    wait_until(lambda i=i: s.suggestion == f"do step {i}")
        forks = bodies(server, "suggestion")
        mains = bodies(server, "main")
    assert len(forks) == turns - 1
    # after turns 5 and 6 the history holds 10 and 12 entries: both trimmed (max 8),
    # both cut at entry 4 (step 4) -- "the last 8" would cut at 2 and at 4
    earlier, later = forks[-2]["messages"][:-1], forks[-1]["messages"][:-1]  # minus the prompt
    assert len(earlier) < len(mains[-2]["messages"]) + 1  # trimmed: not the main prefix
    assert earlier[0] == {"role": "system", "content": "Be brief."}
    assert later[: len(earlier)] == earlier
    assert later[len(earlier)]["content"] == "question 5"
    assert forks[-1]["tools"] == forks[-2]["tools"]
