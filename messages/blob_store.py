"""Messages of the blob-store actor: storing, loading, pins and retention.

Two levels:

* the **BlobStore interface** of issue 6 -- :class:`StoreBlob` (answered with
  the new blob's ``uuid.UUID``), :class:`LoadBlob` (answered with the
  :data:`~messages.blobs.Content`) and :class:`BlobExists` (answered with a
  ``bool``). Disk work runs on the blocking lane; failures reach the asker as
  typed exceptions from :mod:`actors.blobs.fs_store`: ``InvalidBlobId`` for an
  id that is not a UUID, ``BlobNotFound`` for a missing blob, another
  ``BlobStoreError`` for I/O trouble.
* the **worker's conversion** of a tool output into history text
  (:class:`StoreToolOutput` -> :class:`StoredOutput`).

Retention never removes a blob a live session references: storing pins the
blob for ``session_id``, :class:`ReferenceBlobs` pins what a history shows,
and :class:`ReleaseSession` drops a closed session's pins.

Reading is a separate right (:mod:`actors.blobs.ownership`): a blob belongs to
the session that stored it; pinning a blob -- quoting its id -- grants no
read.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from pydantic import BeforeValidator, Field

from fore.messages.address import Ask
from fore.messages.base import Message
from fore.messages.blobs import Content, ToolOutput


def _id_text(value: object) -> object:
    """Accept a ``uuid.UUID`` where an id string is expected (validation is the store's)."""
    return str(value) if isinstance(value, uuid.UUID) else value


BlobIdText = Annotated[str, BeforeValidator(_id_text)]
"""A blob id as text; a ``uuid.UUID`` is accepted and turned into its string."""


class StoreBlob(Message):
    """Store ``content``; answered with the new blob's id (``uuid.UUID``).

    With ``session_id`` the blob belongs to that session (only it may read it
    through a session-scoped read) and is pinned for it until it closes;
    without, it belongs to no session and only the store's grace period
    protects it from retention.
    """

    content: Content
    session_id: str | None = None


class LoadBlob(Message):
    """Load a whole blob; answered with its :data:`~messages.blobs.Content`.

    ``blob_id`` is validated by the store (never used raw in a path): a
    non-UUID is answered with ``InvalidBlobId``, a missing blob with
    ``BlobNotFound``. With ``session_id`` the read is the session's: a blob
    another session (or no session) stored is answered with the same
    ``BlobNotFound``; without it the read is the runtime's own (trusted).
    """

    blob_id: BlobIdText
    session_id: str | None = None


class BlobExists(Message):
    """Whether a complete blob with this id is stored; answered with a ``bool``.

    A non-UUID ``blob_id`` is answered with ``InvalidBlobId`` (not ``False``:
    a malformed id is a bug of the asker, not a missing blob). With
    ``session_id``, a blob that session may not read is ``False``.
    """

    blob_id: BlobIdText
    session_id: str | None = None


class StoredOutput(Message):
    """What history keeps for one output: inline text, or ``[blob:<id>] summary``."""

    history_text: str
    blob_id: str | None = None
    bytes_stored: int = 0


class StoreToolOutput(Ask[StoredOutput]):
    """Turn one tool output into what history keeps (a summary if it is large).

    ``output`` is the output as text. ``tool_output`` is an explicit
    :data:`~messages.blobs.ToolOutput` the tool returned itself: it wins over
    ``output`` -- an ``Inline`` stays inline whatever its size, a ``Stored``
    is stored as it is (a ``Structured`` stays structured) with its summary
    capped. ``stored_summary`` is the older way for a tool to supply its own
    summary for ``output``. Answered with :class:`StoredOutput`; the blob (and
    every blob the history text references) is pinned for ``session_id``.
    """

    session_id: str
    call_id: str
    output: str
    stored_summary: str | None = None
    tool_output: ToolOutput | None = None


class ReferenceBlobs(Message):
    """Pin, for ``session_id``, every blob these history texts reference.

    Retention never removes a blob a live session's history references; a
    pin is how the store knows. :class:`StoreToolOutput` pins what it
    stores, so **this message is for every other way text enters a
    history**. The contract for its senders (the worker, and any future
    restore or fork path):

    * **what**: ``ReferenceBlobs(session_id=<the history's session>,
      texts=(<the item's text>, ...))`` -- the full texts; the store finds
      every ``[blob:<uuid>]`` in them (anywhere, not only at the start).
      ``blob_ids`` pins ids given directly (invalid ones are ignored and
      logged). Texts without a reference pin nothing, so a sender may send
      every appended text or only those containing ``[blob:``.
    * **when**: as soon as the item is appended to the history -- a user
      message (a pasted or typed ``[blob:<id>]``), a system message (a
      ``[File: ...]`` attachment whose file quotes one), items inserted from
      an accepted speculation, a restored or forked history. Not batched to
      the end of the turn: a blob of a closed session is protected by
      nothing else, and the next collection may run at any moment.
    * **how**: a tell (an ask is answered with the number of new pins). The
      sender's tells must precede the session's :class:`ReleaseSession`; the
      runtime stops the worker before it sends that, so anything the worker
      told is pinned first and then released with the session.

    The pins last until :class:`ReleaseSession` for ``session_id``; a blob
    stays while *any* session pins it, so a blob created by session A and
    referenced by session B survives A's close.

    A pin is not a read right: B quoting A's id keeps A's blob on disk, but
    B's ``inspect`` of it is answered "not found" like any unknown id (a
    session reads only the blobs it stored; :mod:`actors.blobs.ownership`).
    """

    session_id: str
    texts: tuple[str, ...] = ()
    blob_ids: tuple[str, ...] = ()


class ReleaseSession(Message):
    """The session closed: its blobs are no longer pinned against retention."""

    session_id: str


class CollectBlobs(Message):
    """Run retention now (answered with a :class:`CollectReport`)."""


class BlobStoreStats(Message):
    blobs: int
    total_bytes: int
    pinned: int = Field(description="(session, blob) pins")
    sessions: int = Field(description="sessions holding pins")
    stored: int = Field(default=0, description="outputs stored since start")


class GetBlobStoreStats(Message):
    """Ask the blob store for :class:`BlobStoreStats`."""


class CollectReport(Message):
    """What one :meth:`FsBlobStore.collect` run did.

    ``protected`` lists referenced (or pinned) blobs that the age or size
    limit would otherwise have removed; ``over_budget`` is true when the blobs left
    (referenced or within the grace period) still exceed ``max_total_bytes``.
    Sizes count blob files plus their index sidecars (``.lines``, ``.jidx``).
    """

    removed: tuple[uuid.UUID, ...] = ()
    removed_bytes: int = 0
    kept: int = 0
    kept_bytes: int = 0
    protected: tuple[uuid.UUID, ...] = ()
    over_budget: bool = False
