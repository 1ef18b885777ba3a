"""Logging: structlog is configured by any actor system, events carry actor and session.

A bare :class:`ActorSystem` (scripts, pykka-style use, the process default)
must log like a Runtime does -- configured renderer, stderr, JSON when asked
-- so the fresh-process behaviour is checked in a subprocess, where no earlier
test has configured anything. In-process tests use ``capture_logs`` or a
stream handed to ``configure_logging(force=True)``.
"""

from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from structlog.testing import capture_logs

from fore.actors.core import ActorExit, ActorSystem, PooledActor, UnhandledMessageError, handles
from fore.actors.core.logs import configure_logging
from fore.messages.base import Message

WAIT = 5.0
ROOT = Path(__file__).resolve().parent.parent


class Ping(Message):
    pass


class Stray(Message):
    """No actor here handles this."""


class Fail(Message):
    pass


class Quiet(PooledActor):
    strict_messages = True

    def __init__(self, session: str | None = None) -> None:
        super().__init__()
        self.session_id = session

    @handles(Ping)
    def _ping(self, _m: Ping) -> str:
        return "pong"

    @handles(Fail)
    def _fail(self, _m: Fail) -> NoReturn:
        raise RuntimeError("logged failure")


@pytest.fixture(autouse=True)
def default_logging() -> None:
    """Start from the default configuration, whatever an earlier test (an
    in-process ``fore`` command, say) forced: these tests check what the
    defaults log."""
    configure_logging(force=True)


@pytest.fixture
def system() -> Iterator[ActorSystem]:
    system = ActorSystem(name="logs", dispatcher_threads=2)
    try:
        with system.activated():
            yield system
    finally:
        system.shutdown(timeout=5.0)


def watch(ref: Any) -> queue.SimpleQueue[ActorExit]:
    exits: queue.SimpleQueue[ActorExit] = queue.SimpleQueue()
    actor = ref._actor_weakref()
    assert actor is not None and actor.add_exit_watcher(exits.put)
    return exits


# -- a bare ActorSystem in a fresh process ------------------------------------------------

_SCRIPT = """
import sys
from fore.actors.core import ActorSystem, PooledActor
from fore.actors.core.logs import configure_logging
from fore.messages.base import Message

class Stray(Message):
    pass

class Quiet(PooledActor):
    session_id = "sess-42"
    strict_messages = True

system = ActorSystem(name="bare")
if sys.argv[1] == "explicit":
    # An explicit choice made after a bare system configured the defaults wins.
    configure_logging(json=True)
with system.activated():
    ref = Quiet.start()
try:
    ref.ask(Stray(), timeout=10)
except Exception as exc:
    print(type(exc).__name__)
print(ref.actor_urn)
system.shutdown()
"""


@pytest.mark.parametrize("mode", ["env", "explicit"])
def test_a_bare_actor_system_logs_json_lines_with_actor_and_session(mode: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORE_LOG_")}
    if mode == "env":
        env["FORE_LOG_JSON"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    answer, urn = done.stdout.split()  # nothing but the script's own prints on stdout
    assert answer == "UnhandledMessageError"
    events = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]
    (event,) = [e for e in events if e["event"] == "unhandled_message"]
    assert event["level"] == "warning"
    assert event["actor"] == "Quiet"
    assert event["actor_id"] == urn[-12:]
    assert event["session"] == "sess-42"
    assert event["message_type"] == "Stray"
    assert "timestamp" in event


# -- in-process -----------------------------------------------------------------------------


def test_actor_log_events_carry_the_actor_id_and_the_session_id(system: ActorSystem) -> None:
    in_session = Quiet.start("sess-7")
    loose = Quiet.start()
    exits = watch(in_session)

    with capture_logs() as logs:
        with pytest.raises(UnhandledMessageError):
            loose.ask(Stray(), timeout=WAIT)
        in_session.tell(Fail())
        exits.get(timeout=WAIT)

    (unhandled,) = [e for e in logs if e["event"] == "unhandled_message"]
    assert unhandled["actor_id"] == loose.actor_urn[-12:]
    assert unhandled["session"] is None
    (failed,) = [e for e in logs if e["event"] == "actor_failed"]
    assert failed["log_level"] == "error"
    assert failed["actor"] == "Quiet"
    assert failed["actor_id"] == in_session.actor_urn[-12:]
    assert failed["session"] == "sess-7"
    assert "logged failure" in failed["error"]


def test_an_unknown_message_is_logged_and_answered_with_an_error(system: ActorSystem) -> None:
    ref = Quiet.start("sess-u")

    with capture_logs() as logs:
        with pytest.raises(UnhandledMessageError, match="Quiet has no handler for Stray"):
            ref.ask(Stray(), timeout=WAIT)
        ref.tell(Stray())  # nobody waits: logged only, and the actor carries on
        assert ref.ask(Ping(), timeout=WAIT) == "pong"

    unhandled = [e for e in logs if e["event"] == "unhandled_message"]
    assert len(unhandled) == 2
    for entry in unhandled:
        assert entry["log_level"] == "warning"
        assert entry["message_type"] == "Stray"
        assert entry["actor_id"] == ref.actor_urn[-12:]
        assert entry["session"] == "sess-u"
    assert ref.is_alive()


def test_json_mode_writes_one_json_object_per_line(system: ActorSystem) -> None:
    stream = io.StringIO()
    configure_logging(json=True, level="info", stream=stream, force=True)
    try:
        ref = Quiet.start("sess-j")
        exits = watch(ref)
        with pytest.raises(UnhandledMessageError):
            ref.ask(Stray(), timeout=WAIT)
        ref.tell(Fail())
        exits.get(timeout=WAIT)
    finally:
        configure_logging(force=True)  # back to the defaults for the rest of the run

    lines = [line for line in stream.getvalue().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    by_name = {e["event"]: e for e in events}
    assert {"unhandled_message", "actor_failed"} <= set(by_name)
    failed = by_name["actor_failed"]
    assert failed["level"] == "error"
    assert failed["session"] == "sess-j"
    assert failed["actor_id"] == ref.actor_urn[-12:]
    assert "RuntimeError: logged failure" in failed["exception"]  # traceback as a string
