"""Messages of the blob-store actor: storing tool outputs, pins, retention."""

from __future__ import annotations

from pydantic import Field

from messages.base import Message


class StoreToolOutput(Message):
    """Turn one tool output into what history keeps (a summary if it is large).

    ``stored_summary`` is a summary the tool supplied itself. Answered with
    :class:`StoredOutput`; the blob is pinned for ``session_id``.
    """

    session_id: str
    call_id: str
    output: str
    stored_summary: str | None = None


class StoredOutput(Message):
    """What history keeps for one output: inline text, or ``[blob:<id>] summary``."""

    history_text: str
    blob_id: str | None = None
    bytes_stored: int = 0


class ReleaseSession(Message):
    """The session closed: its blobs are no longer pinned against retention."""

    session_id: str


class CollectBlobs(Message):
    """Run retention now (answered with the store's CollectReport)."""


class BlobStoreStats(Message):
    blobs: int
    total_bytes: int
    pinned: int
    sessions: int
    stored: int = Field(default=0, description="outputs stored since start")


class GetBlobStoreStats(Message):
    """Ask the blob store for :class:`BlobStoreStats`."""
