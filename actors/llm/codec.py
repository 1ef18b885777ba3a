"""What both wire formats (:mod:`.wire`, :mod:`.anthropic_wire`) share, as pure functions.

* :func:`dumps` -- the JSON every wire here writes: compact (no spaces after
  ``,`` / ``:``, as OpenAI sends it) and not ASCII-escaped, so the same items
  always make the same bytes (forked requests share the provider's prefix
  cache); the mock server writes its answers with it too;
* :func:`decode_arguments` / :func:`tool_call` -- a tool call's assembled
  arguments read back: one JSON object, or a call kept with an
  ``arguments_error`` the worker hands back to the model;
* the bounds of one answer (:data:`MAX_ANSWER_CHARS`, :data:`MAX_TOOL_CALLS`)
  and the errors for crossing them or for a stream that ended early, worded
  once for both wires.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ValidationError

from fore.actors.llm.errors import LlmException, format_size, llm_error
from fore.errors import ArgumentsInvalid
from fore.messages.conversation import ToolCall, invalid_arguments

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_TOOL_CALLS",
    "answer_too_large",
    "arrived_summary",
    "decode_arguments",
    "dumps",
    "incomplete_stream",
    "parse_arguments",
    "too_many_calls",
    "tool_call",
]


def dumps(value: Any) -> str:
    """``value`` as wire JSON: compact, not ASCII-escaped (see the module docs)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _refuse_constant(token: str) -> Any:
    """``NaN`` / ``Infinity``: Python's json accepts them, JSON (and ``ToolCall``) does not."""
    raise ValueError(f"{token} is not a JSON number")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):  # 1e400 overflows to inf
        raise ValueError(f"{token} is out of the range of a finite number")
    return value


def _json_kind(value: Any) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def decode_arguments(text: str) -> dict[str, Any]:
    """Decode the assembled arguments of one call (``""`` means no arguments).

    Raises :class:`ArgumentsInvalid` for anything but one JSON object --
    malformed text, NaN/Infinity, nesting too deep for the parser.
    """
    if text.strip() == "":
        return {}
    try:
        # strict=False: raw control characters (a newline) inside a string are
        # accepted. Grammar-constrained output (llama.cpp) emits them, and the
        # meaning is unambiguous.
        value = json.loads(
            text, strict=False, parse_constant=_refuse_constant, parse_float=_finite_float
        )
    except json.JSONDecodeError as exc:
        raise ArgumentsInvalid(exc.msg, exc.pos) from None
    except RecursionError:
        raise ArgumentsInvalid("nested too deeply") from None
    except ValueError as exc:
        raise ArgumentsInvalid(str(exc)) from None
    if not isinstance(value, dict):
        raise ArgumentsInvalid(f"expected a JSON object, got {_json_kind(value)}")
    return value


def parse_arguments(text: str, name: str) -> dict[str, Any]:
    """:func:`decode_arguments`, failing as a protocol error naming the tool."""
    try:
        return decode_arguments(text)
    except ArgumentsInvalid as exc:
        raise llm_error(
            "protocol", f"tool call {name!r}: arguments are not valid JSON ({exc})", retryable=True
        ) from None


def tool_call(call_id: str, name: str, text: str) -> ToolCall:
    """One assembled call. Arguments that are not a JSON object do not fail the answer:

    the call is kept with empty ``arguments`` and an ``arguments_error``
    (why, where, an excerpt), and the worker decides -- it hands the model an
    error result so it can correct itself, a bounded number of times per run.
    """
    try:
        return ToolCall(id=call_id, name=name, arguments=decode_arguments(text))
    except ArgumentsInvalid as exc:
        error = invalid_arguments(text, exc.reason, exc.position)
    except ValidationError as exc:  # a JSON object pydantic refuses (e.g. nested too deeply)
        error = invalid_arguments(text, str(exc.errors()[0]["msg"]))
    return ToolCall(id=call_id, name=name, arguments_error=error)


MAX_ANSWER_CHARS = 16 * 1024 * 1024
"""Default cap on one answer's text plus tool-call arguments, ids and names (characters).

Far above any real answer (a model's output limit is tens of thousands of
tokens, a few hundred KB); what it bounds is a hostile or broken server."""

MAX_TOOL_CALLS = 16_384
"""Default cap on the tool calls of one answer (each distinct ``index`` is a call)."""


# The limits' errors and the incomplete-answer error, worded once for both wires:
# what differs is only what a wire calls its units ("chunks" / "events"), tool
# input ("arguments" / "input") and its end.


def answer_too_large(max_answer_chars: int, *, tool_input: str) -> LlmException:
    """An answer past ``max_answer_chars`` of text and tool ``tool_input``: refused."""
    return llm_error(
        "protocol",
        f"the answer passed {format_size(max_answer_chars)} of text and tool"
        f" {tool_input} (the client's answer limit): refused",
        retryable=False,
    )


def too_many_calls(max_tool_calls: int) -> LlmException:
    """An answer with more than ``max_tool_calls`` tool calls: refused."""
    return llm_error(
        "protocol",
        f"the answer has more than {max_tool_calls} tool calls (the client's limit): refused",
        retryable=False,
    )


def arrived_summary(
    units: int, unit: str, *, text_chars: int, calls: int, input_chars: int, tool_input: str
) -> str:
    """How much of an answer arrived, for an error message."""
    parts = [f"{units} {unit}{'s' if units != 1 else ''}", f"{text_chars} characters of text"]
    if calls:
        parts.append(
            f"{calls} tool call{'s' if calls != 1 else ''} ({input_chars} characters of"
            f" {tool_input})"
        )
    return ", ".join(parts)


def incomplete_stream(how: str, reason_field: str, arrived: str) -> LlmException:
    """A stream that ended (``how``: "closed", "sent [DONE]", ...) without its
    ``reason_field``: a retryable ``incomplete`` error saying how much had arrived."""
    return llm_error(
        "incomplete",
        f"stream ended before the answer was complete (it {how} without a"
        f" {reason_field} after {arrived})",
        retryable=True,
    )
