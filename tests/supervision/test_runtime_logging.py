"""Logging: Fore's events go through stdlib ``logging`` under ``fore.*``; the host keeps its setup.

Fore is embedded in other people's processes, so these tests pin the good-guest
contract: events are stdlib records a host's handlers and ``caplog`` see, with
the actor and session attached; ``Runtime()`` configures nothing (not structlog,
not ``logging``, not the ``pykka`` logger, not the garbage collector) unless
asked; ``configure_logging`` -- what the CLI asks for -- renders console or JSON
lines, checked in a fresh subprocess.
"""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import queue
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import structlog

from fore.actors.core import (
    ActorExit,
    ActorSystem,
    ForeActor,
    UnhandledMessageError,
    handles,
    tuning,
)
from fore.actors.core.logs import (
    capture_logs,
    configure_logging,
    get_logger,
    unconfigure_logging,
)
from fore.messages.base import Message
from fore.supervision.runtime import Runtime

WAIT = 5.0
ROOT = Path(__file__).resolve().parents[2]


class Ping(Message):
    pass


class Stray(Message):
    """No actor here handles this."""


class Fail(Message):
    pass


class Quiet(ForeActor):
    def __init__(self, session: str | None = None) -> None:
        super().__init__()
        self.session_id = session

    @handles(Ping)
    def _ping(self, _m: Ping) -> str:
        return "pong"

    @handles(Fail)
    def _fail(self, _m: Fail) -> NoReturn:
        raise RuntimeError("logged failure")


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


def fore_records(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "fore_event", None) == event]


# -- events are stdlib records ---------------------------------------------------------------


def test_caplog_sees_fore_events_with_the_actor_and_the_session(
    system: ActorSystem, caplog: pytest.LogCaptureFixture
) -> None:
    in_session = Quiet.start("sess-7")
    loose = Quiet.start()
    exits = watch(in_session)

    with caplog.at_level(logging.INFO, logger="fore"):
        with pytest.raises(UnhandledMessageError):
            loose.ask(Stray(), timeout=WAIT)
        in_session.tell(Fail())
        exits.get(timeout=WAIT)

    (unhandled,) = fore_records(caplog, "unhandled_message")
    assert unhandled.name.startswith("fore.")
    assert unhandled.levelno == logging.WARNING
    assert unhandled.fore["actor_id"] == loose.actor_urn[-12:]  # type: ignore[attr-defined]
    assert unhandled.fore["session"] is None  # type: ignore[attr-defined]
    assert unhandled.fore["message_type"] == "Stray"  # type: ignore[attr-defined]
    # A plain handler prints the event and its fields without knowing structlog.
    assert unhandled.getMessage().startswith("unhandled_message ")
    assert "message_type=Stray" in unhandled.getMessage()
    (failed,) = fore_records(caplog, "actor_failed")
    assert failed.levelno == logging.ERROR
    assert failed.fore["actor"] == "Quiet"  # type: ignore[attr-defined]
    assert failed.fore["session"] == "sess-7"  # type: ignore[attr-defined]
    assert failed.exc_info is not None and isinstance(failed.exc_info[1], RuntimeError)


def test_a_disabled_level_builds_no_event(caplog: pytest.LogCaptureFixture) -> None:
    class Loud:
        def __repr__(self) -> str:
            raise AssertionError("rendered although the level is off")

    log = get_logger("fore.tests.quiet")
    with caplog.at_level(logging.WARNING, logger="fore"):
        log.debug("noise", value=Loud())
        log.info("noise", value=Loud())
    assert fore_records(caplog, "noise") == []


def test_every_logger_is_under_fore() -> None:
    assert get_logger("fore.x")._logger.name == "fore.x"
    assert get_logger("elsewhere")._logger.name == "fore.elsewhere"


def test_a_message_with_percent_signs_is_not_formatted(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="fore"):
        get_logger("fore.tests").info("odd %s %d", text="100% sure")
    (record,) = fore_records(caplog, "odd %s %d")
    assert record.getMessage() == 'odd %s %d text="100% sure"'


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


# -- a good guest: Runtime() configures nothing --------------------------------------------


@pytest.fixture
def host_structlog() -> Iterator[list[dict[str, Any]]]:
    """A host application that configured structlog with its own processor."""
    seen: list[dict[str, Any]] = []

    def keep(_logger: Any, _method: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        seen.append(dict(event_dict))
        raise structlog.DropEvent

    previous = structlog.get_config()
    structlog.configure(processors=[keep], cache_logger_on_first_use=False)
    try:
        yield seen
    finally:
        structlog.configure(**previous)


def test_a_runtime_leaves_the_hosts_structlog_logging_pykka_and_gc_alone(
    host_structlog: list[dict[str, Any]], tmp_path: Path
) -> None:
    config_before = structlog.get_config()
    root = logging.getLogger()
    handlers_before, level_before = list(root.handlers), root.level
    pykka_level = logging.getLogger("pykka").level
    thresholds, switch = gc.get_threshold(), sys.getswitchinterval()
    frozen = gc.get_freeze_count()

    with Runtime(blob_dir=tmp_path / "blobs", overlay_root=tmp_path / "ov") as rt:
        session = rt.open_session(workspace=tmp_path, model=_NoModel())
        structlog.get_logger("host").info("host_event", during=True)
        assert structlog.get_config() == config_before
        assert gc.get_threshold() == thresholds
        assert sys.getswitchinterval() == switch
        session.close()
    structlog.get_logger("host").info("host_event", during=False)

    assert [e["event"] for e in host_structlog] == ["host_event", "host_event"]
    assert structlog.get_config() == config_before
    assert (list(root.handlers), root.level) == (handlers_before, level_before)
    assert logging.getLogger("pykka").level == pykka_level
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen


def test_process_tuning_is_opt_in_and_undone_by_close(tmp_path: Path) -> None:
    thresholds, switch = gc.get_threshold(), sys.getswitchinterval()
    frozen = gc.get_freeze_count()

    with Runtime(blob_dir=tmp_path / "b", overlay_root=tmp_path / "o", tune_process=True):
        assert gc.get_threshold() == tuning.THRESHOLDS
        assert sys.getswitchinterval() == pytest.approx(tuning.SWITCH_INTERVAL_S)

    assert gc.get_threshold() == thresholds
    assert sys.getswitchinterval() == pytest.approx(switch)
    assert gc.get_freeze_count() == frozen


class _NoModel:
    """A model that is never asked (no turn runs in these tests)."""

    name = "none"

    def stream(self, *_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError("not asked")


# -- configure_logging: what the CLI asks for ----------------------------------------------

_SCRIPT = """
import sys
from fore.actors.core import ActorSystem, ForeActor
from fore.actors.core.logs import configure_logging
from fore.messages.base import Message

class Stray(Message):
    pass

class Quiet(ForeActor):
    session_id = "sess-42"

system = ActorSystem(name="bare")
if sys.argv[1] == "explicit":
    configure_logging(json=True)
else:
    configure_logging()  # FORE_LOG_JSON=1 in the environment
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
def test_configure_logging_writes_json_lines_with_actor_and_session(mode: str) -> None:
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
    assert event["logger"] == "fore.actor"
    assert event["actor"] == "Quiet"
    assert event["actor_id"] == urn[-12:]
    assert event["session"] == "sess-42"
    assert event["message_type"] == "Stray"
    assert "timestamp" in event


def test_without_configuration_a_bare_process_prints_nothing() -> None:
    script = _SCRIPT.replace('if sys.argv[1] == "explicit":', "if False:").replace(
        "    configure_logging()  # FORE_LOG_JSON=1 in the environment", "    pass"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # The library adds only a NullHandler: no stderr output of its own.
    assert "unhandled_message" not in done.stderr


def test_json_mode_writes_one_json_object_per_line(system: ActorSystem) -> None:
    stream = io.StringIO()
    configure_logging(json=True, level="info", stream=stream)
    try:
        ref = Quiet.start("sess-j")
        exits = watch(ref)
        with pytest.raises(UnhandledMessageError):
            ref.ask(Stray(), timeout=WAIT)
        ref.tell(Fail())
        exits.get(timeout=WAIT)
    finally:
        unconfigure_logging()

    lines = [line for line in stream.getvalue().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    by_name = {e["event"]: e for e in events}
    assert {"unhandled_message", "actor_failed"} <= set(by_name)
    failed = by_name["actor_failed"]
    assert failed["level"] == "error"
    assert failed["session"] == "sess-j"
    assert failed["actor_id"] == ref.actor_urn[-12:]
    assert "RuntimeError: logged failure" in failed["exception"]  # traceback as a string


def test_console_mode_writes_readable_lines_and_unconfigure_gives_them_back(
    system: ActorSystem, caplog: pytest.LogCaptureFixture
) -> None:
    stream = io.StringIO()
    configure_logging(level="warning", stream=stream)
    try:
        ref = Quiet.start("sess-c")
        ref.tell(Stray())
        assert ref.ask(Ping(), timeout=WAIT) == "pong"
    finally:
        unconfigure_logging()
    (line,) = [x for x in stream.getvalue().splitlines() if "unhandled_message" in x]
    assert "[warning ]" in line and "session=sess-c" in line
    assert logging.getLogger("fore").propagate  # the host's handlers see events again
