"""The blob-store actor: the BlobStore messages, pins that survive restarts (issue 6).

Real actors on a real ActorSystem (or a real Runtime with its supervisor),
real files in ``tmp_path``; waits are bounded, never sleeps for a guessed time.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import fore.testing
from fore.actors.blobs.actor import BlobStoreActor
from fore.actors.blobs.fs_store import BlobNotFound, FsBlobStore, InvalidBlobId
from fore.actors.blobs.pins import PinTable
from fore.actors.core import ActorSystem
from fore.actors.core.cancel import CancelScope
from fore.actors.llm import ScriptedModel
from fore.actors.tools import FunctionTool
from fore.errors import Cancelled
from fore.messages.blob_store import (
    BlobExists,
    BlobStoreStats,
    CollectBlobs,
    GetBlobStoreStats,
    LoadBlob,
    ReferenceBlobs,
    ReleaseSession,
    StoreBlob,
    StoredOutput,
    StoreToolOutput,
)
from fore.messages.blobs import Inline, Stored, Structured, Text
from fore.messages.conversation import ToolResult
from fore.supervision import Runtime

WAIT = 30.0


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    s = ActorSystem(name="blob-actor-test")
    try:
        yield s
    finally:
        assert s.shutdown(timeout=WAIT)


def start(system: ActorSystem, store: FsBlobStore, **kwargs: Any) -> Any:
    with system.activated():
        return BlobStoreActor.start(store, **kwargs)


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


# -- the BlobStore interface -------------------------------------------------------------


def test_store_load_exists_through_the_actor(system: ActorSystem, tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    ref = start(system, store)
    text_id = ref.ask(StoreBlob(content=Text(text="héllo\nworld\n")), timeout=WAIT)
    json_id = ref.ask(StoreBlob(content=Structured(value={"a": [1, 2]})), timeout=WAIT)
    assert isinstance(text_id, uuid.UUID) and isinstance(json_id, uuid.UUID)
    assert ref.ask(LoadBlob(blob_id=str(text_id)), timeout=WAIT) == Text(text="héllo\nworld\n")
    assert ref.ask(LoadBlob(blob_id=json_id), timeout=WAIT) == Structured(value={"a": [1, 2]})
    assert ref.ask(BlobExists(blob_id=str(text_id)), timeout=WAIT) is True
    assert ref.ask(BlobExists(blob_id=str(uuid.uuid4())), timeout=WAIT) is False
    assert (tmp_path / "blobs" / f"{text_id}.txt").read_text() == "héllo\nworld\n"
    ref.stop(timeout=WAIT)


def test_invalid_and_missing_ids_are_typed_errors(system: ActorSystem, tmp_path: Path) -> None:
    ref = start(system, FsBlobStore(tmp_path, fsync=False))
    urn = ref.actor_urn
    for message in (LoadBlob(blob_id="../../etc/passwd"), BlobExists(blob_id="nope")):
        with pytest.raises(InvalidBlobId):
            ref.ask(message, timeout=WAIT)
    with pytest.raises(BlobNotFound):
        ref.ask(LoadBlob(blob_id=str(uuid.uuid4())), timeout=WAIT)
    ref.tell(LoadBlob(blob_id="not a uuid"))  # a tell with a bad id must not crash it
    assert ref.ask(BlobExists(blob_id=str(uuid.uuid4())), timeout=WAIT) is False
    assert ref.is_alive() and ref.actor_urn == urn
    ref.stop(timeout=WAIT)


def test_disk_work_runs_on_the_blocking_lane(system: ActorSystem, tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    threads: list[str] = []
    for name in ("store", "load", "exists", "collect", "blob_ids"):
        original = getattr(store, name)

        def recording(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            threads.append(threading.current_thread().name)
            return _original(*args, **kwargs)

        setattr(store, name, recording)
    ref = start(system, store)
    blob_id = ref.ask(StoreBlob(content=Text(text="x")), timeout=WAIT)
    ref.ask(LoadBlob(blob_id=str(blob_id)), timeout=WAIT)
    ref.ask(BlobExists(blob_id=str(blob_id)), timeout=WAIT)
    ref.ask(CollectBlobs(), timeout=WAIT)
    assert isinstance(ref.ask(GetBlobStoreStats(), timeout=WAIT), BlobStoreStats)
    ref.stop(timeout=WAIT)
    assert len(threads) == 5
    assert all(name.startswith("blob-actor-test-blocking") for name in threads), threads


# -- tool outputs ------------------------------------------------------------------------


def test_an_explicit_tool_output_is_kept_as_the_tool_said(
    system: ActorSystem, tmp_path: Path
) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    ref = start(system, store)
    value = {"rows": [1, 2, 3]}  # small: only the explicit Stored makes it a blob
    summary = "é" * 300  # 600 bytes: must be cut to 400 on a character boundary
    out = ref.ask(
        StoreToolOutput(
            session_id="s",
            call_id="c1",
            output="ignored",
            tool_output=Stored(summary=summary, content=Structured(value=value)),
        ),
        timeout=WAIT,
    )
    assert isinstance(out, StoredOutput) and out.blob_id is not None
    assert store.load(out.blob_id) == Structured(value=value)
    body = out.history_text.removeprefix(f"[blob:{out.blob_id}] ")
    assert len(body.encode()) <= 400 and body.endswith("…") and body.startswith("éé")
    big_inline = "line\n" * 5000  # e.g. an inspect answer
    kept = ref.ask(
        StoreToolOutput(
            session_id="s", call_id="c2", output=big_inline, tool_output=Inline(text=big_inline)
        ),
        timeout=WAIT,
    )
    assert kept == StoredOutput(history_text=big_inline)
    old_way = ref.ask(
        StoreToolOutput(session_id="s", call_id="c3", output="x" * 2000, stored_summary="é" * 300),
        timeout=WAIT,
    )
    assert len(old_way.history_text.encode()) <= 400 + len(f"[blob:{old_way.blob_id}] ")
    ref.stop(timeout=WAIT)


def test_a_store_request_whose_scope_is_cancelled_stores_nothing(tmp_path: Path) -> None:
    """The worker asks under its run's scope: once the run is called off, the blob
    actor answers ``Cancelled`` without writing -- whether the cancel came before
    the request arrived or while it waited for the blocking lane."""
    system = ActorSystem(name="blob-scope", blocking_threads=1)
    lane_busy = threading.Event()
    try:
        store = FsBlobStore(tmp_path, fsync=False)
        writes: list[Any] = []
        original = store.store

        def counted(content: Any, **kwargs: Any) -> uuid.UUID:
            writes.append(content)
            return original(content, **kwargs)

        store.store = counted  # type: ignore[method-assign]
        ref = start(system, store)

        def request(scope: CancelScope, call_id: str) -> StoreToolOutput:
            return StoreToolOutput(session_id="s", call_id=call_id, output="y" * 5000, scope=scope)

        queued = CancelScope()
        system.blocking.submit(lane_busy.wait, WAIT)  # the one lane thread is busy
        pending = ref.ask(request(queued, "c1"), block=False)
        before = CancelScope()
        before.cancel("user typed")
        with pytest.raises(Cancelled, match="user typed"):  # answered at once, no lane
            ref.ask(request(before, "c2"), timeout=WAIT)
        queued.cancel("run ended")  # c1's handler ran first: its job waits on the lane
        lane_busy.set()
        with pytest.raises(Cancelled, match="run ended"):
            pending.get(timeout=WAIT)
        assert writes == []
        stats = ref.ask(GetBlobStoreStats(), timeout=WAIT)
        assert (stats.blobs, stats.stored, stats.pinned, stats.sessions) == (0, 0, 0, 0)
        live = ref.ask(request(CancelScope(), "c3"), timeout=WAIT)  # a live scope: stored
        assert live.blob_id is not None and len(writes) == 1
        ref.stop(timeout=WAIT)
    finally:
        lane_busy.set()
        assert system.shutdown(timeout=WAIT)


# -- pins ----------------------------------------------------------------------------------


def test_a_blob_referenced_by_another_live_session_is_kept(
    system: ActorSystem, tmp_path: Path
) -> None:
    store = FsBlobStore(tmp_path, fsync=False, max_total_bytes=0)
    ref = start(system, store)
    blob_id = ref.ask(StoreBlob(content=Text(text="shared"), session_id="s1"), timeout=WAIT)
    other = ref.ask(StoreBlob(content=Text(text="unpinned")), timeout=WAIT)
    # s2's history quotes s1's blob (e.g. items inserted from another history).
    added = ref.ask(
        ReferenceBlobs(session_id="s2", texts=(f"see [blob:{blob_id}] text | 1 lines",)),
        timeout=WAIT,
    )
    assert added == 1
    ref.tell(ReleaseSession(session_id="s1"))
    report = ref.ask(CollectBlobs(), timeout=WAIT)
    assert report.removed == (other,) and report.protected == (blob_id,)
    ref.tell(ReleaseSession(session_id="s2"))
    assert ref.ask(CollectBlobs(), timeout=WAIT).removed == (blob_id,)
    ref.stop(timeout=WAIT)


def test_a_session_released_during_its_store_keeps_no_pin(
    system: ActorSystem, tmp_path: Path
) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    entered, release = threading.Event(), threading.Event()
    original = store.store

    def gated(content: Any, **kwargs: Any) -> uuid.UUID:
        entered.set()
        assert release.wait(WAIT)
        return original(content, **kwargs)

    store.store = gated  # type: ignore[method-assign]
    ref = start(system, store)
    pending = ref.ask(
        StoreToolOutput(session_id="gone", call_id="c", output="y" * 5000), block=False
    )
    assert entered.wait(WAIT)
    ref.tell(ReleaseSession(session_id="gone"))  # the session closed meanwhile
    release.set()
    assert pending.get(timeout=WAIT).blob_id is not None
    stats = ref.ask(GetBlobStoreStats(), timeout=WAIT)
    assert (stats.pinned, stats.sessions) == (0, 0)
    ref.stop(timeout=WAIT)


def test_an_injected_pin_table_is_used(system: ActorSystem, tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False, max_total_bytes=0)
    pins = PinTable()
    ref = start(system, store, pins=pins)
    blob_id = ref.ask(StoreBlob(content=Text(text="p"), session_id="s"), timeout=WAIT)
    assert pins.session_pins("s") == {blob_id} and not store.pins.is_pinned(blob_id)
    assert ref.ask(CollectBlobs(), timeout=WAIT).protected == (blob_id,)
    ref.stop(timeout=WAIT)


def test_pins_survive_a_crash_and_restart_of_the_actor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B3: the supervisor restarts a crashed blob-store actor; a collection after
    the restart (grace period over) must still keep what live sessions reference."""
    from pydantic import BaseModel

    class NoArgs(BaseModel):
        pass

    body = "".join(f"line {i:05d}\n" for i in range(2000))
    tool = FunctionTool("big", "big output", NoArgs, lambda a, c: body)
    rt = Runtime(name="blob-restart", blob_dir=tmp_path / "store", blob_max_bytes=0)
    try:
        assert rt.blob_fs is not None and rt.blob_store is not None
        rt.blob_fs.grace_s = 0.0  # as if the 60 s grace had passed
        model = ScriptedModel(
            [{"tool_calls": [{"name": "big", "arguments": {}}]}, {"text": "done"}]
        )
        session = rt.open_session(workspace=tmp_path, model=model, tools=[tool])
        session.submit("go", timeout=WAIT)
        (result,) = [i for i in session.history if isinstance(i, ToolResult)]
        assert result.output.startswith("[blob:")
        live = uuid.UUID(result.output[6:42])
        orphan = rt.blob_fs.store(Text(text="nobody references this"))

        handle = rt.blob_store
        first = handle.actor_urn

        def crash(self: BlobStoreActor, message: Any) -> None:
            raise RuntimeError("simulated bug in the blob-store actor")

        monkeypatch.setattr(BlobStoreActor, "_on_reference", crash)
        handle.tell(ReferenceBlobs(session_id="x"))
        wait_until(lambda: handle.actor_urn not in (None, first) and handle.is_alive())
        monkeypatch.undo()

        report = handle.ask(CollectBlobs(), timeout=WAIT)
        assert live in report.protected and orphan in report.removed
        assert rt.blob_fs.exists(live)
        content = handle.ask(LoadBlob(blob_id=str(live)), timeout=WAIT)
        assert content == Text(text=body)
        session.close()
        # The release is told before this ask, from this thread: the collection sees it.
        assert live in handle.ask(CollectBlobs(), timeout=WAIT).removed
    finally:
        rt.close()
