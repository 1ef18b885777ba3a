"""The tool executor pool: one shared actor running every session's tool calls.

It receives :class:`~messages.tools.RunToolBatch` requests and runs their calls
on :class:`~actors.tools.runner.ThreadRunner` threads -- or, for a tool whose
``execute`` is ``async def``, as tasks on the tool layer's event loop
(:class:`~actors.tools.aio.ToolLoop`), with the same deadlines, cancellation
(the task is cancelled), caps and ordering -- never on a dispatcher
thread -- under a global cap and a per-session cap with FIFO round-robin
fairness (:class:`~actors.tools.scheduling.FairQueue`). Within a batch, calls
writing the same file run in call order, a ``shell`` call is ordered against
every write, and exclusive tools run alone.

A batch is *planned* first, on a runner thread: arguments are validated, each
tool's ``write_paths`` is asked, and the paths are resolved through the
session's filesystem view to canonical workspace paths (so ``a.py``,
``./a.py`` and a symlink to it are one file). Planning runs tool code and
filesystem syscalls, which must not run on the actor's thread: a raising
``write_paths`` then fails only its own call, and a hanging one only its own
batch (it times out), never the pool.

Every call ends with exactly one :class:`~messages.tools.ToolCallFinished`:
its own result; ``invalid`` / ``unknown_tool`` before running (also for a
second call reusing a call id of its batch); ``error`` when planning it
failed, no runner thread is free or its session has too many stuck threads
(:mod:`.zombies`); ``timeout`` when its deadline passes (its token is cancelled, a
shell's process group killed, and the pool stops waiting for it);
``cancelled`` on request; or ``crashed`` if this actor itself fails -- then
``on_failure`` reports every call it was responsible for before the
supervisor restarts it. One call's failure never affects its siblings, and
one session's requests never affect another session's. A batch whose id is
already running for its session is answered with one
:class:`~messages.tools.ToolBatchRejected` instead.

A call whose thread outlives its report is a *zombie*: it keeps its slot
and holds back the calls that must not overlap it, within a bound per
session (:mod:`.zombies`).

Every string the pool reports is valid Unicode: tool output holding lone
surrogates (say, a non-UTF-8 file name) is escaped by
:func:`~actors.tools.text.valid_unicode` before it leaves the pool.
"""

from __future__ import annotations

import functools
import operator
import threading
import time
from collections import deque
from typing import Any

from fore.actors.core.cancel import CancelScope
from fore.actors.core.continuations import tell_quietly
from fore.actors.core.handlers import handles
from fore.actors.core.pooled import ForeActor
from fore.actors.tools.aio import ToolLoop, ToolLoopClosed
from fore.actors.tools.base import (
    Invocation,
    ToolContext,
    ToolRegistry,
    ToolServices,
    ainvoke_tool,
    call_timeout,
    invoke_tool,
    is_async_tool,
)
from fore.actors.tools.cancel import CancelToken
from fore.actors.tools.pool.calls import _Batch, _Call, _cancel
from fore.actors.tools.pool.planning import plan_calls
from fore.actors.tools.pool.zombies import ZombieBound
from fore.actors.tools.runner import RunnerSaturated, ThreadRunner
from fore.actors.tools.scheduling import FairQueue, batch_dependencies, conflicts
from fore.actors.tools.text import valid_output, valid_unicode
from fore.messages.conversation import ToolCall, ToolResult
from fore.messages.tools import (
    CancelToolCalls,
    GetPoolStats,
    PoolStats,
    RunToolBatch,
    ToolBatchFinished,
    ToolBatchRejected,
    ToolCallFinished,
    ToolCallStarted,
)

DEFAULT_MAX_RUNNING = 64
DEFAULT_PER_SESSION = 8


class ToolPool(ZombieBound, ForeActor):
    """Runs tool calls for every session (see module docs)."""

    def __init__(
        self,
        *,
        runner: ThreadRunner | None = None,
        aio: ToolLoop | None = None,
        max_running: int = DEFAULT_MAX_RUNNING,
        per_session: int = DEFAULT_PER_SESSION,
        max_zombies: int | None = None,
        registry_name: str | None = None,
        telemetry: Any = None,
    ) -> None:
        super().__init__()
        self._telemetry = telemetry
        """The runtime's Instrumentation: a span and a metric per call (issue 28; None: off)."""
        if max_zombies is not None and max_zombies < 1:
            raise ValueError("max_zombies must be at least 1")
        self.registry_name = registry_name
        self._owns_runner = runner is None
        self._runner = runner or ThreadRunner()
        self._owns_aio = aio is None
        self._aio = aio or ToolLoop()  # its thread starts with the first async call
        self._queue: FairQueue[_Call] = FairQueue(global_cap=max_running, session_cap=per_session)
        self._max_zombies = max_zombies
        self._batches: dict[tuple[str, str], _Batch] = {}
        """Running batches by (session id, batch id): ids need only be unique per session."""
        self._zombies: dict[str, set[_Call]] = {}
        """Per session: calls reported finished whose thread still runs (they hold a slot)."""
        self._stuck_plans: dict[str, int] = {}
        """Per session: timed-out batch plannings whose thread still runs."""
        self._planning: dict[str, int] = {}
        """Per session: batch plannings submitted to the runner and not yet returned."""
        self._unblocked: deque[_Call] = deque()
        """Calls whose last blocker just ended: admitted by the next ``_pump``."""
        self._max_seen = 0
        self._abandoned = 0

    # -- requests -------------------------------------------------------------

    @handles(RunToolBatch)
    def _on_run(self, request: RunToolBatch) -> None:
        if (request.session_id, request.batch_id) in self._batches:
            self._reject_duplicate(request)
            return
        batch = _Batch(request=request)
        batch.calls = [_Call(batch, i, call) for i, call in enumerate(request.calls)]
        batch.results = [None] * len(batch.calls)
        batch.remaining = len(batch.calls)
        self._batches[batch.key] = batch
        self._queue.set_session_cap(request.session_id, request.max_concurrency)
        if not batch.calls:
            self._complete(batch)
            return
        scope: CancelScope | None = request.scope
        if scope is not None:
            batch.lease = scope.lease("tools")  # first the lease, then the check
            if scope.cancel_called:
                # Its run was cancelled before the batch arrived: nothing of it runs.
                self._cancel_batch(batch.session, request.batch_id, scope.reason or "cancelled")
                return
            batch.registration = scope.on_cancel(
                functools.partial(self._scope_cancelled, batch.session, request.batch_id)
            )
        refusal = self._zombie_refusal(batch.session) or self._planning_refusal(batch.session)
        if refusal is not None:
            self._fail_planning(batch, Invocation("error", refusal, True))
            return
        self._refuse_reused_ids(batch)
        if batch.remaining == 0:
            return
        batch.plan_timer = self.call_after(request.call_timeout, self._on_plan_timeout, batch)

        def planned(plans: Any, error: BaseException | None) -> None:
            self.post(self._on_planned, batch, plans, error)

        try:
            self._runner.submit(
                functools.partial(plan_calls, request.tools, request.calls, request.fs), planned
            )
        except RunnerSaturated as exc:
            self._fail_planning(batch, Invocation("error", f"Not run: {exc}", True))
            return
        _count(self._planning, batch.session, +1)

    def _reject_duplicate(self, request: RunToolBatch) -> None:
        """A batch id already running for this session: one rejection, no per-call results.

        Results under that id would be taken for the running batch's results.
        Raising here would fail the pool actor and every session's calls with it.
        """
        self.log.warning(
            "tool_batch_duplicate", session_id=request.session_id, batch_id=request.batch_id
        )
        tell_quietly(
            request.reply_to,
            ToolBatchRejected(
                batch_id=request.batch_id,
                session_id=request.session_id,
                call_ids=tuple(call.id for call in request.calls),
                reason=(
                    f"Not run: batch {request.batch_id!r} is already running for session "
                    f"{request.session_id!r}; a batch id must be unique among running batches"
                ),
            ),
        )

    def _refuse_reused_ids(self, batch: _Batch) -> None:
        """A call reusing an id of an earlier call of its batch is not run.

        Results are matched to calls by id, so two results for one id would be
        ambiguous; the first call with the id runs, the others say why they did not.
        """
        first: dict[str, int] = {}
        for item in batch.calls:
            earlier = first.setdefault(item.call.id, item.index)
            if earlier != item.index:
                message = (
                    f"Not run: call id {item.call.id!r} is already used by call #{earlier + 1} "
                    "of this batch; every call of a batch needs its own id"
                )
                self._report(item, Invocation("invalid", message, True))
                self._release(item)

    def _on_planned(self, batch: _Batch, plans: Any, error: BaseException | None) -> None:
        _count(self._planning, batch.session, -1)
        if batch.plan_stuck:
            batch.plan_stuck = False  # the stuck planning thread has returned after all
            _count(self._stuck_plans, batch.session, -1)
        if batch.planned or self._batches.get(batch.key) is not batch:
            self._pump()
            return  # timed out while planning, or every call was cancelled
        if error is not None or not isinstance(plans, list) or len(plans) != len(batch.calls):
            reason = f"{type(error).__name__}: {error}" if error is not None else "no plan"
            self._fail_planning(
                batch, Invocation("error", f"Not run: planning failed ({reason})", True)
            )
            return
        batch.planned = True
        if batch.plan_timer is not None:
            batch.plan_timer.cancel()
            batch.plan_timer = None
        for item, plan in zip(batch.calls, plans, strict=True):
            if isinstance(plan, Invocation):
                if not item.reported:
                    self._report(item, plan)
                    self._release(item)
            else:
                item.shape = plan
        shapes = [item.shape for item in batch.calls]
        fs = batch.request.fs
        zombies = [z for z in self._zombies.get(batch.session, ()) if z.batch.request.fs is fs]
        for item, waits in zip(batch.calls, batch_dependencies(shapes), strict=True):
            if item.reported:
                continue  # cancelled while the batch was being planned, or not runnable
            item.state = "waiting"
            item.waiting_on = {batch.calls[i] for i in waits if batch.calls[i].state != "done"}
            item.waiting_on.update(z for z in zombies if conflicts(z.shape, item.shape))
            for blocker in item.waiting_on:
                blocker.dependents.append(item)
            if not item.waiting_on:
                self._unblocked.append(item)
            elif any(blocker.state == "zombie" for blocker in item.waiting_on):
                self._arm_wait(item)
        self._pump()

    def _on_plan_timeout(self, batch: _Batch) -> None:
        if batch.planned or self._batches.get(batch.key) is not batch:
            return
        timeout = batch.request.call_timeout
        self._abandoned += 1  # the planning thread is stuck in the tool's write_paths
        batch.plan_stuck = True
        _count(self._stuck_plans, batch.session, +1)
        self._fail_planning(
            batch,
            Invocation(
                "timeout",
                f"Not run: working out which paths the batch writes took longer than {timeout:g}s",
                True,
            ),
        )
        self._refuse_queued_over_the_bound()
        self._pump()

    def _fail_planning(self, batch: _Batch, invocation: Invocation) -> None:
        batch.planned = True
        if batch.plan_timer is not None:
            batch.plan_timer.cancel()
            batch.plan_timer = None
        for item in list(batch.calls):
            if not item.reported:
                self._report(item, invocation)
                self._release(item)

    def _scope_cancelled(self, session_id: str, batch_id: str, reason: str) -> None:
        """A batch's scope was cancelled (on the canceller's thread): cancel it here, urgently."""
        self.post_urgent(self._cancel_batch, session_id, batch_id, reason)

    def _cancel_batch(self, session_id: str, batch_id: str, reason: str) -> None:
        self._on_cancel(CancelToolCalls(session_id=session_id, batch_id=batch_id, reason=reason))

    @handles(CancelToolCalls)
    def _on_cancel(self, message: CancelToolCalls) -> int:
        wanted = set(message.call_ids)
        count = 0
        for batch in list(self._batches.values()):
            if batch.session != message.session_id:
                continue
            if message.batch_id is not None and batch.request.batch_id != message.batch_id:
                continue
            for item in batch.calls:
                if item.reported or (wanted and item.call.id not in wanted):
                    continue
                cancelled = Invocation("cancelled", f"Cancelled: {message.reason}", True)
                if item.state == "running":
                    self._abandon(item, cancelled, message.reason, "was cancelled")
                else:
                    if item.state == "ready":
                        self._queue.remove(batch.session, functools.partial(operator.is_, item))
                    item.token.cancel(message.reason)
                    self._report(item, cancelled)
                    self._release(item)
                count += 1
        self._refuse_queued_over_the_bound()  # after the cancels: those calls say "cancelled"
        self._pump()
        return count

    @handles(GetPoolStats)
    def _on_stats(self, _message: GetPoolStats) -> PoolStats:
        zombies = {s: len(calls) for s, calls in self._zombies.items() if calls}
        live = {
            s: n - zombies.get(s, 0)
            for s, n in self._queue.running_by_session().items()
            if n > zombies.get(s, 0)
        }
        return PoolStats(
            running=sum(live.values()),
            queued=self._queue.queued(),
            sessions=self._queue.sessions(),
            max_running_seen=self._max_seen,
            abandoned_threads=self._abandoned,
            per_session_running=live,
            zombies=sum(zombies.values()),
            per_session_zombies=zombies,
        )

    # -- running -----------------------------------------------------------------

    def _pump(self) -> None:
        """Admit calls that were unblocked, then start whatever the caps allow."""
        while True:
            if self._unblocked:
                item = self._unblocked.popleft()
                if item.state == "waiting" and not item.waiting_on:
                    self._admit(item)
                continue
            picked = self._queue.pop_runnable()
            if picked is None:
                break
            self._start(picked[1])
        self._max_seen = max(self._max_seen, self._queue.running_total)

    def _admit(self, item: _Call) -> None:
        """Queue a call whose blockers have all ended -- unless its session may not run more."""
        refusal = self._zombie_refusal(item.batch.session)
        if refusal is not None:
            self._report(item, Invocation("error", refusal, True))
            self._release(item)
            return
        _cancel(item.wait_timer)
        item.wait_timer = None
        item.state = "ready"
        self._queue.push(item.batch.session, item)

    def _start(self, item: _Call) -> None:
        batch = item.batch
        request = batch.request
        item.state = "running"
        item.holds_slot = True
        item.started = time.monotonic()
        registry: ToolRegistry = request.tools
        call = item.call
        tool = registry.get(call.name)
        item.timeout = call_timeout(tool, request.call_timeout)
        ctx = self._context(batch, call, item.token, item.timeout)

        def done(result: Any, error: BaseException | None) -> None:
            self.post(self._on_done, item, result, error)

        try:
            if tool is not None and is_async_tool(tool):
                self._aio.submit(
                    functools.partial(ainvoke_tool, registry, call, ctx), done, cancel=item.token
                )
            else:
                self._runner.submit(functools.partial(invoke_tool, registry, call, ctx), done)
        except (RunnerSaturated, ToolLoopClosed) as exc:
            self._report(item, Invocation("error", f"{call.name} was not run: {exc}", True))
            self._release(item)
            return
        item.timer = self.call_after(item.timeout, self._on_timeout, item)
        tell_quietly(
            request.reply_to,
            ToolCallStarted(
                batch_id=request.batch_id,
                session_id=request.session_id,
                call_id=item.call.id,
                name=item.call.name,
            ),
        )

    def _context(
        self, batch: _Batch, call: ToolCall, token: CancelToken, timeout: float
    ) -> ToolContext:
        request = batch.request
        return ToolContext(
            fs=request.fs,
            cancel=token,
            deadline=time.monotonic() + timeout,
            session_id=request.session_id,
            call_id=call.id,
            tool_name=call.name,
            services=request.services or ToolServices(),
        )

    def _on_done(self, item: _Call, result: Invocation | None, error: BaseException | None) -> None:
        """The call's thread has returned: report (unless done already) and free its slot."""
        if item.state == "running":
            if error is not None or result is None:
                result = Invocation("error", f"{item.call.name} failed: {error!r}", True)
            self._report(item, result)
            self._release(item)
        elif item.state == "zombie":
            self._release(item)  # its call was answered already; this late result is dropped
        self._pump()

    def _on_timeout(self, item: _Call) -> None:
        if item.state != "running":
            return
        timeout = item.timeout
        self._abandon(
            item,
            Invocation("timeout", f"{item.call.name} timed out after {timeout:g}s", True),
            "timeout",
            "timed out",
        )
        self._refuse_queued_over_the_bound()
        self._pump()

    def _release(self, item: _Call) -> None:
        """``item`` will not run (any more): free its slot and unblock its dependents."""
        was = item.state
        item.state = "done"
        _cancel(item.timer)
        _cancel(item.wait_timer)
        item.timer = item.wait_timer = None
        session = item.batch.session
        if item.holds_slot:
            item.holds_slot = False
            self._queue.finished(session)
        if was == "zombie":
            zombies = self._zombies.get(session)
            if zombies is not None:
                zombies.discard(item)
                if not zombies:
                    del self._zombies[session]
        for dependent in item.dependents:
            dependent.waiting_on.discard(item)
            if dependent.state == "waiting" and not dependent.waiting_on:
                self._unblocked.append(dependent)
        item.dependents.clear()
        batch = item.batch
        if batch.remaining == 0 and all(c.state == "done" for c in batch.calls):
            # Reported and every thread back: drop the batch <-> call cycle, so
            # the batch (its request, results, tokens) is freed by reference
            # counting now, not by a cyclic collection that stops every thread.
            batch.calls = []

    # -- results ---------------------------------------------------------------------

    def _report(self, item: _Call, invocation: Invocation) -> None:
        """Tell the requester the call's result; the batch report follows its last one."""
        batch = item.batch
        request = batch.request
        item.reported = True
        duration = (time.monotonic() - item.started) if item.started else 0.0
        call = item.call
        finished = ToolCallFinished(
            batch_id=request.batch_id,
            session_id=request.session_id,
            call_id=call.id,
            result=ToolResult(
                call_id=call.id,
                name=call.name,
                output=valid_unicode(invocation.output),
                is_error=invocation.is_error,
            ),
            outcome=invocation.outcome,
            duration_s=duration,
            stored_summary=(
                None
                if invocation.stored_summary is None
                else valid_unicode(invocation.stored_summary)
            ),
            explicit=valid_output(invocation.explicit),
        )
        tell_quietly(request.reply_to, finished)
        if self._telemetry is not None:
            self._telemetry.tool(
                request.trace,
                session_id=request.session_id,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
                outcome=invocation.outcome,
                is_error=invocation.is_error,
                output=finished.result.output,
                duration_s=duration,
            )
        batch.results[item.index] = finished
        batch.remaining -= 1
        if batch.remaining == 0:
            self._complete(batch)

    def _complete(self, batch: _Batch) -> None:
        request = batch.request
        if batch.registration is not None:
            batch.registration.remove()
            batch.registration = None
        if batch.lease is not None:
            batch.lease.release()  # every call is reported
            batch.lease = None
        if batch.plan_timer is not None:
            batch.plan_timer.cancel()
            batch.plan_timer = None
        if self._batches.get(batch.key) is batch:
            del self._batches[batch.key]
        results = tuple(r for r in batch.results if r is not None)
        tell_quietly(
            request.reply_to,
            ToolBatchFinished(
                batch_id=request.batch_id, session_id=request.session_id, results=results
            ),
        )

    # -- lifecycle ----------------------------------------------------------------

    def on_failure(self, *exc_info: Any) -> None:
        """Report every call this pool was responsible for, then die."""
        error = exc_info[1]
        self._abandon_all(f"Tool runner crashed ({type(error).__name__}: {error})", "crashed")

    def on_stop(self) -> None:
        self._abandon_all("Cancelled: the tool pool stopped", "cancelled")
        if self._owns_runner:
            self._runner.shutdown(timeout=0)
        if self._owns_aio and self._aio.started:
            # Its close waits for the loop thread: not on a dispatcher thread.
            threading.Thread(
                target=self._aio.close, name="fore-tool-aio-close", daemon=True
            ).start()

    def _abandon_all(self, message: str, outcome: str) -> None:
        for batch in list(self._batches.values()):
            for item in batch.calls:
                if item.reported:
                    continue
                item.token.cancel(outcome)
                self._report(item, Invocation(outcome, message, True))  # type: ignore[arg-type]


def _count(counts: dict[str, int], session: str, delta: int) -> None:
    count = counts.get(session, 0) + delta
    if count > 0:
        counts[session] = count
    else:
        counts.pop(session, None)
