"""The tool executor pool: one shared actor running every session's tool calls.

It receives :class:`~messages.tools.RunToolBatch` requests and runs their calls
on :class:`~actors.tools.runner.ThreadRunner` threads -- never on a dispatcher
thread -- under a global cap and a per-session cap with round-robin fairness
(:class:`~actors.tools.scheduling.FairQueue`). Within a batch, calls writing
the same path run in call order and exclusive tools run alone.

Every call ends with exactly one :class:`~messages.tools.ToolCallFinished`:
its own result; ``invalid`` / ``unknown_tool`` before running; ``timeout``
when its deadline passes (its token is cancelled, a shell's process group
killed, and the pool stops waiting for it); ``cancelled`` on request; or
``crashed`` if this actor itself fails -- then ``on_failure`` reports every
call it was responsible for before the supervisor restarts it. One call's
failure never affects its siblings.
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
)
from actors.tools.cancel import CancelToken
from actors.tools.paths import write_key
from actors.tools.runner import ThreadRunner
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


@dataclass(eq=False)
class _Call:
    batch: _Batch
    index: int
    call: ToolCall
    waiting_on: set[int]
    state: str = "waiting"  # waiting | ready | running | done
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

    @property
    def session(self) -> str:
        return self.request.session_id


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
        self._batches: dict[str, _Batch] = {}
        self._max_seen = 0
        self._abandoned = 0

    # -- requests -------------------------------------------------------------

    @handles(RunToolBatch)
    def _on_run(self, request: RunToolBatch) -> None:
        if request.batch_id in self._batches:
            raise ValueError(f"batch {request.batch_id!r} is already running")
        registry: ToolRegistry = request.tools
        batch = _Batch(request=request)
        shapes: list[CallShape] = []
        early: dict[int, Invocation] = {}
        for index, call in enumerate(request.calls):
            tool = registry.get(call.name)
            shape = CallShape(frozenset(), False)
            if tool is None:
                early[index] = invoke_tool(
                    registry, call, self._context(batch, call, CancelToken())
                )
            else:
                args = parse_args(tool, call)
                if isinstance(args, Invocation):
                    early[index] = args
                else:
                    root = getattr(request.fs, "root", None)
                    writes = frozenset(
                        write_key(path, None if root is None else str(root))
                        for path in tool.write_paths(args)
                    )
                    shape = CallShape(writes, tool.exclusive)
            shapes.append(shape)
        deps = batch_dependencies(shapes)
        batch.dependents = [[] for _ in request.calls]
        for j, waits in enumerate(deps):
            for i in waits:
                batch.dependents[i].append(j)
        batch.calls = [_Call(batch, i, call, set(deps[i])) for i, call in enumerate(request.calls)]
        batch.results = [None] * len(batch.calls)
        batch.remaining = len(batch.calls)
        self._batches[request.batch_id] = batch
        self._queue.set_session_cap(request.session_id, request.max_concurrency)
        if not batch.calls:
            self._complete(batch)
            return
        for index, invocation in early.items():
            self._finish(batch.calls[index], invocation)
        for item in batch.calls:
            if item.state == "waiting" and not item.waiting_on:
                item.state = "ready"
                self._queue.push(batch.session, item)
        self._pump()

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
        registry: ToolRegistry = request.tools
        call = item.call

        def done(result: Any, error: BaseException | None) -> None:
            self.post(self._on_done, item, result, error)

        self._runner.submit(functools.partial(invoke_tool, registry, call, ctx), done)

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
        finished = ToolCallFinished(
            batch_id=request.batch_id,
            session_id=request.session_id,
            result=ToolResult(
                call_id=item.call.id,
                name=item.call.name,
                output=invocation.output,
                is_error=invocation.is_error,
            ),
            outcome=invocation.outcome,
            duration_s=(time.monotonic() - item.started) if was_running else 0.0,
            stored_summary=invocation.stored_summary,
        )
        batch.results[item.index] = finished
        batch.remaining -= 1
        _tell(request.reply_to, finished)
        for j in batch.dependents[item.index]:
            dependent = batch.calls[j]
            dependent.waiting_on.discard(item.index)
            if dependent.state == "waiting" and not dependent.waiting_on:
                dependent.state = "ready"
                self._queue.push(batch.session, dependent)
        if batch.remaining == 0:
            self._complete(batch)

    def _complete(self, batch: _Batch) -> None:
        request = batch.request
        self._batches.pop(request.batch_id, None)
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
