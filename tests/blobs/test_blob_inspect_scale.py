"""``inspect`` at scale: long lines and big JSON never read or parsed whole (audit #6, G6/G7/G11).

* A line longer than the cap shows its beginning, and the marker names the
  ``bytes:`` selector that reads on inside it: following the markers reads
  every byte of a huge single line, exactly, 16 KB at a time -- and each
  call reads about the cap, never the line (the audit measured the whole
  line read twice per call).
* A structured blob of at least ``json_index_min_bytes`` gets a top-level
  index: ``slice``, ``key``, ``pointer`` and the overview work without
  ever loading the whole value (the audit measured a 14 MB array re-parsed
  on every call), and answer exactly what the parsed path answers.
* ``key:``/``pointer:`` output of arrays and objects is cut after a whole
  entry/member, never inside a number.

Real ``FsBlobStore`` files in ``tmp_path``; the counting store below is a
plain subclass of the (non-actor) store that records its reads.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from fore.actors.blobs.fs_store import FsBlobStore, encode_content
from fore.actors.blobs.json_index import JsonIndex, encode_indexed
from fore.actors.blobs.selectors import InspectError, inspect_blob, parse_selector
from fore.actors.blobs.summary import utf8_size
from fore.messages.blobs import BlobLimits, Content, Structured, Text

CAP = 16_384
NEXT_BYTES = re.compile(r"read (?:more of it|on) with bytes:(\d+)\.\.(\d+)")


class CountingStore(FsBlobStore):
    """A real store that records every byte range it reads and refuses whole loads."""

    def __init__(self, root: Path, **kwargs: object) -> None:
        super().__init__(root, fsync=False, **kwargs)  # type: ignore[arg-type]
        self.reads: list[int] = []
        self.allow_load = True

    def read_range(self, blob_id: uuid.UUID | str, start: int, stop: int) -> bytes:
        data = super().read_range(blob_id, start, stop)
        self.reads.append(len(data))
        return data

    def load(self, blob_id: uuid.UUID | str) -> Content:
        assert self.allow_load, "inspect loaded (parsed) the whole blob"
        return super().load(blob_id)


def error_of(store: FsBlobStore, blob: str, selector: str, limits: BlobLimits) -> str:
    with pytest.raises(InspectError) as info:
        inspect_blob(store, blob, selector, limits)
    return info.value.message


# ------------------------------------------------------------------ long lines


def follow_bytes(store: FsBlobStore, blob: str, first: str, limits: BlobLimits) -> str:
    """Read on with the ``bytes:`` selectors the markers name; return everything shown."""
    parts: list[str] = []
    out = first
    while True:
        match = NEXT_BYTES.search(out)
        body = out.split("\n…[truncated", 1)[0] if "…[truncated" in out else out
        parts.append(body)
        if match is None:
            return "".join(parts)
        out = inspect_blob(store, blob, f"bytes:{match.group(1)}..{match.group(2)}", limits)


def test_a_huge_single_line_is_read_16_kb_at_a_time_exactly(tmp_path: Path) -> None:
    line = "".join(f"{i:07d}é€😀," for i in range(60_000))  # ~1.1 MB, 1-4 byte characters
    text = line + "\nsecond line\n"
    store = CountingStore(tmp_path)
    blob = str(store.store(Text(text=text)))
    out = inspect_blob(store, blob, "lines:1-2")
    assert utf8_size(out) <= CAP
    assert line.startswith(out.split("\n…[truncated", 1)[0])
    size = utf8_size(line) + 1
    assert f"line 1 alone is {size} bytes, so only its beginning is shown" in out
    assert "read on with lines:2-2" in out
    assert sum(store.reads) <= CAP  # one window, not the 1.1 MB line (twice)
    # Following the markers reads the whole line, exactly, and nothing is read whole.
    store.reads.clear()
    assert follow_bytes(store, blob, out, BlobLimits()) == line + "\n"
    assert max(store.reads) <= CAP + 3
    assert inspect_blob(store, blob, "lines:2-2") == "second line\n"


def test_the_overview_of_a_long_line_blob_reads_only_previews(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    blob = str(store.store(Text(text="x" * 3_000_000 + "\nend\n")))
    out = inspect_blob(store, blob, None)
    assert "lines: 2" in out and "── head (lines 1-2) ──\n" + "x" * 300 + "…\nend" in out
    assert sum(store.reads) < 4 * 1_300  # a preview window per shown line


def test_a_long_line_in_the_middle_of_a_range(tmp_path: Path) -> None:
    limits = BlobLimits(inspect_output_cap=2_000)
    text = "short 1\nshort 2\n" + "L" * 50_000 + "\nshort 4\n"
    store = CountingStore(tmp_path, index_min_bytes=0)
    blob = str(store.store(Text(text=text)))
    out = inspect_blob(store, blob, "lines:1-4", limits)
    # Whole lines first; the marker leads to the long line.
    assert out.startswith("short 1\nshort 2\n…[truncated")
    assert "showing lines 1-2 of 1-4; read on with lines:3-4" in out
    out = inspect_blob(store, blob, "lines:3-4", limits)
    assert out.startswith("L" * 100)
    assert "line 3 alone is 50001 bytes" in out and "read on with lines:4-4" in out
    assert follow_bytes(store, blob, out, limits) == "L" * 50_000 + "\n"
    assert max(store.reads) <= 2_003


# ------------------------------------------------------------------ bytes:N..M


def test_bytes_selector_basics_and_errors(tmp_path: Path) -> None:
    store = CountingStore(tmp_path)
    blob = str(store.store(Text(text="héllo wörld\n")))  # é and ö are 2 bytes
    limits = BlobLimits()
    assert inspect_blob(store, blob, "bytes:0..3") == "hé"
    assert inspect_blob(store, blob, "bytes:0..2") == "h"  # never half a character
    assert inspect_blob(store, blob, "bytes:2..6") == "llo"  # starts after the split é
    assert inspect_blob(store, blob, " BYTES: 7 .. ") == "wörld\n"
    assert inspect_blob(store, blob, "bytes:7..1000") == "wörld\n"  # clamped
    assert "starts past the end: the blob has 14 bytes" in error_of(
        store, blob, "bytes:14..", limits
    )
    assert "holds no whole character" in error_of(store, blob, "bytes:2..3", limits)
    json_blob = str(store.store(Structured(value=[1, 2, 3])))
    assert error_of(store, json_blob, "bytes:0..2", limits).startswith(
        "bytes: selects bytes of a text blob, but this blob is a json_array (3 entries)."
    )
    empty = str(store.store(Text(text="")))
    assert "empty text" in error_of(store, empty, "bytes:0..1", limits)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("bytes", "Malformed bytes selector 'bytes'"),
        ("bytes:1-2", "Malformed bytes selector 'bytes:1-2': use bytes:N..M"),
        ("bytes:5..5", "Empty or inverted range 'bytes:5..5'"),
        ("bytes:9..3", "Empty or inverted range 'bytes:9..3'"),
    ],
)
def test_bytes_selector_syntax_errors(selector: str, expected: str) -> None:
    with pytest.raises(InspectError) as info:
        parse_selector(selector)
    assert info.value.message.startswith(expected)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.lists(
        st.sampled_from(["a", "é", "€", "😀", "\n", "\r\n"]), min_size=1, max_size=300
    ).map("".join),
    cap=st.integers(min_value=250, max_value=400),
)
def test_following_bytes_markers_reconstructs_any_text(tmp_path: Path, text: str, cap: int) -> None:
    limits = BlobLimits(inspect_output_cap=cap)
    store = FsBlobStore(tmp_path / uuid.uuid4().hex, fsync=False)
    blob = str(store.store(Text(text=text)))
    out = inspect_blob(store, blob, "bytes:0..", limits)
    assert utf8_size(out) <= cap
    assert follow_bytes(store, blob, out, limits) == text


# ------------------------------------------------------------------ big JSON


def records(n: int) -> list[JsonValue]:
    return [{"id": i, "name": f"user{i}", "tags": ["a", "ü"]} for i in range(n)]


def test_a_big_json_array_is_never_parsed_whole(tmp_path: Path) -> None:
    store = CountingStore(tmp_path, parsed_cache_bytes=200_000)  # index from 100 KB
    value = records(20_000)  # ~1 MB: over the cache's admission size
    blob = str(store.store(Structured(value=value)))
    assert (tmp_path / "blobs" / f"{blob}.jidx").exists()
    store.allow_load = False
    for _ in range(3):  # every call, not only the first, stays off the whole parse
        out = inspect_blob(store, blob, "slice:10000..10003")
        assert json.loads(out) == value[10000:10003]
    assert json.loads(inspect_blob(store, blob, "pointer:/19999")) == value[19999]
    assert inspect_blob(store, blob, "pointer:/5/tags/1") == "ü"
    overview = inspect_blob(store, blob, None)
    assert "entries: 20000" in overview and "id: integer\nname: string\ntags: array" in overview
    assert max(store.reads) <= 64 * 1024 + 512  # batches, never the blob
    # A fresh store reads the sidecar; a lost sidecar is rebuilt once.
    fresh = CountingStore(tmp_path, parsed_cache_bytes=200_000)
    fresh.allow_load = False
    assert json.loads(inspect_blob(fresh, blob, "slice:0..2")) == value[:2]
    (tmp_path / "blobs" / f"{blob}.jidx").unlink()
    rebuilt = CountingStore(tmp_path, parsed_cache_bytes=200_000)
    rebuilt.allow_load = False
    assert json.loads(inspect_blob(rebuilt, blob, "slice:7..8")) == value[7:8]
    assert (tmp_path / "blobs" / f"{blob}.jidx").exists()


def test_a_big_json_object_is_never_parsed_whole(tmp_path: Path) -> None:
    store = CountingStore(tmp_path, json_index_min_bytes=0)
    value: dict[str, JsonValue] = {f"k{i:05d}": {"n": i, "s": "x" * (i % 7)} for i in range(3000)}
    value["a/b"] = "slash key"
    value["big"] = list(range(5000))
    blob = str(store.store(Structured(value=value)))
    store.allow_load = False
    assert inspect_blob(store, blob, "key:k01234") == '{\n"n":1234,\n"s":"xx"\n}'
    assert inspect_blob(store, blob, "key: a/b") == "slash key"
    assert inspect_blob(store, blob, "pointer:/a~1b") == "slash key"
    assert inspect_blob(store, blob, "pointer:/k00003/n") == "3"
    assert "Key 'nope' not found. The object has 3002 keys: k00000, k00001" in error_of(
        store, blob, "key:nope", BlobLimits()
    )
    overview = inspect_blob(store, blob, None)
    assert "keys: 3002" in overview and "k00001: object (2 keys)" in overview
    assert "… and 2802 more keys" in overview
    # The root, cut after a whole member, naming the next key to read.
    root = inspect_blob(store, blob, "pointer:", BlobLimits(inspect_output_cap=300))
    assert utf8_size(root) <= 300
    body, marker = root.split("\n…[truncated", 1)
    members = body.removeprefix("{\n").split(",\n")
    assert [json.loads("{" + m + "}") for m in members]  # each one whole
    assert f"e.g. the next one with pointer:/k{len(members):05d}" in marker


@pytest.mark.parametrize("selector", ["key:big", "pointer:/big"])
def test_arrays_from_key_and_pointer_are_cut_after_a_whole_entry(
    tmp_path: Path, selector: str
) -> None:
    # Audit G11: the cut used to fall inside a number ("…2889,\n289\n…[truncated").
    limits = BlobLimits(inspect_output_cap=300)
    for min_bytes in (None, 0):  # parsed and indexed paths
        store = FsBlobStore(tmp_path / str(min_bytes), fsync=False, json_index_min_bytes=min_bytes)
        blob = str(store.store(Structured(value={"big": list(range(1000, 6000)), "x": 1})))
        out = inspect_blob(store, blob, selector, limits)
        assert utf8_size(out) <= 300
        body, marker = out.split("\n…[truncated", 1)
        numbers = [int(n) for n in body.removeprefix("[\n").split(",\n")]
        assert numbers == list(range(1000, 1000 + len(numbers)))
        assert f"showing entries 0..{len(numbers) - 1}, whole entries only" in marker
        assert "the array has 5000 entries; read one with pointer:/big/N (0..4999)" in marker


def test_an_entry_too_big_for_the_cap_says_so(tmp_path: Path) -> None:
    limits = BlobLimits(inspect_output_cap=200)
    store = FsBlobStore(tmp_path, fsync=False)
    blob = str(store.store(Structured(value={"k": [list(range(500)), 1]})))
    out = inspect_blob(store, blob, "key:k", limits)
    assert utf8_size(out) <= 200
    assert "entry 0 alone is" in out and "read parts of it with pointer:/k/0/<key or index>" in out


# ------------------------------------------------------- indexed == parsed


JSON_LEAF = st.one_of(
    st.integers(-(10**12), 10**12),
    st.text(st.sampled_from(["a", "é", "😀", '"', "\\", "\n", "/", "~"]), max_size=6),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
JSON_VALUE = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.sampled_from(["a", "b", "/", "~", "é"]), max_size=3), inner, max_size=4
        )
    ),
    max_leaves=12,
)
ROOTS = st.lists(JSON_VALUE, max_size=40) | st.dictionaries(
    st.text(st.sampled_from(["k", "é", "/", "~", " "]), max_size=4), JSON_VALUE, max_size=25
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=ROOTS, cap=st.integers(min_value=60, max_value=600), start=st.integers(0, 45))
def test_the_indexed_path_answers_exactly_like_the_parsed_one(
    tmp_path: Path, value: JsonValue, cap: int, start: int
) -> None:
    root = tmp_path / uuid.uuid4().hex
    indexed = FsBlobStore(root / "indexed", fsync=False, json_index_min_bytes=0)
    blob = str(indexed.store(Structured(value=value)))
    parsed = FsBlobStore(root / "parsed", fsync=False)  # the same blob, without an index
    name = f"{blob}.json"
    (root / "parsed" / "blobs" / name).write_bytes((root / "indexed" / "blobs" / name).read_bytes())
    assert parsed.json_index(blob) is None and indexed.json_index(blob) is not None
    limits = BlobLimits(inspect_output_cap=cap)
    selectors: list[str | None] = [
        None,
        "pointer:",
        f"slice:{start}..{start + 3}",
        f"slice:{start}..",
    ]
    if isinstance(value, dict):
        for key in list(value)[:3]:
            escaped = key.replace("~", "~0").replace("/", "~1")
            selectors += [f"key:{key}", f"pointer:/{escaped}"]
    if isinstance(value, list) and value:
        selectors += [f"pointer:/{min(start, len(value) - 1)}", f"pointer:/{len(value)}"]

    def answer(store: FsBlobStore, selector: str | None) -> str:
        try:
            return inspect_blob(store, blob, selector, limits)
        except InspectError as exc:
            return "error: " + exc.message

    for selector in selectors:
        assert answer(indexed, selector) == answer(parsed, selector), selector


@settings(max_examples=150, deadline=None)
@given(value=ROOTS)
def test_indexed_encoding_is_the_stored_encoding(value: JsonValue) -> None:
    built = encode_indexed(value)
    assert built is not None
    data, index = built
    assert data == encode_content(Structured(value=value))[0]
    assert JsonIndex.from_bytes(index.to_bytes()) == index
    assert index.count == len(value)  # type: ignore[arg-type]


def test_a_corrupt_or_stale_sidecar_is_not_trusted(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        JsonIndex.from_bytes(b"FOREJIX1" + b"\x00" * 20)
    with pytest.raises(ValueError):
        JsonIndex.from_bytes(b"not an index at all, not at all, nope")
    store = FsBlobStore(tmp_path, fsync=False, json_index_min_bytes=0)
    value = records(50)
    blob = store.store(Structured(value=value))
    other = store.store(Structured(value=records(60)))
    sidecar = tmp_path / "blobs" / f"{blob}.jidx"
    sidecar.write_bytes((tmp_path / "blobs" / f"{other}.jidx").read_bytes())  # wrong size
    fresh = FsBlobStore(tmp_path, fsync=False, json_index_min_bytes=0)
    assert json.loads(inspect_blob(fresh, str(blob), "slice:49..")) == value[49:]
    index = fresh.json_index(blob)
    assert index is not None and index.count == 50  # rebuilt, not the stale one


def test_sidecars_go_with_their_blob(tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False, json_index_min_bytes=0, max_total_bytes=0)
    blob = store.store(Structured(value=records(10)))
    sidecar = tmp_path / "blobs" / f"{blob}.jidx"
    assert sidecar.exists()
    assert store.total_bytes() == store.size(blob) + sidecar.stat().st_size
    assert store.collect().removed == (blob,)
    assert not sidecar.exists()
    orphan = tmp_path / "blobs" / f"{uuid.uuid4()}.jidx"
    orphan.write_bytes(b"left over")
    assert store.sweep_temp() == 1 and not orphan.exists()
