"""Abort -> a real llama.cpp server stops generating, in one run (issue 20).

A real server -- llama-cpp-python's, SmolLM2-135M on one thread, started here
(see :mod:`bench.llama_server` for where it comes from) -- writes a long
answer; the benchmark aborts it and measures from the abort to the moment the
server's own log says it stopped (``Disconnected from client``, printed when
the generation loop gives up after the token in progress). Three arms, each
sampled in turn:

* **baseline**: a bare ``httpx`` stream of the same request, closed by hand
  after the first text -- what the server itself needs to notice a client
  that left;
* **main turn**: ``Session.cancel()`` of a streamed main answer;
* **speculation (forks)**: the user's keystroke aborts a running speculation
  whose request is on the server. The session's model answers the main turns
  and the suggestion itself (a 135M model's own suggestion would rarely pass
  the filter) and sends the speculation's request, shaped by Fore, to the
  server.

Target: speculation p99 <= 500 ms. A sample whose answer ended by itself
before the abort is thrown away and taken again; one where the server went on
generating to the answer's end is a miss, and the run fails (``BenchFailed``):
the issue's run saw the server busy for three minutes after an abort. The
first miss of an arm ends that arm (each costs a whole answer's time).

Run: ``fore bench real_server [--quick]`` (or ``python -m bench.real_server``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fore.actors.llm import OpenAICompatible, RetryPolicy
from fore.actors.llm.models import Emit, StreamResult
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
from fore.bench.llama_server import (
    DISCONNECTED,
    GENERATION_ENDED,
    STOPPED,
    LlamaServer,
    LogLine,
    ServerFailed,
    ServerLog,
    find_llama,
)
from fore.messages.conversation import AssistantMessage, UserMessage
from fore.messages.llm import LlmRequest, Usage
from fore.messages.session import TextDelta
from fore.messages.speculation import SpeculationConfig, SpeculationFinished

TARGET_P99_S = 0.5
LONG_PROMPT = "Write a long essay on the history of Rome, with many chapters."
"""What this model answers at length (often hundreds of tokens), so there is time to abort."""
STOP_WAIT_S = 10.0
"""An abort not seen by then is a miss (the figure is then the time the answer ran on)."""
IDLE_WAIT_S = 240.0
"""After a miss: how long to wait for the server to finish the answer nobody reads."""
TURN_TIMEOUT_S = 240.0
FIRST_TEXT_CHARS = 40


@dataclass(frozen=True)
class Sample:
    """How one abort ended on the server."""

    seconds: float
    """Abort -> the server stopped generating (for a miss: -> its answer ended, or the
    wait ran out)."""
    stopped: bool
    """The server stopped because the client left (``Disconnected from client``)."""
    detail: str = ""


CLOSE_CALL_TOKENS = 4.0
CLOSE_CALL_S = 1.0
"""An answer that ended by itself within this many tokens (or seconds: log lines are
stamped when read, a little late under load) of the abort may have ended before the
abort could reach the server: such a sample proves nothing either way and is taken
again. A streamed answer is checked for a gone client after every token; one that is
not streamed runs to its end -- hundreds of tokens, many seconds here."""
_MS_PER_TOKEN = re.compile(r"eval time =\s*[\d.]+ ms /\s*\d+ runs\s*\(\s*([\d.]+) ms per token")


def judge_abort(log: ServerLog, mark: int, abort_mark: int, aborted_at: float) -> Sample | None:
    """What the server did after an abort at ``aborted_at`` (``time.monotonic()``).

    ``mark`` is the log position before the request, ``abort_mark`` the one
    just before the abort. None: inconclusive (the answer ended before the
    abort, or too close to it to tell), take the sample again.
    """

    def ended_before() -> bool:
        ended = next((x for x in log.since(mark) if GENERATION_ENDED.search(x.text)), None)
        return ended is not None and ended.at <= aborted_at

    if ended_before():
        return None
    line = log.wait_for(STOPPED, since=abort_mark, timeout=STOP_WAIT_S)
    if line is None:  # still generating: wait for the end, so the next sample finds it idle
        end = log.wait_for(GENERATION_ENDED, since=abort_mark, timeout=IDLE_WAIT_S)
        ran_on = (end.at if end else time.monotonic()) - aborted_at
        return Sample(ran_on, stopped=False, detail=f"still generating {STOP_WAIT_S:g} s later")
    seconds = line.at - aborted_at
    if DISCONNECTED.search(line.text):
        return Sample(seconds, stopped=True)
    per_token = _ms_per_token(log.since(mark), line)
    tokens = seconds * 1e3 / per_token if per_token else float("inf")
    if tokens <= CLOSE_CALL_TOKENS or seconds <= CLOSE_CALL_S:
        return None
    return Sample(
        seconds, stopped=False, detail=f"generated ~{tokens:.0f} more tokens, to the answer's end"
    )


def _ms_per_token(lines: list[LogLine], end: LogLine) -> float | None:
    """The generation's own pace, from its timing lines (printed just before ``end``)."""
    pace = None
    for line in lines:
        if line.at > end.at:
            break
        found = _MS_PER_TOKEN.search(line.text)
        if found:
            pace = float(found.group(1))
    return pace


class SpeculationRouter:
    """A session's model for speculation runs against a real server.

    Main turns and suggestions are answered here (the suggestion in the JSON
    shape the suggestion request asks for); the speculation's requests go to
    ``real``, exactly as Fore shapes them (streamed or not, its ``max_tokens``).
    """

    MAIN_ANSWERS = (
        "Rome was founded, the story goes, in 753 BC by Romulus.",
        "Augustus was the first emperor; Constantine moved the capital east.",
    )

    def __init__(self, real: OpenAICompatible, suggestion: str) -> None:
        self.real = real
        self.name = real.name
        self.retry = RetryPolicy(max_retries=0)
        self.suggestion = suggestion
        self.speculation_started = threading.Event()
        self.speculation_generating = threading.Event()
        self.speculation_streamed: bool | None = None

    async def stream(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        if request.purpose == "speculation":
            return await self._speculate(request, emit, http)
        if request.purpose == "suggestion":
            text = json.dumps({"suggestion": self.suggestion})
        else:  # varied, so the model does not just echo a pattern of short answers
            users = sum(isinstance(m, UserMessage) for m in request.messages)
            text = self.MAIN_ANSWERS[users % 2]
        if request.purpose == "main":
            emit(text)
        return StreamResult(AssistantMessage(text=text), Usage(), "stop")

    async def _speculate(
        self, request: LlmRequest, emit: Emit, http: httpx.AsyncClient
    ) -> StreamResult:
        self.speculation_streamed = request.stream
        self.speculation_started.set()
        if not request.stream:
            return await self.real.stream(request, emit, http)
        # Streamed: watch for the first text (the wire request is the same; only
        # what the client hands on changes), then pass on what was asked for.
        wanted = request.stream_deltas

        def watch(event: Any) -> None:
            if isinstance(event, str):
                self.speculation_generating.set()
            if wanted:
                emit(event)

        watched = request.model_copy(update={"stream_deltas": True})
        return await self.real.stream(watched, watch, http)

    def wait_generating(self, timeout: float) -> bool:
        """Wait until the speculation's answer is being generated; False at the timeout.

        A streamed answer is generating once its first text arrived. One that is
        not streamed shows nothing until it is done: one second after it was sent
        (its prompt is short), whatever it is doing is taken as generating.
        """
        if not self.speculation_started.wait(timeout):
            return False
        if self.speculation_streamed:
            return self.speculation_generating.wait(timeout)
        time.sleep(1.0)
        return True


def real_model(server: LlamaServer) -> OpenAICompatible:
    return OpenAICompatible(
        base_url=server.base_url, model=server.model, retry=RetryPolicy(max_retries=0)
    )


def stream_until_text(session: Any, chars: int, deadline: float) -> int:
    """Read a session's events until ``chars`` characters of answer text arrived."""
    seen = 0
    while seen < chars and time.monotonic() < deadline:
        for event in session.events(timeout=0.2):
            if isinstance(event, TextDelta):
                seen += len(event.text)
            if seen >= chars:
                break
    return seen


def speculation_outcome(session: Any, deadline: float) -> SpeculationFinished | None:
    while time.monotonic() < deadline:
        for event in session.events(timeout=0.2):
            if isinstance(event, SpeculationFinished):
                return event
    return None


def _baseline(server: LlamaServer, log: ServerLog) -> Sample | None:
    """A bare httpx stream of the same request, closed by hand after the first text."""
    mark = log.mark()
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": LONG_PROMPT}],
        "stream": True,
    }
    with (
        httpx.Client(timeout=TURN_TIMEOUT_S, trust_env=False) as http,
        http.stream("POST", f"{server.base_url}/chat/completions", json=body) as response,
    ):
        seen = 0
        for line in response.iter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:]).get("choices") or [{}]
                seen += len((choices[0].get("delta") or {}).get("content") or "")
            if seen >= FIRST_TEXT_CHARS or line == "data: [DONE]":
                break
        abort_mark = log.mark()
        aborted_at = time.monotonic()
        response.close()
    return judge_abort(log, mark, abort_mark, aborted_at)


def _main_turn(server: LlamaServer, log: ServerLog, rt: Any, workspace: Path) -> Sample | None:
    session = rt.open_session(workspace=workspace, model=real_model(server))
    try:
        mark = log.mark()
        runner = threading.Thread(
            target=lambda: session.submit(LONG_PROMPT, timeout=TURN_TIMEOUT_S), daemon=True
        )
        runner.start()
        stream_until_text(session, FIRST_TEXT_CHARS, time.monotonic() + TURN_TIMEOUT_S)
        abort_mark = log.mark()
        aborted_at = time.monotonic()
        session.cancel("bench: abort")
        runner.join(TURN_TIMEOUT_S)
        return judge_abort(log, mark, abort_mark, aborted_at)
    finally:
        session.close()


def _speculation(server: LlamaServer, log: ServerLog, rt: Any, workspace: Path) -> Sample | None:
    model = SpeculationRouter(real_model(server), LONG_PROMPT)
    config = SpeculationConfig(enabled=True, suggestion_delay_ms=0)
    session = rt.open_session(workspace=workspace, model=model, speculation=config)
    try:
        mark = log.mark()
        for prompt in ("Tell me about Rome.", "And about its emperors?"):
            session.submit(prompt, timeout=TURN_TIMEOUT_S)
        if not model.wait_generating(TURN_TIMEOUT_S):
            raise BenchFailed("no speculation started, or it generated nothing")
        abort_mark = log.mark()
        aborted_at = time.monotonic()
        session.keystroke("n")
        outcome = speculation_outcome(session, time.monotonic() + TURN_TIMEOUT_S)
        if outcome is None:
            raise BenchFailed("no SpeculationFinished after the keystroke")
        if outcome.was_running is False:
            return None
        return judge_abort(log, mark, abort_mark, aborted_at)
    finally:
        session.close()


def _arm(name: str, take: Callable[[], Sample | None], n: int) -> list[Sample]:
    samples: list[Sample] = []
    for _ in range(3 * n):
        if len(samples) >= n:
            break
        sample = take()
        if sample is None:
            continue
        samples.append(sample)
        if not sample.stopped:
            console.print(
                f"  {name}: the server did not stop: {sample.detail}, "
                f"{sample.seconds:.1f} s after the abort"
            )
            break
    return samples


def run(*, quick: bool = False, samples: int | None = None) -> dict[str, float]:
    from fore.actors.core.logs import configure_logging
    from fore.actors.speculation.governor import LoadGovernor
    from fore.supervision import Runtime

    configure_logging()
    n = samples or (3 if quick else 15)
    console.print(f"[bold]bench real_server[/] — {machine_line()}")
    setup = find_llama()
    if isinstance(setup, str):
        raise BenchFailed(setup)
    base = Path(tempfile.mkdtemp(prefix="fore-bench-real-server-"))
    workspace = base / "ws"
    workspace.mkdir()
    server = LlamaServer(setup, log_path=base / "llama.log", chat_format=None, n_ctx=1024)
    try:
        server.start()
    except ServerFailed as exc:
        raise BenchFailed(" ".join(str(exc).split("\n", 1)[0].split())) from None
    arms: dict[str, list[Sample]] = {}
    try:
        log = server.log
        assert log is not None
        with Runtime(
            name="bench-real-server", speculation_governor=LoadGovernor(enabled=False)
        ) as rt:
            takes: dict[str, Callable[[], Sample | None]] = {
                "baseline: bare httpx stream closed by hand": lambda: _baseline(server, log),
                "main turn: Session.cancel()": lambda: _main_turn(server, log, rt, workspace),
                "speculation (forks): keystroke": lambda: _speculation(server, log, rt, workspace),
            }
            for name, take in takes.items():
                arms[name] = _arm(name, take, n)
    finally:
        server.stop()
    console.print(f"  server log: {server.log_path}")

    def p99(values: list[Sample]) -> float:
        return percentile([s.seconds for s in values], 99)

    baseline = p99(next(iter(arms.values())))
    rows = []
    for i, (name, got) in enumerate(arms.items()):
        missed = sum(not s.stopped for s in got)
        is_fork = name.startswith("speculation")
        rows.append(
            [
                name,
                len(got),
                percentile([s.seconds for s in got], 50) * 1e3,
                p99(got) * 1e3,
                ratio(p99(got), baseline) if i else 1.0,
                missed,
                f"≤ {TARGET_P99_S * 1e3:.0f}" if is_fork else "",
            ]
        )
    table(
        "abort → the real server stops generating (llama-cpp-python, SmolLM2-135M, 1 thread)",
        [
            "arm",
            "samples (count)",
            "p50 (ms)",
            "p99 (ms)",
            "p99 / baseline (×)",
            "ran on (count)",
            "target (ms)",
        ],
        rows,
    )
    fork_arm = arms[list(arms)[2]]
    targets_table(
        [
            Target(
                "abort → server stops generating, speculation p99",
                p99(fork_arm) * 1e3 if fork_arm else math.nan,
                "ms",
                "<=",
                TARGET_P99_S * 1e3,
                note=f"n={len(fork_arm)}",
            ),
            Target(
                "aborts the server went on generating after",
                float(sum(not s.stopped for got in arms.values() for s in got)),
                "",
                "==",
                0,
            ),
        ]
    )
    names = list(arms)
    fork = arms[names[2]]
    report = {
        "samples": float(n),
        "baseline_p99_ms": baseline * 1e3,
        "main_p99_ms": p99(arms[names[1]]) * 1e3,
        "speculation_p50_ms": percentile([s.seconds for s in fork], 50) * 1e3,
        "speculation_p99_ms": p99(fork) * 1e3,
        "missed": float(sum(not s.stopped for got in arms.values() for s in got)),
    }
    problems = [
        f"{name}: the server went on generating after the abort"
        for name, got in arms.items()
        if any(not s.stopped for s in got)
    ]
    if any(len(got) == 0 for got in arms.values()):
        problems.append("an arm got no sample (every answer ended before its abort)")
    if fork and p99(fork) > TARGET_P99_S:
        problems.append(f"speculation p99 {p99(fork) * 1e3:.0f} ms > {TARGET_P99_S * 1e3:.0f} ms")
    if problems:
        raise BenchFailed("; ".join(problems))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fore bench real_server", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 samples per arm")
    parser.add_argument("--samples", type=int, default=None, help="samples per arm (default 15)")
    args = parser.parse_args(argv)
    try:
        run(quick=args.quick, samples=args.samples)
    except BenchFailed as exc:
        console.print(f"FAILED: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
