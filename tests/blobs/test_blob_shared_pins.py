"""Processes sharing one blob directory never delete each other's pinned blobs (issue 19.6).

Pins lived in memory, so a second process's retention deleted blobs a live
session of the first still showed. Each store now publishes its pins under
``blobs/.pins/`` behind a lock its process holds for as long as it lives;
collections honour every live store's pins and forget those of dead ones.

Real processes (``subprocess`` running a small pin-holder), real ``flock``;
no sleeps for a guessed time: the child answers each command on stdout.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.blobs import retention as retention_module
from fore.actors.blobs import shared_pins as shared_pins_module
from fore.actors.blobs.fs_store import FsBlobStore
from fore.actors.blobs.pins import PinTable
from fore.actors.blobs.shared_pins import (
    PINS_DIR,
    ForeignPins,
    PinJournal,
    gc_lock,
    parse_pin_data,
)
from fore.messages.blobs import Text
from fore.supervision import Runtime

FAR_FUTURE = 10**11  # "now" for collections: every blob is past any age limit

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from fore.actors.blobs.fs_store import FsBlobStore
    from fore.actors.blobs.shared_pins import gc_lock
    from fore.messages.blobs import Text

    store = FsBlobStore(Path(sys.argv[1]), fsync=False)
    held = []
    for line in sys.stdin:
        command, *args = line.split()
        if command == "store":
            print(store.store(Text(text="held " * 50), owner="a"), flush=True)
        elif command == "pin":
            print(store.pins.pin("a", [__import__("uuid").UUID(args[0])]), flush=True)
        elif command == "release":
            store.pins.release("a")
            store.pins.sync()
            print("released", flush=True)
        elif command == "hold-gc":
            lock = gc_lock(store.pins_dir, exclusive=False, timeout=5)
            held.append(lock)
            print(lock.__enter__(), flush=True)
        elif command == "drop-gc":
            held.pop().__exit__(None, None, None)
            print("dropped", flush=True)
        elif command == "close":
            store.close()
            print("closed", flush=True)
    """
)


class Holder:
    """A child process with its own store on ``root``, driven line by line."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def ask(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer, f"the holder died on {command!r}"
        return answer

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.proc.stdout,):
            if stream is not None:
                stream.close()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    h = Holder(tmp_path / "shared")
    try:
        yield h
    finally:
        h.stop()


def collector(root: Path) -> FsBlobStore:
    """A store that removes every unprotected blob (no age, no grace)."""
    return FsBlobStore(root, fsync=False, max_age_s=0.0, grace_s=0.0)


def test_another_processes_pinned_blob_survives_our_collection(
    holder: Holder, tmp_path: Path
) -> None:
    root = tmp_path / "shared"
    pinned = uuid.UUID(holder.ask("store"))
    unpinned = uuid.UUID(holder.ask("store"))
    assert holder.ask(f"pin {pinned}") == "1"
    ours = collector(root)
    own_orphan = ours.store(Text(text="nobody pins this"))
    report = ours.collect(now=FAR_FUTURE)
    assert pinned in report.protected
    assert set(report.removed) == {unpinned, own_orphan}
    assert ours.exists(pinned)
    # Released there: collectable here.
    assert holder.ask("release") == "released"
    assert ours.collect(now=FAR_FUTURE).removed == (pinned,)


def test_pins_of_a_killed_process_stop_counting_and_its_files_go(
    holder: Holder, tmp_path: Path
) -> None:
    root = tmp_path / "shared"
    pinned = uuid.UUID(holder.ask("store"))
    holder.ask(f"pin {pinned}")
    pins_dir = root / "blobs" / PINS_DIR
    published = sorted(p.name for p in pins_dir.iterdir() if p.name != "gc.lock")
    assert [n.rsplit(".", 1)[1] for n in published] == ["lock", "pins"]
    ours = collector(root)
    assert pinned in ours.collect(now=FAR_FUTURE).protected
    holder.kill()  # SIGKILL: no cleanup ran; the kernel dropped its lock
    assert ours.collect(now=FAR_FUTURE).removed == (pinned,)
    assert [p.name for p in pins_dir.iterdir()] == ["gc.lock"]


def test_a_pin_in_progress_holds_off_the_removal(
    holder: Holder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinner holds ``gc.lock`` shared; a collector waits (bounded) and keeps the blob."""
    root = tmp_path / "shared"
    ours = collector(root)
    blob = ours.store(Text(text="about to be pinned elsewhere"))
    assert holder.ask("hold-gc") == "taken"
    monkeypatch.setattr(retention_module, "COLLECT_LOCK_TIMEOUT_S", 0.05)
    report = ours.collect(now=FAR_FUTURE)
    assert report.removed == () and ours.exists(blob)  # kept for the next run
    holder.ask(f"pin {blob}")
    assert holder.ask("drop-gc") == "dropped"
    assert blob in ours.collect(now=FAR_FUTURE).protected and ours.exists(blob)


def test_a_closed_store_withdraws_its_pins(holder: Holder, tmp_path: Path) -> None:
    root = tmp_path / "shared"
    pinned = uuid.UUID(holder.ask("store"))
    holder.ask(f"pin {pinned}")
    assert holder.ask("close") == "closed"
    assert collector(root).collect(now=FAR_FUTURE).removed == (pinned,)


def test_two_stores_in_one_process_honour_each_others_pins(tmp_path: Path) -> None:
    first, second = FsBlobStore(tmp_path, fsync=False), collector(tmp_path)
    blob = first.store(Text(text="one"), owner="s")
    first.pins.pin("s", [blob])
    assert blob in second.collect(now=FAR_FUTURE).protected
    first.pins.release("s")
    first.pins.sync()  # the compaction the actor runs after a release
    assert second.collect(now=FAR_FUTURE).removed == (blob,)


def test_a_store_dropped_without_close_withdraws_its_files(tmp_path: Path) -> None:
    store = FsBlobStore(tmp_path, fsync=False)
    store.pins.pin("s", [store.store(Text(text="x"))])
    pins_dir = tmp_path / "blobs" / PINS_DIR
    assert len(list(pins_dir.glob("*.pins"))) == 1
    del store
    gc.collect()
    assert list(pins_dir.glob("*.pins")) == [] and list(pins_dir.glob("*-*.lock")) == []


def test_a_runtime_publishes_while_open_and_withdraws_on_close(tmp_path: Path) -> None:
    rt = Runtime(name="shared-pins", blob_dir=tmp_path / "store")
    try:
        assert rt.blob_fs is not None
        blob = rt.blob_fs.store(Text(text="pinned by a session"), owner="s")
        rt.blob_fs.pins.pin("s", [blob])
        assert blob in collector(tmp_path / "store").collect(now=FAR_FUTURE).protected
    finally:
        assert rt.close(timeout=30)
    pins_dir = tmp_path / "store" / "blobs" / PINS_DIR
    assert [p.name for p in pins_dir.iterdir()] == ["gc.lock"]
    assert collector(tmp_path / "store").collect(now=FAR_FUTURE).removed == (blob,)


def test_releases_compact_the_published_file(tmp_path: Path) -> None:
    pins_dir = tmp_path / PINS_DIR
    table = PinTable(journal=PinJournal(pins_dir))
    ids = [uuid.uuid4() for _ in range(50)]
    for i, blob in enumerate(ids):
        table.pin(f"s{i % 5}", [blob])
    reader = ForeignPins(pins_dir)
    reader.refresh()
    assert reader.pinned() == set(ids) and reader.stores == 1
    table.release("s0")
    assert table.journal is not None and table.journal.stale
    reader.refresh()
    assert reader.pinned() == set(ids)  # over-protects until compacted
    table.sync()
    reader.refresh()
    assert reader.pinned() == {b for i, b in enumerate(ids) if i % 5}
    for i in range(1, 5):
        table.release(f"s{i}")
    table.sync()  # nothing pinned: the publication is withdrawn
    assert not table.journal.is_open and [p.name for p in pins_dir.iterdir()] == ["gc.lock"]


def test_a_pin_file_is_read_on_from_where_the_last_whole_line_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends are read as they come, a torn last line once it is whole; too big: uncertain."""
    pins_dir = tmp_path / PINS_DIR
    journal = PinJournal(pins_dir)
    first, second = uuid.uuid4(), uuid.uuid4()
    journal.append([first], lambda: [first])
    data = pins_dir / f"{journal.token}.pins"
    reader = ForeignPins(pins_dir)
    try:
        reader.refresh()
        assert reader.pinned() == {first}
        line = f"{second}\n".encode()
        with data.open("ab") as fh:
            fh.write(line[:20])  # a writer mid-append
        reader.refresh()
        assert reader.pinned() == {first} and reader.certain
        with data.open("ab") as fh:
            fh.write(line[20:])
        reader.refresh()
        assert reader.pinned() == {first, second}
        monkeypatch.setattr(shared_pins_module, "MAX_PIN_FILE_BYTES", 10)
        reader.refresh()
        assert not reader.certain  # pins it will not read: a collector removes nothing
    finally:
        reader.close()
        journal.close()


def test_a_removed_publication_is_noticed_and_published_again(tmp_path: Path) -> None:
    pins_dir = tmp_path / PINS_DIR
    table = PinTable(journal=PinJournal(pins_dir))
    first, second = uuid.uuid4(), uuid.uuid4()
    table.pin("s", [first])
    for path in pins_dir.glob("*-*.*"):
        path.unlink()  # someone wiped it
    table.pin("s", [second])
    reader = ForeignPins(pins_dir)
    reader.refresh()
    assert reader.pinned() == {first, second}


def test_when_other_stores_pins_cannot_be_read_nothing_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = collector(tmp_path)
    blob = store.store(Text(text="x"))
    listdir = os.listdir

    def denied(path: str | os.PathLike[str]) -> list[str]:
        if Path(path).name == PINS_DIR:
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", denied)
    assert store.collect(now=FAR_FUTURE).removed == () and store.exists(blob)
    monkeypatch.undo()
    assert store.collect(now=FAR_FUTURE).removed == (blob,)


def test_the_gc_lock_excludes_holders_in_one_process(tmp_path: Path) -> None:
    with gc_lock(tmp_path, exclusive=False, timeout=1) as shared:
        assert shared == "taken"
        with gc_lock(tmp_path, exclusive=True, timeout=0.02) as exclusive:
            assert exclusive == "busy"
        with gc_lock(tmp_path, exclusive=False, timeout=0.02) as another:
            assert another == "taken"
    with gc_lock(tmp_path, exclusive=True, timeout=1) as exclusive:
        assert exclusive == "taken"


@settings(deadline=None)
@given(st.binary(max_size=2000))
def test_pin_data_parser_never_raises_and_keeps_only_whole_canonical_ids(data: bytes) -> None:
    ids = parse_pin_data(data)
    complete = data[: data.rfind(b"\n") + 1]
    for blob in ids:
        assert str(blob).encode() in complete.split()


@settings(deadline=None)
@given(st.lists(st.uuids(), max_size=20), st.binary(max_size=40))
def test_pin_data_round_trips_with_a_torn_tail(ids: list[uuid.UUID], tail: bytes) -> None:
    data = (" ".join(map(str, ids)) + "\n").encode() + tail.replace(b"\n", b"")
    assert parse_pin_data(data) == set(ids)
