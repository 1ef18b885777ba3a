"""What the text and JSON readers of ``inspect`` share.

:class:`BlobReader`, the interface they read a blob through (the store
implements it); the output cap every answer is held to, with the marker that
names the selector that reads on; the wrong-type error; and cutting raw bytes
on UTF-8 character boundaries, so a multi-byte character is never split.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from pydantic import JsonValue

from fore.actors.blobs.fs_store import ENCODING, ENCODING_ERRORS
from fore.actors.blobs.json_index import JsonIndex
from fore.actors.blobs.selectors.grammar import InspectError
from fore.actors.blobs.summary import cut_utf8, utf8_size
from fore.messages.blobs import BlobKind, BlobLimits, Content

PREVIEW_WIDTH = 300
"""Characters shown per preview line in the overview."""


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


def _marker(limits: BlobLimits, hint: str) -> str:
    return f"\n…[truncated: inspect output is capped at {limits.inspect_output_cap} bytes; {hint}]"


def _cap(text: str, limits: BlobLimits, hint: str) -> str:
    if utf8_size(text) <= limits.inspect_output_cap:
        return text
    return cut_utf8(text, limits.inspect_output_cap, _marker(limits, hint))


def _wrong_type(sel_kind: str, what: str, blob_desc: str, instead: str) -> InspectError:
    return InspectError(f"{sel_kind}: {what}, but this blob is {blob_desc}. Instead, {instead}.")


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
