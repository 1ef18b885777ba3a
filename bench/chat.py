"""Benchmark: ``fore chat`` as a person uses it -- a key on the suggestion, and Tab.

The real TUI runs ``fore chat --demo`` in a tmux pane (a real pty, the real
renderer); keys go in with ``tmux send-keys``. The app writes a trace
(``FORE_CHAT_TRACE``: ``time.monotonic_ns()`` of each UI moment -- one clock
for every process of the machine) that this benchmark reads back:

* **keystroke**: a key typed while the grey suggestion shows →
  *ghost removed* (the frame without it written to the terminal) and
  *speculation aborted* (the session reports it cancelled and its overlay
  removed; the runtime times that from the keystroke too). The figure is
  the later of the two.
* **Tab**: Tab on a ready suggestion → *files applied* (the accept's answer)
  → *transcript shown* (its lines, the per-file diff lines included, written
  above the prompt).
* **baseline**, in the same run: a key typed with no suggestion → its echo
  drawn. The same path through tmux, the pty, prompt_toolkit and the
  renderer, without the runtime: the ratio says what the runtime adds.

Each is measured from two starts: the moment this process sent the key (the
whole way through tmux and the pty, including the ``tmux send-keys``
process's own start) and the moment the app's key binding ran. Target: p99
≤ 50 ms for each. Run with ``fore bench chat`` (``--quick``: fewer rounds).
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import BenchFailed, console, machine_line, percentile, table
from supervision.chat.trace import ENV as TRACE_ENV
from supervision.chat.trace import read_trace

TARGET_MS = 50.0
WAIT_S = 60.0
BUCKETS_MS = (5.0, 10.0, 20.0, 50.0, 100.0)


class Pane:
    """``fore chat --demo`` in a private tmux server."""

    def __init__(self, workdir: Path, trace: Path) -> None:
        self.socket = f"fore-bench-chat-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        tmp = workdir / "tmp"
        tmp.mkdir()
        env = {TRACE_ENV: str(trace), "TMPDIR": str(tmp), "FORE_LOG_LEVEL": "critical"}
        command = [sys.executable, "-m", "supervision.cli", "chat", "--demo"]
        command += ["--workspace", str(workdir / "demo"), "--approval", "yolo"]
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        script = f"env {exports} {shlex.join(command)}; sleep 600"
        self.tmux("new-session", "-d", "-s", "bench", "-x", "120", "-y", "40", script)

    def tmux(self, *args: str) -> None:
        done = subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise BenchFailed(f"tmux {args[0]}: {done.stderr.strip()}")

    def send(self, *keys: str, literal: bool = False) -> int:
        """Send keys; returns when they were sent (``time.monotonic_ns()``)."""
        sent = time.monotonic_ns()
        self.tmux("send-keys", "-t", "bench", *(["-l"] if literal else []), *keys)
        return sent

    def close(self) -> None:
        try:
            self.tmux("kill-server")
        except BenchFailed:
            pass


class TraceReader:
    """Reads the app's trace as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen = 0

    def wait(self, event: str, *, after: int = 0, timeout: float = WAIT_S, **match: Any) -> int:
        """The time of the first ``event`` (at or after ``after``) whose fields match."""
        deadline = time.monotonic() + timeout
        while True:
            for when, name, fields in read_trace(str(self.path)):
                if (
                    name == event
                    and when >= after
                    and all(fields.get(k) == v for k, v in match.items())
                ):
                    return when
            if time.monotonic() > deadline:
                raise BenchFailed(f"the chat did not report {event} {match or ''} in time")
            time.sleep(0.005)

    def fields(self, event: str, at: int) -> dict[str, Any]:
        for when, name, fields in read_trace(str(self.path)):
            if name == event and when == at:
                return fields
        return {}


@dataclass
class Samples:
    from_send: list[float] = field(default_factory=list)
    from_key: list[float] = field(default_factory=list)


def _ms(ns: int) -> float:
    return ns / 1e6


def _keystrokes(
    pane: Pane, trace: TraceReader, rounds: int, start: int
) -> tuple[Samples, Samples, dict[str, Any], int]:
    """Type on the suggestion (abort), then a second key with none showing (the baseline)."""
    aborts, echoes = Samples(), Samples()
    runtime_cleanup: list[float] = []
    running = 0
    for _ in range(rounds):
        shown = trace.wait("ghost_shown", after=start)
        sent = pane.send("x", literal=True)
        key = trace.wait("key", after=shown, key="char", ghost=True)
        removed = trace.wait("ghost_removed", after=key)
        aborted = trace.wait("spec_aborted", after=key)
        done = max(removed, aborted)
        aborts.from_send.append(_ms(done - sent))
        aborts.from_key.append(_ms(done - key))
        info = trace.fields("spec_aborted", aborted)
        if info.get("was_running"):
            running += 1
        if info.get("cleanup_latency_s") is not None:
            runtime_cleanup.append(float(info["cleanup_latency_s"]) * 1e3)
        sent = pane.send("y", literal=True)
        key = trace.wait("key", after=done, key="char", ghost=False)
        echoed = trace.wait("echo_rendered", after=key)
        echoes.from_send.append(_ms(echoed - sent))
        echoes.from_key.append(_ms(echoed - key))
        start = time.monotonic_ns()
        pane.send("Enter")  # "xy" is sent; its answer brings the next suggestion
    info = {"was_running": running, "runtime_cleanup_ms": runtime_cleanup}
    return aborts, echoes, info, start


def _tabs(pane: Pane, trace: TraceReader, rounds: int, start: int) -> tuple[Samples, Samples]:
    """Tab on a ready suggestion; the accept's answer (files applied), then its lines shown."""
    applied, shown = Samples(), Samples()
    measured = 0
    while measured < rounds:
        ghost = trace.wait("ghost_shown", after=start)
        trace.wait("spec_final", after=ghost)  # ready, or stopped at a boundary
        sent = pane.send("Tab")
        key = trace.wait("key", after=ghost, key="tab")
        answer = trace.wait("accept_result", after=key)
        printed = trace.wait("transcript_shown", after=answer)
        start = answer  # the next (pipelined) suggestion is shown from here on
        if trace.fields("accept_result", answer).get("outcome") != "accepted":
            continue  # a boundary (the demo's shell step) runs a command: not an accept
        measured += 1
        applied.from_send.append(_ms(answer - sent))
        applied.from_key.append(_ms(answer - key))
        shown.from_send.append(_ms(printed - sent))
        shown.from_key.append(_ms(printed - key))
    return applied, shown


def _row(name: str, values: list[float], baseline: list[float] | None = None) -> list[Any]:
    p99 = percentile(values, 99)
    ratio = p99 / percentile(baseline, 99) if baseline else float("nan")
    verdict = "met" if p99 <= TARGET_MS else "MISSED"
    return [
        name,
        percentile(values, 50),
        percentile(values, 90),
        p99,
        max(values),
        ratio,
        verdict if baseline is not None else "-",
    ]


def _histogram(name: str, values: list[float]) -> list[Any]:
    edges = [0.0, *BUCKETS_MS, float("inf")]
    counts = [sum(1 for v in values if lo <= v < hi) for lo, hi in itertools.pairwise(edges)]
    return [name, *counts]


def run(*, quick: bool = False, rounds: int | None = None) -> dict[str, float]:
    if shutil.which("tmux") is None:
        raise BenchFailed("fore bench chat drives the real TUI in tmux; install tmux")
    rounds = rounds or (8 if quick else 40)
    console.print(f"[bold]bench chat[/] — {machine_line()}")
    workdir = Path(tempfile.mkdtemp(prefix="fore-bench-chat-"))
    trace_path = workdir / "trace.log"
    pane = Pane(workdir, trace_path)
    trace = TraceReader(trace_path)
    try:
        trace.wait("turn_done", timeout=WAIT_S)  # the demo's opening turn
        start = time.monotonic_ns()
        pane.send("hi", literal=True)
        pane.send("Enter")
        aborts, echoes, info, start = _keystrokes(pane, trace, rounds, start)
        applied, shown = _tabs(pane, trace, rounds, start)
    finally:
        pane.close()
        shutil.rmtree(workdir, ignore_errors=True)

    columns = [
        "measurement (ms)",
        "p50",
        "p90",
        "p99",
        "max",
        "p99 / baseline",
        f"p99 ≤ {TARGET_MS:.0f}",
    ]
    table(
        f"fore chat under tmux, {rounds} rounds each (from the key sent by tmux send-keys)",
        columns,
        [
            _row("baseline: key → echo drawn", echoes.from_send),
            _row("key → ghost removed + speculation aborted", aborts.from_send, echoes.from_send),
            _row("Tab → files applied", applied.from_send, echoes.from_send),
            _row("Tab → transcript shown", shown.from_send, echoes.from_send),
        ],
    )
    table(
        "the same, from the app's key binding (tmux and the pty left out)",
        columns,
        [
            _row("baseline: key → echo drawn", echoes.from_key),
            _row("key → ghost removed + speculation aborted", aborts.from_key, echoes.from_key),
            _row("Tab → files applied", applied.from_key, echoes.from_key),
            _row("Tab → transcript shown", shown.from_key, echoes.from_key),
        ],
    )
    labels = [f"< {BUCKETS_MS[0]:.0f}"]
    labels += [f"{lo:.0f}-{hi:.0f}" for lo, hi in itertools.pairwise(BUCKETS_MS)]
    labels.append(f"≥ {BUCKETS_MS[-1]:.0f}")
    table(
        "distribution (count per bucket, ms, from the key sent)",
        ["measurement", *labels],
        [
            _histogram("baseline echo", echoes.from_send),
            _histogram("keystroke abort", aborts.from_send),
            _histogram("Tab → shown", shown.from_send),
        ],
    )
    cleanup = info["runtime_cleanup_ms"]
    console.print(
        f"speculations still running when the key came: {info['was_running']}/{rounds}; "
        f"runtime's keystroke → overlay removed: p50 {percentile(cleanup, 50):.1f} ms, "
        f"p99 {percentile(cleanup, 99):.1f} ms"
    )
    return {
        "echo_p99_ms": percentile(echoes.from_send, 99),
        "abort_p99_ms": percentile(aborts.from_send, 99),
        "tab_applied_p99_ms": percentile(applied.from_send, 99),
        "tab_shown_p99_ms": percentile(shown.from_send, 99),
    }


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
