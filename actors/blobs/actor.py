"""The blob-store actor: one per runtime, disk work on the blocking lane.

It is the shared ``BlobStore`` of issue 6: :class:`~messages.blob_store.StoreBlob`,
:class:`~messages.blob_store.LoadBlob` and :class:`~messages.blob_store.BlobExists`
are answered with deferred replies once the blocking lane has done the disk
work (through :class:`~actors.blobs.fs_store.FsBlobStore`, atomic writes), so
a dispatcher thread never waits for the disk. Large tool outputs arrive as
:class:`~messages.blob_store.StoreToolOutput`: classified, summarised and
stored the same way, answered with the text history keeps.

A blob belongs to the session that stored it (an ``<id>.owner`` file, see
:mod:`actors.blobs.ownership`): ``LoadBlob`` and ``BlobExists`` with a
``session_id`` answer another session's blob as a missing one. Without a
``session_id`` they are the trusted, runtime-level access (no model reaches
them).

Retention never removes a blob a live session references. Pins live in a
:class:`~actors.blobs.pins.PinTable` that is *not* this actor's state: by
default it is the store's own table (``store.pins``), which the runtime owns
and which therefore survives a crash and restart of this actor; a table can
also be injected (``pins=``). A session pins every blob it stores and every
blob its history text references, and releases them when it closes
(:class:`~messages.blob_store.ReleaseSession`). Retention runs on a timer and
whenever the store grows past its size limit.

Pins land on the blocking lane, releases arrive here: so every request that
pins is announced to the table as it is received, and its job retires the
ticket when it ends, whatever happened. A release is held until the pins
announced before it have landed (a quote of session A's blob by session B,
received before A's close, keeps the blob through the handoff), and a
collection starts only once they have (it honours every quote received
before it). See :mod:`actors.blobs.pins`.

Sessions that outlive the process (a runtime with a session store) quote
blobs after they are closed, when nothing pins them any more: given
``referenced`` -- the session store's
:meth:`~actors.store.api.SessionStore.referenced_blobs` -- retention also keeps
every blob a stored session quotes. It asks twice: once to plan, and once more
after every candidate's pins were checked and before anything is removed
(``FsBlobStore.collect(confirm=...)``), because a session appends its turn to
the store *before* it releases its pins -- so a blob unpinned at the check is
in the store's answer after it. If the store cannot answer, nothing is removed.

The ``inspect`` tool does not go through this actor: it reads the
``FsBlobStore`` directly on its tool-pool thread (thread-safe, and not a
dispatcher thread, so blocking there is fine).
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from fore.actors.blobs.fs_store import (
    BlobNotFound,
    BlobStoreError,
    FsBlobStore,
    InvalidBlobId,
    parse_blob_id,
)
from fore.actors.blobs.pins import PinTable
from fore.actors.blobs.summary import (
    decide_tool_output,
    history_text,
    referenced_blob_ids,
    to_tool_output,
)
from fore.actors.core.cancel import CancelScope, unless_cancelled
from fore.actors.core.future import PooledFuture
from fore.actors.core.handlers import handles
from fore.actors.core.logs import get_logger
from fore.actors.core.pooled import ForeActor
from fore.errors import Cancelled
from fore.messages.blob_store import (
    BlobExists,
    BlobStoreStats,
    CollectBlobs,
    CollectReport,
    GetBlobStoreStats,
    LoadBlob,
    ReferenceBlobs,
    ReleaseSession,
    StoreBlob,
    StoredOutput,
    StoreToolOutput,
)
from fore.messages.blobs import BlobLimits, Content, Inline, Stored, Text, ToolOutput

__all__ = ["BlobStoreActor", "store_output"]

log = get_logger(__name__)

T = TypeVar("T")


def _decide(message: StoreToolOutput, limits: BlobLimits) -> ToolOutput:
    if message.tool_output is not None:
        return decide_tool_output(message.tool_output, limits)
    if message.stored_summary is not None:
        converted = to_tool_output(message.output, limits)
        content = converted.content if isinstance(converted, Stored) else Text(text=message.output)
        return decide_tool_output(Stored(summary=message.stored_summary, content=content), limits)
    return decide_tool_output(message.output, limits)


def store_output(
    store: FsBlobStore,
    message: StoreToolOutput,
    limits: BlobLimits,
    pins: PinTable | None = None,
    ticket: int | None = None,
) -> StoredOutput:
    """Classify, summarise and store one output (blocking; any thread).

    The new blob, and every blob the resulting history text references, is
    pinned for ``message.session_id`` in ``pins`` (default ``store.pins``;
    ``ticket``: the pin's announcement, see :meth:`PinTable.announce`) before
    this returns, so the only unprotected moment is the instant between the
    rename and the pin, which the store's grace period covers.
    """
    table = store.pins if pins is None else pins
    output = _decide(message, limits)
    if isinstance(output, Inline):
        table.pin(message.session_id, referenced_blob_ids([output.text]), ticket=ticket)
        return StoredOutput(history_text=output.text)
    blob_id = store.store(output.content, owner=message.session_id)
    text = history_text(blob_id, output.summary)
    pinned = {blob_id} | referenced_blob_ids([output.summary])
    table.pin(message.session_id, pinned, ticket=ticket)
    try:
        size = store.size(blob_id)
    except BlobStoreError:
        size = 0
    return StoredOutput(history_text=text, blob_id=str(blob_id), bytes_stored=size)


def _store_blob(
    store: FsBlobStore, pins: PinTable, content: Content, session_id: str | None, ticket: int
) -> uuid.UUID:
    blob_id = store.store(content, owner=session_id)
    if session_id is not None:
        pins.pin(session_id, (blob_id,), ticket=ticket)
    return blob_id


def _landing(pins: PinTable, ticket: int, fn: Callable[..., T], *args: Any) -> T:
    """Run pinning work on the lane, then retire its ticket whatever happened.

    Retiring applies the releases the ticket held back; their pins leave the
    published file at once (this thread may block).
    """
    try:
        return fn(*args)
    finally:
        if pins.retire(ticket):
            pins.sync()


def _load(store: FsBlobStore, blob_id: uuid.UUID, session_id: str | None) -> Content:
    if session_id is not None and store.owner(blob_id) != session_id:
        raise BlobNotFound(f"no blob {blob_id}")  # the very words of a missing blob
    return store.load(blob_id)


def _exists(store: FsBlobStore, blob_id: uuid.UUID, session_id: str | None) -> bool:
    if session_id is not None and store.owner(blob_id) != session_id:
        return False
    return store.exists(blob_id)


def _reference(pins: PinTable, message: ReferenceBlobs, ticket: int) -> int:
    """Pin what ``message`` references (see its docstring); returns the new pins."""
    ids = referenced_blob_ids(message.texts)
    for raw in message.blob_ids:
        try:
            ids.add(parse_blob_id(raw))
        except InvalidBlobId:
            log.warning("blob_reference_invalid_id", session=message.session_id, blob_id=raw[:80])
    return pins.pin(message.session_id, ids, ticket=ticket)


def _stats(store: FsBlobStore, pins: PinTable, stored: int) -> BlobStoreStats:
    return BlobStoreStats(
        blobs=len(store.blob_ids()),
        total_bytes=store.total_bytes(),
        pinned=pins.pins,
        sessions=pins.sessions,
        stored=stored,
    )


class BlobStoreActor(ForeActor):
    """Stores, loads and collects blobs; pins them per session (see the module docs)."""

    def __init__(
        self,
        store: FsBlobStore,
        *,
        limits: BlobLimits | None = None,
        pins: PinTable | None = None,
        collect_interval: float = 60.0,
        registry_name: str | None = None,
        referenced: Callable[[], Collection[str]] | None = None,
    ) -> None:
        super().__init__()
        self.registry_name = registry_name
        self.store = store
        self.referenced = referenced
        """Blob ids stored sessions quote (a session store's ``referenced_blobs``): kept."""
        self.limits = limits or BlobLimits()
        self.pins = pins if pins is not None else store.pins
        """Retention protection; owned outside this actor so it survives restarts."""
        self.collect_interval = collect_interval
        self._stored = 0
        self._collecting = False
        self._last_collect = 0.0
        self._collect_waiters: list[PooledFuture[Any]] = []

    def on_start(self) -> None:
        self.send_after(self.collect_interval, CollectBlobs())

    # -- pinning work and session release ------------------------------------------

    def _pinning(
        self,
        fn: Callable[..., T],
        *args: Any,
        then: Callable[[T], Any],
        on_error: Callable[[BaseException], Any],
    ) -> None:
        """Run ``fn(*args, ticket)`` on the lane: work that pins, announced as received."""
        ticket = self.pins.announce()
        try:
            self.run_blocking(
                _landing, self.pins, ticket, fn, *args, ticket, then=then, on_error=on_error
            )
        except BaseException:
            self.pins.retire(ticket)  # never queued: nothing will land
            raise

    @handles(ReleaseSession)
    def _on_release(self, message: ReleaseSession) -> None:
        """Drop the pins in memory (once the pins announced before have landed).

        The published ones are compacted on the blocking lane: now, or by the
        job that lands the last pin the release waited for.
        """
        if self.pins.release(message.session_id):
            self.run_blocking(self.pins.sync, on_error=self._sync_failed)

    def _sync_failed(self, error: BaseException) -> None:
        # Only over-protection is left behind (the file lists released pins);
        # the next collection compacts it again.
        self.log.warning("blob_pins_sync_failed", error=repr(error))

    # -- the BlobStore interface -------------------------------------------------------

    @handles(StoreBlob)
    def _on_store_blob(self, message: StoreBlob) -> None:
        reply = self.defer_reply()

        def stored(blob_id: uuid.UUID) -> None:
            self._stored += 1
            self._maybe_collect()
            _answer(reply, blob_id)

        def failed(error: BaseException) -> None:
            self.log.error("blob_store_failed", error=repr(error))
            _fail(reply, error)

        self._pinning(
            _store_blob,
            self.store,
            self.pins,
            message.content,
            message.session_id,
            then=stored,
            on_error=failed,
        )

    @handles(LoadBlob)
    def _on_load(self, message: LoadBlob) -> None:
        reply = self.defer_reply()
        blob_id = self._valid_id(message.blob_id, reply)
        if blob_id is None or reply is None:
            return
        self.run_blocking(
            _load,
            self.store,
            blob_id,
            message.session_id,
            then=functools.partial(_answer, reply),
            on_error=functools.partial(_fail, reply),
        )

    @handles(BlobExists)
    def _on_exists(self, message: BlobExists) -> None:
        reply = self.defer_reply()
        blob_id = self._valid_id(message.blob_id, reply)
        if blob_id is None or reply is None:
            return
        self.run_blocking(
            _exists,
            self.store,
            blob_id,
            message.session_id,
            then=functools.partial(_answer, reply),
            on_error=functools.partial(_fail, reply),
        )

    def _valid_id(self, raw: str, reply: PooledFuture[Any] | None) -> uuid.UUID | None:
        """The parsed id, or None after answering the asker with ``InvalidBlobId``.

        Never raises: a tell with a bad id must not crash the actor.
        """
        try:
            return parse_blob_id(raw)
        except InvalidBlobId as exc:
            if reply is None:
                self.log.warning("blob_id_invalid", error=str(exc))
            _fail(reply, exc)
            return None

    # -- tool outputs and references -----------------------------------------------------

    @handles(StoreToolOutput)
    def _on_store(self, message: StoreToolOutput) -> None:
        reply = self.defer_reply()
        scope: CancelScope | None = message.scope
        if scope is not None and scope.cancel_called:
            # Its run was called off: the worker drops any answer, so save the write.
            self.log.debug("store_skipped", call_id=message.call_id, reason=scope.reason)
            _fail(reply, Cancelled(scope.reason))
            return

        def stored(result: StoredOutput) -> None:
            if result.blob_id is not None:
                self._stored += 1
                self._maybe_collect()
            _answer(reply, result)

        def failed(error: BaseException) -> None:
            if isinstance(error, Cancelled):  # called off while it waited for the lane
                self.log.debug("store_skipped", call_id=message.call_id, reason=str(error))
            else:
                self.log.error("blob_store_failed", error=repr(error), call_id=message.call_id)
            _fail(reply, error)

        self._pinning(
            unless_cancelled,
            scope,
            store_output,
            self.store,
            message,
            self.limits,
            self.pins,
            then=stored,
            on_error=failed,
        )

    @handles(ReferenceBlobs)
    def _on_reference(self, message: ReferenceBlobs) -> None:
        reply = self.defer_reply()

        def failed(error: BaseException) -> None:
            self.log.error("blob_reference_failed", error=repr(error))
            _fail(reply, error)

        # Scanning long texts is CPU work: off the dispatcher thread too.
        self._pinning(
            _reference, self.pins, message, then=functools.partial(_answer, reply), on_error=failed
        )

    # -- retention -----------------------------------------------------------------------

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

    def _collect(self, reply: PooledFuture[Any] | None) -> None:
        """Run one collection; an ask during a running one gets the *next* one's report.

        A collection that started before the ask may have scanned before the
        asker's change (a release, a new blob), so it is not an answer to "run
        retention now"; one more run follows for everyone who asked meanwhile.
        """
        if self._collecting:
            if reply is not None:
                self._collect_waiters.append(reply)
            return
        self._run_collect([] if reply is None else [reply])

    def _run_collect(self, replies: list[PooledFuture[Any]]) -> None:
        """Start a collection once the pins announced before it have landed."""
        self._collecting = True
        self._last_collect = time.monotonic()
        start = functools.partial(self._start_collect, replies)
        if self.pins.when_settled(self.pins.position(), functools.partial(self.post, start)):
            start()

    def _start_collect(self, replies: list[PooledFuture[Any]]) -> None:
        def finished() -> None:
            self._collecting = False
            waiters, self._collect_waiters = self._collect_waiters, []
            if waiters:
                self._run_collect(waiters)

        def done(report: CollectReport) -> None:
            if report.removed:
                self.log.info(
                    "blobs_collected", removed=len(report.removed), bytes=report.removed_bytes
                )
            for reply in replies:
                _answer(reply, report)
            finished()

        def failed(error: BaseException) -> None:
            self.log.warning("blob_collect_failed", error=repr(error))
            for reply in replies:
                _fail(reply, error)
            finished()

        # The store honours its own pins; an injected table is passed as well.
        collect = functools.partial(_collect, self.store, self.pins, self.referenced)
        self.run_blocking(collect, then=done, on_error=failed)

    @handles(GetBlobStoreStats)
    def _on_stats(self, _message: GetBlobStoreStats) -> None:
        reply = self.defer_reply()
        if reply is None:
            return
        self.run_blocking(
            _stats,
            self.store,
            self.pins,
            self._stored,
            then=functools.partial(_answer, reply),
            on_error=functools.partial(_fail, reply),
        )


def _collect(
    store: FsBlobStore, pins: PinTable, referenced: Callable[[], Collection[str]] | None
) -> CollectReport:
    """One retention run (blocking): pins, and what stored sessions quote, are kept."""
    if referenced is None:
        return store.collect((), pins=pins)
    # A failing store raises here: the collection fails and removes nothing.
    return store.collect(referenced(), pins=pins, confirm=referenced)


def _answer(reply: PooledFuture[Any] | None, value: Any) -> None:
    if reply is not None:
        reply.try_set(value)


def _fail(reply: PooledFuture[Any] | None, error: BaseException) -> None:
    if reply is not None:
        reply.try_set_exception(error)
