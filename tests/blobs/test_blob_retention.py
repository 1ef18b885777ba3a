"""Retention across sessions: the store side of ``ReferenceBlobs`` (audit #4, G4).

A blob is pinned by every live session whose history references it; it must
survive collection after the session that *created* it closes, as long as
another live session references it, and go once no live session does. The
worker sends ``ReferenceBlobs`` when such text enters a history (see the
message's contract in ``messages/blob_store.py``); here the message is told
to the runtime's real blob-store actor exactly as the worker tells it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pydantic import BaseModel

from fore.actors.blobs.selectors import inspect_blob
from fore.actors.llm import ScriptedModel
from fore.actors.tools import FunctionTool
from fore.messages.blob_store import CollectBlobs, GetBlobStoreStats, ReferenceBlobs
from fore.messages.blobs import Text
from fore.messages.conversation import ToolResult
from fore.supervision import Runtime

WAIT = 30.0


class NoArgs(BaseModel):
    pass


def test_a_blob_referenced_by_a_live_session_survives_its_creators_close(tmp_path: Path) -> None:
    body = "".join(f"row {i:05d}\n" for i in range(3000))
    tool = FunctionTool("big", "a big output", NoArgs, lambda a, c: body)
    rt = Runtime(name="blob-retention", blob_dir=tmp_path / "store", blob_max_bytes=0)
    try:
        assert rt.blob_fs is not None and rt.blob_store is not None
        rt.blob_fs.grace_s = 0.0  # as if the 60 s grace period had passed
        store = rt.blob_store
        creator = rt.open_session(
            workspace=tmp_path,
            model=ScriptedModel(
                [{"tool_calls": [{"name": "big", "arguments": {}}]}, {"text": "ok"}]
            ),
            tools=[tool],
        )
        reader = rt.open_session(workspace=tmp_path, model=ScriptedModel([{"text": "ok"}]))
        creator.submit("produce", timeout=WAIT)
        (result,) = [i for i in creator.history if isinstance(i, ToolResult)]
        blob = uuid.UUID(result.output[6:42])

        # The reader's history now quotes the blob (say, the user pasted it):
        # the worker tells the store, as the message's contract says.
        quoted = f"what is in [blob:{blob}] text | 3000 lines?"
        added = store.ask(ReferenceBlobs(session_id=reader.id, texts=(quoted,)), timeout=WAIT)
        assert added == 1
        again = store.ask(
            ReferenceBlobs(session_id=reader.id, texts=(quoted,), blob_ids=(str(blob), "bad id")),
            timeout=WAIT,
        )
        assert again == 0  # already pinned for the reader; the bad id is ignored

        creator.close()
        report = store.ask(CollectBlobs(), timeout=WAIT)
        assert blob in report.protected and blob not in report.removed
        assert rt.blob_fs.exists(blob)
        assert inspect_blob(rt.blob_fs, str(blob), "lines:2-2") == "row 00001\n"
        stats = store.ask(GetBlobStoreStats(), timeout=WAIT)
        assert (stats.sessions, stats.pinned) == (1, 1)  # only the reader holds it now

        reader.close()
        assert blob in store.ask(CollectBlobs(), timeout=WAIT).removed
        assert not rt.blob_fs.exists(blob)
    finally:
        assert rt.close(timeout=30)


def test_references_pin_every_quoted_blob_once_per_session(tmp_path: Path) -> None:
    rt = Runtime(name="blob-retention-2", blob_dir=tmp_path / "store", blob_max_bytes=0)
    try:
        assert rt.blob_fs is not None and rt.blob_store is not None
        rt.blob_fs.grace_s = 0.0
        first = rt.blob_fs.store(Text(text="one"))
        second = rt.blob_fs.store(Text(text="two"))
        unreferenced = rt.blob_fs.store(Text(text="three"))
        texts = (f"[blob:{first}] and, mid-text, [blob:{str(second).upper()}]", "no refs here")
        assert rt.blob_store.ask(ReferenceBlobs(session_id="s1", texts=texts), timeout=WAIT) == 2
        assert rt.blob_store.ask(ReferenceBlobs(session_id="s2", texts=texts), timeout=WAIT) == 2
        report = rt.blob_store.ask(CollectBlobs(), timeout=WAIT)
        assert set(report.protected) == {first, second} and report.removed == (unreferenced,)
    finally:
        assert rt.close(timeout=30)
