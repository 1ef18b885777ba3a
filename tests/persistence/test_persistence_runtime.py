"""A runtime on a session store: write-ahead, resume, fork, restart reload, bad stores (issue 25).

Real stores -- a SQLite file and a throwaway PostgreSQL cluster -- under real
sessions. Where a test needs the store to be slow or to fail at one exact
append, :class:`GatedStore` wraps the real one and holds or fails that call;
everything else is the real database. No timing asserts: the order of events
is forced with gates, and waits are bounded.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fore.actors.llm import FunctionModel, OpenAICompatible, ScriptedModel
from fore.actors.llm.mock_server import MockLlmServer
from fore.actors.llm.script import ScriptReply, ScriptToolCall
from fore.actors.store import (
    Appended,
    NewSession,
    SchemaTooNew,
    SessionLeased,
    SessionNotFound,
    SessionRecord,
    SessionSnapshot,
    SessionStore,
    SessionSummary,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    StoreUrlError,
    TurnBatch,
    migrations,
    open_store,
)
from fore.actors.worker.approval import ApprovalPolicy
from fore.actors.worker.hooks import Continue, Hooks, Pause
from fore.actors.worker.interceptor import Interceptor
from fore.errors import ForeError
from fore.messages.alerts import AlertLevel
from fore.messages.blob_store import CollectBlobs
from fore.messages.conversation import AssistantMessage, ToolResult, UserMessage
from fore.messages.llm import LlmRequest
from fore.messages.session import TurnFinished
from fore.supervision import Runtime
from fore.supervision.resume import ModelNotRebuildable
from fore.testing import wait_until
from tests.store.pg_server import pg_cluster, pg_url, store_url  # noqa: F401  (fixtures)
from tests.store.test_store_open import bump_version

WAIT = 30.0


class GatedStore(SessionStore):
    """A real store whose appends a test can hold (``gate``) or fail (``fail``) -- nothing else."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.owner = inner.owner
        self.lease_ttl = inner.lease_ttl
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.fail = 0
        self.appends = 0

    def append(self, session_id: str, batch: TurnBatch) -> Appended:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(WAIT), "the test never opened the gate"
        if self.fail:
            self.fail -= 1
            raise StoreUnavailable("the database went away (injected)")
        self.appends += 1
        return self.inner.append(session_id, batch)

    def create_session(self, new: NewSession) -> SessionRecord:
        return self.inner.create_session(new)

    def open_session(self, session_id: str) -> SessionSnapshot:
        return self.inner.open_session(session_id)

    def load(self, session_id: str) -> SessionSnapshot:
        return self.inner.load(session_id)

    def fork(
        self, session_id: str, *, new_id: str | None = None, turns: int | None = None
    ) -> SessionRecord:
        return self.inner.fork(session_id, new_id=new_id, turns=turns)

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)

    def list_sessions(
        self, *, limit: int = 20, workspace: str | None = None
    ) -> tuple[SessionSummary, ...]:
        return self.inner.list_sessions(limit=limit, workspace=workspace)

    def referenced_blobs(self) -> frozenset[str]:
        return self.inner.referenced_blobs()

    def release(self, session_id: str) -> None:
        self.inner.release(session_id)

    def renew_leases(self) -> frozenset[str]:
        return self.inner.renew_leases()

    def held(self) -> frozenset[str]:
        return self.inner.held()

    def schema_version(self) -> int:
        return self.inner.schema_version()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/sessions.db"


@pytest.fixture
def gated(sqlite_url: str) -> Iterator[GatedStore]:
    store = GatedStore(open_store(sqlite_url))
    yield store
    store.close()


def stored_items(url: str, sid: str) -> list[str]:
    """The session's items in the store, as their stored JSON (read by another connection)."""
    with open_store(url, owner="reader") as reader:
        return [item.model_dump_json() for item in reader.load(sid).items]


def as_json(items: Any) -> list[str]:
    return [item.model_dump_json() for item in items]


def echo() -> FunctionModel:
    """Answers every request with the last user text, reversed."""

    def answer(request: LlmRequest) -> str:
        text = next((m.text for m in reversed(request.messages) if isinstance(m, UserMessage)), "")
        return text[::-1]

    return FunctionModel(answer)


# -- write-ahead -----------------------------------------------------------------------------------


def test_a_turn_is_reported_only_once_its_items_are_in_the_store(
    gated: GatedStore, sqlite_url: str, tmp_path: Path
) -> None:
    with Runtime(store=gated, blob_dir=tmp_path / "b") as rt:
        session = rt.open_session(model=echo())
        gated.gate = threading.Event()
        results: list[Any] = []
        thread = threading.Thread(
            target=lambda: results.append(session.submit("abc", timeout=WAIT))
        )
        thread.start()
        assert gated.entered.wait(WAIT)  # the turn ended and its append is under way
        assert stored_items(sqlite_url, session.id) == []
        assert not results, "the submit was answered before its items were stored"
        assert not [e for e in session.drain_events() if isinstance(e, TurnFinished)]
        gated.gate.set()
        thread.join(WAIT)
        (turn,) = results
        assert turn.status == "completed"
        assert stored_items(sqlite_url, session.id) == as_json(turn.items)
        assert [type(i) for i in turn.items] == [UserMessage, AssistantMessage]


def test_a_failed_append_is_a_store_error_and_the_next_save_writes_the_turn(
    gated: GatedStore, sqlite_url: str, tmp_path: Path
) -> None:
    with Runtime(store=gated, blob_dir=tmp_path / "b") as rt:
        session = rt.open_session(model=echo())
        gated.fail = 1
        first = session.submit("one", timeout=WAIT)
        assert first.status == "error" and first.error_kind == "store"
        assert first.error is not None and "not save" in first.error
        assert "went away" in first.error
        assert [i.text for i in session.history] == ["one", "eno"]  # type: ignore[union-attr]
        wait_until(
            lambda: any(
                a.level is AlertLevel.ERROR and a.source == "store" for a in session.alerts
            ),
            timeout=WAIT,
        )
        assert stored_items(sqlite_url, session.id) == []
        second = session.submit("two", timeout=WAIT)
        assert second.status == "completed"
        # Nothing was lost: both turns, in order, and the alert that said so.
        assert stored_items(sqlite_url, session.id) == as_json(session.history)
        with open_store(sqlite_url, owner="reader") as reader:
            alerts = reader.load(session.id).alerts
        assert any(a.source == "store" and a.level is AlertLevel.ERROR for a in alerts)


def test_a_paused_run_is_saved_before_its_submit_is_answered(
    store_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [
            ScriptReply(tool_calls=(ScriptToolCall(name="lookup", arguments={"key": "k"}),)),
            ScriptReply(text="found it"),
        ]
    )
    hooks = Hooks()
    seen: list[str] = []

    def ask_first(ctx: Any) -> Any:
        if not seen:
            seen.append(ctx.name)
            return Pause("waiting for a person")
        return Continue()

    hooks.pre_tool_call(ask_first)
    with Runtime(store=store_url, blob_dir=tmp_path / "b") as rt:
        session = rt.open_session(model=model, tools=[lookup], hooks=hooks)
        turn = session.submit("find k", timeout=WAIT)
        assert turn.status == "paused"
        assert stored_items(store_url, session.id) == as_json(session.history)
        assert len(session.history) == 2  # the prompt and the answer with the call
        done = session.resume(timeout=WAIT)
        assert done.status == "completed"
        assert stored_items(store_url, session.id) == as_json(session.history)
        assert len(session.history) == 4


def test_a_run_cancelled_while_its_pause_is_saved_never_pauses(
    gated: GatedStore, sqlite_url: str, tmp_path: Path
) -> None:
    """The pause's save runs under the run's scope: a cancel that comes while it is written
    ends the run ``cancelled`` (on_abort once), and the late save never pauses it."""
    model = ScriptedModel(
        [ScriptReply(tool_calls=(ScriptToolCall(name="lookup", arguments={"key": "k"}),))]
    )
    hooks = Hooks()
    hooks.pre_tool_call(lambda ctx: Pause("waiting for a person"))
    aborts: list[str] = []
    hooks.on_abort(lambda ctx: aborts.append(ctx.status))
    with Runtime(store=gated, blob_dir=tmp_path / "b") as rt:
        session = rt.open_session(model=model, tools=[lookup], hooks=hooks)
        gated.gate = threading.Event()
        results: list[Any] = []
        thread = threading.Thread(
            target=lambda: results.append(session.submit("find k", timeout=WAIT))
        )
        thread.start()
        try:
            assert gated.entered.wait(WAIT)  # the pause's save is under way
            assert session.run_state().phase == "saving"
            session.cancel("changed my mind")
            wait_until(lambda: bool(results) or session.run_state().phase != "saving")
        finally:
            gated.gate.set()
        thread.join(WAIT)
        (turn,) = results
        assert (turn.status, turn.error) == ("cancelled", "changed my mind")
        assert aborts == ["cancelled"]
        assert not [e for e in session.drain_events() if type(e).__name__ == "RunPaused"]
        assert session.run_state().status == "idle"
        assert stored_items(sqlite_url, session.id) == as_json(session.history)


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key
    """
    return f"value of {key}"


def test_closing_a_session_under_a_run_reports_it_and_still_stores_its_items(
    sqlite_url: str, tmp_path: Path
) -> None:
    release = threading.Event()

    def slow(_request: LlmRequest) -> str:
        release.wait(WAIT)
        return "too late"

    with Runtime(store=sqlite_url, blob_dir=tmp_path / "b") as rt:
        session = rt.open_session(model=FunctionModel(slow))
        results: list[Any] = []
        thread = threading.Thread(
            target=lambda: results.append(session.submit("wait for it", timeout=WAIT))
        )
        thread.start()
        wait_until(lambda: len(session.history) == 1, timeout=WAIT)  # the prompt is in
        sid = session.id
        session.close()
        release.set()
        thread.join(WAIT)
        (turn,) = results
        assert turn.status == "cancelled"
        assert stored_items(sqlite_url, sid) == as_json(turn.items)
        assert rt.list_sessions()[0].leased_by is None  # the lease went after the append


# -- a worker restart reloads from the store -------------------------------------------------------


class CrashOnCall(Interceptor):
    """A bug in trusted code: the worker itself crashes before running a tool call."""

    def pre_tool_call(self, ctx: Any) -> Any:
        if ctx.name == "lookup" and ctx.arguments.get("key") == "crash":
            raise RuntimeError("interceptor bug")
        return Continue()


def test_a_restarted_worker_reloads_from_the_store_losing_only_the_turn_in_flight(
    store_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [
            ScriptReply(text="first answer"),
            ScriptReply(tool_calls=(ScriptToolCall(name="lookup", arguments={"key": "crash"}),)),
            ScriptReply(text="after the restart"),
        ]
    )
    with Runtime(store=store_url, blob_dir=tmp_path / "b") as rt:
        session = rt.open_session(model=model, tools=[lookup], interceptor=CrashOnCall())
        first = session.submit("hello", timeout=WAIT)
        assert first.status == "completed"
        with pytest.raises(Exception, match=r"interceptor bug|crashed|failed"):
            session.submit("crash now", timeout=WAIT)
        # Sent at once: it waits while the restarted worker reloads, then runs.
        third = session.submit("again", timeout=WAIT)
        assert third.status == "completed"
        texts = [getattr(i, "text", "") for i in session.history]
        assert texts == ["hello", "first answer", "again", "after the restart"]
        assert stored_items(store_url, session.id) == as_json(session.history)
        lost = [a for a in session.alerts if "turn in flight was lost" in a.text]
        assert len(lost) == 1 and lost[0].level is AlertLevel.WARN
        assert "2 items" in lost[0].text  # the prompt and the answer with its call


# -- resume, list, fork ----------------------------------------------------------------------------


def test_resume_continues_the_session_with_its_history(
    store_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    blobs = tmp_path / "b"
    with Runtime(store=store_url, blob_dir=blobs) as rt:
        session = rt.open_session(model=echo(), system_prompt="be brief", max_turns=7)
        session.submit("first", timeout=WAIT)
        sid, history = session.id, session.history
    with Runtime(store=store_url, blob_dir=blobs) as rt:
        (summary,) = rt.list_sessions()
        assert summary.session_id == sid and summary.title == "first"
        assert summary.leased_by is None and summary.turn_count == 1
        model = echo()
        resumed = rt.resume_session(sid, model)
        assert resumed.id == sid and resumed.history == history
        turn = resumed.submit("second", timeout=WAIT)
        assert turn.status == "completed"
        assert stored_items(store_url, sid) == as_json(resumed.history)
        # The stored settings came back: the system prompt is in the request.
        assert rt.list_sessions()[0].leased_by is not None


def test_resume_rebuilds_an_openai_compatible_model_from_its_stored_settings(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MockLlmServer() as server:
        model = OpenAICompatible(base_url=server.base_url, model="mock-1", api_key="sk-secret")
        with Runtime(store=sqlite_url, blob_dir=tmp_path / "b") as rt:
            session = rt.open_session(model=model)
            session.submit("hi", timeout=WAIT)
            sid = session.id
        with open_store(sqlite_url, owner="reader") as reader:
            record = reader.load(sid).record
        assert record.model_settings["base_url"] == server.base_url
        assert record.model_settings["model"] == "mock-1"
        assert "sk-secret" not in str(record.model_settings)  # never a credential
        monkeypatch.setenv("FORE_API_KEY", "sk-from-the-environment")
        with Runtime(store=sqlite_url, blob_dir=tmp_path / "b") as rt:
            resumed = rt.resume_session(sid)
            assert resumed.submit("again", timeout=WAIT).status == "completed"
        requests = server.requests()
        assert requests[-1].headers.get("authorization") == "Bearer sk-from-the-environment"


def test_resume_needs_the_model_again_for_an_in_process_model(
    sqlite_url: str, tmp_path: Path
) -> None:
    with Runtime(store=sqlite_url, blob_dir=tmp_path / "b") as rt:
        sid = rt.open_session(model=echo()).id
    with Runtime(store=sqlite_url, blob_dir=tmp_path / "b") as rt:
        with pytest.raises(ModelNotRebuildable, match="pass model="):
            rt.resume_session(sid)
        assert not rt._sessions
        assert rt.resume_session(sid, echo()).id == sid  # the lease was given back


def test_resume_of_an_unknown_session_is_session_not_found(sqlite_url: str) -> None:
    with Runtime(store=sqlite_url) as rt:
        with pytest.raises(SessionNotFound) as caught:
            rt.resume_session("no-such-session", echo())
        assert isinstance(caught.value, ForeError)
        assert "no-such-session" in str(caught.value)


def test_a_session_open_here_cannot_be_resumed_by_another_runtime(
    store_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with Runtime(store=store_url, blob_dir=tmp_path / "b") as one:
        sid = one.open_session(model=echo()).id
        # Another runtime is another lease holder (another owner id).
        other_store = open_store(store_url, owner="another-process")
        with (
            Runtime(store=other_store, blob_dir=tmp_path / "b") as two,
            pytest.raises(SessionLeased),
        ):
            two.resume_session(sid, echo())
        other_store.close()


def test_labels_are_stored_and_kept_by_a_resume_and_a_fork(sqlite_url: str, tmp_path: Path) -> None:
    """``open_session(labels=...)``: the application's facts about a session, stored with it
    (Fore never reads them; the distributed runtime keeps the workspace's machine there)."""
    with Runtime(store=sqlite_url, blob_dir=tmp_path / "b") as rt:
        with pytest.raises(TypeError, match="labels"):
            rt.open_session(model=echo(), labels={"machine": 1})  # type: ignore[dict-item]
        assert not rt.list_sessions()  # refused before anything was stored
        session = rt.open_session(model=echo(), labels={"machine": "build-7"})
        first_fork = session.fork()
        sid, first = session.id, first_fork.id
    with Runtime(store=sqlite_url, blob_dir=tmp_path / "b") as rt:
        second = rt.resume_session(sid, echo()).fork().id
    with open_store(sqlite_url, owner="reader") as reader:
        for stored in (sid, first, second):
            config = reader.load(stored).record.session_config
            assert config["labels"] == {"machine": "build-7"}, stored


def test_fork_copies_the_history_under_a_new_id(
    store_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with Runtime(store=store_url, blob_dir=tmp_path / "b") as rt:
        parent = rt.open_session(model=echo())
        parent.submit("one", timeout=WAIT)
        child = parent.fork()
        assert child.id != parent.id
        assert child.history == parent.history
        child.submit("two", timeout=WAIT)
        assert len(child.history) == 4 and len(parent.history) == 2  # independent
        sessions = {s.session_id: s for s in rt.list_sessions()}
        assert sessions[child.id].parent_id == parent.id
        assert stored_items(store_url, child.id) == as_json(child.history)
        assert stored_items(store_url, parent.id) == as_json(parent.history)


def test_fork_without_a_store_copies_the_history_in_memory() -> None:
    with Runtime() as rt:
        parent = rt.open_session(model=echo())
        parent.submit("one", timeout=WAIT)
        child = parent.fork()
        assert child.id != parent.id and child.history == parent.history
        with pytest.raises(RuntimeError, match="no session store"):
            rt.list_sessions()


def test_an_accepted_speculation_is_saved_when_it_is_inserted(tmp_path: Path) -> None:
    from fore.actors.speculation.governor import LoadGovernor
    from fore.messages.gate import ApprovalMode
    from tests.speculation.test_speculation import Replies, spec
    from tests.speculation.test_speculation_accept import MAIN, SUGGEST, bump

    url = f"sqlite:///{tmp_path}/sessions.db"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with (
        Replies(main=MAIN, suggestion=SUGGEST, speculation=[bump, bump]) as replies,
        Runtime(
            store=url,
            blob_dir=tmp_path / "b",
            overlay_root=tmp_path / "overlays",
            speculation_governor=LoadGovernor(enabled=False),
        ) as rt,
    ):
        s = rt.open_session(workspace=ws, model=replies.model, speculation=config)
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        wait_until(lambda: s.speculation.state in ("completed", "boundary"), timeout=WAIT)
        # Its work is not the session's until Tab: nothing of it is stored.
        assert stored_items(url, s.id) == as_json(s.history)
        assert len(s.history) == 4
        result = s.accept(timeout=WAIT)
        assert result.outcome == "accepted"
        assert (ws / "app.py").read_text() == "x = 2\n"
        assert len(s.history) > 4
        assert stored_items(url, s.id) == as_json(s.history)


def test_an_accepted_boundary_is_saved_before_its_turn_goes_on(tmp_path: Path) -> None:
    """Tab on a limit boundary: the accepted items are stored before the continued turn runs."""
    from fore.actors.speculation.governor import LoadGovernor
    from tests.speculation.test_speculation import Replies, call, settled, spec
    from tests.speculation.test_speculation_accept import MAIN

    url = f"sqlite:///{tmp_path}/sessions.db"
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text("x = 1\n")
    sid: list[str] = []
    seen: list[list[str]] = []

    def go_on(request: LlmRequest) -> str:
        """The continued turn's request: what is in the store by now?"""
        seen.append(stored_items(url, sid[0]))
        return "Listed: app.py."

    looks = {"text": "", "tool_calls": [call("list_directory")]}
    with (
        Replies(
            main=[*MAIN, go_on],
            suggestion=['{"suggestion": "list the files"}'],
            speculation=[looks, looks],
        ) as replies,
        Runtime(
            store=url,
            blob_dir=tmp_path / "b",
            overlay_root=tmp_path / "overlays",
            speculation_governor=LoadGovernor(enabled=False),
        ) as rt,
    ):
        s = rt.open_session(workspace=ws, model=replies.model, speculation=spec(max_turns=1))
        sid.append(s.id)
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "boundary"
        result = s.accept(timeout=WAIT)
        assert result.outcome == "boundary"
        assert result.turn is not None and result.turn.status == "completed"
        history = s.history
        (before,) = seen
        # Everything but the continued turn's answer was durable before it was asked for.
        assert before == as_json(history[:-1])
        assert isinstance(history[-2], ToolResult)
        assert stored_items(url, s.id) == as_json(history)


# -- blobs of stored sessions ----------------------------------------------------------------------


def unpinned(rt: Runtime, blob_id: str) -> None:
    """Wait until the closed session's pins are released (the release is a tell)."""
    assert rt.blob_fs is not None
    key = uuid.UUID(blob_id)
    wait_until(lambda: not rt.blob_fs.pins.is_pinned(key), timeout=WAIT)  # type: ignore[union-attr]


def test_blobs_quoted_by_a_stored_session_outlive_it_until_it_is_deleted(
    sqlite_url: str, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [
            ScriptReply(tool_calls=(ScriptToolCall(name="big", arguments={}),)),
            ScriptReply(text="read it"),
        ]
    )

    def big() -> str:
        """A large output (stored as a blob)."""
        return "line of output\n" * 2000

    with Runtime(store=sqlite_url, blob_dir=tmp_path / "b", blob_max_bytes=0) as rt:
        session = rt.open_session(model=model, tools=[big])
        session.submit("go", timeout=WAIT)
        result = next(i for i in session.history if isinstance(i, ToolResult))
        assert result.output.startswith("[blob:")
        blob_id = result.output[len("[blob:") : result.output.index("]")]
        sid = session.id
        session.close()  # nothing pins it any more; the store still quotes it
        assert rt.blob_fs is not None and rt.blob_store is not None
        # The blob-store actor's retention asks the store (protected is decided
        # before the grace period spares young blobs).
        report = rt.blob_store.ask(CollectBlobs(), timeout=WAIT)
        assert any(str(b) == blob_id for b in report.protected)
        assert rt.store is not None
        refs = rt.store.referenced_blobs
        unpinned(rt, blob_id)
        later = time.time() + 3600  # past the grace period and any age
        rt.blob_fs.collect(refs(), now=later, confirm=refs)
        assert rt.blob_fs.exists(blob_id), "retention removed a blob a stored session quotes"
        rt.store.delete(sid)
        assert blob_id in {str(b) for b in rt.blob_fs.collect(refs(), now=later).removed}


def test_without_a_store_a_closed_sessions_blob_is_collected(tmp_path: Path) -> None:
    """The contrast of the test above: nothing keeps it once the session is gone."""
    model = ScriptedModel(
        [
            ScriptReply(tool_calls=(ScriptToolCall(name="big", arguments={}),)),
            ScriptReply(text="read it"),
        ]
    )

    def big() -> str:
        """A large output (stored as a blob)."""
        return "line of output\n" * 2000

    with Runtime(blob_dir=tmp_path / "b", blob_max_bytes=0) as rt:
        session = rt.open_session(model=model, tools=[big])
        session.submit("go", timeout=WAIT)
        result = next(i for i in session.history if isinstance(i, ToolResult))
        blob_id = result.output[len("[blob:") : result.output.index("]")]
        session.close()
        assert rt.blob_fs is not None
        unpinned(rt, blob_id)
        removed = rt.blob_fs.collect((), now=time.time() + 3600).removed
        assert blob_id in {str(b) for b in removed}


# -- bad stores: one clear error at Runtime(...), nothing left running -----------------------------


def runtime_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(("fore", "bad"))}


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("mysql://localhost/fore", StoreUrlError),
        ("sqlite://host/x.db", StoreUrlError),
        ("postgresql://fore@127.0.0.1:1/fore?connect_timeout=2", StoreUnavailable),
        ("sqlite:///proc/no/such/dir/sessions.db", StoreUnavailable),
    ],
)
def test_a_bad_store_url_fails_at_the_constructor(url: str, error: type[StoreError]) -> None:
    before = runtime_threads()
    with pytest.raises(error) as caught:
        Runtime(name="bad", store=url)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ForeError)
    assert runtime_threads() == before, "a failed Runtime(...) left threads running"


def test_a_corrupted_sqlite_file_fails_at_the_constructor(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 40)
    before = runtime_threads()
    with pytest.raises(StoreCorrupted):
        Runtime(name="bad", store=f"sqlite:///{path}")
    assert runtime_threads() == before


def test_a_newer_schema_fails_at_the_constructor(
    store_url: str,  # noqa: F811
) -> None:
    with open_store(store_url):
        pass
    bump_version(store_url, migrations.LATEST + 1)
    before = runtime_threads()
    with pytest.raises(SchemaTooNew, match="upgrade Fore"):
        Runtime(name="bad", store=store_url)
    assert runtime_threads() == before


# -- any history round-trips through the runtime ---------------------------------------------------

texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=60
).filter(lambda t: t.strip() != "")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, str]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('rt')}/sessions.db"
    with Runtime(name="roundtrip", store=url, blob_dir=tmp_path_factory.mktemp("b")) as rt:
        yield rt, url


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    turns=st.lists(
        st.tuples(texts, texts, st.lists(st.tuples(texts, texts), max_size=2)),
        min_size=1,
        max_size=4,
    )
)
def test_any_history_round_trips_through_the_runtime(
    shared: tuple[Runtime, str], turns: list[tuple[str, str, list[tuple[str, str]]]]
) -> None:
    """Prompts, answers, tool calls and their results of any text: resumed byte for byte."""
    rt, _url = shared
    replies: list[Any] = []
    for _prompt, answer, calls in turns:
        if calls:
            replies.append(
                {
                    "text": "",
                    "tool_calls": [
                        {"name": "echo_tool", "arguments": {"text": a}} for a, _r in calls
                    ],
                }
            )
        replies.append(answer)

    def decide(_request: LlmRequest) -> Any:
        return replies.pop(0)

    def echo_tool(text: str) -> str:
        """Echo.

        Args:
            text: what to echo
        """
        return text

    model = FunctionModel(decide)
    session = rt.open_session(model=model, tools=[echo_tool])
    for prompt_text, _answer, _calls in turns:
        assert session.submit(prompt_text, timeout=WAIT).status == "completed"
    history = session.history
    sid = session.id
    session.close()
    resumed = rt.resume_session(sid, model, tools=[echo_tool])
    try:
        assert as_json(resumed.history) == as_json(history)
    finally:
        resumed.close()


def test_a_resume_keeps_the_sessions_approval_policy(sqlite_url: str, tmp_path: Path) -> None:
    """A session opened in ``plan`` mode is still in ``plan`` mode after a resume that names none.

    The policy is stored (never the approver, a callable); without it a resume
    would run unasked every write the session had been refusing.
    """
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with Runtime(store=sqlite_url) as rt:
        session = rt.open_session(
            workspace=workspace, model=echo(), approval=ApprovalPolicy(mode="plan", timeout_s=9)
        )
        session.submit("first", timeout=WAIT)
        sid = session.id
    write = ScriptReply(
        tool_calls=(ScriptToolCall(name="write_file", arguments={"path": "x.txt", "content": "x"}),)
    )
    with Runtime(store=sqlite_url) as rt:
        resumed = rt.resume_session(sid, ScriptedModel([write, ScriptReply(text="done")]))
        policy = resumed.approval
        assert policy is not None
        assert (policy.mode, policy.timeout_s) == ("plan", 9)
        turn = resumed.submit("write x.txt", timeout=WAIT)
        assert turn.status == "completed"
        refused = [i for i in turn.items if isinstance(i, ToolResult)]
        assert len(refused) == 1 and refused[0].output.startswith("Skipped")
    assert not (workspace / "x.txt").exists()


def test_a_session_without_approvals_resumes_without_them(sqlite_url: str) -> None:
    with Runtime(store=sqlite_url) as rt:
        session = rt.open_session(model=echo())
        sid = session.id
        session.close()
        assert rt.resume_session(sid, echo()).approval is None
