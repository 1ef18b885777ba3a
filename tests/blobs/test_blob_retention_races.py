"""Retention races, made deterministic: a blob a live session shows is never collected.

Each race is driven in the order it needs -- a blocking-lane job held at a
gate, a compaction paused between two of its steps, a pin file compacted
twice between two collections -- never by sleeping and hoping. The state
machine at the end runs whole sequences of opens, stores, quotes, closes and
collections of sessions in one or two "processes" (stores with their own
blob-store actor, publishing their pins to one shared blob directory) on a
stepped blocking lane: hypothesis picks how long each queued job waits.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

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
    StoredOutput,
    StoreToolOutput,
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


# -- whole sequences, across stores, on a stepped blocking lane ---------------------------


@dataclass
class _Job:
    future: Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    waits: int | None = None
    """Actions it still waits before it runs (the state machine draws it)."""


class SteppedLane:
    """A blocking lane that runs nothing by itself: the test runs the job it picks.

    Jobs run on the test's thread, one at a time, in whatever order the test
    chooses -- the orders a loaded machine produces only now and then.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.jobs: list[_Job] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._cond:
            self.jobs.append(_Job(future, fn, args, kwargs))
            self._cond.notify_all()
        return future

    def run(self, index: int) -> None:
        with self._cond:
            job = self.jobs.pop(index)
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            result = job.fn(*job.args, **job.kwargs)
        except BaseException as exc:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)

    def run_stats(self) -> None:
        """Wait for the (one) stats job and run it: every earlier message is handled then."""
        with self._cond:
            assert self._cond.wait_for(
                lambda: any(getattr(j.fn, "__name__", "") == "_stats" for j in self.jobs), WAIT
            ), "the blob-store actor did not get to its stats request"
            index = next(
                i for i, j in enumerate(self.jobs) if getattr(j.fn, "__name__", "") == "_stats"
            )
        self.run(index)

    def shutdown(self, **_kwargs: Any) -> bool:
        with self._cond:
            jobs, self.jobs = self.jobs, []
        for job in jobs:
            job.future.cancel()
        return True


@dataclass
class _Process:
    """One blob store and its actor: a process sharing the blob directory."""

    system: ActorSystem
    store: FsBlobStore
    ref: Any


@dataclass
class _Session:
    process: int
    live: bool = True
    refs: set[uuid.UUID] = field(default_factory=set)
    """Blobs its history shows that must exist while it is live."""


class RetentionMachine(RuleBasedStateMachine):
    """Sessions of one or two processes on one blob directory, on a stepped lane.

    The model: a blob a session stored, or quoted while a live session of the
    same process already kept it (a handoff), must exist while the session is
    live. A quote of a blob only another process keeps counts once its pin
    landed -- across processes nothing orders a release before a pin still on
    the other process's lane. Every collection removes everything unprotected.
    """

    root: Path

    def __init__(self) -> None:
        super().__init__()
        self.lane = SteppedLane()
        self.processes: list[_Process] = []
        self.sessions: dict[str, _Session] = {}
        self.pending: list[tuple[str, Future[Any], uuid.UUID | None]] = []
        """Asks in flight: (session, reply, quoted blob or None for a store)."""
        self.ids = itertools.count()

    @initialize(processes=st.integers(1, 2), sessions=st.integers(2, 4))
    def start(self, processes: int, sessions: int) -> None:
        root = self.root / f"run-{uuid.uuid4().hex[:8]}"
        for index in range(processes):
            system = ActorSystem(name=f"retention-{index}", dispatcher_threads=2)
            system.blocking = self.lane  # type: ignore[assignment]
            store = collector(root)
            with system.activated():
                ref = BlobStoreActor.start(store, collect_interval=3600.0)
            self.processes.append(_Process(system, store, ref))
        for index in range(sessions):
            self.sessions[f"s{next(self.ids)}"] = _Session(index % processes)

    def teardown(self) -> None:
        for process in self.processes:
            process.system.shutdown(timeout=WAIT)
            process.store.close()

    # -- helpers -------------------------------------------------------------------

    def settle(self) -> None:
        """Every actor has handled its mail; replies of finished work are in the model."""
        for process in self.processes:
            stats = process.ref.ask(GetBlobStoreStats(), block=False)
            self.lane.run_stats()
            stats.get(timeout=WAIT)
        for item in list(self.pending):
            session, reply, quoted = item
            if not reply.done():
                continue
            self.pending.remove(item)
            answer = reply.get(timeout=0)
            if isinstance(answer, StoredOutput):
                assert answer.blob_id is not None
                self.sessions[session].refs.add(uuid.UUID(answer.blob_id))
            elif quoted is not None and self.exists(quoted):
                # The pin landed in the job just run; the blob was there then.
                self.sessions[session].refs.add(quoted)

    def exists(self, blob: uuid.UUID) -> bool:
        return self.processes[0].store.exists(blob)

    def live(self) -> list[str]:
        return sorted(s for s, v in self.sessions.items() if v.live)

    def shown(self) -> list[uuid.UUID]:
        """Blobs live sessions must keep (sorted, for hypothesis to pick from)."""
        return sorted({b for s in self.sessions.values() if s.live for b in s.refs})

    def advance(self, data: st.DataObject) -> None:
        """Run the jobs whose turn has come; a new job waits as many actions as hypothesis says.

        Jobs run oldest first among those due: a job overtakes older ones when
        they were drawn longer waits -- the orders a loaded lane produces only
        now and then, and the races need.
        """
        while True:
            for job in self.lane.jobs:
                if job.waits is None:
                    job.waits = data.draw(st.integers(0, 3), label="job waits")
            due = next((i for i, job in enumerate(self.lane.jobs) if job.waits == 0), None)
            if due is None:
                break
            self.lane.run(due)
            self.settle()
        for job in self.lane.jobs:
            job.waits = None if job.waits is None else job.waits - 1

    def quotable(self) -> list[tuple[str, uuid.UUID]]:
        """(session, blob): a live session and a blob another live session shows."""
        return [(s, b) for s in self.live() for b in self.shown() if b not in self.sessions[s].refs]

    # -- actions: each sends one message; then some queued jobs run ------------------------
    #
    # One rule draws the action: hypothesis's swarm testing disables whole rules
    # per example, and a race needs stores, quotes, closes and collections together.

    def open_session(self, data: st.DataObject) -> None:
        process = data.draw(st.integers(0, len(self.processes) - 1), label="process")
        self.sessions[f"s{next(self.ids)}"] = _Session(process)

    def store_output(self, data: st.DataObject) -> None:
        session = data.draw(st.sampled_from(self.live()), label="session")
        ref = self.processes[self.sessions[session].process].ref
        message = StoreToolOutput(session_id=session, call_id="c", output="row\n" * 400)
        self.pending.append((session, ref.ask(message, block=False), None))
        self.settle()

    def quote(self, data: st.DataObject) -> None:
        session, blob = data.draw(st.sampled_from(self.quotable()), label="quote")
        here = self.sessions[session].process
        kept_here = any(
            s.live and s.process == here and blob in s.refs for s in self.sessions.values()
        )
        ref = self.processes[here].ref
        reply = ref.ask(ReferenceBlobs(session_id=session, texts=(quoting(blob),)), block=False)
        if kept_here:
            self.sessions[session].refs.add(blob)  # a handoff: protected from now on
        else:
            self.pending.append((session, reply, blob))
        self.settle()

    def close(self, data: st.DataObject) -> None:
        # A session that shows nothing releases nothing: close one that does, if any.
        showing = [s for s in self.live() if self.sessions[s].refs]
        session = data.draw(st.sampled_from(showing or self.live()), label="session")
        self.sessions[session].live = False
        self.processes[self.sessions[session].process].ref.tell(ReleaseSession(session_id=session))
        self.settle()

    def collect(self, data: st.DataObject) -> None:
        process = data.draw(st.integers(0, len(self.processes) - 1), label="process")
        self.processes[process].ref.ask(CollectBlobs(), block=False)
        self.settle()

    def run_every_job(self, data: st.DataObject) -> None:
        while self.lane.jobs:
            self.lane.run(0)
            self.settle()

    @rule(data=st.data())
    def act(self, data: st.DataObject) -> None:
        # Listed twice: drawn twice as often (a quote needs a stored blob to quote).
        possible: list[Callable[[st.DataObject], None]] = []
        if len(self.live()) < 2:
            possible.append(self.open_session)
        if self.live():
            possible += [self.store_output, self.store_output, self.close]
        if self.shown():
            possible.append(self.collect)
        if self.quotable():
            possible += [self.quote, self.quote]
        if self.lane.jobs:
            possible.append(self.run_every_job)
        action = data.draw(st.sampled_from(possible), label="action")
        action(data)
        self.advance(data)

    @invariant()
    def live_sessions_keep_what_they_show(self) -> None:
        for name, session in self.sessions.items():
            if session.live:
                missing = [b for b in session.refs if not self.exists(b)]
                assert not missing, f"{name} shows collected blobs {missing}"

    def drain_and_check_collections_remove_the_rest(self) -> None:
        """Run everything; then a collection leaves only what live sessions keep."""
        for process in self.processes:
            while self.lane.jobs:
                self.lane.run(0)
                self.settle()
            process.ref.ask(CollectBlobs(), block=False)
            self.settle()
            while self.lane.jobs:
                self.lane.run(0)
                self.settle()
        kept = set(self.shown())
        left = set(self.processes[0].store.blob_ids())
        assert kept <= left, f"collected while shown: {kept - left}"
        assert left <= kept, f"kept although nothing protects them: {left - kept}"


def test_retention_state_machine(tmp_path: Path) -> None:
    class Machine(RetentionMachine):
        root = tmp_path

        def teardown(self) -> None:
            try:
                self.drain_and_check_collections_remove_the_rest()
            finally:
                super().teardown()

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=120,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
