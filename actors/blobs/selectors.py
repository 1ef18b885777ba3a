"""The ``inspect`` engine: read exactly the part of a blob the model asks for.

``inspect_blob(reader, blob_id, selector, limits)`` is the whole tool minus
the actor plumbing; the ``inspect`` tool wrapper calls it on the blocking
lane and turns :class:`InspectError` into an error tool result whose text is
``error.message`` (every message says what to do instead).

Selectors::

    (none)          overview: type, size in bytes, line/entry/key count, a preview
    lines:N-M       text: lines N..M, 1-based, inclusive, M clamped to the end
    lines:N-        text: line N to the end
    slice:N..M      array: entries N..M-1 (0-based, end-exclusive, M clamped), as JSON
    slice:N..       array: entry N to the end
    key:NAME        object: the value of NAME (everything after "key:" is the name)
    pointer:/a/0/b  any JSON: an RFC 6901 pointer (~0 is "~", ~1 is "/"; "" is the root)

Outputs:

* ``lines`` returns the exact original text of the lines, terminators
  (``\\n`` / ``\\r\\n``) included, so ``lines:1-N`` of an N-line text is the
  text itself.
* ``slice`` returns a JSON array with one compact element per line, so
  ``json.loads`` of it equals Python's ``array[N:M]``.
* ``key`` / ``pointer`` return a string value as its raw text and any other
  value as JSON (arrays one element per line, objects one member per line).
* Every output is capped at ``limits.inspect_output_cap`` UTF-8 bytes,
  marker included. Line and slice outputs are cut after the last whole
  line/entry that fits, and the marker names the exact selector that reads
  on; other outputs are cut on a character boundary.

A slice or line range that *starts* past the end is an error (it tells the
model the real size) rather than an empty answer.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Protocol

from pydantic import JsonValue

from actors.blobs.fs_store import BlobNotFound, BlobStoreError, InvalidBlobId, parse_blob_id
from actors.blobs.summary import (
    DEFAULT_LIMITS,
    compact_json,
    cut_utf8,
    describe_value,
    json_type_name,
    plural,
    render_key,
    schema_lines,
    utf8_size,
    with_article,
)
from messages.blobs import BlobKind, BlobLimits, Content, Text

SELECTOR_HELP = (
    "lines:N-M or lines:N- (text, 1-based, inclusive), slice:N..M or slice:N.. "
    "(arrays, 0-based, end-exclusive), key:NAME (objects) or pointer:/a/0/b "
    "(JSON Pointer into nested values); omit the selector for an overview"
)
PREVIEW_WIDTH = 300
"""Characters shown per preview line in the overview."""
MAX_LISTED_KEYS = 50
"""Keys listed by an unknown-key / bad-pointer error."""
MAX_OVERVIEW_KEYS = 200
"""Keys listed by the overview of an object."""

# ASCII digits only: ``\d`` would accept e.g. fullwidth digits ("lines:１-2"), which
# ``int()`` converts silently -- a selector the model can never see echoed back.
_LINES_RE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]*)\s*", re.ASCII)
_SLICE_RE = re.compile(r"\s*([0-9]+)\s*\.\.\s*([0-9]*)\s*", re.ASCII)
_INDEX_RE = re.compile(r"0|[1-9][0-9]*")
_BAD_ESCAPE_RE = re.compile(r"~(?![01])")


class InspectError(Exception):
    """Any ``inspect`` failure; ``message`` is what the model sees."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BlobReader(Protocol):
    """What ``inspect`` needs from a blob store (``FsBlobStore`` implements it).

    Every method raises ``BlobNotFound`` for a missing blob (other
    ``BlobStoreError`` s for I/O trouble). Line numbers are 0-based and
    ranges half-open. ``line_count`` and ``read_lines`` are only called for
    text blobs and must not rescan the blob (``FsBlobStore`` keeps a line
    index); ``read_lines`` keeps line terminators and clamps ``stop`` to the
    line count.
    """

    def kind(self, blob_id: uuid.UUID) -> BlobKind: ...

    def size(self, blob_id: uuid.UUID) -> int: ...

    def line_count(self, blob_id: uuid.UUID) -> int: ...

    def read_lines(self, blob_id: uuid.UUID, start: int, stop: int) -> str: ...

    def load(self, blob_id: uuid.UUID) -> Content: ...


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


Selector = Overview | Lines | Slice | Key | Pointer


def parse_selector(selector: str | None) -> Selector:
    """Parse a selector string; :class:`InspectError` if it is not valid.

    The kind before the first ``:`` is case-insensitive; ``None`` or a blank
    string is the overview. Checks that need the blob (past-the-end, wrong
    type) happen in :func:`inspect_blob`.
    """
    if selector is None or not selector.strip():
        return Overview()
    kind, colon, arg = selector.partition(":")
    kind = kind.strip().lower()
    if not colon:
        if kind in ("lines", "slice", "key", "pointer"):
            raise InspectError(_malformed(kind, selector))
        raise InspectError(
            f"Malformed selector {selector!r}: a selector is KIND:ARGUMENT. Use {SELECTOR_HELP}."
        )
    if kind == "lines":
        match = _LINES_RE.fullmatch(arg)
        if match is None:
            raise InspectError(_malformed(kind, selector))
        start = int(match.group(1))
        end = int(match.group(2)) if match.group(2) else None
        if start == 0 or end == 0:
            raise InspectError(
                f"Line numbers start at 1, so {selector.strip()!r} is invalid; "
                f"use e.g. {_zero_fix(start, end)} (1-based, inclusive)."
            )
        if end is not None and end < start:
            raise InspectError(
                f"Inverted range {selector.strip()!r}: the end line must not be before the "
                f"start line; use lines:{end}-{start}."
            )
        return Lines(start, end)
    if kind == "slice":
        match = _SLICE_RE.fullmatch(arg)
        if match is None:
            raise InspectError(_malformed(kind, selector))
        start = int(match.group(1))
        stop = int(match.group(2)) if match.group(2) else None
        if stop is not None and stop <= start:
            fix = f"slice:{stop}..{start}" if stop < start else f"slice:{start}..{start + 1}"
            raise InspectError(
                f"Empty or inverted range {selector.strip()!r}: the end is exclusive and must be "
                f"greater than the start; use e.g. {fix}."
            )
        return Slice(start, stop)
    if kind == "key":
        if not arg:
            raise InspectError(_malformed(kind, selector))
        return Key(arg)
    if kind == "pointer":
        return Pointer(arg, _pointer_tokens(arg, selector))
    raise InspectError(f"Unknown selector kind {kind!r} in {selector!r}. Use {SELECTOR_HELP}.")


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
        "key": "put the key after the colon, e.g. key:results (omit the selector to list keys)",
        "pointer": "use a JSON Pointer such as pointer:/results/0/name",
    }[kind]
    return f"Malformed {kind} selector {selector!r}: {usage}."


def _pointer_tokens(pointer: str, selector: str) -> tuple[str, ...]:
    """RFC 6901: ``""`` is the root, else ``/``-separated tokens with ~0/~1 escapes."""
    if pointer == "":
        return ()
    if not pointer.startswith("/"):
        raise InspectError(
            f"Malformed pointer in {selector!r}: a JSON Pointer is empty (the whole value) or "
            "starts with '/', e.g. pointer:/results/0/name."
        )
    if _BAD_ESCAPE_RE.search(pointer):
        raise InspectError(
            f"Malformed pointer in {selector!r}: '~' must be written ~0 and '/' inside a key "
            "~1 (e.g. key 'a/b' is pointer:/a~1b)."
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
        return parse_blob_id(raw)
    except InvalidBlobId:
        shown = blob_id[:80] if isinstance(blob_id, str) else type(blob_id).__name__
        raise InspectError(
            f"Invalid blob id {shown!r}: a blob id is a UUID such as "
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
        content = reader.load(key)
        if isinstance(content, Text):  # a reader that changed its mind; be robust
            raise BlobStoreError("blob kind changed while reading")
        return _inspect_json(reader, key, content.value, sel, limits)
    except BlobNotFound:
        raise InspectError(
            f"Blob {key} not found: it was never stored or has been removed by retention. "
            "Re-run the tool that produced it to get its output again."
        ) from None
    except (BlobStoreError, OSError) as exc:
        raise InspectError(
            f"Could not read blob {key}: {exc}. Try again, or re-run the tool that produced it."
        ) from None


def _marker(limits: BlobLimits, hint: str) -> str:
    return f"\n…[truncated: inspect output is capped at {limits.inspect_output_cap} bytes; {hint}]"


def _cap(text: str, limits: BlobLimits, hint: str) -> str:
    if utf8_size(text) <= limits.inspect_output_cap:
        return text
    return cut_utf8(text, limits.inspect_output_cap, _marker(limits, hint))


def _split_keep_ends(chunk: str) -> list[str]:
    """Split on ``\\n`` only, keeping terminators (``str.splitlines`` also splits on ``\\r``)."""
    parts = chunk.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _display(chunk: str, width: int) -> list[str]:
    lines = []
    for raw in _split_keep_ends(chunk):
        line = raw.removesuffix("\n").removesuffix("\r") if raw.endswith("\n") else raw
        lines.append(line if len(line) <= width else line[:width] + "…")
    return lines


def _wrong_type(sel_kind: str, what: str, blob_desc: str, instead: str) -> InspectError:
    return InspectError(f"{sel_kind}: {what}, but this blob is {blob_desc}. Instead, {instead}.")


# ----------------------------------------------------------------------- text


_TEXT_INSTEAD = "use lines:N-M (1-based, inclusive) or lines:N- to read lines"


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
        raise InspectError(f"Blob {key} is empty text (0 lines): there are no lines to read.")
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
    if head:
        out.append(f"── head (lines 1-{head}) ──")
        out.extend(_display(reader.read_lines(key, 0, head), PREVIEW_WIDTH))
    tail_start = max(head, n - limits.tail_lines)
    if tail_start < n:
        out.append(f"── tail (lines {tail_start + 1}-{n}) ──")
        out.extend(_display(reader.read_lines(key, tail_start, n), PREVIEW_WIDTH))
    if n:
        out.append(
            f"Read lines with lines:N-M (1-based, inclusive, e.g. lines:1-{min(n, 100)}) "
            "or lines:N- to the end."
        )
    return _cap("\n".join(out), limits, "read the text with lines:N-M")


def _read_lines_capped(
    reader: BlobReader, key: uuid.UUID, first: int, last: int, limits: BlobLimits
) -> str:
    """Lines ``first..last`` (1-based, inclusive) exactly, or the whole lines that fit.

    Reads in doubling batches so a huge range costs about twice what the
    cap lets through, not the whole blob.
    """
    cap = limits.inspect_output_cap
    lines: list[str] = []
    size = 0
    pos = first - 1  # 0-based next line to read
    batch = 32
    overflow = False
    while pos < last and not overflow:
        chunk = reader.read_lines(key, pos, min(last, pos + batch))
        if not chunk:
            break
        for line in _split_keep_ends(chunk):
            lines.append(line)
            size += utf8_size(line)
            if size > cap:
                overflow = True
                break
        pos += batch
        batch *= 2
    if not overflow:
        return "".join(lines)
    # Drop whole lines until the shown ones plus the marker fit.
    while lines:
        shown_last = first + len(lines) - 1
        marker = _marker(limits, _lines_hint(first, shown_last, last))
        if lines[-1].endswith("\n"):
            marker = marker.removeprefix("\n")  # the shown text already ends a line
        if size + utf8_size(marker) <= cap:
            return "".join(lines) + marker
        size -= utf8_size(lines.pop())
    # Not even the first line fits: show its beginning.
    line = reader.read_lines(key, first - 1, first)
    hint = f"line {first} alone is {utf8_size(line)} bytes, so only its beginning is shown" + (
        f"; read on with lines:{first + 1}-{last}" if first < last else ""
    )
    return cut_utf8(line, cap, _marker(limits, hint))


def _lines_hint(first: int, shown_last: int, last: int) -> str:
    width = shown_last - first + 1
    nxt = shown_last + 1
    return (
        f"showing lines {first}-{shown_last} of {first}-{last}; "
        f"read on with lines:{nxt}-{min(last, shown_last + width)}"
    )


# ----------------------------------------------------------------------- json


def _describe_blob(value: JsonValue) -> str:
    if isinstance(value, list):
        return f"a json_array ({plural(len(value), 'entry', 'entries')})"
    if isinstance(value, dict):
        return f"a json_object ({plural(len(value), 'key')})"
    return f"a json_{json_type_name(value)}"


def _instead(value: JsonValue) -> str:
    if isinstance(value, list):
        return "use slice:N..M (0-based, end-exclusive) or pointer:/N/... for nested values"
    if isinstance(value, dict):
        return "use key:NAME or pointer:/NAME/... for nested values"
    return "omit the selector to see the whole value"


def _inspect_json(
    reader: BlobReader, key: uuid.UUID, value: JsonValue, sel: Selector, limits: BlobLimits
) -> str:
    desc = _describe_blob(value)
    if isinstance(sel, Overview):
        return _json_overview(reader, key, value, limits)
    if isinstance(sel, Lines):
        raise _wrong_type("lines", "selects lines of a text blob", desc, _instead(value))
    if isinstance(sel, Slice):
        if not isinstance(value, list):
            raise _wrong_type("slice", "selects entries of a JSON array", desc, _instead(value))
        return _slice(value, sel, limits)
    if isinstance(sel, Key):
        if not isinstance(value, dict):
            raise _wrong_type("key", "selects a value of a JSON object", desc, _instead(value))
        name = sel.name
        if name not in value and name.strip() in value:
            name = name.strip()  # "key: results" -- the model added a space
        if name not in value:
            raise InspectError(
                f"Key {sel.name!r} not found. The object has {plural(len(value), 'key')}: "
                f"{_list_keys(value)}. Use key:NAME with one of them (the name is everything "
                "after 'key:'), or pointer:/NAME/... for nested values."
            )
        pointer = "/" + escape_pointer_token(name)
        return _render_capped(value[name], pointer, limits)
    tokens = sel.tokens
    target = _resolve_pointer(value, sel)
    pointer = "".join("/" + escape_pointer_token(t) for t in tokens)
    return _render_capped(target, pointer, limits)


def _list_keys(obj: dict[str, JsonValue]) -> str:
    keys = list(obj)
    shown = ", ".join(render_key(k) for k in keys[:MAX_LISTED_KEYS])
    shown = cut_utf8(shown, 2000)
    if len(keys) > MAX_LISTED_KEYS:
        shown += f", … ({len(keys) - MAX_LISTED_KEYS} more; omit the selector to list keys)"
    return shown


def _json_overview(reader: BlobReader, key: uuid.UUID, value: JsonValue, limits: BlobLimits) -> str:
    type_name = json_type_name(value)
    out = [f"blob {key}", f"type: json_{type_name}", f"size: {reader.size(key)} bytes"]
    if isinstance(value, list):
        out.append(f"entries: {len(value)}")
        if value:
            out.append("── schema ──")
            out.extend(schema_lines(value[0]))
            shown = min(len(value), limits.head_entries)
            out.append(f"── head (entries 0..{shown}) ──")
            out.extend(cut_utf8(compact_json(v), PREVIEW_WIDTH) for v in value[:shown])
            out.append(
                f"Read entries with slice:N..M (0-based, end-exclusive, e.g. "
                f"slice:0..{min(len(value), 20)}) or nested values with pointer:/N/..."
            )
        hint = "read entries with slice:N..M"
    elif isinstance(value, dict):
        out.append(f"keys: {len(value)}")
        if value:
            out.append("── keys ──")
            for name, item in list(value.items())[:MAX_OVERVIEW_KEYS]:
                out.append(f"{render_key(name)}: {describe_value(item)}")
            if len(value) > MAX_OVERVIEW_KEYS:
                out.append(f"… and {len(value) - MAX_OVERVIEW_KEYS} more keys")
            out.append("Read a value with key:NAME, or a nested value with pointer:/NAME/...")
        hint = "read one value with key:NAME"
    else:
        out.append("── value ──")
        out.append(compact_json(value))
        hint = "the value is too large to show whole"
    return _cap("\n".join(out), limits, hint)


def _slice(array: list[JsonValue], sel: Slice, limits: BlobLimits) -> str:
    n = len(array)
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
    cap = limits.inspect_output_cap
    rendered: list[str] = []
    size = 4  # "[\n" + "\n]"
    for item in array[sel.start : stop]:
        text = compact_json(item)
        rendered.append(text)
        size += utf8_size(text) + 2
        if size > cap:
            break
    else:
        return "[\n" + ",\n".join(rendered) + "\n]"
    while rendered:
        shown_stop = sel.start + len(rendered)
        width = len(rendered)
        hint = (
            f"showing entries {sel.start}..{shown_stop} of {sel.start}..{stop}; "
            f"read on with slice:{shown_stop}..{min(stop, shown_stop + width)}"
        )
        text = "[\n" + ",\n".join(rendered) + _marker(limits, hint)
        if utf8_size(text) <= cap:
            return text
        rendered.pop()
    first = compact_json(array[sel.start])
    hint = (
        f"entry {sel.start} alone is {utf8_size(first)} bytes, so only its beginning is shown; "
        f"read parts of it with pointer:/{sel.start}/<key or index>"
    )
    return cut_utf8("[\n" + first, cap, _marker(limits, hint))


def _resolve_pointer(value: JsonValue, sel: Pointer) -> JsonValue:
    current = value
    path = ""
    bad = f"Bad pointer 'pointer:{sel.raw}':"
    for token in sel.tokens:
        where = path or "the root"
        if isinstance(current, dict):
            if token not in current:
                raise InspectError(
                    f"{bad} no key {token!r} in the object at {where}. Its "
                    f"keys: {_list_keys(current)}. Fix the pointer (escape '~' as ~0, '/' as ~1)."
                )
            current = current[token]
        elif isinstance(current, list):
            if not _INDEX_RE.fullmatch(token):
                raise InspectError(
                    f"{bad} {token!r} is not an array index at {where} (an "
                    f"array of {plural(len(current), 'entry', 'entries')}); use an integer "
                    "from 0 to "
                    f"{max(0, len(current) - 1)} without leading zeros."
                )
            index = int(token)
            if index >= len(current):
                raise InspectError(
                    f"{bad} index {index} is out of range at {where}, an "
                    f"array of {plural(len(current), 'entry', 'entries')}"
                    + (f" (indices 0..{len(current) - 1})." if current else " (it is empty).")
                )
            current = current[index]
        else:
            raise InspectError(
                f"{bad} the value at {where} is {with_article(json_type_name(current))}, "
                f"which has no members; the pointer must end at {path or '(empty)'}."
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
        members = (
            f"{json.dumps(k, ensure_ascii=False)}:{compact_json(v)}" for k, v in value.items()
        )
        return "{\n" + ",\n".join(members) + "\n}"
    return compact_json(value)


def _render_capped(value: JsonValue, pointer: str, limits: BlobLimits) -> str:
    text = render_value(value)
    if isinstance(value, list):
        hint = (
            f"the array has {plural(len(value), 'entry', 'entries')}; read one with "
            f"pointer:{pointer}/N "
            f"(0..{len(value) - 1})"
        )
    elif isinstance(value, dict):
        hint = f"the object has {plural(len(value), 'key')}; read one with pointer:{pointer}/NAME"
    else:
        hint = (
            f"the value is {utf8_size(text)} bytes and only its beginning is shown; "
            "inspect cannot select part of a single string"
        )
    return _cap(text, limits, hint)
