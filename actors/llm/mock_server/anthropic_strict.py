"""What Anthropic's Messages API refuses in a request: :func:`validate_request` (pure).

The checks behind the endpoint's "Strictness" rules (:mod:`.anthropic`): top-level fields,
``max_tokens``, the roles and their order, content blocks, ``tool_use`` /
``tool_result`` pairing, ``tool_choice``, thinking, ``temperature`` and at most
:data:`MAX_BREAKPOINTS` ``cache_control`` markers, each answered with the API's
``(error type, message)``. A pure function of the body, apart from the endpoint, because
the property tests of the client (``tests/llm/test_anthropic_wire.py``) check its every
request against it without a server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "MAX_BREAKPOINTS",
    "Problem",
    "validate_request",
]


MAX_BREAKPOINTS: Final = 4


_TTL_S: Final = {"5m": 300.0, "1h": 3600.0}


_FIELDS: Final = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
    }
)
"""The top-level fields the API knows; anything else is refused (``extra inputs``)."""


_TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


_TOOL_ID: Final = re.compile(r"^[a-zA-Z0-9_-]+$")


Problem = tuple[str, str]
"""``(error type, message)`` of a refused request."""


def _bad(message: str) -> Problem:
    return "invalid_request_error", message


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _blocks(content: Any) -> list[Any] | None:
    """A message's content as a list of blocks (a plain string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    return None


def _count_markers(value: Any) -> int:
    if isinstance(value, Mapping):
        return int(value.get("cache_control") is not None)
    return 0


def _check_cache_control(block: Any, where: str) -> Problem | None:
    marker = block.get("cache_control") if isinstance(block, Mapping) else None
    if marker is None:
        return None
    if not isinstance(marker, Mapping) or marker.get("type") != "ephemeral":
        return _bad(f"{where}.cache_control: type must be 'ephemeral'")
    ttl = marker.get("ttl", "5m")
    if ttl not in _TTL_S:
        return _bad(f"{where}.cache_control.ttl: must be '5m' or '1h'")
    extra = set(marker) - {"type", "ttl"}
    if extra:
        return _bad(f"{where}.cache_control.{sorted(extra)[0]}: Extra inputs are not permitted")
    return None


def validate_request(body: Any, *, max_output_tokens: int = 64_000) -> Problem | None:
    """What the API would refuse in ``body`` (``None``: a valid Messages request).

    Pure: the property tests of :mod:`actors.llm.anthropic_wire` (the request) check the
    client's every request against it.
    """
    if not isinstance(body, dict):
        return _bad("request body must be a JSON object")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        return _bad(f"{unknown[0]}: Extra inputs are not permitted")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return _bad("model: Field required")
    if "max_tokens" not in body:
        return _bad("max_tokens: Field required")
    max_tokens = body["max_tokens"]
    if not _is_int(max_tokens) or max_tokens < 1:
        return _bad("max_tokens: Input should be a valid integer greater than or equal to 1")
    if max_tokens > max_output_tokens:
        return _bad(
            f"max_tokens: {max_tokens} > {max_output_tokens}, which is the maximum allowed"
            f" number of output tokens for {body['model']}"
        )
    if "stream" in body and not isinstance(body["stream"], bool):
        return _bad("stream: Input should be a valid boolean")
    temperature = body.get("temperature")
    if temperature is not None and (
        not isinstance(temperature, int | float)
        or isinstance(temperature, bool)
        or not 0 <= temperature <= 1
    ):
        return _bad("temperature: Input should be less than or equal to 1")
    markers = 0
    tool_names: list[str] = []
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return _bad("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                return _bad(f"tools.{i}: Input should be an object")
            name = tool.get("name")
            if not isinstance(name, str) or not _TOOL_NAME.match(name):
                return _bad(
                    f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
                )
            if name in tool_names:
                return _bad(f"tools: Tool names must be unique ({name!r})")
            schema = tool.get("input_schema")
            if not isinstance(schema, Mapping) or schema.get("type") != "object":
                return _bad(f"tools.{i}.input_schema: type must be 'object'")
            problem = _check_cache_control(tool, f"tools.{i}")
            if problem:
                return problem
            markers += _count_markers(tool)
            tool_names.append(name)
    system = body.get("system")
    if system is not None:
        if isinstance(system, list):
            for i, block in enumerate(system):
                if not isinstance(block, Mapping) or block.get("type") != "text":
                    return _bad(f"system.{i}: Input should be a text block")
                if not isinstance(block.get("text"), str) or not block["text"].strip():
                    return _bad(f"system.{i}: text content blocks must contain non-whitespace text")
                problem = _check_cache_control(block, f"system.{i}")
                if problem:
                    return problem
                markers += _count_markers(block)
        elif not isinstance(system, str):
            return _bad("system: Input should be a valid string or a list of text blocks")
    problem = _check_tool_choice(body, tool_names)
    if problem:
        return problem
    problem, message_markers = _check_messages(body.get("messages"))
    if problem:
        return problem
    markers += message_markers
    if markers > MAX_BREAKPOINTS:
        return _bad(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided."
            f" Found {markers}."
        )
    return None


def _check_tool_choice(body: Mapping[str, Any], tool_names: list[str]) -> Problem | None:
    choice = body.get("tool_choice")
    thinking = body.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, Mapping) or thinking.get("type") not in ("enabled", "disabled"):
            return _bad("thinking.type: Input should be 'enabled' or 'disabled'")
        if thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1024:
                return _bad(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                )
            if budget >= body["max_tokens"]:
                return _bad("`max_tokens` must be greater than `thinking.budget_tokens`.")
            if isinstance(choice, Mapping) and choice.get("type") in ("any", "tool"):
                return _bad("Thinking may not be enabled when tool_choice forces tool use.")
            temperature = body.get("temperature")
            if temperature is not None and temperature != 1:
                return _bad("`temperature` may only be set to 1 when thinking is enabled.")
    if choice is None:
        return None
    if not isinstance(choice, Mapping) or choice.get("type") not in ("auto", "any", "tool", "none"):
        return _bad("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
    if choice["type"] == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or name not in tool_names:
            return _bad(f"tool_choice.name: no tool named {name!r} in tools")
    return None


def _check_messages(messages: Any) -> tuple[Problem | None, int]:
    if not isinstance(messages, list) or not messages:
        return _bad("messages: at least one message is required"), 0
    markers = 0
    previous_role: str | None = None
    open_calls: set[str] = set()
    for i, message in enumerate(messages):
        where = f"messages.{i}"
        if not isinstance(message, Mapping):
            return _bad(f"{where}: Input should be an object"), 0
        role = message.get("role")
        if role not in ("user", "assistant"):
            hint = (
                ' The Messages API accepts a top-level `system` parameter, not "system" as an'
                " input message role."
                if role == "system"
                else ""
            )
            return _bad(f"{where}: Unexpected role {role!r}.{hint}"), 0
        if i == 0 and role != "user":
            return _bad('messages: first message must use the "user" role'), 0
        if role == previous_role:
            return _bad(
                f'messages: roles must alternate between "user" and "assistant", but found'
                f' multiple "{role}" roles in a row (messages.{i - 1} and messages.{i})'
            ), 0
        previous_role = role
        blocks = _blocks(message.get("content"))
        if blocks is None:
            return _bad(f"{where}.content: Input should be a valid string or list"), 0
        last = i == len(messages) - 1
        if not blocks and not (last and role == "assistant"):
            return _bad(
                f"{where}: all messages must have non-empty content except for the"
                " optional final assistant message"
            ), 0
        answered: set[str] = set()
        for j, block in enumerate(blocks):
            bwhere = f"{where}.content.{j}"
            if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                return _bad(f"{bwhere}: Input should be a content block"), 0
            problem = _check_cache_control(block, bwhere)
            if problem:
                return problem, 0
            markers += _count_markers(block)
            kind = block["type"]
            if kind == "text":
                text = block.get("text")
                if not isinstance(text, str) or not text.strip():
                    return _bad(
                        f"{bwhere}: text content blocks must contain non-whitespace text"
                    ), 0
            elif kind == "tool_use":
                if role != "assistant":
                    return _bad(
                        f"{bwhere}: tool_use blocks are only allowed in assistant messages"
                    ), 0
                call_id = block.get("id")
                if not isinstance(call_id, str) or not _TOOL_ID.match(call_id):
                    return _bad(f"{bwhere}.id: String should match pattern '^[a-zA-Z0-9_-]+$'"), 0
                if not isinstance(block.get("name"), str) or not block["name"]:
                    return _bad(f"{bwhere}.name: Field required"), 0
                if not isinstance(block.get("input"), Mapping):
                    return _bad(f"{bwhere}.input: Input should be a valid dictionary"), 0
            elif kind == "tool_result":
                if role != "user":
                    return _bad(
                        f"{bwhere}: tool_result blocks are only allowed in user messages"
                    ), 0
                call_id = block.get("tool_use_id")
                if not isinstance(call_id, str) or call_id not in open_calls or call_id in answered:
                    return _bad(
                        f"{bwhere}: unexpected `tool_use_id` found in `tool_result` blocks:"
                        f" {call_id}. Each `tool_result` block must have a corresponding"
                        " `tool_use` block in the previous message."
                    ), 0
                answered.add(call_id)
                content = block.get("content")
                if content is not None and _blocks(content) is None:
                    return _bad(f"{bwhere}.content: Input should be a valid string or list"), 0
            elif kind in ("thinking", "redacted_thinking", "image", "document"):
                pass
            else:
                return _bad(f"{bwhere}.type: unknown content block type {kind!r}"), 0
        if role == "user":
            missing = open_calls - answered
            if missing:
                return _bad(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks"
                    f" immediately after: {', '.join(sorted(missing))}. Each `tool_use` block"
                    " must have a corresponding `tool_result` block in the next message."
                ), 0
            open_calls = set()
        else:
            open_calls = {
                b["id"] for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_use"
            }
    if open_calls:
        return _bad(
            f"messages.{len(messages) - 1}: `tool_use` ids were found without `tool_result`"
            f" blocks immediately after: {', '.join(sorted(open_calls))}"
        ), 0
    return None, markers
