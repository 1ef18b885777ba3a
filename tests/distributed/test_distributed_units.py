"""fore.distributed's plain parts, without Ray: placement, the event sink, shipping, specs,
and a shard's server object driven in this process (its durability and its resume).

The same ``ShardServer`` runs as a Ray actor in ``tests/distributed/test_distributed_ray.py``;
here its ``async`` methods are awaited directly, so what it promises about the
store is tested without a cluster. Nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import socket
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fore.testing
from fore.actors.llm import FunctionModel, OpenAICompatible, ScriptedModel
from fore.actors.store import SessionLeased, open_store
from fore.actors.worker.hooks import Continue, HookEvent, Hooks
from fore.distributed.directory import ShardState
from fore.distributed.errors import WorkspaceUnreachable
from fore.distributed.events import EventSink
from fore.distributed.placement import (
    PRESSURE_WINDOW,
    ShardInfo,
    ShardLoad,
    choose_shard,
    pressure_band,
    sustained_pressure,
    weighted_load,
)
from fore.distributed.shard import SessionNotHere, ShardConfig, ShardServer
from fore.distributed.shipping import NotShippable, dumps, loads
from fore.distributed.spec import PLAIN_OPTIONS, SessionSpec, options_from_config
from fore.messages.conversation import AssistantMessage, ToolResult
from fore.messages.llm import LlmRequest
from fore.messages.session import GetHistory, ItemAdded, TurnFinished
from fore.messages.speculation import SpeculationConfig
from fore.supervision.resume import ModelNotRebuildable, rebuild_model

# -- placement --------------------------------------------------------------------------------

NODES = ("n1", "n2")


@st.composite
def loads_strategy(draw: Any) -> list[ShardLoad]:
    count = draw(st.integers(min_value=0, max_value=6))
    return [
        ShardLoad(
            index=i,
            incarnation=f"inc{i}",
            node_id=draw(st.sampled_from(NODES)),
            alive=draw(st.booleans()),
            pressure_ms=draw(st.floats(min_value=0, max_value=40, allow_nan=False)),
            threshold_ms=4.0,
            sessions=draw(st.integers(min_value=0, max_value=50)),
        )
        for i in range(count)
    ]


@given(
    loads_strategy(),
    st.sampled_from((None, *NODES)),
    st.lists(st.integers(min_value=0, max_value=5), max_size=6),
)
@settings(max_examples=300, deadline=None)
def test_placement_picks_the_least_loaded_live_shard_on_the_node(
    loads: list[ShardLoad], node: str | None, placed: list[int]
) -> None:
    chosen = choose_shard(loads, node=node, placed=placed)
    candidates = [s for s in loads if s.alive and (node is None or s.node_id == node)]
    if not candidates:
        assert chosen is None
        return
    assert chosen is not None and chosen in candidates

    best = min(weighted_load(s, placed) for s in candidates)
    assert weighted_load(chosen, placed) == best
    assert chosen.index == min(s.index for s in candidates if weighted_load(s, placed) == best)
    # the weight is monotonic: more sessions or more pressure never make a shard lighter
    for s in candidates:
        heavier = s.model_copy(
            update={"sessions": s.sessions + 1, "pressure_ms": s.pressure_ms + 4}
        )
        assert weighted_load(heavier, placed) > weighted_load(s, placed)


def test_a_busier_governor_loses_to_an_idle_one_even_with_fewer_sessions() -> None:
    def load(index: int, pressure: float, sessions: int) -> ShardLoad:
        return ShardLoad(
            index=index,
            incarnation="x",
            node_id="n1",
            pressure_ms=pressure,
            threshold_ms=4.0,
            sessions=sessions,
        )

    busy, idle = load(0, 9.0, 10), load(1, 0.5, 20)
    assert choose_shard([busy, idle]) == idle
    # jitter inside one band does not decide: the session count does
    a, b = load(0, 0.4, 10), load(1, 1.6, 3)
    assert choose_shard([a, b]) == b
    # below the governor's threshold every shard has headroom: sessions decide, not the
    # jitter of the pressure sample (a burst of opens once all went to one idle shard)
    c, d = load(0, 2.0, 0), load(1, 1.9, 20)
    assert choose_shard([c, d]) == c
    # a burst of opens against a shard sampling just above the threshold: it takes fewer
    # new sessions, never none (once 184 of 200 went to the other shard)
    shards = [load(0, 1.0, 0), load(1, 4.5, 0)]
    counts = [0, 0]
    for _ in range(200):
        chosen = choose_shard(shards, placed=counts)
        assert chosen is not None
        counts[chosen.index] += 1
    assert counts[0] > counts[1] >= 60
    # sessions placed since the last report count
    assert choose_shard([a, b], placed=[0, 8]) == a


def test_a_spiking_shard_is_not_starved_by_placement_on_its_sustained_pressure() -> None:
    """Bursts of 200 opens, a load report every 8 opens (as the runtime polls): shard #1's
    reports spike above the band one time in three (a GC pause, a neighbour), shard #0's
    do not. Weighing the lowest of the recent reports, every burst splits evenly;
    weighing each raw report, a spike in the last reports leaves a lasting skew."""

    def place(window: int, seed: int) -> list[int]:
        rng = random.Random(seed)
        history: list[deque[float]] = [deque(maxlen=window), deque(maxlen=window)]
        sessions, reported, placed = [0, 0], [0, 0], [0, 0]
        for n in range(200):
            if n % 8 == 0:
                for i in (0, 1):
                    spike = 6.0 if i == 1 and rng.random() < 0.33 else 0.0
                    history[i].append(rng.uniform(0.5, 3.0) + spike)
                    reported[i], placed[i] = sessions[i], 0
            loads = [
                ShardLoad(
                    index=i,
                    incarnation=f"i{i}",
                    node_id="n",
                    pressure_ms=sustained_pressure(history[i], window),
                    threshold_ms=4.0,
                    sessions=reported[i],
                )
                for i in (0, 1)
            ]
            chosen = choose_shard(loads, placed=placed)
            assert chosen is not None
            sessions[chosen.index] += 1
            placed[chosen.index] += 1
        return sessions

    assert sustained_pressure([]) == 0.0
    assert sustained_pressure([9.0] * (PRESSURE_WINDOW - 1)) == 0.0  # no evidence yet
    assert sustained_pressure([float("nan"), 5.0, 2.0], window=3) == 2.0
    assert sustained_pressure([1.0, 9.0, 8.0], window=2) == 8.0  # the last reports only
    with pytest.raises(ValueError):
        sustained_pressure([1.0], window=0)
    raw = [place(1, seed)[1] for seed in range(20)]
    assert min(raw) <= 80, raw  # one-report spikes skew a burst: 120/80 (seeds 6, 9, 10)
    sustained = [place(PRESSURE_WINDOW, seed)[1] for seed in range(20)]
    assert all(96 <= share <= 104 for share in sustained), sustained


@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True))
def test_pressure_bands_are_monotonic_and_total(p: float, q: float) -> None:
    band = pressure_band(p)
    assert band >= 0
    if not math.isnan(p) and not math.isnan(q) and p <= q:
        assert band <= pressure_band(q)
    with pytest.raises(ValueError):
        pressure_band(1.0, 0.0)


def test_a_late_report_is_a_busy_shard_and_only_long_silence_takes_it_out() -> None:
    """The directory's late-report rule, as plain code: a report not in yet counts the shard
    slow but keeps it placed on; only ``unresponsive_s`` of silence takes it out, and its next
    report brings it back. A report from a new incarnation buries the old one."""
    info = ShardInfo(index=0, incarnation="a", pid=1, node_id="n", node_ip="10.0.0.1", hostname="h")
    load = ShardLoad(
        index=0, incarnation="a", node_id="n", pressure_ms=1.0, threshold_ms=4.0, sessions=3
    )
    shard = ShardState(index=0, handle=None, info=info, load=load)
    shard.pending_since = 100.0
    for now in (100.3, 102.0, 104.9):
        shard.missed(now, unresponsive_s=5.0)
        assert shard.alive
    assert shard.slow_polls == 3
    shard.missed(105.1, unresponsive_s=5.0)
    assert not shard.alive
    shard.reported(info, load)
    assert shard.alive and shard.dead == set()
    restarted = info.model_copy(update={"incarnation": "b", "pid": 2})
    shard.reported(restarted, load.model_copy(update={"incarnation": "b", "pressure_ms": 9.0}))
    assert shard.dead == {"a"} and shard.info == restarted
    assert list(shard.pressures) == [9.0]  # the old process's pressure is not the new one's


# -- the event sink ---------------------------------------------------------------------------


async def _read(sink: EventSink, kinds: Any = None, until: int | None = None) -> list[Any]:
    got: list[Any] = []
    async for batch in sink.batches(kinds):
        assert batch, "a batch is never empty"
        got.extend(batch)
        if until is not None and len(got) >= until:
            break
    return got


def test_events_cross_threads_in_order_in_batches() -> None:
    sink = EventSink("s1", maxlen=100_000)
    count = 20_000

    def produce() -> None:
        for i in range(count):
            sink.tell(i)
        sink.close()

    async def main() -> list[Any]:
        producer = threading.Thread(target=produce)
        producer.start()
        try:
            return await asyncio.wait_for(_read(sink), 60)
        finally:
            producer.join(30)

    assert asyncio.run(main()) == list(range(count))
    assert sink.dropped == 0


def test_unread_events_are_bounded_dropping_the_oldest() -> None:
    sink = EventSink("s1", maxlen=5)
    for i in range(8):
        sink.tell(i)
    sink.close()
    assert sink.dropped == 3
    assert asyncio.run(_read(sink)) == [3, 4, 5, 6, 7]
    sink.tell(99)  # after close: ignored, never an error
    assert len(sink) == 0


def test_a_new_reader_takes_over_and_kinds_filter_on_the_shard() -> None:
    sink = EventSink("s1")

    async def main() -> tuple[list[Any], list[Any]]:
        first = asyncio.ensure_future(_read(sink))
        await asyncio.sleep(0.05)
        sink.tell("old")
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(_read(sink, kinds={"int"}))
        await asyncio.wait_for(first, 10)  # ended by the newer reader
        sink.tell("skipped")
        sink.tell(7)
        sink.close()
        return first.result(), await asyncio.wait_for(second, 10)

    old, new = asyncio.run(main())
    assert old == ["old"]
    assert new == [7]


async def _until(condition: Any, timeout: float = 10.0) -> None:
    """A bounded poll on the running loop (the reader must run meanwhile)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_events_the_reader_left_out_never_wake_it() -> None:
    """A token stream the reader did not ask for costs the shard's loop nothing: no
    wake-up, nothing buffered (what keeps a filtered stream off the shard's CPU)."""
    sink = EventSink("s1")

    async def main() -> list[Any]:
        reader = asyncio.ensure_future(_read(sink, kinds={"int"}))
        await _until(lambda: sink._wake is not None)
        for i in range(1_000):
            sink.tell(f"token {i}")
        assert len(sink) == 0
        sink.tell(7)
        sink.close()
        return await asyncio.wait_for(reader, 10)

    assert asyncio.run(main()) == [7]
    assert sink.filtered == 1_000
    assert sink.wakeups <= 1


def test_a_reader_with_nothing_to_read_schedules_nothing() -> None:
    """A shard's idle reader costs nothing: no timer on its loop while it waits (a
    shard hosts hundreds of readers), yet an event, a newer reader and close() each
    still reach it at once."""
    sink = EventSink("s1")

    async def main() -> tuple[list[Any], list[Any]]:
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(_read(sink))
        await _until(lambda: sink._wake is not None)
        await asyncio.sleep(0.05)
        # asyncio's own list of timers (CPython's event loop): the reader set none
        assert not [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
        second = asyncio.ensure_future(_read(sink))
        await asyncio.wait_for(first, 10)  # a newer reader ended it, without a poll
        await _until(lambda: sink._wake is not None)
        sink.tell(1)
        sink.close()
        return first.result(), await asyncio.wait_for(second, 10)

    assert asyncio.run(main()) == ([], [1])


def test_a_wake_up_lingers_so_a_burst_travels_as_one_batch() -> None:
    """Events told while a woken reader lingers join its batch: one batch (one Ray item)
    and one wake-up for the burst, not one per event; close() ends the linger."""
    sink = EventSink("s1")
    batches: list[list[Any]] = []

    async def read() -> None:
        async for batch in sink.batches(linger_s=30.0):
            batches.append(batch)

    def produce() -> None:
        sink.tell(0)
        fore.testing.wait_until(lambda: sink.wakeups == 1, timeout=10)
        for i in range(1, 100):
            sink.tell(i)
        sink.close()

    async def main() -> None:
        reader = asyncio.ensure_future(read())
        await _until(lambda: sink._wake is not None)
        producer = threading.Thread(target=produce)
        producer.start()
        try:
            await asyncio.wait_for(reader, 20)
        finally:
            producer.join(10)

    asyncio.run(main())
    assert batches == [list(range(100))]
    assert sink.wakeups == 1


def test_keystrokes_tabs_cancels_and_load_reports_go_to_the_control_group() -> None:
    from fore.distributed.calls import CONTROL_GROUP, method

    class Method:
        def __init__(self, name: str) -> None:
            self.name = name

        def options(self, **options: Any) -> tuple[str, dict[str, Any]]:
            return self.name, options

    class Handle:
        def __getattr__(self, name: str) -> Method:
            return Method(name)

    for name in ("keystroke", "accept", "cancel", "withdraw", "status"):
        assert method(Handle(), name) == (name, {"concurrency_group": CONTROL_GROUP})
    for name in ("submit", "ask", "events", "open"):
        assert isinstance(method(Handle(), name), Method)


# -- shipping ---------------------------------------------------------------------------------


def test_shipped_objects_get_fresh_locks_and_keep_their_state() -> None:
    seen: list[str] = []

    def on_prompt(ctx: Any) -> Any:
        seen.append(ctx.text)
        return Continue()

    hooks = Hooks(default_timeout=7.0)
    hooks.add("on_prompt_submit", on_prompt)
    model = ScriptedModel([{"text": "hi"}], ttft_ms=3.0)
    calls = {"n": 0}

    def answer(request: LlmRequest) -> str:
        calls["n"] += 1
        return f"answer {calls['n']}"

    function_model = FunctionModel(answer)
    with hooks._lock:  # held while shipped: the copy's lock is a new, free one
        data = dumps({"hooks": hooks, "model": model, "fn": function_model})
    copy = loads(data)
    assert copy["hooks"].default_timeout == 7.0
    assert [s.name for s in copy["hooks"].chain(HookEvent.ON_PROMPT_SUBMIT)] == ["on_prompt"]
    assert copy["hooks"]._lock.acquire(blocking=False)
    assert copy["model"].ttft_ms == 3.0 and len(copy["model"].script.replies) == 1
    assert copy["fn"].fn(None) == "answer 1"
    assert calls["n"] == 0  # the copy's state is the copy's


def test_what_cannot_cross_a_process_boundary_is_one_clear_error() -> None:
    with socket.socket() as sock, pytest.raises(NotShippable, match=r"session's tools \(dict\)"):
        dumps({"tool": sock}, what="tools")


# -- a shard's server, in this process ----------------------------------------------------------


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path}/sessions.db"


def shard_config(store_url: str, tmp_path: Path) -> ShardConfig:
    return ShardConfig(
        store_url=store_url,
        blob_dir=str(tmp_path / "blobs"),
        overlay_root=str(tmp_path / "overlays"),
        tune_process=False,
        governor={"enabled": False},
    )


def spec_for(session_id: str, ws: Path, model: Any, **options: Any) -> SessionSpec:
    options.setdefault("speculation", SpeculationConfig(enabled=False))
    return SessionSpec.make(session_id, workspace=str(ws), node=None, model=model, options=options)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_a_shard_stores_settings_without_credentials_and_a_resume_rebuilds_the_endpoint(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """What the shard's runtime stores is what ``RayRuntime.resume_session`` reads back."""
    run = loop.run_until_complete
    model = OpenAICompatible(
        base_url="http://127.0.0.1:9/v1", api_key="sk-secret", model="m", max_output_tokens=99
    )
    spec = SessionSpec.make(
        "s1",
        workspace=str(ws),
        node="n1",
        model=model,
        options={
            "system_prompt": "be brief",
            "max_turns": 7,
            "speculation": SpeculationConfig(enabled=True, token_budget=123),
            "builtin": ("read_file", "grep"),
        },
    )
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    try:
        run(shard.open(spec))  # the store's credential checks accepted the record
    finally:
        run(shard.shutdown(30))
    with open_store(store_url) as reader:
        record = reader.load("s1").record
    assert "sk-secret" not in repr(record.model_settings)
    assert "sk-secret" not in repr(record.session_config)
    rebuilt = rebuild_model(record.model_settings, "s1")
    assert isinstance(rebuilt, OpenAICompatible)
    assert (rebuilt.base_url, rebuilt.name, rebuilt.max_output_tokens) == (
        model.base_url,
        "m",
        99,
    )
    options = options_from_config(record.session_config)
    assert options["speculation"].token_budget == 123
    assert options["max_turns"] == 7 and options["builtin"] == ["read_file", "grep"]
    assert options["system_prompt"] == "be brief"
    assert set(options) <= PLAIN_OPTIONS
    with pytest.raises(ModelNotRebuildable):
        rebuild_model({"provider": "in-process", "class": "ScriptedModel"}, "s2")
    with pytest.raises(TypeError, match="unexpected keyword"):
        SessionSpec.make("s2", workspace=None, node=None, model=model, options={"bogus": 1})


def test_a_turn_is_in_the_store_before_the_submit_answers_and_resumes_elsewhere(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    run = loop.run_until_complete
    first = ShardServer(0, shard_config(store_url, tmp_path))
    model = ScriptedModel([{"text": "one"}, {"text": "two"}])
    try:
        run(first.open(spec_for("s1", ws, model)))
        turn = run(first.submit("s1", "hello", timeout=30))
        assert turn.status == "completed"
        # read by another store, as a process that took over would
        with open_store(store_url) as reader:
            stored = reader.load("s1")
            assert [type(i).__name__ for i in stored.items] == ["UserMessage", "AssistantMessage"]
            assert stored.record.turn_count == 1
        run(first.submit("s1", "again", timeout=30))
        history = run(first.ask("s1", "worker", GetHistory()))
    finally:
        report = run(first.shutdown(30))
    assert report["unclean_shutdown"] == 0 and report["live_actors"] == 0
    second = ShardServer(1, shard_config(store_url, tmp_path))
    try:
        info = run(second.open(spec_for("s1", ws, ScriptedModel([{"text": "three"}])), True))
        assert info.index == 1
        assert run(second.ask("s1", "worker", GetHistory())) == history  # byte-identical
        assert run(second.submit("s1", "go on", timeout=30)).items[-1].text == "three"
        with pytest.raises(SessionNotHere):
            run(second.submit("nope", "x"))
    finally:
        run(second.shutdown(30))


_HELD = (threading.Event(), threading.Event())
"""(release, asked): module globals, so the shipped copy of the model function (pickled
by reference, being a module-level function) shares them with the test."""


def _held_second_answer(request: LlmRequest) -> Any:
    """A tool call first; the answer after its result waits until the test releases it."""
    release, asked = _HELD
    if any(isinstance(m, ToolResult) for m in request.messages):
        asked.set()
        assert release.wait(30)
        return "second"
    return {"text": "", "tool_calls": [{"name": "read_file", "arguments": {"path": "app.py"}}]}


def test_a_run_in_progress_is_never_written_half(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    release, asked = _HELD
    release.clear()
    asked.clear()
    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    try:
        run(shard.open(spec_for("s1", ws, FunctionModel(_held_second_answer))))
        submit = loop.create_task(shard.submit("s1", "read it", timeout=30))
        assert run(asyncio.to_thread(asked.wait, 30))
        # the first answer asked for a tool, then read_file ran, and the model now
        # answers the turn's second request (held): the store has nothing of it yet
        # (the runtime's write-ahead writes whole turns, when they end)
        with open_store(store_url) as reader:
            assert reader.load("s1").items == ()
        release.set()
        turn = run(submit)
        assert turn.status == "completed"
        with open_store(store_url) as reader:
            stored = reader.load("s1")
        assert stored.record.turn_count == 1  # one batch: the whole turn
        assert isinstance(stored.items[-1], AssistantMessage)
        assert stored.items[-1].text == "second"
    finally:
        release.set()
        run(shard.shutdown(30))


def test_events_leave_the_shard_in_order_and_the_workspace_must_be_here(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    words = " ".join(f"w{i}" for i in range(200))
    try:
        with pytest.raises(WorkspaceUnreachable, match="not a directory"):
            run(shard.open(spec_for("s0", tmp_path / "missing", ScriptedModel([]))))
        run(shard.open(spec_for("s1", ws, ScriptedModel([{"text": words, "tokens_per_s": 5000}]))))
        turn = run(shard.submit("s1", "talk", timeout=30))

        async def collect() -> list[Any]:
            got: list[Any] = []
            async for batch in shard.events("s1"):
                got.extend(batch)
                if any(isinstance(e, TurnFinished) for e in got):
                    return got
            return got

        events = run(asyncio.wait_for(collect(), 30))
    finally:
        run(shard.shutdown(30))
    text = "".join(e.text for e in events if type(e).__name__ == "TextDelta")
    assert text == words
    added = [e.item for e in events if isinstance(e, ItemAdded)]
    assert added == list(turn.items)
    assert isinstance(events[-1], TurnFinished)


def test_a_session_open_on_a_live_shard_is_not_resumed_on_another_until_it_closes(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """One session, one shard: the runtime's lease keeps a second shard out (after
    waiting ``resume_wait_s`` for it), and lets it in once the first closed it."""
    run = loop.run_until_complete
    first = ShardServer(0, shard_config(store_url, tmp_path))
    config = dataclasses.replace(shard_config(store_url, tmp_path), resume_wait_s=0.3)
    second = ShardServer(1, config)
    try:
        run(first.open(spec_for("s1", ws, ScriptedModel([{"text": "one"}]))))
        run(first.submit("s1", "hello", timeout=30))
        with pytest.raises(SessionLeased):
            run(second.open(spec_for("s1", ws, ScriptedModel([])), True))
        assert run(second.sessions()) == []
        assert run(first.close_session("s1"))
        run(second.open(spec_for("s1", ws, ScriptedModel([{"text": "two"}])), True))
        history = run(second.ask("s1", "worker", GetHistory()))
        assert [getattr(i, "text", None) for i in history] == ["hello", "one"]
    finally:
        first_report = run(first.shutdown(30))
        second_report = run(second.shutdown(30))
    assert first_report["live_actors"] == 0 and second_report["live_actors"] == 0


def test_a_fork_is_a_stored_session_of_its_own_on_the_same_shard(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """``fork`` forwards to ``Session.fork()``: a new id, the stored history copied, both
    going on independently; the shared model outlives whichever closes first."""
    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    model = FunctionModel(lambda request: f"echo: {request.messages[-1].text}")
    try:
        run(shard.open(spec_for("s1", ws, model)))
        run(shard.submit("s1", "hello", timeout=30))
        fork_id, info = run(shard.fork("s1"))
        assert fork_id != "s1" and info.index == 0
        assert sorted(run(shard.sessions())) == sorted(["s1", fork_id])
        source = run(shard.ask("s1", "worker", GetHistory()))
        assert run(shard.ask(fork_id, "worker", GetHistory())) == source
        assert run(shard.close_session("s1"))  # the fork's model is the same object
        turn = run(shard.submit(fork_id, "again", timeout=30))
        assert turn.items[-1].text == "echo: again"
        with open_store(store_url) as reader:
            forked = reader.load(fork_id)
            assert forked.record.parent_id == "s1"
            assert [getattr(i, "text", None) for i in forked.items] == [
                "hello",
                "echo: hello",
                "again",
                "echo: again",
            ]
            assert len(reader.load("s1").items) == 2  # the source is untouched
        with pytest.raises(SessionNotHere):
            run(shard.fork("s1"))
    finally:
        report = run(shard.shutdown(30))
    assert report["live_actors"] == 0 and report["threads"] == 0, report


def _suggests_an_edit(request: LlmRequest) -> Any:
    """Two main answers, the suggestion "make x two", and a speculation that makes it so."""
    if request.purpose == "main":
        return "ok"
    if request.purpose in ("suggestion", "pipelined"):
        return '{"suggestion": "make x two"}'
    if isinstance(request.messages[-1], ToolResult):
        return "x is two now."
    edit = {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}
    return {"text": "", "tool_calls": [{"name": "edit", "arguments": edit}]}


def test_a_shards_cancel_calls_off_a_tab_it_overtook(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """The shard makes each Tab's scope before sending it, so its ``cancel`` reaches a Tab
    still queued in the controller's mailbox (the cancel comes first there): the Tab
    answers ``aborted`` and nothing is applied, although the speculation had finished."""
    from fore.messages.speculation import GetSpeculation
    from tests.speculation.attacks import Held, controller_of, queued_kinds

    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    config = SpeculationConfig(enabled=True, approval_mode="auto-edit", suggestion_delay_ms=0)
    spec = spec_for("s1", ws, FunctionModel(_suggests_an_edit), speculation=config)
    try:
        run(shard.open(spec))
        run(shard.submit("s1", "hi", timeout=30))
        run(shard.submit("s1", "what is x?", timeout=30))

        def finished() -> bool:
            status, shown = run(shard.ask("s1", "supervisor", GetSpeculation()))
            return status.state == "completed" and shown == "make x two"

        fore.testing.wait_until(finished, timeout=30)
        controller = controller_of(shard._hosted["s1"].session)
        with Held(controller):
            tab = loop.create_task(shard.accept("s1", timeout=30))

            def tab_queued() -> bool:  # sent, and queued behind the hold
                run(asyncio.sleep(0))
                return "AcceptSuggestion" in queued_kinds(controller)

            fore.testing.wait_until(tab_queued, timeout=30)
            run(shard.cancel("s1", "Ctrl-C"))
        result = run(tab)
        assert (result.outcome, result.files_applied) == ("aborted", ())
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert run(shard.submit("s1", "and now?", timeout=30)).status == "completed"
    finally:
        run(shard.shutdown(30))


def _speculated_edit(shard: ShardServer, ws: Path, run: Any) -> None:
    """``s1`` open on ``shard`` with the suggestion "make x two" speculated to completion."""
    from fore.messages.speculation import GetSpeculation

    config = SpeculationConfig(enabled=True, approval_mode="auto-edit", suggestion_delay_ms=0)
    run(shard.open(spec_for("s1", ws, FunctionModel(_suggests_an_edit), speculation=config)))
    run(shard.submit("s1", "hi", timeout=30))
    run(shard.submit("s1", "what is x?", timeout=30))

    def finished() -> bool:
        status, shown = run(shard.ask("s1", "supervisor", GetSpeculation()))
        return status.state == "completed" and shown == "make x two"

    fore.testing.wait_until(finished, timeout=30)


def test_a_key_typed_after_tab_that_reaches_the_shard_first_waits_for_the_tab(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Ray may run a session's keystroke (number 1) before the Tab typed before it
    (number 0): the key waits on the shard until the Tab has entered the session's input
    order, so the Tab applies the speculation instead of finding it aborted."""
    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    try:
        _speculated_edit(shard, ws, run)
        run(shard.keystroke("s1", "no, something else", seq=1))  # overtook the Tab
        assert shard._hosted["s1"].inputs.held == (1,)
        result = run(shard.accept("s1", timeout=30, seq=0))
        assert result.outcome == "accepted", result
        assert result.files_applied and (ws / "app.py").read_text() == "x = 2\n"
        assert shard._hosted["s1"].inputs.held == ()
        # the key was not lost: it reached the controller after the Tab (a cancel, number
        # 2, overtaken by a submit, number 3, cancels it too)
        submit = loop.create_task(shard.submit("s1", "and now?", timeout=30, seq=3))
        run(asyncio.sleep(0))
        assert not submit.done() and shard._hosted["s1"].inputs.held == (3,)
        run(shard.cancel("s1", "Ctrl-C", seq=2))
        assert run(submit).status == "completed"  # the cancel came first: nothing to cancel
    finally:
        run(shard.shutdown(30))


def test_a_withdrawn_input_lets_the_keys_after_it_go_at_once(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Tab number 0 was cancelled by its caller before it ran here (``ray.cancel``: it
    never arrives) and its number withdrawn: the key typed after it starts at once -- the
    speculation is aborted now, not after ``HOLD_S``."""
    from fore.distributed.input_sequence import HOLD_S
    from fore.messages.speculation import GetSpeculation

    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    try:
        _speculated_edit(shard, ws, run)
        hosted = shard._hosted["s1"]
        hosted.inputs.hold_s = 100 * HOLD_S  # the key must not go by the hold's deadline
        run(shard.keystroke("s1", "no, something else", seq=1))
        assert hosted.inputs.held == (1,)  # waits for the Tab numbered before it
        run(shard.withdraw("s1", 0))
        assert hosted.inputs.held == () and hosted.inputs.next == 2

        def state() -> str:
            status, _shown = run(shard.ask("s1", "supervisor", GetSpeculation()))
            return str(status.state)

        fore.testing.wait_until(lambda: state() == "aborted", timeout=30)
        assert (ws / "app.py").read_text() == "x = 1\n"
        run(shard.withdraw("s1", 1))  # an input that started stays started: nothing changes
        run(shard.withdraw("gone", 0))  # a session not hosted here: nothing to withdraw
        assert hosted.inputs.next == 2
    finally:
        run(shard.shutdown(30))


def _a_key_aborts_the_offer(shard: ShardServer, ws: Path, run: Any, seq: int) -> None:
    """The speculation is still offered (nobody accepted it, the file is untouched), and
    the key numbered ``seq`` aborts it."""
    from fore.messages.speculation import GetSpeculation

    def state() -> str:
        status, _shown = run(shard.ask("s1", "supervisor", GetSpeculation()))
        return str(status.state)

    assert state() == "completed"
    run(shard.keystroke("s1", "no, something else", seq=seq))
    fore.testing.wait_until(lambda: state() == "aborted", timeout=30)
    assert (ws / "app.py").read_text() == "x = 1\n"


def test_a_withdrawn_tab_that_reaches_the_shard_after_all_is_refused(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """The caller cancelled its Tab (number 0) and withdrew the number, but ``ray.cancel``
    did not stop the call, which reaches the shard after the withdrawal: it is refused
    (``InputWithdrawn``), the speculation is not applied behind the user's back, and the
    key typed after it still aborts the speculation."""
    from fore.errors import InputWithdrawn

    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    try:
        _speculated_edit(shard, ws, run)
        hosted = shard._hosted["s1"]
        run(shard.withdraw("s1", 0))
        assert hosted.inputs.next == 1
        with pytest.raises(InputWithdrawn):
            run(shard.accept("s1", timeout=30, seq=0))
        assert not hosted.pending  # it never entered the session
        assert (ws / "app.py").read_text() == "x = 1\n"
        _a_key_aborts_the_offer(shard, ws, run, seq=1)
    finally:
        run(shard.shutdown(30))


def test_a_held_tab_withdrawn_while_it_waits_is_refused_at_once(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Tab number 1 reached the shard before number 0 and waits for it; its caller then
    cancels the Tab and withdraws the number, but ``ray.cancel`` did not stop the held
    call. The call is answered ``InputWithdrawn`` now -- not ``AskTimeout`` after its own
    timeout -- and the speculation it was sent to accept is not applied."""
    from fore.distributed.input_sequence import HOLD_S
    from fore.errors import InputWithdrawn

    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    try:
        _speculated_edit(shard, ws, run)
        hosted = shard._hosted["s1"]
        hosted.inputs.hold_s = 100 * HOLD_S  # only the withdrawal may end the wait
        tab = loop.create_task(shard.accept("s1", timeout=600, seq=1))
        fore.testing.wait_until(lambda: (run(asyncio.sleep(0)), hosted.inputs.held)[1] == (1,))
        run(shard.withdraw("s1", 1))
        with pytest.raises(InputWithdrawn):
            run(asyncio.wait_for(tab, 30))
        assert not hosted.pending and hosted.inputs.held == ()
        assert (ws / "app.py").read_text() == "x = 1\n"
        _a_key_aborts_the_offer(shard, ws, run, seq=0)
        assert hosted.inputs.next == 2
    finally:
        run(shard.shutdown(30))


def test_an_input_that_never_reaches_the_shard_holds_the_later_keys_only_a_while(
    store_url: str, tmp_path: Path, ws: Path, loop: asyncio.AbstractEventLoop
) -> None:
    """Tab number 0 never arrives (its Ray call was cancelled, its caller died): the key
    typed after it starts once it has waited ``HOLD_S`` -- it aborts the speculation. A Tab
    held behind the missing number and cancelled meanwhile never starts."""
    from fore.messages.speculation import GetSpeculation

    run = loop.run_until_complete
    shard = ShardServer(0, shard_config(store_url, tmp_path))
    try:
        _speculated_edit(shard, ws, run)
        hosted = shard._hosted["s1"]
        # a Tab held behind the missing 0, cancelled while it waits: it never enters
        tab = loop.create_task(shard.accept("s1", timeout=30, seq=1))
        run(asyncio.sleep(0))
        assert hosted.inputs.held == (1,)
        tab.cancel()
        with pytest.raises(asyncio.CancelledError):
            run(tab)
        assert hosted.inputs.held == () and not hosted.pending
        hosted.inputs.hold_s = 3.0  # outlasts the look below on a loaded machine (1 s may not)
        run(shard.keystroke("s1", "no, something else", seq=2))
        assert hosted.inputs.held == (2,)

        def state() -> str:
            status, _shown = run(shard.ask("s1", "supervisor", GetSpeculation()))
            return str(status.state)

        assert state() == "completed"  # held, not lost
        fore.testing.wait_until(lambda: run(asyncio.sleep(0.01)) or state() == "aborted")
        assert hosted.inputs.held == () and hosted.inputs.next == 3
        assert (ws / "app.py").read_text() == "x = 1\n"
        # the missing Tab arrives after all: late, it starts at once (nothing to accept now)
        assert run(shard.accept("s1", timeout=30, seq=0)).outcome == "no_suggestion"
    finally:
        run(shard.shutdown(30))


# -- the caller's side of the input order -------------------------------------------------------


class _Bound:
    """One shard method of :class:`_RecordingShard`: every call recorded, never answered."""

    def __init__(self, name: str, sent: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> None:
        self.name, self.sent = name, sent

    def options(self, **_options: Any) -> _Bound:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        self.sent.append((self.name, args, kwargs))
        return asyncio.get_running_loop().create_future()  # a call the shard never answers


class _RecordingShard:
    def __init__(self) -> None:
        self.sent: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> _Bound:
        return _Bound(name, self.sent)


class _HereRuntime:
    """The session's runtime as far as a call needs it: the session is placed where it is."""

    def _placed_here(self, _session: Any, _placement: Any) -> bool:
        return True


def test_a_cancelled_aaccept_withdraws_its_number_on_the_shard(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``aaccept`` cancels its call (``ray.cancel``), which then may never reach the shard:
    the caller withdraws the call's number there too, so the keys typed after the Tab start
    at once instead of waiting ``HOLD_S`` for a number that never comes."""
    from fore.distributed import calls
    from fore.distributed.session import Placement, RemoteSession

    shard = _RecordingShard()
    info = ShardInfo(index=0, incarnation="i0", pid=1, node_id="n", node_ip="ip", hostname="h")
    placement = Placement(index=0, incarnation="i0", handle=shard, info=info)
    session = RemoteSession(
        _HereRuntime(),  # type: ignore[arg-type]
        spec_for("s1", ws, FunctionModel(lambda _request: "ok")),
        placement,
    )
    next(placement.inputs)  # an input sent before: the Tab is number 1
    cancelled: list[Any] = []
    monkeypatch.setattr(calls, "cancel", cancelled.append)

    async def main() -> None:
        tab = asyncio.ensure_future(session.aaccept(timeout=30))
        while not shard.sent:
            await asyncio.sleep(0)
        tab.cancel()
        with pytest.raises(asyncio.CancelledError):
            await tab

    asyncio.run(main())
    (accept, accept_args, accept_options), (withdraw, withdraw_args, _) = shard.sent
    assert (accept, accept_args[0], accept_options["seq"]) == ("accept", "s1", 1)
    assert (withdraw, withdraw_args) == ("withdraw", ("s1", 1))
    assert len(cancelled) == 1  # and the call itself was cancelled
