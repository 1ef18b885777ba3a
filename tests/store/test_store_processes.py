"""Real processes on one store: resume, contention, leases of live and killed holders, kill -9.

Every child is a real Python process (``tests/store/store_child.py``) opening the
store by its URL. Nothing here asserts a duration: waits are bounded loops
that fail with a message when their deadline passes.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fore.actors.store import NewSession, SessionLeased, SessionStore, TurnBatch, open_store
from fore.actors.store.pgtemp import PgCluster
from fore.messages.conversation import UserMessage, item_text
from tests.store.pg_server import pg_cluster, pg_url, store_url  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 120.0


class Child:
    """A ``tests.store.store_child`` process; ``expect`` waits (bounded) for one of its events.

    A thread reads its stdout into a queue: select() on the pipe would miss a line
    that arrived together with the previous one (already in the reader's buffer).
    """

    MODULE = "tests.store.store_child"
    """The child's program (``python -m MODULE COMMAND ARGS``); tests/persistence uses its own."""

    def __init__(self, command: str, **args: Any) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.MODULE, command, json.dumps(args)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "FORE_LOG_LEVEL": "error"},
        )
        self.pid = self.proc.pid
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # end of output

    def expect(self, event: str, timeout: float = DEADLINE) -> dict[str, Any]:
        return self.expect_any((event,), timeout)

    def expect_any(self, events: tuple[str, ...], timeout: float = DEADLINE) -> dict[str, Any]:
        """The next event of one of ``events`` (others and log lines are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"child {self.pid} never said any of {events}"
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                self.lines.put(None)
                self.proc.wait(timeout=DEADLINE)
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"child {self.pid} ended before {events}: {err[-3000:]}")
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a log line
            if isinstance(message, dict) and message.get("child") in events:
                return message

    def finish(self) -> None:
        """Close its stdin (a holder then closes its store) and wait for a clean exit."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=DEADLINE)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        assert code == 0, err[-3000:]

    def kill(self) -> None:
        """SIGKILL, and reap it (a zombie is dead to the lease check too, but be tidy)."""
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=DEADLINE)

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=DEADLINE)
        self.reader.join(timeout=DEADLINE)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def children() -> Any:
    started: list[Child] = []

    def spawn(command: str, **args: Any) -> Child:
        child = Child(command, **args)
        started.append(child)
        return child

    yield spawn
    for child in started:
        child.cleanup()


def tags(store: SessionStore, sid: str) -> list[str]:
    """The writer tag of each item (``who:turn`` / ``who.round``), in history order."""
    return [item_text(item).split(" ")[0] for item in store.load(sid).items]


def groups(tag_list: list[str]) -> list[tuple[str, int]]:
    """Runs of equal tags: ``[(tag, length), ...]``."""
    runs: list[tuple[str, int]] = []
    for tag in tag_list:
        if runs and runs[-1][0] == tag:
            runs[-1] = (tag, runs[-1][1] + 1)
        else:
            runs.append((tag, 1))
    return runs


# -- two processes, one PostgreSQL store -----------------------------------------------------------


def test_two_processes_resume_each_others_closed_sessions(pg_url: str, children: Any) -> None:  # noqa: F811
    a_sids, b_sids = [f"a{i}" for i in range(3)], [f"b{i}" for i in range(3)]
    writers = [
        children("write", url=pg_url, who="A", sids=a_sids, turns=2, items=4),
        children("write", url=pg_url, who="B", sids=b_sids, turns=2, items=4),
    ]
    for child in writers:
        child.expect("done")
        child.finish()
    resumers = [
        children("resume", url=pg_url, who="A", sids=b_sids, items=3),
        children("resume", url=pg_url, who="B", sids=a_sids, items=3),
    ]
    for child in resumers:
        child.expect("done")
        child.finish()
    with open_store(pg_url) as store:
        for sid in a_sids:
            assert groups(tags(store, sid)) == [("A:0", 4), ("A:1", 4), ("B:2", 3)]
        for sid in b_sids:
            assert groups(tags(store, sid)) == [("B:0", 4), ("B:1", 4), ("A:2", 3)]
        assert all(s.leased_by is None for s in store.list_sessions())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_concurrent_writers_never_interleave_a_sessions_items(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, children: Any
) -> None:
    if backend == "sqlite":
        url = f"sqlite://{tmp_path}/sessions.db"
    else:
        url = request.getfixturevalue("pg_url")
    sids = ["s0", "s1", "s2"]
    with open_store(url) as store:
        for sid in sids:
            store.create_session(NewSession(session_id=sid, workspace="/w", model_name="m"))
    contenders = [
        children("contend", url=url, who=f"P{n}", sids=sids, rounds=25, items=7) for n in range(3)
    ]
    written: list[str] = []
    for child in contenders:
        written += child.expect("done")["written"]
        child.finish()
    seen: list[str] = []
    with open_store(url) as store:
        for sid in sids:
            runs = groups(tags(store, sid))
            assert all(length == 7 for _, length in runs), runs  # whole turns, never mixed
            seen += [tag for tag, _ in runs]
    assert sorted(seen) == sorted(written)  # every reported write is there, once


# -- leases across processes -----------------------------------------------------------------------


def test_a_session_open_in_one_process_cannot_be_opened_in_another(
    store_url: str,  # noqa: F811
    children: Any,
) -> None:
    holder = children("hold", url=store_url, sid="busy")
    info = holder.expect("holding")
    with open_store(store_url) as store:
        with pytest.raises(SessionLeased, match=f"pid {info['pid']} on host") as raised:
            store.open_session("busy")
        assert raised.value.expires_in > 0
        with pytest.raises(SessionLeased):
            store.delete("busy")
        holder.finish()  # closing the holder's store releases the lease
        assert store.open_session("busy").record.session_id == "busy"


def test_a_killed_holder_on_this_machine_is_taken_over_at_once(
    store_url: str,  # noqa: F811
    children: Any,
) -> None:
    holder = children("hold", url=store_url, sid="crashy", ttl=3600)
    holder.expect("holding")
    with open_store(store_url) as store:
        with pytest.raises(SessionLeased):
            store.open_session("crashy")
        holder.kill()
        # A one-hour lease, but its holder is provably gone: no wait for the TTL.
        assert store.open_session("crashy").record.session_id == "crashy"


def test_a_killed_holder_elsewhere_loses_its_lease_when_it_expires(
    store_url: str,  # noqa: F811
    children: Any,
) -> None:
    """A holder this machine cannot judge (another host's id): its lease runs out unrenewed."""
    holder = children("hold", url=store_url, sid="remote", ttl=2.0, owner="build-7/worker-3")
    holder.expect("holding")
    with open_store(store_url) as store:
        with pytest.raises(SessionLeased, match="build-7/worker-3"):
            store.open_session("remote")
        holder.kill()
        deadline = time.monotonic() + DEADLINE
        while True:
            try:
                store.open_session("remote")
                break
            except SessionLeased:
                assert time.monotonic() < deadline, "the dead holder's lease never expired"
                time.sleep(0.2)


def test_a_live_holder_keeps_its_lease_by_renewing(store_url: str, children: Any) -> None:  # noqa: F811
    """The store's renewal thread keeps a short lease alive as long as its process lives."""
    # 3 s: renewed each second, so a child starved for up to 2 s (a loaded machine) keeps it
    holder = children("hold", url=store_url, sid="kept", ttl=3.0, owner="build-7/worker-4")
    holder.expect("holding")
    with open_store(store_url) as store:
        for _ in range(10):  # several TTLs' worth of attempts, each refused
            with pytest.raises(SessionLeased):
                store.open_session("kept")
            time.sleep(0.8)
    holder.finish()


# -- kill -9 in the middle of a batch --------------------------------------------------------------


def test_sqlite_kill_mid_batch_leaves_it_all_or_nothing(tmp_path: Path, children: Any) -> None:
    url = f"sqlite://{tmp_path}/sessions.db"
    items, good = 40, 3
    # The child kills itself (SIGKILL) when the 21st insert of the doomed batch starts.
    child = children(
        "batches", url=url, sid="s", items=items, good=good, kill_at=good * items + items // 2 + 1
    )
    assert child.proc.wait(timeout=DEADLINE) == -signal.SIGKILL
    with open_store(url) as store:
        runs = groups(tags(store, "s"))
        assert runs == [(f"good:{t}", items) for t in range(good)]
        snap = store.open_session("s")  # the dead holder is taken over; the store goes on
        assert snap.record.item_count == good * items and snap.record.turn_count == good
        store.append("s", TurnBatch(items=(UserMessage(text="after the crash"),)))
        assert store.load("s").record.item_count == good * items + 1


def test_postgres_kill_mid_batch_leaves_it_all_or_nothing(
    pg_cluster: PgCluster,  # noqa: F811
    pg_url: str,  # noqa: F811
    children: Any,
) -> None:
    items, good = 40, 3
    blob = str(uuid.uuid4())
    with open_store(pg_url):
        pass  # the schema
    # Hold the doomed batch's blob-reference row uncommitted: its insert must wait for us,
    # inside its transaction, after every item of the batch was inserted.
    blocker = psycopg.connect(pg_url)
    monitor = psycopg.connect(pg_url, autocommit=True)  # fresh activity on every query

    def waiting_on_locks() -> int:
        row = monitor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name ="
            " 'fore-session-store' AND wait_event_type = 'Lock'"
        ).fetchone()
        return int(row[0]) if row else 0

    try:
        # timeout=600: the child's own lock_timeout (600 s) is not what ends its wait.
        child = children(
            "batches", url=pg_url, sid="s", items=items, good=good, blob=blob, timeout=600
        )
        child.expect("good-written")
        blocker.execute(
            "INSERT INTO fore.blob_refs (session_id, blob_id, first_seq) VALUES ('s', %s, 0)",
            (blob,),
        )
        assert child.proc.stdin is not None
        child.proc.stdin.write("go\n")
        child.proc.stdin.flush()
        deadline = time.monotonic() + DEADLINE
        while not waiting_on_locks():  # until the child's transaction waits on our row lock
            assert time.monotonic() < deadline, "the child's batch never reached the lock"
            time.sleep(0.05)
        child.kill()
        # The server notices the dead client (client_connection_check_interval) and
        # ends its transaction -- with the batch's pipelined COMMIT unexecuted.
        while waiting_on_locks():
            assert time.monotonic() < deadline, "the dead client's statement never ended"
            time.sleep(0.05)
    finally:
        blocker.rollback()
        blocker.close()
        monitor.close()
    with open_store(pg_url) as store:
        assert groups(tags(store, "s")) == [(f"good:{t}", items) for t in range(good)]
        snap = store.open_session("s")
        assert snap.record.item_count == good * items and snap.blob_refs == ()
        store.append("s", TurnBatch(items=(UserMessage(text="after the crash"),)))
        assert store.load("s").record.item_count == good * items + 1
