"""The tool executor pool: one shared actor running every session's tool calls.

It receives :class:`~messages.tools.RunToolBatch` requests and runs their calls
on :class:`~actors.tools.runner.ThreadRunner` threads -- never on a dispatcher
thread -- under a global cap and a per-session cap with round-robin fairness
(:class:`~actors.tools.scheduling.FairQueue`). Within a batch, calls writing
the same file run in call order, a ``shell`` call is ordered against every
write, and exclusive tools run alone.

A batch is *planned* first, on a runner thread: arguments are validated, each
tool's ``write_paths`` is asked, and the paths are resolved through the
session's filesystem view to canonical workspace paths (so ``a.py``,
``./a.py`` and a symlink to it are one file). Planning runs tool code and
filesystem syscalls, which must not run on the actor's thread: a raising
``write_paths`` then fails only its own call, and a hanging one only its own
batch (it times out), never the pool.

Every call ends with exactly one :class:`~messages.tools.ToolCallFinished`:
its own result; ``invalid`` / ``unknown_tool`` before running; ``error`` when
planning it failed or no runner thread is free; ``timeout`` when its deadline
passes (its token is cancelled, a shell's process group killed, and the pool
stops waiting for it); ``cancelled`` on request; or ``crashed`` if this actor
itself fails -- then ``on_failure`` reports every call it was responsible for
before the supervisor restarts it. One call's failure never affects its
siblings, and one session's requests never affect another session's.
"""

from __future__ import annotations

import functools
import operator
import time
from dataclasses import dataclass, field
from typing import Any

from pykka import ActorDeadError

from actors.core.pooled import PooledActor, handles
from actors.core.timer import TimerHandle
from actors.tools.base import (
    Invocation,
    ToolContext,
    ToolRegistry,
    ToolServices,
    invoke_tool,
    parse_args,
    unknown_tool,
)
from actors.tools.cancel import CancelToken
from actors.tools.paths import write_key
from actors.tools.runner import RunnerSaturated, ThreadRunner
from actors.tools.scheduling import CallShape, FairQueue, batch_dependencies
from messages.conversation import ToolCall, ToolResult
from messages.tools import (
    CancelToolCalls,
    GetPoolStats,
    PoolStats,
    RunToolBatch,
    ToolBatchFinished,
    ToolCallFinished,
    ToolCallStarted,
)

DEFAULT_MAX_RUNNING = 64
DEFAULT_PER_SESSION = 8


Plan = Invocation | CallShape
"""What planning says about one call: its early result, or how it must be scheduled."""


@dataclass(eq=False)
class _Call:
    batch: _Batch
    index: int
    call: ToolCall
    waiting_on: set[int] = field(default_factory=set)
    state: str = "planning"  # planning | waiting | ready | running | done
    token: CancelToken = field(default_factory=CancelToken)
    timer: TimerHandle | None = None
    started: float = 0.0


@dataclass(eq=False)
class _Batch:
    request: RunToolBatch
    calls: list[_Call] = field(default_factory=list)
    dependents: list[list[int]] = field(default_factory=list)
    results: list[ToolCallFinished | None] = field(default_factory=list)
    remaining: int = 0
    planned: bool = False
    plan_timer: TimerHandle | None = None

    @property
    def session(self) -> str:
        return self.request.session_id

    @property
    def key(self) -> tuple[str, str]:
        return (self.request.session_id, self.request.batch_id)


def plan_calls(registry: ToolRegistry, calls: tuple[ToolCall, ...], fs: Any) -> list[Plan]:
    """Validate each call and work out what it writes (runs on a runner thread).

    Never raises: a tool whose ``write_paths`` fails gets an error result
    naming the exception, and only that call does.
    """
    plans: list[Plan] = []
    for call in calls:
        tool = registry.get(call.name)
        if tool is None:
            plans.append(unknown_tool(registry, call))
            continue
        args = parse_args(tool, call)
        if isinstance(args, Invocation):
            plans.append(args)
            continue
        try:
            writes = frozenset(ordering_key(fs, path) for path in tool.write_paths(args))
            exclusive = bool(getattr(tool, "exclusive", False))
            shape = CallShape(writes, exclusive, bool(getattr(tool, "writes_all", False)))
        except Exception as exc:
            plans.append(
                Invocation(
                    "error",
                    f"{tool.name} was not run: working out which paths it writes failed "
                    f"({type(exc).__name__}: {exc})",
                    True,
                )
            )
            continue
        plans.append(shape)
    return plans


def ordering_key(fs: Any, path: str) -> str:
    """The key under which writes to ``path`` are ordered: its canonical workspace path.

    Resolving through the view (symlinks inside the workspace followed) makes
    two spellings of one file -- ``a.py``, ``./a.py``, ``<root>/a.py``, a
    symlink to it, a path through a symlinked directory -- one key. A path the
    view refuses keys lexically; its call will fail on its own.
    """
    resolve = getattr(fs, "resolve", None)
    if callable(resolve):
        try:
            return str(resolve(path))
        except Exception:  # any refusal: fall back to the lexical key
            pass
    root = getattr(fs, "root", None)
    return str(write_key(path, None if root is None else str(root)))


class ToolPool(PooledActor):
    """Runs tool calls for every session (see module docs)."""

    def __init__(
        self,
        *,
        runner: ThreadRunner | None = None,
        max_running: int = DEFAULT_MAX_RUNNING,
        per_session: int = DEFAULT_PER_SESSION,
        registry_name: str | None = None,
    ) -> None:
        super().__init__()
        self.registry_name = registry_name
        self._owns_runner = runner is None
        self._runner = runner or ThreadRunner()
        self._queue: FairQueue[_Call] = FairQueue(global_cap=max_running, session_cap=per_session)
        self._batches: dict[tuple[str, str], _Batch] = {}
        """Running batches by (session id, batch id): ids need only be unique per session."""
        self._max_seen = 0
        self._abandoned = 0

    # -- requests -------------------------------------------------------------

    @handles(RunToolBatch)
    def _on_run(self, request: RunToolBatch) -> None:
        if (request.session_id, request.batch_id) in self._batches:
            self._refuse_duplicate(request)
            return
        batch = _Batch(request=request)
        batch.calls = [_Call(batch, i, call) for i, call in enumerate(request.calls)]
        batch.dependents = [[] for _ in request.calls]
        batch.results = [None] * len(batch.calls)
        batch.remaining = len(batch.calls)
        self._batches[batch.key] = batch
        self._queue.set_session_cap(request.session_id, request.max_concurrency)
        if not batch.calls:
            self._complete(batch)
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

    def _refuse_duplicate(self, request: RunToolBatch) -> None:
        """A batch id already running for this session: answer every call with an error.

        Raising here would fail the pool actor and every session's calls with it.
        """
        self.log.warning(
            "tool_batch_duplicate", session_id=request.session_id, batch_id=request.batch_id
        )
        message = (
            f"Not run: batch {request.batch_id!r} is already running for session "
            f"{request.session_id!r}; a batch id must be unique among running batches"
        )
        results = tuple(
            self._report(request, call, Invocation("error", message, True), 0.0)
            for call in request.calls
        )
        _tell(
            request.reply_to,
            ToolBatchFinished(
                batch_id=request.batch_id, session_id=request.session_id, results=results
            ),
        )

    def _on_planned(self, batch: _Batch, plans: Any, error: BaseException | None) -> None:
        if batch.planned or self._batches.get(batch.key) is not batch:
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
        shapes = [CallShape(frozenset(), False) if isinstance(p, Invocation) else p for p in plans]
        for j, waits in enumerate(batch_dependencies(shapes)):
            item = batch.calls[j]
            if item.state == "done":
                continue  # cancelled while the batch was being planned
            item.state = "waiting"
            item.waiting_on = {i for i in waits if batch.calls[i].state != "done"}
            for i in item.waiting_on:
                batch.dependents[i].append(j)
        for item, plan in zip(list(batch.calls), plans, strict=True):
            if isinstance(plan, Invocation) and item.state != "done":
                self._finish(item, plan)
        for item in batch.calls:
            if item.state == "waiting" and not item.waiting_on:
                item.state = "ready"
                self._queue.push(batch.session, item)
        self._pump()

    def _on_plan_timeout(self, batch: _Batch) -> None:
        if batch.planned or self._batches.get(batch.key) is not batch:
            return
        timeout = batch.request.call_timeout
        self._abandoned += 1  # the planning thread is stuck in the tool's write_paths
        self._fail_planning(
            batch,
            Invocation(
                "timeout",
                f"Not run: working out which paths the batch writes took longer than {timeout:g}s",
                True,
            ),
        )

    def _fail_planning(self, batch: _Batch, invocation: Invocation) -> None:
        batch.planned = True
        if batch.plan_timer is not None:
            batch.plan_timer.cancel()
            batch.plan_timer = None
        for item in list(batch.calls):
            if item.state != "done":
                self._finish(item, invocation)

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
                if item.state == "done" or (wanted and item.call.id not in wanted):
                    continue
                if item.state == "ready":
                    self._queue.remove(batch.session, functools.partial(operator.is_, item))
                item.token.cancel(message.reason)
                self._finish(item, Invocation("cancelled", f"Cancelled: {message.reason}", True))
                count += 1
        self._pump()
        return count

    @handles(GetPoolStats)
    def _on_stats(self, _message: GetPoolStats) -> PoolStats:
        return PoolStats(
            running=self._queue.running_total,
            queued=self._queue.queued(),
            sessions=self._queue.sessions(),
            max_running_seen=self._max_seen,
            abandoned_threads=self._abandoned,
            per_session_running=self._queue.running_by_session(),
        )

    # -- running -----------------------------------------------------------------

    def _pump(self) -> None:
        while (picked := self._queue.pop_runnable()) is not None:
            self._start(picked[1])
        self._max_seen = max(self._max_seen, self._queue.running_total)

    def _start(self, item: _Call) -> None:
        batch = item.batch
        request = batch.request
        item.state = "running"
        item.started = time.monotonic()
        ctx = self._context(batch, item.call, item.token)
        registry: ToolRegistry = request.tools
        call = item.call

        def done(result: Any, error: BaseException | None) -> None:
            self.post(self._on_done, item, result, error)

        try:
            self._runner.submit(functools.partial(invoke_tool, registry, call, ctx), done)
        except RunnerSaturated as exc:
            self._finish(item, Invocation("error", f"{call.name} was not run: {exc}", True))
            return
        item.timer = self.call_after(request.call_timeout, self._on_timeout, item)
        _tell(
            request.reply_to,
            ToolCallStarted(
                batch_id=request.batch_id,
                session_id=request.session_id,
                call_id=item.call.id,
                name=item.call.name,
            ),
        )

    def _context(self, batch: _Batch, call: ToolCall, token: CancelToken) -> ToolContext:
        request = batch.request
        return ToolContext(
            fs=request.fs,
            cancel=token,
            deadline=time.monotonic() + request.call_timeout,
            session_id=request.session_id,
            call_id=call.id,
            tool_name=call.name,
            services=request.services or ToolServices(),
        )

    def _on_done(self, item: _Call, result: Invocation | None, error: BaseException | None) -> None:
        if item.state != "running":
            return  # already reported (timeout or cancel); the late result is dropped
        if error is not None or result is None:
            result = Invocation("error", f"{item.call.name} failed: {error!r}", True)
        self._finish(item, result)
        self._pump()

    def _on_timeout(self, item: _Call) -> None:
        if item.state != "running":
            return
        timeout = item.batch.request.call_timeout
        item.token.cancel("timeout")
        self._abandoned += 1
        self._finish(
            item,
            Invocation("timeout", f"{item.call.name} timed out after {timeout:g}s", True),
        )
        self._pump()

    def _finish(self, item: _Call, invocation: Invocation) -> None:
        batch = item.batch
        request = batch.request
        was_running = item.state == "running"
        item.state = "done"
        if item.timer is not None:
            item.timer.cancel()
            item.timer = None
        if was_running:
            self._queue.finished(batch.session)
        duration = (time.monotonic() - item.started) if was_running else 0.0
        batch.results[item.index] = self._report(request, item.call, invocation, duration)
        batch.remaining -= 1
        for j in batch.dependents[item.index]:
            dependent = batch.calls[j]
            dependent.waiting_on.discard(item.index)
            if dependent.state == "waiting" and not dependent.waiting_on:
                dependent.state = "ready"
                self._queue.push(batch.session, dependent)
        if batch.remaining == 0:
            self._complete(batch)

    def _report(
        self, request: RunToolBatch, call: ToolCall, invocation: Invocation, duration: float
    ) -> ToolCallFinished:
        """Tell the requester one call's result (and return it for the batch report)."""
        finished = ToolCallFinished(
            batch_id=request.batch_id,
            session_id=request.session_id,
            result=ToolResult(
                call_id=call.id,
                name=call.name,
                output=invocation.output,
                is_error=invocation.is_error,
            ),
            outcome=invocation.outcome,
            duration_s=duration,
            stored_summary=invocation.stored_summary,
            explicit=invocation.explicit,
        )
        _tell(request.reply_to, finished)
        return finished

    def _complete(self, batch: _Batch) -> None:
        request = batch.request
        if batch.plan_timer is not None:
            batch.plan_timer.cancel()
            batch.plan_timer = None
        if self._batches.get(batch.key) is batch:
            del self._batches[batch.key]
        results = tuple(r for r in batch.results if r is not None)
        _tell(
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

    def _abandon_all(self, message: str, outcome: str) -> None:
        for batch in list(self._batches.values()):
            for item in batch.calls:
                if item.state == "done":
                    continue
                item.token.cancel(outcome)
                self._finish(item, Invocation(outcome, message, True))  # type: ignore[arg-type]


def _tell(address: Any, message: Any) -> None:
    try:
        address.tell(message)
    except ActorDeadError:
        pass  # the requester is gone (its session closed); nothing to report to
