"""Hot-path objects are freed by reference counting, not left to the cyclic collector.

Under load a reference cycle per tool batch, per LLM answer or per stopped
actor meant thousands of objects for the cyclic collector each second; its
collections stop every thread of the process (25-45 ms young-generation pauses
in ``fore bench``), which is what the tail of main-turn latency was made of.
Each test here disables the collector, runs the real thing, drops its own
references and waits for a weak reference to die: only reference counting can
free it then, so a cycle makes the test fail.
"""

from __future__ import annotations

import asyncio
import gc
import queue
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fore.actors.core import ActorSystem, PooledActor, handles
from fore.actors.core.cancel import CancelScope
from fore.actors.llm import FunctionModel, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.models import OpenAICompatible
from fore.actors.llm.netio import FastAsyncTransport
from fore.actors.llm.script import ScriptFile, ScriptReply
from fore.actors.overlay import OverlayFs, OverlayStore
from fore.actors.speculation.governor import LoadGovernor
from fore.actors.tools import ToolRegistry, WorkspaceFs
from fore.messages.base import Message
from fore.messages.conversation import UserMessage
from fore.messages.gate import ApprovalMode
from fore.messages.llm import LlmRequest
from fore.messages.session import Submit
from fore.messages.tools import RunToolBatch, ToolBatchFinished
from fore.supervision import Runtime
from tests.speculation.test_speculation import bump_script, settled, spec
from tests.tools.test_tool_pool import Collector, Probe, calls, quick_tool, start_pool, wait_until

WAIT = 15.0


@pytest.fixture(autouse=True)
def no_cyclic_collection() -> Iterator[None]:
    """Run the test with the cyclic collector off (it would hide a cycle)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def freed(ref: weakref.ref[Any]) -> bool:
    """Wait until ``ref`` dies (a thread of the runtime may still be letting go)."""
    try:
        wait_until(lambda: ref() is None, timeout=5.0)
    except AssertionError:
        return False
    return True


def test_a_finished_tool_batch_is_freed_without_the_collector(tmp_path: Path) -> None:
    rt = Runtime(name="cycles-pool")
    try:
        q: queue.Queue[Any] = queue.Queue()
        with rt.system.activated():
            collector = Collector.start(q)
        pool = start_pool(rt)
        probe = Probe()
        request = RunToolBatch(
            batch_id="b1",
            session_id="s1",
            calls=calls("quick", ["a", "b", "c"]),
            tools=ToolRegistry([quick_tool(probe)]),
            fs=WorkspaceFs(tmp_path),
            reply_to=collector,
        )
        pool.tell(request)
        while not isinstance(message := q.get(timeout=WAIT), ToolBatchFinished):
            pass
        assert [r.result.output for r in message.results] == ["a", "b", "c"]
        batch = weakref.ref(request)
        del request, message
        assert freed(batch), "the pool keeps its finished batch in a reference cycle"
    finally:
        assert rt.close(timeout=30)


class _Remembers(PooledActor):
    """Hands the test a weak reference to itself."""

    def __init__(self, out: queue.Queue[Any]) -> None:
        super().__init__()
        out.put(weakref.ref(self))

    @handles(Message)
    def _any(self, _message: Message) -> None:
        """Nothing to do."""


def test_a_stopped_actor_is_freed_without_the_collector() -> None:
    system = ActorSystem(name="cycles-actor")
    try:
        out: queue.Queue[Any] = queue.Queue()
        with system.activated():
            ref = _Remembers.start(out)
        actor = out.get(timeout=WAIT)
        assert actor() is not None
        ref.stop(timeout=WAIT)
        del ref
        assert freed(actor), "a stopped actor and its mailbox stay in a reference cycle"
    finally:
        assert system.shutdown(timeout=WAIT)


def test_an_accepted_speculations_overlay_is_freed_without_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applied on the blocking lane by its controller, then removed: nothing keeps the
    overlay (its finished apply, its stopped worker, the controller's record) in a cycle."""
    made: list[weakref.ref[OverlayFs]] = []
    create = OverlayStore.create

    def remembered(self: OverlayStore, *args: Any, **kwargs: Any) -> OverlayFs:
        overlay = create(self, *args, **kwargs)
        made.append(weakref.ref(overlay))
        return overlay

    monkeypatch.setattr(OverlayStore, "create", remembered)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    rt = Runtime(
        name="cycles-overlay",
        overlay_root=tmp_path / "overlays",
        speculation_governor=LoadGovernor(enabled=False),
    )
    try:
        config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
        model = ScriptedModel(bump_script())
        with rt.open_session(workspace=ws, model=model, speculation=config) as s:
            s.submit("hi", timeout=WAIT)
            s.submit("what is x?", timeout=WAIT)
            assert settled(s) == "completed"
            assert s.accept(timeout=WAIT).outcome == "accepted"
            assert (ws / "app.py").read_text() == "x = 2\n"
            first = made[0]
            wait_until(lambda: (overlay := first()) is None or overlay.gone.is_set())
            assert freed(first), "an accepted speculation's overlay stays in a reference cycle"
    finally:
        assert rt.close(timeout=30)


def test_an_llm_answer_is_freed_without_the_collector() -> None:
    script = ScriptFile(replies=(ScriptReply(text="one two three four five"),))
    responses: list[weakref.ref[httpx.Response]] = []

    async def remember(response: httpx.Response) -> None:
        responses.append(weakref.ref(response))

    async def ask(server: MockLlmServer) -> str:
        model = OpenAICompatible(base_url=server.base_url, api_key="k", model="mock")
        request = LlmRequest(request_id="r1", session_id="s1", messages=(UserMessage(text="hi"),))
        async with httpx.AsyncClient(
            transport=FastAsyncTransport(), event_hooks={"response": [remember]}
        ) as http:
            result = await model.stream(request, lambda _event: None, http)
        return result.message.text

    with MockLlmServer(script) as server:
        assert asyncio.run(ask(server)) == "one two three four five"
    assert len(responses) == 1
    assert freed(responses[0]), "an answer's httpx response stays in a reference cycle"


@pytest.mark.parametrize("how", ["completed", "cancelled first", "cancelled running"])
def test_a_submits_scope_is_freed_without_the_collector(tmp_path: Path, how: str) -> None:
    """The worker's callback on a sender's scope (its cancel ends the run) is dropped when
    the run ends, however it ends: the scope, the run and the worker keep no cycle."""
    release = threading.Event()

    def answer(request: LlmRequest) -> str:
        release.wait(WAIT)
        return "done"

    rt = Runtime(name="cycles-scope")
    try:
        model = FunctionModel(answer, keep_requests=0)  # it would keep the requests (scopes)
        with rt.open_session(workspace=tmp_path, model=model) as s:
            scope = CancelScope()
            if how == "cancelled first":
                scope.cancel("typed")
            pending = s.worker.ask(Submit(text="go", scope=scope), block=False)
            if how == "cancelled running":
                wait_until(lambda: s.run_state().phase == "streaming", timeout=WAIT)
                scope.cancel("typed")
            release.set()
            status = pending.get(timeout=WAIT).status
            assert status == ("completed" if how == "completed" else "cancelled")
            gone = weakref.ref(scope)
            del scope, pending
            assert freed(gone), "a submit's scope stays in a reference cycle"
    finally:
        release.set()
        assert rt.close(timeout=WAIT)
