"""A top-level index of big structured blobs, so ``inspect`` never re-parses them whole.

``inspect`` of a 100 MB JSON blob must not parse 100 MB on every call, and
the parsed-JSON cache cannot hold such a value (parsed JSON takes 5-8x its
text size). So a structured blob of at least ``json_index_min_bytes`` whose
value is an array or an object gets a sidecar, ``<id>.jidx``, written at
store time (and rebuilt with one parse if it is missing or stale): the byte
offset of its top-level entries (arrays) or members (objects), the keys of an
object, and the shape (type and size) of its first members. ``slice``,
``key``, ``pointer`` and the overview then read and parse only the entries
they show -- a seek and a parse of kilobytes, whatever the blob's size.

The offsets are exact because a stored blob is compact JSON
(:func:`~actors.blobs.fs_store.encode_content`) and compact JSON of a
container is the concatenation of its parts: ``[`` + ``,``-joined compact
entries + ``]`` (objects: ``"key":value`` members inside ``{}``).
:func:`encode_indexed` builds the bytes from those parts, so the bytes and
the offsets come from one computation.

Arrays keep the offset of every ``stride``-th entry (a stride chosen so the
index is at most 1/16 of the blob: about 128 bytes of entries between two
anchors); an entry between anchors is found by parsing its anchor's group
(:func:`split_group`). Objects keep every member's offset (their keys are
in the index anyway).

Sidecar format (little-endian)::

    8 bytes   magic  b"FOREJIX1"
    uint64    kind   (0 array, 1 object)
    uint64    size of the blob in bytes (detects a stale index)
    uint64    count  (entries or members)
    uint64    stride
    uint64    number of offsets
    uint64    length of the metadata
    uint64[]  offsets
    bytes     metadata: ASCII JSON {"keys": [...], "shapes": [[type, size|null], ...]}
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from dataclasses import dataclass, field
from typing import Literal

from pydantic import JsonValue

__all__ = [
    "INDEX_RATIO",
    "SHAPED_MEMBERS",
    "JsonIndex",
    "Shape",
    "describe_shape",
    "encode_indexed",
    "json_type_name",
    "split_group",
    "value_shape",
]

INDEX_RATIO = 16
"""An array's index is at most 1/INDEX_RATIO of the blob (8 bytes per anchor)."""

SHAPED_MEMBERS = 200
"""Members of an object whose shape the index keeps (what the overview lists)."""

_MAGIC = b"FOREJIX1"
_HEADER = struct.Struct("<8sQQQQQQ")
_BIG_ENDIAN = sys.byteorder == "big"
_ENCODING = "utf-8"
_ERRORS = "surrogatepass"
_DECODER = json.JSONDecoder()

Shape = tuple[str, int | None]
"""A value's JSON type name and, for strings/arrays/objects, its length."""


def json_type_name(value: JsonValue) -> str:
    """The JSON Schema type name of a value (``integer`` vs ``number``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def value_shape(value: JsonValue) -> Shape:
    """What the overview says about a value without showing it."""
    if isinstance(value, str | list | dict):
        return json_type_name(value), len(value)
    return json_type_name(value), None


def _plural(count: int, singular: str, plural_form: str) -> str:
    return f"{count} {singular if count == 1 else plural_form}"


def describe_shape(shape: Shape) -> str:
    """``string (12 chars)``, ``array (3 entries)``, ``object (1 key)``, ``integer``."""
    name, size = shape
    if size is None:
        return name
    unit = {"string": ("char", "chars"), "array": ("entry", "entries"), "object": ("key", "keys")}
    singular, plural_form = unit.get(name, ("item", "items"))
    return f"{name} ({_plural(size, singular, plural_form)})"


def _compact(value: JsonValue) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode(_ENCODING, _ERRORS)


@dataclass(frozen=True)
class JsonIndex:
    """Offsets of the top-level entries of one structured blob (see the module docs).

    Immutable, so one instance is cached and shared by every reader thread.
    """

    kind: Literal["array", "object"]
    size: int
    count: int
    stride: int
    offsets: tuple[int, ...]
    keys: tuple[str, ...] = ()
    shapes: tuple[Shape, ...] = ()
    _lookup: list[dict[str, int]] = field(default_factory=list, compare=False, repr=False)
    """The key -> position map, built on first use (a complete dict, or nothing)."""

    # -- building -------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        meta = json.dumps(
            {"keys": list(self.keys), "shapes": [list(s) for s in self.shapes]},
            ensure_ascii=True,
            separators=(",", ":"),
        ).encode("ascii")
        body = array("Q", self.offsets)
        if _BIG_ENDIAN:
            body.byteswap()
        header = _HEADER.pack(
            _MAGIC,
            0 if self.kind == "array" else 1,
            self.size,
            self.count,
            self.stride,
            len(self.offsets),
            len(meta),
        )
        return header + body.tobytes() + meta

    @classmethod
    def from_bytes(cls, raw: bytes) -> JsonIndex:
        """Decode a sidecar; ``ValueError`` if it is not a valid index."""
        if len(raw) < _HEADER.size:
            raise ValueError("json index too short")
        magic, kind, size, count, stride, n_offsets, meta_len = _HEADER.unpack_from(raw)
        if magic != _MAGIC or kind not in (0, 1) or stride <= 0:
            raise ValueError("not a json index")
        start = _HEADER.size
        end = start + 8 * n_offsets
        if len(raw) != end + meta_len:
            raise ValueError("truncated json index")
        offsets = array("Q")
        offsets.frombytes(raw[start:end])
        if _BIG_ENDIAN:
            offsets.byteswap()
        try:
            meta = json.loads(raw[end:].decode("ascii"))
            keys = tuple(str(k) for k in meta["keys"])
            shapes = tuple((str(t), None if n is None else int(n)) for t, n in meta["shapes"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"bad json index metadata: {exc}") from None
        expected = -(-count // stride) if count else 0
        if len(offsets) != expected or (kind == 1 and len(keys) != count):
            raise ValueError("inconsistent json index")
        if any(not 0 < o < size for o in offsets):
            raise ValueError("json index offset out of range")
        return cls(
            kind="array" if kind == 0 else "object",
            size=size,
            count=count,
            stride=stride,
            offsets=tuple(offsets),
            keys=keys,
            shapes=shapes,
        )

    # -- reading ---------------------------------------------------------------------------

    def position(self, key: str) -> int | None:
        """The member number of ``key`` in an object (None: no such key)."""
        if not self._lookup:
            # Built whole, then published: a racing reader sees no map (and builds
            # its own) or a complete one -- never a half-filled one.
            self._lookup.append({k: i for i, k in enumerate(self.keys)})
        return self._lookup[0].get(key)

    def group_span(self, anchor: int) -> tuple[int, int]:
        """Bytes of the entries of anchor ``anchor`` (no trailing comma or bracket)."""
        start = self.offsets[anchor]
        stop = self.offsets[anchor + 1] - 1 if anchor + 1 < len(self.offsets) else self.size - 1
        return start, stop

    def item_span(self, index: int) -> tuple[int, int]:
        """Bytes of entry/member ``index`` (objects and arrays with stride 1 only)."""
        if self.stride != 1:
            raise ValueError("item_span needs an index with stride 1")
        return self.group_span(index)


def encode_indexed(value: JsonValue) -> tuple[bytes, JsonIndex] | None:
    """The stored bytes of ``value`` with their top-level index (None: not indexable).

    The bytes equal :func:`~actors.blobs.fs_store.encode_content`'s compact
    JSON. Only arrays and objects with string keys are indexed.
    """
    if isinstance(value, list):
        pieces = [_compact(item) for item in value]
        open_, close = b"[", b"]"
        keys: tuple[str, ...] = ()
        shapes: tuple[Shape, ...] = ()
    elif isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return None
        pieces = [_compact(k) + b":" + _compact(v) for k, v in value.items()]
        open_, close = b"{", b"}"
        keys = tuple(value)
        shapes = tuple(value_shape(v) for v in list(value.values())[:SHAPED_MEMBERS])
    else:
        return None
    data = open_ + b",".join(pieces) + close
    size = len(data)
    count = len(pieces)
    stride = 1 if isinstance(value, dict) else max(1, -(-count * 8 * INDEX_RATIO // size))
    offsets: list[int] = []
    pos = 1
    for i, piece in enumerate(pieces):
        if i % stride == 0:
            offsets.append(pos)
        pos += len(piece) + 1
    index = JsonIndex(
        kind="array" if isinstance(value, list) else "object",
        size=size,
        count=count,
        stride=stride,
        offsets=tuple(offsets),
        keys=keys,
        shapes=shapes,
    )
    return data, index


def split_group(text: str, expected: int) -> list[tuple[int, int, JsonValue]]:
    """Parse the ``,``-separated values of an array group: ``(start, end, value)`` each.

    ``text`` is the decoded bytes of :meth:`JsonIndex.group_span`; compact
    JSON has no whitespace, so each value ends right before a comma.
    ``ValueError`` if the text does not hold exactly ``expected`` values.
    """
    out: list[tuple[int, int, JsonValue]] = []
    pos = 0
    end_of_text = len(text)
    while pos < end_of_text:
        value, end = _DECODER.raw_decode(text, pos)
        out.append((pos, end, value))
        if end < end_of_text and text[end] != ",":
            raise ValueError(f"unexpected {text[end]!r} after an entry")
        pos = end + 1
    if len(out) != expected:
        raise ValueError(f"expected {expected} entries in the group, found {len(out)}")
    return out
