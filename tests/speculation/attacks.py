"""What the attacks on the speculation controller share (``test_controller_*attacks.py``).

The controller holds the only record of each speculation (issue 22 point 1):
it starts and watches the speculation's worker, owns its overlay, applies it
on the blocking lane and tears it down through the record's phases. The
attacks put a real session in one phase -- running, stopping, settling,
applying, inserting -- by holding what it waits for (a model reply, a tool,
the tool pool, the apply at a fault hook, an actor's thread), then crash the
controller (its supervisor restarts it), close the session or the runtime,
or race the user's next key against it, and check what must hold after each
(:func:`nothing_left`, :func:`files_match_history`). Ordering comes from what
a test holds and releases, never from sleeps. The runtime (``rt``) and the
workspace (``ws``) fixtures are in this folder's ``conftest.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import fore.actors.speculation.accept as accept_module
from fore.actors.core import PooledActor
from fore.actors.llm import ScriptedModel
from fore.actors.overlay import apply_overlay
from fore.actors.speculation.controller import SpeculationController
from fore.actors.tools.base import FunctionTool, ToolArgs, ToolContext
from fore.messages.conversation import AssistantMessage
from fore.messages.gate import ApprovalMode
from fore.messages.runtime import GetChild
from fore.messages.session import GetRunState
from fore.messages.speculation import AcceptResult, SpeculationFinished
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    TWO_TURNS,
    WAIT,
    Replies,
    bump_script,
    call,
    overlay_dirs,
    settled,
    spec,
    speculated,
    suggestion,
    wait_until,
)
from tests.speculation.test_speculation_accept import bump

AUTO_EDIT = spec(approval_mode=ApprovalMode.AUTO_EDIT)


def nothing_left(rt: Runtime, session_id: str | None = None) -> None:
    """No overlay on disk or outstanding, no governor slot held, no speculation worker alive."""
    wait_until(lambda: overlay_dirs(rt) == [])
    wait_until(lambda: rt.overlays.outstanding(session_id) == [])
    wait_until(lambda: rt.speculation_governor.running == 0)
    wait_until(lambda: speculation_workers(rt) == [])


def speculation_workers(rt: Runtime) -> list[Any]:
    """The speculation workers still registered (alive) in the runtime."""
    found = []
    for ref in rt.system.registry.get_all():
        actor = ref._actor_weakref()
        config = getattr(actor, "config", None)
        if config is not None and getattr(config, "purpose", None) == "speculation":
            found.append(actor)
    return found


def controller_of(s: Any) -> SpeculationController:
    actor = s.controller._actor_weakref()
    assert isinstance(actor, SpeculationController)
    return actor


def crash_controller(s: Any) -> SpeculationController:
    """Crash the session's controller for real (a tell whose handler raises, on its control
    lane: ahead of whatever mail is queued) and wait for its supervisor's restart.

    Returns the new incarnation.
    """
    old = controller_of(s)

    def boom() -> None:
        raise RuntimeError("controller bug (test)")

    assert old.post_urgent(boom)
    wait_until(lambda: old.has_exited)
    wait_until(lambda: s.controller.state == "running" and s.controller._actor_weakref() is not old)
    return controller_of(s)


def completed(rt: Runtime, ws: Path, *extra: dict[str, Any]) -> Any:
    """A session whose speculation of "bump x to 2" has completed (its overlay holds app.py)."""
    s = rt.open_session(
        workspace=ws, model=ScriptedModel(bump_script(*extra)), speculation=AUTO_EDIT
    )
    s.submit("hi", timeout=WAIT)
    s.submit("what is x?", timeout=WAIT)
    assert settled(s) == "completed"
    assert len(overlay_dirs(rt)) == 1
    return s


class HeldApply:
    """The accept's apply held on the blocking lane once it has staged every file (or,
    with ``stage="start"``, before it begins: an overlay with no files stages none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stage: str = "staged") -> None:
        self.stage = stage
        self.reached = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()
        self.outcome: list[Any] = []
        monkeypatch.setattr(accept_module, "apply_overlay", self._apply)

    def _hold(self, stage: str, _count: int) -> None:
        if stage == self.stage:
            self.reached.set()
            self.release.wait(WAIT)

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        try:
            if self.stage == "start":
                self._hold("start", 0)
            answer = apply_overlay(*args, fault=self._hold, **kwargs)
            self.outcome.append(answer)
            return answer
        except BaseException as exc:
            self.outcome.append(exc)
            raise
        finally:
            self.done.set()


class Held:
    """An actor's thread held inside one of its handlers until released (mail waits)."""

    def __init__(self, actor: Any) -> None:
        assert isinstance(actor, PooledActor)
        self.entered = threading.Event()
        self.release = threading.Event()

        def hold() -> None:
            self.entered.set()
            self.release.wait(WAIT)

        assert actor.post(hold)
        assert self.entered.wait(WAIT)

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release.set()


def in_background(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``fn`` on a thread; its answer (or the exception it raised) lands in the list."""
    answers: list[Any] = []

    def run() -> None:
        try:
            answers.append(fn())
        except Exception as exc:
            answers.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answers


def history_has_the_speculation(s: Any) -> bool:
    return any(
        isinstance(item, AssistantMessage) and item.text == "Bumped x to 2." for item in s.history
    )


def files_match_history(s: Any, ws: Path) -> None:
    """Never files without history: app.py is bumped exactly when the transcript is in."""
    bumped = (ws / "app.py").read_text() == "x = 2\n"
    assert bumped == history_has_the_speculation(s), (
        f"app.py bumped: {bumped}, speculation in history: {history_has_the_speculation(s)}"
    )


def answered_as_accepted(answer: Any, s: Any, ws: Path) -> None:
    """The Tab's answer tells what landed, as it would without a crash or close: the bump
    accepted, app.py applied and its transcript in the session's history (the only
    difference: no pipelined next suggestion, which the stopped controller never got)."""
    assert isinstance(answer, AcceptResult), f"the Tab was answered {answer!r}"
    assert answer.outcome == "accepted", answer
    assert answer.suggestion == "bump x to 2"
    assert answer.files_applied == ("app.py",)
    assert answer.items_inserted == len(answer.items) == 4
    assert answer.items[-1] == AssistantMessage(text="Bumped x to 2.")
    assert (ws / "app.py").read_text() == "x = 2\n"
    history = [item.model_dump() for item in s.history]
    inserted = [item.model_dump() for item in answer.items]
    assert any(history[i : i + len(inserted)] == inserted for i in range(len(history)))
    files_match_history(s, ws)


class Blocking(ToolArgs):
    pattern: str = ""


class BlockingDeploy:
    """A ``deploy`` tool that blocks until released: the boundary call a Tab's continuation
    runs for real (a speculation may not deploy), held so a test can act meanwhile."""

    def __init__(self) -> None:
        self.deploying = threading.Event()
        """Set when the call runs (the continuation reached it)."""
        self.done = threading.Event()
        """Set by the test to let the call return."""
        self.tool = FunctionTool("deploy", "Deploy the app (blocks).", Blocking, self._deploy)

    def _deploy(self, args: Blocking, ctx: ToolContext) -> str:
        self.deploying.set()
        self.done.wait(WAIT)
        return "deployed"


def tool_session(rt: Runtime, ws: Path, tool: FunctionTool, *after: dict[str, Any]) -> Any:
    """A session (this tool only) whose speculation calls ``tool`` first thing.

    Its script: two main answers, the suggestion "use <tool>", the speculation's call,
    then ``after`` (main replies for later turns); both turns already submitted.
    """
    script = [
        *TWO_TURNS,
        suggestion(f"use {tool.name}"),
        speculated("", call(tool.name, pattern="x")),
        *after,
    ]
    s = rt.open_session(
        workspace=ws, model=ScriptedModel(script), speculation=spec(), builtin=False, tools=[tool]
    )
    s.submit("hi", timeout=WAIT)
    s.submit("what is x?", timeout=WAIT)
    return s


def grep_until_cancelled(
    running: threading.Event, at_end: Callable[[], object] = lambda: None
) -> FunctionTool:
    """A read tool ("grep" to the gate) that blocks until its call is cancelled, then
    runs ``at_end`` on its pool thread."""

    def grep(args: Blocking, ctx: ToolContext) -> str:
        running.set()
        ctx.cancel.wait(WAIT)
        at_end()
        return "cancelled"

    return FunctionTool("grep", "Search files (blocks until cancelled).", Blocking, grep)


def drain_until_finished(s: Any) -> list[Any]:
    """The session's events up to its first SpeculationFinished."""
    seen: list[Any] = []
    for event in s.events(timeout=WAIT):
        seen.append(event)
        if isinstance(event, SpeculationFinished):
            break
    return seen


def finished_events(events: list[Any]) -> list[SpeculationFinished]:
    return [e for e in events if isinstance(e, SpeculationFinished)]


def speculation_worker(s: Any) -> Any:
    """The running speculation's worker actor (found through the controller)."""
    child = f"speculation:{s.speculation.speculation_id}"
    ref = s.controller.ask(GetChild(child_id=child), timeout=WAIT)
    assert ref is not None
    return ref._actor_weakref()


def running_speculation(rt: Runtime, ws: Path, replies: Replies, **options: Any) -> Any:
    """A session whose speculation's model request is held by ``replies``."""
    s = rt.open_session(workspace=ws, model=replies.model, speculation=AUTO_EDIT, **options)
    s.submit("hi", timeout=WAIT)
    s.submit("what is x?", timeout=WAIT)
    wait_until(lambda: len(replies.seen("speculation")) == 1)
    assert s.speculation.state == "running"
    return s


def bump_replies(**extra: list[Any]) -> Replies:
    replies: dict[str, list[Any]] = {
        "main": ["Hello.", "x is 1. Shall I bump it?"],
        "suggestion": ['{"suggestion": "bump x to 2"}'],
        "speculation": [bump, bump],
    }
    replies.update(extra)
    return Replies(**replies)


def session_gone(rt: Runtime, session_id: str) -> bool:
    sessions = next(c for c in rt.tree().children if c.id == "sessions")
    return not any(c.id == f"session:{session_id}" for c in sessions.children)


def queued_kinds(actor: Any) -> list[str]:
    """The kinds of message waiting in ``actor``'s mailbox (a read-only look)."""
    inbox = actor.actor_inbox
    with inbox._lock:
        waiting = [*(inbox._control or ()), *inbox._normal]
    return [type(envelope.message).__name__ for envelope in waiting]


def queued_at(actor: Any, kind: str, count: int = 1) -> None:
    """Wait until ``count`` messages of ``kind`` wait in ``actor``'s mailbox (it is held).

    By kind, not by the mailbox's length: other mail comes meanwhile (a suggestion's
    answer, a run's report), and a count of everything would be met too early.
    """
    wait_until(lambda: queued_kinds(actor).count(kind) >= count)


def run_over(worker: Any) -> bool:
    """Whether the speculation's worker has answered its run (it is idle again)."""
    state = worker.actor_ref.ask(GetRunState(), timeout=WAIT)
    return bool(state.status == "idle")
