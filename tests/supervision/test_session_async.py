"""The session API for asyncio applications and front ends (issue 24, point 4).

Each test is an asyncio program (``asyncio.run``) on a real runtime and
session: ``s.stream()`` events, ``await s.asubmit(...)`` / ``s.aaccept()``,
status events, ``s.cancel()`` reaching a waiting Tab, ``s.set_model``. Where
a test must know the loop was never blocked, the model itself waits for the
loop's heartbeat: a blocked loop would never let the turn end (and the test
would fail at its bounded wait), so no test asserts on timing.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fore.actors.core import AskTimeout
from fore.actors.llm import FunctionModel, ScriptedModel, ScriptReply
from fore.actors.worker.worker import WorkerBusy
from fore.messages.llm import LlmRequest
from fore.messages.session import (
    AlertRaised,
    RunStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnFinished,
)
from fore.messages.speculation import (
    SpeculationConfig,
    SpeculationFinished,
    SpeculationStatusChanged,
    SuggestionReady,
)
from fore.supervision import Runtime, Session
from fore.supervision.session_async import EventStream

WAIT = 30.0
T = TypeVar("T")

EDIT = {"path": "app.py", "old_string": "hello", "new_string": "bye"}


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, WAIT * 2)

    return asyncio.run(bounded())


async def until(predicate: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def next_of(stream: EventStream, kind: type[T]) -> T:
    async for event in stream:
        if isinstance(event, kind):
            return event
    raise AssertionError(f"the stream ended before a {kind.__name__}")


def tool_turn() -> ScriptedModel:
    return ScriptedModel(
        [
            {
                "when": {"purpose": "main"},
                "text": "Reading.",
                "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}],
            },
            {"when": {"purpose": "main"}, "text": "It prints hello."},
        ]
    )


# -- stream ---------------------------------------------------------------------------------------


def test_the_stream_yields_a_turns_events_in_order(runtime: Runtime, workspace: Path) -> None:
    async def main() -> list[Any]:
        with runtime.open_session(workspace=workspace, model=tool_turn()) as s:
            async with s.stream() as events:
                turn = await s.asubmit("what does @app.py print?", timeout=WAIT)
                seen = []
                async for event in events:
                    seen.append(event)
                    if isinstance(event, TurnFinished):
                        break
                assert turn.status == "completed"
                assert seen[-1].result == turn
                blocking = [e for e in s.drain_events() if not isinstance(e, AlertRaised)]
                return [seen, blocking]

    seen, blocking = run(main())
    kinds = [type(e) for e in seen]
    assert kinds[0] is RunStarted and kinds[-1] is TurnFinished
    assert kinds.index(ToolStarted) < kinds.index(ToolFinished)
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == ("Reading.It prints hello.")
    # the same events, in the same order, as the blocking events() saw
    assert seen == blocking[: len(seen)]


def test_each_stream_is_an_independent_consumer(runtime: Runtime, workspace: Path) -> None:
    async def main() -> None:
        with runtime.open_session(workspace=workspace, model=tool_turn()) as s:
            one, two = s.stream(), s.stream()
            await s.asubmit("go", timeout=WAIT)
            first = await next_of(one, TurnFinished)
            second = await next_of(two, TurnFinished)
            assert first == second

    run(main())


def test_a_cancelled_wait_leaves_the_stream_usable_and_aclose_ends_it(
    runtime: Runtime, workspace: Path
) -> None:
    async def main() -> None:
        with runtime.open_session(workspace=workspace, model=tool_turn()) as s:
            stream = s.stream()
            waiting = asyncio.create_task(stream.__anext__())
            await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await s.asubmit("go", timeout=WAIT)
            assert isinstance(await next_of(stream, TurnFinished), TurnFinished)
            subscribers = len(s._state.subscribers)
            await stream.aclose()
            assert [e async for e in stream] == [] or stream.closed
            await until(lambda: len(s._state.subscribers) == subscribers - 1, "unsubscribed")

    run(main())


def test_a_stream_nobody_holds_unsubscribes_itself(runtime: Runtime, workspace: Path) -> None:
    async def main() -> None:
        with runtime.open_session(workspace=workspace, model=tool_turn()) as s:
            before = len(s._state.subscribers)
            streams = [s.stream(), s.stream()]
            await until(lambda: len(s._state.subscribers) == before + 2, "two streams")
            del streams  # as after a break out of ``async for event in s.stream()``
            gc.collect()
            await s.asubmit("go", timeout=WAIT)  # its first event finds the streams gone
            await until(lambda: len(s._state.subscribers) == before, "the streams dropped")

    run(main())


def test_the_stream_ends_when_the_session_closes(runtime: Runtime, workspace: Path) -> None:
    async def main() -> None:
        s = runtime.open_session(workspace=workspace, model=tool_turn())
        stream = s.stream()
        reader = asyncio.create_task(stream.__anext__())
        await asyncio.sleep(0)
        await s.aclose()
        with pytest.raises(StopAsyncIteration):
            await reader
        late = s.stream()  # a stream of a closed session is over at once
        assert [e async for e in late] == []

    run(main())


def test_a_stream_is_bounded_and_counts_what_it_dropped(runtime: Runtime, workspace: Path) -> None:
    async def main() -> None:
        model = ScriptedModel([{"text": "one two three four five six seven eight nine ten"}])
        with runtime.open_session(workspace=workspace, model=model) as s:
            stream = s.stream(maxlen=3)
            turn = await s.asubmit("go", timeout=WAIT)
            await until(lambda: any(isinstance(e, TurnFinished) for e in stream._events), "end")
            kept = [e async for e in _take(stream, 3)]
            assert stream.dropped > 0
            assert isinstance(kept[-1], TurnFinished) and kept[-1].result == turn

    run(main())


async def _take(stream: EventStream, n: int) -> Any:
    for _ in range(n):
        yield await stream.__anext__()


def test_stream_needs_a_running_loop(runtime: Runtime, workspace: Path) -> None:
    with (
        runtime.open_session(workspace=workspace, model=tool_turn()) as s,
        pytest.raises(RuntimeError),
    ):
        s.stream()


# -- asubmit ------------------------------------------------------------------------------------


def test_asubmit_never_blocks_the_loop(runtime: Runtime, workspace: Path) -> None:
    """The model answers only once the loop's heartbeat has ticked while it waited."""
    ticked = threading.Event()

    def patient(request: LlmRequest) -> str:
        assert ticked.wait(WAIT), "the event loop was blocked"
        return "answered"

    async def main() -> int:
        beats = 0

        async def heartbeat() -> None:
            nonlocal beats
            while True:
                beats += 1
                if beats >= 5:
                    ticked.set()
                await asyncio.sleep(0.001)

        with runtime.open_session(workspace=workspace, model=FunctionModel(patient)) as s:
            beat = asyncio.create_task(heartbeat())
            try:
                turn = await s.asubmit("go", timeout=WAIT)
            finally:
                beat.cancel()
            assert turn.status == "completed"
            return beats

    assert run(main()) >= 5


def hanging_model(release: threading.Event, started: threading.Event) -> FunctionModel:
    def slow(request: LlmRequest) -> str:
        if request.purpose == "main" and "slow" in str(request.messages[-1]):
            started.set()
            release.wait(WAIT)
        return "ok"

    return FunctionModel(slow)


def test_cancelling_asubmit_cancels_the_run(runtime: Runtime, workspace: Path) -> None:
    release, started = threading.Event(), threading.Event()

    async def main() -> None:
        with runtime.open_session(workspace=workspace, model=hanging_model(release, started)) as s:
            events = s.stream()
            task = asyncio.create_task(s.asubmit("slow one", timeout=WAIT))
            await until(started.is_set, "the slow request")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            finished = await next_of(events, TurnFinished)
            assert finished.result.status == "cancelled"
            release.set()
            assert (await s.asubmit("next", timeout=WAIT)).status == "completed"

    try:
        run(main())
    finally:
        release.set()


def test_asubmit_past_its_timeout_raises_and_cancels_the_run(
    runtime: Runtime, workspace: Path
) -> None:
    release, started = threading.Event(), threading.Event()

    async def main() -> None:
        with runtime.open_session(workspace=workspace, model=hanging_model(release, started)) as s:
            events = s.stream()
            with pytest.raises(AskTimeout):
                await s.asubmit("slow one", timeout=0.2)
            assert (await next_of(events, TurnFinished)).result.status == "cancelled"

    try:
        run(main())
    finally:
        release.set()


# -- suggestions: aaccept, status events, calling a waiting Tab off ------------------------------


def two_answers_then_a_suggestion(spec: Callable[[LlmRequest], Any]) -> FunctionModel:
    """Two main answers, then the suggestion "make it say bye"; speculation by ``spec``."""
    answers = iter(["Hello.", "It prints hello.", "Done.", "Done again."])

    def reply(request: LlmRequest) -> Any:
        if request.purpose == "main":
            return next(answers, "…")
        if request.purpose == "suggestion":
            return '{"suggestion": "make it say bye"}'
        if request.purpose == "pipelined":
            return '{"suggestion": "run it"}'
        return spec(request)

    return FunctionModel(reply)


def edit_then_answer(request: LlmRequest) -> Any:
    if any(getattr(m, "kind", "") == "tool_result" for m in request.messages[-1:]):
        return "It says bye now."
    return ScriptReply(tool_calls=[{"name": "edit", "arguments": EDIT}])


def open_speculating(runtime: Runtime, workspace: Path, model: Any) -> Session:
    return runtime.open_session(
        workspace=workspace,
        model=model,
        speculation=SpeculationConfig(enabled=True, approval_mode="auto-edit"),
    )


def test_aaccept_applies_the_speculation_from_an_asyncio_app(
    runtime: Runtime, workspace: Path
) -> None:
    async def main() -> None:
        model = two_answers_then_a_suggestion(edit_then_answer)
        with open_speculating(runtime, workspace, model) as s:
            events = s.stream()
            await s.asubmit("hi", timeout=WAIT)
            await s.asubmit("what does it print?", timeout=WAIT)
            ready = await next_of(events, SuggestionReady)
            assert ready.suggestion.text == "make it say bye"
            result = await s.aaccept(timeout=WAIT)
            assert (result.outcome, result.files_applied) == ("accepted", ("app.py",))

    run(main())
    assert "bye" in (workspace / "app.py").read_text()


def test_status_events_tell_the_speculations_story(runtime: Runtime, workspace: Path) -> None:
    async def main() -> tuple[list[SpeculationStatusChanged], list[SpeculationStatusChanged]]:
        model = two_answers_then_a_suggestion(edit_then_answer)
        with open_speculating(runtime, workspace, model) as s:
            events = s.stream()
            await s.asubmit("hi", timeout=WAIT)
            await s.asubmit("what does it print?", timeout=WAIT)
            offered: list[SpeculationStatusChanged] = []
            async for event in events:
                if isinstance(event, SpeculationStatusChanged):
                    offered.append(event)
                    if event.status.state == "completed" and event.shown:
                        break
            # the pull API agrees with the last push
            assert s.speculation == offered[-1].status
            assert s.suggestion == offered[-1].shown
            await s.aaccept(timeout=WAIT)
            tab: list[SpeculationStatusChanged] = []
            async for event in events:
                if isinstance(event, SpeculationStatusChanged):
                    tab.append(event)
                if isinstance(event, SpeculationFinished):
                    assert event.outcome == "accepted"
                    break
            return offered, tab

    offered, tab = run(main())
    states = [(e.status.state, e.status.tool_calls, e.status.files_written) for e in offered]
    # running: no call yet, then the edit (and its file once it returned), then ready
    assert states[0] == ("running", 0, 0)
    assert ("running", 1, 1) in states
    done = states.index(("completed", 1, 1))
    assert {state for state, _c, _f in states[:done]} == {"running"}
    assert offered[-1].shown == "make it say bye"
    for before, after in itertools.pairwise(offered):
        assert (before.status, before.shown) != (after.status, after.shown)
    # Tab: the ghost goes and the accept is under way, on the speculation that ran
    assert tab[0].shown is None and tab[0].status.accepting
    assert tab[0].status.speculation_id == offered[-1].status.speculation_id


def test_typing_aborts_and_the_status_says_so(runtime: Runtime, workspace: Path) -> None:
    async def main() -> None:
        model = two_answers_then_a_suggestion(edit_then_answer)
        with open_speculating(runtime, workspace, model) as s:
            events = s.stream()
            await s.asubmit("hi", timeout=WAIT)
            await s.asubmit("what does it print?", timeout=WAIT)
            await next_of(events, SuggestionReady)
            s.keystroke("x")
            async for event in events:
                if isinstance(event, SpeculationStatusChanged) and event.status.state == "aborted":
                    assert event.shown is None
                    break

    run(main())
    assert (workspace / "app.py").read_text() == "print('hello')\n"


def blocked_speculation(release: threading.Event, running: threading.Event) -> Any:
    def spec(request: LlmRequest) -> Any:
        running.set()
        release.wait(WAIT)  # still running when Tab comes
        return edit_then_answer(request)

    return spec


@pytest.mark.parametrize("how", ["cancel", "task"])
def test_a_tab_waiting_on_a_running_speculation_is_called_off(
    runtime: Runtime, workspace: Path, how: str
) -> None:
    """``s.cancel()`` (Ctrl-C) -- or cancelling ``aaccept`` -- calls a waiting Tab off."""
    release, running = threading.Event(), threading.Event()

    async def main() -> None:
        model = two_answers_then_a_suggestion(blocked_speculation(release, running))
        with open_speculating(runtime, workspace, model) as s:
            events = s.stream()
            await s.asubmit("hi", timeout=WAIT)
            await s.asubmit("what does it print?", timeout=WAIT)
            await next_of(events, SuggestionReady)
            await until(running.is_set, "the speculation to run")
            tab = asyncio.create_task(s.aaccept(timeout=WAIT))
            await until(lambda: s.speculation.accepting, "Tab to wait for the speculation")
            if how == "cancel":
                s.cancel("Ctrl-C")
                result = await tab
                assert (result.outcome, result.files_applied) == ("aborted", ())
            else:
                tab.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await tab
            release.set()  # the speculation would finish now: nothing may be applied
            finished = await next_of(events, SpeculationFinished)
            assert finished.outcome == "aborted"
            assert (await s.asubmit("and now?", timeout=WAIT)).status == "completed"

    try:
        run(main())
    finally:
        release.set()
    assert (workspace / "app.py").read_text() == "print('hello')\n"


# -- set_model ------------------------------------------------------------------------------------


class Named(FunctionModel):
    def __init__(self, name: str) -> None:
        super().__init__(lambda request: f"{name} here", name=name)
        self.forgotten: list[str] = []

    def forget(self, session_id: str) -> None:
        self.forgotten.append(session_id)
        super().forget(session_id)


def test_set_model_switches_from_the_next_turn(runtime: Runtime, workspace: Path) -> None:
    first, second = Named("first"), Named("second")
    s = runtime.open_session(workspace=workspace, model=first)
    with s:
        assert s.submit("hi", timeout=WAIT).items[-1].text == "first here"
        s.set_model(second)
        turn = s.submit("again", timeout=WAIT)
        assert turn.items[-1].text == "second here"
        assert second.requests[-1].model_name == "second"
        assert [r.model_name for r in first.requests] == ["first"]
    assert s.id in second.forgotten and s.id in first.forgotten


def test_set_model_during_a_run_is_refused(runtime: Runtime, workspace: Path) -> None:
    release, started = threading.Event(), threading.Event()
    s = runtime.open_session(workspace=workspace, model=hanging_model(release, started))
    try:
        with s:
            thread = threading.Thread(target=lambda: s.submit("slow", timeout=WAIT))
            thread.start()
            assert started.wait(WAIT)
            with pytest.raises(WorkerBusy):
                s.set_model(Named("other"))
            release.set()
            thread.join(WAIT)
    finally:
        release.set()


def test_set_model_withdraws_the_old_models_suggestion(runtime: Runtime, workspace: Path) -> None:
    async def main() -> None:
        model = two_answers_then_a_suggestion(edit_then_answer)
        with open_speculating(runtime, workspace, model) as s:
            events = s.stream()
            await s.asubmit("hi", timeout=WAIT)
            await s.asubmit("what does it print?", timeout=WAIT)
            await next_of(events, SuggestionReady)
            s.set_model(Named("new"))
            assert s.suggestion is None
            finished = await next_of(events, SpeculationFinished)
            assert finished.outcome == "aborted"
            assert (await s.asubmit("hi", timeout=WAIT)).items[-1].text == "new here"

    run(main())
    assert (workspace / "app.py").read_text() == "print('hello')\n"
