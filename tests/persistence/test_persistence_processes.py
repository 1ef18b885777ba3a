"""Sessions that outlive their process: kill -9 mid-turn, two processes, leases (issue 25).

Each child is a real Python process (``tests/persistence/persist_child.py``) running a
:class:`Runtime` with a store -- SQLite and PostgreSQL -- and sessions that
talk to the mock LLM server over HTTP. Nothing here asserts a duration: waits
are bounded and fail with a message.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.store import SessionLeased, open_store
from fore.messages.conversation import AssistantMessage, ToolResult, UserMessage
from fore.supervision import Runtime
from tests.persistence.persist_child import lookup, prompt, script
from tests.store.pg_server import pg_cluster, pg_url, store_url  # noqa: F401  (fixtures)
from tests.store.test_store_processes import DEADLINE, Child

TAGS = [f"s{i}" for i in range(4)]
TURNS_IN_SCRIPT = 60


@pytest.fixture(scope="module")
def server() -> Any:
    # The answers stream slowly enough (~0.2 s) that a kill lands inside a turn.
    with MockLlmServer(script(TAGS, TURNS_IN_SCRIPT, tokens_per_s=200.0)) as srv:
        yield srv


class PersistChild(Child):
    """A ``tests.persistence.persist_child`` process, read like the store tests' children."""

    MODULE = "tests.persistence.persist_child"


@pytest.fixture
def spawn() -> Any:
    started: list[PersistChild] = []

    def start(command: str, **args: Any) -> PersistChild:
        child = PersistChild(command, **args)
        started.append(child)
        return child

    yield start
    for child in started:
        child.cleanup()


def is_turn(items: list[Any], tag: str, n: int) -> bool:
    """The four items of turn ``n`` of session ``tag``, complete and in order."""
    if len(items) != 4:
        return False
    user, call, result, answer = items
    return (
        isinstance(user, UserMessage)
        and user.text == prompt(tag, n)
        and isinstance(call, AssistantMessage)
        and len(call.tool_calls) == 1
        and isinstance(result, ToolResult)
        and result.call_id == call.tool_calls[0].id
        and isinstance(answer, AssistantMessage)
        and not answer.tool_calls
    )


def check_stored(url: str, reported: dict[str, list[dict[str, Any]]], tags: dict[str, str]) -> None:
    """Every reported turn is stored byte for byte, in order; after them at most one whole turn."""
    with open_store(url, owner="checker") as store:
        for sid, turns in reported.items():
            snapshot = store.load(sid)
            stored = [item.model_dump_json() for item in snapshot.items]
            expected = [body for turn in turns for body in turn["items"]]
            assert stored[: len(expected)] == expected, f"{sid}: a reported turn differs"
            rest = list(snapshot.items[len(expected) :])
            assert rest == [] or is_turn(rest, tags[sid], len(turns)), (
                f"{sid}: after the reported turns the store has {len(rest)} items: "
                "the turn in flight must be whole or absent"
            )


Reported = dict[str, list[dict[str, Any]]]


def collect(child: PersistChild, until: int) -> tuple[Reported, dict[str, str]]:
    """Read the child's events until ``until`` turns were reported (over all sessions)."""
    reported: dict[str, list[dict[str, Any]]] = {}
    tags: dict[str, str] = {}
    count = 0
    while count < until:
        event = child.expect_any(("opened", "turn"))
        if event["child"] == "opened":
            tags[event["session"]] = event["tag"]
            reported.setdefault(event["session"], [])
            continue
        assert event["status"] == "completed", event
        reported[event["session"]].append(event)
        count += 1
    return reported, tags


def drain(child: PersistChild, reported: dict[str, list[dict[str, Any]]]) -> None:
    """Turns reported before the kill took effect (already in the pipe), read to the end
    of the killed child's output -- not to a quiet second, which a starved reader shows."""
    while True:
        line = child.lines.get(timeout=DEADLINE)
        if line is None:
            child.lines.put(None)
            return
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("child") == "turn":
            reported[event["session"]].append(event)


@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_mid_turn_loses_nothing_reported_and_resumes(
    store_url: str,  # noqa: F811
    server: Any,
    spawn: Any,
    tmp_path: Path,
    seed: int,
) -> None:
    rng = random.Random(seed)
    child = spawn(
        "turns",
        url=store_url,
        base_url=server.base_url,
        blob_dir=str(tmp_path / "blobs"),
        sessions=3,
        turns=TURNS_IN_SCRIPT,
    )
    reported, tags = collect(child, until=rng.randint(4, 9))
    time.sleep(rng.uniform(0.0, 0.3))  # somewhere inside the next turns
    child.kill()
    drain(child, reported)
    check_stored(store_url, reported, tags)

    # A new process (this one) resumes each session and continues it; the
    # model is rebuilt from the stored settings (the mock server's URL).
    with Runtime(name="after-kill", store=store_url, blob_dir=tmp_path / "blobs") as rt:
        for sid, tag in tags.items():
            session = rt.resume_session(sid, tools=[lookup])
            assert session.id == sid
            before = list(session.history)
            assert len(before) % 4 == 0
            # A turn the child never reached (the mock server spent the in-flight
            # turn's scripted replies on the killed process).
            n = TURNS_IN_SCRIPT - 1
            turn = session.submit(prompt(tag, n), timeout=60)
            assert turn.status == "completed", turn.error
            assert is_turn(list(turn.items), tag, n)
            assert list(session.history) == [*before, *turn.items]
            session.close()


def test_two_processes_resume_each_others_closed_sessions(
    pg_url: str,  # noqa: F811
    server: Any,
    spawn: Any,
    tmp_path: Path,
) -> None:
    blobs = str(tmp_path / "blobs")
    # Process A creates two sessions of two turns each and exits.
    a = spawn("create", url=pg_url, base_url=server.base_url, blob_dir=blobs, sessions=2, turns=2)
    made = [a.expect("opened"), a.expect("opened")]
    a.expect("done")
    a.finish()
    # Process B (this one) resumes them and adds a turn to each.
    with Runtime(name="b", store=pg_url, blob_dir=blobs) as rt:
        for event in made:
            session = rt.resume_session(event["session"], tools=[lookup])
            assert len(session.history) == 8
            turn = session.submit(prompt(event["tag"], 2), timeout=60)
            assert turn.status == "completed"
            session.close()
    # Process C resumes them again and sees B's turns.
    c = spawn(
        "resume",
        url=pg_url,
        base_url=server.base_url,
        blob_dir=blobs,
        sessions=[[e["session"], e["tag"], 3] for e in made],
        turns=1,
    )
    for _ in made:
        assert c.expect("resumed")["items"] == 12
        assert c.expect("turn")["status"] == "completed"
    c.expect("done")
    c.finish()
    with open_store(pg_url, owner="checker") as store:
        for event in made:
            items = store.load(event["session"]).items
            assert len(items) == 16
            for n in range(4):
                assert is_turn(list(items[4 * n : 4 * n + 4]), event["tag"], n)


def test_a_session_open_in_one_process_cannot_be_resumed_in_another(
    store_url: str,  # noqa: F811
    server: Any,
    spawn: Any,
    tmp_path: Path,
) -> None:
    blobs = str(tmp_path / "blobs")
    with Runtime(name="maker", store=store_url, blob_dir=blobs) as rt:
        session = rt.open_session(model=_model(server), tools=[lookup])
        sid = session.id
        session.close()
    holder = spawn("hold", url=store_url, base_url=server.base_url, blob_dir=blobs, session=sid)
    holder.expect("holding")
    with Runtime(name="other", store=store_url, blob_dir=blobs) as rt:
        with pytest.raises(SessionLeased) as caught:
            rt.resume_session(sid, tools=[lookup])
        assert sid in str(caught.value) and "another process" in str(caught.value)
        assert not rt._sessions  # nothing half-open
    holder.finish()  # it closes the session: the lease goes
    with Runtime(name="other", store=store_url, blob_dir=blobs) as rt:
        assert rt.resume_session(sid, tools=[lookup]).id == sid


def _model(server: Any) -> Any:
    from fore.actors.llm import OpenAICompatible

    return OpenAICompatible(base_url=server.base_url, model="mock", api_key="")
