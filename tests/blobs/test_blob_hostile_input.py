"""Hostile selectors and blob ids: bounded, typed, one clear line (issue 20.12 and family).

``inspect`` with a selector number of 5,000 digits returned Python's internal
"Exceeds the limit (4300 digits)" error. Numbers in the grammar are now
bounded before ``int()``; selectors, pointers and ids are bounded in length and
depth; every failure is an :class:`InspectError` whose message is one line of
bounded size that names the selector. Property-tested on arbitrary text and
on grammar-shaped text, against a real store (read directly: who may read a
blob is tests/blobs/test_blob_ownership.py's subject).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.blobs.selectors import (
    MAX_BLOB_ID_CHARS,
    MAX_NUMBER_DIGITS,
    MAX_POINTER_DEPTH,
    MAX_SELECTOR_CHARS,
    InspectError,
    Lines,
    Pointer,
    inspect_blob,
    parse_selector,
)
from fore.messages.blobs import BlobLimits, Structured, Text

MAX_ERROR_BYTES = 4096
"""No error message is longer (the selector and keys are quoted cut to length)."""
CAP = BlobLimits().inspect_output_cap
KINDS = ("lines", "bytes", "slice", "key", "pointer", "LINES", " Pointer ", "nope", "")


def assert_clear(error: InspectError) -> str:
    message = error.message
    assert message and "\n" not in message and "\r" not in message, message[:300]
    assert len(message.encode("utf-8", "surrogatepass")) <= MAX_ERROR_BYTES, message[:300]
    assert "Exceeds the limit" not in message and "Traceback" not in message
    return message


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FsBlobStore]:
    yield FsBlobStore(tmp_path_factory.mktemp("hostile"), fsync=False)


@pytest.fixture(scope="module")
def blobs(store: FsBlobStore) -> dict[str, str]:
    """One blob of each shape."""
    deep: object = "bottom"
    for _ in range(200):
        deep = [deep]
    values = {
        "text": Text(text="".join(f"line {i}\n" for i in range(300)) + "x" * 40_000),
        "array": Structured(value=[{"k": i, "s": "v" * (i % 7)} for i in range(500)]),
        "object": Structured(value={f"key{i}": {"n": [i, i + 1]} for i in range(300)}),
        "deep": Structured(value=[deep]),
        "scalar": Structured(value="just a string " * 100),
    }
    return {name: str(store.store(content)) for name, content in values.items()}


# -- the reported finding -----------------------------------------------------------------


@pytest.mark.parametrize(
    "selector",
    [
        "lines:" + "9" * 5000 + "-",
        "lines:1-" + "9" * 5000,
        "bytes:" + "1" * 5000 + "..",
        "slice:0.." + "7" * 5000,
        "lines:" + "0" * 4999 + "1" + "2" * 16 + "-",
    ],
)
def test_a_5000_digit_number_is_a_clear_error_naming_the_selector(selector: str) -> None:
    with pytest.raises(InspectError) as caught:
        parse_selector(selector)
    message = assert_clear(caught.value)
    assert message.startswith("Number too large in ")
    assert selector.partition(":")[0] in message and "at most 15" in message


def test_leading_zeros_do_not_count_against_the_bound() -> None:
    assert parse_selector("lines:" + "0" * 5000 + "7-") == Lines(7, None)
    assert parse_selector(f"lines:1-{'9' * MAX_NUMBER_DIGITS}") == Lines(1, 10**15 - 1)


def test_a_huge_pointer_index_is_out_of_range_not_a_crash(
    store: FsBlobStore, blobs: dict[str, str]
) -> None:
    reader = store
    for name in ("array", "deep"):
        with pytest.raises(InspectError) as caught:
            inspect_blob(reader, blobs[name], "pointer:/" + "9" * 5000)
        assert "out of range" in assert_clear(caught.value)


def test_long_and_deep_selectors_are_refused_up_front() -> None:
    with pytest.raises(InspectError) as caught:
        parse_selector("key:" + "k" * MAX_SELECTOR_CHARS)
    assert assert_clear(caught.value).startswith("Selector too long")
    with pytest.raises(InspectError) as caught:
        parse_selector("pointer:" + "/0" * (MAX_POINTER_DEPTH + 1))
    assert assert_clear(caught.value).startswith("Pointer too deep")
    assert isinstance(parse_selector("pointer:" + "/0" * MAX_POINTER_DEPTH), Pointer)


def test_huge_ranges_are_clamped_and_capped(store: FsBlobStore, blobs: dict[str, str]) -> None:
    reader = store
    big = "9" * MAX_NUMBER_DIGITS
    for name, selector in (
        ("text", f"lines:1-{big}"),
        ("text", f"bytes:0..{big}"),
        ("array", f"slice:0..{big}"),
    ):
        answer = inspect_blob(reader, blobs[name], selector)
        assert len(answer.encode()) <= CAP


def test_a_deep_pointer_into_a_deep_value_is_answered(
    store: FsBlobStore, blobs: dict[str, str]
) -> None:
    reader = store
    assert inspect_blob(reader, blobs["deep"], "pointer:" + "/0" * 201) == "bottom"
    with pytest.raises(InspectError) as caught:
        inspect_blob(reader, blobs["deep"], "pointer:" + "/0" * 203)
    assert "has no members" in assert_clear(caught.value)


@pytest.mark.parametrize(
    "blob_id",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "..",
        "",
        "blob:",
        "[blob:../x]",
        "0" * 10_000_000,
        "\x00" * 36,
        "12345678-1234-1234-1234-1234567890ab/../../x",
        "12345678-1234-1234-1234-1234567890ab\n",  # a UUID (whitespace is ignored): not found
        "１２３４５６７８-1234-1234-1234-1234567890ab",
    ],
)
def test_hostile_blob_ids_are_clear_errors_never_paths(store: FsBlobStore, blob_id: str) -> None:
    with pytest.raises(InspectError) as caught:
        inspect_blob(store, blob_id, None)
    message = assert_clear(caught.value)
    assert message.startswith(("Invalid blob id", "Blob ")), message[:200]


# -- properties ---------------------------------------------------------------------------

digits = st.text(alphabet="0123456789", min_size=1, max_size=6000)
numberish = st.one_of(
    st.integers(min_value=0, max_value=10**20).map(str), digits, st.just(""), st.text(max_size=8)
)
shaped = st.one_of(
    st.builds(lambda k, a, b: f"{k}:{a}-{b}", st.sampled_from(KINDS), numberish, numberish),
    st.builds(lambda k, a, b: f"{k}:{a}..{b}", st.sampled_from(KINDS), numberish, numberish),
    st.builds(lambda k, t: f"{k}:{t}", st.sampled_from(KINDS), st.text(max_size=300)),
    st.builds(
        lambda tokens: "pointer:" + "".join("/" + t for t in tokens),
        st.lists(st.one_of(numberish, st.text(max_size=5)), max_size=40),
    ),
)
anything = st.one_of(st.none(), st.text(max_size=400), shaped)


@settings(max_examples=400, deadline=None)
@given(anything)
def test_parse_selector_raises_nothing_but_a_clear_inspect_error(selector: str | None) -> None:
    try:
        parse_selector(selector)
    except InspectError as error:
        assert_clear(error)


@settings(max_examples=80, deadline=None)
@given(st.text(alphabet="0123456789", min_size=MAX_NUMBER_DIGITS + 1, max_size=9000))
def test_every_overlong_number_is_a_clear_error(number: str) -> None:
    for selector in (f"lines:{number}-", f"bytes:0..{number}", f"slice:{number}.."):
        if len(number.lstrip("0")) <= MAX_NUMBER_DIGITS:
            try:  # leading zeros only: a number like any other (0 may be refused as 0)
                parse_selector(selector)
            except InspectError as error:
                assert not assert_clear(error).startswith("Number too large")
            continue
        with pytest.raises(InspectError) as caught:
            parse_selector(selector)
        assert assert_clear(caught.value).startswith("Number too large")


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(["text", "array", "object", "deep", "scalar"]),
    anything,
)
def test_inspect_of_a_real_blob_answers_within_the_cap_or_a_clear_error(
    store: FsBlobStore, blobs: dict[str, str], name: str, selector: str | None
) -> None:
    try:
        answer = inspect_blob(store, blobs[name], selector)
    except InspectError as error:
        assert_clear(error)
    else:
        assert len(answer.encode("utf-8", "surrogatepass")) <= CAP


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.text(max_size=MAX_BLOB_ID_CHARS + 50),
        st.uuids().map(str),
        st.uuids().map(lambda u: f"[blob:{u}]"),
        st.builds(lambda u, t: f"{u}{t}", st.uuids(), st.text(max_size=20)),
    )
)
def test_any_blob_id_text_is_a_clear_error_or_a_uuid(store: FsBlobStore, blob_id: str) -> None:
    try:
        inspect_blob(store, blob_id, None)
    except InspectError as error:
        message = assert_clear(error)
        if message.startswith("Blob "):  # it parsed: it named a UUID that is not ours
            assert "not found" in message
            uuid.UUID(message.split()[1])
        else:
            assert message.startswith("Invalid blob id")


def test_no_path_outside_the_blob_directory_is_ever_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FsBlobStore(tmp_path / "store", fsync=False)
    blob = store.store(Text(text="mine\n"))
    (tmp_path / "secret.txt").write_text("do not read")
    opened: list[str] = []
    real_open = Path.open

    def spy(self: Path, *args: object, **kwargs: object) -> object:
        opened.append(str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "open", spy)
    reader = store
    for blob_id in ("../secret", "../../secret.txt", f"{blob}/../../secret.txt", str(blob)):
        try:
            inspect_blob(reader, blob_id, "lines:1-1")
        except InspectError as error:
            assert_clear(error)
    blobs_dir = str(store.blobs_dir) + "/"
    assert opened and all(path.startswith(blobs_dir) for path in opened)
