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
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import uuid_utils
from pydantic import JsonValue

from fore.actors.blobs.json_index import JsonIndex, encode_indexed
from fore.actors.blobs.line_index import LineIndex
from fore.actors.blobs.pins import PinTable
from fore.actors.blobs.shared_pins import (
    COLLECT_LOCK_TIMEOUT_S,
    PINS_DIR,
    ForeignPins,
    PinJournal,
    gc_lock,
)
from fore.actors.core.logs import get_logger
from fore.errors import ForeError
from fore.messages.blob_store import CollectReport
from fore.messages.blobs import BlobKind, Content, Structured, Text

_PartKey = uuid.UUID | tuple[uuid.UUID, int, int]
"""A parsed-JSON cache key: a blob id (the whole blob), or a blob id and a byte span."""

log = get_logger(__name__)

TEXT_SUFFIX = ".txt"
JSON_SUFFIX = ".json"
INDEX_SUFFIX = ".lines"
JSON_INDEX_SUFFIX = ".jidx"
OWNER_SUFFIX = ".owner"
_SIDECARS = (INDEX_SUFFIX, JSON_INDEX_SUFFIX, OWNER_SUFFIX)
MAX_OWNER_BYTES = 64 * 1024
"""Bytes read of an owner file (a session id is far shorter)."""
_OWNER_CACHE_SIZE = 4096
TEMP_PREFIX = ".tmp-"
INDEX_MIN_BYTES = 64 * 1024
"""Text blobs at least this big get a persistent line-index sidecar."""

ENCODING = "utf-8"
ENCODING_ERRORS = "surrogatepass"
"""Lone surrogates (e.g. from ``os.fsdecode`` of odd file names) survive a round trip."""

_INDEX_CACHE_SIZE = 32
PARSED_CACHE_BYTES = 16 * 1024 * 1024
"""Default bound of the parsed-JSON cache, in stored (compact JSON) bytes.

Parsed JSON takes several times its text size in memory (~5-8x), so this is
roughly 100 MB of RAM at most; a blob over half the bound is never cached."""
TEMP_GRACE_S = 3600.0
"""Temp files older than this are swept whoever wrote them (no write takes an hour)."""
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows; 0 elsewhere
_KINDS: tuple[BlobKind, ...] = ("text", "structured")


class BlobStoreError(ForeError):
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


# Writes in progress in *this process*, across every FsBlobStore instance: the
# sweep of one instance must not remove the temp file another one is writing.
_INFLIGHT_LOCK = threading.Lock()
_INFLIGHT_TEMPS: set[str] = set()
"""Absolute paths of temp files being written."""
_INFLIGHT_IDS: set[tuple[str, uuid.UUID]] = set()
"""``(blobs_dir, id)`` of blobs being stored (their sidecar may precede the sweep)."""


def _temp_owner(name: str) -> int | None:
    """The pid in a ``.tmp-<pid>-<hex><suffix>`` name (None: a legacy or foreign name)."""
    pid, dash, _rest = name[len(TEMP_PREFIX) :].partition("-")
    if not dash or not pid.isascii() or not pid.isdigit():
        return None
    value = int(pid)
    return value if value > 0 else None


def _pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (a reused pid counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return True  # cannot tell: keep its files
    return True


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

        The store stays usable; a later pin publishes again.
        """
        if self._own_pins:
            self.pins.close()

    # ------------------------------------------------------------------ paths

    def path_for(self, blob_id: uuid.UUID | str, kind: BlobKind) -> Path:
        """Where a blob of ``kind`` with this id lives (whether or not it exists)."""
        suffix = TEXT_SUFFIX if kind == "text" else JSON_SUFFIX
        return self.blobs_dir / f"{parse_blob_id(blob_id)}{suffix}"

    def _json_index_path(self, blob_id: uuid.UUID) -> Path:
        return self.blobs_dir / f"{blob_id}{JSON_INDEX_SUFFIX}"

    def _find(self, blob_id: uuid.UUID) -> tuple[Path, BlobKind]:
        for kind in _KINDS:
            path = self.path_for(blob_id, kind)
            if path.exists():
                return path, kind
        raise BlobNotFound(f"no blob {blob_id}")

    # ------------------------------------------------------------------ write

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

    # ------------------------------------------------------------ big JSON blobs

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
                sidecar = (
                    self._index_path(blob_id)
                    if ext == TEXT_SUFFIX[1:]
                    else self._json_index_path(blob_id)
                )
                with contextlib.suppress(OSError):
                    size += sidecar.stat().st_size
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
        for sidecar in (self._index_path(key), self._json_index_path(key), self._owner_path(key)):
            with contextlib.suppress(FileNotFoundError):
                sidecar.unlink()
        with self._lock:
            self._indexes.pop(key, None)
            self._owners.pop(key, None)
        self._forget_parsed(key)
        return removed

    def collect(
        self,
        referenced: Collection[uuid.UUID | str] = (),
        now: float | None = None,
        *,
        pins: PinTable | None = None,
        confirm: Callable[[], Collection[uuid.UUID | str]] | None = None,
    ) -> CollectReport:
        """Apply retention; never remove a referenced or pinned blob.

        Protected are the ids in ``referenced`` (e.g.
        :func:`actors.blobs.summary.referenced_blob_ids` of live histories),
        every blob pinned in :attr:`pins`, and in ``pins`` when another table
        is passed, and every blob another live store on this directory
        publishes as pinned (:mod:`actors.blobs.shared_pins`). Pins are
        re-checked right before each removal under the directory's
        collection lock, so a pin taken while this runs -- in this process or
        another -- still protects its blob; a blob whose lock cannot be had in
        time is kept for the next run. First every
        unprotected blob older than ``max_age_s`` goes; then, oldest first,
        unprotected blobs go until the total is at most ``max_total_bytes``.
        Blobs younger than ``grace_s`` always stay. Age is ``now - mtime``
        (``now`` defaults to ``time.time()``; tests pass it).

        ``confirm`` is for references that can appear while this runs and
        whose holders pin a blob until it is referenced (a session store: a
        session appends its turn before it releases its pins). The removals
        are then planned first; ``confirm()`` is called once, after every
        planned blob was found unpinned, and what it returns is kept too;
        only then are the others removed (pins checked again, as always).
        """
        now = time.time() if now is None else now
        refs = {parse_blob_id(r) for r in referenced}
        tables = [self.pins] if pins is None or pins is self.pins else [self.pins, pins]
        own = {
            t.journal.token for t in tables if t.journal is not None and t.journal.token is not None
        }
        foreign = self._foreign

        def is_protected(blob_id: uuid.UUID) -> bool:
            return (
                blob_id in refs
                or any(table.is_pinned(blob_id) for table in tables)
                or blob_id in foreign
            )

        def remove(entry: _Entry) -> bool | None:
            """True: removed; False: pinned after all; None: kept (lock busy, unlink failed)."""
            with gc_lock(self.pins_dir, exclusive=True, timeout=COLLECT_LOCK_TIMEOUT_S) as state:
                if state == "busy":
                    return None
                # Under the lock no pin can land: what the tables and the other
                # stores' files say now holds until the blob is gone.
                foreign.refresh(own)
                if not foreign.certain:
                    return None  # another store's pins are unreadable: keep everything
                if is_protected(entry.blob_id):
                    return False
                return True if self._remove(entry) else None

        planned: list[_Entry] = []

        def plan(entry: _Entry) -> bool:
            planned.append(entry)
            return True

        decide = remove if confirm is None else plan
        with self._collect_lock:
            for table in tables:
                table.sync()  # compact our published pins after releases
            foreign.refresh(own, full=True)  # who is alive; files of gone stores removed
            entries = sorted(self._scan(), key=lambda e: (e.mtime, e.blob_id))
            removed: list[_Entry] = []
            protected: dict[uuid.UUID, None] = {}
            kept: list[_Entry] = []
            for entry in entries:
                age = now - entry.mtime
                if self.max_age_s is not None and age > self.max_age_s:
                    if is_protected(entry.blob_id):
                        protected[entry.blob_id] = None
                    elif age >= self.grace_s:
                        outcome = decide(entry)
                        if outcome:
                            removed.append(entry)
                            continue
                        if outcome is False:
                            protected[entry.blob_id] = None
                kept.append(entry)
            total = sum(e.size for e in kept)
            if self.max_total_bytes is not None:
                survivors: list[_Entry] = []
                for index, entry in enumerate(kept):
                    if total <= self.max_total_bytes:
                        survivors.extend(kept[index:])
                        break
                    if is_protected(entry.blob_id):
                        protected[entry.blob_id] = None
                    elif now - entry.mtime >= self.grace_s:
                        outcome = decide(entry)
                        if outcome:
                            removed.append(entry)
                            total -= entry.size
                            continue
                        if outcome is False:
                            protected[entry.blob_id] = None
                    survivors.append(entry)
                kept = survivors
            if confirm is not None and planned:
                # Planned removals: everything referenced by now is kept after all.
                later = {parse_blob_id(r) for r in confirm()}
                removed = []
                for entry in planned:
                    outcome = None if entry.blob_id in later else remove(entry)
                    if outcome:
                        removed.append(entry)
                        continue
                    if entry.blob_id in later or outcome is False:
                        protected[entry.blob_id] = None
                    kept.append(entry)
                    total += entry.size
                kept.sort(key=lambda e: (e.mtime, e.blob_id))
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
        for sidecar in (
            self._index_path(entry.blob_id),
            self._json_index_path(entry.blob_id),
            self._owner_path(entry.blob_id),
        ):
            with contextlib.suppress(OSError):
                sidecar.unlink()
        with self._lock:
            self._indexes.pop(entry.blob_id, None)
            self._owners.pop(entry.blob_id, None)
        self._forget_parsed(entry.blob_id)
        return True

    def sweep_temp(self, now: float | None = None) -> int:
        """Remove leftovers of interrupted writes; return how many files went.

        Leftovers are ``.tmp-*`` files (a write that never reached its
        rename) and line-index sidecars whose blob is gone. A temp file goes
        when no live writer can own it: it is this process's and no write in
        this process uses it, or its pid is dead, or it is older than
        ``temp_grace_s`` (``now - mtime``; a reused pid or a name without a
        pid). Safe at any time, from any number of processes sharing the
        root; called by the constructor.
        """
        now = time.time() if now is None else now
        swept = 0
        with os.scandir(self.blobs_dir) as it:
            names = [e.name for e in it if e.is_file(follow_symlinks=False)]
        # Snapshot the writes in progress only *after* listing: a write
        # registers its temp name before creating the file, so every temp file
        # in the listing that is still being written is in this snapshot.
        with _INFLIGHT_LOCK:
            busy_temps = set(_INFLIGHT_TEMPS)
            busy_ids = {blob_id for d, blob_id in _INFLIGHT_IDS if d == self._dir_key}
        present = set(names)
        me = os.getpid()
        for name in names:
            if name.startswith(TEMP_PREFIX):
                if os.path.join(self._dir_key, name) in busy_temps:
                    continue
                if not self._temp_removable(name, me, now):
                    continue
            elif name.endswith(_SIDECARS):
                stem, _dot, ext = name.rpartition(".")
                suffix = f".{ext}"
                blobs = (
                    (TEXT_SUFFIX,)
                    if suffix == INDEX_SUFFIX
                    else (JSON_SUFFIX,)
                    if suffix == JSON_INDEX_SUFFIX
                    else (TEXT_SUFFIX, JSON_SUFFIX)  # an owner file: a blob of either kind
                )
                if any(f"{stem}{b}" in present for b in blobs):
                    continue
                try:
                    if uuid.UUID(stem) in busy_ids or str(uuid.UUID(stem)) != stem:
                        continue
                except ValueError:
                    continue
                if any((self.blobs_dir / f"{stem}{b}").exists() for b in blobs):
                    continue
            else:
                continue
            with contextlib.suppress(FileNotFoundError):
                (self.blobs_dir / name).unlink()
                swept += 1
        if swept:
            log.info("blob_temp_swept", files=swept)
        return swept

    def _temp_removable(self, name: str, me: int, now: float) -> bool:
        """No live writer can own this temp file (the caller checked this process's)."""
        owner = _temp_owner(name)
        if owner == me or self._temp_expired(name, now):
            return True
        return owner is not None and not _pid_alive(owner)

    def _temp_expired(self, name: str, now: float) -> bool:
        try:
            mtime = (self.blobs_dir / name).stat().st_mtime
        except FileNotFoundError:
            return False
        return now - mtime >= self.temp_grace_s
