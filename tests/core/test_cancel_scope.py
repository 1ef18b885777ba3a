"""CancelScope: one-way cancels, callbacks once and outside the lock, leases, settlement.

The scope is the record that replaces the early-cancel tables, so its
promises are checked three ways: unit tests for each rule, a hypothesis state
machine that compares every sequence of operations with a small model, and
real threads racing cancel / on_cancel / child / lease / release, where each
callback must still run exactly once and nothing may deadlock.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)
from pykka import ActorDeadError

from fore.actors.core import ActorSystem
from fore.actors.core.cancel import KINDS, Cancelled, CancelScope, Lease, LeaseKind
from fore.actors.core.future import PooledFuture
from fore.actors.core.handlers import handles
from fore.actors.core.pooled import ForeActor
from fore.errors import ForeError
from fore.messages.address import Ask
from fore.messages.base import Message

WAIT = 10.0
"""Bound of every wait for another thread; never reached when things work."""


class Calls:
    """A thread-safe recorder of callback invocations."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.args: list[Any] = []
        self.threads: list[int] = []

    def __call__(self, arg: Any) -> None:
        with self._lock:
            self.args.append(arg)
            self.threads.append(threading.get_ident())

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.args)


def in_thread(fn: Callable[[], object]) -> None:
    """Run ``fn`` on another thread; fail (instead of hanging) if it deadlocks."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive(), "deadlocked: a callback ran under the scope's lock"
    if errors:
        raise errors[0]


# -- cancel and on_cancel ------------------------------------------------------------------


def test_cancel_is_one_way_and_records_reason_and_time() -> None:
    scope = CancelScope()
    assert not scope.cancel_called and not scope.cancelled
    assert scope.reason is None and scope.cancelled_at is None
    assert scope.cancel("keystroke") is True
    assert scope.cancel_called and scope.cancelled
    assert scope.reason == "keystroke"
    assert scope.cancelled_at is not None
    first = scope.cancelled_at
    assert scope.cancel("again") is False
    assert scope.reason == "keystroke" and scope.cancelled_at == first


def test_callbacks_run_once_on_the_cancelling_thread() -> None:
    scope = CancelScope()
    calls = Calls()
    scope.on_cancel(calls)
    scope.on_cancel(calls)
    in_thread(lambda: scope.cancel("stop"))
    scope.cancel("stop again")
    assert calls.args == ["stop", "stop"]
    assert threading.get_ident() not in calls.threads


def test_a_scope_cancelled_before_on_cancel_fires_at_once_here() -> None:
    scope = CancelScope()
    scope.cancel("early")
    calls = Calls()
    registration = scope.on_cancel(calls)
    assert calls.args == ["early"]
    assert calls.threads == [threading.get_ident()]
    assert registration.remove() is False


def test_a_removed_callback_never_runs() -> None:
    scope = CancelScope()
    kept, removed = Calls(), Calls()
    scope.on_cancel(kept)
    registration = scope.on_cancel(removed)
    assert registration.remove() is True
    assert registration.remove() is False
    scope.cancel("x")
    assert kept.count == 1 and removed.count == 0


def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scope = CancelScope()
    calls = Calls()

    def boom(_reason: str) -> None:
        raise RuntimeError("callback bug")

    scope.on_cancel(boom)
    scope.on_cancel(calls)
    with caplog.at_level(logging.ERROR, logger="fore"):
        assert scope.cancel("x") is True
    assert calls.args == ["x"]
    assert any(r.exc_info and "callback bug" in str(r.exc_info[1]) for r in caplog.records)


def test_raise_if_cancelled_raises_a_fore_error_with_the_reason() -> None:
    scope = CancelScope()
    scope.raise_if_cancelled()
    scope.cancel("timeout")
    with pytest.raises(Cancelled, match="timeout") as info:
        scope.raise_if_cancelled()
    assert isinstance(info.value, ForeError)


def test_wait_returns_false_at_its_timeout_and_true_once_cancelled() -> None:
    scope = CancelScope()
    assert scope.wait(0.01) is False
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(scope.wait(WAIT)))
    waiter.start()
    scope.cancel("go")
    waiter.join(WAIT)
    assert woke == [True]
    assert scope.wait(0) is True


# -- callbacks never run under the lock ------------------------------------------------------


def test_a_callback_that_reenters_the_scope_does_not_deadlock() -> None:
    scope = CancelScope()
    seen: list[str] = []

    def reenter(reason: str) -> None:
        late = Calls()
        scope.on_cancel(late)  # already cancelled: runs at once, here
        assert late.args == [reason]
        assert scope.cancel("twice") is False
        assert scope.child().cancel_called
        lease = scope.lease("llm")
        assert scope.leases() == {"llm": 1}
        lease.release()
        scope.on_settled(lambda _times: seen.append("settled"))
        assert repr(scope)
        seen.append(reason)

    scope.on_cancel(reenter)
    in_thread(lambda: scope.cancel("first"))
    assert seen == ["settled", "first"]


def test_a_settled_callback_that_reenters_the_scope_does_not_deadlock() -> None:
    scope = CancelScope()
    lease = scope.lease("tools")
    seen: list[Mapping[str, float]] = []

    def reenter(times: Mapping[str, float]) -> None:
        scope.on_settled(seen.append)  # already settled: runs at once
        scope.lease("blob").release()
        scope.close()
        seen.append(times)

    scope.on_settled(reenter)
    scope.cancel("x")
    in_thread(lease.release)
    assert len(seen) == 2 and seen[0] == seen[1]


# -- children -----------------------------------------------------------------------------


def test_a_child_is_cancelled_with_its_parent_not_the_other_way() -> None:
    parent = CancelScope()
    child, other = parent.child(), parent.child()
    calls = Calls()
    child.on_cancel(calls)
    assert child.cancel("call timeout") is True
    assert not parent.cancel_called and not other.cancel_called
    parent.cancel("run aborted")
    assert other.cancel_called and other.reason == "run aborted"
    assert child.reason == "call timeout"
    assert calls.args == ["call timeout"]


def test_grandchildren_are_cancelled_with_the_root() -> None:
    root = CancelScope()
    leaf = root.child().child().child()
    calls = Calls()
    leaf.on_cancel(calls)
    root.cancel("close")
    assert calls.args == ["close"]


def test_a_child_of_a_cancelled_scope_starts_cancelled() -> None:
    parent = CancelScope()
    parent.cancel("gone")
    child = parent.child()
    assert child.cancel_called and child.reason == "gone"
    with pytest.raises(Cancelled):
        child.raise_if_cancelled()


def test_a_child_sees_its_parents_cancel_before_the_parent_tells_it() -> None:
    # The parent's callbacks run in order; the child's link comes after this
    # one, so the child has not been told yet -- it must still say cancelled.
    parent = CancelScope()
    seen: list[tuple[bool, str | None]] = []
    holder: list[CancelScope] = []
    parent.on_cancel(lambda _r: seen.append((holder[0].cancel_called, holder[0].reason)))
    holder.append(parent.child())
    parent.cancel("abort")
    assert seen == [(True, "abort")]


def test_a_parent_holds_its_children_weakly() -> None:
    parent = CancelScope()
    gc.disable()
    try:
        child = parent.child()
        gone = weakref.ref(child)
        del child
        assert gone() is None
    finally:
        gc.enable()
    parent.cancel("x")  # a dead child's link is harmless


# -- leases and settlement ------------------------------------------------------------------


def test_settled_after_the_last_lease_with_a_time_per_kind() -> None:
    scope = CancelScope()
    llm, tools = scope.lease("llm"), scope.lease("tools")
    tools2 = scope.lease("tools")
    got: list[Mapping[str, float]] = []
    scope.on_settled(got.append)
    scope.cancel("keystroke")
    llm.release()
    tools.release()
    assert got == [] and not scope.settled
    tools2.release()
    assert len(got) == 1 and scope.settled
    times = got[0]
    assert set(times) == set(KINDS)
    cancelled_at = scope.cancelled_at
    assert cancelled_at is not None
    assert cancelled_at <= times["llm"] <= times["tools"]
    # "blob" never took a lease: done at the moment of settlement, the latest time.
    assert times["blob"] >= times["tools"]
    assert scope.leases() == {}


def test_a_scope_without_leases_settles_at_the_cancel() -> None:
    scope = CancelScope()
    got: list[Mapping[str, float]] = []
    scope.on_settled(got.append)
    scope.cancel("x")
    assert len(got) == 1
    late: list[Mapping[str, float]] = []
    scope.on_settled(late.append)
    assert late == got


def test_a_lease_released_before_the_cancel_counts_as_done_at_the_cancel() -> None:
    scope = CancelScope()
    with scope.lease("llm"):
        pass
    keep = scope.lease("tools")
    scope.cancel("x")
    got: list[Mapping[str, float]] = []
    scope.on_settled(got.append)
    keep.release()
    assert got and got[0]["llm"] == scope.cancelled_at


def test_a_childs_lease_holds_back_its_parents_settlement() -> None:
    parent = CancelScope()
    call = parent.child()
    lease = call.lease("tools")
    assert parent.leases() == {"tools": 1} and call.leases() == {"tools": 1}
    parent_settled, child_settled = Calls(), Calls()
    parent.on_settled(parent_settled)
    call.on_settled(child_settled)
    parent.cancel("abort")
    assert parent_settled.count == 0 and child_settled.count == 0
    lease.release()
    assert parent_settled.count == 1 and child_settled.count == 1
    assert parent.leases() == {}


def test_a_lease_releases_once_and_rejects_unknown_kinds() -> None:
    scope = CancelScope()
    lease = scope.lease("blob")
    assert isinstance(lease, Lease) and lease.kind == "blob" and not lease.released
    assert lease.release() is True
    assert lease.release() is False and lease.released
    assert scope.leases() == {}
    with pytest.raises(ValueError, match="unknown lease kind"):
        scope.lease("disk")  # type: ignore[arg-type]


def test_close_settles_a_completed_scope_after_its_last_lease() -> None:
    scope = CancelScope()
    lease = scope.lease("blob")
    got = Calls()
    scope.on_settled(got)
    scope.close()
    assert got.count == 0 and scope.closed and not scope.cancel_called
    lease.release()
    assert got.count == 1


# -- lifetime: close drops callbacks, nothing is left in a reference cycle -----------------------


def test_close_drops_the_cancel_callbacks() -> None:
    scope = CancelScope()
    calls = Calls()
    registration = scope.on_cancel(calls)
    scope.close()
    assert registration.remove() is False
    assert scope.on_cancel(calls).remove() is False  # not kept: it could never run
    assert scope.cancel("late") is True  # recorded, but nothing left to run
    assert calls.count == 0 and scope.cancel_called


@dataclass
class _Owner:
    """Stands for an actor that holds its run's scope and registered a bound method."""

    scope: CancelScope = field(default_factory=CancelScope)
    reasons: list[str] = field(default_factory=list)

    def on_cancel(self, reason: str) -> None:
        self.reasons.append(reason)

    def on_settled(self, _times: Mapping[str, float]) -> None:
        self.reasons.append("settled")


@pytest.fixture
def no_cyclic_collection() -> Iterator[None]:
    """The cyclic collector off, as tests/core/test_reference_cycles.py runs (it hides cycles)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@pytest.mark.usefixtures("no_cyclic_collection")
@pytest.mark.parametrize("end", ["close", "cancel"])
def test_an_ended_scope_leaves_no_reference_cycle(end: str) -> None:
    owner = _Owner()
    owner.scope.on_cancel(owner.on_cancel)
    owner.scope.on_settled(owner.on_settled)
    child = owner.scope.child()
    child.on_cancel(owner.on_cancel)
    lease = child.lease("tools")
    lease.release()
    child.close()
    if end == "close":
        owner.scope.close()
    else:
        owner.scope.cancel("x")
    gone, child_gone = weakref.ref(owner), weakref.ref(child)
    del owner, child, lease
    assert gone() is None, f"a scope ended by {end} keeps its owner in a reference cycle"
    assert child_gone() is None


@pytest.mark.usefixtures("no_cyclic_collection")
def test_an_unfinished_child_leaves_no_cycle_once_its_parent_ends() -> None:
    owner = _Owner()
    child = owner.scope.child()  # never closed nor cancelled by its user
    child.on_cancel(owner.on_cancel)
    owner.scope.close()
    gone = weakref.ref(owner)
    del owner, child
    assert gone() is None


# -- a model of the scope, checked by a hypothesis state machine ----------------------------------


@dataclass
class _Model:
    """What a scope should have done, computed the simple way."""

    parent: _Model | None
    cancelled: bool = False  # cancelled itself (directly or told by its parent)
    closed: bool = False
    settled: bool = False
    held: Counter[str] = field(default_factory=Counter)
    linked: bool = False  # its parent will tell it about a cancel
    children: list[_Model] = field(default_factory=list)

    def cancel_called(self) -> bool:
        node: _Model | None = self
        while node is not None:
            if node.cancelled:
                return True
            node = node.parent
        return False


@dataclass
class _Node:
    scope: CancelScope
    model: _Model
    cancels: dict[int, tuple[Calls, str]] = field(default_factory=dict)  # waiting|ran|dropped
    settles: list[Calls] = field(default_factory=list)

    def move(self, before: str, after: str) -> None:
        for key, (calls, state) in self.cancels.items():
            if state == before:
                self.cancels[key] = (calls, after)


class ScopeMachine(RuleBasedStateMachine):
    """Random cancel / child / lease / release / on_cancel / remove / close sequences."""

    scopes = Bundle("scopes")
    leases = Bundle("leases")
    registrations = Bundle("registrations")

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[_Node] = []

    @initialize(target=scopes)
    def root(self) -> _Node:
        node = _Node(CancelScope(), _Model(parent=None))
        self.nodes.append(node)
        return node

    @rule(target=scopes, parent=scopes)
    def child(self, parent: _Node) -> _Node:
        model = _Model(parent=parent.model)
        node = _Node(parent.scope.child(), model)
        parent.model.children.append(model)
        self.nodes.append(node)
        if parent.model.cancel_called():
            self._cancel(node.model)
        elif not parent.model.closed:
            model.linked = True
        return node

    def _node(self, model: _Model) -> _Node:
        return next(n for n in self.nodes if n.model is model)

    def _cancel(self, model: _Model) -> None:
        if model.cancelled:
            return
        model.cancelled = True
        model.linked = False
        self._node(model).move("waiting", "ran")
        for child in model.children:
            if child.linked:
                self._cancel(child)
        self._maybe_settle(model)

    def _maybe_settle(self, model: _Model) -> None:
        if model.settled or not (model.cancelled or model.closed):
            return
        if sum(model.held.values()) == 0:
            model.settled = True

    @rule(node=scopes, reason=st.sampled_from(["a", "b"]))
    def cancel(self, node: _Node, reason: str) -> None:
        assert node.scope.cancel(reason) is (not node.model.cancelled)
        self._cancel(node.model)

    @rule(target=registrations, node=scopes)
    def on_cancel(self, node: _Node) -> tuple[_Node, Calls, Any]:
        calls = Calls()
        registration = node.scope.on_cancel(calls)
        if node.model.cancel_called():
            state = "ran"
        elif node.model.closed:
            state = "dropped"
        else:
            state = "waiting"
        node.cancels[id(calls)] = (calls, state)
        return node, calls, registration

    @rule(entry=consumes(registrations))
    def remove(self, entry: tuple[_Node, Calls, Any]) -> None:
        node, calls, registration = entry
        _, state = node.cancels[id(calls)]
        assert registration.remove() is (state == "waiting")
        if state == "waiting":
            node.cancels[id(calls)] = (calls, "dropped")

    @rule(node=scopes)
    def on_settled(self, node: _Node) -> None:
        calls = Calls()
        node.scope.on_settled(calls)
        assert calls.count == (1 if node.model.settled else 0)
        node.settles.append(calls)

    @rule(target=leases, node=scopes, kind=st.sampled_from(KINDS))
    def lease(self, node: _Node, kind: LeaseKind) -> tuple[_Node, Lease]:
        lease = node.scope.lease(kind)
        model: _Model | None = node.model
        while model is not None:
            model.held[kind] += 1
            model = model.parent
        return node, lease

    @rule(entry=consumes(leases))
    def release(self, entry: tuple[_Node, Lease]) -> None:
        node, lease = entry
        assert lease.release() is True
        model: _Model | None = node.model
        while model is not None:
            model.held[lease.kind] -= 1
            self._maybe_settle(model)
            model = model.parent

    @rule(node=scopes)
    def close(self, node: _Node) -> None:
        node.scope.close()
        model = node.model
        model.closed = True
        model.linked = False
        for child in model.children:
            child.linked = False
        node.move("waiting", "dropped")
        self._maybe_settle(model)

    @invariant()
    def agrees_with_the_model(self) -> None:
        for node in self.nodes:
            model = node.model
            assert node.scope.cancel_called is model.cancel_called()
            assert node.scope.settled is model.settled
            assert node.scope.leases() == {k: v for k, v in model.held.items() if v}
            for calls in node.settles:
                assert calls.count == (1 if model.settled else 0)
            for calls, state in node.cancels.values():
                assert calls.count == (1 if state == "ran" else 0), state


TestScopeMachine = ScopeMachine.TestCase
TestScopeMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- real threads racing ---------------------------------------------------------------------

_OPS = st.sampled_from(["child", "on_cancel", "lease", "release", "cancel", "on_settled"])


@settings(max_examples=60, deadline=None)
@given(
    programs=st.lists(
        st.lists(st.tuples(_OPS, st.integers(0, 50), st.sampled_from(KINDS)), max_size=25),
        min_size=2,
        max_size=4,
    ),
    cancel_root_at=st.integers(0, 25),
)
def test_racing_threads_run_every_callback_exactly_once(
    programs: list[list[tuple[str, int, LeaseKind]]], cancel_root_at: int
) -> None:
    root = CancelScope()
    scopes: list[CancelScope] = [root]
    cancel_calls: list[tuple[CancelScope, Calls]] = []
    settle_calls: list[tuple[CancelScope, Calls]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(programs) + 1)

    def run(program: list[tuple[str, int, LeaseKind]]) -> None:
        held: list[Lease] = []
        barrier.wait(WAIT)
        for op, index, kind in program:
            with lock:
                scope = scopes[index % len(scopes)]
            if op == "child":
                child = scope.child()
                with lock:
                    scopes.append(child)
            elif op == "on_cancel":
                calls = Calls()
                scope.on_cancel(calls)
                with lock:
                    cancel_calls.append((scope, calls))
            elif op == "on_settled":
                calls = Calls()
                scope.on_settled(calls)
                with lock:
                    settle_calls.append((scope, calls))
            elif op == "lease":
                held.append(scope.lease(kind))
            elif op == "release" and held:
                held.pop(index % len(held)).release()
            elif op == "cancel" and index % 3 == 0:  # mostly, leave the root to the main thread
                scope.cancel(f"t{index}")
        for lease in held:
            lease.release()

    threads = [threading.Thread(target=run, args=(p,), daemon=True) for p in programs]
    for thread in threads:
        thread.start()
    barrier.wait(WAIT)
    for _ in range(cancel_root_at):
        root.leases()  # let the others run a little before the cancel
    root.cancel("root")
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a racing thread deadlocked"
    # The root's cancel reached every scope; every lease has been released.
    for scope, calls in cancel_calls:
        assert scope.cancel_called
        assert calls.count == 1, f"an on_cancel callback ran {calls.count} times"
    for scope in scopes:
        assert scope.leases() == {}
        assert scope.settled
    for _scope, calls in settle_calls:
        assert calls.count == 1, f"an on_settled callback ran {calls.count} times"
        (times,) = calls.args
        assert set(times) == set(KINDS)


# -- in actors: post_urgent, and ask_typed(scope=) drops a called-off answer -----------------------


class Hold(Message):
    """Keeps the actor busy until the test opens the gate (bounded)."""


class Record(Message):
    tag: str


class Sync(Ask[str]):
    """Answered once everything queued before it has been handled."""


class Slow(Ask[int]):
    """Answered only when the responder is told to (``Release``)."""


class Release(Ask[int]):
    value: int
    fail: bool = False


class Go(Message):
    with_on_error: bool


class Busy(ForeActor):
    def __init__(self, out: queue.Queue[Any], gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate
        self.entered = threading.Event()
        self.seen: list[str] = []
        out.put(self)

    @handles(Hold)
    def _hold(self, _message: Hold) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT)

    @handles(Record)
    def _record(self, message: Record) -> None:
        self.seen.append(message.tag)

    @handles(Sync)
    def _sync(self, _message: Sync) -> str:
        return "synced"


def test_post_urgent_overtakes_queued_mail() -> None:
    system = ActorSystem(name="post-urgent")
    try:
        out: queue.Queue[Any] = queue.Queue()
        gate = threading.Event()
        with system.activated():
            ref = Busy.start(out, gate)
        busy: Busy = out.get(timeout=WAIT)
        ref.tell(Hold())
        assert busy.entered.wait(WAIT)
        ref.tell(Record(tag="queued 1"))
        ref.tell(Record(tag="queued 2"))
        # From another thread, as a scope's cancel callback would.
        in_thread(lambda: busy.post_urgent(busy.seen.append, "urgent"))
        gate.set()
        assert ref.ask(Sync(), timeout=WAIT) == "synced"
        assert busy.seen == ["urgent", "queued 1", "queued 2"]
        ref.stop(timeout=WAIT)
        assert busy.post_urgent(busy.seen.append, "late") is False
    finally:
        gate.set()
        assert system.shutdown(timeout=WAIT)


class Responder(ForeActor):
    def __init__(self) -> None:
        super().__init__()
        self.owed: list[PooledFuture[Any]] = []

    @handles(Slow)
    def _slow(self, _message: Slow) -> None:
        future = self.defer_reply()
        assert future is not None
        self.owed.append(future)

    @handles(Release)
    def _release(self, message: Release) -> int:
        for future in self.owed:
            if message.fail:
                future.try_set_exception(ValueError("slow failed"))
            else:
                future.try_set(message.value)
        released, self.owed = len(self.owed), []
        return released


class ScopedAsker(ForeActor):
    def __init__(self, target: Any, scope: CancelScope, out: queue.Queue[Any]) -> None:
        super().__init__()
        self.target = target
        self.scope = scope
        self.out = out

    @handles(Go)
    def _go(self, message: Go) -> None:
        on_error = self.out.put if message.with_on_error else None
        self.ask_typed(self.target, Slow(), self.out.put, on_error, scope=self.scope)

    @handles(Sync)
    def _sync(self, _message: Sync) -> str:
        return "synced"


@pytest.mark.parametrize("fail", [False, True], ids=["answer", "error"])
@pytest.mark.parametrize("with_on_error", [True, False], ids=["on_error", "no_on_error"])
@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "live"])
def test_ask_typed_drops_the_continuation_of_a_cancelled_scope(
    cancel: bool, with_on_error: bool, fail: bool
) -> None:
    system = ActorSystem(name="scoped-asks")
    try:
        out: queue.Queue[Any] = queue.Queue()
        scope = CancelScope()
        with system.activated():
            responder = Responder.start()
            asker = ScopedAsker.start(responder, scope, out)
        asker.tell(Go(with_on_error=with_on_error))
        assert asker.ask(Sync(), timeout=WAIT) == "synced"  # the Slow ask has been sent
        if cancel:
            scope.cancel("keystroke")
        # The answer is set (and its continuation posted to the asker) before
        # Release returns; the Sync after it is handled after the continuation.
        assert responder.ask(Release(value=7, fail=fail), timeout=WAIT) == 1
        if cancel or not fail or with_on_error:
            assert asker.ask(Sync(), timeout=WAIT) == "synced"
            if cancel:
                assert out.empty(), "a cancelled scope's answer reached its continuation"
            else:
                got = out.get(timeout=WAIT)
                if fail:
                    assert isinstance(got, ValueError) and str(got) == "slow failed"
                else:
                    assert got == 7
        else:
            # Live, failed, no on_error: as ask_then, the error fails the asker.
            with pytest.raises(ActorDeadError):
                asker.ask(Sync(), timeout=WAIT)
    finally:
        assert system.shutdown(timeout=WAIT)


# -- run_blocking under a scope ------------------------------------------------------------


class Offload(Message):
    fail: bool = False
    with_on_error: bool = True


class ScopedOffloader(ForeActor):
    """Runs a job on the blocking lane under ``scope``; its outcome goes to ``out``."""

    def __init__(
        self, scope: CancelScope, out: queue.Queue[Any], ran: threading.Event, hold: threading.Event
    ) -> None:
        super().__init__()
        self.scope = scope
        self.out = out
        self.ran = ran
        self.hold = hold

    def _work(self, fail: bool) -> int:
        self.ran.set()
        assert self.hold.wait(WAIT)
        if fail:
            raise ValueError("work failed")
        return 42

    @handles(Offload)
    def _offload(self, message: Offload) -> None:
        on_error = self.out.put if message.with_on_error else None
        self.run_blocking(
            self._work, message.fail, then=self.out.put, on_error=on_error, scope=self.scope
        )

    @handles(Sync)
    def _sync(self, _message: Sync) -> str:
        return "synced"


def drain_lane(system: ActorSystem) -> None:
    """Return once everything queued on the (one-thread) lane before now ran, callbacks too."""
    system.blocking.submit(lambda: None).result(WAIT)


@pytest.mark.parametrize("fail", [False, True], ids=["answer", "error"])
def test_run_blocking_skips_a_job_whose_scope_was_cancelled_before_it_started(
    fail: bool,
) -> None:
    system = ActorSystem(name="scoped-blocking", blocking_threads=1)
    lane_busy = threading.Event()
    try:
        out: queue.Queue[Any] = queue.Queue()
        ran, hold = threading.Event(), threading.Event()
        hold.set()
        scope = CancelScope()
        system.blocking.submit(lane_busy.wait, WAIT)  # the one lane thread is busy
        with system.activated():
            ref = ScopedOffloader.start(scope, out, ran, hold)
        ref.tell(Offload(fail=fail))
        assert ref.ask(Sync(), timeout=WAIT) == "synced"  # the job is queued on the lane
        scope.cancel("keystroke")
        lane_busy.set()
        drain_lane(system)
        assert ref.ask(Sync(), timeout=WAIT) == "synced"  # anything posted has been handled
        assert not ran.is_set(), "a job of a cancelled scope ran"
        assert out.empty(), "a cancelled scope's job reached its continuation"
    finally:
        lane_busy.set()
        assert system.shutdown(timeout=WAIT)


@pytest.mark.parametrize("fail", [False, True], ids=["answer", "error"])
@pytest.mark.parametrize("with_on_error", [True, False], ids=["on_error", "no_on_error"])
@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "live"])
def test_run_blocking_drops_the_outcome_of_a_scope_cancelled_while_it_ran(
    cancel: bool, with_on_error: bool, fail: bool
) -> None:
    system = ActorSystem(name="scoped-blocking-running", blocking_threads=1)
    out: queue.Queue[Any] = queue.Queue()
    ran, hold = threading.Event(), threading.Event()
    try:
        scope = CancelScope()
        with system.activated():
            ref = ScopedOffloader.start(scope, out, ran, hold)
        ref.tell(Offload(fail=fail, with_on_error=with_on_error))
        assert ran.wait(WAIT)  # the job is running
        if cancel:
            scope.cancel("keystroke")
        hold.set()
        drain_lane(system)
        if cancel or not fail or with_on_error:
            assert ref.ask(Sync(), timeout=WAIT) == "synced"
            if cancel:
                assert out.empty(), "a cancelled scope's outcome reached its continuation"
            else:
                got = out.get(timeout=WAIT)
                if fail:
                    assert isinstance(got, ValueError) and str(got) == "work failed"
                else:
                    assert got == 42
        else:
            # Live, failed, no on_error: as without a scope, the error fails the actor.
            with pytest.raises(ActorDeadError):
                ref.ask(Sync(), timeout=WAIT)
    finally:
        hold.set()
        assert system.shutdown(timeout=WAIT)
