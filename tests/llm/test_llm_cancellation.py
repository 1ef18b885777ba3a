"""Cancels that land early: every request still gets exactly one terminal event.

A request is cancelled through its scope (``LlmRequest.scope``). Two races
would lose a cancel unless the loop handles them:

* a cancel right after the submit reaches the task before its coroutine ever
  ran, so the request's own handlers never run (case A);
* the cancel comes before the request reaches its loop (typing during a
  speculation does exactly this): the scope is the record of it, so the loop
  answers the request ``LlmCancelled`` when it arrives and never sends it,
  with no table of early cancels (case B).

Both are produced deterministically here: case A by queueing submit+cancel
pairs while a test model holds the loop thread, case B by cancelling first.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fore.actors.core import ActorSystem
from fore.actors.core.cancel import CancelScope
from fore.actors.llm import LlmGateway, LlmLoop, OpenAICompatible, RetryPolicy, StreamResult
from fore.actors.llm.mock_server import MockLlmServer
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.llm import (
    LlmCancelled,
    LlmCompleted,
    LlmFailed,
    LlmRequest,
    Usage,
)
from tests.llm.test_llm_gateway import TERMINAL, WAIT, Sink

_ids = itertools.count()


class HoldTheLoop:
    """A model that blocks the loop thread until released (a test device only).

    While it holds the thread, submits and cancels queue up on the loop and
    then run back to back in one iteration -- the tightest race there is.
    """

    name = "hold"
    retry = RetryPolicy(max_retries=0)

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    async def stream(self, request: LlmRequest, emit: Any, http: httpx.AsyncClient) -> StreamResult:
        self.entered.set()
        self.release.wait(WAIT)  # deliberately blocking: nothing else on the loop may run
        return StreamResult(AssistantMessage(text="held"), Usage(), "stop")


class Rig:
    def __init__(self, system: ActorSystem, loop: LlmLoop) -> None:
        self.loop = loop
        self.inbox: queue.Queue[Any] = queue.Queue()
        with system.activated():
            self.sink = Sink.start(self.inbox)
            self.gateway = LlmGateway.start(loop)

    def request(self, model: Any, rid: str, session_id: str = "s") -> LlmRequest:
        return LlmRequest(
            request_id=rid,
            session_id=session_id,
            messages=(UserMessage(text="hello"),),
            model=model,
            reply_to=self.sink,
        )

    def terminals(self, rids: set[str], timeout: float = WAIT) -> dict[str, list[Any]]:
        """Every terminal event per request id, waiting until each has one (or the timeout)."""
        seen: dict[str, list[Any]] = {rid: [] for rid in rids}
        deadline = time.monotonic() + timeout
        while any(not events for events in seen.values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                message = self.inbox.get(timeout=remaining)
            except queue.Empty:
                break
            rid = getattr(message, "request_id", None)
            if rid in seen and isinstance(message, TERMINAL):
                seen[rid].append(message)
        return seen

    def settle(self) -> None:
        """Prove silence: nothing more arrives once the loop has nothing in flight."""
        deadline = time.monotonic() + WAIT
        while self.loop.in_flight() and time.monotonic() < deadline:
            time.sleep(0.01)


@pytest.fixture(scope="module")
def server() -> Iterator[MockLlmServer]:
    with MockLlmServer() as srv:
        yield srv


@pytest.fixture
def rig(server: MockLlmServer) -> Iterator[Rig]:
    server.reset()
    system = ActorSystem(name="llm-cancel-test")
    loop = LlmLoop()
    try:
        yield Rig(system, loop)
    finally:
        assert loop.close()
        system.shutdown()


def never_answers(server: MockLlmServer) -> OpenAICompatible:
    """A real endpoint that would take ten minutes to say anything."""
    return OpenAICompatible(
        base_url=server.base_url,
        api_key="k",
        model="mock",
        headers={"X-Mock-TTFT-Ms": "600000"},
        retry=RetryPolicy(max_retries=0),
    )


def assert_one_cancelled_each(seen: dict[str, list[Any]], reason: str) -> None:
    silent = [rid for rid, events in seen.items() if not events]
    assert not silent, f"{len(silent)} of {len(seen)} requests got no terminal event"
    for rid, events in seen.items():
        assert len(events) == 1, (rid, events)
        assert isinstance(events[0], LlmCancelled) and events[0].reason == reason, events


def test_cancel_right_after_submit_before_the_task_starts(rig: Rig, server: MockLlmServer) -> None:
    hold = HoldTheLoop()
    rig.loop.submit(rig.request(hold, "holder"))
    assert hold.entered.wait(WAIT)
    model = never_answers(server)
    rids = {f"a{next(_ids)}" for _ in range(50)}
    for rid in rids:  # all queued behind the held loop: each cancel lands before its task runs
        request = rig.request(model, rid, session_id=rid)
        rig.loop.submit(request)
        request.scope.cancel("typed")
    hold.release.set()
    seen = rig.terminals(rids)
    assert_one_cancelled_each(seen, "typed")
    rig.settle()
    stats = rig.loop.stats()
    assert stats.in_flight == 0
    assert stats.started == stats.completed + stats.failed + stats.cancelled
    assert stats.cancelled == len(rids)
    assert not {r.request_id for r in server.requests()} & rids  # never sent


def container_sizes(obj: Any) -> dict[str, int]:
    """The size of every non-empty container ``obj`` holds in an attribute (its per-item
    state; an empty one made lazily meanwhile counts as none)."""
    return {
        name: len(value)
        for name, value in vars(obj).items()
        if isinstance(value, dict | list | set | frozenset | tuple | deque) and len(value)
    }


def test_a_storm_of_early_cancels_leaves_no_state_behind(rig: Rig, server: MockLlmServer) -> None:
    """Thousands of requests cancelled before they arrive: each answered once, never sent,
    and the loop holds nothing per request id afterwards (no table of early cancels)."""
    model = never_answers(server)
    before = container_sizes(rig.loop)
    rids = [f"b{next(_ids)}" for _ in range(3000)]
    for rid in rids:
        request = rig.request(model, rid, session_id=rid)
        request.scope.cancel("speculation aborted")  # the cancel comes first
        rig.loop.submit(request)
    seen = rig.terminals(set(rids))
    assert_one_cancelled_each(seen, "speculation aborted")
    rig.settle()
    assert rig.loop.stats().in_flight == 0
    assert container_sizes(rig.loop) == before
    assert not {r.request_id for r in server.requests()} & set(rids)  # never sent


def test_submit_and_cancel_back_to_back_through_the_gateway(
    rig: Rig, server: MockLlmServer
) -> None:
    """Whatever the interleaving, each request ends with exactly one LlmCancelled."""
    model = never_answers(server)
    rids = [f"c{next(_ids)}" for _ in range(200)]
    for rid in rids:
        request = rig.request(model, rid, session_id=rid)
        rig.gateway.tell(request)
        request.scope.cancel("user typed")
    seen = rig.terminals(set(rids))
    assert_one_cancelled_each(seen, "user typed")
    rig.settle()
    stats = rig.loop.stats()
    assert stats.in_flight == 0 and stats.cancelled == len(rids)
    # Those that did reach the server were hung up on.
    server.wait_for_stats(lambda s: s.in_flight == 0, timeout_s=WAIT)
    late = []
    while True:
        try:
            late.append(rig.inbox.get(timeout=0.2))
        except queue.Empty:
            break
    assert not [m for m in late if isinstance(m, TERMINAL)]  # still exactly one each


def test_late_cancel_is_a_no_op_and_does_not_cancel_a_reused_id(rig: Rig) -> None:
    """Cancelling the scope of a request that already ended touches no later request."""
    from fore.actors.llm import ScriptedModel

    model = ScriptedModel([{"text": "one"}, {"text": "two"}])
    ended = rig.request(model, "reused")
    rig.loop.submit(ended)
    (first,) = rig.terminals({"reused"})["reused"]
    assert isinstance(first, LlmCompleted) and first.message.text == "one"
    ended.scope.cancel("too late")
    rig.loop.submit(rig.request(model, "reused"))
    (second,) = rig.terminals({"reused"})["reused"]
    assert isinstance(second, LlmCompleted) and second.message.text == "two"


def test_request_submitted_while_closing_still_gets_a_terminal_event(server: MockLlmServer) -> None:
    system = ActorSystem(name="llm-close-test")
    loop = LlmLoop()
    try:
        rig = Rig(system, loop)
        model = never_answers(server)
        rig.loop.submit(rig.request(model, "in-flight"))
        assert loop.close()
        rig.loop.submit(rig.request(model, "after-close"))
        seen = rig.terminals({"in-flight", "after-close"})
        assert isinstance(seen["in-flight"][0], LlmCancelled)
        assert isinstance(seen["after-close"][0], LlmFailed)
        assert all(len(events) == 1 for events in seen.values())
    finally:
        system.shutdown()


# -- the request's cancel scope (issue 22: a scope travels with the work) -----------------


def scoped(rig: Rig, model: Any, rid: str, scope: CancelScope) -> LlmRequest:
    return rig.request(model, rid, session_id=rid).model_copy(update={"scope": scope})


def test_a_request_whose_scope_was_cancelled_first_is_never_sent(
    rig: Rig, server: MockLlmServer
) -> None:
    """No early-cancel table involved: the scope is the record of the cancel."""
    model = never_answers(server)
    scopes = {f"s{next(_ids)}": CancelScope() for _ in range(20)}
    for rid, scope in scopes.items():
        scope.cancel("run cancelled")
        rig.gateway.tell(scoped(rig, model, rid, scope))
    seen = rig.terminals(set(scopes))
    assert_one_cancelled_each(seen, "run cancelled")
    rig.settle()
    assert rig.loop.stats().in_flight == 0
    assert not {r.request_id for r in server.requests()} & set(scopes)  # never sent
    assert all(scope.settled for scope in scopes.values())  # no lease left behind


def test_cancelling_a_requests_scope_cancels_it_wherever_it_is(
    rig: Rig, server: MockLlmServer
) -> None:
    """Queued behind a held loop or already streaming: one LlmCancelled each, lease released."""
    hold = HoldTheLoop()
    rig.loop.submit(rig.request(hold, "holder-scope"))
    assert hold.entered.wait(WAIT)
    model = never_answers(server)
    scopes = {f"t{next(_ids)}": CancelScope() for _ in range(20)}
    for rid, scope in scopes.items():  # all queued behind the held loop
        rig.loop.submit(scoped(rig, model, rid, scope))
    hold.release.set()
    for scope in scopes.values():
        scope.cancel("user typed")
    seen = rig.terminals(set(scopes))
    assert_one_cancelled_each(seen, "user typed")
    rig.settle()
    assert rig.loop.stats().in_flight == 0
    deadline = time.monotonic() + WAIT
    while not all(s.settled for s in scopes.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(scope.settled for scope in scopes.values())


def test_every_request_has_its_own_scope_that_its_sender_cancels(
    rig: Rig, server: MockLlmServer
) -> None:
    """A sender that gives no scope still holds one: the request is made with its own."""
    model = never_answers(server)
    first, second = rig.request(model, "own-1"), rig.request(model, "own-2")
    assert isinstance(first.scope, CancelScope) and isinstance(second.scope, CancelScope)
    assert first.scope is not second.scope
    first.scope.cancel("typed")  # before it is even sent
    rig.gateway.tell(first)
    rig.gateway.tell(second)
    server.wait_for_stats(lambda s: s.in_flight == 1, timeout_s=WAIT)  # the second streams
    second.scope.cancel("gave up")
    seen = rig.terminals({"own-1", "own-2"})
    assert [type(e) for e in seen["own-1"]] == [LlmCancelled]
    assert seen["own-1"][0].reason == "typed"
    assert [type(e) for e in seen["own-2"]] == [LlmCancelled]
    assert seen["own-2"][0].reason == "gave up"
    server.wait_for_stats(lambda s: "own-2" in s.disconnected_request_ids, timeout_s=WAIT)
    assert [r.request_id for r in server.requests()] == ["own-2"]  # the first was never sent
