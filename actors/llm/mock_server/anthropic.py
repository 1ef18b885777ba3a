"""The mock server's Anthropic Messages endpoint (``POST /v1/messages``).

The same server as :mod:`actors.llm.mock_server` -- the same script, latency
model, faults, records and stats -- speaking Anthropic's protocol, so that
:class:`~actors.llm.anthropic.AnthropicModel` is tested over real HTTP and
the official ``anthropic`` SDK can check that the mock speaks the real thing
(``tests/llm/test_anthropic_sdk.py``).

Wire protocol
-------------
The Messages request body; ``stream: true`` answers ``text/event-stream``
with named events -- ``message_start`` (the input usage), ``ping``, per block
``content_block_start`` / ``content_block_delta`` (``text_delta``,
``input_json_delta``) / ``content_block_stop``, ``message_delta`` (the
``stop_reason`` and output usage) and ``message_stop`` -- otherwise one
``message`` JSON body. Errors are ``{"type": "error", "error": {"type": ...,
"message": ...}}`` with the API's statuses (``invalid_request_error`` 400,
``authentication_error`` 401, ``rate_limit_error`` 429 with ``retry-after``,
``api_error`` 500, ``overloaded_error`` 529); a ``stream_error`` fault sends
an ``overloaded_error`` event mid-stream, as the API does under load.

Strictness (always; a real server's)
------------------------------------
400 for: a missing ``anthropic-version`` header (401 for a missing
``x-api-key`` / ``Authorization``); an unknown top-level field; no ``model``;
no ``max_tokens`` or one above the model's output limit; empty ``messages``, a
role other than ``user`` / ``assistant`` (the system prompt is a top-level
field), a first message that is not ``user``, two messages of the same role in
a row; an empty content or text block; ``tool_use`` outside an assistant
turn, ``tool_result`` outside a user turn, a ``tool_result`` that answers no
``tool_use`` of the turn before it (an orphan), a ``tool_use`` left without a
result in the next turn; a bad ``tool_choice`` (or one naming an unknown
tool), thinking with a forced tool or a budget not below ``max_tokens``, a
``temperature`` outside 0..1; more than four ``cache_control`` breakpoints.

Prompt caching
--------------
As the API accounts it (:mod:`.anthropic_cache`): ``cache_read_input_tokens``,
``cache_creation_input_tokens`` and ``input_tokens`` of each request follow from its
``cache_control`` breakpoints and what earlier requests cached.

The request checks are :mod:`.anthropic_strict`, the cache :mod:`.anthropic_cache`; this
module is the endpoint that uses them on the app's script, faults and records.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fore.actors.llm.codec import dumps
from fore.actors.llm.mock_server.anthropic_cache import (
    MIN_CACHE_TOKENS,
    CacheUsage,
    PromptCache,
    prompt_blocks,
)
from fore.actors.llm.mock_server.anthropic_strict import _blocks, validate_request
from fore.actors.llm.mock_server.faults import _NOT_SSE_PAGE, _Fault, _format_seconds, _whole_body
from fore.actors.llm.mock_server.replies import _Answer, _Exchange, _make_answer
from fore.actors.llm.mock_server.settings import FAULT_KINDS, _Record
from fore.actors.llm.mock_server.sse import _CUT, _LINGER
from fore.actors.llm.mock_server.strict import _pace
from fore.actors.llm.script import ScriptReply, ScriptToolCall

if TYPE_CHECKING:
    from fore.actors.llm.mock_server.app import MockLlmApp

__all__ = ["AnthropicMessages"]


_STREAM_ERROR: Final = {"type": "overloaded_error", "message": "Overloaded (injected by the mock)"}


def _error(
    status: int, kind: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = {
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_" + secrets.token_hex(12),
    }
    return JSONResponse(body, status, headers=dict(headers or {}))


def _forced_tool(body: Mapping[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, Mapping) and choice.get("type") == "tool":
        name = choice.get("name")
        return name if isinstance(name, str) else "?"
    return None


def _tool_names(body: Mapping[str, Any]) -> list[str]:
    return [
        str(t["name"]) for t in body.get("tools") or () if isinstance(t, Mapping) and "name" in t
    ]


def last_input_text(body: Mapping[str, Any]) -> str:
    """What a script matches on: the last block of the last user turn (a tool result's
    content, or text)."""
    for message in reversed(body.get("messages") or ()):
        if message.get("role") != "user":
            continue
        blocks = _blocks(message.get("content")) or []
        for block in reversed(blocks):
            if block.get("type") == "tool_result":
                content = block.get("content")
                inner = _blocks(content) if content is not None else []
                return " ".join(
                    str(b.get("text", "")) for b in inner or () if isinstance(b, Mapping)
                )
            if block.get("type") == "text":
                return str(block.get("text", ""))
        return ""
    return ""


def _obey(reply: ScriptReply, body: Mapping[str, Any]) -> ScriptReply:
    """The reply as ``tool_choice`` shapes it: ``tool`` forces that call (and no text),
    ``none`` allows no calls, ``any`` at least one."""
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, Mapping) else None
    names = _tool_names(body)
    forced = _forced_tool(body)
    if forced is not None:
        calls = [c for c in reply.tool_calls if c.name == forced][:1] or [
            ScriptToolCall(name=forced)
        ]
        return reply.model_copy(update={"text": "", "tool_calls": tuple(calls)})
    if (kind == "none" or not names) and reply.tool_calls:
        return reply.model_copy(update={"tool_calls": ()})
    if kind == "any" and not reply.tool_calls and names:
        return reply.model_copy(update={"tool_calls": (ScriptToolCall(name=names[0]),)})
    return reply


_STOP: Final = {"length": "max_tokens", "tool_calls": "tool_use", "stop": "end_turn"}


def _sse(kind: str, data: Mapping[str, Any]) -> bytes:
    payload = dumps(data)
    return f"event: {kind}\ndata: {payload}\n\n".encode()


class AnthropicMessages:
    """``POST /v1/messages`` of a :class:`~actors.llm.mock_server.MockLlmApp`.

    Shares the app's script cursors, fault queue, records and stats; keeps the
    prompt cache (:attr:`cache`, cleared by the app's ``reset``).
    """

    def __init__(self, app: MockLlmApp, *, min_cache_tokens: int = MIN_CACHE_TOKENS) -> None:
        self._app = app
        self.cache = PromptCache(min_tokens=min_cache_tokens)

    def routes(self) -> list[Route]:
        return [Route("/v1/messages", self, methods=["POST"])]

    def reset(self) -> None:
        self.cache.clear()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app.serve(scope, receive, send, self._respond)

    async def _respond(
        self, record: _Record, headers: Mapping[str, str], body: Any, receive: Any, _size: int
    ) -> Response:
        # ``_size`` is unused: the prompt is counted from its blocks (the cache's accounting).
        app = self._app
        settings = app.settings
        if not headers.get("x-api-key") and not headers.get("authorization"):
            record.outcome = "bad_request"
            return _error(401, "authentication_error", "x-api-key header is required")
        if not headers.get("anthropic-version"):
            record.outcome = "bad_request"
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        if not isinstance(body, dict):
            record.outcome = "bad_request"
            return _error(400, "invalid_request_error", "The request body is not valid JSON.")
        problem = validate_request(body, max_output_tokens=settings.max_output_tokens)
        if problem is not None:
            record.outcome = "bad_request"
            return _error(400, problem[0], problem[1])
        header_fault = headers.get("x-mock-fault")
        if header_fault and header_fault.strip() not in FAULT_KINDS:
            record.outcome = "bad_request"
            return _error(400, "invalid_request_error", f"unknown X-Mock-Fault {header_fault!r}")
        try:
            ttft_ms, tokens_per_s, args_chunk = _pace(headers, settings)
        except ValueError as exc:
            record.outcome = "bad_request"
            return _error(400, "invalid_request_error", str(exc))
        stream = body.get("stream") is True
        record.stream = stream
        forced = _forced_tool(body)
        fault = app._take_fault(headers, record.session, forced)
        exchange = _Exchange(
            record=record,
            session=record.session,
            purpose=record.purpose,
            request_id=record.request_id,
            model=str(body["model"]),
            stream=stream,
            include_usage=True,
            fault=fault,
            completion_id="msg_" + secrets.token_hex(12),
        )
        if fault is not None:
            app._count_fault(record, fault)
            status_response = _status_fault(fault, forced, stream=stream)
            if status_response is not None:
                record.outcome = "error"
                return status_response
        last_text = last_input_text(body)
        reply = _with_tool_ids(_obey(app._pick_reply(record, fault, last_text), body))
        # The prompt is billed only once the request is answered (not for faults above).
        usage = self.cache.account(exchange.model, prompt_blocks(body))
        names = _tool_names(body)
        answer = _make_answer(
            reply,
            ttft_ms=ttft_ms,
            tokens_per_s=tokens_per_s,
            args_chunk_chars=args_chunk,
            prompt_tokens=usage.total,
            max_tokens=int(body["max_tokens"]),
            bad_args_tool=(names[0] if names else "mock_tool")
            if fault is not None and fault.kind == "bad_tool_args"
            else None,
        )
        record.ttft_s = answer.first_delay_s
        record.token_interval_s = answer.interval_s
        extra: dict[str, str] = {"x-mock-fault": fault.kind} if fault is not None else {}
        extra["request-id"] = "req_" + secrets.token_hex(12)
        if stream:
            events = _stream_events(exchange, answer, usage)
            return StreamingResponse(
                app._stream_body(exchange, events),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache", **extra},
            )
        return await self._message(exchange, answer, usage, receive, extra)

    async def _message(
        self,
        ex: _Exchange,
        answer: _Answer,
        usage: CacheUsage,
        receive: Any,
        extra: dict[str, str],
    ) -> Response:
        app = self._app
        kind = ex.fault.kind if ex.fault is not None else None
        wait_s = answer.total_s + (ex.fault.stall_s if ex.fault and kind == "stall" else 0.0)
        waited = await app._wait_or_disconnect(wait_s, receive)
        if waited == "disconnected":
            ex.record.outcome = "disconnected"
            return Response(status_code=499)
        if waited == "closing":
            ex.record.outcome = "closed"
            return _error(503, "api_error", "mock server shutting down")
        content: list[dict[str, Any]] = []
        if answer.text:
            content.append({"type": "text", "text": answer.text})
        for call_id, name, args in answer.tool_calls:
            try:
                tool_input: Any = json.loads(args) if args else {}
            except ValueError:
                tool_input = {"__raw": args}  # bad_tool_args: not JSON (a real API never does this)
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": tool_input})
        payload = {
            "id": ex.completion_id,
            "type": "message",
            "role": "assistant",
            "model": ex.model,
            "content": content,
            "stop_reason": _STOP[answer.finish_reason],
            "stop_sequence": None,
            "usage": {**_usage(usage), "output_tokens": answer.completion_tokens},
        }
        headers = {"content-type": "application/json", **extra}
        return _whole_body(ex.record, kind, dumps(payload).encode(), headers)


def _usage(usage: CacheUsage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    }


def _with_tool_ids(reply: ScriptReply) -> ScriptReply:
    """Tool-use ids as the API makes them (``toolu_...``) where the script left them out."""
    if all(call.id for call in reply.tool_calls):
        return reply
    calls = tuple(
        call if call.id else call.model_copy(update={"id": "toolu_" + secrets.token_hex(12)})
        for call in reply.tool_calls
    )
    return reply.model_copy(update={"tool_calls": calls})


def _status_fault(fault: _Fault, forced: str | None, *, stream: bool) -> Response | None:
    """The error response of a status fault, in the API's format; ``None`` for the rest."""
    kind = fault.kind
    tag = {"x-mock-fault": kind}
    if kind == "not_sse":
        return Response(_NOT_SSE_PAGE, 200, media_type="text/html", headers=tag)
    if kind == "stream_error" and not stream:
        return _error(529, "overloaded_error", _STREAM_ERROR["message"], tag)
    if kind == "500":
        return _error(500, "api_error", "Internal server error (injected by the mock).", tag)
    if kind == "529":
        return _error(529, "overloaded_error", "Overloaded (injected by the mock).", tag)
    if kind == "429":
        return _error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit (injected by the"
            " mock).",
            {**tag, "retry-after": _format_seconds(fault.retry_after_s)},
        )
    if kind == "401":
        return _error(401, "authentication_error", "invalid x-api-key (injected by the mock).", tag)
    if kind == "400":
        return _error(400, "invalid_request_error", "Invalid request (injected by the mock).", tag)
    if kind == "reject_tool_choice":
        return _error(
            400,
            "invalid_request_error",
            f"tool_choice naming a tool ({forced!r}) is not supported by this model (injected by"
            " the mock).",
            tag,
        )
    return None


def _stream_events(ex: _Exchange, answer: _Answer, usage: CacheUsage) -> list[tuple[float, object]]:
    """Every SSE event of the response with the pause before it, faults applied."""
    interval = answer.interval_s
    start = {
        "type": "message_start",
        "message": {
            "id": ex.completion_id,
            "type": "message",
            "role": "assistant",
            "model": ex.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**_usage(usage), "output_tokens": 1},
        },
    }
    events: list[tuple[float, object]] = [
        (answer.first_delay_s, _sse("message_start", start)),
        (0.0, _sse("ping", {"type": "ping"})),
    ]

    def block_start(index: int, block: dict[str, Any], delay: float) -> None:
        event = {"type": "content_block_start", "index": index, "content_block": block}
        events.append((delay, _sse("content_block_start", event)))

    def block_delta(index: int, delta: dict[str, Any], delay: float) -> None:
        event = {"type": "content_block_delta", "index": index, "delta": delta}
        events.append((delay, _sse("content_block_delta", event)))

    def block_stop(index: int) -> None:
        events.append(
            (0.0, _sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        )

    index = 0
    if answer.text_chunks:
        block_start(0, {"type": "text", "text": ""}, 0.0)
        for i, token in enumerate(answer.text_chunks):
            block_delta(0, {"type": "text_delta", "text": token}, 0.0 if i == 0 else interval)
        block_stop(0)
        index = 1
    for call_id, name, arguments in answer.tool_calls:
        block_start(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}, interval)
        for fragment in answer.fragments(arguments):
            block_delta(index, {"type": "input_json_delta", "partial_json": fragment}, interval)
        block_stop(index)
        index += 1
    body_end = len(events)
    message_delta = {
        "type": "message_delta",
        "delta": {"stop_reason": _STOP[answer.finish_reason], "stop_sequence": None},
        "usage": {"output_tokens": answer.completion_tokens},
    }
    events.append((0.0, _sse("message_delta", message_delta)))
    events.append((0.0, _sse("message_stop", {"type": "message_stop"})))

    kind = ex.fault.kind if ex.fault is not None else None
    keep = max(1, body_end // 2)
    if kind == "malformed":
        events.insert(
            min(2, body_end), (0.0, b'event: content_block_delta\ndata: {"type":"content_\n\n')
        )
    elif kind == "truncated":
        del events[keep:]
    elif kind == "cut":
        del events[keep:]
        events.append((0.0, _CUT))
    elif kind == "stall" and ex.fault is not None:
        delay, payload = events[1]
        events[1] = (delay + ex.fault.stall_s, payload)
    elif kind == "stream_error":
        del events[keep:]
        events.append((0.0, _sse("error", {"type": "error", "error": _STREAM_ERROR})))
    elif kind == "linger" and ex.fault is not None:
        events.append((ex.fault.stall_s, _LINGER))
    return events
