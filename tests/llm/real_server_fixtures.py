"""Fixtures of the real-server tier: llama-cpp-python servers with a tiny real model.

Each server is started once per test session (loading the model takes a
second or two), on 127.0.0.1 and a free port, and killed at the end; its log is
kept under the session's temp directory and read by a thread that stamps each
line (see :mod:`bench.llama_server`).

* ``llama_fc`` -- ``--chat_format chatml-function-calling``, llama-cpp-python's
  tool-calling mode (named tool choices are grammar-constrained; ``auto`` works
  only unstreamed);
* ``llama_own`` -- the model's own chat template (from the GGUF);
* ``llama_small`` -- the model's own template with a 256-token context, so an
  answer is cut off by the context's end (``finish_reason: "length"``).

Without llama-cpp-python or the model the tier is *skipped* with the reason,
unless ``FORE_REQUIRE_REAL_SERVER=1`` (``.ci/run`` sets it): then it *fails*.
A server that is there but does not start always fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fore.bench.llama_server import LlamaServer, LlamaSetup, ServerFailed, find_llama

SMALL_CTX = 256


def _require() -> bool:
    return os.environ.get("FORE_REQUIRE_REAL_SERVER", "") not in ("", "0")


@pytest.fixture(scope="session")
def llama_setup() -> LlamaSetup:
    found = find_llama()
    if isinstance(found, str):
        if _require():
            pytest.fail(f"real-server tier: {found} (FORE_REQUIRE_REAL_SERVER=1)", pytrace=False)
        pytest.skip(f"real-server tier: {found}")
    return found


def _serve(
    setup: LlamaSetup,
    factory: pytest.TempPathFactory,
    name: str,
    *,
    chat_format: str | None,
    n_ctx: int = 2048,
) -> Iterator[LlamaServer]:
    log = factory.mktemp("llama") / f"{name}.log"
    server = LlamaServer(setup, log_path=log, chat_format=chat_format, n_ctx=n_ctx)
    problem = None
    try:
        server.start()
    except ServerFailed as exc:
        problem = str(exc)
    if problem is not None:
        pytest.fail(f"real-server tier: {problem}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_fc(
    llama_setup: LlamaSetup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    yield from _serve(llama_setup, tmp_path_factory, "fc", chat_format="chatml-function-calling")


@pytest.fixture(scope="session")
def llama_own(
    llama_setup: LlamaSetup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    yield from _serve(llama_setup, tmp_path_factory, "own", chat_format=None)


@pytest.fixture(scope="session")
def llama_small(
    llama_setup: LlamaSetup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    yield from _serve(llama_setup, tmp_path_factory, "small", chat_format=None, n_ctx=SMALL_CTX)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("alpha\nbeta\n")
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_text("def main():\n    return 1\n")
    return ws
