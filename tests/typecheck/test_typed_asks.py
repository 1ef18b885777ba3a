"""Typed asks: mypy accepts the good program and reports each mistake of the bad one.

``Address``/``Replying``/``Ask`` (fore.messages.address) and
``PooledActor.ask_typed``/``tell_quietly`` exist so that mypy checks both
ends of a link between actors. That promise is only as good as the errors
mypy actually reports, so this runs mypy, with the project's own settings
(``--strict``, the pydantic plugin), on two small programs in
``tests/typecheck/snippets``: ``good_asks.py`` must be clean, and every line of
``bad_asks.py`` marked ``# E: <code>`` must be reported with that code, and
nothing else. The run is bounded in time (a cold mypy cache takes ~10-30 s).

The run-time side -- that a typed ask delivers its answer like ``ask_then``
-- is checked here too, with real actors.
"""

from __future__ import annotations

import queue
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pykka import ActorDeadError

from fore.actors.core import ActorSystem
from fore.actors.core.continuations import tell_quietly
from fore.actors.core.handlers import handles
from fore.actors.core.pooled import ForeActor
from fore.messages.address import Ask
from fore.messages.base import ControlMessage, Message
from fore.supervision.session_events import EventQueue

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = Path(__file__).resolve().parent / "snippets"
MYPY_TIMEOUT = 300.0
WAIT = 15.0

_ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")
_EXPECT = re.compile(r"#\s*E:\s*(?P<codes>[a-z-]+(?:\s*,\s*[a-z-]+)*)\s*$")


def expected_errors(path: Path) -> Counter[tuple[int, str]]:
    """The ``# E: code[, code]`` marks of a snippet, as (line, code) pairs."""
    marks: Counter[tuple[int, str]] = Counter()
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        match = _EXPECT.search(text)
        if match:
            for code in match["codes"].split(","):
                marks[(number, code.strip())] += 1
    return marks


@dataclass(frozen=True)
class MypyRun:
    errors: dict[str, Counter[tuple[int, str]]]
    """(line, code) of every error, per snippet file name."""
    output: str


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> MypyRun:
    """Run mypy once on both snippets."""
    cache = tmp_path_factory.mktemp("mypy-cache")
    files = [SNIPPETS / "good_asks.py", SNIPPETS / "bad_asks.py"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            # The project's [tool.mypy]: strict, the pydantic plugin, Python 3.11.
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            # Errors in Fore itself are the main mypy run's business, not this test's.
            "--follow-imports=silent",
            "--show-error-codes",
            "--no-pretty",
            *(str(f.relative_to(ROOT)) for f in files),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=MYPY_TIMEOUT,
        check=False,
    )
    assert proc.returncode in (0, 1), f"mypy did not run:\n{proc.stdout}\n{proc.stderr}"
    errors: dict[str, Counter[tuple[int, str]]] = {f.name: Counter() for f in files}
    for line in proc.stdout.splitlines():
        match = _ERROR.match(line)
        if match:
            name = Path(match["path"]).name
            assert name in errors, f"mypy reported an error outside the snippets: {line}"
            errors[name][(int(match["line"]), match["code"])] += 1
    return MypyRun(errors, proc.stdout)


def test_mypy_accepts_every_well_typed_ask(mypy_run: MypyRun) -> None:
    assert expected_errors(SNIPPETS / "good_asks.py") == Counter()
    assert mypy_run.errors["good_asks.py"] == Counter(), mypy_run.output


def test_mypy_reports_each_mistake_with_its_code(mypy_run: MypyRun) -> None:
    expected = expected_errors(SNIPPETS / "bad_asks.py")
    assert len(expected) >= 6, "the bad program lost its marks"
    assert mypy_run.errors["bad_asks.py"] == expected, mypy_run.output


# -- at run time ------------------------------------------------------------------------------


class Double(Ask[int]):
    n: int


class Fail(Ask[int]):
    pass


class Urgent(ControlMessage, Ask[str]):
    pass


class Go(Message):
    """Ask the responder something (n < 0: a Fail) and report the outcome."""

    n: int


class Responder(ForeActor):
    @handles(Double)
    def _double(self, message: Double) -> int:
        return 2 * message.n

    @handles(Fail)
    def _fail(self, _message: Fail) -> int:
        raise ValueError("no")

    @handles(Urgent)
    def _urgent(self, _message: Urgent) -> str:
        return "urgent"


class Asker(ForeActor):
    def __init__(self, target: Any, out: queue.Queue[Any]) -> None:
        super().__init__()
        self.target = target
        self.out = out

    @handles(Go)
    def _go(self, message: Go) -> None:
        if message.n < 0:
            self.ask_typed(self.target, Fail(), self.out.put, on_error=self.out.put)
        else:
            self.ask_typed(self.target, Double(n=message.n), self.out.put)
            self.ask_typed(self.target, Urgent(), self.out.put)


def test_a_typed_ask_delivers_its_answer_and_its_error() -> None:
    system = ActorSystem(name="typed-asks")
    try:
        out: queue.Queue[Any] = queue.Queue()
        with system.activated():
            responder = Responder.start()
            asker = Asker.start(responder, out)
        asker.tell(Go(n=21))
        assert {out.get(timeout=WAIT), out.get(timeout=WAIT)} == {42, "urgent"}
        asker.tell(Go(n=-1))
        error = out.get(timeout=WAIT)
        assert isinstance(error, ValueError) and str(error) == "no"
    finally:
        assert system.shutdown(timeout=WAIT)


def test_tell_quietly_says_whether_the_recipient_was_there() -> None:
    system = ActorSystem(name="tell-quietly")
    try:
        with system.activated():
            responder = Responder.start()
        assert tell_quietly(responder, Double(n=1)) is True
        responder.stop(timeout=WAIT)
        with pytest.raises(ActorDeadError):
            responder.tell(Double(n=1))
        assert tell_quietly(responder, Double(n=1)) is False
    finally:
        assert system.shutdown(timeout=WAIT)
    events = EventQueue()
    assert tell_quietly(events, Go(n=1)) is True
    events.close()
    assert tell_quietly(events, Go(n=1)) is False
    assert events.drain() == [Go(n=1)]
