"""Who may read a blob: the session that stored it, and nobody else.

Why: blob ids are flat, random names in one directory shared by every
session of a runtime (and by other processes on the same ``blob_dir``), and
a blob holds whatever a tool printed -- the user's files among it. Knowing an
id was enough to read it: session B read session A's workspace through
``inspect``, even after A closed. An id is a *name*, not a capability.

The rule:

* **A blob belongs to the session that stored it.** ``StoreToolOutput`` and
  ``StoreBlob(session_id=...)`` store with ``owner=<session id>``, persisted
  as ``<id>.owner`` next to the blob (:meth:`FsBlobStore.owner
  <actors.blobs.fs_store.FsBlobStore.owner>`), so it survives restarts of the
  blob-store actor and a new process: a session resumed under the same id
  reads its blobs again.
* **A speculation is its session.** A speculation's worker runs with the
  parent's session id (``WorkerConfig(session_id=main.session_id)``), so a
  speculation reads the session's blobs, and what it stores belongs to the
  session: items inserted into the main history on accept stay readable.
  Nothing else shares that id.
* **Quoting an id grants nothing.** A user who pastes ``[blob:<id>]`` of
  another session into a prompt pins that blob against retention
  (``ReferenceBlobs``: the history shows it) but the session still cannot
  read it; its own ids stay readable, quoted or not.
* **No oracle.** A blob of another session, a blob that belongs to nobody
  (stored without a session, or written before owner files existed) and an
  id that was never stored are one and the same answer: ``BlobNotFound``
  with the same text, checked before anything else about the blob is looked
  at (its kind, size or content), so ``inspect`` says the same words.

:class:`SessionBlobs` is that rule as a :class:`~actors.blobs.selectors.BlobReader`:
the ``inspect`` tool reads only through one bound to the calling session.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

from pydantic import JsonValue

from fore.actors.blobs.fs_store import BlobNotFound, parse_blob_id
from fore.actors.blobs.json_index import JsonIndex
from fore.actors.blobs.selectors import BlobReader
from fore.messages.blobs import BlobKind, Content

__all__ = ["OwnedBlobReader", "SessionBlobs", "readable_by"]


class OwnedBlobReader(BlobReader, Protocol):
    """A :class:`BlobReader` that knows who stored each blob (``FsBlobStore`` does)."""

    def owner(self, blob_id: uuid.UUID) -> str | None: ...


def readable_by(reader: OwnedBlobReader, blob_id: uuid.UUID | str, session_id: str) -> bool:
    """Whether ``session_id`` may read the blob (False for a missing one too)."""
    return reader.owner(parse_blob_id(blob_id)) == session_id


class SessionBlobs:
    """``reader`` as ``session_id`` sees it: another session's blob does not exist.

    Every method checks the owner first (a cached lookup) and raises
    :class:`~actors.blobs.fs_store.BlobNotFound` -- worded exactly as for a
    missing blob -- for a blob the session may not read.
    """

    def __init__(self, reader: OwnedBlobReader, session_id: str) -> None:
        self.reader = reader
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"SessionBlobs({self.session_id!r})"

    def _check(self, blob_id: uuid.UUID) -> uuid.UUID:
        key = parse_blob_id(blob_id)
        if self.reader.owner(key) != self.session_id:
            raise BlobNotFound(f"no blob {key}")
        return key

    def owner(self, blob_id: uuid.UUID) -> str | None:
        """The session, for its own blobs; None for any other (views compose)."""
        owner = self.reader.owner(parse_blob_id(blob_id))
        return owner if owner == self.session_id else None

    def kind(self, blob_id: uuid.UUID) -> BlobKind:
        return self.reader.kind(self._check(blob_id))

    def size(self, blob_id: uuid.UUID) -> int:
        return self.reader.size(self._check(blob_id))

    def line_count(self, blob_id: uuid.UUID) -> int:
        return self.reader.line_count(self._check(blob_id))

    def line_offsets(self, blob_id: uuid.UUID, lines: Sequence[int]) -> list[int]:
        return self.reader.line_offsets(self._check(blob_id), lines)

    def read_range(self, blob_id: uuid.UUID, start: int, stop: int) -> bytes:
        return self.reader.read_range(self._check(blob_id), start, stop)

    def load(self, blob_id: uuid.UUID) -> Content:
        return self.reader.load(self._check(blob_id))

    def json_index(self, blob_id: uuid.UUID) -> JsonIndex | None:
        return self.reader.json_index(self._check(blob_id))

    def json_part(self, blob_id: uuid.UUID, start: int, stop: int) -> JsonValue:
        return self.reader.json_part(self._check(blob_id), start, stop)
