"""The file-system blob store: layout, atomicity, ids, line index, retention (issue 6)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fore.actors.blobs.fs_store import (
    BlobKindError,
    BlobNotFound,
    BlobStoreError,
    FsBlobStore,
    InvalidBlobId,
    parse_blob_id,
)
from fore.actors.blobs.line_index import LineIndex, count_lines
from fore.actors.blobs.pins import PinTable
from fore.actors.blobs.selectors import inspect_blob
from fore.actors.blobs.summary import history_text, referenced_blob_ids
from fore.messages.blobs import Structured, Text


def make_store(root: Path, **kwargs: object) -> FsBlobStore:
    kwargs.setdefault("fsync", False)
    return FsBlobStore(root, **kwargs)  # type: ignore[arg-type]


def lines_of(text: str) -> list[str]:
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def random_text(rng: random.Random, n_lines: int) -> str:
    pieces = []
    for _ in range(n_lines):
        length = rng.choice([0, 1, 5, 40, 200])
        body = "".join(rng.choice("ab é😀\t\r") for _ in range(length))
        pieces.append(body + rng.choice(["\n", "\r\n", "\n"]))
    text = "".join(pieces)
    if rng.random() < 0.5:
        text = text.rstrip("\n") + rng.choice(["", "tail", "\r"])
    return text


# ------------------------------------------------------------ round trip/layout


def test_text_round_trip_and_layout(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    text = "héllo\r\nwörld 😀\n\x00raw\r"
    blob_id = store.store(Text(text=text))
    assert isinstance(blob_id, uuid.UUID)
    assert blob_id.version == 7
    path = tmp_path / "blobs" / f"{blob_id}.txt"
    assert path.read_bytes() == text.encode()  # byte-exact, no newline translation
    assert store.load(blob_id) == Text(text=text)
    assert store.load(str(blob_id)) == Text(text=text)
    assert store.exists(blob_id)
    assert store.kind(blob_id) == "text"
    assert store.size(blob_id) == len(text.encode())
    assert sorted(p.name for p in (tmp_path / "blobs").iterdir()) == [f"{blob_id}.txt"]


def test_structured_round_trip_and_layout(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    value = {"a": [1, 2.5, -0.0, 10**30, None, True], "ü": {"nested": "x"}, "": []}
    blob_id = store.store(Structured(value=value))
    path = tmp_path / "blobs" / f"{blob_id}.json"
    assert path.read_text(encoding="utf-8") == json.dumps(
        value, separators=(",", ":"), ensure_ascii=False
    )
    loaded = store.load(blob_id)
    assert loaded == Structured(value=value)
    assert isinstance(loaded, Structured)
    assert list(loaded.value) == ["a", "ü", ""]  # type: ignore[arg-type]  # order kept
    assert store.kind(blob_id) == "structured"


def test_empty_and_surrogate_text_round_trip(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    for text in ("", "bad \udcff name\n"):
        blob_id = store.store(Text(text=text))
        assert store.load(blob_id) == Text(text=text)
        assert store.read_lines(blob_id, 0, 10) == text


def test_ids_are_unique_and_time_ordered(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    ids = [store.store(Text(text=str(i))) for i in range(50)]
    assert len(set(ids)) == 50
    assert ids == sorted(ids)
    assert store.blob_ids() == ids


def test_missing_blob(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    missing = uuid.uuid4()
    assert not store.exists(missing)
    for call in (store.load, store.kind, store.size, store.line_count):
        with pytest.raises(BlobNotFound):
            call(missing)
    with pytest.raises(BlobNotFound):
        store.read_lines(missing, 0, 1)
    assert not store.delete(missing)


@pytest.mark.parametrize(
    "bad", ["../../etc/passwd", "", "not-a-uuid", "123e4567-e89b", 123, None, b"\x00" * 16, 1.5]
)
def test_invalid_ids_are_rejected_everywhere(tmp_path: Path, bad: object) -> None:
    store = make_store(tmp_path)
    calls = [store.load, store.exists, store.kind, store.size, store.line_count, store.delete]
    for call in calls:
        with pytest.raises(InvalidBlobId):
            call(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidBlobId):
        store.read_lines(bad, 0, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidBlobId):
        store.collect([bad])  # type: ignore[list-item]
    assert issubclass(InvalidBlobId, ValueError)
    assert issubclass(InvalidBlobId, BlobStoreError)


def test_only_the_canonical_id_reaches_a_path(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    blob_id = store.store(Text(text="x"))
    for form in (str(blob_id).upper(), f"{{{blob_id}}}", blob_id.hex, f"urn:uuid:{blob_id}"):
        assert parse_blob_id(form) == blob_id
        assert store.load(form) == Text(text="x")
        assert store.path_for(form, "text").name == f"{blob_id}.txt"


# ------------------------------------------------------------------- atomicity


def test_failed_rename_leaves_no_blob_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path)

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("simulated failure before rename")

    monkeypatch.setattr(os, "replace", broken_replace)
    ids_before = set(store.blob_ids())
    with pytest.raises(BlobStoreError, match="simulated failure"):
        store.store(Text(text="never visible"))
    monkeypatch.undo()
    assert set(store.blob_ids()) == ids_before
    assert list((tmp_path / "blobs").iterdir()) == []


def test_interrupted_store_is_invisible_and_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path)
    planned = uuid.UUID("01900000-0000-7000-8000-000000000001")
    monkeypatch.setattr("fore.actors.blobs.fs_store.new_blob_id", lambda: planned)

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    def no_cleanup(path: object) -> None:
        raise OSError("process already dead")

    # A crash between write and rename: the cleanup never runs either.
    monkeypatch.setattr(os, "replace", crash)
    monkeypatch.setattr(os, "unlink", no_cleanup)
    with pytest.raises(BlobStoreError):
        store.store(Text(text="half written " * 1000))
    monkeypatch.undo()

    leftovers = list((tmp_path / "blobs").iterdir())
    assert len(leftovers) == 1
    assert leftovers[0].name.startswith(".tmp-")
    assert not store.exists(planned)
    with pytest.raises(BlobNotFound):
        store.load(planned)
    assert store.blob_ids() == []

    assert store.sweep_temp() == 1
    assert list((tmp_path / "blobs").iterdir()) == []


def test_startup_sweeps_leftover_temp_files(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    mine = blobs / f".tmp-{os.getpid()}-abc.txt"  # this process's, not being written
    mine.write_text("partial")
    legacy = blobs / ".tmp-abc123.txt"  # no pid in the name: swept once old enough
    legacy.write_text("partial")
    os.utime(legacy, (1.0, 1.0))
    orphan_index = blobs / f"{uuid.uuid4()}.lines"
    orphan_index.write_bytes(b"stale")
    foreign = blobs / "README"
    foreign.write_text("not ours")
    store = make_store(tmp_path)
    assert sorted(p.name for p in blobs.iterdir()) == ["README"]
    assert store.blob_ids() == []


def _exited_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return int(done.stdout)


def test_sweep_leaves_temp_files_of_live_writers_alone(tmp_path: Path) -> None:
    """Two processes (or instances) may share a blob directory: a sweep at one's
    start must not delete the temp file the other is writing."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    dead = blobs / f".tmp-{_exited_pid()}-dead.txt"
    dead.write_text("crashed writer")
    fresh_legacy = blobs / ".tmp-nopid.txt"
    fresh_legacy.write_text("unknown owner, young")
    writer = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        live = blobs / f".tmp-{writer.pid}-live.json"
        live.write_text("[1, 2")  # another process is half-way through a write
        store = make_store(tmp_path)
        assert sorted(p.name for p in blobs.iterdir()) == sorted([live.name, fresh_legacy.name])
        # Past the grace, a pid is no proof of ownership any more (it may be reused).
        assert store.sweep_temp(now=live.stat().st_mtime + store.temp_grace_s + 1) == 2
        assert list(blobs.iterdir()) == []
    finally:
        writer.stdin.close()  # type: ignore[union-attr]
        writer.wait(30)


def test_a_sweep_never_removes_another_instances_write_in_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = make_store(tmp_path)
    sweeper = make_store(tmp_path)  # a second instance on the same root, same process
    entered, release = threading.Event(), threading.Event()
    real_fdopen = os.fdopen

    def slow_fdopen(fd: int, *args: object, **kwargs: object) -> object:
        entered.set()
        assert release.wait(30)
        return real_fdopen(fd, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "fdopen", slow_fdopen)
    result: list[uuid.UUID] = []
    thread = threading.Thread(target=lambda: result.append(writer.store(Text(text="payload"))))
    thread.start()
    try:
        assert entered.wait(30)
        temps = [p for p in (tmp_path / "blobs").iterdir() if p.name.startswith(".tmp-")]
        assert len(temps) == 1
        assert sweeper.sweep_temp() == 0
        assert temps[0].exists()
    finally:
        release.set()
        thread.join(30)
    monkeypatch.undo()
    assert sweeper.load(result[0]) == Text(text="payload")


# ------------------------------------------------------------------ line index


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), n_lines=st.integers(0, 3000))
def test_read_lines_equals_naive_slicing(
    tmp_path_factory: pytest.TempPathFactory, seed: int, n_lines: int
) -> None:
    rng = random.Random(seed)
    text = random_text(rng, n_lines)
    store = make_store(tmp_path_factory.mktemp("lines"), index_min_bytes=0)
    blob_id = store.store(Text(text=text))
    expected = lines_of(text)
    assert store.line_count(blob_id) == len(expected) == count_lines(text)
    assert store.read_lines(blob_id, 0, len(expected)) == text
    for _ in range(10):
        start = rng.randint(0, len(expected) + 3)
        stop = rng.randint(start, len(expected) + 300)
        assert store.read_lines(blob_id, start, stop) == "".join(expected[start:stop])


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"\n", b"\r", b"\r\n", b"\xc3\xa9"]), max_size=60).map(
        b"".join
    ),
    stride=st.integers(1, 5),
    start=st.integers(0, 70),
    width=st.integers(0, 70),
)
def test_line_index_any_stride(data: bytes, stride: int, start: int, width: int) -> None:
    import io

    index = LineIndex.build(data, stride=stride)
    text_lines = lines_of(data.decode())
    assert index.line_count == len(text_lines)
    assert LineIndex.from_bytes(index.to_bytes()) == index
    got = index.read_range(io.BytesIO(data), start, start + width)
    assert got.decode() == "".join(text_lines[start : start + width])


def test_line_index_rejects_garbage() -> None:
    for raw in (b"", b"junk" * 10, LineIndex.build(b"a\n" * 300, stride=4).to_bytes()[:-3]):
        with pytest.raises(ValueError):
            LineIndex.from_bytes(raw)


def test_sidecar_written_for_big_text_and_rebuilt_when_missing_or_bad(tmp_path: Path) -> None:
    store = make_store(tmp_path, index_min_bytes=1000)
    text = "".join(f"row {i}\n" for i in range(5000))
    blob_id = store.store(Text(text=text))
    small = store.store(Text(text="tiny\n"))
    blobs = tmp_path / "blobs"
    sidecar = blobs / f"{blob_id}.lines"
    assert sidecar.exists()
    assert not (blobs / f"{small}.lines").exists()
    assert LineIndex.from_bytes(sidecar.read_bytes()).line_count == 5000

    for damage in (sidecar.unlink, lambda: sidecar.write_bytes(b"garbage")):
        damage()
        fresh = make_store(tmp_path, index_min_bytes=1000)  # no in-memory cache
        assert fresh.read_lines(blob_id, 4000, 4002) == "row 4000\nrow 4001\n"
        assert LineIndex.from_bytes(sidecar.read_bytes()).line_count == 5000

    # A stale index (of other content) is detected by its recorded size.
    sidecar.write_bytes(LineIndex.build(b"x\n" * 10).to_bytes())
    fresh = make_store(tmp_path, index_min_bytes=1000)
    assert fresh.line_count(blob_id) == 5000


def test_line_access_on_structured_blob_is_a_kind_error(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    blob_id = store.store(Structured(value=[1, 2]))
    with pytest.raises(BlobKindError):
        store.read_lines(blob_id, 0, 1)
    with pytest.raises(BlobKindError):
        store.line_count(blob_id)
    with pytest.raises(ValueError):
        store.read_lines(store.store(Text(text="a")), -1, 1)


# ------------------------------------------------------------------- retention


def _aged(store: FsBlobStore, blob_id: uuid.UUID, mtime: float) -> None:
    path = store.path_for(blob_id, store.kind(blob_id))
    os.utime(path, (mtime, mtime))


def test_age_limit_never_collects_referenced(tmp_path: Path) -> None:
    store = make_store(tmp_path, max_age_s=3600)
    now = 1_000_000.0
    old_ref, old_free, young = (store.store(Text(text=f"blob {i}")) for i in range(3))
    _aged(store, old_ref, now - 7200)
    _aged(store, old_free, now - 7200)
    _aged(store, young, now - 60)
    history = [history_text(old_ref, "text | 1 lines"), "unrelated"]
    report = store.collect(referenced_blob_ids(history), now=now)
    assert report.removed == (old_free,)
    assert report.protected == (old_ref,)
    assert report.kept == 2
    assert store.exists(old_ref)
    assert store.exists(young)
    assert not store.exists(old_free)


def test_size_limit_removes_oldest_unreferenced_first(tmp_path: Path) -> None:
    store = make_store(tmp_path, max_total_bytes=350)
    now = 1_000_000.0
    ids = [store.store(Text(text=str(i) * 100)) for i in range(6)]  # 100 bytes each
    for age, blob_id in enumerate(ids):
        _aged(store, blob_id, now - 1000 + age)
    referenced = {ids[0], ids[2]}
    report = store.collect(referenced, now=now)
    # 600 bytes: drop the oldest unreferenced (1, 3) -> 400, then 4 -> 300.
    assert report.removed == (ids[1], ids[3], ids[4])
    assert report.removed_bytes == 300
    assert report.kept_bytes == 300
    assert report.protected == (ids[0], ids[2])
    assert not report.over_budget
    assert set(store.blob_ids()) == {ids[0], ids[2], ids[5]}


def test_referenced_blobs_stay_even_over_budget(tmp_path: Path) -> None:
    store = make_store(tmp_path, max_total_bytes=10, max_age_s=1)
    ids = [store.store(Text(text="z" * 100)) for _ in range(3)]
    report = store.collect(set(ids), now=10**10)
    assert report.removed == ()
    assert report.over_budget
    assert all(store.exists(i) for i in ids)


def test_grace_period_and_sidecars(tmp_path: Path) -> None:
    store = make_store(tmp_path, max_total_bytes=0, grace_s=600, index_min_bytes=0)
    blob_id = store.store(Text(text="a\n" * 100))
    assert (tmp_path / "blobs" / f"{blob_id}.lines").exists()
    assert store.collect(set()).removed == ()  # too young
    report = store.collect(set(), now=os.path.getmtime(store.path_for(blob_id, "text")) + 601)
    assert report.removed == (blob_id,)
    # Only the directory of published pins (and its collection lock) is left.
    assert [p.name for p in (tmp_path / "blobs").iterdir()] == [".pins"]


def test_collect_without_limits_removes_nothing_and_ignores_foreign_files(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path)
    blob_id = store.store(Text(text="keep"))
    (tmp_path / "blobs" / "notes.txt").write_text("foreign")
    report = store.collect(set(), now=10**12)
    assert report.removed == ()
    assert store.exists(blob_id)
    strict = make_store(tmp_path, max_age_s=0, max_total_bytes=0)
    assert strict.collect(set(), now=10**12).removed == (blob_id,)
    assert (tmp_path / "blobs" / "notes.txt").exists()


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 300), min_size=1, max_size=12),
    data=st.data(),
    budget=st.integers(0, 2000),
    max_age=st.integers(0, 100),
)
def test_retention_property(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    data: st.DataObject,
    budget: int,
    max_age: int,
) -> None:
    store = make_store(tmp_path_factory.mktemp("ret"), max_total_bytes=budget, max_age_s=max_age)
    now = 10_000.0
    ids = []
    for i, size in enumerate(sizes):
        blob_id = store.store(Text(text="q" * size))
        _aged(store, blob_id, now - data.draw(st.integers(0, 200), label=f"age{i}"))
        ids.append(blob_id)
    referenced = set(data.draw(st.lists(st.sampled_from(ids)), label="refs"))
    report = store.collect(referenced, now=now)
    assert referenced.isdisjoint(report.removed)
    assert all(store.exists(r) for r in referenced)
    left = store.total_bytes()
    assert left == report.kept_bytes
    assert report.over_budget == (left > budget)
    if left > budget:  # only referenced blobs may be left over budget
        assert set(store.blob_ids()) <= referenced


def test_collect_honours_the_store_pins_and_an_injected_table(tmp_path: Path) -> None:
    pins = PinTable()
    store = make_store(tmp_path, max_total_bytes=0, max_age_s=0, pins=pins)
    assert store.pins is pins
    a, b, c = (store.store(Text(text=f"blob {i}")) for i in range(3))
    pins.pin("s1", [a])
    other = PinTable()
    other.pin("s2", [b])
    report = store.collect(pins=other, now=10**12)
    assert report.removed == (c,) and set(report.protected) == {a, b}
    pins.release("s1")
    assert store.collect(now=10**12).removed == (a, b)  # b was only pinned in `other`


def test_a_pin_taken_while_collect_runs_still_protects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path, max_total_bytes=0)
    blob_id = store.store(Text(text="referenced only after the scan started"))
    real_scan = store._scan

    def scan_then_pin() -> list[Any]:
        entries = real_scan()
        store.pins.pin("late", [blob_id])  # e.g. ReferenceBlobs handled meanwhile
        return entries

    monkeypatch.setattr(store, "_scan", scan_then_pin)
    report = store.collect(now=10**12)
    assert report.removed == () and report.protected == (blob_id,)
    assert store.exists(blob_id)


def test_pin_table_counts_sessions_per_blob() -> None:
    pins = PinTable()
    x, y = uuid.uuid4(), uuid.uuid4()
    assert pins.pin("s1", [x, y, x]) == 2
    assert pins.pin("s2", [x]) == 1
    assert pins.pin("s3", []) == 0
    assert (pins.pins, pins.sessions, pins.pinned()) == (3, 2, frozenset({x, y}))
    assert pins.release("s1") == 2
    assert pins.is_pinned(x) and not pins.is_pinned(y)
    assert pins.release("s2") == 1 and pins.release("s2") == 0
    assert pins.pinned() == frozenset() and pins.sessions == 0


# ------------------------------------------------------------ parsed-JSON cache


def test_structured_blobs_are_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = make_store(tmp_path)
    value = {"rows": [{"id": i, "name": f"n{i}"} for i in range(2000)]}
    blob_id = store.store(Structured(value=value))
    parses: list[int] = []
    real_loads = json.loads

    def counting_loads(text: str, *args: Any, **kwargs: Any) -> Any:
        parses.append(len(text))
        return real_loads(text, *args, **kwargs)

    monkeypatch.setattr("fore.actors.blobs.fs_store.json.loads", counting_loads)
    for selector in (None, "key:rows", "pointer:/rows/1999/name", "key:nope"):
        try:
            inspect_blob(store, str(blob_id), selector)
        except Exception:
            pass
    assert len(parses) == 1
    assert store.load(blob_id) == Structured(value=value)
    assert len(parses) == 1
    assert store.delete(blob_id)
    with pytest.raises(BlobNotFound):
        store.load(blob_id)  # a cache never resurrects a removed blob


def test_the_parsed_cache_is_bounded_by_bytes_and_checks_the_disk(tmp_path: Path) -> None:
    store = make_store(tmp_path, parsed_cache_bytes=1_000)
    small = [store.store(Structured(value=["x" * 100])) for _ in range(12)]  # ~106 bytes each
    huge = store.store(Structured(value=["y" * 800]))  # more than half the budget: never cached
    for blob_id in [*small, huge]:
        store.load(blob_id)
    assert store._parsed_bytes <= 1_000
    assert huge not in store._parsed
    assert small[0] not in store._parsed and small[-1] in store._parsed
    other = make_store(tmp_path)  # e.g. another process's retention removes a cached blob
    other.delete(small[-1])
    with pytest.raises(BlobNotFound):
        store.load(small[-1])
    assert small[-1] not in store._parsed


# ----------------------------------------------------------------- concurrency


def test_concurrent_stores_and_reads(tmp_path: Path) -> None:
    store = make_store(tmp_path, index_min_bytes=256)

    def work(i: int) -> tuple[uuid.UUID, object]:
        content = (
            Text(text="".join(f"{i}:{j}\n" for j in range(i % 50 + 1)))
            if i % 2
            else Structured(value={"i": i, "items": list(range(i % 7))})
        )
        blob_id = store.store(content)
        assert store.load(blob_id) == content
        if isinstance(content, Text):
            assert store.read_lines(blob_id, 0, 1) == f"{i}:0\n"
        return blob_id, content

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(work, range(400)))
    assert len({blob_id for blob_id, _ in results}) == 400
    for blob_id, content in results[::37]:
        assert store.load(blob_id) == content
    assert not [p for p in (tmp_path / "blobs").iterdir() if p.name.startswith(".tmp-")]


def test_collect_sweep_and_inspect_race_with_stores(tmp_path: Path) -> None:
    store = make_store(tmp_path, max_total_bytes=5_000, index_min_bytes=100)
    keep = store.store(Text(text="k\n" * 100))
    stop = threading.Event()
    errors: list[BaseException] = []

    def janitor() -> None:
        try:
            while not stop.is_set():
                store.collect({keep})
                store.sweep_temp()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=janitor)
    thread.start()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            ids = list(pool.map(lambda i: store.store(Text(text=f"{i}\n" * 50)), range(200)))
            list(pool.map(lambda _: inspect_blob(store, str(keep), "lines:50-52"), range(100)))
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert store.exists(keep)
    assert inspect_blob(store, str(keep), "lines:50-51") == "k\nk\n"
    assert len(set(ids)) == 200
