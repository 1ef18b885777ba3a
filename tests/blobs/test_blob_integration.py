"""Large tool outputs end to end: blob store actor, summaries in history, ``inspect``."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.llm import FunctionModel, ScriptedModel
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker.hooks import Continue, Hooks, PostToolCallContext
from fore.messages.blob_store import CollectBlobs, GetBlobStoreStats
from fore.messages.blobs import Inline, Stored, Structured, Text
from fore.messages.conversation import ToolResult
from fore.supervision import Runtime

WAIT = 30.0
BLOB = re.compile(r"^\[blob:([0-9a-f-]{36})\] ")


class NArgs(BaseModel):
    n: int = 0


def big_text_tool() -> FunctionTool[NArgs]:
    def run(args: NArgs, ctx: ToolContext) -> str:
        return "".join(f"line {i:06d} " + "x" * 40 + "\n" for i in range(1, args.n + 1))

    return FunctionTool("big", "a large text output", NArgs, run)


def tool_results(history: tuple[Any, ...]) -> list[ToolResult]:
    return [i for i in history if isinstance(i, ToolResult)]


def test_a_1mb_output_is_stored_summarised_and_inspected(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    lines = 20_000  # 20k lines of 53 bytes: ~1 MB
    seen_sizes: list[int] = []
    hooks = Hooks()

    def full_output_seen(ctx: PostToolCallContext) -> Any:
        seen_sizes.append(len(ctx.result.output))
        return Continue()

    hooks.post_tool_call(full_output_seen, tools="big")
    replies: list[Any] = [
        {"text": "Producing.", "tool_calls": [{"name": "big", "arguments": {"n": lines}}]},
        {"text": "Let me look at the middle."},
    ]
    model = FunctionModel(lambda request: replies.pop(0))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with fresh_runtime.open_session(
        workspace=workspace, model=model, hooks=hooks, tools=[big_text_tool()]
    ) as s:
        s.submit("make a big output", timeout=WAIT)
        (result,) = tool_results(s.history)
        match = BLOB.match(result.output)
        assert match, result.output[:200]
        blob_id = match.group(1)
        assert len(result.output.encode()) <= 400 + len(f"[blob:{blob_id}] ")
        assert f"text | {lines} lines" in result.output
        assert "── head ──" in result.output and "line 000001" in result.output
        assert seen_sizes == [lines * 53]  # the post_tool_call hook saw the full output

        # The session that stored the blob reads it (another session could not:
        # tests/blobs/test_blob_ownership.py).
        inspect = {"blob_id": blob_id, "selector": "lines:10001-10050"}
        replies[:] = [{"text": "", "tool_calls": [{"name": "inspect", "arguments": inspect}]}]
        replies.append({"text": "Found it."})
        turn = s.submit("inspect it", timeout=WAIT)
        (inspected,) = tool_results(turn.items)
        assert not inspected.is_error
        # 50 lines (~2.7 KB) are past the inline threshold, yet the model reads them
        # themselves: inspect's answer is never stored again as a blob of a blob.
        assert BLOB.match(inspected.output) is None
        for n in range(10001, 10051):
            assert f"line {n:06d} " in inspected.output
        assert "line 010051" not in inspected.output and "line 010000 " not in inspected.output


def test_small_outputs_stay_inline(fresh_runtime: Runtime, tmp_path: Path) -> None:
    model = ScriptedModel(
        [{"tool_calls": [{"name": "big", "arguments": {"n": 3}}]}, {"text": "ok"}]
    )
    with fresh_runtime.open_session(workspace=tmp_path, model=model, tools=[big_text_tool()]) as s:
        s.submit("go", timeout=WAIT)
        (result,) = tool_results(s.history)
        assert result.output.startswith("line 000001 ")
        assert BLOB.match(result.output) is None


def test_json_array_output_becomes_a_structured_blob(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    class Args(BaseModel):
        pass

    rows = [{"id": i, "name": f"user{i}", "active": i % 2 == 0} for i in range(200)]
    tool = FunctionTool("rows", "rows", Args, lambda a, c: __import__("json").dumps(rows))
    model = ScriptedModel([{"tool_calls": [{"name": "rows", "arguments": {}}]}, {"text": "ok"}])
    with fresh_runtime.open_session(workspace=tmp_path, model=model, tools=[tool]) as s:
        s.submit("go", timeout=WAIT)
        (result,) = tool_results(s.history)
    assert BLOB.match(result.output)
    assert "json_array | 200 entries" in result.output
    assert "── schema ──" in result.output and "id: integer" in result.output
    blob_id = uuid.UUID(BLOB.match(result.output).group(1))  # type: ignore[union-attr]
    assert fresh_runtime.blob_fs is not None
    content = fresh_runtime.blob_fs.load(blob_id)
    assert isinstance(content, Structured) and content.value == rows


def test_a_tool_may_supply_its_own_summary(fresh_runtime: Runtime, tmp_path: Path) -> None:
    class Args(BaseModel):
        pass

    body = "\n".join(f"row {i}" for i in range(5000))
    tool = FunctionTool(
        "report",
        "report",
        Args,
        lambda a, c: Stored(summary="5000 rows of the report", content=Text(text=body)),
    )
    model = ScriptedModel([{"tool_calls": [{"name": "report", "arguments": {}}]}, {"text": "ok"}])
    with fresh_runtime.open_session(workspace=tmp_path, model=model, tools=[tool]) as s:
        s.submit("go", timeout=WAIT)
        (result,) = tool_results(s.history)
    assert BLOB.match(result.output)
    assert result.output.endswith("] 5000 rows of the report")


def test_an_explicit_inline_output_stays_inline_whatever_its_size(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    class Args(BaseModel):
        pass

    body = "y" * 5000
    tool = FunctionTool("whole", "whole", Args, lambda a, c: Inline(text=body))
    model = ScriptedModel([{"tool_calls": [{"name": "whole", "arguments": {}}]}, {"text": "ok"}])
    with fresh_runtime.open_session(workspace=tmp_path, model=model, tools=[tool]) as s:
        s.submit("go", timeout=WAIT)
        (result,) = tool_results(s.history)
    assert result.output == body


def test_an_explicit_stored_output_is_stored_whatever_its_size(
    fresh_runtime: Runtime, tmp_path: Path
) -> None:
    class Args(BaseModel):
        pass

    tool = FunctionTool(
        "tiny",
        "tiny",
        Args,
        lambda a, c: Stored(summary="the tiny record", content=Structured(value={"k": 1})),
    )
    model = ScriptedModel([{"tool_calls": [{"name": "tiny", "arguments": {}}]}, {"text": "ok"}])
    with fresh_runtime.open_session(workspace=tmp_path, model=model, tools=[tool]) as s:
        s.submit("go", timeout=WAIT)
        (result,) = tool_results(s.history)
    match = BLOB.match(result.output)
    assert match, result.output
    assert result.output.endswith("] the tiny record")
    assert fresh_runtime.blob_fs is not None
    content = fresh_runtime.blob_fs.load(uuid.UUID(match.group(1)))
    assert isinstance(content, Structured) and content.value == {"k": 1}


def test_a_failing_store_raises_an_alert_and_truncates(
    fresh_runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fresh_runtime.blob_fs is not None

    def broken(content: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(fresh_runtime.blob_fs, "store", broken)
    model = ScriptedModel(
        [{"tool_calls": [{"name": "big", "arguments": {"n": 2000}}]}, {"text": "ok"}]
    )
    with fresh_runtime.open_session(workspace=tmp_path, model=model, tools=[big_text_tool()]) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed"
        (result,) = tool_results(s.history)
        assert len(result.output.encode()) <= 16_384
        assert "truncated" in result.output and "blob store failed" in result.output
        assert result.output.startswith("line 000001 ")
        assert any(a.source == "blob_store" and a.level == "warn" for a in s.alerts)


def test_retention_never_collects_a_blob_a_live_session_references(tmp_path: Path) -> None:
    rt = Runtime(name="retention", blob_dir=tmp_path / "store", blob_max_bytes=50_000)
    try:
        assert rt.blob_fs is not None and rt.blob_store is not None
        model = ScriptedModel(
            [{"tool_calls": [{"name": "big", "arguments": {"n": 1500}}]}, {"text": "ok"}]
        )
        session = rt.open_session(workspace=tmp_path, model=model, tools=[big_text_tool()])
        session.submit("go", timeout=WAIT)
        (result,) = tool_results(session.history)
        live = uuid.UUID(BLOB.match(result.output).group(1))  # type: ignore[union-attr]
        # An unreferenced blob that pushes the store over its limit.
        orphan = rt.blob_fs.store(Text(text="y" * 60_000))
        rt.blob_fs.grace_s = 0.0
        # (The store's own over-limit collection may get to the orphan first, so
        # the files are the evidence, not which run's report names it.)
        report = rt.blob_store.ask(CollectBlobs(), timeout=WAIT)
        assert live in report.protected and orphan not in report.protected
        assert rt.blob_fs.exists(live) and not rt.blob_fs.exists(orphan)
        assert rt.blob_store.ask(GetBlobStoreStats(), timeout=WAIT).pinned == 1
        session.close()
        stats = rt.blob_store.ask(GetBlobStoreStats(), timeout=WAIT)
        assert stats.pinned == 0  # released with the session: now collectable
        report = rt.blob_store.ask(CollectBlobs(), timeout=WAIT)
        assert live not in report.protected and not rt.blob_fs.exists(live)
    finally:
        rt.close()


def test_without_a_blob_store_outputs_stay_whole(tmp_path: Path) -> None:
    rt = Runtime(name="noblobs", blobs=False)
    try:
        model = ScriptedModel(
            [{"tool_calls": [{"name": "big", "arguments": {"n": 100}}]}, {"text": "ok"}]
        )
        with rt.open_session(workspace=tmp_path, model=model, tools=[big_text_tool()]) as s:
            s.submit("go", timeout=WAIT)
            (result,) = tool_results(s.history)
            assert len(result.output) == 100 * 53
            assert "inspect" not in [t.name for t in s._worker._actor_weakref().config.tools]
    finally:
        rt.close()


def test_blob_store_files_are_removed_with_an_owned_directory(tmp_path: Path) -> None:
    rt = Runtime(name="owned")
    assert rt.blob_fs is not None
    root = rt.blob_fs.root
    assert isinstance(rt.blob_fs, FsBlobStore) and Path(root).exists()
    rt.close()
    assert not Path(root).exists()
