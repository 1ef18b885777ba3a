"""The LLM event loop: one asyncio thread running every model request.

Actors never block on HTTP. The gateway actor hands requests to this loop,
which runs each as a task on one ``httpx.AsyncClient`` (connection pooling
across sessions) and tells the requester every stream event directly from the
loop thread.

A request is cancelled through its scope (``LlmRequest.scope``, a
:class:`~actors.core.cancel.CancelScope`), never by id: the loop that starts
it registers for the scope's cancel, so a cancel reaches only the loop (the
gateway's lane) its request went to. Cancelling cancels the task: the ``async
with`` around the HTTP stream exits, the connection is closed, and the
requester gets exactly one :class:`~messages.llm.LlmCancelled` -- nothing
after it. A request whose scope was cancelled before it got here (in the
gateway's mailbox, or queued on this loop) is answered ``LlmCancelled`` and
never sent: the scope is the record of the cancel, so the loop keeps no table
of early cancels and no state per request id beyond the requests running.

Every request gets exactly one terminal event (completed, failed or
cancelled), however early its cancel lands: a task cancelled before its
coroutine ever ran is answered by its done-callback.

Retries (connection errors, timeouts, 429 and 5xx, malformed streams) use the
model's :class:`~actors.llm.models.RetryPolicy`, honour ``Retry-After``, and are
also bounded by a loop-wide retry budget (a token bucket: retries may be at
most ~10% of requests once the initial allowance is spent), so a failing
endpoint is not hammered by a thousand sessions at once.
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
import threading
import time
import zlib
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import httpx

from fore.actors.core.cancel import Lease, Registration
from fore.actors.core.continuations import tell_quietly
from fore.actors.core.logs import get_logger
from fore.actors.llm import evloop
from fore.actors.llm.errors import LlmException
from fore.actors.llm.models import ChatModel, RetryPolicy
from fore.actors.llm.netio import FastAsyncTransport, env_proxies
from fore.messages.llm import (
    GatewayStats,
    LlmCancelled,
    LlmCompleted,
    LlmError,
    LlmFailed,
    LlmRequest,
    LlmRetrying,
    LlmTextDelta,
    LlmToolCallDelta,
)

log = get_logger(__name__)


class RetryBudget:
    """A token bucket shared by all requests of a loop (used on the loop thread only).

    Each retry spends a token, each success earns ``per_request``; with the
    bucket empty the loop stops retrying and fails with the attempt's typed
    error, so a broken endpoint sees about one request per session rather
    than ``max_retries`` times as many.
    """

    def __init__(
        self, *, initial: float = 20.0, per_request: float = 0.1, cap: float = 100.0
    ) -> None:
        self.tokens = initial
        self.per_request = per_request
        self.cap = cap

    def earn(self) -> None:
        self.tokens = min(self.cap, self.tokens + self.per_request)

    def spend(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def retry_delay(
    policy: RetryPolicy, error: LlmError, attempt: int, elapsed: float, rng: random.Random
) -> float | None:
    """Seconds to wait before the next attempt, or None to give up (pure)."""
    if not error.retryable or attempt > policy.max_retries:
        return None
    if error.retry_after_s is not None:
        delay = error.retry_after_s
    else:
        base = min(policy.max_backoff, policy.initial_backoff * (2 ** (attempt - 1)))
        delay = base * rng.uniform(1 - policy.jitter, 1 + policy.jitter)
    if elapsed + delay > policy.max_total_wait:
        return None
    return delay


@dataclass
class _Running:
    request: LlmRequest
    task: asyncio.Task[None]
    cancel_reason: str | None = None
    lease: Lease | None = None
    """Held while the request runs under its scope (released when it has ended)."""
    registration: Registration | None = None
    """Its scope's cancel callback (removed when it has ended: no reference cycle)."""

    def ended(self) -> None:
        """The request has ended: let go of its scope."""
        if self.registration is not None:
            self.registration.remove()
            self.registration = None
        if self.lease is not None:
            self.lease.release()
            self.lease = None


class LlmLoop:
    """The asyncio thread behind the gateway (owned by the Runtime).

    ``retry_budget`` is the loop-wide :class:`RetryBudget` every request's
    retries draw on (a default one when omitted; passing one tunes it, or lets
    a test start with it nearly empty).
    """

    def __init__(
        self,
        *,
        name: str = "fore-llm",
        max_connections: int = 4096,
        coalesce_ms: float = 10.0,
        client_shards: int = 64,
        retry_budget: RetryBudget | None = None,
        telemetry: Any = None,
        usage: Any = None,
    ) -> None:
        # Telemetry (issue 28): the runtime's Instrumentation (None: off) and its
        # UsageLedger (every completed request is recorded there).
        self._telemetry = telemetry
        self._usage = usage
        self._loop = evloop.new_event_loop()
        self._coalesce_s = max(0.0, coalesce_ms / 1000.0)
        self._ready = threading.Event()
        self._clients: list[httpx.AsyncClient] = []
        self._max_connections = max_connections
        self._shards = max(1, client_shards)
        self._tasks: dict[str, _Running] = {}
        """The requests running, by id: the loop's only state per request."""
        self._budget = retry_budget if retry_budget is not None else RetryBudget()
        self._rng = random.Random()
        self._closed = False
        self.started = self.completed = self.failed = self.cancelled = self.retries = 0
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the LLM loop did not start")

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        # Several clients instead of one: httpcore assigns every request by
        # scanning its whole pool (O(connections x requests), encode/httpcore
        # #1035), which dominates CPU with hundreds of concurrent streams.
        # Sharded by session, each pool stays small and a session's
        # connections stay together.
        # One TLS context for all of them: loading the CA bundle costs ~40 ms
        # per client, and a context is safe to share.
        per_shard = max(1, self._max_connections // self._shards)
        tls = httpx.create_ssl_context()
        limits = httpx.Limits(
            max_connections=per_shard, max_keepalive_connections=min(per_shard, 64)
        )
        # HTTP on aiohttp under httpx's API (see actors.llm.netio), unless the
        # environment configures a proxy: then httpx's own transports, which
        # know how to reach one.
        fast = not env_proxies()
        self._clients = [
            httpx.AsyncClient(
                verify=tls,
                limits=limits,
                timeout=httpx.Timeout(30.0),
                transport=FastAsyncTransport(verify=tls, limits=limits) if fast else None,
            )
            for _ in range(self._shards)
        ]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    # -- thread-safe API ---------------------------------------------------------

    def submit(self, request: LlmRequest) -> None:
        """Start a request (from any thread)."""
        if self._closed:
            _tell(
                request.reply_to,
                LlmFailed(
                    request_id=request.request_id,
                    error=LlmError(kind="connection", message="the LLM gateway is shut down"),
                ),
            )
            return
        try:
            self._loop.call_soon_threadsafe(self._start, request)
        except RuntimeError:  # closed between the check and the call
            _tell(
                request.reply_to,
                LlmFailed(
                    request_id=request.request_id,
                    error=LlmError(kind="connection", message="the LLM gateway is shut down"),
                ),
            )

    def in_flight(self) -> int:
        return len(self._tasks)

    def call_soon_threadsafe(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the loop thread (from any thread; a no-op once closed)."""
        if self._closed:
            return
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed between the check and the call
            pass

    def stats(self) -> GatewayStats:
        return GatewayStats(
            in_flight=len(self._tasks),
            started=self.started,
            completed=self.completed,
            failed=self.failed,
            cancelled=self.cancelled,
            retries=self.retries,
        )

    def close(self, timeout: float = 5.0) -> bool:
        """Cancel everything in flight, close the HTTP client, stop the thread."""
        if self._closed:
            return True
        self._closed = True
        done: Future[None] = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            done.result(timeout)
        except Exception as exc:
            log.warning("llm_loop_shutdown_incomplete", error=repr(exc))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- loop thread -----------------------------------------------------------------

    def _start(self, request: LlmRequest) -> None:
        rid = request.request_id
        if rid in self._tasks:
            _tell(
                request.reply_to,
                LlmFailed(
                    request_id=rid,
                    error=LlmError(kind="bad_request", message="duplicate request id"),
                ),
            )
            return
        self.started += 1
        scope = request.scope
        lease = scope.lease("llm")  # first the lease, then the check
        if self._closed or scope.cancel_called:
            # Its cancel came first (or the loop is closing): answer, never send.
            lease.release()
            self.cancelled += 1
            reason = (scope.reason or "cancelled") if scope.cancel_called else None
            _tell(
                request.reply_to,
                LlmCancelled(request_id=rid, reason=reason or "runtime shutting down"),
            )
            return
        task = self._loop.create_task(self._run(request))
        running = self._tasks[rid] = _Running(request, task, lease=lease)
        task.add_done_callback(functools.partial(self._on_task_done, rid))
        running.registration = scope.on_cancel(functools.partial(self._scope_cancelled, running))

    def _scope_cancelled(self, running: _Running, reason: str) -> None:
        """The request's scope was cancelled (on the canceller's thread): cancel it here."""
        try:
            self._loop.call_soon_threadsafe(self._cancel, running, reason)
        except RuntimeError:
            pass  # the loop is closed: the request ended with it

    def _cancel(self, running: _Running, reason: str) -> None:
        # This very request, if it still runs (not one that reused its id since).
        if self._tasks.get(running.request.request_id) is not running:
            return
        if running.cancel_reason is not None:
            return
        running.cancel_reason = reason
        running.task.cancel()

    def _on_task_done(self, rid: str, task: asyncio.Task[None]) -> None:
        """Answer a request whose task ended without running ``_run`` (cancelled unstarted).

        ``task.cancel()`` on a task whose coroutine has not started yet throws
        into the coroutine before its first line, so ``_run``'s handlers never
        run: no event would be sent and the entry would leak.
        """
        running = self._tasks.get(rid)
        if running is None or running.task is not task:
            return  # _run answered and cleaned up itself
        del self._tasks[rid]
        running.ended()
        if task.cancelled():
            self.cancelled += 1
            reason = running.cancel_reason or "cancelled"
            _tell(running.request.reply_to, LlmCancelled(request_id=rid, reason=reason))
            return
        self.failed += 1
        exc = task.exception()
        log.error("llm_task_ended_unanswered", request_id=rid, error=repr(exc))
        _tell(
            running.request.reply_to,
            LlmFailed(
                request_id=rid,
                error=LlmError(kind="protocol", message=f"request task ended: {exc!r}"),
            ),
        )

    async def _run(self, request: LlmRequest) -> None:
        model: ChatModel = request.model
        reply_to = request.reply_to
        rid = request.request_id
        started = time.monotonic()
        attempt = 0

        emit = _DeltaCoalescer(
            self._loop,
            reply_to,
            rid,
            self._coalesce_s,
            request.stream_deltas,
            deliver_tools=request.stream_tool_deltas,
        )
        # Telemetry (issue 28): the request's span, a child of ``request.trace``.
        span = None if self._telemetry is None else self._telemetry.llm(request)
        asked, sink = request, emit
        if span is not None and request.stream:
            # Time to first chunk: the model also reports tool-call fragments (the
            # coalescer drops what the requester did not ask for), so an answer
            # that starts with a call has a first chunk too.
            sink = span.first_chunk(emit)
            if request.stream_deltas and not request.stream_tool_deltas:
                asked = request.model_copy(update={"stream_tool_deltas": True})

        try:
            while True:
                attempt += 1
                try:
                    client = self._clients[zlib.crc32(request.session_id.encode()) % self._shards]
                    result = await model.stream(asked, sink, client)
                except LlmException as exc:
                    emit.flush()
                    delay = retry_delay(
                        model.retry, exc.error, attempt, time.monotonic() - started, self._rng
                    )
                    error = exc.error
                    if delay is not None and not self._budget.spend():
                        delay = None
                        error = error.model_copy(
                            update={"message": f"{error.message} (loop retry budget exhausted)"}
                        )
                        log.warning("llm_retry_budget_exhausted", request_id=rid, kind=error.kind)
                    if delay is None:
                        self.failed += 1
                        if span is not None:
                            span.failed(error)
                        _tell(reply_to, LlmFailed(request_id=rid, error=error, attempts=attempt))
                        return
                    self.retries += 1
                    if span is not None:
                        span.retrying(attempt + 1, exc.error.kind, delay)
                    _tell(
                        reply_to,
                        LlmRetrying(
                            request_id=rid,
                            attempt=attempt + 1,
                            delay_s=delay,
                            reason=f"{exc.error.kind}: {exc.error.message}",
                            discarded_chars=emit.take_delivered(),
                        ),
                    )
                    await asyncio.sleep(delay)
                    continue
                emit.flush()
                self._budget.earn()
                self.completed += 1
                self._observe_completed(request, result, attempt, span)
                _tell(
                    reply_to,
                    LlmCompleted(
                        request_id=rid,
                        message=result.message,
                        usage=result.usage,
                        finish_reason=result.finish_reason,
                        attempts=attempt,
                        duration_s=time.monotonic() - started,
                    ),
                )
                return
        except asyncio.CancelledError:
            emit.discard()
            running = self._tasks.get(rid)
            self.cancelled += 1
            reason = (running.cancel_reason if running else None) or "cancelled"
            if span is not None:
                span.cancelled(reason)
            _tell(reply_to, LlmCancelled(request_id=rid, reason=reason))
        except Exception as exc:
            emit.flush()
            self.failed += 1
            log.exception("llm_request_crashed", request_id=rid)
            crash = LlmError(kind="protocol", message=f"unexpected {type(exc).__name__}: {exc}")
            if span is not None:
                span.failed(crash)
            _tell(reply_to, LlmFailed(request_id=rid, error=crash, attempts=attempt))
        finally:
            running = self._tasks.pop(rid, None)
            if running is not None:
                running.ended()

    def _observe_completed(
        self, request: LlmRequest, result: Any, attempts: int, span: Any
    ) -> None:
        """A completed request's usage (ledger, always) and span (telemetry on); issue 28.

        Bookkeeping never fails a request: an error here is logged, and the
        answer is delivered all the same.
        """
        try:
            self._record(request, result, attempts, span)
        except Exception:
            log.exception("llm_usage_record_failed", request_id=request.request_id)

    def _record(self, request: LlmRequest, result: Any, attempts: int, span: Any) -> None:
        cost = None
        if self._usage is not None:
            model = request.model
            cost = self._usage.record(
                request.session_id,
                request.purpose,
                request.model_name or str(getattr(model, "name", "") or ""),
                result.usage,
                getattr(model, "price", None),
            )
        if span is not None:
            span.completed(
                message=result.message,
                usage=result.usage,
                finish_reason=result.finish_reason,
                attempts=attempts,
                response_model=getattr(result, "response_model", None),
                cost=cost,
            )

    async def _shutdown(self) -> None:
        for running in list(self._tasks.values()):
            running.cancel_reason = running.cancel_reason or "runtime shutting down"
            running.task.cancel()
        tasks = [r.task for r in self._tasks.values()]
        if tasks:
            await asyncio.wait(tasks, timeout=3)
        for client in self._clients:
            await client.aclose()


class _DeltaCoalescer:
    """Merges consecutive text deltas of one request into fewer messages.

    A UI needs text promptly, not one actor message per token: text is
    buffered and sent at most every ``window`` seconds (a loop timer flushes a
    quiet buffer), and always before any other event, so order is kept and
    the terminal event never waits. Text may be emitted as a plain ``str``
    (the message is built per flush, not per token). With ``deliver=False`` deltas are dropped
    (the requester only wants the final answer); ``deliver_tools=False`` drops
    tool-call fragments only.
    """

    __slots__ = (
        "_deliver",
        "_deliver_tools",
        "_delivered",
        "_handle",
        "_last",
        "_loop",
        "_parts",
        "_reply_to",
        "_rid",
        "_window",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        reply_to: Any,
        rid: str,
        window: float,
        deliver: bool,
        *,
        deliver_tools: bool | None = None,
    ) -> None:
        self._loop = loop
        self._reply_to = reply_to
        self._rid = rid
        self._window = window
        self._deliver = deliver
        self._deliver_tools = deliver if deliver_tools is None else deliver and deliver_tools
        self._parts: list[str] = []
        self._delivered = 0
        """Characters of text sent since the attempt began (void if it is retried)."""
        # Nothing sent yet: the first delta goes out at once. (Not 0.0: the
        # loop's clock is monotonic time since boot, which on a freshly
        # booted machine is shorter than a long window.)
        self._last = -math.inf
        self._handle: asyncio.TimerHandle | None = None

    def __call__(self, event: Any) -> None:
        # Text comes as a plain ``str`` from the HTTP provider (a message object
        # per token would be built only to be merged here) or as LlmTextDelta.
        if isinstance(event, str | LlmTextDelta):
            if not self._deliver:
                return
            self._parts.append(event if isinstance(event, str) else event.text)
            now = self._loop.time()
            if self._window == 0 or now - self._last >= self._window:
                self.flush()
            elif self._handle is None:
                self._handle = self._loop.call_at(self._last + self._window, self.flush)
            return
        if isinstance(event, LlmToolCallDelta) and not self._deliver_tools:
            return
        self.flush()
        _tell(self._reply_to, event)

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._parts:
            text = "".join(self._parts)
            self._parts.clear()
            self._last = self._loop.time()
            self._delivered += len(text)
            _tell(self._reply_to, LlmTextDelta.model_construct(request_id=self._rid, text=text))

    def take_delivered(self) -> int:
        """Characters delivered by the attempt that just failed (and start counting anew)."""
        delivered, self._delivered = self._delivered, 0
        return delivered

    def discard(self) -> None:
        """Drop buffered text (the request was cancelled: nothing may follow)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._parts.clear()


def _tell(address: Any, message: Any) -> None:
    """:func:`tell_quietly`, for a ``reply_to`` that may be None (nobody listens)."""
    if address is not None:
        tell_quietly(address, message)
