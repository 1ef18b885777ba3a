"""Many processes opening one new SQLite store at the same moment all get it.

The shards of a ``RayRuntime`` (and two ``fore run`` started together) open
the same fresh ``sessions.db`` at once. Switching a new file to WAL takes a
lock SQLite does not wait for with its busy handler, so a process that met
another one's switch failed at once with "database is locked"
(``StoreBusy``) -- found by ``fore bench --shards 2``. Real processes: each
opens a series of new stores, all of them released together by a barrier
file per store; without the retry about one open in ten failed here.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import sys, time
from pathlib import Path
from fore.actors.store import open_store
folder, rounds = Path(sys.argv[1]), int(sys.argv[2])
deadline = time.monotonic() + 120
for i in range(rounds):
    go = folder / f"go{i}"
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("the parent never released round %d" % i)
        time.sleep(0.0005)
    try:
        open_store(f"sqlite:///{folder}/s{i}.db", timeout=5.0).close()
    except Exception as exc:
        print(f"round {i}: {type(exc).__name__}: {exc}", flush=True)
print("done", flush=True)
"""

PROCESSES = 6
ROUNDS = 20


def test_processes_opening_new_stores_together_all_open_them(tmp_path: Path) -> None:
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(ROUNDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    time.sleep(1.5)  # pacing only: let the children import before round 0
    for i in range(ROUNDS):
        (tmp_path / f"go{i}").touch()
        time.sleep(0.15)  # pacing only: one round's opens at a time
    failures: list[str] = []
    for child in children:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err[-2000:]
        lines = out.strip().splitlines()
        assert lines[-1] == "done", out
        failures += lines[:-1]
    assert failures == [], f"{len(failures)} of {PROCESSES * ROUNDS} opens failed: {failures[:3]}"
