"""Usage limits of main turns (issue 28): enforced the moment they are crossed.

Against the mock LLM server over real HTTP: the request that would pass a
request limit is never sent (the server's own record says so); a streamed
answer that passes an output limit is cancelled mid-way (the server sees the
client go away); input tokens stop the turn after the answer that crossed
them. Every such turn ends ``usage_limit``, says which limit, keeps history
well paired and runs its ``on_abort`` hooks. The pure checks have property
tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.llm.models import OpenAICompatible, RetryPolicy
from fore.actors.llm.script import ScriptFile
from fore.actors.telemetry.limits import LimitGuard, SessionUsage, Spent, request_hit, token_hit
from fore.actors.worker.hooks import Hooks
from fore.messages.conversation import AssistantMessage, ToolResult
from fore.messages.llm import Usage
from fore.messages.session import TextDelta, TurnResult
from fore.supervision.runtime import Runtime
from fore.telemetry import UsageLimitHit, UsageLimits
from fore.testing import MockLlmServer, wait_until

WAIT = 60.0
LOOP = {
    "replies": [
        {
            "when": {"purpose": "main"},
            "text": "Once more.",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
        }
    ]
    * 6
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text("alpha\n")
    return tmp_path


@pytest.fixture
def rt() -> Iterator[Runtime]:
    with Runtime(name="limits-test") as runtime:
        yield runtime


def _model(server: MockLlmServer) -> OpenAICompatible:
    return OpenAICompatible(
        base_url=server.base_url, model="mock", api_key="k", retry=RetryPolicy(max_retries=0)
    )


def _paired(items: tuple[Any, ...]) -> bool:
    calls = [c.id for i in items if isinstance(i, AssistantMessage) for c in i.tool_calls]
    results = [i.call_id for i in items if isinstance(i, ToolResult)]
    return sorted(calls) == sorted(results)


def test_the_request_past_a_turn_limit_is_not_sent(rt: Runtime, ws: Path) -> None:
    aborts: list[Any] = []
    hooks = Hooks()
    hooks.on_abort(aborts.append)
    with MockLlmServer(ScriptFile.model_validate(LOOP)) as server:
        s = rt.open_session(workspace=ws, model=_model(server), hooks=hooks)
        turn = s.submit("loop", timeout=WAIT, usage_limits=UsageLimits(request_limit=2))
        sent = server.requests()
        history = s.history
        s.close()
    assert turn.status == "usage_limit"
    assert turn.usage_limit == UsageLimitHit(scope="turn", kind="requests", limit=2, used=3)
    assert turn.error == "the turn's request limit of 2 is reached: request 3 was not sent"
    assert turn.turns == 2
    assert len(sent) == 2  # the server never saw a third request
    assert _paired(history)
    wait_until(lambda: len(aborts) == 1)
    assert aborts[0].status == "usage_limit"


def test_asubmit_takes_the_turns_limits_too(rt: Runtime, ws: Path) -> None:
    """The asyncio API (issue 24) goes through the same submit path and limits."""
    import asyncio

    with MockLlmServer(ScriptFile.model_validate(LOOP)) as server:
        s = rt.open_session(workspace=ws, model=_model(server))
        limits = UsageLimits(request_limit=1)
        turn = asyncio.run(s.asubmit("loop", timeout=WAIT, usage_limits=limits))
        sent = server.requests()
        s.close()
    assert turn.status == "usage_limit"
    assert turn.usage_limit == UsageLimitHit(scope="turn", kind="requests", limit=1, used=2)
    assert len(sent) == 1


def test_a_session_limit_spans_turns(rt: Runtime, ws: Path) -> None:
    script = {
        "replies": [
            {
                "when": {"purpose": "main", "contains": "read"},
                "text": "Reading.",
                "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
            },
            {"when": {"purpose": "main"}, "text": "Done."},
        ]
        * 3
    }
    with MockLlmServer(ScriptFile.model_validate(script)) as server:
        s = rt.open_session(
            workspace=ws, model=_model(server), usage_limits=UsageLimits(request_limit=3)
        )
        first = s.submit("read it", timeout=WAIT)  # two requests: the call, the answer
        second = s.submit("read it again", timeout=WAIT)  # one more is allowed, not two
        third = s.submit("and again", timeout=WAIT)  # nothing left: not even one is sent
        sent = len(server.requests())
        history = s.history
        s.close()
    assert first.status == "completed" and first.turns == 2
    assert second.status == "usage_limit" and second.turns == 1
    assert second.usage_limit is not None and second.usage_limit.scope == "session"
    assert third.status == "usage_limit" and third.turns == 0
    assert third.usage_limit == UsageLimitHit(scope="session", kind="requests", limit=3, used=4)
    assert sent == 3
    assert _paired(history)


def test_a_streamed_answer_is_cancelled_where_output_crosses_the_limit(
    rt: Runtime, ws: Path
) -> None:
    long_text = "word " * 2000
    script = {"replies": [{"when": {"purpose": "main"}, "text": long_text, "tokens_per_s": 400}]}
    with MockLlmServer(ScriptFile.model_validate(script)) as server:
        s = rt.open_session(workspace=ws, model=_model(server))
        turn = s.submit("talk", timeout=WAIT, usage_limits=UsageLimits(output_tokens_limit=20))
        streamed = "".join(e.text for e in s.drain_events() if isinstance(e, TextDelta))
        [request] = server.requests()
        wait_until(lambda: server.requests()[0].outcome == "disconnected", WAIT)
        history = s.history
        s.close()
    assert request.stream
    assert turn.status == "usage_limit"
    hit = turn.usage_limit
    assert hit is not None and (hit.scope, hit.kind, hit.limit) == ("turn", "output_tokens", 20)
    assert hit.estimated and hit.used > 20
    # Stopped right at the crossing: a few deltas past 20 tokens (80 characters), not
    # the 10,000 characters of the whole answer.
    assert 80 < len(streamed) < 400
    assert not any(isinstance(i, AssistantMessage) for i in history)  # nothing half-said kept
    assert "about" in (turn.error or "")


def test_tool_call_arguments_count_as_output_while_they_stream(rt: Runtime, ws: Path) -> None:
    big = {"path": "out.txt", "content": "x" * 6000}
    script = {
        "replies": [
            {
                "when": {"purpose": "main"},
                "tool_calls": [{"name": "write_file", "arguments": big}],
                "tokens_per_s": 400,
            }
        ]
    }
    with MockLlmServer(ScriptFile.model_validate(script)) as server:
        s = rt.open_session(workspace=ws, model=_model(server))
        turn = s.submit("write", timeout=WAIT, usage_limits=UsageLimits(total_tokens_limit=200))
        wait_until(lambda: server.requests()[0].outcome == "disconnected", WAIT)
        s.close()
    assert turn.status == "usage_limit"
    assert turn.usage_limit is not None and turn.usage_limit.kind == "total_tokens"
    assert not (ws / "out.txt").exists()  # the call never ran


def test_input_tokens_stop_the_turn_after_the_answer_that_crossed_them(
    rt: Runtime, ws: Path
) -> None:
    with MockLlmServer(ScriptFile.model_validate(LOOP)) as server:
        s = rt.open_session(workspace=ws, model=_model(server))
        turn = s.submit(
            "loop " * 100, timeout=WAIT, usage_limits=UsageLimits(input_tokens_limit=50)
        )
        sent = server.requests()
        history = s.history
        s.close()
    assert turn.status == "usage_limit"
    assert turn.usage_limit is not None and turn.usage_limit.kind == "input_tokens"
    assert not turn.usage_limit.estimated
    assert turn.usage_limit.used == turn.usage.prompt_tokens > 50
    assert len(sent) == 1
    # The answer is kept, its call is not run (so nothing is left unpaired).
    assert isinstance(history[-1], AssistantMessage) and history[-1].tool_calls == ()
    assert history[-1].text == "Once more."
    assert "tool call(s) were not run" in (turn.error or "")


def test_limits_pass_through_the_speculating_session_supervisor(rt: Runtime, ws: Path) -> None:
    from fore.messages.speculation import SpeculationConfig

    with MockLlmServer(ScriptFile.model_validate(LOOP)) as server:
        s = rt.open_session(
            workspace=ws, model=_model(server), speculation=SpeculationConfig(enabled=True)
        )
        turn = s.submit("loop", timeout=WAIT, usage_limits=UsageLimits(request_limit=1))
        s.close()
    assert turn.status == "usage_limit" and turn.turns == 1


def test_a_turn_within_its_limits_is_untouched(rt: Runtime, ws: Path) -> None:
    script = {"replies": [{"text": "Short answer."}]}
    with MockLlmServer(ScriptFile.model_validate(script)) as server:
        s = rt.open_session(workspace=ws, model=_model(server))
        limits = UsageLimits(
            request_limit=5,
            input_tokens_limit=10_000,
            output_tokens_limit=1_000,
            total_tokens_limit=20_000,
        )
        turn: TurnResult = s.submit("hi", timeout=WAIT, usage_limits=limits)
        s.close()
    assert turn.status == "completed" and turn.usage_limit is None


def test_usage_limits_need_a_limit_and_positive_values() -> None:
    with pytest.raises(ValueError, match="at least one limit"):
        UsageLimits()
    with pytest.raises(ValueError):
        UsageLimits(request_limit=0)


# -- the pure checks --------------------------------------------------------------------

spent_st = st.builds(
    Spent,
    requests=st.integers(0, 60),
    input_tokens=st.integers(0, 6000),
    output_tokens=st.integers(0, 6000),
)


def _safe_limits(**kw: Any) -> UsageLimits | None:
    try:
        return UsageLimits(**kw)
    except ValueError:
        return None


LIMITS = st.tuples(
    st.none() | st.integers(1, 50),
    st.none() | st.integers(1, 5000),
    st.none() | st.integers(1, 5000),
    st.none() | st.integers(1, 10000),
)


@given(LIMITS, spent_st, st.integers(0, 3000))
def test_token_hit_is_exactly_the_first_crossed_limit(
    given_limits: tuple[int | None, int | None, int | None, int | None],
    spent: Spent,
    streaming: int,
) -> None:
    requests, input_limit, output_limit, total_limit = given_limits
    limits = _safe_limits(
        request_limit=requests,
        input_tokens_limit=input_limit,
        output_tokens_limit=output_limit,
        total_tokens_limit=total_limit,
    )
    if limits is None:
        return
    hit = token_hit(limits, spent, "turn", streaming=streaming)
    output = spent.output_tokens + streaming
    crossed = {
        "output_tokens": output_limit is not None and output > output_limit,
        "total_tokens": total_limit is not None and spent.input_tokens + output > total_limit,
        "input_tokens": input_limit is not None and spent.input_tokens > input_limit,
    }
    if not any(crossed.values()):
        assert hit is None
        return
    assert hit is not None
    assert crossed[hit.kind]
    first = next(k for k in ("output_tokens", "total_tokens", "input_tokens") if crossed[k])
    assert hit.kind == first
    assert hit.used > hit.limit
    assert hit.estimated == (streaming > 0 and hit.kind != "input_tokens")


@given(st.integers(1, 50), st.integers(0, 60))
def test_request_hit_refuses_exactly_the_request_past_the_limit(limit: int, done: int) -> None:
    hit = request_hit(UsageLimits(request_limit=limit), Spent(requests=done), "session")
    if done + 1 > limit:
        assert hit == UsageLimitHit(scope="session", kind="requests", limit=limit, used=done + 1)
    else:
        assert hit is None


@given(st.lists(st.integers(1, 40), min_size=1, max_size=40), st.integers(1, 200))
def test_the_guard_stops_a_stream_at_its_first_crossing(chunks: list[int], limit: int) -> None:
    """Fed chunk by chunk, the guard answers None until the estimate passes the limit."""
    guard = LimitGuard(UsageLimits(output_tokens_limit=limit), None)
    assert guard.watches_output and guard.before_request() is None
    guard.sent()
    total = 0
    for chars in chunks:
        total += chars
        hit = guard.streamed(chars)
        estimate = -(-total // 4)
        if estimate > limit:
            assert hit is not None and hit.used == estimate and hit.estimated
            break
        assert hit is None


def test_the_guard_counts_the_session_across_runs() -> None:
    session = SessionUsage(limits=UsageLimits(output_tokens_limit=100))
    first = LimitGuard(None, session)
    first.sent()
    assert first.answered(Usage(prompt_tokens=10, completion_tokens=60)) is None
    second = LimitGuard(None, session)
    second.sent()
    hit = second.answered(Usage(prompt_tokens=10, completion_tokens=50))
    assert hit == UsageLimitHit(scope="session", kind="output_tokens", limit=100, used=110)
    assert session.spent is not None and session.spent.requests == 2
    assert LimitGuard(None, SessionUsage()).active is False
