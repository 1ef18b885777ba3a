"""The file-system blob store: plain, thread-safe, no actors.

Layout (flat, independent of sessions -- a session refers to a blob only
through the ``[blob:<id>]`` reference in its history)::

    <root>/blobs/<id>.txt      Text content, the exact UTF-8 bytes
    <root>/blobs/<id>.json     Structured content, compact JSON
    <root>/blobs/<id>.lines    line index of a big text blob (a rebuildable cache)
    <root>/blobs/.tmp-*        temp files of writes in progress (or interrupted)

Guarantees the blob-store actor builds on:

* **Atomic writes.** A blob is written to a temp file in the same directory,
  fsynced and ``os.replace``-d into place, so a blob is either absent or
  complete; a crash leaves at most a ``.tmp-*`` file, which
  :meth:`FsBlobStore.sweep_temp` (also run at construction) removes.
* **Ids are never raw paths.** Every public method accepts a ``uuid.UUID``
  or a ``str``, validates it with :func:`parse_blob_id` and only ever puts
  the canonical ``str(uuid.UUID(...))`` form into a path.
* **Thread safety.** Any number of threads may call any method
  concurrently: each write has its own temp file, readers open files
  themselves, shared caches are lock-protected, and :meth:`collect` calls are
  serialized. One root belongs to one ``FsBlobStore`` (one process): the
  startup sweep removes every temp file it finds.
* **Cheap line ranges.** Text blobs of at least ``index_min_bytes`` get a
  sparse line index (:mod:`actors.blobs.line_index`) written next to them at
  store time and rebuilt if missing or stale, so :meth:`read_lines` seeks
  instead of scanning. Smaller blobs are indexed in memory on first use.

Blocking I/O: every method touches the disk; the actor must run them on the
blocking lane.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import structlog
import uuid_utils

from actors.blobs.line_index import LineIndex
from messages.base import Message
from messages.blobs import BlobKind, Content, Structured, Text

log = structlog.get_logger(__name__)

TEXT_SUFFIX = ".txt"
JSON_SUFFIX = ".json"
INDEX_SUFFIX = ".lines"
TEMP_PREFIX = ".tmp-"
INDEX_MIN_BYTES = 64 * 1024
"""Text blobs at least this big get a persistent line-index sidecar."""

ENCODING = "utf-8"
ENCODING_ERRORS = "surrogatepass"
"""Lone surrogates (e.g. from ``os.fsdecode`` of odd file names) survive a round trip."""

_INDEX_CACHE_SIZE = 32
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows; 0 elsewhere
_KINDS: tuple[BlobKind, ...] = ("text", "structured")


class BlobStoreError(Exception):
    """Base of every blob-store failure (I/O errors, corrupt blobs, ...)."""


class InvalidBlobId(BlobStoreError, ValueError):
    """A blob id that is not a UUID (or not a ``uuid.UUID``/``str`` at all)."""


class BlobNotFound(BlobStoreError, LookupError):
    """No blob with this id (never stored, or removed by retention)."""


class BlobKindError(BlobStoreError, TypeError):
    """A text-only operation (line access) on a structured blob."""


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


class CollectReport(Message):
    """What one :meth:`FsBlobStore.collect` run did.

    ``protected`` lists referenced blobs that the age or size limit would
    otherwise have removed; ``over_budget`` is true when the blobs left
    (referenced or within the grace period) still exceed ``max_total_bytes``.
    Sizes count blob files plus their line-index sidecars.
    """

    removed: tuple[uuid.UUID, ...] = ()
    removed_bytes: int = 0
    kept: int = 0
    kept_bytes: int = 0
    protected: tuple[uuid.UUID, ...] = ()
    over_budget: bool = False


@dataclass(frozen=True)
class _Entry:
    blob_id: uuid.UUID
    path: Path
    size: int
    mtime: float


class FsBlobStore:
    """A flat directory of immutable blobs (see the module docstring).

    ``max_total_bytes`` and ``max_age_s`` configure :meth:`collect` (``None``:
    no limit). ``grace_s`` protects blobs younger than that from collection:
    set it (e.g. to 60) when :meth:`collect` may run while a just-stored blob
    is not yet in any history -- between ``store`` returning the id and the
    summary entering history, the blob is referenced by nobody. ``fsync=False``
    skips the fsyncs (tests, throwaway stores); atomicity is kept.
    """

    def __init__(
        self,
        root: Path,
        *,
        max_total_bytes: int | None = None,
        max_age_s: float | None = None,
        grace_s: float = 0.0,
        fsync: bool = True,
        index_min_bytes: int = INDEX_MIN_BYTES,
    ) -> None:
        if max_total_bytes is not None and max_total_bytes < 0:
            raise ValueError("max_total_bytes must be >= 0")
        if max_age_s is not None and max_age_s < 0:
            raise ValueError("max_age_s must be >= 0")
        if grace_s < 0:
            raise ValueError("grace_s must be >= 0")
        self.root = Path(root)
        self.blobs_dir = self.root / "blobs"
        self.max_total_bytes = max_total_bytes
        self.max_age_s = max_age_s
        self.grace_s = grace_s
        self._fsync = fsync
        self._index_min_bytes = index_min_bytes
        self._lock = threading.Lock()
        self._collect_lock = threading.Lock()
        self._inflight_temps: set[str] = set()
        self._inflight_ids: set[uuid.UUID] = set()
        self._indexes: OrderedDict[uuid.UUID, LineIndex] = OrderedDict()
        self.blobs_dir.mkdir(parents=True, exist_ok=True)
        self.sweep_temp()

    # ------------------------------------------------------------------ paths

    def path_for(self, blob_id: uuid.UUID | str, kind: BlobKind) -> Path:
        """Where a blob of ``kind`` with this id lives (whether or not it exists)."""
        suffix = TEXT_SUFFIX if kind == "text" else JSON_SUFFIX
        return self.blobs_dir / f"{parse_blob_id(blob_id)}{suffix}"

    def _find(self, blob_id: uuid.UUID) -> tuple[Path, BlobKind]:
        for kind in _KINDS:
            path = self.path_for(blob_id, kind)
            if path.exists():
                return path, kind
        raise BlobNotFound(f"no blob {blob_id}")

    # ------------------------------------------------------------------ write

    def store(self, content: Content) -> uuid.UUID:
        """Store ``content`` atomically and return its new UUIDv7 id.

        The id is returned only once the blob is complete and visible; a
        failure raises :class:`BlobStoreError` and leaves no visible blob.
        """
        data, suffix = encode_content(content)
        blob_id = new_blob_id()
        with self._lock:
            self._inflight_ids.add(blob_id)
        try:
            try:
                self._write_atomic(self.blobs_dir / f"{blob_id}{suffix}", data, durable=self._fsync)
            except OSError as exc:
                raise BlobStoreError(f"could not store blob: {exc}") from exc
            if suffix == TEXT_SUFFIX and len(data) >= self._index_min_bytes:
                index = LineIndex.build(data)
                self._cache_index(blob_id, index)
                try:
                    self._save_index(blob_id, index)
                except OSError as exc:  # only a cache: a reader rebuilds it
                    log.warning("blob_line_index_not_saved", blob_id=str(blob_id), error=str(exc))
        finally:
            with self._lock:
                self._inflight_ids.discard(blob_id)
        return blob_id

    def _write_atomic(self, path: Path, data: bytes, *, durable: bool) -> None:
        """Temp file in the same directory + (fsync) + ``os.replace``.

        On an ordinary failure the temp file is removed; only a crash (or a
        failing cleanup) leaves it behind for :meth:`sweep_temp`.
        """
        # The name is registered *before* the file exists, so a concurrent
        # sweep_temp can never see an unregistered temp file of ours.
        name = f"{TEMP_PREFIX}{uuid.uuid4().hex}{path.suffix}"
        tmp = self.blobs_dir / name
        with self._lock:
            self._inflight_temps.add(name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o666)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    if durable:
                        fh.flush()
                        os.fsync(fh.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        finally:
            with self._lock:
                self._inflight_temps.discard(name)
        if durable:
            self._fsync_dir()

    def _fsync_dir(self) -> None:
        # Makes the rename itself durable; best effort (not every FS allows it).
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.blobs_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    # ------------------------------------------------------------------- read

    def exists(self, blob_id: uuid.UUID | str) -> bool:
        """Whether a complete blob with this id is stored."""
        key = parse_blob_id(blob_id)
        return any(self.path_for(key, kind).exists() for kind in _KINDS)

    def kind(self, blob_id: uuid.UUID | str) -> BlobKind:
        """``"text"`` or ``"structured"``; :class:`BlobNotFound` if absent."""
        return self._find(parse_blob_id(blob_id))[1]

    def size(self, blob_id: uuid.UUID | str) -> int:
        """The blob's stored size in bytes (UTF-8 text, or compact JSON)."""
        path, _ = self._find(parse_blob_id(blob_id))
        try:
            return path.stat().st_size
        except FileNotFoundError:
            raise BlobNotFound(f"no blob {blob_id}") from None

    def load(self, blob_id: uuid.UUID | str) -> Content:
        """The whole content; :class:`BlobNotFound` if absent.

        Loaded values are not re-validated: they were validated when stored,
        and re-validating a large JSON document would double the cost.
        """
        key = parse_blob_id(blob_id)
        for kind in _KINDS:
            path = self.path_for(key, kind)
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise BlobStoreError(f"could not read blob {key}: {exc}") from exc
            try:
                text = raw.decode(ENCODING, ENCODING_ERRORS)
                if kind == "text":
                    return Text.model_construct(text=text)
                return Structured.model_construct(value=json.loads(text))
            except ValueError as exc:
                raise BlobStoreError(f"blob {key} is corrupt: {exc}") from exc
        raise BlobNotFound(f"no blob {key}")

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

    # -------------------------------------------------------------- line index

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

    # --------------------------------------------------------------- retention

    def _scan(self) -> list[_Entry]:
        entries: list[_Entry] = []
        with os.scandir(self.blobs_dir) as it:
            for entry in it:
                stem, dot, ext = entry.name.rpartition(".")
                if not dot or f".{ext}" not in (TEXT_SUFFIX, JSON_SUFFIX):
                    continue
                try:
                    blob_id = uuid.UUID(stem)
                except ValueError:
                    continue  # not ours: never touch foreign files
                if str(blob_id) != stem:
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                size = st.st_size
                if ext == TEXT_SUFFIX[1:]:
                    with contextlib.suppress(OSError):
                        size += self._index_path(blob_id).stat().st_size
                entries.append(_Entry(blob_id, Path(entry.path), size, st.st_mtime))
        return entries

    def blob_ids(self) -> list[uuid.UUID]:
        """Ids of every stored blob, oldest first."""
        return [e.blob_id for e in sorted(self._scan(), key=lambda e: (e.mtime, e.blob_id))]

    def total_bytes(self) -> int:
        """Bytes used by blobs and their line indexes."""
        return sum(e.size for e in self._scan())

    def delete(self, blob_id: uuid.UUID | str) -> bool:
        """Remove one blob (and its index); ``False`` if it was not there."""
        key = parse_blob_id(blob_id)
        removed = False
        for kind in _KINDS:
            with contextlib.suppress(FileNotFoundError):
                self.path_for(key, kind).unlink()
                removed = True
        with contextlib.suppress(FileNotFoundError):
            self._index_path(key).unlink()
        with self._lock:
            self._indexes.pop(key, None)
        return removed

    def collect(self, referenced: Collection[uuid.UUID], now: float | None = None) -> CollectReport:
        """Apply retention; never remove a blob whose id is in ``referenced``.

        ``referenced`` must hold every blob id referenced by a live session's
        history (see :func:`actors.blobs.summary.referenced_blob_ids`). First
        every unreferenced blob older than ``max_age_s`` goes; then, oldest
        first, unreferenced blobs go until the total is at most
        ``max_total_bytes``. Blobs younger than ``grace_s`` always stay. Age is
        ``now - mtime`` (``now`` defaults to ``time.time()``; tests pass it).
        """
        now = time.time() if now is None else now
        refs = {parse_blob_id(r) for r in referenced}
        with self._collect_lock:
            entries = sorted(self._scan(), key=lambda e: (e.mtime, e.blob_id))
            removed: list[_Entry] = []
            protected: dict[uuid.UUID, None] = {}
            kept: list[_Entry] = []
            for entry in entries:
                age = now - entry.mtime
                if self.max_age_s is not None and age > self.max_age_s:
                    if entry.blob_id in refs:
                        protected[entry.blob_id] = None
                    elif age >= self.grace_s and self._remove(entry):
                        removed.append(entry)
                        continue
                kept.append(entry)
            total = sum(e.size for e in kept)
            if self.max_total_bytes is not None:
                for entry in list(kept):
                    if total <= self.max_total_bytes:
                        break
                    if entry.blob_id in refs:
                        protected[entry.blob_id] = None
                    elif now - entry.mtime >= self.grace_s and self._remove(entry):
                        removed.append(entry)
                        kept.remove(entry)
                        total -= entry.size
            report = CollectReport(
                removed=tuple(e.blob_id for e in removed),
                removed_bytes=sum(e.size for e in removed),
                kept=len(kept),
                kept_bytes=total,
                protected=tuple(protected),
                over_budget=self.max_total_bytes is not None and total > self.max_total_bytes,
            )
        if removed or report.over_budget:
            log.info(
                "blob_collect",
                removed=len(removed),
                removed_bytes=report.removed_bytes,
                kept=report.kept,
                kept_bytes=report.kept_bytes,
                protected=len(report.protected),
                over_budget=report.over_budget,
            )
        return report

    def _remove(self, entry: _Entry) -> bool:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("blob_remove_failed", blob_id=str(entry.blob_id), error=str(exc))
            return False
        with contextlib.suppress(OSError):
            self._index_path(entry.blob_id).unlink()
        with self._lock:
            self._indexes.pop(entry.blob_id, None)
        return True

    def sweep_temp(self) -> int:
        """Remove leftovers of interrupted writes; return how many files went.

        Leftovers are ``.tmp-*`` files (a write that never reached its
        rename) and line-index sidecars whose blob is gone. Writes in
        progress in this instance are skipped, so sweeping is safe at any
        time; called by the constructor.
        """
        swept = 0
        with os.scandir(self.blobs_dir) as it:
            names = [e.name for e in it if e.is_file(follow_symlinks=False)]
        # Snapshot the writes in progress only *after* listing: a write
        # registers its temp name before creating the file, so every temp file
        # in the listing that is still being written is in this snapshot.
        with self._lock:
            busy_temps = set(self._inflight_temps)
            busy_ids = set(self._inflight_ids)
        present = set(names)
        for name in names:
            if name.startswith(TEMP_PREFIX):
                if name in busy_temps:
                    continue
            elif name.endswith(INDEX_SUFFIX):
                stem = name[: -len(INDEX_SUFFIX)]
                if f"{stem}{TEXT_SUFFIX}" in present:
                    continue
                try:
                    if uuid.UUID(stem) in busy_ids or str(uuid.UUID(stem)) != stem:
                        continue
                except ValueError:
                    continue
                if (self.blobs_dir / f"{stem}{TEXT_SUFFIX}").exists():
                    continue
            else:
                continue
            with contextlib.suppress(FileNotFoundError):
                (self.blobs_dir / name).unlink()
                swept += 1
        if swept:
            log.info("blob_temp_swept", files=swept)
        return swept
