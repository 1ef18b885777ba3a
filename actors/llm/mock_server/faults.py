"""Injected faults: the queued and resolved fault, the deliberate cut, the error answers.

A fault is resolved per request (:meth:`MockLlmApp._take_fault`: header, queue, flag)
into a :class:`_Fault`; the status faults are answered here (:func:`_status_fault`,
OpenAI-format error bodies), the in-body ones by the SSE framing
(:mod:`~fore.actors.llm.mock_server.sse`). :class:`_CutConnection` aborts a response on
purpose, and a uvicorn log filter keeps each deliberate cut from logging a traceback.
Separate from the app so both wire formats (OpenAI, Anthropic) share one fault model.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from starlette.responses import JSONResponse, Response, StreamingResponse

from fore.actors.llm.mock_server.settings import FaultKind, FaultSpec, _Record


@dataclass(slots=True)
class _QueuedFault:
    spec: FaultSpec
    remaining: int


@dataclass(frozen=True, slots=True)
class _Fault:
    kind: FaultKind
    retry_after_s: float
    stall_s: float


class _CutConnection(Exception):
    """Raised inside a response to make uvicorn abort the connection."""


class _DropCutConnectionLogs(logging.Filter):
    """Keeps uvicorn from logging a traceback for every deliberate cut."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BaseExceptionGroup):
            return not all(isinstance(e, _CutConnection) for e in exc.exceptions)
        return not isinstance(exc, _CutConnection)


_log_filter_installed = False


_log_filter_lock = threading.Lock()


def _install_log_filter() -> None:
    global _log_filter_installed
    with _log_filter_lock:
        if not _log_filter_installed:
            logging.getLogger("uvicorn.error").addFilter(_DropCutConnectionLogs())
            _log_filter_installed = True


_STREAM_ERROR: Final = {
    "message": "This model's maximum context length is 128000 tokens; your messages resulted"
    " in 130000 tokens (injected by the mock).",
    "type": "invalid_request_error",
    "param": "messages",
    "code": "context_length_exceeded",
}
"""The error a ``stream_error`` fault sends (OpenAI's context-length error)."""


_NOT_SSE_PAGE: Final = (
    "<!doctype html><html><head><title>Gateway notice</title></head>"
    "<body><h1>Please sign in to continue</h1>(injected by the mock)</body></html>"
)


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _error_body(message: str, type_: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _error_response(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(_error_body(message, type_, param, code), status, headers=headers)


def _status_fault(fault: _Fault, forced: str | None, *, stream: bool) -> Response | None:
    """The error response of a status fault; ``None`` for faults served in the body."""
    kind = fault.kind
    tag = {"x-mock-fault": kind}
    if kind == "not_sse":
        return Response(_NOT_SSE_PAGE, 200, media_type="text/html", headers=tag)
    if kind == "stream_error" and not stream:
        return JSONResponse({"error": _STREAM_ERROR}, 400, headers=tag)
    if kind == "500":
        return _error_response(
            500,
            "The server had an error while processing your request (injected by the mock).",
            type_="server_error",
            headers=tag,
        )
    if kind == "529":  # Anthropic's "overloaded" (issue 27)
        return _error_response(
            529, "Overloaded (injected by the mock).", type_="overloaded_error", headers=tag
        )
    if kind == "429":
        return _error_response(
            429,
            "Rate limit reached for requests (injected by the mock).",
            type_="requests",
            code="rate_limit_exceeded",
            headers={**tag, "retry-after": _format_seconds(fault.retry_after_s)},
        )
    if kind == "401":
        return _error_response(
            401,
            "Incorrect API key provided (injected by the mock).",
            code="invalid_api_key",
            headers=tag,
        )
    if kind == "400":
        return _error_response(400, "Invalid request (injected by the mock).", headers=tag)
    if kind == "reject_tool_choice":
        return _error_response(
            400,
            f"tool_choice naming a function ({forced!r}) is not supported by this model"
            " (injected by the mock).",
            param="tool_choice",
            headers=tag,
        )
    return None


def _whole_body(
    record: _Record, kind: str | None, data: bytes, headers: dict[str, str]
) -> Response:
    """A non-streamed answer's bytes, with its request's in-body fault applied.

    ``malformed``: cut in half and not JSON; ``truncated``: cut in half; ``cut``:
    half of it sent, then the connection closed (the ``content-length`` promises
    the whole). Settles ``record``'s outcome. Both APIs answer this way.
    """
    if kind == "malformed":
        data = data[: len(data) // 2] + b"<<not json>>"
    elif kind == "truncated":
        data = data[: len(data) // 2]
    elif kind == "cut":
        full_length = len(data)
        record.outcome = "cut"

        async def partial() -> AsyncIterator[bytes]:
            yield data[: full_length // 2]
            raise _CutConnection("cut fault")

        return StreamingResponse(partial(), headers={**headers, "content-length": str(full_length)})
    record.outcome = "completed"
    return Response(data, 200, headers=headers)
