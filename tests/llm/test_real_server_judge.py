"""How the real-server tier reads a server's log: no server needed, so these always run.

``judge_abort`` decides whether an abort stopped the server's generation (the
real-server tests' and ``fore bench real_server``'s verdict), from the lines
``ServerLog`` stamps as it reads them. Lines are fed through a real pipe.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fore.bench import real_server
from fore.bench.llama_server import DISCONNECTED, ServerLog
from fore.bench.real_server import judge_abort


class _Feed:
    def __init__(self, tmp_path: Path) -> None:
        read, self._write = os.pipe()
        self.log = ServerLog(os.fdopen(read, "rb"), tmp_path / "server.log")

    def say(self, *lines: str) -> None:
        """Write lines and wait until the reader has stamped them."""
        target = self.log.mark() + len(lines)
        os.write(self._write, "".join(f"{line}\n" for line in lines).encode())
        deadline = time.monotonic() + 30
        while self.log.mark() < target and time.monotonic() < deadline:
            time.sleep(0.001)
        assert self.log.mark() == target

    def close(self) -> None:
        os.close(self._write)
        self.log.join(5)


@pytest.fixture
def feed(tmp_path: Path) -> Iterator[_Feed]:
    f = _Feed(tmp_path)
    yield f
    f.close()


def _perf(ms_per_token: float) -> tuple[str, str]:
    return (
        "llama_perf_context_print:        eval time =     100.00 ms /    10 runs   "
        f"(  {ms_per_token:.2f} ms per token,    10.00 tokens per second)",
        "llama_perf_context_print:       total time =     120.00 ms /    20 tokens",
    )


def test_a_disconnect_after_the_abort_is_a_stop(feed: _Feed) -> None:
    mark = feed.log.mark()
    feed.say("Llama.generate: 10 prefix-match hit, remaining 5 prompt tokens to eval")
    abort_mark, aborted_at = feed.log.mark(), time.monotonic()
    feed.say("disconnected", "Disconnected from client (via refresh/close) Address(...)")
    sample = judge_abort(feed.log, mark, abort_mark, aborted_at)
    assert sample is not None and sample.stopped
    assert sample.seconds >= 0
    assert feed.log.path.read_text().count("Disconnected from client") == 1


def test_an_answer_over_before_the_abort_is_no_sample(feed: _Feed) -> None:
    mark = feed.log.mark()
    feed.say(*_perf(10.0))
    abort_mark, aborted_at = feed.log.mark(), time.monotonic()
    assert judge_abort(feed.log, mark, abort_mark, aborted_at) is None


def test_an_answer_that_ran_on_to_its_end_is_a_miss(feed: _Feed) -> None:
    mark = feed.log.mark()
    # The abort was 2 s ago (past the close-call window), at an (absurdly) fast pace:
    abort_mark, aborted_at = feed.log.mark(), time.monotonic() - 2 * real_server.CLOSE_CALL_S
    feed.say(*_perf(0.0001))  # ~20,000,000 tokens after it
    sample = judge_abort(feed.log, mark, abort_mark, aborted_at)
    assert sample is not None and not sample.stopped
    assert "more tokens" in sample.detail


def test_an_answer_ending_within_a_few_tokens_of_the_abort_is_no_sample(feed: _Feed) -> None:
    mark = feed.log.mark()
    abort_mark, aborted_at = feed.log.mark(), time.monotonic() - 2 * real_server.CLOSE_CALL_S
    feed.say(*_perf(1e9))  # a token takes "forever": it ended within one token of the abort
    assert judge_abort(feed.log, mark, abort_mark, aborted_at) is None


def test_an_answer_ending_just_after_the_abort_is_no_sample(feed: _Feed) -> None:
    mark = feed.log.mark()
    abort_mark, aborted_at = feed.log.mark(), time.monotonic()
    feed.say(*_perf(0.0001))  # many tokens at that pace, but within the close-call window
    assert judge_abort(feed.log, mark, abort_mark, aborted_at) is None


def test_a_server_still_generating_is_a_miss(feed: _Feed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(real_server, "STOP_WAIT_S", 0.05)
    monkeypatch.setattr(real_server, "IDLE_WAIT_S", 0.05)
    mark = feed.log.mark()
    abort_mark, aborted_at = feed.log.mark(), time.monotonic()
    sample = judge_abort(feed.log, mark, abort_mark, aborted_at)
    assert sample is not None and not sample.stopped
    assert "still generating" in sample.detail


def test_marks_survive_dropped_lines(tmp_path: Path) -> None:
    read, write = os.pipe()
    log = ServerLog(os.fdopen(read, "rb"), tmp_path / "server.log", max_lines=3)
    try:
        os.write(write, b"".join(f"line {i}\n".encode() for i in range(10)))
        deadline = time.monotonic() + 30
        while log.mark() < 10 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert log.mark() == 10
        assert [x.text for x in log.since(8)] == ["line 8", "line 9"]
        assert [x.text for x in log.since(0)] == ["line 7", "line 8", "line 9"]
        os.write(write, b"Disconnected from client\n")
        found = log.wait_for(DISCONNECTED, since=10, timeout=30)
        assert found is not None and found.text == "Disconnected from client"
        assert log.wait_for(DISCONNECTED, since=11, timeout=0.01) is None
    finally:
        os.close(write)
        log.join(5)
    assert len(log.path.read_text().splitlines()) == 11  # the file keeps every line


def test_another_server_on_the_port_is_not_taken_for_ours(tmp_path: Path) -> None:
    """The port is probed free, then bound by the llama.cpp child -- unless another
    process binds it in between (the suite runs on two workers; the other may start a
    mock server). That server answers ``/v1/models`` too: readiness must mean *our*
    model is served, or the tier would test the mock and call it llama.cpp."""
    import subprocess
    import sys

    from fore.actors.llm.mock_server import MockLlmServer
    from fore.actors.llm.script import ScriptFile
    from fore.bench.llama_server import LlamaServer, LlamaSetup

    script = ScriptFile.model_validate({"replies": [{"text": "not llama"}]})
    with MockLlmServer(script) as other:
        ours = LlamaServer(LlamaSetup(sys.executable, tmp_path / "m.gguf"), log_path=tmp_path / "l")
        ours.port = other.port  # what it would have found, had the port been taken
        ours.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert httpx.get(f"{ours.base_url}/models", timeout=10).status_code == 200
            problem = ours._wait_ready(timeout=1.0)
        finally:
            ours.proc.kill()
            ours.proc.wait(timeout=30)
    assert problem is not None and "not answering /v1/models" in problem


def test_another_llama_server_on_the_port_is_not_taken_for_ours(tmp_path: Path) -> None:
    """The other worker's llama.cpp server lists the same model alias: readiness must
    also mean our child holds the port."""
    import http.server
    import json
    import subprocess
    import sys
    import threading

    from fore.bench.llama_server import MODEL_ALIAS, LlamaServer, LlamaSetup

    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"object": "list", "data": [{"id": MODEL_ALIAS}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    serving = threading.Thread(target=other.serve_forever, daemon=True)
    serving.start()
    ours = LlamaServer(LlamaSetup(sys.executable, tmp_path / "m.gguf"), log_path=tmp_path / "l")
    ours.port = other.server_address[1]
    ours.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert LlamaServer._serves_our_model(httpx.get(f"{ours.base_url}/models", timeout=10))
        problem = ours._wait_ready(timeout=1.0)
    finally:
        ours.proc.kill()
        ours.proc.wait(timeout=30)
        other.shutdown()
        other.server_close()
        serving.join(timeout=30)
    assert problem is not None and "not answering /v1/models" in problem
