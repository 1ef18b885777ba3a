"""Reading parts of big blobs: the line index, the JSON index, byte ranges.

A mixin of :class:`~fore.actors.blobs.fs_store.FsBlobStore` (not used
alone): the methods that read a slice of a blob without reading the whole
of it -- lines through the sparse line index (:mod:`fore.actors.blobs.line_index`),
entries of a big JSON array or object through its top-level index
(:mod:`fore.actors.blobs.json_index`), bounded byte windows -- and the
building, caching and saving of those indexes. The store's state it uses is
declared below and set up by :meth:`FsBlobStore.__init__`; every cache is
guarded by the store's one ``_lock``.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pydantic import JsonValue

from fore.actors.blobs.fs_layout import (
    ENCODING,
    ENCODING_ERRORS,
    INDEX_SUFFIX,
    JSON_INDEX_SUFFIX,
    BlobKindError,
    BlobNotFound,
    BlobStoreError,
    parse_blob_id,
)
from fore.actors.blobs.json_index import JsonIndex, encode_indexed
from fore.actors.blobs.line_index import LineIndex
from fore.actors.core.logs import get_logger

if TYPE_CHECKING:
    from fore.messages.blobs import BlobKind

_PartKey = uuid.UUID | tuple[uuid.UUID, int, int]
"""A parsed-JSON cache key: a blob id (the whole blob), or a blob id and a byte span."""

# The store's one logger: its events keep the name they had before the split.
log = get_logger("fore.actors.blobs.fs_store")

_INDEX_CACHE_SIZE = 32


class IndexedReads:
    """Line ranges, byte ranges and JSON parts of a blob (a mixin of ``FsBlobStore``)."""

    # The store's state this mixin reads and writes (set up by FsBlobStore).
    blobs_dir: Path
    _lock: threading.Lock
    _index_min_bytes: int
    _indexes: OrderedDict[uuid.UUID, LineIndex]
    _json_index_min: int
    _json_indexes: OrderedDict[uuid.UUID, tuple[int, JsonIndex | None]]

    if TYPE_CHECKING:  # FsBlobStore's methods this mixin calls

        def path_for(self, blob_id: uuid.UUID | str, kind: BlobKind) -> Path: ...

        def _find(self, blob_id: uuid.UUID) -> tuple[Path, BlobKind]: ...

        def _write_atomic(self, path: Path, data: bytes, *, durable: bool) -> None: ...

        def _cached_part(
            self, blob_id: uuid.UUID, span: tuple[int, int] | None = None
        ) -> tuple[JsonValue] | None: ...

        def _cache_part(self, key: _PartKey, size: int, value: JsonValue) -> None: ...

    def _json_index_path(self, blob_id: uuid.UUID) -> Path:
        return self.blobs_dir / f"{blob_id}{JSON_INDEX_SUFFIX}"

    def _index_json(self, blob_id: uuid.UUID, value: JsonValue, data: bytes) -> JsonIndex | None:
        """Build (and save) the top-level index of a structured blob whose bytes are ``data``."""
        built = encode_indexed(value)
        index = None
        if built is not None:
            if built[0] == data:
                index = built[1]
                try:
                    self._write_atomic(
                        self._json_index_path(blob_id), index.to_bytes(), durable=False
                    )
                except OSError as exc:  # only a cache: a reader rebuilds it
                    log.warning("blob_json_index_not_saved", blob_id=str(blob_id), error=str(exc))
            else:  # not our compact encoding (written by something else): no offsets to trust
                log.warning("blob_json_index_mismatch", blob_id=str(blob_id))
        self._cache_json_index(blob_id, len(data), index)
        return index

    def _cache_json_index(self, blob_id: uuid.UUID, size: int, index: JsonIndex | None) -> None:
        with self._lock:
            self._json_indexes[blob_id] = (size, index)
            self._json_indexes.move_to_end(blob_id)
            while len(self._json_indexes) > _INDEX_CACHE_SIZE:
                self._json_indexes.popitem(last=False)

    def json_index(self, blob_id: uuid.UUID | str) -> JsonIndex | None:
        """The top-level index of a big structured array/object; None for any other blob.

        Memory cache, then the sidecar, then a rebuild (one full parse) for
        a blob that should have one; each is checked against the blob's
        size. :class:`BlobNotFound` if absent, :class:`BlobKindError` for text.
        """
        key = parse_blob_id(blob_id)
        path = self.path_for(key, "structured")
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            if self.path_for(key, "text").exists():
                raise BlobKindError(f"blob {key} is text, not structured") from None
            raise BlobNotFound(f"no blob {key}") from None
        except OSError as exc:
            raise BlobStoreError(f"could not read blob {key}: {exc}") from exc
        with self._lock:
            hit = self._json_indexes.get(key)
            if hit is not None:
                self._json_indexes.move_to_end(key)
        if hit is not None and hit[0] == size:
            return hit[1]
        if size < self._json_index_min:
            return None
        with contextlib.suppress(FileNotFoundError, ValueError):
            index = JsonIndex.from_bytes(self._json_index_path(key).read_bytes())
            if index.size == size:
                self._cache_json_index(key, size, index)
                return index
        try:
            raw = path.read_bytes()
            value = json.loads(raw.decode(ENCODING, ENCODING_ERRORS))
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {key}") from None
        except OSError as exc:
            raise BlobStoreError(f"could not read blob {key}: {exc}") from exc
        except ValueError as exc:
            raise BlobStoreError(f"blob {key} is corrupt: {exc}") from exc
        log.info("blob_json_index_rebuilt", blob_id=str(key), size=size)
        return self._index_json(key, value, raw)

    def json_part(self, blob_id: uuid.UUID | str, start: int, stop: int) -> JsonValue:
        """The parsed JSON value stored in bytes ``start..stop`` of a structured blob.

        For one entry or member value located with :meth:`json_index`;
        parses share the LRU of :meth:`load` (keyed by blob and span).
        """
        key = parse_blob_id(blob_id)
        cached = self._cached_part(key, (start, stop))
        if cached is not None:
            return cached[0]
        raw = self.read_range(key, start, stop)
        try:
            value: JsonValue = json.loads(raw.decode(ENCODING, ENCODING_ERRORS))
        except ValueError as exc:
            raise BlobStoreError(f"blob {key} is corrupt at bytes {start}..{stop}: {exc}") from exc
        self._cache_part((key, start, stop), len(raw), value)
        return value

    def read_range(self, blob_id: uuid.UUID | str, start: int, stop: int) -> bytes:
        """Bytes ``start..stop`` (0-based, end-exclusive, clamped) of a blob of either kind."""
        if start < 0 or stop < 0:
            raise ValueError("byte offsets must be non-negative")
        key = parse_blob_id(blob_id)
        path, _ = self._find(key)
        if stop <= start:
            return b""
        try:
            with path.open("rb") as fh:
                fh.seek(start)
                return fh.read(stop - start)
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {key}") from None
        except OSError as exc:
            raise BlobStoreError(f"could not read blob {key}: {exc}") from exc

    def line_count(self, blob_id: uuid.UUID | str) -> int:
        """Number of lines of a text blob (see :mod:`actors.blobs.line_index`)."""
        with self._open_text(parse_blob_id(blob_id)) as (_fh, index):
            return index.line_count

    def read_lines(self, blob_id: uuid.UUID | str, start: int, stop: int) -> str:
        """Lines ``start..stop`` of a text blob: 0-based, half-open, clamped.

        Line terminators (``\\n`` or ``\\r\\n``) are kept, so
        ``read_lines(id, 0, line_count(id))`` is the whole text. An empty or
        out-of-range span gives ``""``; negative numbers raise ``ValueError``;
        a structured blob raises :class:`BlobKindError`. Cost: a seek plus at
        most ``stride`` skipped lines, independent of the blob's size.
        """
        if start < 0 or stop < 0:
            raise ValueError("line numbers must be non-negative")
        with self._open_text(parse_blob_id(blob_id)) as (fh, index):
            raw = index.read_range(fh, start, stop)
        return raw.decode(ENCODING, ENCODING_ERRORS)

    def line_offsets(self, blob_id: uuid.UUID | str, lines: Sequence[int]) -> list[int]:
        """Byte offset where each 0-based line starts (the blob's size past the last line).

        A seek and at most ``stride - 1`` skipped lines per entry, read in
        bounded pieces: very long lines cost a read, never their size in
        memory (:meth:`LineIndex.offset_of`). Text blobs only.
        """
        with self._open_text(parse_blob_id(blob_id)) as (fh, index):
            return [index.offset_of(fh, line) for line in lines]

    @contextlib.contextmanager
    def _open_text(self, blob_id: uuid.UUID) -> Iterator[tuple[IO[bytes], LineIndex]]:
        path = self.path_for(blob_id, "text")
        try:
            fh = path.open("rb")
        except FileNotFoundError:
            if self.path_for(blob_id, "structured").exists():
                raise BlobKindError(f"blob {blob_id} is structured, not text") from None
            raise BlobNotFound(f"no blob {blob_id}") from None
        except OSError as exc:
            raise BlobStoreError(f"could not read blob {blob_id}: {exc}") from exc
        with fh:
            try:
                index = self._index_for(blob_id, fh)
            except OSError as exc:
                raise BlobStoreError(f"could not index blob {blob_id}: {exc}") from exc
            yield fh, index

    def _index_path(self, blob_id: uuid.UUID) -> Path:
        return self.blobs_dir / f"{blob_id}{INDEX_SUFFIX}"

    def _cache_index(self, blob_id: uuid.UUID, index: LineIndex) -> None:
        with self._lock:
            self._indexes[blob_id] = index
            self._indexes.move_to_end(blob_id)
            while len(self._indexes) > _INDEX_CACHE_SIZE:
                self._indexes.popitem(last=False)

    def _index_for(self, blob_id: uuid.UUID, fh: IO[bytes]) -> LineIndex:
        """The blob's line index: memory cache, then sidecar, then a rebuild.

        Every source is checked against the open file's size, so a stale
        sidecar (or a cached index of a since-replaced file) is never used.
        """
        size = os.fstat(fh.fileno()).st_size
        with self._lock:
            index = self._indexes.get(blob_id)
            if index is not None:
                self._indexes.move_to_end(blob_id)
        if index is not None and index.size == size:
            return index
        index = None
        if size >= self._index_min_bytes:
            with contextlib.suppress(FileNotFoundError, ValueError):
                index = LineIndex.from_bytes(self._index_path(blob_id).read_bytes())
                if index.size != size:
                    index = None
        if index is None:
            index = self._build_index(fh, size)
            if size >= self._index_min_bytes:
                log.info("blob_line_index_rebuilt", blob_id=str(blob_id), size=size)
                with contextlib.suppress(OSError):
                    self._save_index(blob_id, index)
        self._cache_index(blob_id, index)
        return index

    @staticmethod
    def _build_index(fh: IO[bytes], size: int) -> LineIndex:
        if size == 0:
            return LineIndex.build(b"")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return LineIndex.build(mapped)

    def _save_index(self, blob_id: uuid.UUID, index: LineIndex) -> None:
        # No fsync: the sidecar is a cache; a torn or missing one is rebuilt.
        self._write_atomic(self._index_path(blob_id), index.to_bytes(), durable=False)
