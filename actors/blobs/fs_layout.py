"""The blob directory's layout: ids, file names, encoding, and the errors.

Everything :class:`~fore.actors.blobs.fs_store.FsBlobStore` and its two
mixins (:mod:`.fs_index`, :mod:`.retention`) agree on about the files:
how an id is validated and minted, which suffix each file has, how content
is encoded, the errors, and the registry of writes in progress in this
process (which the write path fills and the temp-file sweep reads). It sits
below the three so they can share it without importing each other. The
public names are re-exported by :mod:`fore.actors.blobs.fs_store`.
"""

from __future__ import annotations

import json
import threading
import uuid

import uuid_utils

from fore.errors import BlobKindError, BlobNotFound, BlobStoreError, InvalidBlobId
from fore.messages.blobs import BlobKind, Content, Structured, Text

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["BlobKindError", "BlobNotFound", "BlobStoreError", "InvalidBlobId"]

TEXT_SUFFIX = ".txt"
JSON_SUFFIX = ".json"
INDEX_SUFFIX = ".lines"
JSON_INDEX_SUFFIX = ".jidx"
OWNER_SUFFIX = ".owner"
_SIDECARS = (INDEX_SUFFIX, JSON_INDEX_SUFFIX, OWNER_SUFFIX)

TEMP_PREFIX = ".tmp-"

ENCODING = "utf-8"
ENCODING_ERRORS = "surrogatepass"
"""Lone surrogates (e.g. from ``os.fsdecode`` of odd file names) survive a round trip."""

_KINDS: tuple[BlobKind, ...] = ("text", "structured")


def parse_blob_id(value: object) -> uuid.UUID:
    """Validate a blob id: a ``uuid.UUID`` or a string ``uuid.UUID`` accepts.

    Surrounding whitespace is ignored. Anything else (other types, non-UUID
    strings) raises :class:`InvalidBlobId`. Callers put only
    ``str(parse_blob_id(x))`` into paths, so ``../etc/passwd`` can never
    reach the file system.
    """
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value.strip())
        except ValueError:
            raise InvalidBlobId(f"not a UUID: {value[:80]!r}") from None
    raise InvalidBlobId(f"a blob id must be a uuid.UUID or a str, not {type(value).__name__}")


def new_blob_id() -> uuid.UUID:
    """A fresh UUIDv7 (time-ordered) as a stdlib ``uuid.UUID``."""
    return uuid.UUID(bytes=uuid_utils.uuid7().bytes)


def encode_content(content: Content) -> tuple[bytes, str]:
    """The on-disk bytes and file suffix of ``content``.

    Text is stored byte-exact; structured content as compact JSON with
    non-ASCII characters kept as they are (smaller, and what the model sees).
    """
    if isinstance(content, Text):
        return content.text.encode(ENCODING, ENCODING_ERRORS), TEXT_SUFFIX
    if isinstance(content, Structured):
        raw = json.dumps(content.value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return raw.encode(ENCODING, ENCODING_ERRORS), JSON_SUFFIX
    raise TypeError(f"not blob content: {type(content).__name__}")


# Writes in progress in *this process*, across every FsBlobStore instance: the
# sweep of one instance must not remove the temp file another one is writing.
_INFLIGHT_LOCK = threading.Lock()
_INFLIGHT_TEMPS: set[str] = set()
"""Absolute paths of temp files being written."""
_INFLIGHT_IDS: set[tuple[str, uuid.UUID]] = set()
"""``(blobs_dir, id)`` of blobs being stored (their sidecar may precede the sweep)."""
