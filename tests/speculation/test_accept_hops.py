"""How many hand-offs an accept (Tab) takes, from ``AcceptSuggestion`` to its answer.

Each hop is a mailbox put (``Mailbox.put``/``offer``/``put_first``), a job
for a blocking lane (``BlockingLane.submit``) or, at the end, the answer
handed back to the session's thread. Every hop waits for a dispatcher or lane
thread, so the count is what the accept latency is made of once the machine
is loaded (docs/architecture.md §4: 10 before issue 22; 6 since the controller
applies the overlay itself on the blocking lane: Session → controller → lane
→ controller → worker → controller → Session). This test holds the line: it
fails when an accept takes more hops than ``MAX_HOPS`` -- lower the bound
when a change saves some.

Only the critical path counts. While the accept is answered, the
speculation's teardown runs beside it (its overlay's removal, the next
speculation's start),
and those messages come in any order. So each recorded hop remembers the
hop whose handling caused it (the envelope its thread was processing, or the
lane job it was running), and the path is the chain of causes from the
answer back to the ``AcceptSuggestion``: the same on every run.

Run with ``-s`` to see the path and everything else the window held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fore.actors.core.blocking import BlockingLane
from fore.actors.core.future import PooledFuture
from fore.actors.core.mailbox import Mailbox
from fore.actors.core.pooled import PooledActor
from fore.actors.llm import ScriptedModel
from fore.messages.gate import ApprovalMode
from fore.messages.speculation import AcceptSuggestion
from fore.supervision import Runtime
from tests.speculation.test_speculation import (
    WAIT,
    bump_script,
    next_suggestion,
    settled,
    spec,
)

MAX_HOPS = 6
"""Hops on an accept's critical path today (10 before issue 22); lower it when work saves some."""

SESSION_THREAD = "session thread"


@dataclass(frozen=True)
class Hop:
    number: int
    parent: int | None
    """The hop whose handling made this one (None: not made by a recorded hop)."""
    target: str
    message: str

    def __str__(self) -> str:
        return f"({self.target}, {self.message})"


def _describe(message: Any) -> str:
    """A message's type; for an actor's own call, what it calls (an ask's continuation)."""
    fn = getattr(message, "fn", None)
    args: tuple[Any, ...] = getattr(message, "args", ())
    if fn is None or not callable(fn):
        return type(message).__name__
    name = getattr(fn, "__name__", type(fn).__name__)
    if name == "_fore_ask_done" and len(args) > 1:
        then = args[1]
        inner = getattr(then, "func", then)  # ask_typed wraps it in a partial
        return f"answer -> {getattr(inner, '__qualname__', repr(inner))}"
    inner = getattr(fn, "func", fn)  # a partial: what it calls
    return f"{type(message).__name__}({getattr(inner, '__qualname__', name)})"


@dataclass
class HopRecorder:
    """Records hops from the ``AcceptSuggestion`` until its answer is set."""

    hops: list[Hop] = field(default_factory=list)
    answer_parent: int | None = None
    answered: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _by_envelope: dict[int, int] = field(default_factory=dict)
    _keep: list[Any] = field(default_factory=list)
    """The recorded envelopes, alive, so that their ``id`` is not reused."""
    _future: Any = None
    _local: threading.local = field(default_factory=threading.local)

    @property
    def recording(self) -> bool:
        return self._future is not None and not self.answered.is_set()

    def current(self) -> int | None:
        """The hop whose handling this thread is in, if recorded."""
        number: int | None = getattr(self._local, "hop", None)
        return number

    def set_current(self, number: int | None) -> None:
        self._local.hop = number

    def hop_of(self, envelope: Any) -> int | None:
        with self._lock:
            return self._by_envelope.get(id(envelope))

    def record(self, target: str, message: Any, envelope: Any = None) -> int | None:
        with self._lock:
            if isinstance(message, AcceptSuggestion) and self._future is None:
                self._future = envelope.reply_to
            elif not self.recording:
                return None
            hop = Hop(len(self.hops), self.current(), target, _describe(message))
            self.hops.append(hop)
            if envelope is not None:
                self._by_envelope[id(envelope)] = hop.number
                self._keep.append(envelope)
            return hop.number

    def answer_set(self, future: Any) -> None:
        with self._lock:
            if future is self._future and not self.answered.is_set():
                self.answer_parent = self.current()
                self.answered.set()

    def critical_path(self) -> list[Hop]:
        """From the AcceptSuggestion to the answer, following each hop's cause."""
        assert self.answered.is_set(), "the accept was never answered"
        path: list[Hop] = [Hop(len(self.hops), self.answer_parent, SESSION_THREAD, "AcceptResult")]
        number = self.answer_parent
        while number is not None:
            hop = self.hops[number]
            path.append(hop)
            number = hop.parent
        path.reverse()
        assert path[0].message == "AcceptSuggestion", (
            "the chain of causes does not lead back to the AcceptSuggestion "
            f"(a hop this test does not see?): {[str(hop) for hop in path]}"
        )
        return path


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> HopRecorder:
    """Instruments the mailbox, the blocking lane, message processing and answers."""
    rec = HopRecorder()

    def target_name(mailbox: Mailbox) -> str:
        owner = mailbox._owner
        return type(owner).__name__ if owner is not None else mailbox._owner_name

    def wrap_put(original: Callable[..., Any]) -> Callable[..., Any]:
        def put(self: Mailbox, envelope: Any, /) -> Any:
            rec.record(target_name(self), envelope.message, envelope)
            return original(self, envelope)

        return put

    for name in ("put", "offer", "put_first"):
        monkeypatch.setattr(Mailbox, name, wrap_put(getattr(Mailbox, name)))

    original_process = PooledActor._fore_process

    def process(self: PooledActor, envelope: Any) -> None:
        outer = rec.current()
        rec.set_current(rec.hop_of(envelope))
        try:
            original_process(self, envelope)  # the reply, and its callbacks, included
        finally:
            rec.set_current(outer)

    monkeypatch.setattr(PooledActor, "_fore_process", process)

    original_submit = BlockingLane.submit

    def submit(self: BlockingLane, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        number = rec.record(f"BlockingLane({self.name})", _Job(fn))

        def job(*a: Any, **k: Any) -> Any:
            # Left set after the job: the future's callbacks (which post the
            # result back to the actor) run on this thread after it returns.
            rec.set_current(number)
            return fn(*a, **k)

        return original_submit(self, job, *args, **kwargs)

    monkeypatch.setattr(BlockingLane, "submit", submit)

    for name in ("set", "try_set", "set_exception", "try_set_exception"):
        original = getattr(PooledFuture, name)

        def answer(self: Any, *args: Any, _original: Any = original) -> Any:
            outcome = _original(self, *args)
            rec.answer_set(self)
            return outcome

        monkeypatch.setattr(PooledFuture, name, answer)
    return rec


@dataclass(frozen=True)
class _Job:
    """A blocking-lane job, described like a ``_Call``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


def test_an_accept_takes_at_most_max_hops(
    runtime: Runtime, tmp_path: Path, recorder: HopRecorder
) -> None:
    (tmp_path / "app.py").write_text("x = 1\n")
    config = spec(approval_mode=ApprovalMode.AUTO_EDIT)
    with runtime.open_session(
        workspace=tmp_path, model=ScriptedModel(bump_script()), speculation=config
    ) as s:
        s.submit("hi", timeout=WAIT)
        s.submit("what is x?", timeout=WAIT)
        assert settled(s) == "completed"
        next_suggestion(s, "run the tests")  # quiet: nothing but the accept from here
        result = s.accept(timeout=WAIT)
        assert result.outcome == "accepted"
        assert (tmp_path / "app.py").read_text() == "x = 2\n"
        assert recorder.answered.wait(WAIT)
    path = recorder.critical_path()
    on_path = {hop.number for hop in path}
    print(f"\naccept critical path: {len(path)} hops")
    for number, hop in enumerate(path, start=1):
        print(f"  {number:2d} {hop}")
    print(f"window: {len(recorder.hops)} hops recorded; beside the path:")
    for hop in recorder.hops:
        if hop.number not in on_path:
            print(f"     {hop}")
    assert len(path) <= MAX_HOPS, f"an accept takes {len(path)} hops, more than {MAX_HOPS}"
