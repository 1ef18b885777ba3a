"""Suggestions on offer: the display delay, and requests that typing makes moot.

The delay is checked by event order: a suggestion typed over before its delay never
produces a ``SuggestionReady`` -- the next one does, and nothing came before it.
A suggestion request still in flight when the user types or submits something else
is cancelled (the mock server sees the disconnect) and never shown or speculated; one
cancelled before it even reached the gateway is never sent at all (its scope is the
record of the cancel: nothing in the gateway or its loop remembers request ids).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm import OpenAICompatible, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptFile
from fore.messages.llm import GatewayStats, GetGatewayStats, LlmRequest
from fore.messages.session import TurnFinished
from fore.messages.speculation import SuggestionReady
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    main_reply,
    spec,
    suggestion,
    wait_until,
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    return tmp_path


def test_a_suggestion_is_not_on_offer_before_its_display_delay(runtime: Runtime, ws: Path) -> None:
    script = [
        *TWO_TURNS,
        suggestion("bump x to 2"),
        main_reply("Fine, leaving x alone."),
        suggestion("run the tests"),
    ]
    # A delay no test outlives: "not shown yet" cannot depend on how fast this runs.
    config = spec(suggestion_delay_ms=3_600_000)
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        # ready (its speculation already runs) but not shown yet: not on offer
        wait_until(lambda: s.speculation.suggestion == "bump x to 2")
        assert s.suggestion is None
        assert s.accept(timeout=WAIT).outcome == "no_suggestion"
        s.keystroke("leave")  # typed over before the delay
        s.submit("leave x alone", timeout=WAIT)
        wait_until(lambda: s.speculation.suggestion == "run the tests")  # ready, not shown
        assert s.suggestion is None
        events = s.drain_events()
    assert not [e for e in events if isinstance(e, SuggestionReady)]  # neither was shown


def test_a_shown_suggestion_waited_at_least_its_display_delay(runtime: Runtime, ws: Path) -> None:
    """Behaviour, not speed: the event's time is at least the delay after the suggestion
    was made (both on the wall clock), and it comes after the turn that produced it."""
    delay_ms = 200
    script = [*TWO_TURNS, suggestion("bump x to 2")]
    config = spec(suggestion_delay_ms=delay_ms, speculate=False)
    with runtime.open_session(workspace=ws, model=ScriptedModel(script), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.suggestion == "bump x to 2")
        events = s.drain_events()
    (ready,) = [e for e in events if isinstance(e, SuggestionReady)]
    # timers never fire early; 1 ms of slack for the two clocks' rounding
    assert ready.at - ready.suggestion.created_at >= delay_ms / 1000 - 0.001
    ends = [i for i, e in enumerate(events) if isinstance(e, TurnFinished)]
    assert events.index(ready) > ends[-1]  # shown after the turn that produced it


def slow_suggestion_script(text: str) -> ScriptFile:
    return ScriptFile.model_validate(
        {
            "replies": [
                *TWO_TURNS,
                {
                    "when": {"purpose": "suggestion"},
                    "text": f'{{"suggestion": "{text}"}}',
                    "delay_ms": 30_000,
                },
                main_reply("Fine, leaving x alone."),
                suggestion("run the tests"),
            ]
        }
    )


@pytest.mark.parametrize("how", ["typing", "a different submit"])
def test_a_suggestion_request_in_flight_is_cancelled(runtime: Runtime, ws: Path, how: str) -> None:
    with MockLlmServer(slow_suggestion_script("bump x to 2")) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(workspace=ws, model=model, speculation=spec()) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: any(r.purpose == "suggestion" for r in server.requests()))
            (rid,) = [r.request_id for r in server.requests() if r.purpose == "suggestion"]
            if how == "typing":
                s.keystroke("leave")
            s.submit("leave x alone", timeout=WAIT)
            server.wait_for_stats(lambda st: rid in st.disconnected_request_ids, timeout_s=WAIT)
            wait_until(lambda: s.suggestion == "run the tests")
            events = s.drain_events()
        speculated = [r.body for r in server.requests() if r.purpose == "speculation"]
    shown = [e.suggestion.text for e in events if isinstance(e, SuggestionReady)]
    assert shown == ["run the tests"]
    assert not any("bump x to 2" in _last_user(body) for body in speculated)


class HeldSuggestions:
    """The controller's way to the gateway, holding its suggestion requests until released."""

    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway
        self.requests: list[LlmRequest] = []
        self._holding = True
        self._lock = threading.Lock()

    def tell(self, message: Any) -> None:
        with self._lock:
            if (
                self._holding
                and isinstance(message, LlmRequest)
                and message.purpose == "suggestion"
            ):
                self.requests.append(message)
                return
        self.gateway.tell(message)

    def release(self) -> None:
        with self._lock:
            self._holding = False
            held, self.requests = self.requests, []
        for message in held:
            self.gateway.tell(message)


def test_a_suggestion_request_cancelled_before_it_reaches_the_gateway_is_never_sent(
    runtime: Runtime, ws: Path
) -> None:
    def stats() -> GatewayStats:
        answer: GatewayStats = runtime.llm_gateway.ask(GetGatewayStats(), timeout=WAIT)
        return answer

    with MockLlmServer(slow_suggestion_script("bump x to 2")) as server:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        with runtime.open_session(workspace=ws, model=model, speculation=spec()) as s:
            controller = s.controller._actor_weakref()
            held = HeldSuggestions(controller.worker_config.gateway)
            controller.worker_config.gateway = held
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            wait_until(lambda: len(held.requests) == 1)
            (request,) = held.requests
            s.keystroke("leave")  # the controller cancels it by its scope
            wait_until(lambda: request.scope.cancel_called)
            before = stats()
            held.release()  # now it reaches the gateway, and its loop
            wait_until(lambda: stats().cancelled == before.cancelled + 1)
            assert stats().in_flight == 0
            assert s.suggestion is None
        sent = [r.request_id for r in server.requests()]
    assert request.request_id not in sent  # counted at the server: never sent
    assert len(sent) == 2  # the two main turns


def _last_user(body: Any) -> str:
    users = [m for m in body["messages"] if m["role"] == "user"]
    return str(users[-1]["content"]) if users else ""
