"""SSE framing of an OpenAI chat-completion stream, with the in-body faults applied.

:func:`_stream_events` turns an :class:`~fore.actors.llm.mock_server.replies._Answer` into
the list of ``data:`` events, each with the pause before it, and applies the faults that
live inside a stream (malformed, truncated, cut, stall, stream_error, linger) as markers
(:data:`_CUT`, :data:`_LINGER`) or edited events. Pure data: the app's ``_stream_body``
writes the list on its clock, so the framing is testable without a server.
"""

from __future__ import annotations

from typing import Any, Final

from fore.actors.llm.codec import dumps
from fore.actors.llm.mock_server.faults import _STREAM_ERROR
from fore.actors.llm.mock_server.replies import _Answer, _Exchange

_CUT: Final = object()
"""Marker in an event list: abort the connection here."""


_LINGER: Final = object()
"""Marker in an event list: the body ends here (after its pause)."""


def _stream_events(ex: _Exchange, answer: _Answer) -> list[tuple[float, object]]:
    """Every SSE event of the response with the pause before it, faults applied."""

    # Every chunk is the same object around its delta: encoded once, then spliced
    # around each delta (byte for byte what encoding the whole object gives; an
    # answer is hundreds of chunks and the mock's CPU is shared with what it measures).
    head = (
        "data: "
        + dumps(
            {
                "id": ex.completion_id,
                "object": "chat.completion.chunk",
                "created": ex.created,
                "model": ex.model,
            }
        )[:-1]
        + ',"choices":[{"index":0,"delta":'
    ).encode("utf-8")
    usage_tail = ',"usage":null' if ex.include_usage else ""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        tail = f',"logprobs":null,"finish_reason":{dumps(finish_reason)}}}]{usage_tail}}}'
        return head + (dumps(delta) + tail).encode("utf-8") + b"\n\n"

    interval = answer.interval_s
    role_content = None if (answer.tool_calls and not answer.text_chunks) else ""
    events: list[tuple[float, object]] = [
        (answer.first_delay_s, chunk({"role": "assistant", "content": role_content}))
    ]
    for i, token in enumerate(answer.text_chunks):
        events.append((0.0 if i == 0 else interval, chunk({"content": token})))
    for index, (call_id, name, arguments) in enumerate(answer.tool_calls):
        header = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append((interval, chunk({"tool_calls": [header]})))
        for fragment in answer.fragments(arguments):
            delta = {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
            events.append((interval, chunk(delta)))
    body_end = len(events)
    events.append((0.0, chunk({}, answer.finish_reason)))
    if ex.include_usage:
        usage_chunk = {
            "id": ex.completion_id,
            "object": "chat.completion.chunk",
            "created": ex.created,
            "model": ex.model,
            "choices": [],
            "usage": answer.usage(),
        }
        events.append((0.0, b"data: " + dumps(usage_chunk).encode("utf-8") + b"\n\n"))
    events.append((0.0, b"data: [DONE]\n\n"))

    kind = ex.fault.kind if ex.fault is not None else None
    keep = max(1, body_end // 2)
    if kind == "malformed":
        bad = (
            b'data: {"id":"' + ex.completion_id.encode() + b'","object":"chat.completion.chunk",'
            b'"choices":[{"index":0,"delta":{"content":"\n\n'
        )
        events.insert(min(2, body_end), (0.0, bad))
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
        events.append((0.0, b"data: " + dumps({"error": _STREAM_ERROR}).encode("utf-8") + b"\n\n"))
    elif kind == "linger" and ex.fault is not None:
        events.append((ex.fault.stall_s, _LINGER))
    return events
