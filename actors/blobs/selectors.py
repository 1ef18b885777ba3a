"""The ``inspect`` engine: read exactly the part of a blob the model asks for.

``inspect_blob(reader, blob_id, selector, limits)`` is the whole tool minus
the actor plumbing; the ``inspect`` tool wrapper calls it on the blocking
lane and turns :class:`InspectError` into an error tool result whose text is
``error.message`` (every message says what to do instead).

Selectors::

    (none)          overview: type, size in bytes, line/entry/key count, a preview
    lines:N-M       text: lines N..M, 1-based, inclusive, M clamped to the end
    lines:N-        text: line N to the end
    bytes:N..M      text: bytes N..M-1 (0-based, end-exclusive, clamped): parts of long lines
    bytes:N..       text: byte N to the end
    slice:N..M      array: entries N..M-1 (0-based, end-exclusive, M clamped), as JSON
    slice:N..       array: entry N to the end
    key:NAME        object: the value of NAME (everything after "key:" is the name)
    pointer:/a/0/b  any JSON: an RFC 6901 pointer (~0 is "~", ~1 is "/"; "" is the root)

Outputs:

* ``lines`` returns the exact original text of the lines, terminators
  (``\\n`` / ``\\r\\n``) included, so ``lines:1-N`` of an N-line text is the
  text itself. A line too long for the cap shows its beginning, and the
  marker names the ``bytes:`` selector that reads on *within* the line:
  every byte of a 100 MB single-line blob is reachable, 16 KB at a time.
* ``bytes`` returns the text of that byte range, both ends moved inward to
  the nearest character boundary (a multi-byte character is never split).
* ``slice`` returns a JSON array with one compact element per line, so
  ``json.loads`` of it equals Python's ``array[N:M]``.
* ``key`` / ``pointer`` return a string value as its raw text and any other
  value as JSON (arrays one element per line, objects one member per line).
* Every output is capped at ``limits.inspect_output_cap`` UTF-8 bytes,
  marker included. Line, slice, array and object outputs are cut after the
  last whole line/entry/member that fits (never inside a number), and the
  marker names the exact selector that reads on; a single line, entry or
  string too big for the cap shows its beginning, cut on a character
  boundary, with a marker that says so.

Cost: nothing here reads or parses a whole big blob per call. Line ranges
seek through the store's line index and read at most about the cap
(:meth:`~actors.blobs.fs_store.FsBlobStore.line_offsets`,
:meth:`~actors.blobs.fs_store.FsBlobStore.read_range`); big JSON arrays and
objects are read through their top-level index
(:mod:`actors.blobs.json_index`), parsing only the entries shown; smaller
JSON blobs come parsed from the store's cache.

A slice or line range that *starts* past the end is an error (it tells the
model the real size) rather than an empty answer.

Hostile input is bounded before it costs anything: a selector is at most
:data:`MAX_SELECTOR_CHARS` characters, a number in it at most
:data:`MAX_NUMBER_DIGITS` significant digits (``int()`` of a 5,000-digit
string would otherwise raise Python's own "Exceeds the limit (4300 digits)"),
a pointer at most :data:`MAX_POINTER_DEPTH` tokens deep; every error is one
line, and quotes the selector (or a key, a token) cut to a readable length.
Whatever the text, :func:`parse_selector` raises nothing but
:class:`InspectError`.
"""

from __future__ import annotations

import json
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Literal, Protocol

from pydantic import JsonValue

from fore.actors.blobs.fs_store import (
    ENCODING,
    ENCODING_ERRORS,
    BlobNotFound,
    BlobStoreError,
    InvalidBlobId,
    parse_blob_id,
)
from fore.actors.blobs.json_index import (
    SHAPED_MEMBERS,
    JsonIndex,
    Shape,
    describe_shape,
    json_type_name,
    split_group,
    value_shape,
)
from fore.actors.blobs.summary import (
    DEFAULT_LIMITS,
    compact_json,
    cut_utf8,
    plural,
    render_key,
    schema_lines,
    utf8_size,
    with_article,
)
from fore.messages.blobs import BlobKind, BlobLimits, Content, Text

SELECTOR_HELP = (
    "lines:N-M or lines:N- (text, 1-based, inclusive), bytes:N..M or bytes:N.. (text, "
    "0-based byte offsets, end-exclusive: parts of very long lines), slice:N..M or slice:N.. "
    "(arrays, 0-based, end-exclusive), key:NAME (objects) or pointer:/a/0/b "
    "(JSON Pointer into nested values); omit the selector for an overview"
)
PREVIEW_WIDTH = 300
"""Characters shown per preview line in the overview."""
_PREVIEW_BYTES = PREVIEW_WIDTH * 4 + 4
"""Bytes read per preview line: enough for PREVIEW_WIDTH + 1 characters of any width."""
_BATCH_BYTES = 64 * 1024
"""Bytes read at a time while rendering entries of an indexed JSON blob."""
MAX_LISTED_KEYS = 50
"""Keys listed by an unknown-key / bad-pointer error."""
MAX_OVERVIEW_KEYS = SHAPED_MEMBERS
"""Keys listed by the overview of an object (the shapes a JSON index keeps)."""

# ASCII digits only: ``\d`` would accept e.g. fullwidth digits ("lines:１-2"), which
# ``int()`` converts silently -- a selector the model can never see echoed back.
_LINES_RE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]*)\s*", re.ASCII)
_SLICE_RE = re.compile(r"\s*([0-9]+)\s*\.\.\s*([0-9]*)\s*", re.ASCII)
_INDEX_RE = re.compile(r"0|[1-9][0-9]*")
MAX_SELECTOR_CHARS = 8192
"""Longest selector accepted (a ``key:`` or ``pointer:`` names keys of that length at most)."""
MAX_NUMBER_DIGITS = 15
"""Significant digits of a number in a selector: 10**15 lines or bytes is past any blob."""
MAX_POINTER_DEPTH = 1024
"""Tokens of a JSON pointer (a stored JSON value cannot nest deeper than the parser allows)."""
_PAST_ANY_ARRAY: int = 10**MAX_NUMBER_DIGITS
_ECHO_CHARS = 100
"""Characters of a selector, key or token quoted back in an error message."""
MAX_BLOB_ID_CHARS = 256
"""Longest blob id text parsed (a UUID in any spelling ``uuid.UUID`` accepts is shorter)."""
_BAD_ESCAPE_RE = re.compile(r"~(?![01])")


class InspectError(Exception):
    """Any ``inspect`` failure; ``message`` is what the model sees (one line)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BlobReader(Protocol):
    """What ``inspect`` needs from a blob store (``FsBlobStore`` implements it).

    Every method raises ``BlobNotFound`` for a missing blob (other
    ``BlobStoreError`` s for I/O trouble). Line numbers are 0-based, byte
    offsets are offsets into the stored UTF-8 bytes, ranges are half-open.

    * ``line_count`` and ``line_offsets`` are only called for text blobs and
      must not rescan the blob (``FsBlobStore`` keeps a line index);
      ``line_offsets`` gives where each line starts, the size for a line
      past the last;
    * ``read_range`` reads stored bytes, clamped to the blob's size;
    * ``json_index`` is the top-level index of a big structured blob, or
      ``None`` (then ``load`` gives the parsed value); ``json_part`` parses
      the bytes of one entry or member value located with it.
    """

    def kind(self, blob_id: uuid.UUID) -> BlobKind: ...

    def size(self, blob_id: uuid.UUID) -> int: ...

    def line_count(self, blob_id: uuid.UUID) -> int: ...

    def line_offsets(self, blob_id: uuid.UUID, lines: Sequence[int]) -> list[int]: ...

    def read_range(self, blob_id: uuid.UUID, start: int, stop: int) -> bytes: ...

    def load(self, blob_id: uuid.UUID) -> Content: ...

    def json_index(self, blob_id: uuid.UUID) -> JsonIndex | None: ...

    def json_part(self, blob_id: uuid.UUID, start: int, stop: int) -> JsonValue: ...


# ------------------------------------------------------------------ selectors


@dataclass(frozen=True)
class Overview:
    """No selector: type, size, counts and a preview."""


@dataclass(frozen=True)
class Lines:
    """``lines:N-M`` / ``lines:N-``: 1-based inclusive ``start``/``end``."""

    start: int
    end: int | None


@dataclass(frozen=True)
class Bytes:
    """``bytes:N..M`` / ``bytes:N..``: 0-based byte ``start``, exclusive ``stop``."""

    start: int
    stop: int | None


@dataclass(frozen=True)
class Slice:
    """``slice:N..M`` / ``slice:N..``: 0-based ``start``, exclusive ``stop``."""

    start: int
    stop: int | None


@dataclass(frozen=True)
class Key:
    """``key:NAME``."""

    name: str


@dataclass(frozen=True)
class Pointer:
    """``pointer:/a/0/b``: the raw pointer and its unescaped tokens."""

    raw: str
    tokens: tuple[str, ...]


Selector = Overview | Lines | Bytes | Slice | Key | Pointer


def parse_selector(selector: str | None) -> Selector:
    """Parse a selector string; :class:`InspectError` if it is not valid.

    The kind before the first ``:`` is case-insensitive; ``None`` or a blank
    string is the overview. Checks that need the blob (past-the-end, wrong
    type) happen in :func:`inspect_blob`.
    """
    if selector is None:
        return Overview()
    if not isinstance(selector, str):  # a caller bypassing the args model; be robust
        raise InspectError(
            f"Malformed selector: a selector is text, not {type(selector).__name__}. "
            f"Use {SELECTOR_HELP}."
        )
    if len(selector) > MAX_SELECTOR_CHARS:
        raise InspectError(
            f"Selector too long ({len(selector)} characters, at most {MAX_SELECTOR_CHARS}): "
            f"{_quote(selector)}. Use {SELECTOR_HELP}."
        )
    if not selector.strip():
        return Overview()
    kind, colon, arg = selector.partition(":")
    kind = kind.strip().lower()
    if not colon:
        if kind in ("lines", "bytes", "slice", "key", "pointer"):
            raise InspectError(_malformed(kind, selector))
        raise InspectError(
            f"Malformed selector {_quote(selector)}: a selector is KIND:ARGUMENT. "
            f"Use {SELECTOR_HELP}."
        )
    if kind == "lines":
        match = _LINES_RE.fullmatch(arg)
        if match is None:
            raise InspectError(_malformed(kind, selector))
        start = _number(match.group(1), kind, selector)
        end = _number(match.group(2), kind, selector) if match.group(2) else None
        if start == 0 or end == 0:
            raise InspectError(
                f"Line numbers start at 1, so {_quote(selector.strip())} is invalid; "
                f"use e.g. {_zero_fix(start, end)} (1-based, inclusive)."
            )
        if end is not None and end < start:
            raise InspectError(
                f"Inverted range {_quote(selector.strip())}: the end line must not be before "
                f"the start line; use lines:{end}-{start}."
            )
        return Lines(start, end)
    if kind in ("slice", "bytes"):
        match = _SLICE_RE.fullmatch(arg)
        if match is None:
            raise InspectError(_malformed(kind, selector))
        start = _number(match.group(1), kind, selector)
        stop = _number(match.group(2), kind, selector) if match.group(2) else None
        if stop is not None and stop <= start:
            fix = f"{kind}:{stop}..{start}" if stop < start else f"{kind}:{start}..{start + 1}"
            raise InspectError(
                f"Empty or inverted range {_quote(selector.strip())}: the end is exclusive and "
                f"must be greater than the start; use e.g. {fix}."
            )
        return Slice(start, stop) if kind == "slice" else Bytes(start, stop)
    if kind == "key":
        if not arg:
            raise InspectError(_malformed(kind, selector))
        return Key(arg)
    if kind == "pointer":
        return Pointer(arg, _pointer_tokens(arg, selector))
    raise InspectError(
        f"Unknown selector kind {_quote(kind)} in {_quote(selector)}. Use {SELECTOR_HELP}."
    )


def _quote(text: str) -> str:
    """``text`` quoted for an error message: escaped (one line) and cut to a readable length."""
    if len(text) <= _ECHO_CHARS:
        return repr(text)
    return f"{text[:_ECHO_CHARS]!r}… ({len(text)} characters)"


def _inline(text: str) -> str:
    """``text`` as it is when short and printable (a path, an index), else :func:`_quote` d."""
    if len(text) <= _ECHO_CHARS and text.isprintable():
        return text
    return _quote(text)


def _number(digits: str, kind: str, selector: str) -> int:
    """The value of ``digits`` (ASCII, from the grammar), bounded in length before ``int()``."""
    value = digits.lstrip("0")  # int() counts leading zeros against its own digit limit
    significant = len(value)
    if significant > MAX_NUMBER_DIGITS:
        raise InspectError(
            f"Number too large in {kind} selector {_quote(selector.strip())}: it has "
            f"{significant} digits, at most {MAX_NUMBER_DIGITS} are accepted (no blob is that "
            "big); omit the selector to see the blob's size."
        )
    return int(value or "0")


def _zero_fix(start: int, end: int | None) -> str:
    """What to suggest for a line range with a 0 in it (one end is 0).

    ``lines:0-5`` -> ``lines:1-5``; ``lines:0-`` / ``lines:0-0`` -> ``lines:1-``;
    ``lines:3-0`` (a 0 end: probably an inverted ``0-3``) -> ``lines:1-3`` or
    ``lines:3-``.
    """
    if start == 0:
        return f"lines:1-{end}" if end else "lines:1-"
    return f"lines:1-{start} or lines:{start}-"


def _malformed(kind: str, selector: str) -> str:
    usage = {
        "lines": "use lines:N-M (1-based, inclusive, e.g. lines:1-50) or lines:N- "
        "(from line N to the end)",
        "slice": "use slice:N..M (0-based, end-exclusive, e.g. slice:0..10) or slice:N.. "
        "(from entry N to the end)",
        "bytes": "use bytes:N..M (0-based byte offsets, end-exclusive, e.g. bytes:0..4000) or "
        "bytes:N.. (from byte N to the end)",
        "key": "put the key after the colon, e.g. key:results (omit the selector to list keys)",
        "pointer": "use a JSON Pointer such as pointer:/results/0/name",
    }[kind]
    return f"Malformed {kind} selector {_quote(selector)}: {usage}."


def _pointer_tokens(pointer: str, selector: str) -> tuple[str, ...]:
    """RFC 6901: ``""`` is the root, else ``/``-separated tokens with ~0/~1 escapes."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise InspectError(
            f"Malformed pointer in {_quote(selector)}: a JSON Pointer is empty (the whole value) "
            "or starts with '/', e.g. pointer:/results/0/name."
        )
    if _BAD_ESCAPE_RE.search(pointer):
        raise InspectError(
            f"Malformed pointer in {_quote(selector)}: '~' must be written ~0 and '/' inside a "
            "key ~1 (e.g. key 'a/b' is pointer:/a~1b)."
        )
    depth = pointer.count("/")
    if depth > MAX_POINTER_DEPTH:
        raise InspectError(
            f"Pointer too deep in {_quote(selector)}: {depth} tokens, at most "
            f"{MAX_POINTER_DEPTH}; read a shallower value first."
        )
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/"))


def escape_pointer_token(token: str) -> str:
    """One pointer token with ``~`` and ``/`` escaped (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


# --------------------------------------------------------------------- engine


def normalize_blob_id(blob_id: object) -> uuid.UUID:
    """Parse the id the model passed; :class:`InspectError` if it is not a UUID.

    Lenient about what models copy from history: ``[blob:<id>]`` and
    ``blob:<id>`` are accepted as well as the bare id.
    """
    raw = blob_id.strip() if isinstance(blob_id, str) else blob_id
    if isinstance(raw, str):
        if raw.startswith("[") and raw.endswith("]"):
            raw = raw[1:-1].strip()
        if raw.lower().startswith("blob:"):
            raw = raw[5:].strip()
    try:
        if isinstance(raw, str) and len(raw) > MAX_BLOB_ID_CHARS:
            raise InvalidBlobId("too long")  # never parse (or echo) a megabyte of "id"
        return parse_blob_id(raw)
    except InvalidBlobId:
        shown = _quote(blob_id) if isinstance(blob_id, str) else repr(type(blob_id).__name__)
        raise InspectError(
            f"Invalid blob id {shown}: a blob id is a UUID such as "
            "0190a5e2-7c1d-7b3e-9f00-1a2b3c4d5e6f. Copy it from the [blob:<id>] reference at "
            "the start of the tool result."
        ) from None


def inspect_blob(
    reader: BlobReader,
    blob_id: str,
    selector: str | None,
    limits: BlobLimits = DEFAULT_LIMITS,
) -> str:
    """Run ``inspect(blob_id, selector)``; see the module docstring.

    Raises :class:`InspectError` for every failure (bad id, bad selector,
    missing blob, store trouble); never another exception for bad input.
    """
    key = normalize_blob_id(blob_id)
    sel = parse_selector(selector)
    try:
        kind = reader.kind(key)
        if kind == "text":
            return _inspect_text(reader, key, sel, limits)
        index = reader.json_index(key)
        root: TopLevel | JsonValue
        if index is not None:
            root = IndexedTop(reader, key, index)
        else:
            content = reader.load(key)
            if isinstance(content, Text):  # a reader that changed its mind; be robust
                raise BlobStoreError("blob kind changed while reading")
            value = content.value
            root = MemoryTop(value) if isinstance(value, list | dict) else value
        return _inspect_json(reader, key, root, sel, limits)
    except BlobNotFound:
        raise InspectError(
            f"Blob {key} not found: it was never stored or has been removed by retention. "
            "Re-run the tool that produced it to get its output again."
        ) from None
    except (BlobStoreError, OSError, ValueError, RecursionError) as exc:
        # ValueError: an index that does not match its blob (a corrupt sidecar);
        # RecursionError: a value nested deeper than rendering it allows.
        reason = cut_utf8(" ".join(str(exc).split()) or type(exc).__name__, 300)
        raise InspectError(
            f"Could not read blob {key}: {reason}. Try again, or re-run the tool that produced it."
        ) from None


def _marker(limits: BlobLimits, hint: str) -> str:
    return f"\n…[truncated: inspect output is capped at {limits.inspect_output_cap} bytes; {hint}]"


def _cap(text: str, limits: BlobLimits, hint: str) -> str:
    if utf8_size(text) <= limits.inspect_output_cap:
        return text
    return cut_utf8(text, limits.inspect_output_cap, _marker(limits, hint))


def _wrong_type(sel_kind: str, what: str, blob_desc: str, instead: str) -> InspectError:
    return InspectError(f"{sel_kind}: {what}, but this blob is {blob_desc}. Instead, {instead}.")


# ---------------------------------------------------------------- utf-8 bytes


def _decode(raw: bytes) -> str:
    """Stored bytes (cut on character boundaries) as text."""
    try:
        return raw.decode(ENCODING, ENCODING_ERRORS)
    except UnicodeDecodeError:  # not what we stored; show it rather than fail
        return raw.decode(ENCODING, "replace")


def _lead_skip(raw: bytes) -> int:
    """Continuation bytes at the start of ``raw`` (a window that began mid-character)."""
    skip = 0
    while skip < min(3, len(raw)) and raw[skip] & 0xC0 == 0x80:
        skip += 1
    return skip


def _tail_cut(raw: bytes) -> int:
    """Bytes at the end of ``raw`` that start a character ``raw`` does not finish."""
    end = len(raw)
    for start in range(end - 1, max(end - 4, -1), -1):
        byte = raw[start]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: the lead is further back
        if byte < 0x80:
            return 0
        length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
        return end - start if length > end - start else 0
    return 0


def _whole_chars(raw: bytes) -> bytes:
    return raw[: len(raw) - _tail_cut(raw)]


# ----------------------------------------------------------------------- text


_TEXT_INSTEAD = (
    "use lines:N-M (1-based, inclusive) or lines:N- to read lines, or bytes:N..M for parts "
    "of long lines"
)


def _inspect_text(reader: BlobReader, key: uuid.UUID, sel: Selector, limits: BlobLimits) -> str:
    n = reader.line_count(key)
    desc = f"text ({plural(n, 'line')})"
    if isinstance(sel, Overview):
        return _text_overview(reader, key, n, limits)
    if isinstance(sel, Slice):
        raise _wrong_type("slice", "selects entries of a JSON array", desc, _TEXT_INSTEAD)
    if isinstance(sel, Key):
        raise _wrong_type("key", "selects a value of a JSON object", desc, _TEXT_INSTEAD)
    if isinstance(sel, Pointer):
        raise _wrong_type("pointer", "navigates JSON values", desc, _TEXT_INSTEAD)
    if n == 0:
        raise InspectError(f"Blob {key} is empty text (0 lines): there is nothing to read.")
    if isinstance(sel, Bytes):
        return _read_bytes_capped(reader, key, sel, limits)
    if sel.start > n:
        first = max(1, n - 49)
        raise InspectError(
            f"lines:{sel.start}-{'' if sel.end is None else sel.end} starts past the end: the "
            f"blob has {plural(n, 'line')}. Use a start between 1 and {n}, e.g. "
            f"lines:{first}-{n}."
        )
    end = n if sel.end is None else min(sel.end, n)
    return _read_lines_capped(reader, key, sel.start, end, limits)


def _text_overview(reader: BlobReader, key: uuid.UUID, n: int, limits: BlobLimits) -> str:
    out = [f"blob {key}", "type: text", f"size: {reader.size(key)} bytes", f"lines: {n}"]
    head = min(n, limits.head_lines)
    tail_start = max(head, n - limits.tail_lines)
    shown = [*range(head), *range(tail_start, n)]
    wanted = sorted({*shown, *(i + 1 for i in shown)})
    offsets = dict(zip(wanted, reader.line_offsets(key, wanted), strict=True))
    if head:
        out.append(f"── head (lines 1-{head}) ──")
        out.extend(_preview_line(reader, key, offsets[i], offsets[i + 1]) for i in range(head))
    if tail_start < n:
        out.append(f"── tail (lines {tail_start + 1}-{n}) ──")
        out.extend(
            _preview_line(reader, key, offsets[i], offsets[i + 1]) for i in range(tail_start, n)
        )
    if n:
        out.append(
            f"Read lines with lines:N-M (1-based, inclusive, e.g. lines:1-{min(n, 100)}) "
            "or lines:N- to the end."
        )
    return _cap("\n".join(out), limits, "read the text with lines:N-M")


def _preview_line(reader: BlobReader, key: uuid.UUID, start: int, stop: int) -> str:
    """One line for the overview: at most PREVIEW_WIDTH characters, read in bounded bytes."""
    if stop - start > _PREVIEW_BYTES:
        text = _decode(_whole_chars(reader.read_range(key, start, start + _PREVIEW_BYTES)))
        return text[:PREVIEW_WIDTH] + "…"
    line = _decode(reader.read_range(key, start, stop))
    if line.endswith("\n"):
        line = line.removesuffix("\n").removesuffix("\r")
    return line if len(line) <= PREVIEW_WIDTH else line[:PREVIEW_WIDTH] + "…"


def _read_lines_capped(
    reader: BlobReader, key: uuid.UUID, first: int, last: int, limits: BlobLimits
) -> str:
    """Lines ``first..last`` (1-based, inclusive) exactly, or the whole lines that fit.

    Two offset lookups and one read of at most the cap, however long the
    lines are: a range over the cap reads a cap-sized window and shows the
    whole lines in it.
    """
    cap = limits.inspect_output_cap
    start, stop = reader.line_offsets(key, [first - 1, last])
    if stop - start <= cap:
        return _decode(reader.read_range(key, start, stop))
    window = reader.read_range(key, start, start + cap)
    ends: list[int] = []  # window offsets just past each whole line
    pos = window.find(b"\n")
    while pos != -1:
        ends.append(pos + 1)
        pos = window.find(b"\n", pos + 1)
    # Drop whole lines until the shown ones plus the marker fit. (The shown
    # text ends a line, so the marker needs no newline of its own.)
    for count in range(len(ends), 0, -1):
        marker = _marker(limits, _lines_hint(first, first + count - 1, last)).removeprefix("\n")
        if ends[count - 1] + utf8_size(marker) <= cap:
            return _decode(window[: ends[count - 1]]) + marker
    # Not even the first line fits: show its beginning, and how to read on inside it.
    line_stop = stop if first == last else reader.line_offsets(key, [first])[0]
    return _long_line(window, first, last, start=start, stop=line_stop, limits=limits)


def _long_line(
    window: bytes, first: int, last: int, *, start: int, stop: int, limits: BlobLimits
) -> str:
    """The beginning of line ``first`` (bytes ``start..stop``), which alone exceeds the cap."""

    def marker(shown: int) -> str:
        hint = (
            f"line {first} alone is {stop - start} bytes, so only its beginning is shown; "
            f"read more of it with bytes:{start + shown}..{stop}"
        )
        if first < last:
            hint += f"; read on with lines:{first + 1}-{last}"
        return _marker(limits, hint)

    widest = marker(len(window))  # the longest numbers it can hold
    budget = limits.inspect_output_cap - utf8_size(widest)
    if budget <= 0:
        return cut_utf8(_decode(_whole_chars(window)), limits.inspect_output_cap, widest)
    shown = _whole_chars(window[:budget])
    return _decode(shown) + marker(len(shown))


def _lines_hint(first: int, shown_last: int, last: int) -> str:
    width = shown_last - first + 1
    nxt = shown_last + 1
    return (
        f"showing lines {first}-{shown_last} of {first}-{last}; "
        f"read on with lines:{nxt}-{min(last, shown_last + width)}"
    )


def _read_bytes_capped(reader: BlobReader, key: uuid.UUID, sel: Bytes, limits: BlobLimits) -> str:
    """Bytes ``sel.start..sel.stop`` as text, ends moved inward to character boundaries."""
    size = reader.size(key)
    shown_stop = "" if sel.stop is None else sel.stop
    if sel.start >= size:
        raise InspectError(
            f"bytes:{sel.start}..{shown_stop} starts past the end: the blob has {size} bytes. "
            f"Use a start between 0 and {size - 1}, e.g. bytes:{max(0, size - 4000)}..{size}."
        )
    stop = size if sel.stop is None else min(sel.stop, size)
    cap = limits.inspect_output_cap
    window = reader.read_range(key, sel.start, min(stop, sel.start + cap + 3))
    skip = _lead_skip(window)
    first = sel.start + skip
    if stop - first <= cap:
        body = window[skip : stop - sel.start]
        if stop < size:
            body = _whole_chars(body)
        if not body:
            raise InspectError(
                f"bytes:{sel.start}..{shown_stop} holds no whole character (a character is up "
                f"to 4 bytes); widen the range, e.g. bytes:{sel.start}..{sel.start + 4}."
            )
        return _decode(body)

    def marker(end: int) -> str:
        # The rest of the range, not a window: its own answer is capped again, with a
        # marker of its own, so following the markers reads every byte.
        return _marker(
            limits,
            f"showing bytes {first}..{end} of {sel.start}..{stop}; "
            f"read on with bytes:{end}..{stop}",
        )

    widest = marker(first + cap)
    budget = max(0, cap - utf8_size(widest))
    body = _whole_chars(window[skip : skip + budget])
    return _decode(body) + marker(first + len(body))


# ------------------------------------------------------------ json: top level


class TopLevel(ABC):
    """The top-level array or object of a structured blob, read lazily.

    :class:`MemoryTop` wraps a parsed value; :class:`IndexedTop` reads a big
    blob through its :class:`~actors.blobs.json_index.JsonIndex`, parsing
    only what is asked for. ``texts`` yields compact JSON: entries of an
    array, ``"key":value`` members of an object.
    """

    kind: Literal["array", "object"]
    count: int

    @abstractmethod
    def texts(self, start: int) -> Iterator[str]:
        """Compact JSON of the entries/members from position ``start`` on."""

    @abstractmethod
    def entry(self, index: int) -> JsonValue:
        """Entry ``index`` of an array (``0 <= index < count``)."""

    @abstractmethod
    def member(self, name: str) -> tuple[JsonValue] | None:
        """The value of key ``name`` of an object, as a 1-tuple; None if absent."""

    @abstractmethod
    def keys(self) -> Iterator[str]:
        """The keys of an object, in order."""

    @abstractmethod
    def shapes(self) -> Iterator[tuple[str, Shape]]:
        """``(key, shape)`` of the first :data:`MAX_OVERVIEW_KEYS` members of an object."""


class MemoryTop(TopLevel):
    """A parsed array or object."""

    def __init__(self, value: list[JsonValue] | dict[str, JsonValue]) -> None:
        self.value = value
        self.kind = "array" if isinstance(value, list) else "object"
        self.count = len(value)

    def texts(self, start: int) -> Iterator[str]:
        if isinstance(self.value, list):
            return (compact_json(v) for v in islice(self.value, start, None))
        return (_member_text(k, v) for k, v in islice(self.value.items(), start, None))

    def entry(self, index: int) -> JsonValue:
        assert isinstance(self.value, list)
        return self.value[index]

    def member(self, name: str) -> tuple[JsonValue] | None:
        assert isinstance(self.value, dict)
        return (self.value[name],) if name in self.value else None

    def keys(self) -> Iterator[str]:
        assert isinstance(self.value, dict)
        return iter(self.value)

    def shapes(self) -> Iterator[tuple[str, Shape]]:
        assert isinstance(self.value, dict)
        return ((k, value_shape(v)) for k, v in islice(self.value.items(), MAX_OVERVIEW_KEYS))


class IndexedTop(TopLevel):
    """A big blob read through its index: seeks and small parses, never the whole blob."""

    def __init__(self, reader: BlobReader, key: uuid.UUID, index: JsonIndex) -> None:
        self.reader = reader
        self.key = key
        self.index = index
        self.kind = index.kind
        self.count = index.count

    def _groups(self, first: int) -> Iterator[tuple[int, str]]:
        """``(anchor, decoded text)`` of each anchor group from ``first`` on, read in batches."""
        index = self.index
        anchors = len(index.offsets)
        anchor = first
        while anchor < anchors:
            base = index.offsets[anchor]
            last = anchor + 1
            while last < anchors and index.group_span(last)[1] - base <= _BATCH_BYTES:
                last += 1
            raw = self.reader.read_range(self.key, base, index.group_span(last - 1)[1])
            for group in range(anchor, last):
                start, stop = index.group_span(group)
                yield group, _decode(raw[start - base : stop - base])
            anchor = last

    def _group_size(self, anchor: int) -> int:
        return min(self.index.stride, self.count - anchor * self.index.stride)

    def texts(self, start: int) -> Iterator[str]:
        stride = self.index.stride
        position = (start // stride) * stride
        for anchor, text in self._groups(start // stride):
            if stride == 1:
                items = [text]
            else:
                spans = split_group(text, self._group_size(anchor))
                items = [text[a:b] for a, b, _value in spans]
            for item in items:
                if position >= start:
                    yield item
                position += 1

    def entry(self, index: int) -> JsonValue:
        stride = self.index.stride
        if stride == 1:
            start, stop = self.index.item_span(index)
            return self.reader.json_part(self.key, start, stop)
        anchor = index // stride
        start, stop = self.index.group_span(anchor)
        text = _decode(self.reader.read_range(self.key, start, stop))
        return split_group(text, self._group_size(anchor))[index - anchor * stride][2]

    def member(self, name: str) -> tuple[JsonValue] | None:
        position = self.index.position(name)
        if position is None:
            return None
        start, stop = self.index.item_span(position)
        prefix = len(json.dumps(name, ensure_ascii=False).encode(ENCODING, ENCODING_ERRORS)) + 1
        return (self.reader.json_part(self.key, start + prefix, stop),)

    def keys(self) -> Iterator[str]:
        return iter(self.index.keys)

    def shapes(self) -> Iterator[tuple[str, Shape]]:
        return zip(self.index.keys, self.index.shapes, strict=False)


def _member_text(key: str, value: JsonValue) -> str:
    return f"{json.dumps(key, ensure_ascii=False)}:{compact_json(value)}"


# ----------------------------------------------------------------------- json


def _describe_blob(root: TopLevel | JsonValue) -> str:
    if isinstance(root, TopLevel):
        if root.kind == "array":
            return f"a json_array ({plural(root.count, 'entry', 'entries')})"
        return f"a json_object ({plural(root.count, 'key')})"
    return f"a json_{json_type_name(root)}"


def _instead(root: TopLevel | JsonValue) -> str:
    if isinstance(root, TopLevel) and root.kind == "array":
        return "use slice:N..M (0-based, end-exclusive) or pointer:/N/... for nested values"
    if isinstance(root, TopLevel):
        return "use key:NAME or pointer:/NAME/... for nested values"
    return "omit the selector to see the whole value"


def _inspect_json(
    reader: BlobReader,
    key: uuid.UUID,
    root: TopLevel | JsonValue,
    sel: Selector,
    limits: BlobLimits,
) -> str:
    desc = _describe_blob(root)
    if isinstance(sel, Overview):
        return _json_overview(reader, key, root, limits)
    if isinstance(sel, Lines | Bytes):
        kind = "lines" if isinstance(sel, Lines) else "bytes"
        raise _wrong_type(kind, f"selects {kind} of a text blob", desc, _instead(root))
    if isinstance(sel, Slice):
        if not isinstance(root, TopLevel) or root.kind != "array":
            raise _wrong_type("slice", "selects entries of a JSON array", desc, _instead(root))
        return _slice(root, sel, limits)
    if isinstance(sel, Key):
        if not isinstance(root, TopLevel) or root.kind != "object":
            raise _wrong_type("key", "selects a value of a JSON object", desc, _instead(root))
        name = sel.name
        found = root.member(name)
        if found is None and name.strip() != name:
            name = name.strip()  # "key: results" -- the model added a space
            found = root.member(name)
        if found is None:
            raise InspectError(
                f"Key {_quote(sel.name)} not found. The object has {plural(root.count, 'key')}: "
                f"{_list_keys(root.keys(), root.count)}. Use key:NAME with one of them (the name "
                "is everything after 'key:'), or pointer:/NAME/... for nested values."
            )
        return _render_capped(found[0], "/" + escape_pointer_token(name), limits)
    if not sel.tokens:
        return _render_capped(root, "", limits)
    if not isinstance(root, TopLevel):
        return _render_capped(_resolve_pointer(root, sel.tokens, sel.raw), sel.raw, limits)
    head = _resolve_top(root, sel.tokens[0], sel.raw)
    target = _resolve_pointer(
        head, sel.tokens[1:], sel.raw, "/" + escape_pointer_token(sel.tokens[0])
    )
    pointer = "".join("/" + escape_pointer_token(t) for t in sel.tokens)
    return _render_capped(target, pointer, limits)


def _list_keys(keys: Iterator[str], count: int) -> str:
    first = list(islice(keys, MAX_LISTED_KEYS))
    shown = ", ".join(render_key(k) for k in first)
    shown = cut_utf8(shown, 2000)
    if count > MAX_LISTED_KEYS:
        shown += f", … ({count - MAX_LISTED_KEYS} more; omit the selector to list keys)"
    return shown


def _json_overview(
    reader: BlobReader, key: uuid.UUID, root: TopLevel | JsonValue, limits: BlobLimits
) -> str:
    out = [f"blob {key}"]
    if isinstance(root, TopLevel) and root.kind == "array":
        out += ["type: json_array", f"size: {reader.size(key)} bytes", f"entries: {root.count}"]
        if root.count:
            out.append("── schema ──")
            out.extend(schema_lines(root.entry(0)))
            shown = min(root.count, limits.head_entries)
            out.append(f"── head (entries 0..{shown}) ──")
            out.extend(cut_utf8(text, PREVIEW_WIDTH) for text in islice(root.texts(0), shown))
            out.append(
                f"Read entries with slice:N..M (0-based, end-exclusive, e.g. "
                f"slice:0..{min(root.count, 20)}) or nested values with pointer:/N/..."
            )
        hint = "read entries with slice:N..M"
    elif isinstance(root, TopLevel):
        out += ["type: json_object", f"size: {reader.size(key)} bytes", f"keys: {root.count}"]
        if root.count:
            out.append("── keys ──")
            for name, shape in root.shapes():
                out.append(f"{render_key(name)}: {describe_shape(shape)}")
            if root.count > MAX_OVERVIEW_KEYS:
                out.append(f"… and {root.count - MAX_OVERVIEW_KEYS} more keys")
            out.append("Read a value with key:NAME, or a nested value with pointer:/NAME/...")
        hint = "read one value with key:NAME"
    else:
        out += [f"type: json_{json_type_name(root)}", f"size: {reader.size(key)} bytes"]
        out.append("── value ──")
        out.append(compact_json(root))
        hint = "the value is too large to show whole"
    return _cap("\n".join(out), limits, hint)


def _slice(array: TopLevel, sel: Slice, limits: BlobLimits) -> str:
    n = array.count
    if sel.start >= n:
        example = f"slice:{max(0, n - 10)}..{n}" if n else "no slice"
        raise InspectError(
            f"slice:{sel.start}..{'' if sel.stop is None else sel.stop} starts past the end: "
            f"the array has {plural(n, 'entry', 'entries')}"
            + (
                f" (indices 0..{n - 1}). Use e.g. {example}."
                if n
                else ". There is nothing to read."
            )
        )
    stop = n if sel.stop is None else min(sel.stop, n)

    def hint(count: int) -> str:
        shown_stop = sel.start + count
        return (
            f"showing entries {sel.start}..{shown_stop} of {sel.start}..{stop}; "
            f"read on with slice:{shown_stop}..{min(stop, shown_stop + count)}"
        )

    def too_big(size: int) -> str:
        return (
            f"entry {sel.start} alone is {size} bytes, so only its beginning is shown; "
            f"read parts of it with pointer:/{sel.start}/<key or index>"
        )

    texts = islice(array.texts(sel.start), stop - sel.start)
    return _join_capped("[", "]", texts, limits=limits, hint=hint, too_big=too_big)


def _join_capped(
    open_: str,
    close: str,
    texts: Iterator[str],
    *,
    limits: BlobLimits,
    hint: Callable[[int], str],
    too_big: Callable[[int], str],
) -> str:
    """``open_``, one item per line, ``close`` -- or the whole items that fit plus a marker.

    Reads items only until the cap is exceeded; the cut is always after a
    whole item (``hint(count)`` names how to read on). If not even the first
    item fits, its beginning is shown with ``too_big(its size)`` as the hint.
    """
    cap = limits.inspect_output_cap
    rendered: list[str] = []
    sizes: list[int] = []
    total = len(open_) + len(close) + 2  # open_ + "\n" ... "\n" + close
    over = False
    for text in texts:
        size = utf8_size(text)
        rendered.append(text)
        sizes.append(size)
        total += size + (2 if len(rendered) > 1 else 0)  # ",\n" between items
        if total > cap:
            over = True
            break
    if not rendered:
        return open_ + close
    if not over:
        return f"{open_}\n" + ",\n".join(rendered) + f"\n{close}"
    used = len(open_) + 1 + sum(sizes) + 2 * (len(sizes) - 1)  # without the closing line
    for count in range(len(rendered), 0, -1):
        marker = _marker(limits, hint(count))
        if used + utf8_size(marker) <= cap:
            return f"{open_}\n" + ",\n".join(rendered[:count]) + marker
        used -= sizes[count - 1] + (2 if count > 1 else 0)
    first = rendered[0]
    return cut_utf8(f"{open_}\n{first}", cap, _marker(limits, too_big(sizes[0])))


def _array_index(token: str) -> int:
    """An index token's value (``_INDEX_RE`` matched); past any array if it is too long."""
    if len(token) > MAX_NUMBER_DIGITS:
        return _PAST_ANY_ARRAY  # no array is that long: "out of range", never int() of it
    return int(token)


def _resolve_top(root: TopLevel, token: str, raw: str) -> JsonValue:
    """The first pointer token, resolved on the (lazily read) top level."""
    bad = f"Bad pointer {_quote('pointer:' + raw)}:"
    if root.kind == "object":
        found = root.member(token)
        if found is None:
            raise InspectError(
                f"{bad} no key {_quote(token)} in the object at the root. Its keys: "
                f"{_list_keys(root.keys(), root.count)}. Fix the pointer (escape '~' as ~0, "
                "'/' as ~1)."
            )
        return found[0]
    n = root.count
    if not _INDEX_RE.fullmatch(token):
        raise InspectError(
            f"{bad} {_quote(token)} is not an array index at the root (an array of "
            f"{plural(n, 'entry', 'entries')}); use an integer from 0 to {max(0, n - 1)} "
            "without leading zeros."
        )
    index = _array_index(token)
    if index >= n:
        raise InspectError(
            f"{bad} index {_inline(token)} is out of range at the root, an array of "
            f"{plural(n, 'entry', 'entries')}"
            + (f" (indices 0..{n - 1})." if n else " (it is empty).")
        )
    return root.entry(index)


def _resolve_pointer(
    value: JsonValue, tokens: Sequence[str], raw: str, path: str = ""
) -> JsonValue:
    current = value
    bad = f"Bad pointer {_quote('pointer:' + raw)}:"
    for token in tokens:
        where = _inline(path) if path else "the root"
        if isinstance(current, dict):
            if token not in current:
                raise InspectError(
                    f"{bad} no key {_quote(token)} in the object at {where}. Its "
                    f"keys: {_list_keys(iter(current), len(current))}. Fix the pointer (escape "
                    "'~' as ~0, '/' as ~1)."
                )
            current = current[token]
        elif isinstance(current, list):
            if not _INDEX_RE.fullmatch(token):
                raise InspectError(
                    f"{bad} {_quote(token)} is not an array index at {where} (an "
                    f"array of {plural(len(current), 'entry', 'entries')}); use an integer "
                    "from 0 to "
                    f"{max(0, len(current) - 1)} without leading zeros."
                )
            index = _array_index(token)
            if index >= len(current):
                raise InspectError(
                    f"{bad} index {_inline(token)} is out of range at {where}, an "
                    f"array of {plural(len(current), 'entry', 'entries')}"
                    + (f" (indices 0..{len(current) - 1})." if current else " (it is empty).")
                )
            current = current[index]
        else:
            end = _inline(path) if path else "(empty)"
            raise InspectError(
                f"{bad} the value at {where} is {with_article(json_type_name(current))}, "
                f"which has no members; the pointer must end at {end}."
            )
        path += "/" + escape_pointer_token(token)
    return current


def render_value(value: JsonValue) -> str:
    """How ``key``/``pointer`` show a value: raw string, or JSON one item per line."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(compact_json(v) for v in value) + "\n]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{\n" + ",\n".join(_member_text(k, v) for k, v in value.items()) + "\n}"
    return compact_json(value)


def _render_capped(value: TopLevel | JsonValue, pointer: str, limits: BlobLimits) -> str:
    """``render_value`` within the cap: arrays and objects cut after a whole entry/member."""
    if isinstance(value, list | dict):
        value = MemoryTop(value)
    if not isinstance(value, TopLevel):
        text = render_value(value)
        return _cap(
            text,
            limits,
            f"the value is {utf8_size(text)} bytes and only its beginning is shown; "
            "inspect cannot select part of a single string",
        )
    top = value
    n = top.count
    if top.kind == "array":

        def hint(count: int) -> str:
            more = f"read on with slice:{count}..{min(n, 2 * count)}, or " if pointer == "" else ""
            return (
                f"showing entries 0..{count - 1}, whole entries only; the array has "
                f"{plural(n, 'entry', 'entries')}; {more}read one with pointer:{pointer}/N "
                f"(0..{n - 1})"
            )

        def too_big(size: int) -> str:
            return (
                f"entry 0 alone is {size} bytes, so only its beginning is shown; the array has "
                f"{plural(n, 'entry', 'entries')}; read parts of it with "
                f"pointer:{pointer}/0/<key or index>"
            )

        return _join_capped("[", "]", top.texts(0), limits=limits, hint=hint, too_big=too_big)

    def key_at(position: int) -> str:
        return next(islice(top.keys(), position, None), "")

    def object_hint(count: int) -> str:
        following = escape_pointer_token(key_at(count))
        return (
            f"showing the first {count} members, whole members only; the object has "
            f"{plural(n, 'key')}; read one with pointer:{pointer}/NAME, e.g. the next one "
            f"with pointer:{pointer}/{following}"
        )

    def object_too_big(size: int) -> str:
        first = escape_pointer_token(key_at(0))
        return (
            f"the first member alone is {size} bytes, so only its beginning is shown; the "
            f"object has {plural(n, 'key')}; read parts of it with pointer:{pointer}/{first}/..."
        )

    return _join_capped(
        "{", "}", top.texts(0), limits=limits, hint=object_hint, too_big=object_too_big
    )
