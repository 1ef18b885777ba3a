"""Opening a store from bad input: one clear typed error, nothing left open, nothing touched.

Unknown schemes, unreachable and hostile servers, damaged and foreign
databases, schemas of a newer Fore -- and the migration mechanism itself
(a database of an older version is brought forward in one transaction).
"""

from __future__ import annotations

import os
import random
import socket
import sqlite3
import threading
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from fore.actors.store import (
    NewSession,
    NotASessionStore,
    SchemaTooNew,
    StoreCorrupted,
    StoreError,
    StoreUnavailable,
    StoreUrlError,
    TurnBatch,
    migrations,
    open_store,
)
from fore.actors.store.pgtemp import PgCluster
from fore.messages.conversation import UserMessage
from tests.store.pg_server import pg_cluster, pg_url, store_url  # noqa: F401  (fixtures)
from tests.store.store_child import turn_items


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text, repr(text)
    return text


def renewers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("fore-store-renew")}


def nothing_open(path: Path, threads_before: set[threading.Thread]) -> None:
    """No file of the SQLite store open in this process and no new renewal thread running."""
    names = {str(path), f"{path}-wal", f"{path}-shm"}
    assert not [f.path for f in psutil.Process().open_files() if f.path in names]
    assert renewers() <= threads_before


def pg_connections(cluster: PgCluster, url: str) -> int:
    database = url.split("/")[3].split("?", maxsplit=1)[0]
    with psycopg.connect(cluster.url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND application_name = 'fore-session-store'",
            (database,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def no_pg_connections(cluster: PgCluster, url: str) -> None:
    deadline = time.monotonic() + 30  # a backend leaves pg_stat_activity just after its client
    while pg_connections(cluster, url):
        assert time.monotonic() < deadline, "the failed open left connections behind"
        time.sleep(0.05)


# -- URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "mysql://user:hunter2@127.0.0.1/db",
        "redis://127.0.0.1:6379",
        "file:///tmp/x.db",
        "sqlite+pysqlite:///tmp/x.db",
        "just/a/path.db",
        "",
        "sqlite://host/x.db",
        "sqlite:///x.db?mode=ro",
        "sqlite://",
        "sqlite:",
        "sqlite:///",
        "postgresql://u:hunter2@[::1/db",
        "sqlite:///tmp/\nx.db",
    ],
)
def test_bad_urls_are_one_clear_error(url: str) -> None:
    with pytest.raises(StoreUrlError) as info:
        open_store(url)
    assert "hunter2" not in one_line(info.value)


def test_a_url_must_be_a_string() -> None:
    with pytest.raises(StoreUrlError, match="must be a str"):
        open_store(b"sqlite:///x.db")  # type: ignore[arg-type]


# -- unreachable and hostile servers ------------------------------------------------------------


def test_unreachable_server(tmp_path: Path, refused_port: int) -> None:
    url = f"postgresql://fore:hunter2@127.0.0.1:{refused_port}/fore"
    with pytest.raises(StoreUnavailable, match="Connection refused") as info:
        open_store(url, timeout=2)
    assert "hunter2" not in one_line(info.value)
    with pytest.raises(StoreUnavailable):
        open_store(f"postgresql:///fore?host={tmp_path}/no-such-dir", timeout=2)


@pytest.mark.parametrize("behaviour", ["silent", "garbage"])
def test_a_hostile_server_is_bounded_by_the_timeout(behaviour: str) -> None:
    """A server that accepts and never answers (or answers nonsense): an error, not a hang."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    stop = threading.Event()
    clients: list[socket.socket] = []

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                continue
            clients.append(client)
            if behaviour == "garbage":
                try:
                    client.sendall(bytes(random.Random(1).randrange(256) for _ in range(4096)))
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with pytest.raises(StoreUnavailable) as info:
            open_store(f"postgresql://fore@127.0.0.1:{port}/fore", timeout=1)
        one_line(info.value)
    finally:
        stop.set()
        thread.join(timeout=10)
        for client in clients:
            client.close()
        server.close()


def test_a_missing_database_on_a_real_server(pg_cluster: PgCluster) -> None:  # noqa: F811
    with pytest.raises(StoreUnavailable, match="does not exist"):
        open_store(pg_cluster.url("no_such_database"))


# -- SQLite files that are not usable -----------------------------------------------------------


def make_store_file(path: Path, sessions: int = 30) -> None:
    with open_store(f"sqlite://{path}") as store:
        for i in range(sessions):
            sid = store.create_session(
                NewSession(session_id=f"s{i}", workspace="/w", model_name="m")
            ).session_id
            for turn in range(3):
                store.append(sid, TurnBatch(items=turn_items(f"{sid}:{turn}" + "y" * 200, 6)))
    # Fold the WAL into the main file so the damage below hits real pages.
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    if how == "random-bytes":
        data = bytearray(random.Random(7).randbytes(64 * 1024))
    elif how == "truncated":
        data = data[: len(data) // 2]
    elif how == "garbage-pages":
        rng = random.Random(3)
        for start in range(2 * page, len(data) - page, 5 * page):
            data[start : start + page] = rng.randbytes(page)
    elif how == "zeroed-header":
        data[:100] = bytes(100)
    elif how == "text-file":
        data = bytearray(b"just some notes\n" * 100)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how", ["random-bytes", "truncated", "garbage-pages", "zeroed-header", "text-file"]
)
def test_a_damaged_sqlite_file_is_refused_untouched(tmp_path: Path, how: str) -> None:
    path = tmp_path / "sessions.db"
    make_store_file(path)
    damage(path, how)
    before, threads = path.read_bytes(), renewers()
    with pytest.raises(StoreCorrupted) as info:
        open_store(f"sqlite://{path}")
    one_line(info.value)
    assert path.read_bytes() == before
    nothing_open(path, threads)


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    threads = renewers()
    with pytest.raises(NotASessionStore, match="customers"):
        open_store(f"sqlite://{path}")
    nothing_open(path, threads)
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    assert tables == ["customers"]


def test_a_foreign_postgres_schema_is_refused(pg_url: str) -> None:  # noqa: F811
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA fore")
        conn.execute("CREATE TABLE fore.sessions (id int)")
    with pytest.raises(NotASessionStore, match="sessions"):
        open_store(pg_url)


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "missing-dir"])
def test_a_path_that_is_not_a_database_file(tmp_path: Path, kind: str) -> None:
    if kind == "directory":
        path = tmp_path / "dir.db"
        path.mkdir()
    elif kind == "fifo":
        path = tmp_path / "fifo.db"
        os.mkfifo(path)  # opening it for reading would block forever
    elif kind == "device":
        path = Path("/dev/null")
    else:
        path = tmp_path / "no" / "such" / "sessions.db"
    with pytest.raises(StoreUnavailable) as info:
        open_store(f"sqlite://{path}")
    one_line(info.value)


# -- schema versions ----------------------------------------------------------------------------


def bump_version(url: str, version: int) -> None:
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite://"))
        conn.execute("INSERT INTO schema_version VALUES (?, 'from the future', 0)", (version,))
        conn.commit()
        conn.close()
    else:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(
                "INSERT INTO fore.schema_version VALUES (%s, 'from the future', 0)", (version,)
            )


def test_a_newer_schema_is_refused_untouched(
    store_url: str,  # noqa: F811
    request: pytest.FixtureRequest,
) -> None:
    with open_store(store_url) as store:
        sid = store.create_session(NewSession(workspace="/w", model_name="m")).session_id
        store.append(sid, TurnBatch(items=(UserMessage(text="keep me"),)))
        assert store.schema_version() == migrations.LATEST
    bump_version(store_url, migrations.LATEST + 1)
    threads = renewers()
    with pytest.raises(SchemaTooNew, match="newer than") as info:
        open_store(store_url)
    one_line(info.value)
    assert (info.value.found, info.value.supported) == (migrations.LATEST + 1, migrations.LATEST)
    if store_url.startswith("sqlite"):
        nothing_open(Path(store_url.removeprefix("sqlite://")), threads)
    else:
        no_pg_connections(request.getfixturevalue("pg_cluster"), store_url)


V2 = migrations.Migration(
    2,
    "a test table",
    ("CREATE TABLE extra (id INTEGER PRIMARY KEY)",),
    ("CREATE TABLE fore.extra (id INTEGER PRIMARY KEY)",),
)


def test_an_older_schema_is_migrated_forward(
    store_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with open_store(store_url) as store:
        sid = store.create_session(NewSession(workspace="/w", model_name="m")).session_id
        store.append(sid, TurnBatch(items=(UserMessage(text="from v1"),)))
    with monkeypatch.context() as patched:
        patched.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, V2))
        patched.setattr(migrations, "LATEST", 2)
        with open_store(store_url) as store:
            assert store.schema_version() == 2
            assert [i.text for i in store.load(sid).items] == ["from v1"]  # type: ignore[union-attr]
    # This Fore (version 1) now meets a version-2 database: refused.
    with pytest.raises(SchemaTooNew):
        open_store(store_url)


def test_a_failing_migration_leaves_the_old_version(
    store_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with open_store(store_url):
        pass
    broken = migrations.Migration(
        2,
        "half good",
        ("CREATE TABLE extra (id INTEGER)", "THIS IS NOT SQL"),
        ("CREATE TABLE fore.extra (id INTEGER)", "THIS IS NOT SQL"),
    )
    monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, broken))
    monkeypatch.setattr(migrations, "LATEST", 2)
    with pytest.raises(StoreError):
        open_store(store_url)
    monkeypatch.undo()
    with open_store(store_url) as store:  # the transaction rolled back: still version 1
        assert store.schema_version() == 1


def test_concurrent_opens_of_a_fresh_database_migrate_once(store_url: str) -> None:  # noqa: F811
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait(timeout=60)
            open_store(store_url, auto_renew=False).close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    with open_store(store_url) as store:
        assert store.schema_version() == migrations.LATEST
