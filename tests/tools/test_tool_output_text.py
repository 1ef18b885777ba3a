"""Tool output leaves the pool as valid Unicode, even for non-UTF-8 file names.

``os.fsdecode`` turns the undecodable byte of ``b"caf\\xe9.txt"`` into the
lone surrogate ``\\udce9``, which no UTF-8 encoder accepts: JSON to the LLM,
the blob store and history would fail far from the tool. The pool escapes it
visibly (``caf\\xe9.txt``) before anything leaves it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fore.actors.tools import FunctionTool, ToolRegistry, WorkspaceFs, default_registry
from fore.actors.tools.text import valid_json, valid_output, valid_unicode
from fore.messages.blobs import Inline, Stored, Structured, Text
from fore.messages.conversation import ToolCall
from tests.tools.test_tool_pool import Reports, TagArgs, start_pool, submit

LATIN1_NAME = b"caf\xe9.txt"


@pytest.fixture
def odd_tree(tmp_path: Path) -> Path:
    """A workspace holding a file whose name is not valid UTF-8 (a real one)."""
    try:
        fd = os.open(os.path.join(os.fsencode(tmp_path), LATIN1_NAME), os.O_CREAT | os.O_WRONLY)
    except OSError as exc:  # a filesystem that insists on UTF-8 names
        pytest.skip(f"cannot create a non-UTF-8 file name here: {exc}")
    os.write(fd, b"needle in latin-1 land\n")
    os.close(fd)
    return tmp_path


def _valid(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_escaped_bytes_become_visible_hex_escapes() -> None:
    assert valid_unicode("caf\udce9.txt") == "caf\\xe9.txt"
    assert valid_unicode("\udc80\udcff") == "\\x80\\xff"


def test_other_lone_surrogates_become_replacement_characters() -> None:
    assert valid_unicode("a\ud800b") == "a\ufffdb"
    assert valid_unicode("a\udc00") == "a\ufffd"


def test_a_split_surrogate_pair_is_joined() -> None:
    assert valid_unicode("x\ud83d\ude00y") == "x\U0001f600y"


def test_valid_text_is_returned_as_is() -> None:
    text = "naïve café — ok \U0001f600"
    assert valid_unicode(text) is text


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
def test_any_string_becomes_encodable_and_valid_strings_do_not_change(text: str) -> None:
    fixed = valid_unicode(text)
    assert _valid(fixed)
    if _valid(text):
        assert fixed == text


def test_outputs_and_json_values_are_cleaned_only_when_needed() -> None:
    inline = Inline(text="fine")
    assert valid_output(inline) is inline
    assert valid_output(Inline(text="caf\udce9")) == Inline(text="caf\\xe9")
    stored = Stored(summary="s\udce9", content=Structured(value={"k\udce9": ["v\udce9", 1]}))
    cleaned = valid_output(stored)
    assert isinstance(cleaned, Stored)
    assert cleaned.summary == "s\\xe9"
    assert cleaned.content == Structured(value={"k\\xe9": ["v\\xe9", 1]})
    text_stored = Stored(summary="ok", content=Text(text="t"))
    assert valid_output(text_stored) is text_stored
    value: Any = {"a": [1, "b"]}
    assert valid_json(value) is value


def test_list_directory_glob_and_grep_of_a_non_utf8_name_leave_the_pool_valid(
    fresh_runtime: Any, inbox: Any, odd_tree: Path
) -> None:
    q, collector = inbox
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = (
        ToolCall(id="ls", name="list_directory", arguments={}),
        ToolCall(id="glob", name="glob", arguments={"pattern": "*.txt"}),
        ToolCall(id="grep", name="grep", arguments={"pattern": "needle"}),
    )
    result = reports.batch(
        submit(pool, collector, WorkspaceFs(odd_tree), default_registry(), batch_calls)
    )
    for finished in result.results:
        assert finished.outcome == "ok", finished.result.output
        assert "caf\\xe9.txt" in finished.result.output  # visible, not silently dropped
        assert _valid(finished.result.output)
        json.dumps(finished.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")
    single = reports.finished["ls"][0]
    assert single.model_dump_json()  # the per-call report too


def test_a_tools_own_output_and_error_messages_are_cleaned(
    fresh_runtime: Any, inbox: Any, tmp_path: Path
) -> None:
    q, collector = inbox

    def run(args: TagArgs, ctx: Any) -> Any:
        if args.tag == "raise":
            raise RuntimeError("bad name caf\udce9")
        if args.tag == "stored":
            return Stored(summary="sum\udce9", content=Text(text="body\udce9"))
        return "plain\udce9"

    tool = FunctionTool("odd", "returns odd text", TagArgs, run)
    pool = start_pool(fresh_runtime)
    reports = Reports(q)
    batch_calls = tuple(
        ToolCall(id=t, name="odd", arguments={"tag": t}) for t in ("raise", "stored", "plain")
    )
    result = reports.batch(
        submit(pool, collector, WorkspaceFs(tmp_path), ToolRegistry([tool]), batch_calls)
    )
    raised, stored, plain = result.results
    assert raised.outcome == "error" and "caf\\xe9" in raised.result.output
    assert stored.stored_summary == "sum\\xe9"
    assert stored.explicit == Stored(summary="sum\\xe9", content=Text(text="body\\xe9"))
    assert plain.result.output == "plain\\xe9"
    for finished in result.results:
        finished.model_dump_json().encode("utf-8")
