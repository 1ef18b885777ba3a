"""fore.distributed on a real local Ray instance: two shard processes, one machine.

One Ray instance for the module (``num_cpus=2``, a small object store, 127.0.0.1
only) and one ``RayRuntime`` of two shards; each test opens its own sessions.
Models are closures (cloudpickle sends them by value to the shard process);
where a test must hold a model inside a shard, it waits on a file, the one
channel that crosses the process boundary without Ray. Nothing asserts a
duration: every wait is a bounded poll.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pytest

import fore.testing
from fore.actors.llm import FunctionModel, ScriptedModel
from fore.actors.llm.script import ScriptReply
from fore.actors.store import open_store
from fore.messages.conversation import ToolResult
from fore.messages.llm import LlmRequest
from fore.messages.session import ItemAdded, TextDelta, TurnFinished
from fore.messages.speculation import SpeculationConfig, SpeculationFinished

# The dev extra has Ray; CI must run this tier, never skip it (CI=1 makes a missing Ray fail).
ray = __import__("ray") if os.environ.get("CI") else pytest.importorskip("ray")

from fore.distributed import (  # noqa: E402
    ANY_NODE,
    NoShardAvailable,
    RayRuntime,
    ShardLost,
    start_local_ray,
)
from fore.distributed.runtime import NODE_LABEL  # noqa: E402
from fore.supervision import Runtime  # noqa: E402
from tests.store.pg_server import pg_cluster, pg_url  # noqa: E402, F401  (fixtures)

pytestmark = pytest.mark.ray

WAIT = 60.0


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


@pytest.fixture(scope="module")
def ray_instance(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    assert not ray.is_initialized()
    start_local_ray(2, object_store_memory=96 * 1024 * 1024)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def rt(ray_instance: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayRuntime]:
    runtime = RayRuntime(
        shards=2,
        store=f"sqlite://{tmp_path_factory.mktemp('store')}/sessions.db",
        shard_cpus=1.0,
        governor={"enabled": False},  # every speculation a test asks for must run
        tune_shards=False,
        lease_ttl=5.0,
        health_interval=0.2,
        # one pressure band: on this shared machine a shard's scheduling waits can cross the
        # governor's threshold at any time, which would rightly send every session to the
        # other shard; the policy itself is tested in test_distributed_units.py
        band_ms=1e9,
    )
    try:
        yield runtime
    finally:
        assert runtime.close(timeout=60)
    # each shard's own leak counters (ShardServer.shutdown): overlays, threads, descriptors,
    # actors, an unclean close -- every session's model copy closed with it included
    assert len(runtime.shard_reports) == 2
    for report in runtime.shard_reports:
        assert all(value == 0 for value in report.values()), report


def no_spec() -> SpeculationConfig:
    return SpeculationConfig(enabled=False)


def echo_model() -> FunctionModel:
    def answer(request: LlmRequest) -> str:
        last = request.messages[-1]
        return f"echo: {getattr(last, 'text', '')}"

    return FunctionModel(answer)


def test_the_local_instance_listens_on_loopback_only(ray_instance: None) -> None:
    """start_local_ray's promise: no server of the instance is reachable from other hosts."""
    ours = {p.pid for p in psutil.Process().children(recursive=True)}
    assert ours, "the Ray instance's processes are children of this one"
    addresses = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in ours:
            addresses.append(conn.laddr.ip)
    assert addresses
    assert all(ipaddress.ip_address(a.removeprefix("::ffff:")).is_loopback for a in addresses), (
        addresses
    )


def test_sessions_spread_over_two_shard_processes_and_turns_run_there(
    rt: RayRuntime, ws: Path
) -> None:
    pids = {s.pid for s in rt.shards}
    assert len(pids) == 2 and os.getpid() not in pids
    sessions = [
        rt.open_session(workspace=ws, model=echo_model(), speculation=no_spec()) for _ in range(4)
    ]
    try:
        assert {s.shard.index for s in sessions} == {0, 1}  # least-loaded: both used
        for i, s in enumerate(sessions):
            turn = s.submit(f"hello {i}", timeout=WAIT)
            assert turn.status == "completed"
            assert getattr(turn.items[-1], "text", None) == f"echo: hello {i}"
        stored = {r.session_id for r in rt.list_sessions(limit=50)}
        assert {s.id for s in sessions} <= stored
    finally:
        for s in sessions:
            s.close()


def test_loads_asked_now_count_sessions_opened_since_the_last_poll(
    rt: RayRuntime, ws: Path
) -> None:
    """``shard_loads(now=True)`` asks every shard at once instead of returning the
    monitor's last report (a poll old): a benchmark reads its exact admitted count this
    way at the end of a run."""
    before = sum(load.sessions for load in rt.shard_loads(now=True))
    sessions = [
        rt.open_session(workspace=ws, model=echo_model(), speculation=no_spec()) for _ in range(3)
    ]
    try:
        loads = rt.shard_loads(now=True)
        assert [load.alive for load in loads] == [True, True]
        assert sum(load.sessions for load in loads) == before + 3
    finally:
        for s in sessions:
            s.close()


def test_a_burst_of_opens_splits_evenly_by_the_runtimes_own_counts(
    rt: RayRuntime, ws: Path
) -> None:
    """Placement counts the sessions it placed (its directory and its opens in flight),
    not the shards' reports, which lag a burst of opens: 12 quick opens split 6/6, and
    the 6 after 6 of them closed go where the closed ones were."""
    sessions = [
        rt.open_session(workspace=ws, model=echo_model(), speculation=no_spec()) for _ in range(12)
    ]
    try:
        counts = [sum(1 for s in sessions if s.shard.index == i) for i in (0, 1)]
        assert counts == [6, 6]
        for s in [s for s in sessions if s.shard.index == 0][:6]:
            s.close()
        more = [
            rt.open_session(workspace=ws, model=echo_model(), speculation=no_spec())
            for _ in range(6)
        ]
        sessions += more
        assert [s.shard.index for s in more] == [0] * 6
    finally:
        for s in sessions:
            s.close()


def test_events_arrive_in_order_from_the_shard(rt: RayRuntime, ws: Path) -> None:
    words = " ".join(f"w{i}" for i in range(300))
    model = ScriptedModel([{"text": words, "tokens_per_s": 5000}, {"text": "done"}])
    with rt.open_session(workspace=ws, model=model, speculation=no_spec()) as s:
        turn = s.submit("talk", timeout=WAIT)
        events = []
        for event in s.events(timeout=WAIT):
            events.append(event)
            if isinstance(event, TurnFinished):
                break
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text == words  # every delta, in order
        assert [e.item for e in events if isinstance(e, ItemAdded)] == list(turn.items)
        assert isinstance(events[-1], TurnFinished)


def test_a_killed_shard_loses_only_the_call_in_flight_and_its_sessions_move(
    rt: RayRuntime, ws: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "release"
    asked = tmp_path / "asked"

    def held(request: LlmRequest) -> Any:
        """Answers at once, except a request saying "hold": that one waits for the gate file."""
        last = request.messages[-1]
        text = getattr(last, "text", "")
        if isinstance(last, ToolResult) or "hold" not in text:
            return f"echo: {text}"
        asked.write_text("1")
        deadline = time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "released"

    victim = rt.open_session(workspace=ws, model=FunctionModel(held), speculation=no_spec())
    try:
        done = victim.submit("first", timeout=WAIT)
        assert done.status == "completed"
        lost_index = victim.shard.index
        lost_pid = victim.shard.pid
        assert psutil.pid_exists(lost_pid)

        outcome: dict[str, BaseException | Any] = {}

        def call() -> None:
            try:
                outcome["turn"] = victim.submit("hold this", timeout=WAIT)
            except BaseException as exc:
                outcome["error"] = exc

        caller = threading.Thread(target=call)
        caller.start()
        wait_until(asked.exists)
        os.kill(lost_pid, signal.SIGKILL)  # kill -9 the shard process mid-call
        caller.join(WAIT)
        assert not caller.is_alive()
        assert isinstance(outcome.get("error"), ShardLost), outcome
        assert "call again" in str(outcome["error"])
        asked.unlink()

        # the next call works, on a live shard, and the completed turn is still there
        turn = victim.submit("second", timeout=WAIT)
        assert (
            turn.status == "completed" and getattr(turn.items[-1], "text", None) == "echo: second"
        )
        texts = [getattr(i, "text", None) for i in victim.history]
        assert texts[:2] == ["first", "echo: first"]
        assert "hold this" not in texts  # the lost turn never half-written
        assert texts[-2:] == ["second", "echo: second"]
        # Ray restarted the dead shard in a new process (max_restarts)
        wait_until(
            lambda: rt.shards[lost_index].pid != lost_pid and rt.shard_loads()[lost_index].alive
        )
        assert victim.shard.pid != lost_pid
    finally:
        gate.write_text("1")
        victim.close()


def test_a_fork_and_a_resume_of_a_closed_session_go_through_the_shards_runtime(
    rt: RayRuntime, ws: Path
) -> None:
    """``RemoteSession.fork`` forwards to the shard's ``Session.fork()``; a closed session
    comes back with ``rt.resume_session``, read from what the shard's runtime stored."""
    source = rt.open_session(workspace=ws, model=echo_model(), speculation=no_spec())
    try:
        source.submit("hello", timeout=WAIT)
        fork = source.fork(timeout=WAIT)
        try:
            assert fork.id != source.id and rt.session(fork.id) is fork
            assert fork.shard.index == source.shard.index  # next to its workspace's copy
            assert fork.history == source.history
            turn = fork.submit("branch", timeout=WAIT)
            assert getattr(turn.items[-1], "text", None) == "echo: branch"
            assert len(source.history) == 2  # independent from here on
        finally:
            assert fork.close()
    finally:
        assert source.close()
    stored = {r.session_id: r for r in rt.list_sessions(limit=50)}
    assert stored[fork.id].turn_count == 2 and stored[source.id].turn_count == 1
    with pytest.raises(TypeError, match="file_ref_cap"):
        rt.resume_session(source.id, echo_model(), file_ref_cap=10)
    again = rt.resume_session(source.id, echo_model())
    try:
        texts = [getattr(i, "text", None) for i in again.history]
        assert texts == ["hello", "echo: hello"]
        assert getattr(again.submit("more", timeout=WAIT).items[-1], "text", None) == "echo: more"
    finally:
        again.close()


def test_a_keystroke_aborts_a_speculation_on_the_remote_shard(
    rt: RayRuntime, ws: Path, tmp_path: Path
) -> None:
    started = tmp_path / "speculating"

    def model(request: LlmRequest) -> Any:
        if request.purpose == "main":
            return "x is 1. Shall I bump it?"
        if request.purpose in ("suggestion", "pipelined"):
            return '{"suggestion": "bump x to 2"}'
        started.write_text("1")
        return {"text": "Working. " + "word " * 400, "tokens_per_s": 10}

    config = SpeculationConfig(enabled=True, suggestion_delay_ms=0)
    with rt.open_session(workspace=ws, model=FunctionModel(model), speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(started.exists)
        wait_until(lambda: s.speculation.state == "running")
        before = s.history
        s.drain_events()
        s.keystroke("no, something else")
        finished = []
        for event in s.events(timeout=WAIT):
            if isinstance(event, SpeculationFinished):
                finished.append(event)
                break
        assert finished and finished[0].outcome == "aborted"
        assert finished[0].was_running is True
        assert finished[0].abort_steps[0][0] == "keystroke"
        wait_until(lambda: s.speculation.state == "aborted")
        assert s.history == before
        assert (ws / "app.py").read_text() == "x = 1\n"


def test_the_asyncio_api_awaits_the_shard_and_a_cancelled_asubmit_cancels_the_run(
    rt: RayRuntime, ws: Path, tmp_path: Path
) -> None:
    """``asubmit`` / ``aresume`` / ``aclose`` as the local session's; cancelling the task
    awaiting an ``asubmit`` cancels the run on the shard (the session takes the next one)."""
    asked = tmp_path / "asked"
    gate = tmp_path / "release"

    def held(request: LlmRequest) -> Any:
        text = getattr(request.messages[-1], "text", "")
        if "hold" not in text:
            return f"echo: {text}"
        asked.write_text("1")
        deadline = time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "released"

    session = rt.open_session(workspace=ws, model=FunctionModel(held), speculation=no_spec())

    async def main() -> None:
        turn = await session.asubmit("first", timeout=WAIT)
        assert turn.status == "completed"
        assert getattr(turn.items[-1], "text", None) == "echo: first"
        # a deadline far past the wait below: only the cancel can end this run in time
        task = asyncio.ensure_future(session.asubmit("hold this", timeout=5 * WAIT))
        while not asked.exists():
            assert not task.done(), task
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(main())
        # cancelled on the shard: the worker is idle again while the model is still held
        wait_until(lambda: session.run_state().status == "idle")
        assert not gate.exists()
        turn = session.submit("second", timeout=WAIT)
        assert getattr(turn.items[-1], "text", None) == "echo: second"
    finally:
        gate.write_text("1")
        assert asyncio.run(session.aclose(timeout=WAIT))


def test_set_model_on_a_remote_session_answers_with_the_new_model(rt: RayRuntime, ws: Path) -> None:
    def v2(request: LlmRequest) -> str:
        return f"v2: {getattr(request.messages[-1], 'text', '')}"

    with rt.open_session(workspace=ws, model=echo_model(), speculation=no_spec()) as s:
        assert getattr(s.submit("a", timeout=WAIT).items[-1], "text", None) == "echo: a"
        s.set_model(FunctionModel(v2))
        s.set_approval_mode("plan")
        assert getattr(s.submit("b", timeout=WAIT).items[-1], "text", None) == "v2: b"


def test_set_approval_mode_takes_effect_on_the_shard(rt: RayRuntime, ws: Path) -> None:
    """The mode reaches the shard's session: a write the model asked for before the change
    ran there; the one after it, in plan mode, is refused (no file, a refusal in history)."""
    model = ScriptedModel(
        [
            {"when": {"contains": "one"}, "tool_calls": [_call("shell", command="touch one.txt")]},
            {"when": {"contains": "two"}, "tool_calls": [_call("shell", command="touch two.txt")]},
            {"text": "done"},
        ]
    )
    with rt.open_session(workspace=ws, model=model, speculation=no_spec()) as s:
        assert s.submit("one", timeout=WAIT).status == "completed"
        s.set_approval_mode("plan")
        assert s.submit("two", timeout=WAIT).status == "completed"
        outputs = [i for i in s.history if isinstance(i, ToolResult)]
    assert (ws / "one.txt").exists() and not (ws / "two.txt").exists()
    assert [r.is_error for r in outputs] == [False, True]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def _makes_x_two(before_the_edit: Callable[[], None] = lambda: None) -> Any:
    """A model whose suggestion is "make x two" and whose speculation makes it so (its
    edit answered after ``before_the_edit()``)."""

    def reply(request: LlmRequest) -> Any:
        last = request.messages[-1]
        if request.purpose == "main":
            return f"answer to {getattr(last, 'text', 'a result')}"
        if request.purpose in ("suggestion", "pipelined"):
            return '{"suggestion": "make x two"}'
        if isinstance(last, ToolResult):
            return "x is two now."
        before_the_edit()
        edit = {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}
        return ScriptReply(tool_calls=[{"name": "edit", "arguments": edit}])

    return FunctionModel(reply)


def test_cancelling_an_aaccept_calls_the_tab_off_on_the_shard(
    rt: RayRuntime, ws: Path, tmp_path: Path
) -> None:
    """A Tab waiting for a running speculation, awaited with ``aaccept``: cancelling the task
    calls the accept off on the shard -- the speculation is aborted, nothing is applied
    (the edit it would make never lands), and the next turn runs."""
    running, release = tmp_path / "running", tmp_path / "release"

    def held() -> None:
        running.write_text("1")
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    model = _makes_x_two(before_the_edit=held)
    config = SpeculationConfig(enabled=True, approval_mode="auto-edit", suggestion_delay_ms=0)
    session = rt.open_session(workspace=ws, model=model, speculation=config)

    async def main() -> None:
        await session.asubmit("hi", timeout=WAIT)
        await session.asubmit("what is x?", timeout=WAIT)
        while not running.exists():
            await asyncio.sleep(0.02)
        tab = asyncio.ensure_future(session.aaccept(timeout=WAIT))
        deadline = time.monotonic() + WAIT
        while not (await asyncio.to_thread(lambda: session.speculation)).accepting:
            assert not tab.done(), tab
            assert time.monotonic() < deadline, "the Tab never reached the shard"
            await asyncio.sleep(0.02)
        tab.cancel()
        with pytest.raises(asyncio.CancelledError):
            await tab

    try:
        asyncio.run(main())
        wait_until(lambda: session.speculation.state == "aborted")
        # called off by the cancelled call itself (ray.cancel), not by the accept's deadline
        assert session.speculation.reason == "the accept was cancelled"
        release.write_text("1")  # the speculation would edit now: nothing may be applied
        turn = session.submit("and now?", timeout=WAIT)
        assert turn.status == "completed"
        assert (ws / "app.py").read_text() == "x = 1\n"
        assert not any(isinstance(i, ToolResult) for i in session.history)
    finally:
        release.write_text("1")
        session.close()


def test_a_key_typed_after_tab_waits_for_the_tab_on_the_shard(rt: RayRuntime, ws: Path) -> None:
    """The session's inputs are numbered per hosting and the shard starts them in that
    order: a keystroke sent to the shard before the Tab numbered ahead of it (as Ray may
    run them) waits for the Tab, which applies the finished speculation; later inputs go
    on in order (the session's next turn runs)."""
    from fore.distributed import calls

    model = _makes_x_two()
    config = SpeculationConfig(enabled=True, approval_mode="auto-edit", suggestion_delay_ms=0)
    with rt.open_session(workspace=ws, model=model, speculation=config) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.speculation.state == "completed" and s.suggestion == "make x two")
        placement = s.placement
        tab_number = next(placement.inputs)  # the Tab's number, taken before the key's
        s.keystroke("no, something else")  # numbered after the Tab, sent before it
        ref = calls.method(placement.handle, "accept").remote(s.id, WAIT, True, seq=tab_number)
        result = calls.result(ref, WAIT)
        assert result.outcome == "accepted", result
        assert (ws / "app.py").read_text() == "x = 2\n"
        assert s.submit("and now?", timeout=WAIT).status == "completed"


def test_a_late_load_report_keeps_a_shard_placed_until_it_is_silent_too_long(
    ray_instance: None, tmp_path: Path
) -> None:
    """The late-report rule (directory.py), on the monitor's real poll with real Ray refs: a
    shard whose load report is late is busy, not gone -- placement still picks it -- until it
    has been silent for ``unresponsive_s``; then it takes no session until it answers, and its
    answer brings it back. Shard 0's report is a Ray task that waits for a file."""
    from fore.distributed.directory import ShardDirectory
    from fore.distributed.placement import ShardInfo, ShardLoad

    gate = tmp_path / "answer"
    infos = [
        ShardInfo(index=i, incarnation=f"i{i}", pid=i, node_id="n", node_ip="ip", hostname="h")
        for i in (0, 1)
    ]
    loads = [
        ShardLoad(
            index=i, incarnation=f"i{i}", node_id="n", pressure_ms=0.0, threshold_ms=4.0, sessions=0
        )
        for i in (0, 1)
    ]

    @ray.remote(num_cpus=0)
    def report(index: int, wait_for: str | None) -> tuple[ShardInfo, ShardLoad]:
        deadline = time.monotonic() + 120
        while wait_for is not None and not os.path.exists(wait_for):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return infos[index], loads[index]

    ray.get(report.remote(1, None), timeout=WAIT)  # a worker for the reports is up

    class Handle:
        def __init__(self, index: int, wait_for: str | None) -> None:
            self.status = self
            self._args = (index, wait_for)

        def options(self, **_options: Any) -> Handle:
            return self

        def remote(self) -> Any:
            return report.remote(*self._args)

    directory = ShardDirectory(
        [Handle(0, str(gate)), Handle(1, None)],
        infos,
        loads,
        health_interval=0.05,
        unresponsive_s=4.0,
    )
    started = time.monotonic()
    # both shards empty: placement prefers shard 0 (lowest index) while it is only late
    while time.monotonic() - started < 1.0:
        directory.poll()
        chosen = directory.choose(None, [0, 0], band_ms=4.0)
        assert chosen is not None and chosen.index == 0, "a late shard is still placed on"
        directory.opened(0)
    assert directory[0].slow_polls >= 2 and directory[0].alive
    wait_until(lambda: (directory.poll(), not directory[0].alive)[1])  # silent past 4 s
    wait_until(lambda: (directory.poll(), directory[1].alive)[1])
    chosen = directory.choose(None, [0, 0], band_ms=4.0)
    assert chosen is not None and chosen.index == 1  # no session for the silent one
    directory.opened(1)
    gate.write_text("1")
    wait_until(lambda: (directory.poll(), directory[0].alive)[1])  # it answered: back
    assert directory.hosts(0, "i0")  # late, silent, back: never taken for dead


def test_the_workspaces_machine_is_stored_and_a_resume_goes_back_there(
    rt: RayRuntime, ws: Path, tmp_path: Path
) -> None:
    """A session's machine is stored with it (NODE_LABEL: its node's address), so a resume
    without ``node=`` goes there, not to the caller's machine. A session stored on a machine
    the cluster does not have (opened there by a Runtime of one process) is refused with a
    clear error, and resumes where ``node=`` says; one stored without a machine resumes on
    the caller's."""
    session = rt.open_session(workspace=ws, model=echo_model(), speculation=no_spec())
    session.submit("hi", timeout=WAIT)
    session.close()
    with open_store(rt.store_url, owner="reader") as reader:
        labels = reader.load(session.id).record.session_config["labels"]
    assert labels == {NODE_LABEL: session.shard.node_ip}
    assert rt.resume_session(session.id, echo_model()).close()

    with Runtime(store=rt.store_url, blob_dir=tmp_path / "blobs") as elsewhere:
        away = elsewhere.open_session(
            workspace=ws, model=echo_model(), labels={NODE_LABEL: "10.255.0.7"}
        ).id
        unlabelled = elsewhere.open_session(workspace=ws, model=echo_model()).id
    with pytest.raises(NoShardAvailable, match=r"10\.255\.0\.7.*pass node="):
        rt.resume_session(away, echo_model())
    moved = rt.resume_session(away, echo_model(), node=ANY_NODE)
    assert moved.submit("here now", timeout=WAIT).status == "completed"
    assert moved.close()
    here = rt.resume_session(unlabelled, echo_model())
    assert here.shard.node_id == rt.node_id
    assert here.close()


def test_control_calls_are_answered_while_the_shards_default_loop_is_stuck(
    rt: RayRuntime, tmp_path: Path
) -> None:
    """Keystrokes, Tabs, cancels and load reports run on the shard's control loop
    (``CONTROL_METHODS``): with the default loop stuck -- here in unpickling an argument
    that waits for a file -- a load report through the control group is answered, and one
    through the default loop is not, until the default loop is free again."""
    gate = tmp_path / "unstick"

    def stuck_until(path: str) -> str:
        deadline = time.monotonic() + 120
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        return path

    class Stuck:
        def __reduce__(self) -> Any:
            return (stuck_until, (str(gate),))

    handle = rt.shard_handle(0)
    blocker = handle.ask.remote("no-such-session", "worker", Stuck())
    try:
        default = handle.status.remote()
        control = handle.status.options(concurrency_group="control").remote()
        info, load = ray.get(control, timeout=WAIT)
        assert info.index == 0 and load.alive
        ready, _ = ray.wait([default, blocker], num_returns=2, timeout=0.5)
        assert not ready, "the default loop was stuck: only the control call could answer"
    finally:
        gate.write_text("1")
    assert ray.get(default, timeout=WAIT)[0].index == 0
    with pytest.raises(Exception, match="not open on shard"):
        ray.get(blocker, timeout=WAIT)


def test_shards_on_a_postgresql_store_keep_a_killed_shards_sessions(
    ray_instance: None,
    pg_url: str,  # noqa: F811
    ws: Path,
    tmp_path: Path,
) -> None:
    """The cluster configuration on one machine: a PostgreSQL store (what several machines
    need). A completed turn survives kill -9 of its shard: the session is resumed from
    PostgreSQL on a live shard (leased there), and its next turn follows its history."""
    runtime = RayRuntime(
        shards=2,
        store=pg_url,
        blob_dir=tmp_path / "blobs",
        shard_cpus=0.0,  # the module's Ray instance has its CPUs taken by the rt fixture's
        governor={"enabled": False},
        tune_shards=False,
        lease_ttl=5.0,
        health_interval=0.2,
        band_ms=1e9,
    )
    try:
        session = runtime.open_session(workspace=ws, model=echo_model(), speculation=no_spec())
        assert session.submit("first", timeout=WAIT).status == "completed"
        victim = session.shard
        os.kill(victim.pid, signal.SIGKILL)
        wait_until(lambda: session.moves >= 1)  # the monitor resumed it from the store
        turn = session.submit("second", timeout=WAIT)
        assert getattr(turn.items[-1], "text", None) == "echo: second"
        texts = [getattr(i, "text", None) for i in session.history]
        assert texts == ["first", "echo: first", "second", "echo: second"]
        assert session.shard.pid != victim.pid
        stored = {r.session_id: r for r in runtime.list_sessions(limit=10)}
        assert stored[session.id].turn_count == 2
        session.close()
    finally:
        assert runtime.close(timeout=60)
    assert all(value == 0 for report in runtime.shard_reports for value in report.values())


# -- the README example and `fore bench --shards`, each in a fresh process (its own Ray) --------


def _readme_block(marker: str) -> str:
    readme = Path(__file__).resolve().parents[2] / "README.md"
    blocks = re.findall(r"```python\n(.*?)\n```", readme.read_text(), re.S)
    found = [block for block in blocks if marker in block]
    assert len(found) == 1, f"one README example with {marker!r}"
    return found[0]


def test_the_readme_ray_example_runs(tmp_path: Path) -> None:
    (tmp_path / "myproject").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _readme_block("RayRuntime(shards=2)")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    words = done.stdout.split()
    assert words[:4] == ["completed", "Hi.", "on", "shard"], done.stdout
    assert int(words[-1]) != os.getpid()  # the turn ran in a shard process


def test_bench_with_shards_reports_per_shard_load_and_no_leaks(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fore",
            "bench",
            "--sessions",
            "6",
            "--turns",
            "2",
            "--think-ms",
            "300",
            "--duration",
            "40",
            "--shards",
            "2",
            "--no-progress",
            "--json",
            str(report),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert "per-shard load" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads(report.read_text())
    run = data["speculation"]
    assert [load["index"] for load in run["shard_loads"]] == [0, 1]
    assert sum(load["sessions"] for load in run["shard_loads"]) == 6
    # every planned turn ran through the shards (a user that cannot reach its session
    # runs none, and leaves nothing to leak)
    assert run["errors"] == [] and run["accounting"]["turns"]["buckets"]["error"] == 0
    assert run["turns"] >= 6, run["accounting"]  # each user's first turn at least
    assert all(value == 0 for value in run["leaks"].values()), run["leaks"]
    assert done.returncode == 0, done.stderr[-3000:]


KILL_A_SHARD = """
import os, signal, sys, threading, time
import psutil
import fore.bench.sim_user as sim_user
from fore.bench.cpu import process_role
from fore.supervision.cli import main

start_users = sim_user.start_users

def start_then_kill(*args, **kwargs):
    users = start_users(*args, **kwargs)
    recorder = args[3]

    def kill():
        deadline = time.monotonic() + 120
        while recorder.rounds < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        # process_role reads a command line as it may be read: a Ray worker that has just
        # exited (a zombie) has none, and is no shard
        shards = [
            p for p in psutil.Process().children(recursive=True) if process_role(p) == "shards"
        ]
        os.kill(shards[0].pid, signal.SIGKILL)
        print("KILLED", shards[0].pid, recorder.rounds, flush=True)

    threading.Thread(target=kill, daemon=True).start()
    return users

sim_user.start_users = start_then_kill
sys.exit(main(sys.argv[1:]))
"""


def test_bench_with_a_shard_killed_mid_run_leaks_nothing(tmp_path: Path) -> None:
    """``fore bench --shards 2`` with one shard process killed (-9) once the rounds are under
    way: the users whose call was in flight get ShardLost, the others go on (their sessions
    moved to the live shard), and every leak counter -- each shard's, the restarted one
    included, and the driver's -- is 0."""
    report = tmp_path / "report.json"
    bench = "bench --sessions 8 --turns 6 --think-ms 200 --duration 60 --shards 2 --no-progress"
    done = subprocess.run(
        [sys.executable, "-c", KILL_A_SHARD, *bench.split(), "--json", str(report)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    killed = re.search(r"KILLED (\d+) (\d+)", done.stdout)
    assert killed, done.stdout[-3000:] + done.stderr[-3000:]
    run = json.loads(report.read_text())["speculation"]
    assert all(value == 0 for value in run["leaks"].values()), run["leaks"]
    assert all("ShardLost" in error for error in run["errors"]), run["errors"]
    assert run["turns"] > int(killed.group(2))  # turns ran after the kill
    assert [load["index"] for load in run["shard_loads"]] == [0, 1]


def test_bench_rejects_a_hostile_shard_count(capsys: pytest.CaptureFixture[str]) -> None:
    from fore.supervision.cli import build_parser
    from fore.supervision.cli import main as cli_main

    assert build_parser().parse_args(["bench", "--shards", "0"]).shards == 0
    assert cli_main(["bench", "--shards", "100000"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must be 0 to 64" in err[0]
