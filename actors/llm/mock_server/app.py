"""The mock server's ASGI application: its state, per-request bookkeeping, routes.

:class:`MockLlmApp` holds the state (script cursors, queued faults, records, counters)
behind one lock, serves each request of either API with the same bookkeeping
(:meth:`MockLlmApp.serve`) -- OpenAI's ``POST /v1/chat/completions``
(:mod:`~fore.actors.llm.mock_server.openai`) and Anthropic's ``/v1/messages``
(:mod:`~fore.actors.llm.mock_server.anthropic`) -- writes a streamed answer on its
latency model (:meth:`MockLlmApp._stream_body`), and serves the ``/mock`` control
endpoints. It is the one stateful piece; what it checks, answers and frames lives in
the modules beside it, and how it is served (a thread, a process) in
:mod:`~fore.actors.llm.mock_server.server`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Final, cast

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fore.actors.llm.codec import dumps
from fore.actors.llm.mock_server.faults import (
    _CutConnection,
    _error_response,
    _Fault,
    _QueuedFault,
)
from fore.actors.llm.mock_server.replies import _Exchange, generated_text
from fore.actors.llm.mock_server.settings import (
    DEFAULT_PURPOSE,
    DEFAULT_SESSION,
    FaultKind,
    FaultSpec,
    MockSettings,
    MockStats,
    Outcome,
    RecordedRequest,
    _Counters,
    _Record,
)
from fore.actors.llm.mock_server.sse import _CUT, _LINGER
from fore.actors.llm.mock_server.strict import (
    _header_float,
)
from fore.actors.llm.script import ScriptCursor, ScriptError, ScriptFile, ScriptReply

_SHORT_SLEEP_S: Final = 0.2


_FLUSH_BYTES: Final = 32 * 1024


Responder = Callable[[_Record, Mapping[str, str], Any, Any, int], Coroutine[Any, Any, Response]]
"""An API's answer to one request: ``respond(record, headers, body, receive, size)``
(``body`` the decoded JSON or None, ``size`` its length in bytes as sent)."""


class MockLlmApp:
    """The mock server's ASGI application and its state (thread-safe Python API).

    ``asgi`` is the starlette app. Every public method may be called from any
    thread: state is guarded by one lock, held only for short bookkeeping.
    """

    def __init__(
        self, script: ScriptFile | None = None, settings: MockSettings | None = None
    ) -> None:
        self.settings = settings or MockSettings()
        self._lock = threading.Lock()
        self._script = script
        self._cursors: dict[str, ScriptCursor] = {}
        self._faults: list[_QueuedFault] = []
        self._records: deque[_Record] = deque(maxlen=self.settings.record_limit)
        self._seq = 0
        self._counters = _Counters()
        self._closing = asyncio.Event()
        # The two APIs: each its own module, over this state.
        from fore.actors.llm.mock_server.anthropic import AnthropicMessages
        from fore.actors.llm.mock_server.openai import ChatCompletions

        self.chat = ChatCompletions(self)
        self.anthropic = AnthropicMessages(self)  # issue 27
        self.asgi = Starlette(
            routes=[
                *self.chat.routes(),
                *self.anthropic.routes(),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/mock/stats", self._stats_endpoint, methods=["GET"]),
                Route("/mock/requests", self._requests_endpoint, methods=["GET"]),
                Route("/mock/faults", self._faults_endpoint, methods=["POST"]),
                Route("/mock/reset", self._reset_endpoint, methods=["POST"]),
                Route("/mock/script", self._script_endpoint, methods=["POST", "DELETE"]),
                Route("/mock/health", self._health_endpoint, methods=["GET"]),
            ]
        )

    # -- Python API --------------------------------------------------------- #

    def stats(self) -> MockStats:
        """A snapshot of the counters."""
        with self._lock:
            c = self._counters
            return MockStats(
                requests=c.requests,
                streams_started=c.streams_started,
                streams_completed=c.streams_completed,
                completions=c.completions,
                disconnects=c.disconnects,
                faults_served=c.faults_served,
                faults_by_kind=dict(c.faults_by_kind),
                bad_requests=c.bad_requests,
                in_flight=c.in_flight,
                max_in_flight=c.max_in_flight,
                disconnected_request_ids=tuple(c.disconnected_ids),
            )

    def requests(self) -> tuple[RecordedRequest, ...]:
        """The recorded requests in arrival order (the last ``record_limit``)."""
        with self._lock:
            records = list(self._records)
            return tuple(r.snapshot() for r in records)

    def queue_fault(self, spec: FaultSpec) -> None:
        """Inject ``spec.fault`` into the next ``spec.count`` matching requests."""
        with self._lock:
            self._faults.append(_QueuedFault(spec, spec.count))

    def reset(self) -> None:
        """Forget counters, records (``seq`` restarts at 1), queued faults and script
        progress; the script itself stays."""
        with self._lock:
            in_flight = self._counters.in_flight
            self._counters = _Counters(in_flight=in_flight, max_in_flight=in_flight)
            self._records.clear()
            self._seq = 0
            self._faults.clear()
            self._cursors.clear()
        self.anthropic.reset()  # its prompt cache (issue 27)

    def set_script(self, script: ScriptFile | None) -> None:
        """Serve ``script`` from now on (``None``: generated text); progress restarts."""
        with self._lock:
            self._script = script
            self._cursors.clear()

    @property
    def script(self) -> ScriptFile | None:
        """The script being served, ``None`` in generated-text mode."""
        with self._lock:
            return self._script

    def begin_close(self) -> None:
        """Abort in-flight responses (call on the server's event loop)."""
        self._closing.set()

    # -- bookkeeping -------------------------------------------------------- #

    def _new_record(self, headers: Mapping[str, str], body: Any) -> _Record:
        with self._lock:
            self._seq += 1
            self._counters.requests += 1
            record = _Record(
                seq=self._seq,
                session=headers.get("x-fore-session") or DEFAULT_SESSION,
                purpose=headers.get("x-fore-purpose") or DEFAULT_PURPOSE,
                request_id=headers.get("x-fore-request-id"),
                body=body,
                headers=dict(headers.items()),
                arrived_s=time.monotonic(),
            )
            self._records.append(record)
            return record

    def _enter(self) -> None:
        with self._lock:
            c = self._counters
            c.in_flight += 1
            c.max_in_flight = max(c.max_in_flight, c.in_flight)

    def _finish(self, record: _Record, outcome: Outcome | None = None) -> None:
        """Settle a request -- outcome, counters, in-flight -- once; later calls are no-ops.

        Called as soon as the outcome is known, *before* the last bytes are
        written, so a client that has read a whole response already finds it
        in the stats and records; only disconnects need polling.
        """
        with self._lock:
            if record.finished:
                return
            record.finished = True
            if outcome is not None:
                record.outcome = outcome
            if record.outcome == "in_progress":
                record.outcome = "closed" if self._closing.is_set() else "disconnected"
            c = self._counters
            c.in_flight = max(0, c.in_flight - 1)
            if record.outcome == "disconnected":
                c.disconnects += 1
                if record.request_id is not None:
                    c.disconnected_ids.append(record.request_id)
            elif record.outcome == "completed":
                if record.stream:
                    c.streams_completed += 1
                else:
                    c.completions += 1
            elif record.outcome == "bad_request":
                c.bad_requests += 1

    def _abandon(self) -> None:
        """A request that went away before it could even be recorded."""
        with self._lock:
            self._counters.in_flight = max(0, self._counters.in_flight - 1)
            self._counters.disconnects += 1

    def _count_fault(self, record: _Record, fault: _Fault) -> None:
        with self._lock:
            record.fault = fault.kind
            self._counters.faults_served += 1
            by_kind = self._counters.faults_by_kind
            by_kind[fault.kind] = by_kind.get(fault.kind, 0) + 1

    def _count_stream_start(self) -> None:
        with self._lock:
            self._counters.streams_started += 1

    def _cursor(self, session: str) -> ScriptCursor | None:
        with self._lock:
            if self._script is None:
                return None
            cursor = self._cursors.get(session)
            if cursor is None:
                cursor = self._cursors[session] = ScriptCursor(self._script)
            return cursor

    def _pick_reply(self, record: _Record, fault: _Fault | None, last_text: str) -> ScriptReply:
        """The reply ``record`` gets: the script's next (only peeked at when a fault
        answers instead, so the reply stays for the retry), or generated text."""
        cursor = self._cursor(record.session)
        if cursor is None:
            words = self.settings.generated_words
            return ScriptReply(text=generated_text(words, f"{record.purpose}\0{last_text}"))
        if fault is None:
            return cursor.next_reply(record.purpose, last_text)
        return cursor.peek_reply(record.purpose, last_text)

    def _take_fault(
        self, headers: Mapping[str, str], session: str, forced: str | None
    ) -> _Fault | None:
        """The fault for this request: header first, then the queue, then the flag."""
        settings = self.settings
        header = headers.get("x-mock-fault")
        if header:
            kind = cast(FaultKind, header.strip())
            if kind == "reject_tool_choice" and forced is None:
                return None
            return _Fault(
                kind,
                _header_float(headers, "x-mock-retry-after", settings.retry_after_s),
                _header_float(headers, "x-mock-stall-s", settings.stall_s),
            )
        with self._lock:
            for queued in self._faults:
                spec = queued.spec
                if spec.session is not None and spec.session != session:
                    continue
                if spec.fault == "reject_tool_choice" and forced is None:
                    continue
                queued.remaining -= 1
                if queued.remaining <= 0:
                    self._faults.remove(queued)
                return _Fault(
                    spec.fault,
                    settings.retry_after_s if spec.retry_after is None else spec.retry_after,
                    settings.stall_s if spec.stall_s is None else spec.stall_s,
                )
        if settings.reject_forced_tool_choice and forced is not None:
            return _Fault("reject_tool_choice", settings.retry_after_s, settings.stall_s)
        return None

    # -- waiting ------------------------------------------------------------ #

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but end at once (raising :class:`_CutConnection`) when closing."""
        if seconds > 0:
            if seconds <= _SHORT_SLEEP_S:
                await asyncio.sleep(seconds)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), seconds)
        if self._closing.is_set():
            raise _CutConnection("server shutting down")

    async def _wait_or_disconnect(self, seconds: float, receive: Any) -> str:
        """``"elapsed"``, ``"disconnected"`` or ``"closing"``, whichever comes first.

        Non-streaming responses wait before sending anything; starlette only
        watches for disconnects while a *streaming* body is sent, so this
        races the wait against the ASGI ``http.disconnect`` message itself.
        """
        if seconds <= 0:
            return "closing" if self._closing.is_set() else "elapsed"

        async def disconnected() -> None:
            while True:
                message = await receive()
                if message.get("type") == "http.disconnect":
                    return

        async def elapsed() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), seconds)

        t_disconnect = asyncio.ensure_future(disconnected())
        t_elapsed = asyncio.ensure_future(elapsed())
        try:
            done, _ = await asyncio.wait(
                {t_disconnect, t_elapsed}, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (t_disconnect, t_elapsed):
                task.cancel()
            await asyncio.gather(t_disconnect, t_elapsed, return_exceptions=True)
        if t_disconnect in done:
            return "disconnected"
        return "closing" if self._closing.is_set() else "elapsed"

    # -- serving one request (either API) ---------------------------------- #

    async def serve(self, scope: Any, receive: Any, send: Any, respond: Responder) -> None:
        """Serve one request of either API: record it, let ``respond`` answer it, settle it.

        A raw ASGI endpoint, so the bookkeeping wraps the whole response and not
        just the handler: a plain starlette handler returns before a streaming
        body is sent, and the in-flight count and the disconnect detection must
        span the body too.
        """
        self._enter()
        record: _Record | None = None
        try:
            request = Request(scope, receive)
            try:
                raw = await request.body()
            except ClientDisconnect:
                return
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = None
            record = self._new_record(request.headers, body if isinstance(body, dict) else None)
            if request.client is not None:
                record.peer = f"{request.client.host}:{request.client.port}"
            response = await respond(record, request.headers, body, receive, len(raw))
            if record.outcome != "in_progress":
                self._finish(record)
            elif record.stream:
                self._count_stream_start()
            await response(scope, receive, send)
        finally:
            if record is None:
                self._abandon()
            else:
                self._finish(record)

    async def _stream_body(
        self, ex: _Exchange, events: list[tuple[float, object]]
    ) -> AsyncIterator[bytes]:
        """Send the events, coalescing those due at the same moment into one write.

        Each SSE event stays its own ``data:`` line; only the socket writes are
        merged. Loopback ``send`` dominates the server's cost under load, and
        an unpaced reply (or the finish / usage / ``[DONE]`` tail) needs no
        gaps between its events.

        The latency model is kept on absolute due times (the first event at
        start + TTFT, each later one a token interval after the one before it
        was *due*, not after it was sent): a real provider's tokens come at
        its own pace however busy the proxy in front of it is. Sleeping the
        interval after each send instead would stretch every stream by the
        server's scheduling lag once per token -- under load, hundreds of
        small overshoots -- and the benchmark would measure the stand-in
        model's loop rather than the runtime. Events that fell behind go out
        together (one write) at once.
        """
        loop = asyncio.get_running_loop()
        due = start = loop.time()
        tick = self.settings.background_tick_ms / 1000.0 if ex.purpose != "main" else 0.0
        buffer = bytearray()
        last = len(events) - 1
        kind = ex.fault.kind if ex.fault is not None else None
        end: Outcome = (
            "truncated"
            if kind == "truncated"
            else "error"
            if kind == "stream_error"
            else "completed"
        )
        try:
            for i, (delay, payload) in enumerate(events):
                if payload is _LINGER:
                    # The whole answer is out: it counts as completed even if the
                    # client leaves while the body is held open.
                    self._finish(ex.record, "completed")
                if delay > 0:
                    due += delay
                    send_at = due
                    if tick and i > 0:  # after the first event: at the end of its tick
                        send_at = start + math.ceil((due - start) / tick) * tick
                    wait = send_at - loop.time()
                    if wait > 0:
                        if buffer:
                            yield bytes(buffer)
                            buffer.clear()
                        await self._sleep(wait)
                if payload is _CUT:
                    if buffer:
                        yield bytes(buffer)
                        buffer.clear()
                    self._finish(ex.record, "cut")
                    raise _CutConnection("cut fault")
                if payload is _LINGER:  # [DONE] went out before the pause
                    return
                buffer += cast(bytes, payload)
                if i == last:
                    self._finish(ex.record, end)
                    yield bytes(buffer)
                    return
                if len(buffer) >= _FLUSH_BYTES:
                    yield bytes(buffer)
                    buffer.clear()
                    await asyncio.sleep(0)  # let other streams and disconnects in
        except _CutConnection:
            self._finish(ex.record, "closed")  # no-op after a deliberate cut
            raise

    # -- control endpoints -------------------------------------------------- #

    async def _models(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": "mock", "object": "model", "created": 0, "owned_by": "fore"}],
            }
        )

    async def _stats_endpoint(self, request: Request) -> Response:
        return Response(self.stats().model_dump_json(), media_type="application/json")

    async def _requests_endpoint(self, request: Request) -> Response:
        records = [r.model_dump(mode="json") for r in self.requests()]
        return Response(dumps({"requests": records}), media_type="application/json")

    async def _faults_endpoint(self, request: Request) -> Response:
        try:
            spec = FaultSpec.model_validate_json(await request.body())
        except ValidationError as exc:
            detail = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            return _error_response(400, f"invalid fault: {detail}")
        self.queue_fault(spec)
        return JSONResponse({"queued": spec.model_dump(mode="json")})

    async def _reset_endpoint(self, request: Request) -> Response:
        self.reset()
        return JSONResponse({"reset": True})

    async def _script_endpoint(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.set_script(None)
            return JSONResponse({"script": None})
        try:
            script = ScriptFile.from_json(await request.body(), source="request body")
        except ScriptError as exc:
            return _error_response(400, str(exc))
        self.set_script(script)
        return JSONResponse({"script": {"replies": len(script.replies)}})

    async def _health_endpoint(self, request: Request) -> Response:
        return JSONResponse({"ok": True})
