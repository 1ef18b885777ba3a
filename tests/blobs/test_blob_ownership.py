"""A blob is readable only by the session that stored it (issue 19, point 6).

Session B read session A's blob -- A's workspace contents -- with ``inspect``,
also after A closed. Now a blob belongs to the session that stored it (an
``<id>.owner`` file), a speculation reads as its session, quoting an id grants
nothing, and every refusal is worded exactly like a missing blob.

Real runtimes, real files, a real second process for persistence.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.blobs.actor import BlobStoreActor
from fore.actors.blobs.fs_store import BlobNotFound, BlobStoreError, FsBlobStore
from fore.actors.blobs.inspect_tool import Inspect, InspectArgs
from fore.actors.blobs.ownership import SessionBlobs, readable_by
from fore.actors.blobs.selectors import InspectError, inspect_blob
from fore.actors.core import ActorSystem
from fore.actors.llm import FunctionModel
from fore.actors.tools import FunctionTool, ToolContext, ToolError
from fore.actors.tools.base import ToolServices
from fore.actors.tools.cancel import CancelToken
from fore.messages.blob_store import BlobExists, LoadBlob, StoreBlob
from fore.messages.blobs import Structured, Text
from fore.messages.conversation import ToolResult
from fore.messages.gate import ApprovalMode
from fore.messages.llm import LlmRequest
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    Replies,
    call,
    settled,
    spec,
    wait_until,
)

WAIT = 30.0
BLOB = re.compile(r"\[blob:([0-9a-f-]{36})\]")
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
SELECTORS = (None, "lines:1-2", "bytes:0..3", "slice:0..1", "key:a", "pointer:/0", "lines:9-")


def same_words(text: str) -> str:
    """An answer with its blob id blanked: what a caller could compare."""
    return UUID_RE.sub("<id>", text)


def error_of(reader: Any, blob_id: object, selector: str | None = None) -> str:
    with pytest.raises(InspectError) as caught:
        inspect_blob(reader, str(blob_id), selector)
    return caught.value.message


# -- the store and its session view ------------------------------------------------------


def test_the_owner_is_stored_with_the_blob_and_read_back_by_a_new_instance(
    tmp_path: Path,
) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    mine = store.store(Text(text="alpha\n"), owner="s-1")
    nobody = store.store(Text(text="beta\n"))
    assert (tmp_path / "blobs" / f"{mine}.owner").exists()
    assert not (tmp_path / "blobs" / f"{nobody}.owner").exists()
    fresh = FsBlobStore(tmp_path, fsync=False)  # nothing cached: read from disk
    assert fresh.owner(mine) == "s-1" and fresh.owner(str(mine)) == "s-1"
    assert fresh.owner(nobody) is None and fresh.owner(uuid.uuid4()) is None
    assert readable_by(fresh, mine, "s-1") and not readable_by(fresh, mine, "s-2")
    # The owner file goes with the blob.
    assert fresh.delete(mine) and not (tmp_path / "blobs" / f"{mine}.owner").exists()


def test_a_failed_owner_write_leaves_no_blob_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    real_open = os.open

    def no_owner_files(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(".owner"):
            raise OSError(28, "No space left on device", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_owner_files)
    with pytest.raises(BlobStoreError, match="could not store blob"):
        store.store(Text(text="x" * 100), owner="s")
    monkeypatch.undo()
    assert store.blob_ids() == [] and [p.name for p in store.blobs_dir.iterdir()] == []


def test_a_corrupt_owner_file_belongs_to_nobody(tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    blob_id = store.store(Text(text="x"), owner="s")
    for junk in (b"", b"not json", b'{"owner": 7}', b"[]", b"[" * 100_000):
        (tmp_path / "blobs" / f"{blob_id}.owner").write_bytes(junk)
        assert FsBlobStore(tmp_path, fsync=False).owner(blob_id) is None


def test_another_sessions_blob_is_answered_exactly_like_a_missing_one(tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    text = store.store(Text(text="secret line 1\nsecret line 2\n"), owner="alice")
    array = store.store(Structured(value=[{"a": "secret"}]), owner="alice")
    unowned = store.store(Text(text="secret\n"))
    alice, bob = SessionBlobs(store, "alice"), SessionBlobs(store, "bob")
    assert "secret line 1" in inspect_blob(alice, str(text), "lines:1-1")
    assert "secret" in inspect_blob(alice, str(array), "pointer:/0/a")
    for selector in SELECTORS:
        missing = same_words(error_of(bob, uuid.uuid4(), selector))
        assert "not found" in missing
        for foreign in (text, array, unowned):
            assert same_words(error_of(bob, foreign, selector)) == missing, selector
        # Nobody may read an unowned blob through a session, its "owner" neither.
        assert same_words(error_of(alice, unowned, selector)) == missing
    # Every reader method refuses, before it looks at the blob.
    for method, args in (
        ("kind", ()),
        ("size", ()),
        ("line_count", ()),
        ("line_offsets", ([0],)),
        ("read_range", (0, 3)),
        ("load", ()),
        ("json_index", ()),
        ("json_part", (0, 3)),
    ):
        with pytest.raises(BlobNotFound) as caught:
            getattr(bob, method)(text, *args)
        assert str(caught.value) == f"no blob {text}"


def test_the_inspect_tool_reads_as_the_calling_session(tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    blob_id = store.store(Text(text="one\ntwo\n"), owner="alice")
    tool = Inspect()

    def ctx(session: str, blobs: Any) -> ToolContext:
        return ToolContext(
            fs=None,  # type: ignore[arg-type]
            cancel=CancelToken(),
            deadline=float("inf"),
            session_id=session,
            call_id="c",
            services=ToolServices(blobs=blobs),
        )

    args = InspectArgs(blob_id=str(blob_id), selector="lines:2-2")
    assert tool.execute(args, ctx("alice", store)).text == "two\n"
    with pytest.raises(ToolError, match="not found"):
        tool.execute(args, ctx("bob", store))

    class NoOwners:  # a reader that cannot say who stored a blob: never read
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name) if name != "owner" else None

    with pytest.raises(ToolError, match="cannot tell which session"):
        tool.execute(args, ctx("alice", NoOwners()))


def test_load_and_exists_with_a_session_are_scoped(tmp_path: Path) -> None:
    system = ActorSystem(name="blob-owner-actor")
    try:
        store = FsBlobStore(tmp_path, fsync=False)
        with system.activated():
            ref = BlobStoreActor.start(store)
        blob_id = ref.ask(StoreBlob(content=Text(text="mine"), session_id="a"), timeout=WAIT)
        assert store.owner(blob_id) == "a"
        assert ref.ask(LoadBlob(blob_id=blob_id, session_id="a"), timeout=WAIT) == Text(text="mine")
        assert ref.ask(BlobExists(blob_id=blob_id, session_id="a"), timeout=WAIT) is True
        assert ref.ask(BlobExists(blob_id=blob_id, session_id="b"), timeout=WAIT) is False
        errors = []
        for target in (blob_id, uuid.uuid4()):
            with pytest.raises(BlobNotFound) as caught:
                ref.ask(LoadBlob(blob_id=target, session_id="b"), timeout=WAIT)
            errors.append(same_words(str(caught.value)))
        assert errors[0] == errors[1]
        # The runtime's own (trusted) access is unchanged.
        assert ref.ask(LoadBlob(blob_id=blob_id), timeout=WAIT) == Text(text="mine")
        ref.stop(timeout=WAIT)
    finally:
        assert system.shutdown(timeout=WAIT)


# -- sessions of a runtime ---------------------------------------------------------------


class NArgs(BaseModel):
    n: int = 0


def big_tool() -> FunctionTool[NArgs]:
    def run(args: NArgs, ctx: ToolContext) -> str:
        return "".join(f"{ctx.session_id} line {i:05d}\n" for i in range(args.n))

    return FunctionTool("big", "a large text output", NArgs, run)


class Turns:
    """A FunctionModel whose replies the test queues just before each submit."""

    def __init__(self) -> None:
        self.replies: list[Any] = []
        self.model = FunctionModel(lambda request: self.replies.pop(0) if self.replies else "ok")

    def run(self, session: Any, prompt: str, *replies: Any) -> list[ToolResult]:
        self.replies[:] = list(replies)
        turn = session.submit(prompt, timeout=WAIT)
        return [i for i in turn.items if isinstance(i, ToolResult)]

    def inspect(self, session: Any, blob_id: str, selector: str = "lines:1-1") -> ToolResult:
        inspect = {"name": "inspect", "arguments": {"blob_id": blob_id, "selector": selector}}
        (result,) = self.run(session, "inspect it", {"tool_calls": [inspect]}, "read")
        return result


def store_big(turns: Turns, session: Any) -> str:
    (result,) = turns.run(
        session, "make it", {"tool_calls": [{"name": "big", "arguments": {"n": 200}}]}, "made"
    )
    match = BLOB.match(result.output)
    assert match, result.output[:200]
    return match.group(1)


def test_only_the_storing_session_reads_its_blob_quoting_grants_nothing(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    a_turns, b_turns = Turns(), Turns()
    a = fresh_runtime.open_session(
        workspace=tmp_path, model=a_turns.model, tools=[big_tool()], session_id="alpha"
    )
    b = fresh_runtime.open_session(
        workspace=tmp_path, model=b_turns.model, tools=[big_tool()], session_id="beta"
    )
    try:
        a_blob = store_big(a_turns, a)
        own = a_turns.inspect(a, a_blob)
        assert not own.is_error and own.output == "alpha line 00000\n"
        missing = b_turns.inspect(b, str(uuid.uuid4()))
        assert missing.is_error and "not found" in missing.output
        stolen = b_turns.inspect(b, a_blob)
        assert stolen.is_error and same_words(stolen.output) == same_words(missing.output)
        assert "alpha" not in stolen.output
        # The user of B pastes A's id: pinned for B, still not readable by B.
        b_turns.run(b, f"look at [blob:{a_blob}]", "ok")
        assert fresh_runtime.blob_fs is not None
        pins = fresh_runtime.blob_fs.pins
        # The pin travels as a tell (ReferenceBlobs): wait for it, never for a duration.
        wait_until(lambda: uuid.UUID(a_blob) in pins.session_pins("beta"))
        quoted = b_turns.inspect(b, f"[blob:{a_blob}]")
        assert same_words(quoted.output) == same_words(missing.output)
        # B's own ids stay readable, quoted or not.
        b_blob = store_big(b_turns, b)
        b_turns.run(b, f"and [blob:{b_blob}]", "ok")
        assert b_turns.inspect(b, b_blob).output == "beta line 00000\n"
        # After A closed: still nobody else's.
        a.close()
        after = b_turns.inspect(b, a_blob)
        assert same_words(after.output) == same_words(missing.output)
        # A session resumed under A's id reads A's blobs again.
        resumed_turns = Turns()
        with fresh_runtime.open_session(
            workspace=tmp_path, model=resumed_turns.model, session_id="alpha"
        ) as resumed:
            again = resumed_turns.inspect(resumed, a_blob, "lines:2-2")
            assert not again.is_error and again.output == "alpha line 00001\n"
    finally:
        b.close()


STORE_IN_A_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from fore.actors.blobs.fs_store import FsBlobStore
    from fore.messages.blobs import Text
    store = FsBlobStore(Path(sys.argv[1]))
    print(store.store(Text(text="from another process\\n" * 100), owner="alpha"))
    """
)


def test_ownership_survives_a_new_process(tmp_path: Path) -> None:
    root = tmp_path / "blobstore"
    done = subprocess.run(
        [sys.executable, "-c", STORE_IN_A_CHILD, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    blob_id = done.stdout.strip()
    rt = Runtime(name="blob-owner-new-process", blob_dir=root)
    try:
        for session_id, readable in (("alpha", True), ("beta", False)):
            turns = Turns()
            with rt.open_session(workspace=tmp_path, model=turns.model, session_id=session_id) as s:
                result = turns.inspect(s, blob_id)
                assert result.is_error is not readable, result.output
                if readable:
                    assert result.output == "from another process\n"
                else:
                    assert "not found" in result.output
    finally:
        assert rt.close(timeout=30)


# -- speculation -------------------------------------------------------------------------


def test_what_an_accepted_speculation_stored_stays_readable_by_its_session(
    runtime: Runtime, tmp_path: Path
) -> None:
    (tmp_path / "big.txt").write_text("".join(f"row {i:05d}\n" for i in range(400)))
    seen: list[str] = []

    def speculate(request: LlmRequest) -> Any:
        last = request.messages[-1]
        if isinstance(last, ToolResult):
            return "Read it."
        return {"text": "", "tool_calls": [call("read_file", path="big.txt")]}

    def main(request: LlmRequest) -> Any:
        # After the accept: inspect the blob the speculation stored.
        for item in reversed(request.messages):
            match = BLOB.search(str(getattr(item, "output", "")))
            if isinstance(item, ToolResult) and item.name == "read_file" and match:
                seen.append(match.group(1))
                inspect = call("inspect", blob_id=match.group(1), selector="lines:1-3")
                return {"text": "", "tool_calls": [inspect]}
        return "ok"

    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with (
        Replies(
            main=["Hello.", "Shall I read big.txt?", main, "Done."],
            suggestion=['{"suggestion": "read big.txt"}'],
            speculation=[speculate, speculate],
        ) as replies,
        runtime.open_session(workspace=tmp_path, model=replies.model, speculation=config) as s,
    ):
        s.submit("hi", timeout=WAIT)
        s.submit("what is in big.txt?", timeout=WAIT)
        assert settled(s) == "completed", s.speculation
        result = s.accept(timeout=WAIT)
        assert result.outcome == "accepted"
        inserted = [i for i in s.history if isinstance(i, ToolResult) and i.name == "read_file"]
        assert inserted and BLOB.search(inserted[-1].output)
        turn = s.submit("now look inside", timeout=WAIT)
        (inspected,) = [i for i in turn.items if isinstance(i, ToolResult)]
        assert seen and not inspected.is_error, inspected.output
        assert "row 00000" in inspected.output
