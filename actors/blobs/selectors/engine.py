"""The ``inspect`` entry point: parse the selector, read the blob, dispatch by kind.

:func:`inspect_blob` is the whole tool minus the actor plumbing; it maps the
store's errors to :class:`~fore.actors.blobs.selectors.grammar.InspectError`
and hands text blobs to :mod:`.text` and structured ones to :mod:`.json`.
"""

from __future__ import annotations

import uuid

from pydantic import JsonValue

from fore.actors.blobs.fs_store import BlobNotFound, BlobStoreError, InvalidBlobId, parse_blob_id
from fore.actors.blobs.selectors.grammar import InspectError, _quote, parse_selector
from fore.actors.blobs.selectors.json import IndexedTop, MemoryTop, TopLevel, _inspect_json
from fore.actors.blobs.selectors.reader import BlobReader
from fore.actors.blobs.selectors.text import _inspect_text
from fore.actors.blobs.summary import DEFAULT_LIMITS, cut_utf8
from fore.messages.blobs import BlobLimits, Text

MAX_BLOB_ID_CHARS = 256
"""Longest blob id text parsed (a UUID in any spelling ``uuid.UUID`` accepts is shorter)."""


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
