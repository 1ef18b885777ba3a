"""The gateway's two lanes: main turns in the foreground, speculative work in the background.

The point of the split is that a burst of speculative streams never sits in
front of a main stream's next chunk; here that shows as which loop thread a
request of each purpose runs on, and where a cancel goes: a request is cancelled
through its scope, which only the loop that took it listens to.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fore.actors.core import ActorSystem
from fore.actors.llm import LlmGateway, LlmLoop, RetryPolicy, ScriptedModel, StreamResult
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.llm import (
    GatewayStats,
    GetGatewayStats,
    LlmCancelled,
    LlmRequest,
    Purpose,
    Usage,
)
from fore.messages.speculation import SpeculationConfig
from fore.supervision import Runtime
from fore.testing import wait_until
from tests.llm.test_llm_gateway import TERMINAL, WAIT, Sink

_ids = itertools.count()


class WhereAmI:
    """Answers with the name of the thread its stream runs on (the loop's)."""

    name = "where"
    retry = RetryPolicy(max_retries=0)

    async def stream(self, request: LlmRequest, emit: Any, http: httpx.AsyncClient) -> StreamResult:
        return StreamResult(AssistantMessage(text=threading.current_thread().name), Usage(), "stop")


class Parked:
    """Never answers until cancelled."""

    name = "parked"
    retry = RetryPolicy(max_retries=0)

    async def stream(self, request: LlmRequest, emit: Any, http: httpx.AsyncClient) -> StreamResult:
        import asyncio

        await asyncio.sleep(3600)
        raise AssertionError("not reached")


@pytest.fixture
def lanes() -> Iterator[tuple[ActorSystem, LlmLoop, LlmLoop]]:
    system = ActorSystem(name="lanes-test")
    fg, bg = LlmLoop(name="lane-fg"), LlmLoop(name="lane-bg")
    try:
        yield system, fg, bg
    finally:
        assert fg.close() and bg.close()
        assert system.shutdown(timeout=WAIT)


def ask(
    system: ActorSystem, fg: LlmLoop, bg: LlmLoop, model: Any, purpose: Purpose
) -> tuple[Any, Any, queue.Queue[Any], LlmRequest]:
    inbox: queue.Queue[Any] = queue.Queue()
    with system.activated():
        sink = Sink.start(inbox)
        gateway = LlmGateway.start(fg, background=bg)
    request = LlmRequest(
        request_id=f"lane-{next(_ids)}",
        session_id="s",
        purpose=purpose,
        messages=(UserMessage(text="hi"),),
        model=model,
        reply_to=sink,
    )
    gateway.tell(request)
    return gateway, sink, inbox, request


def terminal(inbox: queue.Queue[Any]) -> Any:
    while True:
        event = inbox.get(timeout=WAIT)
        if isinstance(event, TERMINAL):
            return event


@pytest.mark.parametrize(
    ("purpose", "lane"),
    [("main", "lane-fg"), ("suggestion", "lane-bg"), ("speculation", "lane-bg"),
     ("pipelined", "lane-bg")],
)  # fmt: skip
def test_each_purpose_runs_on_its_lane(
    lanes: tuple[ActorSystem, LlmLoop, LlmLoop], purpose: Purpose, lane: str
) -> None:
    system, fg, bg = lanes
    gateway, _, inbox, _ = ask(system, fg, bg, WhereAmI(), purpose)
    done = terminal(inbox)
    assert done.message.text == lane
    stats = gateway.ask(GetGatewayStats(), timeout=WAIT)
    assert isinstance(stats, GatewayStats)
    assert (stats.lanes, stats.started, stats.completed) == (2, 1, 1)


@pytest.mark.parametrize(("purpose", "lane"), [("speculation", "bg"), ("main", "fg")])
def test_a_cancel_reaches_its_requests_lane_only(
    lanes: tuple[ActorSystem, LlmLoop, LlmLoop], purpose: Purpose, lane: str
) -> None:
    system, fg, bg = lanes
    _, _, inbox, request = ask(system, fg, bg, Parked(), purpose)
    own, other = (bg, fg) if lane == "bg" else (fg, bg)
    wait_until(lambda: own.in_flight() == 1)  # it runs on its lane
    request.scope.cancel("typed")
    cancelled = terminal(inbox)
    assert isinstance(cancelled, LlmCancelled) and cancelled.reason == "typed"
    assert inbox.empty()
    assert (own.stats().cancelled, other.stats().cancelled) == (1, 0)
    assert (own.stats().started, other.stats().started) == (1, 0)


def test_a_session_sends_main_turns_to_the_foreground_and_suggestions_to_the_background(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        replies=[
            {"when": {"purpose": "main"}, "text": "First answer."},
            {"when": {"purpose": "main"}, "text": "Second answer."},
            {"when": {"purpose": "suggestion"}, "text": '{"suggestion": "run the tests"}'},
        ]
    )
    config = SpeculationConfig(
        enabled=True, speculate=False, approval_mode=ApprovalMode.AUTO_EDIT, suggestion_delay_ms=0
    )
    with Runtime(name="lanes") as rt:
        s = rt.open_session(workspace=tmp_path, model=model, speculation=config)
        s.submit("one", timeout=WAIT)
        s.submit("two", timeout=WAIT)  # the second answer is the first one suggested after
        for _ in s.events(timeout=WAIT):
            if s.suggestion is not None:
                break
        assert s.suggestion == "run the tests"
        assert rt.llm_loop.stats().started == 2
        assert rt.llm_background_loop.stats().started == 1
