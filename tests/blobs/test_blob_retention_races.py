"""Retention races, made deterministic: a blob a live session shows is never collected.

Each race is driven in the order it needs -- a blocking-lane job held at a
gate, a compaction paused between two of its steps, a pin file compacted
twice between two collections -- never by sleeping and hoping.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fore.actors.blobs import actor as actor_module
from fore.actors.blobs.actor import BlobStoreActor
from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.blobs.pins import PinTable
from fore.actors.blobs.shared_pins import PINS_DIR, PinJournal
from fore.actors.core import ActorSystem
from fore.messages.blob_store import (
    CollectBlobs,
    CollectReport,
    GetBlobStoreStats,
    ReferenceBlobs,
    ReleaseSession,
    StoreBlob,
)
from fore.messages.blobs import Text
from tests.blobs.test_blob_shared_pins import FAR_FUTURE, collector

WAIT = 30.0


def quoting(blob: uuid.UUID) -> str:
    return f"the user pasted [blob:{blob}] text | 1 lines"


# -- in one process: a release must not overtake a quote still on the lane ----------------


def test_a_quote_on_the_lane_is_not_overtaken_by_the_creators_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handoff of a blob from its closing creator to a live reader.

    The reader's ``ReferenceBlobs`` arrives first, but its pin lands on the
    blocking lane (scanning texts is CPU work), while the creator's
    ``ReleaseSession`` used to take effect at once on the dispatcher: a
    collection in between saw the blob pinned by nobody and deleted a blob the
    reader's history shows. Here the reader's scan is held at a gate until the
    collection had its chance.
    """
    scanning, go_on = threading.Event(), threading.Event()
    real_scan = actor_module.referenced_blob_ids

    def held_scan(texts: Any) -> set[uuid.UUID]:
        if any("pasted" in t for t in texts):
            scanning.set()
            assert go_on.wait(WAIT)
        return real_scan(texts)

    monkeypatch.setattr(actor_module, "referenced_blob_ids", held_scan)
    # Two lane threads: the held scan takes one, the rest queue on the other in order.
    system = ActorSystem(name="blob-handoff", blocking_threads=2)
    try:
        store = collector(tmp_path)
        with system.activated():
            ref = BlobStoreActor.start(store, collect_interval=3600.0)
        blob = ref.ask(
            StoreBlob(content=Text(text="tool output"), session_id="creator"), timeout=WAIT
        )
        ref.tell(ReferenceBlobs(session_id="reader", texts=(quoting(blob),)))
        assert scanning.wait(WAIT)
        ref.tell(ReleaseSession(session_id="creator"))
        report = ref.ask(CollectBlobs(), block=False)
        # The stats job queues behind the collection (if it started) on the free thread:
        # once it is answered, a collection that could run has run.
        ref.ask(GetBlobStoreStats(), timeout=WAIT)
        assert store.exists(blob), "collected while the reader's history quotes it"
        go_on.set()
        first: CollectReport = report.get(timeout=WAIT)
        assert blob not in first.removed and store.exists(blob)
        # Once the reader closes too, nothing keeps it.
        ref.tell(ReleaseSession(session_id="reader"))
        assert ref.ask(CollectBlobs(), timeout=WAIT).removed == (blob,)
        ref.stop(timeout=WAIT)
    finally:
        go_on.set()
        assert system.shutdown(timeout=WAIT)


def test_a_release_waits_only_for_pins_announced_before_it(tmp_path: Path) -> None:
    """A session closed and reopened (resumed) under one id: its new pins stay.

    Its release is held behind another session's pin still on the lane; a pin
    the reopened session takes meanwhile is newer than the release and
    survives it.
    """
    pins = PinTable()
    old, new, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    pins.pin("s", [old])
    ticket = pins.announce()  # someone's quote, still on the lane
    assert pins.release("s") == 0  # held behind it
    assert pins.is_pinned(old)
    pins.pin("s", [new])  # the session, reopened, pins again
    pins.pin("t", [other], ticket=ticket)
    assert pins.retire(ticket)  # the held release goes now: the old pin with it ...
    assert pins.session_pins("s") == {new}  # ... not the one taken after the release
    assert pins.release("s") == 1 and pins.pinned() == {other}
    # A blob pinned again after the release stays pinned too.
    ticket = pins.announce()
    pins.pin("t", [old])
    assert pins.release("t") == 0
    pins.pin("t", [old])
    assert pins.retire(ticket)  # ``other`` goes with the release ...
    assert pins.session_pins("t") == {old}  # ... ``old``, pinned again after it, stays


def test_a_collection_waits_for_the_pins_announced_before_it(tmp_path: Path) -> None:
    """A quote received before a collection is honoured even when nothing else pins the blob."""
    pins = PinTable()
    blob = uuid.uuid4()
    ticket = pins.announce()
    started: list[str] = []
    position = pins.position()
    assert not pins.when_settled(position, lambda: started.append("collect"))
    pins.pin("reader", [blob], ticket=ticket)
    assert started == []  # landed, not yet retired
    pins.retire(ticket)
    assert started == ["collect"] and pins.is_pinned(blob)
    assert pins.when_settled(pins.position(), lambda: started.append("again"))
    assert started == ["collect"]  # nothing in flight: the caller goes on itself


# -- the store's own pin file is never another store's -----------------------------------


def test_a_collection_never_reads_its_own_pins_while_a_compaction_withdraws_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flaky ``test_a_blob_referenced_by_a_live_session_survives_its_creators_close``.

    After the last release the actor compacts the pin file on the lane: with
    nothing pinned the journal withdraws it. It dropped its name first and
    removed its files after; a collection running meanwhile on another lane
    thread no longer knew the file as its own, found its lock held (by the
    compaction) and honoured its stale pins as another live store's: the
    released blob was kept, and the test's ``CollectBlobs`` answer said so.
    """
    store = collector(tmp_path)
    blob = store.store(Text(text="released"), owner="s")
    store.pins.pin("s", [blob])
    store.pins.release("s")
    pins_dir = tmp_path / "blobs" / PINS_DIR
    paused, resume = threading.Event(), threading.Event()
    compactor: list[threading.Thread] = []
    real_unlink = Path.unlink

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self.parent == pins_dir and threading.current_thread() in compactor:
            paused.set()  # inside the withdrawal, before its files are gone
            assert resume.wait(WAIT)
        real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    compaction = threading.Thread(target=store.pins.sync, name="compaction")
    compactor.append(compaction)
    compaction.start()
    try:
        assert paused.wait(WAIT)
        report = store.collect(now=FAR_FUTURE)
    finally:
        resume.set()
        compaction.join(WAIT)
    assert report.removed == (blob,) and report.protected == ()


# -- another store's pin file: read again whenever it changed -----------------------------


def test_another_stores_pins_are_seen_after_compactions_that_reuse_an_inode(
    tmp_path: Path,
) -> None:
    """Data loss across processes: a pin file compacted twice between two collections.

    A collector kept each other store's pins with the (inode, size) of the file
    it read, to skip unchanged files. A compaction writes a new file and frees
    the old inode; the next compaction of a file of the same size may get that
    inode back (ext4 hands it out again at once), so the collector took the new
    pins for the old ones and deleted a blob a live session of the other store
    pins. Store ``ours`` collects; store ``theirs`` stands for the other process
    (its own journal and ``flock``, as a second process has).
    """
    # Ours keeps its sessions' pins in memory only: no file of its own to take inodes.
    ours = FsBlobStore(tmp_path, fsync=False, max_age_s=0.0, grace_s=0.0, pins=PinTable())
    theirs = FsBlobStore(tmp_path, fsync=False)
    blobs = [ours.store(Text(text=f"blob {i}")) for i in range(24)]
    for i, blob in enumerate(blobs):
        ours.pins.pin(f"o{i}", [blob])  # a session here holds each until theirs quote it
    theirs.pins.pin("long", [blobs[0]])
    theirs.pins.pin("t1", [blobs[1]])
    assert ours.collect(now=FAR_FUTURE).removed == ()  # ours has read theirs' file
    live = "t1"
    for turn in range(11):
        # Two sessions of theirs take over a blob each and the older one closes, twice:
        # the file is compacted twice, to the same size.
        for i in (2 * turn + 2, 2 * turn + 3):
            theirs.pins.pin(f"t{i}", [blobs[i]])
            theirs.pins.release(live)
            theirs.pins.sync()
            live = f"t{i}"
        for i in (2 * turn + 1, 2 * turn + 2, 2 * turn + 3):
            ours.pins.release(f"o{i}")  # our sessions closed: only theirs protect blobs now
        report = ours.collect(now=FAR_FUTURE)
        held = blobs[2 * turn + 3]
        assert ours.exists(held), f"turn {turn}: a blob another store pins was collected"
        assert set(report.removed) == {blobs[2 * turn + 1], blobs[2 * turn + 2]}


class _PausingJournal(PinJournal):
    """A journal that runs ``during`` once, while it writes a compaction."""

    during: Callable[[], object] | None = None

    def _replace(self, ids: Any) -> None:
        hook, self.during = self.during, None
        if hook is not None:
            hook()
        super()._replace(ids)


def test_a_release_during_a_compaction_is_compacted_by_the_next_one(tmp_path: Path) -> None:
    """A release racing a compaction left its blob published for good.

    The compaction took its snapshot, the release marked the file stale, and
    the compaction then marked it fresh: no later compaction removed the
    released id, so every other store kept that blob while this store lived.
    """
    pins_dir = tmp_path / "blobs" / PINS_DIR
    journal = _PausingJournal(pins_dir)
    table = PinTable(journal=journal)
    mine = FsBlobStore(tmp_path, fsync=False, pins=table)
    kept, released, gone = (mine.store(Text(text=t)) for t in ("kept", "released", "gone"))
    table.pin("a", [kept])
    table.pin("b", [released])
    table.pin("c", [gone])
    table.release("c")
    journal.during = lambda: table.release("b")  # the release lands mid-compaction
    table.sync()
    table.sync()  # what the next collection (or release) runs first
    other = collector(tmp_path)
    report = other.collect(now=FAR_FUTURE)
    assert set(report.removed) == {released, gone} and report.protected == (kept,)
