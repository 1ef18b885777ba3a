"""A child process for the session-store tests: real processes on one store.

``python -m tests.store.store_child <command> <json args>`` -- each command opens the
store at the given URL in this process and does one job, printing one JSON
line per event to stdout (flushed), so the parent can wait for a point in the
child's work and then kill it, pause it or let it finish.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import time
from typing import Any

from fore.actors.store import (
    NewSession,
    SessionLeased,
    SessionNotFound,
    SessionStore,
    TurnBatch,
    open_store,
)
from fore.messages.conversation import AssistantMessage, ToolCall, ToolResult, UserMessage


def say(child: str, **fields: Any) -> None:
    """One event line for the parent (other lines on stdout, logs, are not JSON of this shape)."""
    sys.stdout.write(json.dumps({"child": child, **fields}) + "\n")
    sys.stdout.flush()


def turn_items(tag: str, n: int, blob: str | None = None) -> tuple[Any, ...]:
    """``n`` items of one turn, each saying who wrote it and its place in the turn."""
    items: list[Any] = [UserMessage(text=f"{tag} 0/{n}")]
    for i in range(1, n):
        if i % 3 == 1:
            call = ToolCall(id=f"{tag}-{i}", name="read", arguments={"tag": tag, "i": i})
            items.append(AssistantMessage(text=f"{tag} {i}/{n}", tool_calls=(call,)))
        elif i % 3 == 2:
            items.append(ToolResult(call_id=f"{tag}-{i - 1}", name="read", output=f"{tag} {i}/{n}"))
        else:
            items.append(AssistantMessage(text=f"{tag} {i}/{n}"))
    if blob is not None:
        items[-1] = AssistantMessage(text=f"{tag} {n - 1}/{n} [blob:{blob}]")
    return tuple(items)


def open_(args: dict[str, Any]) -> SessionStore:
    return open_store(
        args["url"],
        owner=args.get("owner"),
        lease_ttl=args.get("ttl", 30.0),
        timeout=args.get("timeout", 60.0),
    )


def cmd_hold(args: dict[str, Any]) -> None:
    """Open (or create) a session and hold it until stdin closes."""
    store = open_(args)
    try:
        store.open_session(args["sid"])
    except SessionNotFound:
        store.create_session(NewSession(session_id=args["sid"], workspace="/w", model_name="m"))
    say("holding", pid=os.getpid(), owner=store.owner)
    sys.stdin.read()
    store.close()
    say("closed")


def cmd_write(args: dict[str, Any]) -> None:
    """Create sessions and write turns to them, then close (releasing every lease)."""
    store = open_(args)
    for sid in args["sids"]:
        store.create_session(NewSession(session_id=sid, workspace="/w", model_name="m"))
        for turn in range(args["turns"]):
            store.append(sid, TurnBatch(items=turn_items(f"{args['who']}:{turn}", args["items"])))
    store.close()
    say("done")


def cmd_resume(args: dict[str, Any]) -> None:
    """Resume sessions another process wrote and closed; add one turn to each."""
    store = open_(args)
    for sid in args["sids"]:
        snapshot = store.open_session(sid)
        turn = snapshot.record.turn_count
        store.append(sid, TurnBatch(items=turn_items(f"{args['who']}:{turn}", args["items"])))
        store.release(sid)
    store.close()
    say("done")


def cmd_contend(args: dict[str, Any]) -> None:
    """Many rounds of: open a random session (skip it if leased), write a turn, release."""
    store = open_(args)
    rng = random.Random(os.getpid())
    written: list[str] = []
    skipped = 0
    for round_ in range(args["rounds"]):
        sid = rng.choice(args["sids"])
        try:
            store.open_session(sid)
        except SessionLeased:
            skipped += 1
            continue
        tag = f"{args['who']}.{round_}"
        store.append(sid, TurnBatch(items=turn_items(tag, args["items"])))
        written.append(tag)
        store.release(sid)
    store.close()
    say("done", written=written, skipped=skipped)


def cmd_batches(args: dict[str, Any]) -> None:
    """Write whole batches to one session; die by SIGKILL inside the transaction of one.

    SQLite: the kill comes from the connection's trace callback when the
    ``kill_at``-th item insert of the process starts -- inside the open write
    transaction, the earlier items of that batch already inserted. PostgreSQL:
    after ``good`` batches, the next batch quotes ``blob`` (whose reference row
    the parent holds uncommitted), so it blocks mid-transaction; the parent
    kills this process there (it waits for a line on stdin before that batch, so the
    parent can take the lock first).
    """
    kill_at = args.get("kill_at")
    if kill_at is not None:
        real_connect = sqlite3.connect
        count = [0]

        def trace(statement: str) -> None:
            if statement.startswith("INSERT INTO items"):
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

        def connect(*a: Any, **kw: Any) -> sqlite3.Connection:
            conn = real_connect(*a, **kw)
            conn.set_trace_callback(trace)
            return conn

        sqlite3.connect = connect  # type: ignore[assignment]
    store = open_(args)
    sid = args["sid"]
    store.create_session(NewSession(session_id=sid, workspace="/w", model_name="m"))
    for turn in range(args["good"]):
        store.append(sid, TurnBatch(items=turn_items(f"good:{turn}", args["items"])))
    say("good-written", pid=os.getpid())
    if args.get("blob") is not None:
        sys.stdin.readline()  # the parent takes its lock first, then says go
    store.append(sid, TurnBatch(items=turn_items("doomed", args["items"], args.get("blob"))))
    say("doomed-written")  # reached only if nobody killed us
    time.sleep(600)


COMMANDS = {
    "hold": cmd_hold,
    "write": cmd_write,
    "resume": cmd_resume,
    "contend": cmd_contend,
    "batches": cmd_batches,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
