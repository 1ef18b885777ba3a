"""Reading a chat request and refusing what real servers refuse (the "Strictness" rules).

Every check the mock applies before answering: the body's shape (:func:`_validate_body`,
always), what strict servers such as llama.cpp's add (:func:`_strict_problems`: content
types, orphan tool messages, unanswered calls, ``max_tokens`` above the model's limit),
the ``X-Mock-*`` headers' numbers, and the small readers they share (the forced
function, the first tool, the token cap). Plain functions of the request, kept apart
from the server so the rules can be read -- and changed -- in one place, against the
package docstring that states them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fore.actors.llm.mock_schema import response_format_problem
from fore.actors.llm.mock_server.settings import MockSettings


def _forced_function(body: Mapping[str, Any]) -> str | None:
    """The function name a request's ``tool_choice`` forces, if it names one."""
    choice = body.get("tool_choice")
    if not isinstance(choice, Mapping) or choice.get("type") != "function":
        return None
    function = choice.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return str(function["name"])
    name = choice.get("name")
    return name if isinstance(name, str) else "?"


def _first_tool_name(body: Mapping[str, Any]) -> str:
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            if isinstance(tool, Mapping):
                function = tool.get("function")
                if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                    return str(function["name"])
    return "mock_tool"


def _validate_body(body: Any) -> tuple[str, str | None] | None:
    """``(message, param)`` when the request body is not a usable chat request."""
    if not isinstance(body, dict):
        return "request body must be a JSON object", None
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return "'model' is required and must be a non-empty string", "model"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' is required and must be a non-empty array", "messages"
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{i}] must be an object with a string 'role'", f"messages[{i}]"
    if "stream" in body and not isinstance(body["stream"], bool):
        return "'stream' must be a boolean", "stream"
    if "tools" in body and body["tools"] is not None and not isinstance(body["tools"], list):
        return "'tools' must be an array", "tools"
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            return f"'{name}' must be a positive integer", name
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        return "'n' must be a positive integer", "n"
    if isinstance(n, int) and n > 1:
        return "'n' > 1 is not supported by this server: one choice per request", "n"
    return _validate_tool_choice(body) or _validate_response_format(body)


def _tool_names(body: Mapping[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(str(function["name"]))
    return names


def _validate_tool_choice(body: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """A ``tool_choice`` a server can honour: a mode, or a function it was given."""
    if "tool_choice" not in body or body["tool_choice"] is None:
        return None
    choice = body["tool_choice"]
    if not body.get("tools"):
        return "'tool_choice' is only allowed when 'tools' are specified", "tool_choice"
    if choice in ("auto", "none", "required"):
        return None
    forced = _forced_function(body)
    if forced is None:
        return (
            "'tool_choice' must be 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if forced not in _tool_names(body):
        return f"tool_choice names {forced!r}, which is not among the tools", "tool_choice"
    return None


def _validate_response_format(body: Mapping[str, Any]) -> tuple[str, str | None] | None:
    fmt = body.get("response_format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, Mapping) else None
    if kind == "json_schema":  # structured outputs, refused as OpenAI refuses them
        assert isinstance(fmt, Mapping)
        return response_format_problem(fmt)
    if kind not in ("text", "json_object"):
        return (
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'",
            "response_format",
        )
    if kind == "json_object":
        said = " ".join(_content_text(m.get("content")) for m in body["messages"])
        if "json" not in said.lower():
            # OpenAI's rule: JSON mode needs the word in the conversation.
            return (
                "'messages' must contain the word 'json' in some form to use"
                " 'response_format' of type 'json_object'",
                "messages",
            )
    return None


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def _strict_problems(body: dict[str, Any], max_output_tokens: int) -> tuple[str, str | None] | None:
    """What a strict server (llama.cpp, OpenAI) refuses that a lenient one lets through.

    * a message whose ``content`` is not a string (a user or system message may
      also carry an array of parts): OpenAI accepts ``null`` on an assistant
      message with tool calls, but llama.cpp-class servers fail on it (their
      chat templates concatenate the content) -- the mock refuses it like them;
    * a ``tool`` message that answers no call of the assistant message before
      it (an orphan), answers one twice, or an assistant message whose calls
      are not all answered before the next other message;
    * ``max_tokens`` / ``max_completion_tokens`` above the model's output limit.
    """
    open_calls: set[str] | None = None  # calls of the last assistant message, unanswered
    for i, message in enumerate(body["messages"]):
        role = message["role"]
        content = message.get("content")
        if role not in ("system", "user", "assistant", "tool", "developer"):
            return f"messages[{i}].role {role!r} is not a chat role", f"messages[{i}].role"
        if not isinstance(content, str | list):  # a string, or an array of parts
            shown = "null" if content is None else type(content).__name__
            return (
                f"messages[{i}].content must be a string, got {shown}"
                + (
                    " (llama.cpp-class servers answer this with HTTP 500)"
                    if role == "assistant"
                    else ""
                ),
                f"messages[{i}].content",
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                return f"messages[{i}].tool_call_id is required", f"messages[{i}].tool_call_id"
            if open_calls is None or call_id not in open_calls:
                return (
                    f"messages[{i}] with role 'tool' must be a response to a preceding"
                    f" message with 'tool_calls' (no open call {call_id!r})",
                    f"messages[{i}]",
                )
            open_calls.discard(call_id)
            continue
        if open_calls:
            return (
                "an assistant message with 'tool_calls' must be followed by tool messages"
                f" responding to each 'tool_call_id'; unanswered: {sorted(open_calls)}",
                f"messages[{i}]",
            )
        open_calls = None
        if role == "assistant" and message.get("tool_calls"):
            calls = message["tool_calls"]
            ids = [
                c["id"]
                for c in (calls if isinstance(calls, list) else ())
                if isinstance(c, Mapping) and isinstance(c.get("id"), str) and c["id"]
            ]
            if not isinstance(calls, list) or len(ids) != len(calls):
                return (
                    f"messages[{i}].tool_calls must each have an 'id'",
                    f"messages[{i}].tool_calls",
                )
            open_calls = set(ids)
    if open_calls:
        return (
            "an assistant message with 'tool_calls' must be followed by tool messages"
            f" responding to each 'tool_call_id'; unanswered: {sorted(open_calls)}",
            "messages",
        )
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if isinstance(value, int) and value > max_output_tokens:
            return (
                f"'{name}' is too large: {value}. This model supports at most"
                f" {max_output_tokens} completion tokens",
                name,
            )
    return None


def _max_tokens(body: dict[str, Any]) -> int | None:
    """The request's cap on completion tokens (``max_completion_tokens`` wins, as at OpenAI)."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _header_float(
    headers: Mapping[str, str], name: str, default: float, *, minimum: float | None = None
) -> float:
    raw = headers.get(name)
    if raw is None or not raw.strip():
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"header {name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"header {name} must be a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"header {name} must be >= {minimum:g}, got {raw!r}")
    return value


def _header_optional_float(
    headers: Mapping[str, str], name: str, default: float | None
) -> float | None:
    raw = headers.get(name)
    if raw is None or not raw.strip():
        return default
    value = _header_float(headers, name, 0.0)
    if value <= 0:
        raise ValueError(f"header {name} must be > 0, got {raw!r}")
    return value


def _pace(headers: Mapping[str, str], settings: MockSettings) -> tuple[float, float | None, int]:
    """A request's latency model from its headers, else the settings: time to first
    token (ms), token rate (None: unpaced) and tool-argument fragment size.
    Raises ``ValueError`` naming a header that is not a valid value."""
    ttft_ms = _header_float(headers, "x-mock-ttft-ms", settings.ttft_ms, minimum=0.0)
    tokens_per_s = _header_optional_float(headers, "x-mock-tokens-per-s", settings.tokens_per_s)
    args_chunk = int(
        _header_float(
            headers, "x-mock-args-chunk-chars", settings.tool_args_chunk_chars, minimum=1.0
        )
    )
    return ttft_ms, tokens_per_s, args_chunk
