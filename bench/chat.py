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

Each is measured from two starts: the moment this process sent the key to
tmux (a control-mode client: the whole way through the tmux server and the
pty) and the moment the app's key binding ran. Target: p99
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
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fore.bench._common import BenchFailed, console, machine_line, percentile, table
from fore.supervision.chat.trace import ENV as TRACE_ENV
from fore.supervision.chat.trace import read_trace

TARGET_MS = 50.0
WAIT_S = 60.0
BUCKETS_MS = (5.0, 10.0, 20.0, 50.0, 100.0)


class Pane:
    """``fore chat --demo`` in a private tmux server, typed into by a control-mode client.

    Keys go through one long-lived ``tmux -C`` client (a command line per key on
    its stdin), so a measurement holds what a person's key goes through -- the
    tmux server, the pty, the app -- and not the start of a ``tmux send-keys``
    process per key.
    """

    def __init__(self, workdir: Path, trace: Path) -> None:
        self.socket = f"fore-bench-chat-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        tmp = workdir / "tmp"
        tmp.mkdir()
        env = {TRACE_ENV: str(trace), "TMPDIR": str(tmp), "FORE_LOG_LEVEL": "critical"}
        command = [sys.executable, "-m", "fore.supervision.cli", "chat", "--demo"]
        command += ["--workspace", str(workdir / "demo"), "--approval", "yolo"]
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        script = f"env {exports} {shlex.join(command)}; sleep 600"
        self.tmux("new-session", "-d", "-s", "bench", "-x", "120", "-y", "40", script)
        self.client = subprocess.Popen(
            ["tmux", "-L", self.socket, "-f", "/dev/null", "-C", "attach", "-t", "bench"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        # Control mode reports every byte the pane writes: read it, or the client stalls.
        self._drain = threading.Thread(target=self._read, name="bench-chat-tmux", daemon=True)
        self._drain.start()
        self._command("refresh-client -C 120x40")  # the control client keeps the pane's size

    def _read(self) -> None:
        stdout = self.client.stdout
        assert stdout is not None
        while stdout.read(65536):
            pass

    def _command(self, line: str) -> None:
        stdin = self.client.stdin
        if stdin is None or self.client.poll() is not None:
            raise BenchFailed("the tmux control client ended")
        stdin.write(line.encode() + b"\n")
        stdin.flush()

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
        words = ["send-keys", "-t", "bench", *(["-l"] if literal else []), *keys]
        line = " ".join(shlex.quote(word) for word in words)
        sent = time.monotonic_ns()
        self._command(line)
        return sent

    def close(self) -> None:
        try:
            if self.client.stdin is not None:
                self.client.stdin.close()
            self.client.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.client.kill()
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
    running: int = 0
    """Keystrokes: how many speculations were still running when the key came."""


def _ms(ns: int) -> float:
    return ns / 1e6


def _keystrokes(
    pane: Pane, trace: TraceReader, rounds: int, start: int
) -> tuple[dict[str, Samples], Samples, int]:
    """Type on the suggestion (abort), then a second key with none showing (the baseline).

    The speculation counts as aborted when the runtime has confirmed its LLM
    stream closed and its tool calls cancelled (``cancel_latency_s``, timed from
    the keystroke); one that had already finished had nothing left to stop.
    Removing its overlay is housekeeping after that, reported apart.
    """
    rows = {name: Samples() for name in ("abort", "ghost", "stopped", "overlay")}
    echoes = Samples()
    for _ in range(rounds):
        shown = trace.wait("ghost_shown", after=start)
        sent = pane.send("x", literal=True)
        key = trace.wait("key", after=shown, key="char", ghost=True)
        removed = trace.wait("ghost_removed", after=key)
        reported = trace.wait("spec_aborted", after=key)
        info = trace.fields("spec_aborted", reported)
        offset = _ms(key - sent)
        ghost = _ms(removed - key)
        cancel = info.get("cancel_latency_s")
        stopped = float(cancel) * 1e3 if info.get("was_running") and cancel is not None else 0.0
        for name, value in (("ghost", ghost), ("stopped", stopped), ("abort", max(ghost, stopped))):
            rows[name].from_key.append(value)
            rows[name].from_send.append(value + offset)
        if info.get("cleanup_latency_s") is not None:
            overlay = float(info["cleanup_latency_s"]) * 1e3
            rows["overlay"].from_key.append(overlay)
            rows["overlay"].from_send.append(overlay + offset)
        if info.get("was_running"):
            rows["stopped"].running = rows["stopped"].running + 1
        sent = pane.send("y", literal=True)
        key = trace.wait("key", after=reported, key="char", ghost=False)
        echoed = trace.wait("echo_rendered", after=key)
        echoes.from_send.append(_ms(echoed - sent))
        echoes.from_key.append(_ms(echoed - key))
        start = time.monotonic_ns()
        pane.send("Enter")  # "xy" is sent; its answer brings the next suggestion
    return rows, echoes, start


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
    """A table row; with a baseline, its ratio and the verdict (``[]``: a detail row)."""
    p99 = percentile(values, 99)
    ratio = p99 / percentile(baseline, 99) if baseline else float("nan")
    verdict = "met" if p99 <= TARGET_MS else "MISSED"
    return [
        name,
        percentile(values, 50),
        percentile(values, 90),
        p99,
        max(values, default=float("nan")),
        ratio,
        verdict if baseline else "-",
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
        keys, echoes, start = _keystrokes(pane, trace, rounds, start)
        applied, shown = _tabs(pane, trace, rounds, start)
    finally:
        pane.close()
        shutil.rmtree(workdir, ignore_errors=True)

    columns = ["measurement", "p50 (ms)", "p90 (ms)", "p99 (ms)", "max (ms)", "p99 / baseline (×)"]
    columns.append(f"p99 ≤ {TARGET_MS:.0f} ms")
    for title, pick in (
        (f"fore chat under tmux, {rounds} rounds each, from the key sent to tmux", "from_send"),
        ("the same, from the app's key binding (tmux and the pty left out)", "from_key"),
    ):
        base = getattr(echoes, pick)

        def values(samples: Samples, pick: str = pick) -> list[float]:
            return list(getattr(samples, pick))

        table(
            title,
            columns,
            [
                _row("baseline: key → its echo drawn", base),
                _row("key → ghost removed + speculation stopped", values(keys["abort"]), base),
                _row("  of which: ghost removed (frame written)", values(keys["ghost"]), []),
                _row("  of which: speculation stopped", values(keys["stopped"]), []),
                _row("  then: its overlay removed", values(keys["overlay"]), []),
                _row("Tab → files applied", values(applied), base),
                _row("Tab → transcript shown", values(shown), base),
            ],
        )
    labels = [f"< {BUCKETS_MS[0]:.0f} ms (n)"]
    labels += [f"{lo:.0f}-{hi:.0f} ms (n)" for lo, hi in itertools.pairwise(BUCKETS_MS)]
    labels.append(f"≥ {BUCKETS_MS[-1]:.0f} ms (n)")
    table(
        "distribution (rounds per bucket, from the key sent)",
        ["measurement", *labels],
        [
            _histogram("baseline echo", echoes.from_send),
            _histogram("key → ghost gone + stopped", keys["abort"].from_send),
            _histogram("Tab → files applied", applied.from_send),
            _histogram("Tab → shown", shown.from_send),
        ],
    )
    console.print(
        f"speculations still running when the key came: {keys['stopped'].running}/{rounds} "
        "(a finished one has nothing left to stop: 0 ms)"
    )
    return {
        "echo_p99_ms": percentile(echoes.from_send, 99),
        "abort_p99_ms": percentile(keys["abort"].from_send, 99),
        "tab_applied_p99_ms": percentile(applied.from_send, 99),
        "tab_shown_p99_ms": percentile(shown.from_send, 99),
    }


if __name__ == "__main__":
    run(quick="--quick" in sys.argv)
