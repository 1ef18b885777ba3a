"""The mock server in a child process (its own GIL), controlled over HTTP.

:class:`SpawnedMockLlmServer` runs ``python -m fore.actors.llm.mock_server`` (the CLI),
reads the port from its one stdout line (:data:`PORT_LINE_PREFIX`), and offers the
:class:`~fore.actors.llm.mock_server.control.MockLlmControl` API over the ``/mock``
endpoints. Benchmarks use it so the stand-in model does not share the measured process's
interpreter lock; :meth:`MockLlmServer.spawn` builds its arguments.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Final, Self

import httpx

from fore.actors.llm.mock_server.control import _wait_for_stats
from fore.actors.llm.mock_server.settings import FaultKind, FaultSpec, MockStats, RecordedRequest
from fore.actors.llm.script import ScriptFile

PORT_LINE_PREFIX: Final = "MOCK_LLM_LISTENING"
"""The CLI's one stdout line: ``MOCK_LLM_LISTENING port=<n> base_url=<url>``."""


_PORT_LINE_RE = re.compile(rf"^{PORT_LINE_PREFIX} port=(\d+) ")


class SpawnedMockLlmServer:
    """A mock server in a child process; control over HTTP, same API as :class:`MockLlmServer`.

    Started by the constructor (normally via :meth:`MockLlmServer.spawn`);
    :meth:`stop` (or leaving the ``with`` block) sends SIGTERM, waits, and
    kills it past the deadline.
    """

    def __init__(
        self,
        cli_args: Sequence[str],
        *,
        startup_timeout_s: float = 30.0,
        shutdown_timeout_s: float = 10.0,
    ) -> None:
        self._shutdown_timeout_s = shutdown_timeout_s
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "fore.actors.llm.mock_server", *cli_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            cwd=root,
        )
        self._client: httpx.Client | None = None
        try:
            self._port = self._read_port(startup_timeout_s)
            self._client = httpx.Client(base_url=self.root_url, timeout=10.0)
        except BaseException:
            self.stop()
            raise

    def _read_port(self, timeout_s: float) -> int:
        stdout = self._process.stdout
        assert stdout is not None
        fd = stdout.fileno()
        deadline = time.monotonic() + timeout_s
        buffer = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"mock LLM subprocess printed no port in {timeout_s}s")
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.1))
            if ready:
                data = os.read(fd, 4096)
                if not data:
                    self._process.wait(timeout=5)
                    raise RuntimeError(
                        "mock LLM subprocess exited with code "
                        f"{self._process.returncode}: {self._stderr_text()}"
                    )
                buffer += data
                for line in buffer.decode("utf-8", "replace").splitlines():
                    match = _PORT_LINE_RE.match(line)
                    if match:
                        return int(match.group(1))
            elif self._process.poll() is not None:
                raise RuntimeError(
                    f"mock LLM subprocess exited with code {self._process.returncode}: "
                    f"{self._stderr_text()}"
                )

    def _stderr_text(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0)
            return self._stderr.read().decode("utf-8", "replace").strip()[-2000:]
        return ""

    # -- lifecycle ---------------------------------------------------------- #

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The child's exit code once it has exited, else ``None``."""
        return self._process.poll()

    def stop(self) -> None:
        """SIGTERM, wait up to ``shutdown_timeout_s``, then SIGKILL; idempotent."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=self._shutdown_timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        if self._process.stdout is not None:
            self._process.stdout.close()
        self._stderr.close()

    close = stop

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- addresses ---------------------------------------------------------- #

    @property
    def port(self) -> int:
        return self._port

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    # -- control over HTTP -------------------------------------------------- #

    def _http(self) -> httpx.Client:
        if self._client is None:
            raise RuntimeError("mock LLM subprocess is stopped")
        return self._client

    def stats(self) -> MockStats:
        response = self._http().get("/mock/stats")
        response.raise_for_status()
        return MockStats.model_validate_json(response.content)

    def requests(self) -> tuple[RecordedRequest, ...]:
        response = self._http().get("/mock/requests")
        response.raise_for_status()
        return tuple(RecordedRequest.model_validate(r) for r in response.json()["requests"])

    def queue_fault(
        self,
        fault: FaultKind,
        *,
        count: int = 1,
        retry_after: float | None = None,
        session: str | None = None,
        stall_s: float | None = None,
    ) -> None:
        spec = FaultSpec(
            fault=fault, count=count, retry_after=retry_after, session=session, stall_s=stall_s
        )
        response = self._http().post("/mock/faults", content=spec.model_dump_json())
        response.raise_for_status()

    def reset(self) -> None:
        self._http().post("/mock/reset").raise_for_status()

    def set_script(self, script: ScriptFile | None) -> None:
        if script is None:
            self._http().delete("/mock/script").raise_for_status()
        else:
            self._http().post("/mock/script", content=script.to_json()).raise_for_status()

    def wait_for_stats(
        self, predicate: Callable[[MockStats], bool], timeout_s: float = 5.0
    ) -> MockStats:
        return _wait_for_stats(self.stats, predicate, timeout_s)
