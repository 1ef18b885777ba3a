"""The ``@path`` tokenizer: examples and the round-trip properties it promises."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.filerefs.tokenizer import (
    UNRESOLVED_TEMPLATE,
    file_refs,
    parse_input,
    render_user_text,
    segment_spans,
)
from fore.messages.conversation import FileRef, Paste, Segment, TextSegment, UserMessage


def T(text: str) -> TextSegment:
    return TextSegment(text=text)


def F(path: str) -> FileRef:
    return FileRef(path=path)


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("", ()),
        ("plain text", (T("plain text"),)),
        ("@src/app.py", (F("src/app.py"),)),
        ("see @src/app.py", (T("see "), F("src/app.py"))),
        ("see @src/app.py and @docs/", (T("see "), F("src/app.py"), T(" and "), F("docs/"))),
        ("first line\n@a.py", (T("first line\n"), F("a.py"))),
        ("x\t@a.py y", (T("x\t"), F("a.py"), T(" y"))),
        ("mail user@example.com now", (T("mail user@example.com now"),)),
        ("a@b @c", (T("a@b "), F("c"))),
        ('@"path with spaces/f.txt" x', (F("path with spaces/f.txt"), T(" x"))),
        ('@"a \\"q\\" b"', (F('a "q" b'),)),
        ('@"back\\\\slash"', (F("back\\slash"),)),
        ('@"odd\\escape"', (F("odd\\escape"),)),
        ('@"multi\nline"', (F("multi\nline"),)),
        ('@"a b".', (F("a b"), T("."))),
        ('@"a"b', (F("a"), T("b"))),
        ('@"unterminated path', (T('@"unterminated path'),)),
        ('@"unterminated @b', (T('@"unterminated '), F("b"))),
        ('@"" x', (T('@"" x'),)),
        ("@", (T("@"),)),
        ("@ x", (T("@ x"),)),
        ("x @\ny", (T("x @\ny"),)),
        ("@@x", (F("@x"),)),
        ("see @a.py.", (T("see "), F("a.py"), T("."))),
        (
            "see @a.py, @b.py; @c:",
            (T("see "), F("a.py"), T(", "), F("b.py"), T("; "), F("c"), T(":")),
        ),
        ("(see @a.py).", (T("(see "), F("a.py"), T(")."))),
        ("is it @a.py?!", (T("is it "), F("a.py"), T("?!"))),
        ("@a.py..", (F("a.py."), T("."))),
        ("@'quoted'", (F("'quoted"), T("'"))),
        ("@,", (T("@,"),)),
        ("@./x", (F("./x"),)),
        ("@./x.", (F("./x"), T("."))),
        ("@.", (F("."),)),
        ("@..", (F(".."),)),
        ("@../", (F("../"),)),
        ("@..,", (F(".."), T(","))),
        ("@dir/", (F("dir/"),)),
        ("@src\\app.py", (F("src\\app.py"),)),
        ("lies @ünïcødé/файл.md here", (T("lies "), F("ünïcødé/файл.md"), T(" here"))),
        ("看 @文档/说明.md。", (T("看 "), F("文档/说明.md。"))),
        ("@bad\ud800 @ok", (T("@bad\ud800 "), F("ok"))),
        ('@"bad\udfff"', (T('@"bad\udfff"'),)),
        ("@a @a", (F("a"), T(" "), F("a"))),
    ],
)
def test_parse_input(text: str, segments: tuple[Segment, ...]) -> None:
    assert parse_input(text) == segments


def test_parsed_segments_fit_a_user_message() -> None:
    segments = parse_input("see @a.py")
    message = UserMessage(text=render_user_text(segments), segments=segments)
    assert UserMessage.model_validate_json(message.model_dump_json()) == message


@pytest.mark.parametrize(
    ("segments", "text"),
    [
        ((T("see "), F("a.py")), "see @a.py"),
        ((T("see "), F("a b.py")), 'see @"a b.py"'),
        ((F('say "hi"'),), '@"say \\"hi\\""'),
        ((F("a\\b c"),), '@"a\\\\b c"'),
        ((F("a\\b"),), "@a\\b"),
        ((F("a"), T(",")), "@a,"),
        ((F("a"), T(".x")), '@"a".x'),
        ((F("a."),), '@"a."'),
        ((F(".."),), "@.."),
        ((F(".."), T(".")), '@"..".'),
        ((F('"x'),), '@"\\"x"'),
        ((F("a"), Paste(text="pasted\nblock")), '@"a"pasted\nblock'),
        ((F("a"), Paste(text=" pasted")), "@a pasted"),
    ],
)
def test_render_user_text(segments: tuple[Segment, ...], text: str) -> None:
    rendered = render_user_text(segments)
    assert rendered == text
    assert parse_input(rendered)[0] == segments[0]


def test_reference_glued_to_the_previous_word_is_not_expressible() -> None:
    # The documented limit of the text form: after a non-space character an
    # "@" is e-mail-like text in any spelling, so the reference is lost.
    assert parse_input(render_user_text([T("x"), F("a")])) == (T("x@a"),)


def test_render_unresolved_placeholder() -> None:
    segments = parse_input('read @ok.py and @"missing file.rs" now')
    text = render_user_text(segments, unresolved={"missing file.rs"})
    assert text == "read @ok.py and [unresolved file ref: missing file.rs] now"
    assert UNRESOLVED_TEMPLATE.format(path="p") == "[unresolved file ref: p]"


def test_render_accepts_any_iterable() -> None:
    segments: list[Segment] = [T("x "), F("a")]
    assert render_user_text(iter(segments)) == "x @a"


def test_file_refs_in_order_each_once() -> None:
    segments = parse_input("@b then @a then @b and @c, @a")
    assert file_refs(segments) == ["b", "a", "c"]
    assert file_refs(iter(segments)) == ["b", "a", "c"]
    assert file_refs([T("no refs")]) == []


def test_segment_spans_point_into_the_source() -> None:
    text = 'see @a.py, @"b c"!'
    spans = segment_spans(text)
    assert [(text[a:b], seg) for seg, a, b in spans] == [
        ("see ", T("see ")),
        ("@a.py", F("a.py")),
        (", ", T(", ")),
        ('@"b c"', F("b c")),
        ("!", T("!")),
    ]


# --------------------------------------------------------------------------- #
# Properties
# --------------------------------------------------------------------------- #

# Biased toward the characters the grammar cares about, plus arbitrary Unicode
# (surrogates included) so nothing special is assumed about the rest.
_TRICKY = st.sampled_from([*"@\"\\ \t\n.,;:!?)]}'/ab", "\u3000", "\x85", "é", "\ud800"])
_CHARS = st.one_of(_TRICKY, _TRICKY, st.characters(exclude_categories=()))
_ANY_TEXT = st.text(alphabet=_CHARS, max_size=80)
_NO_QUOTE_TEXT = st.text(alphabet=_CHARS.filter(lambda c: c != '"'), max_size=80)


def _source_form(segment: Segment) -> str:
    return "@" + segment.path if isinstance(segment, FileRef) else segment.text


@settings(deadline=None)  # no timing asserts: the machine may be loaded
@given(_ANY_TEXT)
def test_parse_never_raises_and_is_canonical(text: str) -> None:
    segments = parse_input(text)
    for before, after in itertools.pairwise(segments):
        assert not (isinstance(before, TextSegment) and isinstance(after, TextSegment))
    for segment in segments:
        if isinstance(segment, TextSegment):
            assert segment.text
        else:
            assert isinstance(segment, FileRef)


@settings(deadline=None)  # no timing asserts: the machine may be loaded
@given(_NO_QUOTE_TEXT)
def test_render_inverts_parse_without_quotes(text: str) -> None:
    # Without a '"' every reference is unquoted, so its source is "@" + path
    # and nothing is lost: text segments plus @-forms give back the input.
    segments = parse_input(text)
    assert "".join(_source_form(s) for s in segments) == text
    assert render_user_text(segments) == text


@settings(deadline=None)  # no timing asserts: the machine may be loaded
@given(_ANY_TEXT)
def test_rendered_text_is_a_fixed_point(text: str) -> None:
    # In general a quoted reference is re-spelt canonically (``@"abc"`` becomes
    # ``@abc``), but the rendered text parses back to exactly the same segments.
    segments = parse_input(text)
    rendered = render_user_text(segments)
    assert parse_input(rendered) == segments
    assert render_user_text(parse_input(rendered)) == rendered


@settings(deadline=None)  # no timing asserts: the machine may be loaded
@given(_ANY_TEXT)
def test_spans_tile_the_input(text: str) -> None:
    spans = segment_spans(text)
    position = 0
    for segment, start, end in spans:
        assert start == position < end
        source = text[start:end]
        if isinstance(segment, TextSegment):
            assert segment.text == source
        else:
            assert source.startswith("@")
            assert parse_input(source) == (segment,)
        position = end
    assert position == len(text)
    assert tuple(s for s, _, _ in spans) == parse_input(text)


# A path never holds a lone surrogate: FileRef (pydantic) refuses one.
_PATHS = st.text(
    alphabet=_CHARS.filter(lambda c: not "\ud800" <= c <= "\udfff"), min_size=1, max_size=20
)
_WS = st.text(alphabet=st.sampled_from(" \t\n\u3000"), min_size=1, max_size=3)
_FREE_TEXT = st.text(alphabet=_CHARS.filter(lambda c: c != "@"), max_size=10)


@st.composite
def _segments_with_paths(draw: st.DrawFn) -> tuple[list[Segment], list[str]]:
    """Text, then references each preceded by whitespace and followed by any
    ``@``-free text: the contexts in which a reference is expressible at all."""
    paths = draw(st.lists(_PATHS, max_size=5))
    segments: list[Segment] = []
    lead = draw(_FREE_TEXT)
    if lead:
        segments.append(T(lead + draw(_WS)))
    for index, path in enumerate(paths):
        segments.append(F(path))
        after = draw(_FREE_TEXT)
        if index < len(paths) - 1:
            after += draw(_WS)
        if after:
            segments.append(T(after) if draw(st.booleans()) else Paste(text=after))
    return segments, paths


@settings(deadline=None)  # no timing asserts: the machine may be loaded
@given(_segments_with_paths())
def test_rendered_paths_parse_back(case: tuple[list[Segment], list[str]]) -> None:
    segments, paths = case
    reparsed = parse_input(render_user_text(segments))
    assert [s.path for s in reparsed if isinstance(s, FileRef)] == paths


@settings(deadline=None)  # no timing asserts: the machine may be loaded
@given(_segments_with_paths())
def test_unresolved_refs_become_placeholders(case: tuple[list[Segment], list[str]]) -> None:
    segments, paths = case
    text = render_user_text(segments, unresolved=set(paths))
    for path in paths:
        assert UNRESOLVED_TEMPLATE.format(path=path) in text


@settings(deadline=None)  # no timing asserts: the machine may be loaded
@given(st.lists(_PATHS, max_size=8))
def test_file_refs_dedupe_in_order(paths: list[str]) -> None:
    segments = [F(p) for p in paths]
    assert file_refs(segments) == list(dict.fromkeys(paths))
