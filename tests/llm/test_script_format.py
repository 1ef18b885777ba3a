"""The scripted-reply file format (a public contract) and its consumption rules."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.llm.script import (
    MAX_TOKEN_CHARS,
    NO_REPLY,
    NO_REPLY_TEXT,
    ScriptCursor,
    ScriptError,
    ScriptFile,
    ScriptReply,
    ScriptToolCall,
    ScriptWhen,
    arguments_json,
    last_user_or_tool_text,
    new_tool_call_id,
    split_fragments,
    stream_plan,
    tokenize_text,
)

FIXTURE = Path(__file__).parent / "data" / "mock_script_basic.json"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "script.json"
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- #
# The file format
# --------------------------------------------------------------------------- #


def test_fixture_file_parses_to_the_documented_fields() -> None:
    script = ScriptFile.from_path(FIXTURE)
    first = script.replies[0]
    assert first.when == ScriptWhen(purpose="main", contains="run the tests")
    assert first.text == "Running them."
    assert first.tool_calls == (ScriptToolCall(name="shell", arguments={"command": "pytest -q"}),)
    assert first.tool_calls[0].id is None
    assert first.delay_ms == 0
    assert script.replies[1].when == ScriptWhen(purpose="suggestion")
    assert script.replies[2].ttft_ms == 5
    assert script.replies[2].tokens_per_s == 2000


def test_round_trip_through_json_is_lossless(tmp_path: Path) -> None:
    script = ScriptFile(
        replies=(
            ScriptReply(
                when=ScriptWhen(purpose="speculation", contains='ü "quoted"'),
                text="line one\nline two",
                tool_calls=(
                    ScriptToolCall(
                        name="edit",
                        arguments={"path": "a.py", "n": 3, "nested": {"x": [1, None, True]}},
                        id="call_fixed",
                    ),
                ),
                delay_ms=7,
                ttft_ms=11,
                tokens_per_s=12.5,
            ),
            ScriptReply(text="plain"),
        )
    )
    path = _write(tmp_path, script.to_json())
    assert ScriptFile.from_path(path) == script
    # Defaults are left out, so the written file stays in the documented shape.
    assert json.loads(script.to_json())["replies"][1] == {"text": "plain"}


def test_empty_reply_list_is_allowed() -> None:
    assert ScriptFile.from_json('{"replies": []}').replies == ()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"replies": [\n  {"text": "a",}\n]}', r"script\.json: invalid JSON at line 2 column"),
        ('{"replies": [{"when": {"purpose": "mian"}}]}', r"replies\[0\]\.when\.purpose"),
        ('{"replies": [{"text": "a", "colour": 1}]}', r"replies\[0\]\.colour: Extra inputs"),
        ('{"reply": []}', r"replies: Field required"),
        ('{"replies": [{"delay_ms": -1}]}', r"replies\[0\]\.delay_ms"),
        ('{"replies": [{"tokens_per_s": 0}]}', r"replies\[0\]\.tokens_per_s"),
        ('{"replies": [{"tool_calls": [{"name": ""}]}]}', r"replies\[0\]\.tool_calls\[0\]\.name"),
        (
            '{"replies": [{"tool_calls": [{"name": "x", "arguments": [1]}]}]}',
            r"replies\[0\]\.tool_calls\[0\]\.arguments",
        ),
    ],
)
def test_bad_files_give_one_line_errors_naming_file_and_place(
    tmp_path: Path, content: str, expected: str
) -> None:
    path = _write(tmp_path, content)
    with pytest.raises(ScriptError) as info:
        ScriptFile.from_path(path)
    message = str(info.value)
    assert str(path) in message
    assert re.search(expected, message), message
    assert "\n" not in message


def test_unreadable_file_is_a_script_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ScriptError, match=r"nope\.json: cannot read script"):
        ScriptFile.from_path(missing)


def test_models_are_frozen_and_strict() -> None:
    reply = ScriptReply(text="x")
    with pytest.raises(Exception, match="frozen"):
        reply.text = "y"  # type: ignore[misc]
    with pytest.raises(Exception, match="Extra inputs"):
        ScriptWhen(purpose="main", contain="typo")  # type: ignore[call-arg]


# --------------------------------------------------------------------------- #
# Matching and consumption
# --------------------------------------------------------------------------- #


def test_first_unused_matching_reply_is_taken_and_used_once() -> None:
    cursor = ScriptCursor([ScriptReply(text="one"), ScriptReply(text="two")])
    assert cursor.next_reply("main", "").text == "one"
    assert cursor.next_reply("main", "").text == "two"
    assert cursor.next_reply("main", "") is NO_REPLY
    assert NO_REPLY.text == NO_REPLY_TEXT == "(no scripted reply)"
    assert NO_REPLY.tool_calls == ()


def test_purpose_and_contains_are_each_optional() -> None:
    cursor = ScriptCursor(
        [
            ScriptReply(when=ScriptWhen(purpose="suggestion"), text="S"),
            ScriptReply(when=ScriptWhen(contains="run the tests"), text="T"),
            ScriptReply(when=ScriptWhen(purpose="main", contains="deploy"), text="MD"),
            ScriptReply(text="U"),
        ]
    )
    # Skips S (wrong purpose), T and MD (text absent) -> the unconditional one.
    assert cursor.next_reply("main", "hello").text == "U"
    # Both conditions of MD hold; the earlier S and T still do not.
    assert cursor.next_reply("main", "deploy?").text == "MD"
    assert cursor.next_reply("speculation", "please run the tests now").text == "T"
    assert cursor.next_reply("main", "x") is NO_REPLY
    assert cursor.next_reply("suggestion", "x").text == "S"
    assert cursor.remaining == 0


def test_both_conditions_must_hold() -> None:
    cursor = ScriptCursor([ScriptReply(when=ScriptWhen(purpose="main", contains="go"), text="ok")])
    assert cursor.next_reply("suggestion", "go") is NO_REPLY
    assert cursor.next_reply("main", "stop") is NO_REPLY
    assert cursor.next_reply("main", "go now").text == "ok"


def test_peek_does_not_consume_and_reset_restarts() -> None:
    cursor = ScriptCursor(ScriptFile(replies=(ScriptReply(text="a"), ScriptReply(text="b"))))
    assert cursor.peek_reply("main", "").text == "a"
    assert cursor.peek_reply("main", "").text == "a"
    assert cursor.next_reply("main", "").text == "a"
    assert cursor.peek_reply("main", "").text == "b"
    cursor.reset()
    assert cursor.remaining == 2
    assert cursor.next_reply("main", "").text == "a"


def test_cursors_are_independent() -> None:
    script = ScriptFile(replies=(ScriptReply(text="first"),))
    a, b = ScriptCursor(script), ScriptCursor(script)
    assert a.next_reply("main", "").text == "first"
    assert b.next_reply("main", "").text == "first"
    assert a.next_reply("main", "") is NO_REPLY


def test_concurrent_consumption_uses_each_reply_exactly_once() -> None:
    n_replies, n_threads, per_thread = 600, 16, 50
    cursor = ScriptCursor([ScriptReply(text=f"r{i}") for i in range(n_replies)])
    taken: list[list[str]] = [[] for _ in range(n_threads)]
    barrier = threading.Barrier(n_threads)

    def worker(slot: int) -> None:
        barrier.wait()
        for _ in range(per_thread):
            taken[slot].append(cursor.next_reply("main", "").text)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    flat = [text for texts in taken for text in texts]
    real = [text for text in flat if text != NO_REPLY_TEXT]
    assert len(flat) == n_threads * per_thread
    assert sorted(real) == sorted(f"r{i}" for i in range(n_replies))
    assert flat.count(NO_REPLY_TEXT) == n_threads * per_thread - n_replies
    # Each thread sees its replies in script order (first unused wins).
    for texts in taken:
        numbers = [int(t[1:]) for t in texts if t != NO_REPLY_TEXT]
        assert numbers == sorted(numbers)


# --------------------------------------------------------------------------- #
# Helpers shared with the in-process model
# --------------------------------------------------------------------------- #


def test_last_user_or_tool_text() -> None:
    assert last_user_or_tool_text([]) == ""
    assert last_user_or_tool_text([{"role": "system", "content": "sys"}]) == ""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ignored", "tool_calls": []},
    ]
    assert last_user_or_tool_text(messages) == "first"
    messages.append({"role": "tool", "tool_call_id": "c", "content": "12 passed"})
    assert last_user_or_tool_text(messages) == "12 passed"
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look at "},
                {"type": "image_url", "image_url": {"url": "data:"}},
                {"type": "text", "text": "this"},
            ],
        }
    )
    assert last_user_or_tool_text(messages) == "look at this"
    messages.append({"role": "user", "content": None})
    assert last_user_or_tool_text(messages) == ""


def test_new_tool_call_id_shape_and_uniqueness() -> None:
    ids = {new_tool_call_id() for _ in range(500)}
    assert len(ids) == 500
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in ids)


def test_split_fragments() -> None:
    assert split_fragments("abcdefg", 3) == ("abc", "def", "g")
    assert split_fragments("", 3) == ()
    with pytest.raises(ValueError):
        split_fragments("abc", 0)


def test_arguments_json_is_the_wire_form() -> None:
    args = {"command": 'echo "é"', "n": 1}
    assert json.loads(arguments_json(args)) == args
    assert arguments_json(args) == '{"command":"echo \\"é\\"","n":1}'


def test_tokenize_is_word_ish() -> None:
    assert tokenize_text("Running them.") == ("Running", " them.")
    assert tokenize_text("") == ()
    assert tokenize_text("a  \n") == ("a", "  \n")
    long_word = "x" * (MAX_TOKEN_CHARS * 2 + 1)
    assert [len(t) for t in tokenize_text(long_word)] == [MAX_TOKEN_CHARS, MAX_TOKEN_CHARS, 1]


def test_stream_plan_timing_precedence() -> None:
    reply = ScriptReply(text="one two three", delay_ms=100)
    plan = stream_plan(reply, default_ttft_ms=50, default_tokens_per_s=10)
    assert plan.chunks == ("one", " two", " three")
    assert plan.first_token_delay_s == pytest.approx(0.15)
    assert plan.token_interval_s == pytest.approx(0.1)
    assert plan.delays_s == pytest.approx((0.15, 0.1, 0.1))

    own = ScriptReply(text="a b", ttft_ms=5, tokens_per_s=1000)
    plan = stream_plan(own, default_ttft_ms=999, default_tokens_per_s=1)
    assert plan.first_token_delay_s == pytest.approx(0.005)
    assert plan.token_interval_s == pytest.approx(0.001)

    unpaced = stream_plan(ScriptReply(text="a b"))
    assert unpaced.delays_s == (0.0, 0.0)
    assert stream_plan(ScriptReply(tool_calls=(ScriptToolCall(name="t"),))).chunks == ()


@settings(max_examples=300, deadline=None)
@given(text=st.text(), ttft=st.integers(0, 5000), rate=st.none() | st.floats(0.1, 1e6))
def test_stream_plan_chunks_join_back_to_the_exact_text(
    text: str, ttft: int, rate: float | None
) -> None:
    plan = stream_plan(ScriptReply(text=text), default_ttft_ms=ttft, default_tokens_per_s=rate)
    assert "".join(plan.chunks) == text == plan.text
    assert len(plan.delays_s) == len(plan.chunks)
    assert all(chunk for chunk in plan.chunks)
    assert all(len(chunk.lstrip()) <= MAX_TOKEN_CHARS for chunk in plan.chunks)
    assert all(delay >= 0 for delay in plan.delays_s)


@settings(max_examples=200, deadline=None)
@given(text=st.text(), size=st.integers(1, 20))
def test_split_fragments_join_back(text: str, size: int) -> None:
    fragments = split_fragments(text, size)
    assert "".join(fragments) == text
    assert all(1 <= len(f) <= size for f in fragments)
