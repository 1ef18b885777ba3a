"""``POST /v1/chat/completions`` of the mock server: OpenAI's Chat Completions API.

Checks the request (:mod:`.strict`), takes its fault, picks its reply from the
script (or generates one) and answers it on its latency model: an SSE stream
(:mod:`.sse`, written by the app's ``_stream_body``) or a ``chat.completion``
body. The state it works on -- script cursors, queued faults, records,
counters -- is the :class:`~actors.llm.mock_server.app.MockLlmApp`'s, shared
with Anthropic's ``/v1/messages`` (:mod:`.anthropic`), which answers the same
way in its own format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from fore.actors.llm.codec import dumps
from fore.actors.llm.mock_server.faults import (
    _error_response,
    _status_fault,
    _whole_body,
)
from fore.actors.llm.mock_server.replies import (
    _Answer,
    _Exchange,
    _make_answer,
    _obey,
)
from fore.actors.llm.mock_server.settings import FAULT_KINDS, _Record
from fore.actors.llm.mock_server.sse import _stream_events
from fore.actors.llm.mock_server.strict import (
    _first_tool_name,
    _forced_function,
    _header_float,
    _max_tokens,
    _pace,
    _strict_problems,
    _validate_body,
)
from fore.actors.llm.script import last_user_or_tool_text

if TYPE_CHECKING:
    from fore.actors.llm.mock_server.app import MockLlmApp


class ChatCompletions:
    """``POST /v1/chat/completions`` of a :class:`~actors.llm.mock_server.MockLlmApp`."""

    def __init__(self, app: MockLlmApp) -> None:
        self._app = app

    def routes(self) -> list[Route]:
        return [Route("/v1/chat/completions", self, methods=["POST"])]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app.serve(scope, receive, send, self._respond)

    async def _respond(
        self, record: _Record, headers: Mapping[str, str], body: Any, receive: Any, size: int
    ) -> Response:
        app = self._app
        problem = _validate_body(body)
        if problem is None and app.settings.strict:
            problem = _strict_problems(body, app.settings.max_output_tokens)
        if problem is not None:
            record.outcome = "bad_request"
            return _error_response(400, problem[0], param=problem[1])
        header_fault = headers.get("x-mock-fault")
        if header_fault and header_fault.strip() not in FAULT_KINDS:
            record.outcome = "bad_request"
            return _error_response(
                400,
                f"unknown X-Mock-Fault {header_fault!r}; use one of {', '.join(FAULT_KINDS)}",
                param="X-Mock-Fault",
            )
        settings = app.settings
        try:
            ttft_ms, tokens_per_s, args_chunk = _pace(headers, settings)
            _header_float(headers, "x-mock-retry-after", settings.retry_after_s, minimum=0.0)
            _header_float(headers, "x-mock-stall-s", settings.stall_s, minimum=0.0)
        except ValueError as exc:
            record.outcome = "bad_request"
            return _error_response(400, str(exc))

        stream = body.get("stream") is True
        record.stream = stream
        options = body.get("stream_options")
        include_usage = (
            stream and isinstance(options, dict) and options.get("include_usage") is True
        )
        forced = _forced_function(body)
        fault = app._take_fault(headers, record.session, forced)
        exchange = _Exchange(
            record=record,
            session=record.session,
            purpose=record.purpose,
            request_id=record.request_id,
            model=str(body["model"]),
            stream=stream,
            include_usage=include_usage,
            fault=fault,
        )
        if fault is not None:
            app._count_fault(record, fault)
            status_response = _status_fault(fault, forced, stream=stream)
            if status_response is not None:
                record.outcome = "error"
                return status_response

        messages: list[Any] = body["messages"]
        last_text = last_user_or_tool_text(messages)
        reply = _obey(app._pick_reply(record, fault, last_text), body)
        answer = _make_answer(
            reply,
            ttft_ms=ttft_ms,
            tokens_per_s=tokens_per_s,
            args_chunk_chars=args_chunk,
            # ~4 bytes per token, estimated from the body as sent (re-encoding
            # the messages would cost the server O(history) per request).
            prompt_tokens=max(1, size // 4),
            max_tokens=_max_tokens(body),
            bad_args_tool=_first_tool_name(body)
            if fault is not None and fault.kind == "bad_tool_args"
            else None,
        )
        record.ttft_s = answer.first_delay_s
        record.token_interval_s = answer.interval_s
        extra_headers: dict[str, str] = {"x-mock-fault": fault.kind} if fault is not None else {}
        if stream:
            events = _stream_events(exchange, answer)
            return StreamingResponse(
                app._stream_body(exchange, events),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", **extra_headers},
            )
        return await self._completion(exchange, answer, receive, extra_headers)

    async def _completion(
        self, ex: _Exchange, answer: _Answer, receive: Any, extra_headers: dict[str, str]
    ) -> Response:
        kind = ex.fault.kind if ex.fault is not None else None
        wait_s = answer.total_s + (ex.fault.stall_s if ex.fault and kind == "stall" else 0.0)
        waited = await self._app._wait_or_disconnect(wait_s, receive)
        if waited == "disconnected":
            ex.record.outcome = "disconnected"
            return Response(status_code=499)
        if waited == "closing":
            ex.record.outcome = "closed"
            return _error_response(503, "mock server shutting down", type_="server_error")
        content = answer.text if answer.text or not answer.tool_calls else None
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if answer.tool_calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in answer.tool_calls
            ]
        payload = {
            "id": ex.completion_id,
            "object": "chat.completion",
            "created": ex.created,
            "model": ex.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": answer.finish_reason,
                }
            ],
            "usage": answer.usage(),
        }
        headers = {"content-type": "application/json", **extra_headers}
        return _whole_body(ex.record, kind, dumps(payload).encode("utf-8"), headers)
