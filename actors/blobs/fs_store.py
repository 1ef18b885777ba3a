"""The file-system blob store: plain, thread-safe, no actors.

Layout (flat: a session refers to a blob through the ``[blob:<id>]``
reference in its history; the owner file says which session may read it)::

    <root>/blobs/<id>.txt      Text content, the exact UTF-8 bytes
    <root>/blobs/<id>.json     Structured content, compact JSON
    <root>/blobs/<id>.lines    line index of a big text blob (a rebuildable cache)
    <root>/blobs/<id>.jidx     top-level index of a big JSON blob (a rebuildable cache)
    <root>/blobs/<id>.owner    the session that stored the blob (who may read it)
    <root>/blobs/.tmp-<pid>-*  temp files of writes in progress (or interrupted)
    <root>/blobs/.pins/        the pins each live store publishes (actors.blobs.shared_pins)

Guarantees the blob-store actor builds on:

* **Atomic writes.** A blob is written to a temp file in the same directory,
  fsynced and ``os.replace``-d into place, so a blob is either absent or
  complete; a crash leaves at most a ``.tmp-*`` file, which
  :meth:`FsBlobStore.sweep_temp` (also run at construction) removes.
* **Shared directories are safe.** A temp file's name carries the pid of the
  process writing it, and the sweep removes only temp files that no live
  writer can still own: this process's (unless a write of any instance in
  this process is using it), those of dead processes, and any older than
  ``temp_grace_s`` (a pid may be reused, and an unowned legacy name has no
  pid). So a second process -- or a second instance -- on the same root never
  pulls a temp file from under a write in progress.
* **Ids are never raw paths.** Every public method accepts a ``uuid.UUID``
  or a ``str``, validates it with :func:`parse_blob_id` and only ever puts
  the canonical ``str(uuid.UUID(...))`` form into a path.
* **Thread safety.** Any number of threads may call any method
  concurrently: each write has its own temp file, readers open files
  themselves, shared caches are lock-protected, and :meth:`collect` calls are
  serialized.
* **A blob belongs to the session that stored it.** ``store(content,
  owner=session_id)`` writes ``<id>.owner`` (after the blob, before the id is
  returned; a blob whose owner file is missing -- legacy, or a crash in
  between -- belongs to nobody). :meth:`owner` reads it back, so ownership
  survives the actor's restarts and a new process; the ``inspect`` tool reads
  only through :class:`~actors.blobs.ownership.SessionBlobs`, which answers a
  blob of another session exactly as a missing one.
* **Retention never removes a pinned blob, whichever process pinned it.**
  :attr:`FsBlobStore.pins` (a :class:`~actors.blobs.pins.PinTable`) holds what
  live sessions reference, and publishes it under ``.pins/`` for the other
  processes sharing the directory; :meth:`collect` honours its own table and
  every live store's published pins, re-checking each blob just before
  removing it under the directory's collection lock, so a pin taken while a
  collection runs -- here or in another process -- is honoured too.
* **Cheap line ranges.** Text blobs of at least ``index_min_bytes`` get a
  sparse line index (:mod:`actors.blobs.line_index`) written next to them at
  store time and rebuilt if missing or stale, so :meth:`read_lines` seeks
  instead of scanning. Smaller blobs are indexed in memory on first use.
* **Cheap long lines.** :meth:`line_offsets` and :meth:`read_range` give
  byte positions and bounded byte windows, so ``inspect`` of a 100 MB
  single-line blob reads 16 KB, not the line (twice).
* **Parsed JSON is cached; big JSON is indexed.** Blobs are immutable, so
  :meth:`load` keeps the parsed value of recently loaded structured blobs (an
  LRU bounded by their stored bytes, ``parsed_cache_bytes``; a blob over half
  the bound is never cached, so one blob cannot flush the rest). A structured
  array or object of at least ``json_index_min_bytes`` (by default that same
  half bound: exactly the blobs the cache refuses) gets a top-level index
  (:mod:`actors.blobs.json_index`), so ``inspect`` parses only the entries it
  shows (:meth:`json_index`, :meth:`json_part`, whose parses share the LRU).
  Cached values are shared -- treat ``Structured.value`` as read-only (as its
  docstring says).

Blocking I/O: every method touches the disk. The blob-store actor runs them
on the blocking lane; the ``inspect`` tool calls them directly from its
tool-pool thread, which is not a dispatcher thread and may block.

The store is one class over three modules: :mod:`.fs_layout` (ids, file
names, encoding, errors), :mod:`.fs_index` (reading parts of big blobs
through their indexes) and :mod:`.retention` (listing, collection, the
temp-file sweep) -- the last two as mixins of :class:`FsBlobStore`, which
keeps the state, the paths, the write path and whole-blob reads. The public
names of all of them are importable from here.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections import OrderedDict
from pathlib import Path

from pydantic import JsonValue

from fore.actors.blobs.fs_index import IndexedReads, _PartKey
from fore.actors.blobs.fs_layout import (
    _INFLIGHT_IDS,
    _INFLIGHT_LOCK,
    _INFLIGHT_TEMPS,
    _KINDS,
    ENCODING,
    ENCODING_ERRORS,
    INDEX_SUFFIX,
    JSON_INDEX_SUFFIX,
    JSON_SUFFIX,
    OWNER_SUFFIX,
    TEMP_PREFIX,
    TEXT_SUFFIX,
    BlobKindError,
    BlobNotFound,
    BlobStoreError,
    InvalidBlobId,
    encode_content,
    new_blob_id,
    parse_blob_id,
)
from fore.actors.blobs.json_index import JsonIndex
from fore.actors.blobs.line_index import LineIndex
from fore.actors.blobs.pins import PinTable
from fore.actors.blobs.retention import Retention
from fore.actors.blobs.shared_pins import PINS_DIR, ForeignPins, PinJournal
from fore.actors.core.logs import get_logger
from fore.messages.blobs import BlobKind, Content, Structured, Text

log = get_logger(__name__)

MAX_OWNER_BYTES = 64 * 1024
"""Bytes read of an owner file (a session id is far shorter)."""
_OWNER_CACHE_SIZE = 4096
INDEX_MIN_BYTES = 64 * 1024
"""Text blobs at least this big get a persistent line-index sidecar."""

PARSED_CACHE_BYTES = 16 * 1024 * 1024
"""Default bound of the parsed-JSON cache, in stored (compact JSON) bytes.

Parsed JSON takes several times its text size in memory (~5-8x), so this is
roughly 100 MB of RAM at most; a blob over half the bound is never cached."""
TEMP_GRACE_S = 3600.0
"""Temp files older than this are swept whoever wrote them (no write takes an hour)."""
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows; 0 elsewhere


class FsBlobStore(IndexedReads, Retention):
    """A flat directory of immutable blobs (see the module docstring).

    ``max_total_bytes`` and ``max_age_s`` configure :meth:`collect` (``None``:
    no limit). ``grace_s`` protects blobs younger than that from collection:
    set it (e.g. to 60) when :meth:`collect` may run while a just-stored blob
    is not yet in any history -- between ``store`` returning the id and the
    summary entering history, the blob is referenced by nobody. ``fsync=False``
    skips the fsyncs (tests, throwaway stores); atomicity is kept.

    ``pins`` is the retention protection of live sessions (by default a new,
    empty :class:`PinTable` that publishes under ``.pins/`` for other
    processes; an injected table publishes only if it has a journal). It
    belongs to the store rather than to the blob-store actor so it survives
    the actor's restarts: whoever owns the store (the runtime) owns the pins,
    and calls :meth:`close` when it is done. ``parsed_cache_bytes`` bounds the
    parsed-JSON cache; ``json_index_min_bytes`` (default: half of it) is the
    size from which structured blobs get a top-level index; ``temp_grace_s``
    is the age after which the sweep removes any temp file, even one whose
    writer's pid is alive.
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
        pins: PinTable | None = None,
        parsed_cache_bytes: int = PARSED_CACHE_BYTES,
        temp_grace_s: float = TEMP_GRACE_S,
        json_index_min_bytes: int | None = None,
    ) -> None:
        if max_total_bytes is not None and max_total_bytes < 0:
            raise ValueError("max_total_bytes must be >= 0")
        if max_age_s is not None and max_age_s < 0:
            raise ValueError("max_age_s must be >= 0")
        if grace_s < 0:
            raise ValueError("grace_s must be >= 0")
        if parsed_cache_bytes < 0:
            raise ValueError("parsed_cache_bytes must be >= 0")
        if temp_grace_s < 0:
            raise ValueError("temp_grace_s must be >= 0")
        self.root = Path(root)
        self.blobs_dir = self.root / "blobs"
        self.max_total_bytes = max_total_bytes
        self.max_age_s = max_age_s
        self.grace_s = grace_s
        self.temp_grace_s = temp_grace_s
        self.pins_dir = self.blobs_dir / PINS_DIR
        self._own_pins = pins is None
        self.pins = PinTable(journal=PinJournal(self.pins_dir)) if pins is None else pins
        """What live sessions reference: :meth:`collect` never removes these."""
        self._foreign = ForeignPins(self.pins_dir)
        """What the other live stores on this directory pin."""
        self._owners: OrderedDict[uuid.UUID, str] = OrderedDict()
        self._fsync = fsync
        self._index_min_bytes = index_min_bytes
        self._lock = threading.Lock()
        self._collect_lock = threading.Lock()
        self._indexes: OrderedDict[uuid.UUID, LineIndex] = OrderedDict()
        self._parsed: OrderedDict[_PartKey, tuple[int, JsonValue]] = OrderedDict()
        self._parsed_bytes = 0
        self._parsed_cap = parsed_cache_bytes
        self._json_index_min = (
            parsed_cache_bytes // 2 if json_index_min_bytes is None else json_index_min_bytes
        )
        self._json_indexes: OrderedDict[uuid.UUID, tuple[int, JsonIndex | None]] = OrderedDict()
        self.blobs_dir.mkdir(parents=True, exist_ok=True)
        self._dir_key = os.path.realpath(self.blobs_dir)
        self.sweep_temp()

    def close(self) -> None:
        """Withdraw this store's published pins (the runtime closes). Idempotent.

        Also closes the other stores' pin files it holds open. The store
        stays usable; a later pin publishes again, a later collection reopens.
        """
        if self._own_pins:
            self.pins.close()
        self._foreign.close()

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

    def store(self, content: Content, *, owner: str | None = None) -> uuid.UUID:
        """Store ``content`` atomically and return its new UUIDv7 id.

        The id is returned only once the blob is complete and visible, and
        (with ``owner``, a session id) its owner file written; a failure
        raises :class:`BlobStoreError` and leaves no visible blob. Without an
        owner the blob belongs to no session: only trusted code that reads the
        store directly can read it.
        """
        data, suffix = encode_content(content)
        blob_id = new_blob_id()
        busy = (self._dir_key, blob_id)
        with _INFLIGHT_LOCK:
            _INFLIGHT_IDS.add(busy)
        try:
            path = self.blobs_dir / f"{blob_id}{suffix}"
            try:
                self._write_atomic(path, data, durable=self._fsync)
            except OSError as exc:
                raise BlobStoreError(f"could not store blob: {exc}") from exc
            if owner is not None:
                self._write_owner(blob_id, path, owner)
            if suffix == TEXT_SUFFIX and len(data) >= self._index_min_bytes:
                index = LineIndex.build(data)
                self._cache_index(blob_id, index)
                try:
                    self._save_index(blob_id, index)
                except OSError as exc:  # only a cache: a reader rebuilds it
                    log.warning("blob_line_index_not_saved", blob_id=str(blob_id), error=str(exc))
            elif isinstance(content, Structured) and len(data) >= self._json_index_min:
                self._index_json(blob_id, content.value, data)
        finally:
            with _INFLIGHT_LOCK:
                _INFLIGHT_IDS.discard(busy)
        return blob_id

    def _write_owner(self, blob_id: uuid.UUID, path: Path, owner: str) -> None:
        """Write ``<id>.owner``; on failure remove the blob (an id nobody could read is useless).

        Written in place (``O_EXCL``), not through a temp file and a rename,
        and not fsynced: nobody knows the id before :meth:`store` returns, so
        no reader can see the file half-written, and a crash or power loss
        leaves at worst a torn or missing owner file -- a blob that belongs to
        nobody (unreadable, collected in time), the safe direction. This costs
        one small create per store, not three metadata operations.
        """
        data = json.dumps({"owner": owner}, ensure_ascii=False).encode(ENCODING, ENCODING_ERRORS)
        owner_path = self._owner_path(blob_id)
        leftovers = [path]
        try:
            fd = os.open(owner_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o666)
            leftovers.append(owner_path)  # ours from here on
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        except OSError as exc:
            for leftover in leftovers:
                with contextlib.suppress(OSError):
                    leftover.unlink()
            raise BlobStoreError(f"could not store blob: {exc}") from exc
        self._cache_owner(blob_id, owner)

    def _owner_path(self, blob_id: uuid.UUID) -> Path:
        return self.blobs_dir / f"{blob_id}{OWNER_SUFFIX}"

    def _cache_owner(self, blob_id: uuid.UUID, owner: str) -> None:
        with self._lock:
            self._owners[blob_id] = owner
            self._owners.move_to_end(blob_id)
            while len(self._owners) > _OWNER_CACHE_SIZE:
                self._owners.popitem(last=False)

    def owner(self, blob_id: uuid.UUID | str) -> str | None:
        """The session that stored the blob; None if it has no owner or no such blob exists.

        An owner never changes (ids are never reused), so answers are cached;
        a cached owner of a blob removed since is harmless -- reading it then
        finds no blob. A missing, unreadable or malformed owner file is None.
        """
        key = parse_blob_id(blob_id)
        with self._lock:
            cached = self._owners.get(key)
        if cached is not None:
            return cached
        try:
            with self._owner_path(key).open("rb") as fh:
                raw = fh.read(MAX_OWNER_BYTES + 1)
            record = json.loads(raw.decode(ENCODING, ENCODING_ERRORS))
        except (OSError, ValueError, RecursionError):
            return None
        owner = record.get("owner") if isinstance(record, dict) else None
        if not isinstance(owner, str) or len(raw) > MAX_OWNER_BYTES:
            return None
        self._cache_owner(key, owner)
        return owner

    def _write_atomic(self, path: Path, data: bytes, *, durable: bool) -> None:
        """Temp file in the same directory + (fsync) + ``os.replace``.

        On an ordinary failure the temp file is removed; only a crash (or a
        failing cleanup) leaves it behind for :meth:`sweep_temp`.
        """
        # The name is registered *before* the file exists, so a concurrent
        # sweep_temp can never see an unregistered temp file of ours; the pid
        # in it tells other processes' sweeps that a live process owns it.
        name = f"{TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}{path.suffix}"
        tmp = self.blobs_dir / name
        busy = os.path.join(self._dir_key, name)
        with _INFLIGHT_LOCK:
            _INFLIGHT_TEMPS.add(busy)
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
            with _INFLIGHT_LOCK:
                _INFLIGHT_TEMPS.discard(busy)
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
        cached = self._cached_part(key)
        if cached is not None:
            return Structured.model_construct(value=cached[0])
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
                content = Structured.model_construct(value=json.loads(text))
            except ValueError as exc:
                raise BlobStoreError(f"blob {key} is corrupt: {exc}") from exc
            self._cache_part(key, len(raw), content.value)
            return content
        raise BlobNotFound(f"no blob {key}")

    def _cached_part(
        self, blob_id: uuid.UUID, span: tuple[int, int] | None = None
    ) -> tuple[JsonValue] | None:
        """A cached parse (of the whole blob, or of the bytes ``span``) of a blob still on disk.

        The file is stat-ed first: another process's collection may have
        removed the blob, and a cache must not resurrect it. (A 1-tuple, so
        a cached ``null`` is not a miss; None is a miss.)
        """
        key: _PartKey = blob_id if span is None else (blob_id, *span)
        with self._lock:
            hit = self._parsed.get(key)
            if hit is not None:
                self._parsed.move_to_end(key)
        if hit is None:
            return None
        try:
            st = self.path_for(blob_id, "structured").stat()
            if span is not None or st.st_size == hit[0]:
                return (hit[1],)
        except OSError:
            pass
        self._forget_parsed(blob_id)
        return None

    def _cache_part(self, key: _PartKey, size: int, value: JsonValue) -> None:
        if size > self._parsed_cap // 2:  # one huge blob must not flush everything else
            return
        with self._lock:
            previous = self._parsed.pop(key, None)
            if previous is not None:
                self._parsed_bytes -= previous[0]
            self._parsed[key] = (size, value)
            self._parsed_bytes += size
            while self._parsed_bytes > self._parsed_cap and self._parsed:
                _, (dropped, _value) = self._parsed.popitem(last=False)
                self._parsed_bytes -= dropped

    def _forget_parsed(self, blob_id: uuid.UUID) -> None:
        with self._lock:
            for key in [
                k for k in self._parsed if (k[0] if isinstance(k, tuple) else k) == blob_id
            ]:
                self._parsed_bytes -= self._parsed.pop(key)[0]
            self._json_indexes.pop(blob_id, None)


__all__ = [
    "ENCODING",
    "ENCODING_ERRORS",
    "INDEX_MIN_BYTES",
    "INDEX_SUFFIX",
    "JSON_INDEX_SUFFIX",
    "JSON_SUFFIX",
    "MAX_OWNER_BYTES",
    "OWNER_SUFFIX",
    "PARSED_CACHE_BYTES",
    "TEMP_GRACE_S",
    "TEMP_PREFIX",
    "TEXT_SUFFIX",
    "BlobKindError",
    "BlobNotFound",
    "BlobStoreError",
    "FsBlobStore",
    "InvalidBlobId",
    "encode_content",
    "new_blob_id",
    "parse_blob_id",
]
