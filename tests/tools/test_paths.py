"""Lexical path rules: ``normalize`` (issue 3), and the reference glob the tests keep
(``tests/tools/glob_reference.py``, the tools' glob before issue 23.5)."""

from __future__ import annotations

import posixpath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.tools.paths import FsError, PathOutOfScope, normalize
from tests.tools.glob_reference import glob_regex

ROOT = "/work/space"

# -- normalize: examples -----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("", ""),
        (".", ""),
        ("./", ""),
        ("a", "a"),
        ("a/./b", "a/b"),
        ("a/../b", "b"),
        ("a//b/", "a/b"),
        ("a/b/..", "a"),
        ("a/..", ""),
        ("..foo", "..foo"),
        ("foo..", "foo.."),
        ("a/..foo/b", "a/..foo/b"),
        ("...", "..."),
        (".hidden", ".hidden"),
        ("  a/b\n", "a/b"),
    ],
)
def test_normalize_examples(path: str, expected: str) -> None:
    assert normalize(path, ROOT) == expected


def test_absolute_path_inside_root_becomes_relative() -> None:
    assert normalize(ROOT + "/src/main.py", ROOT) == "src/main.py"
    assert normalize(ROOT + "/src/../lib/x", ROOT) == "lib/x"
    assert normalize(ROOT + "//src///y", ROOT) == "src/y"


@pytest.mark.parametrize("path", [ROOT, ROOT + "/", ROOT + "/.", ROOT + "/a/.."])
def test_root_itself_is_empty(path: str) -> None:
    assert normalize(path, ROOT) == ""


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/",
        "/work",
        "/work/spacex/a",  # shares a prefix with the root but is a sibling
        "/work/space-2",
        ROOT + "/../x",
        ROOT + "/a/../../space2/y",
    ],
)
def test_absolute_path_outside_is_out_of_scope(path: str) -> None:
    with pytest.raises(PathOutOfScope):
        normalize(path, ROOT)


@pytest.mark.parametrize(
    "path", ["..", "../", "../x", "a/../..", "a/../../b", "./../x", "a/b/../../.."]
)
def test_climbing_past_root_is_out_of_scope(path: str) -> None:
    with pytest.raises(PathOutOfScope):
        normalize(path, ROOT)


@pytest.mark.parametrize("path", ["~", "~/x", "~root/.ssh/id_rsa"])
def test_home_relative_is_out_of_scope(path: str) -> None:
    with pytest.raises(PathOutOfScope):
        normalize(path, ROOT)


@pytest.mark.parametrize("path", ["a\x00b", "\x00", ROOT + "/a\x00"])
def test_nul_byte_is_an_error(path: str) -> None:
    with pytest.raises(FsError) as info:
        normalize(path, ROOT)
    assert "NUL" in str(info.value)


def test_out_of_scope_is_an_fs_error_and_a_value_error() -> None:
    with pytest.raises(FsError):
        normalize("../x", ROOT)
    with pytest.raises(ValueError):
        normalize("../x", ROOT)


def test_strip_false_keeps_whitespace_literally() -> None:
    assert normalize(" a ", ROOT, strip=False) == " a "
    assert normalize(" a ", ROOT) == "a"


def test_non_string_is_an_error() -> None:
    with pytest.raises(FsError):
        normalize(b"a", ROOT)  # type: ignore[arg-type]


# -- normalize: properties --------------------------------------------------

SEGMENTS = st.sampled_from([".", "..", "..foo", "foo..", "...", "a", "b", "c.d", ".hidden", "x y"])


@st.composite
def relative_paths(draw: st.DrawFn) -> str:
    parts = draw(st.lists(SEGMENTS, min_size=1, max_size=8))
    separators = draw(
        st.lists(
            st.sampled_from(["/", "//", "/./"]), min_size=len(parts) - 1, max_size=len(parts) - 1
        )
    )
    text = parts[0]
    for sep, part in zip(separators, parts[1:], strict=True):
        text += sep + part
    if draw(st.booleans()):
        text += "/"
    return text


def escapes(path: str) -> bool:
    norm = posixpath.normpath(path)
    return norm == ".." or norm.startswith("../")


@settings(max_examples=250, deadline=None)
@given(relative_paths())
def test_normalize_result_stays_inside_and_is_idempotent(path: str) -> None:
    try:
        result = normalize(path, ROOT)
    except PathOutOfScope:
        assert escapes(path)
        return
    assert not escapes(path)
    assert not result.startswith("/")
    assert not result.startswith("../")
    assert result != ".."
    assert ".." not in result.split("/")
    assert normalize(result, ROOT) == result
    expected = posixpath.normpath(path)
    assert result == ("" if expected == "." else expected)


@settings(max_examples=300, deadline=None)
@given(relative_paths())
def test_escaping_paths_raise(path: str) -> None:
    if escapes(path):
        with pytest.raises(PathOutOfScope):
            normalize(path, ROOT)
    else:
        normalize(path, ROOT)


@settings(max_examples=300, deadline=None)
@given(relative_paths())
def test_absolute_round_trip(path: str) -> None:
    try:
        rel = normalize(path, ROOT)
    except PathOutOfScope:
        return
    assert normalize(ROOT + "/" + rel, ROOT) == rel
    assert normalize(ROOT + "/" + path, ROOT) == rel


# -- glob_regex ---------------------------------------------------------------


def matches(pattern: str, path: str) -> bool:
    return glob_regex(pattern).match(path) is not None


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # a pattern without "/" matches the basename at any depth
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", True),
        ("*.py", "src/deep/er/a.py", True),
        ("*.py", "a.pyc", False),
        ("*.py", "src/a.py/x", False),
        # "*" does not cross "/"
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/sub/a.py", False),
        ("src/*.py", "lib/src/a.py", False),
        ("src/*.py", "src/.py", True),
        # "**" spans any number of segments, including none
        ("**/test_*.py", "test_a.py", True),
        ("**/test_*.py", "tests/test_a.py", True),
        ("**/test_*.py", "a/b/c/test_x.py", True),
        ("**/test_*.py", "a/xtest_a.py", False),
        ("**/test_*.py", "tests/test_a.pyc", False),
        ("src/**", "src/a", True),
        ("src/**", "src/a/b/c.txt", True),
        ("src/**", "srcx/a", False),
        ("src/**", "lib/src/a", False),
        ("a/**/b.txt", "a/b.txt", True),
        ("a/**/b.txt", "a/x/y/b.txt", True),
        ("a/**/b.txt", "ab.txt", False),
        # "?" is exactly one character, never "/"
        ("a?c", "abc", True),
        ("a?c", "ac", False),
        ("a?c", "abbc", False),
        ("x/a?c", "x/a/c", False),
        # character classes
        ("[ab].py", "a.py", True),
        ("[ab].py", "b.py", True),
        ("[ab].py", "c.py", False),
        ("[a-c]x", "bx", True),
        ("[a-c]x", "dx", False),
        ("[!a].py", "b.py", True),
        ("[!a].py", "a.py", False),
        ("[]a]", "]", True),
        ("[]a]", "a", True),
        # regex metacharacters are literal
        ("a+b(c).txt", "a+b(c).txt", True),
        ("a+b(c).txt", "aab(c).txt", False),
        ("v1.2", "v1x2", False),
        ("$x^", "$x^", True),
        # an unterminated "[" is literal
        ("a[b", "a[b", True),
    ],
)
def test_glob_examples(pattern: str, path: str, expected: bool) -> None:
    assert matches(pattern, path) is expected


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("a[!b]c", "a/c"),
        ("src/a[!b]c", "src/a/c"),
        ("x[!y]", "x/"),
    ],
)
def test_negated_class_does_not_match_slash(pattern: str, path: str) -> None:
    # "*" and "?" never cross "/", and a class cannot contain "/" (it is stripped
    # from the body); a negated class must not match "/" either.
    assert not matches(pattern, path)


NAME = st.text(alphabet="ab.-_+()$^{} ", min_size=1, max_size=5).filter(
    lambda s: s not in (".", "..")
)


@st.composite
def pattern_and_path(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    pattern = draw(st.lists(NAME, min_size=1, max_size=4))
    extra = draw(st.lists(NAME, min_size=1, max_size=2))
    path = draw(
        st.sampled_from(
            [
                pattern,
                [*extra, *pattern],
                [*pattern, *extra],
                pattern[:-1] + extra,
                extra,
                [*pattern[:-1], pattern[-1] + extra[0]],
            ]
        ).filter(bool)
    )
    return pattern, path


@settings(max_examples=300, deadline=None)
@given(pattern_and_path())
def test_literal_pattern_matches_iff_equal(case: tuple[list[str], list[str]]) -> None:
    pattern_parts, path_parts = case
    pattern = "/".join(pattern_parts)
    path = "/".join(path_parts)
    if len(pattern_parts) > 1:
        assert matches(pattern, path) is (path == pattern)
    else:
        # a single segment matches the basename at any depth
        assert matches(pattern, path) is (path_parts[-1] == pattern)


@settings(max_examples=200, deadline=None)
@given(st.lists(NAME, min_size=2, max_size=4))
def test_literal_pattern_matches_itself(parts: list[str]) -> None:
    pattern = "/".join(parts)
    assert matches(pattern, pattern)
    assert not matches(pattern, "z/" + pattern)
    assert not matches(pattern, pattern + "/z")
