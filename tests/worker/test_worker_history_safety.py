"""History safety details: blob pins for quoted references, odd text, result matching, speculation.

Regression tests for the audit of issue 5: retention of blobs a history
references (``ReferenceBlobs``), tool outputs with lone surrogates, results
matched to calls by id (G13), and a pre_tool_call hook that rewrites a
speculative call after the gate approved it.
"""

from __future__ import annotations

import os
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import fore.testing
from fore.actors.llm import ScriptedModel
from fore.actors.tools import FunctionTool, ToolContext
from fore.actors.worker.hooks import Continue, Hooks, ToolCallContext
from fore.actors.worker.state import pairing_problems
from fore.actors.worker.worker import match_results
from fore.messages.blobs import Text
from fore.messages.conversation import ToolCall, ToolResult
from fore.messages.speculation import SpeculationConfig
from fore.messages.tools import ToolCallFinished
from fore.supervision import Runtime

WAIT = 20.0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("alpha\n")
    return tmp_path


# fore.testing's bounded poll, with this module's deadline.
wait_until = partial(fore.testing.wait_until, timeout=WAIT)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def reply(text: str = "", *calls: dict[str, Any], purpose: str | None = None) -> dict[str, Any]:
    when = {"when": {"purpose": purpose}} if purpose else {}
    return {**when, "text": text, "tool_calls": list(calls)}


# -- retention: blobs a history quotes are pinned for the session -------------------------


def unpinned_blob(rt: Runtime, text: str) -> uuid.UUID:
    assert rt.blob_fs is not None
    blob_id = rt.blob_fs.store(Text(text=text))
    assert not rt.blob_fs.pins.is_pinned(blob_id)
    return blob_id


def test_a_blob_quoted_in_a_user_submit_is_pinned(runtime: Runtime, workspace: Path) -> None:
    blob_id = unpinned_blob(runtime, "an old tool output\n" * 50)
    assert runtime.blob_fs is not None
    with runtime.open_session(workspace=workspace, model=ScriptedModel([reply("ok")])) as s:
        turn = s.submit(f"look again at [blob:{blob_id}] please", timeout=WAIT)
        assert turn.status == "completed"
        wait_until(lambda: runtime.blob_fs is not None and runtime.blob_fs.pins.is_pinned(blob_id))
    # closing the session releases its pins
    wait_until(lambda: runtime.blob_fs is not None and not runtime.blob_fs.pins.is_pinned(blob_id))


class QuoteArgs(BaseModel):
    blob: str = ""


def test_blobs_quoted_by_an_inline_result_or_an_answer_are_pinned(
    runtime: Runtime, workspace: Path
) -> None:
    by_tool = unpinned_blob(runtime, "first\n" * 40)
    by_model = unpinned_blob(runtime, "second\n" * 40)

    def run(args: QuoteArgs, ctx: ToolContext) -> str:
        return f"see [blob:{args.blob}]"  # small: it stays inline, never stored

    quote = FunctionTool("quote", "quotes a blob", QuoteArgs, run)
    model = ScriptedModel(
        [reply("", call("quote", blob=str(by_tool))), reply(f"it is in [blob:{by_model}]")]
    )
    assert runtime.blob_fs is not None
    pins = runtime.blob_fs.pins
    with runtime.open_session(workspace=workspace, model=model, tools=[quote]) as s:
        assert s.submit("go", timeout=WAIT).status == "completed"
        wait_until(lambda: pins.is_pinned(by_tool) and pins.is_pinned(by_model))


# -- odd text: lone surrogates ----------------------------------------------------------------


def test_a_tool_output_with_lone_surrogates_does_not_crash_the_worker(
    runtime: Runtime, tmp_path: Path
) -> None:
    for i in range(12):  # names that are not UTF-8: listed with surrogate escapes
        open(os.path.join(os.fsencode(tmp_path), b"caf\xe9-%02d.txt" % i), "w").close()
    model = ScriptedModel([reply("", call("list_directory", path=".")), reply("listed")])
    with runtime.open_session(workspace=tmp_path, model=model) as s:
        turn = s.submit("go", timeout=WAIT)
        assert turn.status == "completed"
        assert pairing_problems(s.history) == []
        (result,) = [i for i in s.history if isinstance(i, ToolResult)]
        assert "caf" in result.output


# -- G13: results are matched to calls by id ----------------------------------------------------


def finished(call_id: str, output: str) -> ToolCallFinished:
    return ToolCallFinished(
        batch_id="b",
        session_id="s",
        result=ToolResult(call_id=call_id, name="t", output=output),
        outcome="ok",
    )


def test_results_are_matched_to_calls_by_id_not_position() -> None:
    calls = [ToolCall(id=i, name="t") for i in ("a", "b", "c")]
    matched = match_results(calls, [finished("c", "C"), finished("a", "A"), finished("b", "B")])
    assert [m.result.output if m else None for m in matched] == ["A", "B", "C"]


def test_a_missing_result_is_none_and_repeated_ids_match_in_order() -> None:
    calls = [ToolCall(id=i, name="t") for i in ("a", "a", "b")]
    matched = match_results(calls, [finished("a", "first"), finished("a", "second")])
    assert [m.result.output if m else None for m in matched] == ["first", "second", None]


# -- speculation: a hook never makes a speculation run what the gate did not approve -------------


def spec() -> SpeculationConfig:
    return SpeculationConfig(enabled=True, suggestion_delay_ms=0)


def settled(s: Any) -> str:
    wait_until(lambda: s.speculation.state in ("completed", "boundary", "failed", "aborted"))
    return str(s.speculation.state)


def test_a_hook_rewriting_a_speculative_call_is_gated_again(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def rewrite(ctx: ToolCallContext) -> Continue:
        if ctx.purpose == "speculation" and ctx.name == "shell":
            ctx.arguments["command"] = "touch SIDE_EFFECT"
        return Continue()

    hooks.pre_tool_call(rewrite)
    script = [
        reply("Hello.", purpose="main"),
        reply("x is 1. Shall I look around?", purpose="main"),
        {"when": {"purpose": "suggestion"}, "text": '{"suggestion": "show the notes"}'},
        reply("", call("shell", command="cat notes.txt"), purpose="speculation"),
        reply("Shown.", purpose="speculation"),
    ]
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel(script), speculation=spec(), hooks=hooks
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what?", timeout=WAIT)
        assert settled(s) == "boundary"
        assert "rewrite changed the arguments" in (s.speculation.boundary_reason or "")
        assert not (workspace / "SIDE_EFFECT").exists(), "speculation ran an unapproved call"


def test_a_hook_rewriting_to_another_safe_call_still_runs(
    runtime: Runtime, workspace: Path
) -> None:
    hooks = Hooks()

    def redirect(ctx: ToolCallContext) -> Continue:
        if ctx.purpose == "speculation" and ctx.name == "read_file":
            ctx.arguments["path"] = "app.py"
        return Continue()

    hooks.pre_tool_call(redirect)
    script = [
        reply("Hello.", purpose="main"),
        reply("x is 1. Shall I look around?", purpose="main"),
        {"when": {"purpose": "suggestion"}, "text": '{"suggestion": "show the notes"}'},
        reply("", call("read_file", path="notes.txt"), purpose="speculation"),
        reply("Shown.", purpose="speculation"),
    ]
    with runtime.open_session(
        workspace=workspace, model=ScriptedModel(script), speculation=spec(), hooks=hooks
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what?", timeout=WAIT)
        assert settled(s) == "completed"
