"""The session store's operations on both backends (a real SQLite file, a real PostgreSQL).

Each test runs once per backend through the ``store_url`` fixture: the same
rules hold whatever the database.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from fore.actors.store import (
    InvalidRecord,
    LeaseLost,
    NewSession,
    SessionExists,
    SessionLeased,
    SessionNotFound,
    SessionStore,
    StoreClosed,
    TurnBatch,
    open_store,
)
from fore.actors.store.codec import MAX_KEPT_ALERTS
from fore.messages.alerts import Alert
from fore.messages.conversation import (
    AssistantMessage,
    ToolCall,
    ToolResult,
    UserMessage,
    item_text,
)
from fore.messages.llm import Usage
from tests.store.pg_server import pg_cluster, store_url  # noqa: F401  (fixtures)
from tests.store.store_child import turn_items


@pytest.fixture
def store(store_url: str) -> Iterator[SessionStore]:  # noqa: F811
    with open_store(store_url) as opened:
        yield opened


def new(store: SessionStore, sid: str | None = None, **fields: object) -> str:
    record = store.create_session(
        NewSession(session_id=sid, workspace="/ws", model_name="gpt-test", **fields)  # type: ignore[arg-type]
    )
    return record.session_id


def test_create_append_load_keeps_everything_in_order(store: SessionStore) -> None:
    sid = new(
        store,
        model_settings={"base_url": "http://127.0.0.1:9/v1", "model": "m", "max_tokens": 64},
        session_config={"max_turns": 12, "hooks": ["a", "b"]},
    )
    blob = str(uuid.uuid4())
    first = TurnBatch(
        items=(
            UserMessage(text="  fix the\n bug  "),
            AssistantMessage(
                text="", tool_calls=(ToolCall(id="c1", name="grep", arguments={"p": 1}),)
            ),
            ToolResult(call_id="c1", name="grep", output=f"[blob:{blob}] text | 3 lines"),
        ),
        usage=Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15, cached_tokens=2),
        alerts=(Alert(level="warn", text="slow", source="llm", session=sid),),
        pending_actions=("apply edit to a.py",),
    )
    second = TurnBatch(
        items=(UserMessage(text="thanks"), AssistantMessage(text="done")),
        usage=Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
    )
    a1 = store.append(sid, first)
    a2 = store.append(sid, second)
    assert (a1.first_seq, a1.next_seq, a1.turn) == (0, 3, 0)
    assert (a2.first_seq, a2.next_seq, a2.turn) == (3, 5, 1)

    snap = store.load(sid)
    assert snap.items == first.items + second.items
    assert snap.record.item_count == 5 and snap.record.turn_count == 2
    assert snap.record.title == "fix the bug"
    assert snap.record.model_settings["base_url"] == "http://127.0.0.1:9/v1"
    assert snap.record.session_config == {"max_turns": 12, "hooks": ["a", "b"]}
    assert snap.usage == Usage(
        prompt_tokens=11, completion_tokens=6, total_tokens=17, cached_tokens=2
    )
    assert snap.alerts == first.alerts
    assert snap.pending_actions == ("apply edit to a.py",)  # None in the 2nd batch: unchanged
    assert snap.blob_refs == (blob,)
    assert store.referenced_blobs() == frozenset({blob})

    store.append(sid, TurnBatch(pending_actions=()))  # no items: not a turn
    snap = store.load(sid)
    assert snap.pending_actions == () and snap.record.turn_count == 2


def test_missing_session_is_session_not_found_everywhere(store: SessionStore) -> None:
    for call in (
        lambda: store.load("nope"),
        lambda: store.open_session("nope"),
        lambda: store.append("nope", TurnBatch()),
        lambda: store.fork("nope"),
        lambda: store.delete("nope"),
    ):
        with pytest.raises(SessionNotFound, match="no session 'nope'"):
            call()


def test_duplicate_id_is_refused(store: SessionStore) -> None:
    new(store, "same")
    with pytest.raises(SessionExists):
        new(store, "same")


def test_write_without_the_lease_is_refused(store: SessionStore, store_url: str) -> None:  # noqa: F811
    sid = new(store)
    store.release(sid)
    with pytest.raises(LeaseLost, match="not open here"):
        store.append(sid, TurnBatch(items=(UserMessage(text="x"),)))
    assert store.load(sid).items == ()


def test_session_leased_elsewhere_cannot_be_opened_or_deleted(
    store: SessionStore,
    store_url: str,  # noqa: F811
) -> None:
    sid = new(store)
    with open_store(store_url, owner="other-host/worker-2") as other:
        with pytest.raises(SessionLeased, match=r"pid \d+ on host") as info:
            other.open_session(sid)
        assert info.value.holder.startswith("pid ")
        with pytest.raises(SessionLeased):
            other.delete(sid)
        store.close()  # releases
        assert other.open_session(sid).record.session_id == sid
        with open_store(store_url) as third, pytest.raises(SessionLeased, match="worker-2"):
            third.open_session(sid)


def test_an_expired_lease_is_taken_over_and_the_old_holder_is_told(store_url: str) -> None:  # noqa: F811
    first = open_store(store_url, owner="host-a/1", lease_ttl=0.5, auto_renew=False)
    second = open_store(store_url, owner="host-b/2")
    try:
        sid = new(first)
        first.append(sid, TurnBatch(items=(UserMessage(text="a"),)))
        deadline = time.monotonic() + 60
        while True:  # no timing assert: wait (bounded) until the lease has expired
            try:
                second.open_session(sid)
                break
            except SessionLeased:
                assert time.monotonic() < deadline, "the lease never expired"
                time.sleep(0.1)
        second.append(sid, TurnBatch(items=(UserMessage(text="b"),)))
        with pytest.raises(LeaseLost, match="host-b/2"):
            first.append(sid, TurnBatch(items=(UserMessage(text="late"),)))
        assert first.renew_leases() == frozenset()  # it already knows it lost it
        assert [i.text for i in second.load(sid).items] == ["a", "b"]  # type: ignore[union-attr]
    finally:
        first.close()
        second.close()


def test_renew_reports_lost_leases(store_url: str) -> None:  # noqa: F811
    first = open_store(store_url, owner="host-a/1", lease_ttl=0.5, auto_renew=False)
    second = open_store(store_url, owner="host-b/2")
    try:
        kept, lost = new(first), new(first)
        deadline = time.monotonic() + 60
        while True:
            try:
                second.open_session(lost)
                break
            except SessionLeased:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert first.renew_leases() == frozenset({lost})
        assert first.held() == frozenset({kept})
    finally:
        first.close()
        second.close()


def test_fork_copies_history_and_is_independent(store: SessionStore) -> None:
    sid = new(store, title="original")
    blob1, blob2 = str(uuid.uuid4()), str(uuid.uuid4())
    store.append(sid, TurnBatch(items=turn_items("t0", 4, blob1)))
    store.append(sid, TurnBatch(items=turn_items("t1", 3, blob2), usage=Usage(total_tokens=9)))
    whole = store.fork(sid, new_id="whole")
    first_turn = store.fork(sid, new_id="first", turns=1)
    empty = store.fork(sid, turns=0)
    assert whole.parent_id == sid and whole.forked_at == 7 and whole.item_count == 7
    assert first_turn.item_count == 4 and first_turn.turn_count == 1
    assert empty.item_count == 0 and empty.title == "original"
    source = store.load(sid)
    assert store.load("whole").items == source.items
    assert store.load("first").items == source.items[:4]
    assert store.load("first").blob_refs == (blob1,)
    assert store.load("whole").usage == Usage()  # usage belongs to the original's life
    # The fork is open here and grows on its own; the source is untouched.
    store.append("first", TurnBatch(items=(UserMessage(text="another approach"),)))
    assert store.load("first").record.item_count == 5
    assert store.load(sid).items == source.items
    # Deleting the parent leaves the forks whole.
    store.delete(sid)
    assert store.load("whole").items == source.items
    with pytest.raises(SessionExists):
        store.fork("whole", new_id="first")
    with pytest.raises(InvalidRecord):
        store.fork("whole", turns=-1)


def test_delete_removes_everything(store: SessionStore) -> None:
    sid = new(store)
    blob = str(uuid.uuid4())
    store.append(
        sid,
        TurnBatch(
            items=turn_items("x", 3, blob), alerts=(Alert(level="info", text="a", source="s"),)
        ),
    )
    store.delete(sid)
    with pytest.raises(SessionNotFound):
        store.load(sid)
    assert store.referenced_blobs() == frozenset()
    assert store.list_sessions() == ()
    assert sid not in store.held()


def test_list_sessions_recent_first_with_titles(store: SessionStore) -> None:
    ids = [new(store, f"s{i}") for i in range(4)]
    for i, sid in enumerate(ids):
        store.append(sid, TurnBatch(items=(UserMessage(text=f"question {i} " + "x" * 300),)))
        time.sleep(0.01)  # distinct clock readings (SQLite's clock has millisecond steps)
    store.append("s1", TurnBatch(items=(UserMessage(text="later"),)))  # s1 is now the most recent
    listed = store.list_sessions(limit=3)
    assert [s.session_id for s in listed] == ["s1", "s3", "s2"]
    assert listed[0].title.startswith("question 1 ") and len(listed[0].title) == 100
    assert listed[0].item_count == 2 and listed[0].leased_by is not None
    other = store.create_session(NewSession(session_id="o", workspace="/other", model_name="m"))
    assert [s.session_id for s in store.list_sessions(workspace="/other")] == [other.session_id]
    store.release("s0")
    assert next(s for s in store.list_sessions(limit=10) if s.session_id == "s0").leased_by is None
    with pytest.raises(InvalidRecord):
        store.list_sessions(limit=0)


def test_alerts_are_bounded_per_session(store: SessionStore) -> None:
    sid = new(store)
    for batch in range(3):
        alerts = tuple(
            Alert(level="info", text=f"{batch}.{i}", source="t", at=1.0) for i in range(100)
        )
        store.append(sid, TurnBatch(alerts=alerts))
    kept = store.load(sid).alerts
    assert len(kept) == MAX_KEPT_ALERTS
    assert kept[0].text == "1.0" and kept[-1].text == "2.99"


def test_bad_batches_write_nothing(store: SessionStore) -> None:
    sid = new(store)
    store.append(sid, TurnBatch(items=(UserMessage(text="ok"),)))
    surrogate = UserMessage(text="broken \ud800 text")
    with pytest.raises(InvalidRecord, match="item 1 cannot be stored as JSON"):
        store.append(sid, TurnBatch(items=(UserMessage(text="fine"), surrogate)))
    with pytest.raises(InvalidRecord, match="at most"):
        store.append(sid, TurnBatch(items=(UserMessage(text="x"),) * 10_001))
    with pytest.raises(InvalidRecord, match="larger than"):
        store.append(sid, TurnBatch(items=(UserMessage(text="x" * (17 * 1024 * 1024)),)))
    with pytest.raises(InvalidRecord):
        store.append(sid, "not a batch")  # type: ignore[arg-type]
    with pytest.raises(InvalidRecord):
        store.create_session({"workspace": "/w"})  # type: ignore[arg-type]
    snap = store.load(sid)
    assert [i.text for i in snap.items] == ["ok"]  # type: ignore[union-attr]
    assert snap.record.turn_count == 1


@pytest.mark.parametrize(
    "settings",
    [
        {"api_key": "sk-123"},
        {"headers": {"Authorization": "Bearer x"}},
        {"nested": [{"OPENAI_API_KEY": "x"}]},
        {"auth_token": "t"},
        {"base_url": "https://user:hunter2@example.invalid/v1"},
        {"x": "Bearer abc"},
        {"temperature": float("nan")},
    ],
)
def test_credentials_and_non_json_never_reach_the_store(
    store: SessionStore, settings: dict[str, object]
) -> None:
    with pytest.raises(InvalidRecord):
        new(store, model_settings=settings)
    assert store.list_sessions() == ()


@pytest.mark.parametrize("sid", ["", "a\x00b", "tab\there", "x" * 201, "\ud800"])
def test_bad_session_ids_are_refused(store: SessionStore, sid: str) -> None:
    with pytest.raises(InvalidRecord):
        new(store, sid)


def test_a_closed_store_says_so(store_url: str) -> None:  # noqa: F811
    store = open_store(store_url)
    sid = new(store)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreClosed):
        store.load(sid)
    with open_store(store_url, owner="next/1") as again:
        assert again.open_session(sid).record.session_id == sid  # close released the lease


def test_many_threads_share_one_store(store: SessionStore) -> None:
    sids = [new(store, f"t{i}") for i in range(8)]
    errors: list[BaseException] = []

    def work(sid: str) -> None:
        try:
            for turn in range(15):
                store.append(sid, TurnBatch(items=turn_items(f"{sid}:{turn}", 3)))
                store.load(sid)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(sid,)) for sid in sids * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:3]
    for sid in sids:
        items = store.load(sid).items
        assert len(items) == 2 * 15 * 3
        for start in range(0, len(items), 3):  # each turn's three items stay together
            tags = {item_text(item).split(" ")[0] for item in items[start : start + 3]}
            assert len(tags) == 1, tags
