"""The session store (issue 25): resume latency on SQLite, write throughput on PostgreSQL.

Each measurement prints its baseline from the same run:

(a) **resume of a 1,000-item session on SQLite** -- ``load`` (one read
    transaction: record, items, alerts, blob references; items validated into
    the pydantic models) and ``open_session`` (lease + load), p50/p99 -- target
    p99 <= 50 ms -- vs a bare ``SELECT body … ORDER BY seq`` of the same rows
    with ``json.loads`` of each (no models, no record). Measured with the
    collector settings a Runtime applies while it is open
    (:mod:`actors.core.tuning`): a resume runs inside one. A load allocates
    some ten thousand objects, so with CPython's default thresholds full
    collections land in it -- shown for reference, they make its p99;
(b) **a turn's write on SQLite** (``append`` of 4 items, ``synchronous=FULL``:
    on disk when it returns), p50/p99, vs a bare ``executemany`` of the same
    rows + ``COMMIT`` on the same file settings -- what the write-ahead rule
    adds to a turn;
(c) **PostgreSQL: 1,000 sessions x 10 turns written from one process**
    (4 items a turn, one ``append`` each), items/s, vs a bare ``executemany``
    of the same rows, one transaction per turn, on the same server; and for
    reference one ``executemany`` of all rows in one transaction. The server is
    a throwaway cluster started here (fsync on), or ``$FORE_BENCH_PG_URL``;
(d) **``Runtime.resume_session`` of a 1,000-item session on SQLite** (lease,
    load, the session's actors started, history handed to its worker), p50/p99
    -- target p99 <= 50 ms -- vs ``Runtime.open_session`` of a new, empty
    session in the same runtime (what opening any session costs: the actors,
    the session's row in the store); the ratio is what 1,000 items of history add.

Run: ``python -m bench.store [--quick]`` or ``fore bench store [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fore.actors.core import tuning
from fore.actors.store import NewSession, SessionStore, TurnBatch, open_store
from fore.actors.store.pgtemp import PgCluster, PgClusterError, find_bindir
from fore.bench._common import (
    BenchFailed,
    Target,
    console,
    machine_line,
    percentile,
    ratio,
    table,
    targets_table,
)
from fore.messages.conversation import AssistantMessage, Item, ToolCall, ToolResult, UserMessage

RESUME_TARGET_MS = 50.0
ITEMS_PER_TURN = 4
PG_URL_ENV = "FORE_BENCH_PG_URL"


def turn(session: int, number: int) -> tuple[Item, ...]:
    """One realistic turn: a prompt, a tool call, its (summarised) result, an answer."""
    call = ToolCall(
        id=f"call_{session}_{number}",
        name="grep",
        arguments={"pattern": f"def handler_{number}", "path": "src/", "max_results": 50},
    )
    return (
        UserMessage(text=f"session {session} turn {number}: find where the handler is defined"),
        AssistantMessage(text="Let me search for it.", tool_calls=(call,)),
        ToolResult(
            call_id=call.id,
            name="grep",
            output=f"[blob:{uuid.UUID(int=session * 1000 + number)}] text | 120 lines\n"
            + "src/app/handlers.py:42: def handler(request):\n" * 6,
        ),
        AssistantMessage(
            text=f"The handler is in src/app/handlers.py line 42 (turn {number}). " * 3
        ),
    )


def _ms(values: list[float], q: float) -> float:
    return percentile(values, q) * 1e3


def _timed(fn: Callable[[], Any], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


# -- (a), (b): SQLite ---------------------------------------------------------------------------


def _sqlite(base: Path, runs: int, turns: int) -> dict[str, float]:
    path = base / "sessions.db"
    store = open_store(f"sqlite://{path}")
    try:
        sid = store.create_session(NewSession(workspace="/w", model_name="m")).session_id
        written: list[Item] = []
        for number in range(250):  # 1,000 items
            batch = turn(0, number)
            store.append(sid, TurnBatch(items=batch))
            written.extend(batch)
        if list(store.load(sid).items) != written:
            raise BenchFailed("the loaded history differs from what was written")

        conn = sqlite3.connect(path, isolation_level=None)

        def bare_load() -> None:
            rows = conn.execute(
                "SELECT body FROM items WHERE session_id = ? ORDER BY seq", (sid,)
            ).fetchall()
            [json.loads(body) for (body,) in rows]

        def resume() -> None:
            store.open_session(sid)
            store.release(sid)

        for fn in (bare_load, lambda: store.load(sid), resume):  # warm caches
            fn()
        # For reference, CPython's default collector settings first (gc.freeze is for good).
        untuned = _timed(lambda: store.load(sid), runs)
        # A resume runs inside a Runtime, which tunes the collector while it is open.
        tuning.tune()
        try:
            load = _timed(lambda: store.load(sid), runs)
            opened = _timed(resume, runs)
            bare = _timed(bare_load, runs)
        finally:
            tuning.untune()

        # (b) one turn's write vs a bare executemany + COMMIT, same file settings.
        sid2 = store.create_session(NewSession(workspace="/w", model_name="m")).session_id
        batches = [turn(1, n) for n in range(turns)]
        appends: list[float] = []
        for batch in batches:
            start = time.perf_counter()
            store.append(sid2, TurnBatch(items=batch))
            appends.append(time.perf_counter() - start)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute(
            "CREATE TABLE bare (session_id TEXT, seq INTEGER, turn INTEGER, body TEXT,"
            " PRIMARY KEY (session_id, seq)) WITHOUT ROWID"
        )
        bare_writes: list[float] = []
        for number, batch in enumerate(batches):
            rows = [
                ("bare", number * ITEMS_PER_TURN + i, number, item.model_dump_json())
                for i, item in enumerate(batch)
            ]
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO bare VALUES (?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
            bare_writes.append(time.perf_counter() - start)
        conn.close()
    finally:
        store.close()

    table(
        "SQLite: resume of a 1,000-item session vs a bare SELECT + json.loads of its rows",
        ["measurement", "p50 (ms)", "p99 (ms)", "bare p50 (ms)", "bare p99 (ms)",
         "p99 ratio (×)", "target"],
        [
            ["load (record, items, alerts, refs)", _ms(load, 50), _ms(load, 99),
             _ms(bare, 50), _ms(bare, 99), ratio(_ms(load, 99), _ms(bare, 99)), ""],
            ["open_session (lease + load) + release", _ms(opened, 50), _ms(opened, 99),
             _ms(bare, 50), _ms(bare, 99), ratio(_ms(opened, 99), _ms(bare, 99)),
             f"p99 ≤ {RESUME_TARGET_MS:g} ms"],
            ["load, CPython's default GC (reference)", _ms(untuned, 50), _ms(untuned, 99),
             "", "", "", ""],
        ],
    )  # fmt: skip
    table(
        "SQLite: one turn's write (4 items, synchronous=FULL) vs bare executemany + COMMIT",
        ["measurement", "p50 (ms)", "p99 (ms)", "bare p50 (ms)", "bare p99 (ms)",
         "p99 ratio (×)"],
        [["append", _ms(appends, 50), _ms(appends, 99), _ms(bare_writes, 50),
          _ms(bare_writes, 99), ratio(_ms(appends, 99), _ms(bare_writes, 99))]],
    )  # fmt: skip
    return {
        "sqlite_load_p50_ms": _ms(load, 50),
        "sqlite_load_p99_ms": _ms(load, 99),
        "sqlite_resume_p50_ms": _ms(opened, 50),
        "sqlite_resume_p99_ms": _ms(opened, 99),
        "sqlite_bare_load_p99_ms": _ms(bare, 99),
        "sqlite_load_default_gc_p99_ms": _ms(untuned, 99),
        "sqlite_append_p50_ms": _ms(appends, 50),
        "sqlite_append_p99_ms": _ms(appends, 99),
        "sqlite_bare_write_p99_ms": _ms(bare_writes, 99),
    }


# -- (c): PostgreSQL -------------------------------------------------------------------------------


def _postgres(url: str, sessions: int, turns: int) -> dict[str, float]:
    import psycopg

    workload = [[turn(s, n) for n in range(turns)] for s in range(sessions)]
    total = sessions * turns * ITEMS_PER_TURN

    store: SessionStore = open_store(url)
    try:
        start = time.perf_counter()
        for s, session_turns in enumerate(workload):
            sid = store.create_session(
                NewSession(session_id=f"bench-{s}", workspace="/w", model_name="m")
            ).session_id
            for batch in session_turns:
                store.append(sid, TurnBatch(items=batch))
        store_s = time.perf_counter() - start
        sample = store.load("bench-0").items
        if list(sample) != [item for batch in workload[0] for item in batch]:
            raise BenchFailed("the PostgreSQL store lost or changed items")
    finally:
        store.close()

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE bare_items (session_id TEXT NOT NULL, seq BIGINT NOT NULL,"
            " turn BIGINT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, seq))"
        )
        insert = "INSERT INTO bare_items VALUES (%s, %s, %s, %s)"
        start = time.perf_counter()
        for s, session_turns in enumerate(workload):
            for number, batch in enumerate(session_turns):
                rows = [
                    (f"bare-{s}", number * ITEMS_PER_TURN + i, number, item.model_dump_json())
                    for i, item in enumerate(batch)
                ]
                with conn.transaction(), conn.cursor() as cur:
                    cur.executemany(insert, rows)
        bare_s = time.perf_counter() - start
        all_rows = [
            (f"one-{s}", number * ITEMS_PER_TURN + i, number, item.model_dump_json())
            for s, session_turns in enumerate(workload)
            for number, batch in enumerate(session_turns)
            for i, item in enumerate(batch)
        ]
        start = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(insert, all_rows)
        one_s = time.perf_counter() - start

    store_rate, bare_rate, one_rate = total / store_s, total / bare_s, total / one_s
    table(
        f"PostgreSQL: {sessions:,} sessions × {turns} turns ({total:,} items) from one process",
        ["measurement", "rate (items/s)", "rate (turns/s)", "store ÷ this (×)"],
        [
            ["store: create + one append per turn", store_rate, store_rate / ITEMS_PER_TURN, ""],
            ["bare executemany, one transaction per turn", bare_rate,
             bare_rate / ITEMS_PER_TURN, ratio(store_rate, bare_rate)],
            ["bare executemany, all rows in one transaction (ceiling)", one_rate, "",
             ratio(store_rate, one_rate)],
        ],
    )  # fmt: skip
    return {
        "pg_store_items_per_s": store_rate,
        "pg_bare_items_per_s": bare_rate,
        "pg_one_tx_items_per_s": one_rate,
        "pg_store_to_bare_ratio": ratio(store_rate, bare_rate),
    }


# -- (d): resume through the runtime -------------------------------------------------------------


def _runtime_resume(base: Path, runs: int) -> dict[str, float]:
    from fore.actors.llm import ScriptedModel
    from fore.supervision import Runtime

    url = f"sqlite://{base / 'runtime.db'}"
    with open_store(url) as store:
        sid = store.create_session(
            NewSession(workspace="", model_name="scripted", session_config={})
        ).session_id
        for number in range(250):  # 1,000 items
            store.append(sid, TurnBatch(items=turn(0, number)))
    model = ScriptedModel([])
    # The runtime tunes the collector while it is open, as in any service.
    with Runtime(name="bench-resume", store=url, blob_dir=base / "blobs", tune_process=True) as rt:
        for _ in range(3):  # warm the import and code caches
            rt.resume_session(sid, model).close()
            rt.open_session(model=model).close()
        resumed: list[float] = []
        fresh: list[float] = []
        for _ in range(runs):
            start = time.perf_counter()
            session = rt.resume_session(sid, model)
            resumed.append(time.perf_counter() - start)
            if len(session.history) != 1000:
                raise BenchFailed(f"resumed {len(session.history)} items, not 1,000")
            session.close()
            start = time.perf_counter()
            session = rt.open_session(model=model)
            fresh.append(time.perf_counter() - start)
            session.close()
    table(
        "Runtime: resume_session of a 1,000-item session vs open_session of a new one (SQLite)",
        ["measurement", "p50 (ms)", "p99 (ms)", "baseline p50 (ms)", "baseline p99 (ms)",
         "p99 ratio (×)"],
        [["resume_session (1,000 items)", _ms(resumed, 50), _ms(resumed, 99),
          _ms(fresh, 50), _ms(fresh, 99), ratio(_ms(resumed, 99), _ms(fresh, 99))]],
    )  # fmt: skip
    return {
        "runtime_resume_p50_ms": _ms(resumed, 50),
        "runtime_resume_p99_ms": _ms(resumed, 99),
        "runtime_open_p50_ms": _ms(fresh, 50),
        "runtime_open_p99_ms": _ms(fresh, 99),
    }


def run(*, quick: bool = False) -> dict[str, float]:
    runs = 50 if quick else 300
    console.print(f"[bold]bench store[/] — {machine_line()}")
    base = Path(tempfile.mkdtemp(prefix="fore-bench-store-"))
    try:
        results = _sqlite(base, runs, turns=50 if quick else 300)
        results |= _runtime_resume(base, 30 if quick else 150)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    sessions = 100 if quick else 1000
    url = os.environ.get(PG_URL_ENV)
    if url:
        results |= _postgres(url, sessions, 10)
    elif find_bindir() is None:
        console.print(f"PostgreSQL: skipped (no server binaries; or set {PG_URL_ENV})")
    else:
        try:
            cluster = PgCluster(durable=True).start()
        except PgClusterError as exc:
            raise BenchFailed(f"could not start a PostgreSQL cluster: {exc}") from exc
        try:
            results |= _postgres(cluster.create_database("bench"), sessions, 10)
        finally:
            cluster.stop()
    targets_table(
        [
            Target(
                "resume of a 1,000-item session (SQLite), p99",
                results["sqlite_resume_p99_ms"], "ms", "<=", RESUME_TARGET_MS,
            ),
            Target(
                "Runtime.resume_session of 1,000 items, p99",
                results["runtime_resume_p99_ms"], "ms", "<=", RESUME_TARGET_MS,
            ),
        ]
    )  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench store", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs and sessions")
    run(quick=parser.parse_args(argv).quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
