"""``inspect`` on structured (JSON) blobs: the overview, ``slice``, ``key`` and ``pointer``.

A big top-level array or object is read through its index
(:class:`IndexedTop`), parsing only the entries shown; a smaller one comes
parsed from the store's cache (:class:`MemoryTop`). Output is cut after the
last whole entry or member that fits, never inside a number.
"""

from __future__ import annotations

import json
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from typing import Literal

from pydantic import JsonValue

from fore.actors.blobs.fs_store import ENCODING, ENCODING_ERRORS
from fore.actors.blobs.json_index import (
    SHAPED_MEMBERS,
    JsonIndex,
    Shape,
    describe_shape,
    json_type_name,
    split_group,
    value_shape,
)
from fore.actors.blobs.selectors.grammar import (
    MAX_NUMBER_DIGITS,
    Bytes,
    InspectError,
    Key,
    Lines,
    Overview,
    Selector,
    Slice,
    _inline,
    _quote,
    escape_pointer_token,
)
from fore.actors.blobs.selectors.reader import (
    PREVIEW_WIDTH,
    BlobReader,
    _cap,
    _decode,
    _marker,
    _wrong_type,
)
from fore.actors.blobs.summary import (
    compact_json,
    cut_utf8,
    plural,
    render_key,
    schema_lines,
    utf8_size,
    with_article,
)
from fore.messages.blobs import BlobLimits

_BATCH_BYTES = 64 * 1024
"""Bytes read at a time while rendering entries of an indexed JSON blob."""
MAX_LISTED_KEYS = 50
"""Keys listed by an unknown-key / bad-pointer error."""
MAX_OVERVIEW_KEYS = SHAPED_MEMBERS
"""Keys listed by the overview of an object (the shapes a JSON index keeps)."""
_INDEX_RE = re.compile(r"0|[1-9][0-9]*")
_PAST_ANY_ARRAY: int = 10**MAX_NUMBER_DIGITS


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
