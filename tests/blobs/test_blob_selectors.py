"""The ``inspect`` engine: every selector, every error, the output cap (issue 6)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import JsonValue

from fore.actors.blobs.fs_store import BlobNotFound, BlobStoreError, FsBlobStore
from fore.actors.blobs.json_index import JsonIndex
from fore.actors.blobs.selectors import BlobReader, InspectError, inspect_blob, parse_selector
from fore.actors.blobs.summary import utf8_size
from fore.messages.blobs import BlobKind, BlobLimits, Content, Structured, Text

BIG = BlobLimits(inspect_output_cap=10_000_000)


class MemoryReader:
    """An in-memory :class:`BlobReader` (what the tests and the protocol need)."""

    def __init__(self) -> None:
        self.blobs: dict[uuid.UUID, Content] = {}
        self.fail = False
        self.reads: list[int] = []
        """Bytes returned by each read_range call (reads are bounded, whatever the blob)."""

    def add(self, content: Content) -> str:
        blob_id = uuid.uuid4()
        self.blobs[blob_id] = content
        return str(blob_id)

    def load(self, blob_id: uuid.UUID) -> Content:
        if self.fail:
            raise BlobStoreError("disk on fire")
        try:
            return self.blobs[blob_id]
        except KeyError:
            raise BlobNotFound(str(blob_id)) from None

    def kind(self, blob_id: uuid.UUID) -> BlobKind:
        return "text" if isinstance(self.load(blob_id), Text) else "structured"

    def size(self, blob_id: uuid.UUID) -> int:
        content = self.load(blob_id)
        if isinstance(content, Text):
            return utf8_size(content.text)
        return utf8_size(json.dumps(content.value, separators=(",", ":"), ensure_ascii=False))

    def line_count(self, blob_id: uuid.UUID) -> int:
        text = self.load(blob_id)
        assert isinstance(text, Text)
        return len(_lines_of(text.text))

    def _bytes(self, blob_id: uuid.UUID) -> bytes:
        content = self.load(blob_id)
        if isinstance(content, Text):
            return content.text.encode("utf-8", "surrogatepass")
        return json.dumps(content.value, separators=(",", ":"), ensure_ascii=False).encode()

    def line_offsets(self, blob_id: uuid.UUID, lines: Sequence[int]) -> list[int]:
        text = self.load(blob_id)
        assert isinstance(text, Text)
        starts = [0]
        for line in _lines_of(text.text):
            starts.append(starts[-1] + len(line.encode("utf-8", "surrogatepass")))
        return [starts[min(line, len(starts) - 1)] for line in lines]

    def read_range(self, blob_id: uuid.UUID, start: int, stop: int) -> bytes:
        self.reads.append(max(0, min(stop, len(self._bytes(blob_id))) - start))
        return self._bytes(blob_id)[start:stop]

    def json_index(self, blob_id: uuid.UUID) -> JsonIndex | None:
        self.load(blob_id)
        return None  # always parsed whole; the indexed path runs on FsBlobStore

    def json_part(self, blob_id: uuid.UUID, start: int, stop: int) -> JsonValue:
        value: JsonValue = json.loads(self._bytes(blob_id)[start:stop])
        return value


def _lines_of(text: str) -> list[str]:
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def test_memory_reader_satisfies_the_protocol() -> None:
    reader: BlobReader = MemoryReader()
    assert reader is not None


@pytest.fixture
def reader() -> MemoryReader:
    return MemoryReader()


def numbered(n: int, end: str = "\n") -> str:
    return "".join(f"line {i}{end}" for i in range(1, n + 1))


def error_of(reader: BlobReader, blob_id: str, selector: str | None) -> str:
    with pytest.raises(InspectError) as info:
        inspect_blob(reader, blob_id, selector)
    assert str(info.value) == info.value.message
    return info.value.message


# ---------------------------------------------------------------- text / lines


def test_lines_range_is_exact_and_one_based(reader: MemoryReader) -> None:
    blob = reader.add(Text(text=numbered(100)))
    assert inspect_blob(reader, blob, "lines:3-5") == "line 3\nline 4\nline 5\n"
    assert inspect_blob(reader, blob, "lines:7-7") == "line 7\n"
    assert inspect_blob(reader, blob, " LINES: 99 - 200 ") == "line 99\nline 100\n"  # clamped
    assert inspect_blob(reader, blob, "lines:98-") == "line 98\nline 99\nline 100\n"


def test_lines_keep_crlf_and_a_missing_final_newline(reader: MemoryReader) -> None:
    blob = reader.add(Text(text="a\r\nb\r\nc"))
    assert inspect_blob(reader, blob, "lines:1-2") == "a\r\nb\r\n"
    assert inspect_blob(reader, blob, "lines:2-") == "b\r\nc"


@settings(max_examples=120, deadline=None)
@given(
    text=st.lists(st.sampled_from(["a", "é", "😀", " ", "\n", "\r", "\r\n", "\t"])).map("".join)
    | st.text()
)
def test_lines_one_to_n_returns_any_text_exactly(text: str) -> None:
    reader = MemoryReader()
    blob = reader.add(Text(text=text))
    n = len(_lines_of(text))
    if n == 0:
        assert "0 lines" in error_of(reader, blob, "lines:1-1")
        return
    assert inspect_blob(reader, blob, f"lines:1-{n}", BIG) == text
    assert inspect_blob(reader, blob, "lines:1-", BIG) == text


def test_text_overview(reader: MemoryReader) -> None:
    blob = reader.add(Text(text=numbered(20, "\r\n")))
    out = inspect_blob(reader, f"[blob:{blob}]", None)
    assert out.splitlines()[:4] == [f"blob {blob}", "type: text", "size: 171 bytes", "lines: 20"]
    assert "── head (lines 1-5) ──\nline 1\nline 2\nline 3\nline 4\nline 5\n" in out
    assert "── tail (lines 18-20) ──\nline 18\nline 19\nline 20\n" in out
    assert "\r" not in out
    assert "lines:N-M" in out
    assert inspect_blob(reader, blob, "   ") == out  # blank selector == none


def test_overview_of_short_and_empty_text(reader: MemoryReader) -> None:
    short = inspect_blob(reader, reader.add(Text(text="only\n")), None)
    assert "lines: 1" in short
    assert "tail" not in short
    empty = inspect_blob(reader, reader.add(Text(text="")), None)
    assert "lines: 0" in empty
    assert "head" not in empty


# ------------------------------------------------------------------ arrays


@settings(max_examples=150, deadline=None)
@given(
    array=st.lists(
        st.one_of(
            st.integers(),
            st.text(max_size=5),
            st.none(),
            st.floats(allow_nan=False, allow_infinity=False),
        )
        | st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
        max_size=30,
    ),
    start=st.integers(min_value=0, max_value=40),
    width=st.integers(min_value=1, max_value=40),
)
def test_slice_matches_python_slicing(array: list[JsonValue], start: int, width: int) -> None:
    reader = MemoryReader()
    blob = reader.add(Structured(value=array))
    stop = start + width
    if start < len(array):
        assert (
            json.loads(inspect_blob(reader, blob, f"slice:{start}..{stop}", BIG))
            == (array[start:stop])
        )
        assert json.loads(inspect_blob(reader, blob, f"slice:{start}..", BIG)) == array[start:]
    else:
        assert "starts past the end" in error_of(reader, blob, f"slice:{start}..{stop}")


def test_slice_output_is_one_entry_per_line(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value=[{"a": i} for i in range(10)]))
    assert inspect_blob(reader, blob, "slice:2..4") == '[\n{"a":2},\n{"a":3}\n]'


def test_array_overview(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value=[{"id": i, "name": "x"} for i in range(50)]))
    out = inspect_blob(reader, blob, None)
    assert "type: json_array" in out
    assert "entries: 50" in out
    assert "── schema ──\nid: integer\nname: string\n" in out
    assert '── head (entries 0..2) ──\n{"id":0,"name":"x"}\n{"id":1,"name":"x"}\n' in out
    assert "slice:N..M" in out


# ------------------------------------------------------------------ objects


DOC: dict[str, JsonValue] = {
    "results": [{"name": "a", "tags": ["x", "y"]}, {"name": "b", "tags": []}],
    "a:b": "colon key",
    "a/b": {"~t": 1},
    "text": "line one\nline two",
    "n": 3,
    "empty": {},
}


def test_key_selector(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value=DOC))
    assert inspect_blob(reader, blob, "key:text") == "line one\nline two"  # raw string
    assert inspect_blob(reader, blob, "key:a:b") == "colon key"  # colons belong to the key
    assert inspect_blob(reader, blob, "key:n") == "3"
    assert inspect_blob(reader, blob, "key:empty") == "{}"
    assert inspect_blob(reader, blob, "key:results") == (
        '[\n{"name":"a","tags":["x","y"]},\n{"name":"b","tags":[]}\n]'
    )
    assert inspect_blob(reader, blob, "key:a/b") == '{\n"~t":1\n}'
    assert inspect_blob(reader, blob, "key: n") == "3"  # a stray space is forgiven


def test_pointer_selector(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value=DOC))
    assert inspect_blob(reader, blob, "pointer:/results/0/tags/1") == "y"
    assert inspect_blob(reader, blob, "pointer:/results/1/name") == "b"
    assert inspect_blob(reader, blob, "pointer:/a~1b/~0t") == "1"
    whole = json.loads(inspect_blob(reader, blob, "pointer:"))
    assert whole == DOC
    array_blob = reader.add(Structured(value=[[10, 20], [30]]))
    assert inspect_blob(reader, array_blob, "pointer:/1/0") == "30"


def test_object_overview(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value=DOC))
    out = inspect_blob(reader, blob, None)
    assert "type: json_object" in out
    assert "keys: 6" in out
    assert "results: array (2 entries)\n" in out
    assert "text: string (17 chars)\n" in out
    assert "key:NAME" in out


def test_scalar_overview(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value="hello"))
    out = inspect_blob(reader, blob, None)
    assert "type: json_string" in out
    assert out.endswith('── value ──\n"hello"')


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("nonsense", "Malformed selector 'nonsense': a selector is KIND:ARGUMENT"),
        ("lines", "Malformed lines selector 'lines'"),
        ("lines:abc", "Malformed lines selector 'lines:abc': use lines:N-M"),
        ("lines:-5", "Malformed lines selector"),
        ("lines:1-2-3", "Malformed lines selector"),
        ("slice:1-3", "Malformed slice selector 'slice:1-3': use slice:N..M"),
        ("slice:-1..2", "Malformed slice selector"),
        ("key:", "Malformed key selector 'key:': put the key after the colon"),
        ("pointer:results", "Malformed pointer in 'pointer:results': a JSON Pointer is empty"),
        ("pointer:/a~2b", "Malformed pointer in 'pointer:/a~2b': '~' must be written ~0"),
        ("pointer:/a~", "Malformed pointer"),
        ("grep:foo", "Unknown selector kind 'grep' in 'grep:foo'. Use lines:N-M"),
        ("lines:0-5", "Line numbers start at 1, so 'lines:0-5' is invalid; use e.g. lines:1-5"),
        ("lines:0-", "Line numbers start at 1"),
        # A 0 end after a real start: suggest the range it probably meant, not "lines:1-".
        (
            "lines:3-0",
            "Line numbers start at 1, so 'lines:3-0' is invalid; use e.g. lines:1-3 or lines:3-",
        ),
        # Only ASCII digits: a fullwidth "１" must not be read as 1.
        ("lines:\uff11-2", "Malformed lines selector"),
        ("lines:1-\uff12", "Malformed lines selector"),
        ("slice:\uff10..2", "Malformed slice selector"),
        ("slice:0..\u0662", "Malformed slice selector"),
        ("lines:9-3", "Inverted range 'lines:9-3': the end line must not be before the start"),
        ("slice:5..2", "Empty or inverted range 'slice:5..2'"),
        ("slice:4..4", "Empty or inverted range 'slice:4..4'"),
    ],
)
def test_selector_syntax_errors(selector: str, expected: str) -> None:
    with pytest.raises(InspectError) as info:
        parse_selector(selector)
    assert info.value.message.startswith(expected)


def test_syntax_errors_come_before_the_blob_lookup(reader: MemoryReader) -> None:
    blob = reader.add(Text(text="x\n"))
    assert "Unknown selector kind" in error_of(reader, blob, "grep:x")


def test_line_start_past_the_end(reader: MemoryReader) -> None:
    blob = reader.add(Text(text=numbered(120)))
    message = error_of(reader, blob, "lines:121-130")
    assert message == (
        "lines:121-130 starts past the end: the blob has 120 lines. Use a start between 1 and "
        "120, e.g. lines:71-120."
    )
    assert "has 120 lines" in error_of(reader, blob, "lines:500-")
    empty = reader.add(Text(text=""))
    assert "empty text (0 lines)" in error_of(reader, empty, "lines:1-5")


def test_slice_start_past_the_end(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value=[1, 2, 3]))
    assert error_of(reader, blob, "slice:3..9") == (
        "slice:3..9 starts past the end: the array has 3 entries (indices 0..2). "
        "Use e.g. slice:0..3."
    )
    empty = reader.add(Structured(value=[]))
    assert "the array has 0 entries" in error_of(reader, empty, "slice:0..1")


@pytest.mark.parametrize(
    ("content", "selector", "expected"),
    [
        (
            Text(text="a\n"),
            "slice:0..1",
            "slice: selects entries of a JSON array, but this blob "
            "is text (1 line). Instead, use lines:N-M",
        ),
        (
            Text(text="a\n"),
            "key:a",
            "key: selects a value of a JSON object, but this blob is text (1 line)",
        ),
        (Text(text="a\n"), "pointer:/a", "pointer: navigates JSON values, but this blob is text"),
        (
            Structured(value=[1]),
            "lines:1-2",
            "lines: selects lines of a text blob, but this blob "
            "is a json_array (1 entry). Instead, use slice:N..M",
        ),
        (
            Structured(value=[1]),
            "key:a",
            "key: selects a value of a JSON object, but this blob is a json_array",
        ),
        (
            Structured(value={"a": 1}),
            "slice:0..1",
            "slice: selects entries of a JSON array, but "
            "this blob is a json_object (1 key). Instead, use key:NAME",
        ),
        (
            Structured(value={"a": 1}),
            "lines:1-1",
            "lines: selects lines of a text blob, but this blob is a json_object",
        ),
        (
            Structured(value=5),
            "key:a",
            "key: selects a value of a JSON object, but this blob is "
            "a json_integer. Instead, omit the selector",
        ),
    ],
)
def test_wrong_selector_for_the_content_type(
    reader: MemoryReader, content: Content, selector: str, expected: str
) -> None:
    blob = reader.add(content)
    assert error_of(reader, blob, selector).startswith(expected)


def test_unknown_key_lists_available_keys(reader: MemoryReader) -> None:
    blob = reader.add(Structured(value=DOC))
    message = error_of(reader, blob, "key:result")
    assert message.startswith("Key 'result' not found. The object has 6 keys: results, a:b, a/b,")
    assert "Use key:NAME with one of them" in message
    many = reader.add(Structured(value={f"k{i}": i for i in range(500)}))
    message = error_of(reader, many, "key:zzz")
    assert "k0, k1," in message
    assert "k49," in message
    assert "k50," not in message
    assert "450 more" in message
    assert len(message) < 3000


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        (
            "/nope",
            "Bad pointer 'pointer:/nope': no key 'nope' in the object at the root. Its "
            "keys: results,",
        ),
        (
            "/results/7",
            "Bad pointer 'pointer:/results/7': index 7 is out of range at /results, "
            "an array of 2 entries (indices 0..1).",
        ),
        ("/results/x", "Bad pointer 'pointer:/results/x': 'x' is not an array index at /results"),
        ("/results/01", "Bad pointer 'pointer:/results/01': '01' is not an array index"),
        ("/results/-", "Bad pointer 'pointer:/results/-': '-' is not an array index"),
        (
            "/n/x",
            "Bad pointer 'pointer:/n/x': the value at /n is an integer, which has no "
            "members; the pointer must end at /n.",
        ),
        (
            "/results/1/tags/0",
            "Bad pointer 'pointer:/results/1/tags/0': index 0 is out of range "
            "at /results/1/tags, an array of 0 entries (it is empty).",
        ),
    ],
)
def test_bad_pointers(reader: MemoryReader, pointer: str, expected: str) -> None:
    blob = reader.add(Structured(value=DOC))
    assert error_of(reader, blob, f"pointer:{pointer}").startswith(expected)


@pytest.mark.parametrize("bad_id", ["", "abc", "123e4567-e89b-12d3-a456", "../../etc/passwd"])
def test_invalid_blob_id(reader: MemoryReader, bad_id: str) -> None:
    message = error_of(reader, bad_id, None)
    assert message.startswith(f"Invalid blob id {bad_id!r}: a blob id is a UUID")
    assert "[blob:<id>]" in message


def test_missing_blob_and_store_failure(reader: MemoryReader) -> None:
    missing = uuid.uuid4()
    assert error_of(reader, str(missing), "lines:1-2") == (
        f"Blob {missing} not found: it was never stored or has been removed by retention. "
        "Re-run the tool that produced it to get its output again."
    )
    blob = reader.add(Text(text="x"))
    reader.fail = True
    assert error_of(reader, blob, None).startswith(f"Could not read blob {blob}: disk on fire.")


def test_id_forms_copied_from_history_are_accepted(reader: MemoryReader) -> None:
    blob = reader.add(Text(text="x\n"))
    for form in (blob, blob.upper(), f"[blob:{blob}]", f"blob:{blob}", f"  {blob} "):
        assert inspect_blob(reader, form, "lines:1-1") == "x\n"


# ---------------------------------------------------------------- output cap


def test_lines_output_is_cut_after_whole_lines_with_a_next_selector(
    reader: MemoryReader,
) -> None:
    limits = BlobLimits(inspect_output_cap=1000)
    blob = reader.add(Text(text="".join(f"{i:04d} " + "x" * 94 + "\n" for i in range(1, 501))))
    out = inspect_blob(reader, blob, "lines:10-400", limits)
    assert utf8_size(out) <= 1000
    body, marker = out.split("…[truncated", 1)
    shown = body.splitlines()
    assert shown[0].startswith("0010 ")
    assert all(len(line) == 99 for line in shown)  # only whole lines
    last = 10 + len(shown) - 1
    assert marker == (
        f": inspect output is capped at 1000 bytes; showing lines 10-{last} of 10-400; "
        f"read on with lines:{last + 1}-{last + len(shown)}]"
    )


def test_a_single_line_larger_than_the_cap(reader: MemoryReader) -> None:
    limits = BlobLimits(inspect_output_cap=500)
    blob = reader.add(Text(text="é" * 2000 + "\nshort\n"))
    out = inspect_blob(reader, blob, "lines:1-2", limits)
    assert utf8_size(out) <= 500
    assert out.startswith("éé")
    assert "line 1 alone is 4001 bytes" in out
    assert "read on with lines:2-2" in out


def test_slice_output_cut_after_whole_entries(reader: MemoryReader) -> None:
    limits = BlobLimits(inspect_output_cap=400)
    blob = reader.add(Structured(value=[{"id": i, "pad": "p" * 40} for i in range(100)]))
    out = inspect_blob(reader, blob, "slice:5..90", limits)
    assert utf8_size(out) <= 400
    body, marker = out.split("\n…[truncated", 1)
    entries = body.removeprefix("[\n").split(",\n")
    assert [json.loads(e)["id"] for e in entries] == list(range(5, 5 + len(entries)))
    end = 5 + len(entries)
    assert f"showing entries 5..{end} of 5..90; read on with slice:{end}..{end + len(entries)}" in (
        marker
    )


def test_key_output_capped_with_pointer_hint(reader: MemoryReader) -> None:
    limits = BlobLimits(inspect_output_cap=300)
    blob = reader.add(Structured(value={"big": list(range(1000)), "s": "ü" * 1000}))
    out = inspect_blob(reader, blob, "key:big", limits)
    assert utf8_size(out) <= 300
    assert "the array has 1000 entries; read one with pointer:/big/N (0..999)" in out
    out = inspect_blob(reader, blob, "pointer:/s", limits)
    assert utf8_size(out) <= 300
    assert out.startswith("üü")
    assert "only its beginning is shown" in out


def test_default_cap_is_16_kib(reader: MemoryReader) -> None:
    blob = reader.add(Text(text="y" * 100_000 + "\n"))
    out = inspect_blob(reader, blob, "lines:1-")
    assert utf8_size(out) <= 16384
    assert "capped at 16384 bytes" in out


# ------------------------------------------------------ on the real file store


def test_inspect_on_fs_blob_store(tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False, index_min_bytes=0)
    text = "".join(f"row {i}\r\n" for i in range(1, 3001))
    blob = str(store.store(Text(text=text)))
    assert inspect_blob(store, blob, "lines:1500-1502") == "row 1500\r\nrow 1501\r\nrow 1502\r\n"
    assert "lines: 3000" in inspect_blob(store, blob, None)
    arr = str(store.store(Structured(value=[{"k": i} for i in range(10)])))
    assert inspect_blob(store, arr, "slice:8..") == '[\n{"k":8},\n{"k":9}\n]'
    store.delete(blob)
    assert "not found" in error_of(store, blob, "lines:1-2")
