"""Tool-output conversion, summary formats and blob references (issue 6)."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue, ValidationError

from fore.actors.blobs.fs_store import InvalidBlobId
from fore.actors.blobs.summary import (
    BLOB_REF_RE,
    cut_utf8,
    decide_tool_output,
    describe_value,
    history_text,
    referenced_blob_ids,
    summarize,
    to_tool_output,
    truncated_fallback,
    utf8_size,
)
from fore.messages.blobs import (
    CONTENT_ADAPTER,
    TOOL_OUTPUT_ADAPTER,
    BlobLimits,
    Inline,
    Stored,
    Structured,
    Text,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)


def numbered(n: int, end: str = "\n") -> str:
    return "".join(f"line {i}{end}" for i in range(1, n + 1))


# ------------------------------------------------------------------ conversion


@pytest.mark.parametrize(("size", "inline"), [(799, True), (800, True), (801, False)])
def test_inline_threshold_boundaries(size: int, inline: bool) -> None:
    text = "x" * size
    out = to_tool_output(text)
    if inline:
        assert out == Inline(text=text)
    else:
        assert isinstance(out, Stored)
        assert out.content == Text(text=text)
        assert out.summary == summarize(Text(text=text))


def test_threshold_counts_utf8_bytes_not_characters() -> None:
    assert isinstance(to_tool_output("é" * 400), Inline)  # 800 bytes
    out = to_tool_output("é" * 401)  # 401 characters, 802 bytes
    assert isinstance(out, Stored)
    assert out.content == Text(text="é" * 401)


def test_threshold_is_configurable() -> None:
    limits = BlobLimits(inline_threshold=10)
    assert isinstance(to_tool_output("x" * 10, limits), Inline)
    assert isinstance(to_tool_output("x" * 11, limits), Stored)


@pytest.mark.parametrize(
    "value",
    [
        [{"id": i, "name": f"item {i}"} for i in range(100)],
        {f"key{i}": "v" * 20 for i in range(50)},
    ],
)
def test_large_json_string_becomes_structured(value: object) -> None:
    text = "  \n" + json.dumps(value, indent=2)
    assert utf8_size(text) > 800
    out = to_tool_output(text)
    assert isinstance(out, Stored)
    assert out.content == Structured(value=value)
    kind = "json_array" if isinstance(value, list) else "json_object"
    assert out.summary.startswith(kind)


@pytest.mark.parametrize(
    "text",
    [
        "[" + "1," * 500,  # starts like JSON but is not
        json.dumps("x" * 900),  # a JSON string scalar: stays text
        "[" + ",".join(["NaN"] * 300) + "]",  # not strict JSON
        "[" + ",".join(["1e400"] * 300) + "]",  # overflows to infinity: not storable as JSON
        '{"a": 1, "a": 2, "pad": "' + "p" * 900 + '"}',  # duplicate keys would lose data
        "plain " * 200,
    ],
)
def test_other_large_strings_stay_text(text: str) -> None:
    out = to_tool_output(text)
    assert isinstance(out, Stored)
    assert out.content == Text(text=text)


def test_small_json_string_stays_inline_verbatim() -> None:
    text = "[1, 2,   3]"
    assert to_tool_output(text) == Inline(text=text)


def test_tool_output_passes_through() -> None:
    inline = Inline(text="x" * 5000)
    stored = Stored(summary="custom", content=Text(text="tiny"))
    assert to_tool_output(inline) is inline
    assert to_tool_output(stored) is stored


def test_non_string_values_use_compact_json_size() -> None:
    small: JsonValue = {"a": [1, 2, {"b": "é"}]}
    assert to_tool_output(small) == Inline(text='{"a":[1,2,{"b":"é"}]}')
    assert to_tool_output(42) == Inline(text="42")
    assert to_tool_output(None) == Inline(text="null")
    # exactly 800 / 801 bytes of compact JSON: ["xxx..."] is len + 4 bytes
    at: JsonValue = ["x" * 796]
    over: JsonValue = ["x" * 797]
    assert to_tool_output(at) == Inline(text=json.dumps(at))
    out = to_tool_output(over)
    assert isinstance(out, Stored)
    assert out.content == Structured(value=over)
    assert out.summary.startswith("json_array | 1 entries")


@pytest.mark.parametrize("bad", [(1, 2), {1, 2}, {1: "a"}, float("nan"), [float("inf")]])
def test_non_json_values_are_rejected(bad: object) -> None:
    with pytest.raises(ValidationError):
        to_tool_output(bad)  # type: ignore[arg-type]


# ----------------------------------------------------------------- text format


def test_text_five_lines_has_no_tail() -> None:
    assert summarize(Text(text=numbered(5))) == (
        "text | 5 lines\n── head ──\nline 1\nline 2\nline 3\nline 4\nline 5"
    )


def test_text_six_lines_tail_shows_only_unseen_line() -> None:
    assert summarize(Text(text=numbered(6))) == (
        "text | 6 lines\n── head ──\nline 1\nline 2\nline 3\nline 4\nline 5\n── tail ──\nline 6"
    )


def test_text_eight_lines_tail_is_last_three() -> None:
    assert summarize(Text(text=numbered(8))) == (
        "text | 8 lines\n── head ──\nline 1\nline 2\nline 3\nline 4\nline 5\n"
        "── tail ──\nline 6\nline 7\nline 8"
    )


def test_text_nine_lines_skips_the_middle() -> None:
    body = summarize(Text(text=numbered(9)))
    assert body == (
        "text | 9 lines\n── head ──\nline 1\nline 2\nline 3\nline 4\nline 5\n"
        "── tail ──\nline 7\nline 8\nline 9"
    )
    assert "line 6" not in body


def test_text_crlf_and_trailing_newline() -> None:
    crlf = summarize(Text(text=numbered(9, "\r\n")))
    assert crlf == summarize(Text(text=numbered(9)))
    assert "\r" not in crlf
    no_trailing = numbered(9).removesuffix("\n")
    assert summarize(Text(text=no_trailing)) == summarize(Text(text=numbered(9)))
    # a lone \r inside a line is content; one at the very end without \n is kept
    assert summarize(Text(text="a\rb\nc\r")) == "text | 2 lines\n── head ──\na\rb\nc\r"


def test_text_line_count_edge_cases() -> None:
    assert summarize(Text(text="")) == "text | 0 lines"
    assert summarize(Text(text="\n")) == "text | 1 lines\n── head ──\n"
    assert summarize(Text(text="\n\n")).startswith("text | 2 lines")
    assert summarize(Text(text="one")) == "text | 1 lines\n── head ──\none"


def test_head_and_tail_sizes_are_configurable() -> None:
    limits = BlobLimits(head_lines=2, tail_lines=1)
    assert summarize(Text(text=numbered(9)), limits) == (
        "text | 9 lines\n── head ──\nline 1\nline 2\n── tail ──\nline 9"
    )


# ------------------------------------------------------------------------ cap


def test_body_of_exactly_the_cap_is_not_cut() -> None:
    head = "text | 1 lines\n── head ──\n"
    line = "x" * (400 - utf8_size(head))
    body = summarize(Text(text=line))
    assert utf8_size(body) == 400
    assert not body.endswith("…")
    cut = summarize(Text(text=line + "y"))
    assert utf8_size(cut) <= 400
    assert cut.endswith("…")


@pytest.mark.parametrize("char", ["€", "😀", "é"])
@pytest.mark.parametrize("shift", [0, 1, 2, 3])
def test_multibyte_character_straddling_the_cut(char: str, shift: int) -> None:
    head = "text | 1 lines\n── head ──\n"
    budget = 400 - utf8_size("…")  # 397 bytes of content before the ellipsis
    prefix = "a" * (budget - utf8_size(head) - shift)
    body = summarize(Text(text=prefix + char * 200))
    encoded = body.encode()  # would raise on a split character / surrogate
    assert len(encoded) <= 400
    assert body.endswith("…")
    kept = body.removesuffix("…")
    assert (head + prefix + char * 200).startswith(kept)
    # as many whole characters as fit: one more would exceed the budget
    assert utf8_size(kept) <= budget < utf8_size(kept) + utf8_size(char)


def test_cap_is_configurable_and_applies_to_json() -> None:
    limits = BlobLimits(summary_cap=60)
    value = {f"key_{i}": "v" for i in range(100)}
    body = summarize(Structured(value=value), limits)
    assert utf8_size(body) <= 60
    assert body.endswith("…")
    assert body.startswith("json_object | 100 keys\n── keys ──\nkey_0: string (")


@settings(max_examples=150, deadline=None)
@given(text=st.text(), cap=st.integers(min_value=0, max_value=60))
def test_cut_utf8_property(text: str, cap: int) -> None:
    result = cut_utf8(text, cap)
    assert utf8_size(result) <= cap
    if utf8_size(text) <= cap:
        assert result == text
    elif cap >= 3:
        assert result.endswith("…")
        assert text.startswith(result.removesuffix("…"))
    else:
        assert text.startswith(result)


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(st.text(alphabet=st.characters(exclude_characters="\n")), max_size=20))
def test_text_summary_property(lines: list[str]) -> None:
    text = "\n".join(lines)
    body = summarize(Text(text=text))
    assert utf8_size(body) <= 400
    # a trailing newline ends the last line instead of starting an empty one
    n = 0 if text == "" else len(lines) - (lines[-1] == "")
    assert body.startswith(f"text | {n} lines")


# ------------------------------------------------------------------ json formats


def test_json_array_format() -> None:
    value: JsonValue = [
        {"id": i, "score": 1.5, "name": "n", "ok": True, "none": None, "tags": [], "meta": {}}
        for i in range(30)
    ]
    assert summarize(Structured(value=value)) == (
        "json_array | 30 entries\n── schema ──\nid: integer\nscore: number\nname: string\n"
        "ok: boolean\nnone: null\ntags: array\nmeta: object\n── head ──\n"
        '{"id":0,"score":1.5,"name":"n","ok":true,"none":null,"tags":[],"meta":{}}\n'
        '{"id":1,"score":1.5,"name":"n","ok":true,"none":null,"tags":[],"meta":{}}'
    )


def test_json_array_of_scalars_empty_and_single() -> None:
    assert summarize(Structured(value=["a", "b", "c"])) == (
        'json_array | 3 entries\n── schema ──\n(string)\n── head ──\n"a"\n"b"'
    )
    assert summarize(Structured(value=[[1, 2], 3])) == (
        "json_array | 2 entries\n── schema ──\n(array)\n── head ──\n[1,2]\n3"
    )
    assert summarize(Structured(value=[])) == "json_array | 0 entries"
    assert summarize(Structured(value=[{}])) == (
        "json_array | 1 entries\n── schema ──\n(object with no keys)\n── head ──\n{}"
    )


def test_json_object_format_with_sizes() -> None:
    value = {
        "name": "héllo",
        "items": [1, 2, 3],
        "meta": {"a": 1, "b": 2},
        "count": 7,
        "ratio": 0.5,
        "ok": False,
        "gone": None,
    }
    assert summarize(Structured(value=value)) == (
        "json_object | 7 keys\n── keys ──\nname: string (5 chars)\nitems: array (3 entries)\n"
        "meta: object (2 keys)\ncount: integer\nratio: number\nok: boolean\ngone: null"
    )


def test_sizes_of_one_are_singular() -> None:
    assert describe_value({"a": 1}) == "object (1 key)"
    assert describe_value([0]) == "array (1 entry)"
    assert describe_value("x") == "string (1 char)"
    assert describe_value({}) == "object (0 keys)"
    body = summarize(Structured(value={"m": {"a": 1}, "l": [1], "s": "x"}))
    assert body.splitlines()[2:] == [
        "m: object (1 key)",
        "l: array (1 entry)",
        "s: string (1 char)",
    ]


def test_json_object_empty_and_odd_keys() -> None:
    assert summarize(Structured(value={})) == "json_object | 0 keys"
    body = summarize(Structured(value={"": 1, "a: b": 2, "line\nbreak": 3, " pad": 4}))
    assert body.splitlines()[2:] == [
        '"": integer',
        '"a: b": integer',
        '"line\\nbreak": integer',
        '" pad": integer',
    ]


def test_json_scalars() -> None:
    assert summarize(Structured(value="abc")) == 'json_string | 3 chars\n── value ──\n"abc"'
    assert summarize(Structured(value=12)) == "json_integer\n── value ──\n12"
    assert summarize(Structured(value=None)) == "json_null\n── value ──\nnull"


# -------------------------------------------------------------- types round trip


@settings(max_examples=75, deadline=None)
@given(value=json_values, text=st.text(max_size=50))
def test_tool_output_json_round_trip(value: object, text: str) -> None:
    for output in (
        Stored(summary=text, content=Structured(value=value)),
        Stored(summary="s", content=Text(text=text)),
        Inline(text=text),
    ):
        raw = TOOL_OUTPUT_ADAPTER.dump_json(output)
        assert TOOL_OUTPUT_ADAPTER.validate_json(raw) == output
    content = Structured(value=value)
    assert CONTENT_ADAPTER.validate_json(content.model_dump_json()) == content


def test_structured_rejects_non_finite_floats_and_models_are_frozen() -> None:
    with pytest.raises(ValidationError):
        Structured(value={"a": [float("nan")]})
    text = Text(text="x")
    with pytest.raises(ValidationError):
        text.text = "y"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Inline(text="x", extra=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "field", ["inline_threshold", "summary_cap", "head_lines", "tail_lines", "inspect_output_cap"]
)
def test_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ValidationError):
        BlobLimits(**{field: 0})
    assert getattr(BlobLimits(**{field: 7}), field) == 7


def test_limits_defaults_match_the_spec() -> None:
    limits = BlobLimits()
    assert (limits.inline_threshold, limits.summary_cap) == (800, 400)
    assert (limits.head_lines, limits.tail_lines) == (5, 3)
    assert limits.inspect_output_cap == 16384


# ------------------------------------------------------------------ references


def test_history_text_and_reference_scanning() -> None:
    blob_id = uuid.uuid4()
    text = history_text(str(blob_id).upper(), "text | 9 lines")
    assert text == f"[blob:{blob_id}] text | 9 lines"
    assert BLOB_REF_RE.match(text)
    other = uuid.uuid4()
    texts = [
        text,
        f"see [blob:{other}] and again [blob:{blob_id}]",
        "[blob:not-a-uuid] [blob:1234]",
        f"blob:{uuid.uuid4()} without brackets",
    ]
    assert referenced_blob_ids(texts) == {blob_id, other}
    assert referenced_blob_ids([]) == set()


@pytest.mark.parametrize("bad", ["nope", "../x", ""])
def test_history_text_rejects_invalid_ids(bad: str) -> None:
    with pytest.raises(InvalidBlobId):
        history_text(bad, "x")


def test_truncated_fallback_is_capped_with_marker() -> None:
    text = "é" * 20000
    out = truncated_fallback(Text(text=text), reason="disk full")
    assert utf8_size(out) <= 16384
    assert out.endswith("…[output truncated to 16384 of 40000 bytes: disk full]")
    assert text.startswith(out.split("\n…[")[0])
    small = truncated_fallback(Structured(value=[1, 2]))
    assert small == "[1,2]"


# ------------------------------------------------- the worker's keep/store decision


def test_decide_keeps_an_explicit_inline_whatever_its_size() -> None:
    big = Inline(text="x" * 20_000)  # e.g. an inspect answer: never re-stored as a blob
    assert decide_tool_output(big) is big


def test_decide_stores_an_explicit_structured_as_structured() -> None:
    value = {"rows": [1, 2, 3]}  # small, and a JSON object: must still be Structured
    out = decide_tool_output(Stored(summary="three rows", content=Structured(value=value)))
    assert isinstance(out, Stored) and out.summary == "three rows"
    assert out.content == Structured(value=value)
    scalar = decide_tool_output(Stored(summary="a string", content=Structured(value="a" * 5)))
    assert isinstance(scalar, Stored) and scalar.content == Structured(value="a" * 5)


@pytest.mark.parametrize("shift", [0, 1, 2, 3])
def test_decide_caps_a_tools_own_summary_on_a_character_boundary(shift: int) -> None:
    summary = "a" * (398 - shift) + "€" * 10  # a 3-byte character straddles the cap
    out = decide_tool_output(Stored(summary=summary, content=Text(text="body")))
    assert isinstance(out, Stored)
    assert utf8_size(out.summary) <= 400 and out.summary.endswith("…")
    assert summary.startswith(out.summary.removesuffix("…"))
    limits = BlobLimits(summary_cap=20)
    small = decide_tool_output(Stored(summary="é" * 30, content=Text(text="b")), limits)
    assert isinstance(small, Stored) and utf8_size(small.summary) <= 20
    exact = Stored(summary="s" * 400, content=Text(text="b"))
    assert decide_tool_output(exact) is exact  # fits: unchanged


def test_decide_replaces_a_blank_summary_with_the_computed_one() -> None:
    out = decide_tool_output(Stored(summary="  ", content=Structured(value=[{"a": 1}])))
    assert isinstance(out, Stored) and out.summary.startswith("json_array | 1 entries")


def test_decide_converts_plain_values_like_to_tool_output() -> None:
    assert decide_tool_output("small") == Inline(text="small")
    text = numbered(200)
    assert decide_tool_output(text) == to_tool_output(text)
    rows = [{"id": i} for i in range(200)]
    out = decide_tool_output(rows)
    assert isinstance(out, Stored) and out.content == Structured(value=rows)
    assert decide_tool_output(json.dumps(rows)) == to_tool_output(json.dumps(rows))


def test_decide_is_total() -> None:
    from pydantic import BaseModel

    class Row(BaseModel):
        name: str

    assert decide_tool_output(Row(name="x")) == Inline(text='{"name":"x"}')
    assert decide_tool_output((1, 2)) in (Inline(text="[1,2]"), Inline(text="(1, 2)"))
    assert decide_tool_output({1, 2}) == Inline(text="{1, 2}")
    assert decide_tool_output(float("nan")) == Inline(text="nan")
