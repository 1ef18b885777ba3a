"""The blob-store actor: one per runtime, disk work on the blocking lane.

Large tool outputs reach it as :class:`~messages.blob_store.StoreToolOutput`;
it classifies and summarises them and writes the blob (atomically, through
:class:`~actors.blobs.fs_store.FsBlobStore`) on the blocking lane, never on a
dispatcher thread, and answers with the text history keeps.

Retention never removes a blob a live session may still reference: every
stored blob is pinned for its session until the session closes
(:class:`~messages.blob_store.ReleaseSession`); retention runs on a timer and
whenever the store grows past its size limit.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from actors.blobs.fs_store import CollectReport, FsBlobStore
from actors.blobs.summary import history_text, summarize, to_tool_output
from actors.core.pooled import PooledActor, handles
from messages.blob_store import (
    BlobStoreStats,
    CollectBlobs,
    GetBlobStoreStats,
    ReleaseSession,
    StoredOutput,
    StoreToolOutput,
)
from messages.blobs import BlobLimits, Inline, Stored, Text


def store_output(store: FsBlobStore, message: StoreToolOutput, limits: BlobLimits) -> StoredOutput:
    """Classify, summarise and store one output (blocking; any thread)."""
    if message.stored_summary is not None:
        converted = to_tool_output(message.output, limits)
        content = converted.content if isinstance(converted, Stored) else Text(text=message.output)
        output: Inline | Stored = Stored(summary=message.stored_summary, content=content)
    else:
        output = to_tool_output(message.output, limits)
    if isinstance(output, Inline):
        return StoredOutput(history_text=output.text)
    blob_id = store.store(output.content)
    summary = output.summary or summarize(output.content, limits)
    return StoredOutput(
        history_text=history_text(blob_id, summary),
        blob_id=str(blob_id),
        bytes_stored=len(message.output.encode("utf-8")),
    )


class BlobStoreActor(PooledActor):
    """Stores large outputs, pins them per session, collects the rest."""

    def __init__(
        self,
        store: FsBlobStore,
        *,
        limits: BlobLimits | None = None,
        collect_interval: float = 60.0,
        registry_name: str | None = None,
    ) -> None:
        super().__init__()
        self.registry_name = registry_name
        self.store = store
        self.limits = limits or BlobLimits()
        self.collect_interval = collect_interval
        self._pins: dict[str, set[uuid.UUID]] = {}
        self._stored = 0
        self._collecting = False
        self._last_collect = 0.0

    def on_start(self) -> None:
        self.send_after(self.collect_interval, CollectBlobs())

    @handles(StoreToolOutput)
    def _on_store(self, message: StoreToolOutput) -> None:
        reply = self.defer_reply()

        def stored(result: StoredOutput) -> None:
            if result.blob_id is not None:
                self._pins.setdefault(message.session_id, set()).add(uuid.UUID(result.blob_id))
                self._stored += 1
                self._maybe_collect()
            if reply is not None:
                reply.try_set(result)

        def failed(error: BaseException) -> None:
            self.log.error("blob_store_failed", error=repr(error), call_id=message.call_id)
            if reply is not None:
                reply.try_set_exception(error)

        self.run_blocking(
            store_output, self.store, message, self.limits, then=stored, on_error=failed
        )

    @handles(ReleaseSession)
    def _on_release(self, message: ReleaseSession) -> None:
        self._pins.pop(message.session_id, None)

    @handles(CollectBlobs)
    def _on_collect(self, _message: CollectBlobs) -> None:
        reply = self.defer_reply()
        if reply is None:  # the periodic timer
            self.send_after(self.collect_interval, CollectBlobs())
        self._collect(reply)

    def _maybe_collect(self) -> None:
        limit = self.store.max_total_bytes
        now = time.monotonic()
        if limit is not None and now - self._last_collect > 1.0:
            self._collect(None)

    def _collect(self, reply: Any) -> None:
        if self._collecting:
            if reply is not None:
                reply.try_set(None)
            return
        self._collecting = True
        self._last_collect = time.monotonic()
        pinned = frozenset().union(*self._pins.values()) if self._pins else frozenset()

        def done(report: CollectReport) -> None:
            self._collecting = False
            if report.removed:
                self.log.info(
                    "blobs_collected", removed=len(report.removed), bytes=report.removed_bytes
                )
            if reply is not None:
                reply.try_set(report)

        def failed(error: BaseException) -> None:
            self._collecting = False
            self.log.warning("blob_collect_failed", error=repr(error))
            if reply is not None:
                reply.try_set_exception(error)

        self.run_blocking(self.store.collect, pinned, then=done, on_error=failed)

    @handles(GetBlobStoreStats)
    def _on_stats(self, _message: GetBlobStoreStats) -> BlobStoreStats:
        return BlobStoreStats(
            blobs=len(self.store.blob_ids()),
            total_bytes=self.store.total_bytes(),
            pinned=sum(len(p) for p in self._pins.values()),
            sessions=len(self._pins),
            stored=self._stored,
        )
