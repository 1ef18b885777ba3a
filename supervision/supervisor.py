"""An OTP-style supervisor built on pooled actors.

The supervisor is itself a :class:`~actors.core.pooled.PooledActor`. Children
report exits to it as :class:`~messages.runtime.ChildExited` messages (an exit
watcher on each child tells the supervisor), and it restarts them by its
strategy (``one_for_one``, ``one_for_all``, ``rest_for_one``) and each child's
restart type, within a restart intensity: more than ``max_restarts`` restarts
in ``period`` seconds and it stops its children in reverse start order and
fails, so its own supervisor sees the failure.

It never blocks a dispatcher thread: stopping a child is a message plus a
timer for the child's shutdown timeout, and a multi-step plan ("stop these in
reverse order, then start those") runs as a queue of asynchronous operations,
one at a time. A stop is the ordinary ``stop()`` first (the child finishes the
mail queued before it); at half the shutdown timeout a child that has not
exited is sent :class:`~messages.runtime.StopNow` on its control lane (so its
``on_stop`` still runs however long its backlog), and at the full timeout it
is killed. A nested supervisor is never sent ``StopNow`` (that would kill its
own children without their ``on_stop``): it gets its whole timeout for an
orderly shutdown.

A restart backoff never holds the operation queue: the rest of the start plan
is re-queued by a timer, so a stop, a shutdown or another child's restart is
not kept waiting behind someone's backoff. A shutdown or an escalation
supersedes whatever operation is in flight (its pending backoff timers are
cancelled) and every reply an abandoned operation owed is still answered.

Callers address children through :class:`~supervision.handle.Handle`\\ s that
the supervisor re-points at each new incarnation.

Beside it: the OTP rules as pure functions (restart decisions, intensity,
backoff) in :mod:`supervision.policy`, a child's record and the start of one
incarnation in :mod:`supervision.child`, the one-at-a-time plan in
:mod:`supervision.op_queue`. What stays here is one
concept and stays whole: the actor that executes plans over its children --
every handler below (a request, an exit, a timer, a backoff) reads and
writes the same children table, plan and waiters, and splitting them up
would only scatter that state.
"""

from __future__ import annotations

import functools
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pykka.messages import _ActorStop

from fore.actors.alerts import send_alert
from fore.actors.core.continuations import tell_quietly
from fore.actors.core.future import PooledFuture
from fore.actors.core.handlers import handles
from fore.actors.core.pooled import ForeActor, PooledActor
from fore.actors.core.timer import TimerHandle
from fore.errors import ChildRejectedError, SupervisorIntensityError
from fore.messages.alerts import AlertLevel
from fore.messages.runtime import (
    ChildExited,
    ChildSnapshot,
    ChildSpec,
    ChildStatus,
    GetChild,
    RestartType,
    Shutdown,
    StartChild,
    StopChild,
    StopNow,
    Strategy,
    TreeSnapshot,
    WhichChildren,
)
from fore.supervision.child import Child, exited
from fore.supervision.handle import SUPERVISOR_STOP, SUPERVISOR_STOP_NOW, Handle
from fore.supervision.op_queue import Done, Op, OpQueue
from fore.supervision.policy import Backoff, RestartIntensity, plan_restart, should_restart

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["ChildRejectedError", "SupervisorIntensityError"]

SupervisorStatus = Literal["running", "shutting_down", "stopped", "failed"]

_REQUESTS = (StartChild, StopChild, GetChild, Shutdown, WhichChildren)
"""The supervisor's public protocol: a failing *tell* of one is logged, not fatal."""


def _ignore_error(
    got: Callable[[str, TreeSnapshot | None], None], child_id: str, _error: BaseException
) -> None:
    got(child_id, None)


class Supervisor(ForeActor):
    """Starts, watches and restarts its children; see the module docs."""

    def __init__(
        self,
        sup_id: str,
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        max_restarts: int = 3,
        period: float = 5.0,
        backoff: Backoff | None = None,
        children: Sequence[ChildSpec] = (),
        session_id: str | None = None,
        registry_name: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__()
        self.sup_id = sup_id
        self.strategy = Strategy(strategy)
        self.session_id = session_id
        self.registry_name = registry_name
        self._intensity = RestartIntensity(max_restarts, period)
        self._backoff = backoff
        self._rng = rng or random.Random()
        self._children: dict[str, Child] = {}
        self._ops = OpQueue(self.post)
        self._backoffs: set[TimerHandle] = set()
        self._wound_up = False
        """Set (first) by _wind_up, which kill() may run from another thread."""
        self._status: SupervisorStatus = "running"
        self._waiters: list[tuple[PooledFuture[Any] | None, Any]] = []
        """Replies answered (with the value) when the shutdown ends or the supervisor exits."""
        self._stop_when_down = False
        self._restarts_total = 0
        for spec in children:
            self._add(spec)

    # -- lifecycle ------------------------------------------------------------

    def on_start(self) -> None:
        initial = list(self._children)
        if initial:
            self._ops.enqueue(Op(lambda done: self._start_sequence(initial, done)))

    def on_failure(self, *_exc_info: Any) -> None:
        # A supervisor that dies takes its children with it (OTP links).
        self._wind_up()

    def on_stop(self) -> None:
        self._wind_up()

    def kill(self) -> None:
        self._wind_up()
        super().kill()

    def _wind_up(self) -> None:
        """Before any exit: children down, every owed reply answered.

        Runs before the exit itself, so the replies get their real answers
        (``True`` for a stop) rather than the ``ActorDeadError`` an exit gives
        deferred replies nobody answered.
        """
        self._wound_up = True
        self._kill_children()
        self._drop_ops()
        self._answer_waiters()

    def _handle_receive(self, message: Any) -> Any:
        kind = type(message)
        if kind is _ActorStop:
            self._begin_shutdown(self.defer_reply(), then_stop=True)
            return None
        if kind is StopNow:
            self._stop()  # on_stop kills the children and answers every waiter
            return None
        return super()._handle_receive(message)

    def on_receive(self, message: Any) -> Any:
        envelope = self._fore_current
        if not isinstance(message, _REQUESTS) or envelope is None or envelope.reply_to is not None:
            return super().on_receive(message)  # an ask: its asker gets any error
        # A told request has nobody to answer: its error must not fail the
        # supervisor (and with it every child it supervises).
        try:
            return super().on_receive(message)
        except Exception as exc:
            self.log.error(
                "supervisor_request_failed",
                supervisor=self.sup_id,
                request=type(message).__name__,
                error=repr(exc),
            )
            self._alert(AlertLevel.ERROR, f"{type(message).__name__} (told) failed: {exc}")
            return None

    # -- public messages -------------------------------------------------------

    @handles(StartChild)
    def _on_start_child(self, message: StartChild) -> Handle[Any]:
        if self._status != "running":
            raise RuntimeError(f"supervisor {self.sup_id} is {self._status}")
        child = self._add(message.spec)
        if not child.start(self.system, self.actor_ref, self.log):
            del self._children[child.spec.id]
            reason = child.start_error or "failed to start"
            child.handle.close(f"failed to start: {reason}")
            if child.rejected:
                raise ChildRejectedError(reason)
            raise RuntimeError(f"child {message.spec.id!r} failed to start: {reason}")
        return child.handle

    @handles(GetChild)
    def _on_get_child(self, message: GetChild) -> Handle[Any] | None:
        child = self._children.get(message.child_id)
        return None if child is None else child.handle

    @handles(StopChild)
    def _on_stop_child(self, message: StopChild) -> None:
        reply = self.defer_reply()
        child = self._children.get(message.child_id)
        if child is None:
            if reply is not None:
                reply.try_set(False)
            return
        child_id = message.child_id

        def op(done: Done) -> None:
            def removed() -> None:
                self._remove(child_id, "stopped")
                if reply is not None:
                    reply.try_set(True)
                done()

            self._stop_sequence([child_id], removed)

        # Superseded (a shutdown or escalation stops every child) or never
        # run (the supervisor exited): the child is stopped all the same.
        self._ops.enqueue(Op(op, reply=reply, dropped=True))

    @handles(Shutdown)
    def _on_shutdown(self, _message: Shutdown) -> None:
        self._begin_shutdown(self.defer_reply(), then_stop=False)

    @handles(WhichChildren)
    def _on_which_children(self, _message: WhichChildren) -> TreeSnapshot | None:
        reply = self.defer_reply()
        nested = [
            c for c in self._children.values() if c.spec.kind == "supervisor" and c.ref is not None
        ]
        collected: dict[str, TreeSnapshot | None] = {}

        def finish() -> None:
            if reply is not None:
                reply.try_set(self._snapshot(collected))

        if not nested:
            finish()
            return None
        remaining = [len(nested)]

        def got(child_id: str, snapshot: TreeSnapshot | None) -> None:
            collected[child_id] = snapshot
            remaining[0] -= 1
            if remaining[0] == 0:
                finish()

        for child in nested:
            assert child.ref is not None
            cid = child.spec.id
            self.ask_then(
                child.ref,
                WhichChildren(),
                then=functools.partial(got, cid),
                on_error=functools.partial(_ignore_error, got, cid),
                timeout=5.0,
            )
        return None

    # -- exits -------------------------------------------------------------

    @handles(ChildExited)
    def _on_child_exited(self, message: ChildExited) -> None:
        child = self._children.get(message.child_id)
        if child is None or child.urn != message.actor_urn:
            return  # an incarnation we already replaced or removed
        child.ref = None
        if child.status is ChildStatus.STOPPING:
            if child.stop_timer is not None:
                child.stop_timer.cancel()
                child.stop_timer = None
            child.status = ChildStatus.STOPPED
            callback, child.on_stopped = child.on_stopped, None
            if callback is not None:
                callback()
            return
        self._on_unexpected_exit(child, message)

    def _on_unexpected_exit(self, child: Child, message: ChildExited) -> None:
        log = self.log.bind(child=child.spec.id, supervisor=self.sup_id)
        if self._status != "running":
            child.status = ChildStatus.STOPPED
            return
        if not should_restart(child.spec.restart, failed=message.failed):
            log.info("child_exited", failed=message.failed, restart=child.spec.restart.value)
            self._remove(child.spec.id, "exited")
            return
        log.warning("child_failed" if message.failed else "child_exited", error=message.error)
        self._alert(
            AlertLevel.WARN if message.failed else AlertLevel.INFO,
            f"{child.spec.id} {'failed' if message.failed else 'exited'}"
            f"{f' ({message.error})' if message.error else ''}; restarting it",
        )
        self._restart(child, reason=message.error or "exited")

    def _restart(self, child: Child, *, reason: str) -> None:
        now = time.monotonic()
        if not self._intensity.record(now):
            self._escalate(
                f"{self.sup_id}: more than {self._intensity.max_restarts} restarts in "
                f"{self._intensity.period:g}s (last: {child.spec.id}: {reason})"
            )
            return
        if now - child.last_start > self._intensity.period:
            child.consecutive = 0
        child.consecutive += 1
        child.restarts += 1
        self._restarts_total += 1
        child.status = ChildStatus.RESTARTING
        to_stop, to_start = plan_restart(self.strategy, list(self._children), child.spec.id)
        # OTP: a temporary child is never restarted, not even when a sibling's
        # crash takes it down (one_for_all, rest_for_one): it is stopped with
        # the others and then removed. Transient siblings do restart.
        dropped = [
            cid for cid in to_stop if self._children[cid].spec.restart is RestartType.TEMPORARY
        ]
        to_start = [cid for cid in to_start if cid not in dropped]
        for cid in to_stop:
            if cid not in dropped:
                self._children[cid].status = ChildStatus.RESTARTING

        def op(done: Done) -> None:
            def stopped() -> None:
                for cid in dropped:
                    self._remove(cid, "stopped (temporary: not restarted)")
                self._start_sequence(to_start, done)

            self._stop_sequence(to_stop, stopped)

        self._ops.enqueue(Op(op))

    def _escalate(self, reason: str) -> None:
        self.log.error("supervisor_gave_up", supervisor=self.sup_id, reason=reason)
        self._alert(AlertLevel.ERROR, f"gave up: {reason}")
        self._status = "failed"
        self._supersede()
        order = list(reversed(self._children))

        def op(_done: Done) -> None:
            def stopped() -> None:
                self.post(self._fail, reason)

            self._stop_sequence(order, stopped)

        self._ops.enqueue(Op(op))

    def _fail(self, reason: str) -> None:
        for cid in list(self._children):
            self._remove(cid, "stopped: supervisor gave up")
        raise SupervisorIntensityError(reason)

    def _alert(self, level: AlertLevel, text: str) -> None:
        send_alert(
            self.system.alert_sink,
            level,
            f"{self.sup_id}: {text}",
            session=self.session_id,
            source="supervisor",
        )

    # -- operations queue ---------------------------------------------------------

    def _supersede(self) -> None:
        """End the op in flight and drop the queued ones: a shutdown or escalation takes over.

        Their callbacks become no-ops (the generation moves on), pending
        backoff timers are cancelled, and every reply they owed is answered
        when the new plan ends (or the supervisor exits).
        """
        self._ops.supersede()
        for timer in self._backoffs:
            timer.cancel()
        self._backoffs.clear()
        for child in self._children.values():
            child.on_stopped = None
            child.backoff_waited = False
            if child.ref is None:
                child.status = ChildStatus.STOPPED  # between incarnations: none will come
        self._drop_ops()

    def _drop_ops(self) -> None:
        for op in self._ops.drop():
            if op.reply is not None:
                self._waiters.append((op.reply, op.dropped))

    def _stop_sequence(self, ids: Sequence[str], done: Done) -> None:
        """Stop children one after another, each waited for until it has really exited."""
        gen = self._ops.generation
        queue = deque(ids)

        def step() -> None:
            if gen != self._ops.generation:
                return  # superseded: a shutdown or an escalation took over
            while queue:
                cid = queue.popleft()
                child = self._children.get(cid)
                if child is None:
                    continue
                ref = child.ref
                if ref is None or exited(ref):
                    child.ref = None
                    if child.status is not ChildStatus.RESTARTING:
                        child.status = ChildStatus.STOPPED
                    continue
                if child.status is ChildStatus.STOPPING and child.stop_timer is not None:
                    # A superseded op already asked it to stop: wait for that exit.
                    child.on_stopped = step
                    return
                restarting = child.status is ChildStatus.RESTARTING
                child.status = ChildStatus.STOPPING

                def stopped(child: Child = child, restarting: bool = restarting) -> None:
                    if restarting:
                        child.status = ChildStatus.RESTARTING
                    step()

                child.on_stopped = stopped
                timeout = child.spec.shutdown_timeout
                if isinstance(ref._actor_weakref(), Supervisor):
                    child.stop_timer = self.call_after(
                        timeout, self._stop_timed_out, cid, ref.actor_urn
                    )
                else:
                    child.stop_timer = self.call_after(
                        timeout / 2, self._stop_nudge, cid, ref.actor_urn
                    )
                # Already stopping: its exit notification is on the way.
                tell_quietly(ref, SUPERVISOR_STOP)
                return
            done()

        step()

    def _stop_nudge(self, child_id: str, urn: str) -> None:
        """Half the shutdown timeout passed: stop ahead of the child's backlog."""
        child = self._children.get(child_id)
        if child is None or child.urn != urn or child.status is not ChildStatus.STOPPING:
            return
        assert child.ref is not None
        child.stop_timer = self.call_after(
            child.spec.shutdown_timeout / 2, self._stop_timed_out, child_id, urn
        )
        self.log.warning(
            "child_stop_overtakes_backlog", child=child_id, timeout=child.spec.shutdown_timeout
        )
        tell_quietly(child.ref, SUPERVISOR_STOP_NOW)

    def _stop_timed_out(self, child_id: str, urn: str) -> None:
        child = self._children.get(child_id)
        if child is None or child.urn != urn or child.status is not ChildStatus.STOPPING:
            return
        self.log.warning(
            "child_shutdown_timeout", child=child_id, timeout=child.spec.shutdown_timeout
        )
        assert child.ref is not None
        actor = child.ref._actor_weakref()
        if isinstance(actor, PooledActor):
            actor.kill()  # its exit watcher reports the exit as usual

    def _start_sequence(self, ids: Sequence[str], done: Done) -> None:
        """Start children one after another, honouring backoff.

        A backoff does not hold the operation queue: the rest of the plan is
        queued again by a timer, so other operations run meanwhile. That is
        why every step re-checks the child (it may have been removed, or
        restarted by a later plan, while this one waited).
        """
        gen = self._ops.generation
        queue = deque(ids)
        while queue:
            if gen != self._ops.generation:
                return  # superseded (an escalation while starting): nothing more to start
            cid = queue[0]
            child = self._children.get(cid)
            if child is None or child.ref is not None or self._status != "running":
                queue.popleft()
                continue
            delay = 0.0
            if self._backoff is not None and child.consecutive > 0 and not child.backoff_waited:
                delay = self._backoff.delay(child.consecutive, self._rng)
            if delay > 0:
                child.backoff_waited = True
                self._resume_after(delay, list(queue))
                break
            child.backoff_waited = False
            queue.popleft()
            if not child.start(self.system, self.actor_ref, self.log):
                if child.rejected:
                    self._reject(child)
                else:
                    self._retry_start(child)
        done()

    def _resume_after(self, delay: float, ids: list[str]) -> None:
        holder: list[TimerHandle] = []

        def resume() -> None:
            self._backoffs.discard(holder[0])
            if self._status == "running":
                self._ops.enqueue(Op(functools.partial(self._start_sequence, ids)))

        holder.append(self.call_after(delay, resume))
        self._backoffs.add(holder[0])
        if self._wound_up:
            # kill() may wind this supervisor up from another thread while this
            # handler runs: it set the flag before cancelling the backoffs it
            # saw, so a timer added after that is cancelled here.
            holder[0].cancel()
            self._backoffs.discard(holder[0])

    def _retry_start(self, child: Child) -> None:
        # A child whose start failed counts as a crash of that child alone: the
        # rest of the sequence goes on, and this one is tried again later --
        # unless it is temporary: never restarted, a failed start is its end.
        if child.spec.restart is RestartType.TEMPORARY:
            self._remove(child.spec.id, "failed to start (temporary: not retried)")
            return
        child.status = ChildStatus.RESTARTING
        now = time.monotonic()
        if not self._intensity.record(now):
            self._escalate(f"{self.sup_id}: child {child.spec.id!r} keeps failing to start")
            return
        child.consecutive += 1
        child.restarts += 1
        self._restarts_total += 1
        cid = child.spec.id
        self._ops.enqueue(Op(functools.partial(self._start_sequence, [cid])))

    def _reject(self, child: Child) -> None:
        reason = child.start_error or "not a pooled actor"
        self._alert(AlertLevel.ERROR, f"child {child.spec.id!r} removed: {reason}")
        self._remove(child.spec.id, f"rejected: {reason}")

    # -- children ----------------------------------------------------------------

    def _add(self, spec: ChildSpec) -> Child:
        if spec.id in self._children:
            raise ValueError(f"duplicate child id {spec.id!r} in supervisor {self.sup_id}")
        child = Child(spec=spec, handle=Handle(spec.id))
        self._children[spec.id] = child
        return child

    def _remove(self, child_id: str, reason: str) -> None:
        child = self._children.pop(child_id, None)
        if child is None:
            return
        child.cancel_timers()
        child.handle.close(reason)

    def _kill_children(self) -> None:
        """Take every child down with this supervisor (OTP links), at once.

        Every child's handle is closed and its timers cancelled -- also for a
        child between incarnations (crashed, in backoff, mid-restart), which
        has no actor to kill but whose handle holds mail and callers: left
        "restarting", it would buffer tells silently and keep asks waiting
        until their deadlines, for a restart that will never come.
        """
        for timer in list(self._backoffs):
            timer.cancel()
        self._backoffs.clear()
        for child in reversed(list(self._children.values())):
            child.cancel_timers()
            ref = child.ref
            if ref is not None:
                actor = ref._actor_weakref()
                if isinstance(actor, PooledActor):
                    actor.kill()
            child.handle.close(f"stopped with its supervisor {self.sup_id}")

    def _begin_shutdown(self, reply: PooledFuture[Any] | None, *, then_stop: bool) -> None:
        """Stop the children in reverse start order; then stop too if ``then_stop``.

        ``reply`` (a deferred ``stop()`` or :class:`Shutdown` ask) is answered
        when that is done: ``True`` for a stop, ``None`` for a Shutdown. The
        shutdown supersedes whatever the supervisor was doing (a restart, a
        backoff, a StopChild): nothing it was about to start is started.
        """
        self._waiters.append((reply, True if then_stop else None))
        self._stop_when_down = self._stop_when_down or then_stop
        if self._status == "failed":
            # Mid-escalation: the escalation already stops every child in
            # reverse order and then fails upward. A stop must not cancel it
            # (the parent would see a clean exit instead of the failure); the
            # waiters are answered when the supervisor exits (on_failure).
            return
        if self._status == "shutting_down":
            return  # the shutdown under way also stops us if a waiter asked for it
        self._status = "shutting_down"
        self._supersede()
        order = list(reversed(self._children))

        def finish() -> None:
            for cid in list(self._children):
                self._remove(cid, "stopped")
            self._status = "stopped"
            if self._stop_when_down:
                self._stop()  # on_stop answers the waiters, then the actor exits
            else:
                self._answer_waiters()

        def op(done: Done) -> None:
            def finished() -> None:
                finish()
                done()

            self._stop_sequence(order, finished)

        self._ops.enqueue(Op(op))

    def _answer_waiters(self) -> None:
        waiters, self._waiters = self._waiters, []
        for reply, value in waiters:
            if reply is not None:
                reply.try_set(value)

    # -- introspection -----------------------------------------------------------

    def _snapshot(self, nested: dict[str, TreeSnapshot | None]) -> TreeSnapshot:
        children = []
        for child in self._children.values():
            sub = nested.get(child.spec.id)
            children.append(
                ChildSnapshot(
                    id=child.spec.id,
                    kind=child.spec.kind,
                    actor_class=(child.ref.actor_class.__name__ if child.ref is not None else "-"),
                    actor_urn=child.urn,
                    status=child.status,
                    restart=child.spec.restart,
                    restarts=child.restarts,
                    children=sub.children if sub is not None else (),
                )
            )
        return TreeSnapshot(
            id=self.sup_id,
            strategy=self.strategy,
            status=self._status,
            restarts=self._restarts_total,
            children=tuple(children),
        )
