"""The mock server's Anthropic Messages endpoint (``POST /v1/messages``).

The same server as :mod:`actors.llm.mock_server` -- the same script, latency
model, faults, records and stats -- speaking Anthropic's protocol, so that
:class:`~actors.llm.anthropic.AnthropicModel` is tested over real HTTP and
the official ``anthropic`` SDK can check that the mock speaks the real thing
(``tests/test_anthropic_sdk.py``).

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

Prompt caching, as the API accounts it
--------------------------------------
The prompt is a sequence of blocks -- each tool, each system block, each
message's content blocks -- and the cache is keyed by the bytes of the prefix
up to a block (:func:`prompt_blocks`: each block's compact JSON, its
``cache_control`` left out, since a marker does not change what it marks).
A request reads the longest cached prefix that ends at one of its
breakpoints or within the 20 blocks before one; it then writes every one of
its breakpoints past that point. ``cache_read_input_tokens`` is the prefix
read, ``cache_creation_input_tokens`` what lies between it and the last
breakpoint, ``input_tokens`` the rest (tokens are 4 bytes here, as in the
OpenAI endpoint). As at the API: prefixes under ``min_cache_tokens`` (1,024)
are never cached; entries live 5 minutes (or 1 hour with ``ttl: "1h"``) from
their last use; a change of ``tool_choice`` or ``thinking`` misses the message
part of the cache (tools and system still hit); everything is per model.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fore.actors.llm.mock_server.faults import _NOT_SSE_PAGE, _Fault, _format_seconds
from fore.actors.llm.mock_server.replies import _Answer, _Exchange, _make_answer, generated_text
from fore.actors.llm.mock_server.settings import FAULT_KINDS, _Record
from fore.actors.llm.mock_server.sse import _CUT, _LINGER
from fore.actors.llm.mock_server.strict import _header_float, _header_optional_float
from fore.actors.llm.script import ScriptReply, ScriptToolCall

if TYPE_CHECKING:
    from fore.actors.llm.mock_server.app import MockLlmApp

__all__ = [
    "MIN_CACHE_TOKENS",
    "AnthropicMessages",
    "CacheUsage",
    "PromptCache",
    "prompt_blocks",
    "validate_request",
]

MIN_CACHE_TOKENS: Final = 1024
"""The shortest prefix the API caches (Claude Sonnet and Opus; shorter ones are
processed but never cached, marker or not)."""

LOOKBACK_BLOCKS: Final = 20
"""How many blocks before a breakpoint the API looks for an earlier cache entry."""

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


# -- validation (pure) ---------------------------------------------------------------------------


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

    Pure: the property tests of :mod:`actors.llm.anthropic_wire` check the
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


# -- prompt caching --------------------------------------------------------------------------------


def _canonical(block: Mapping[str, Any]) -> bytes:
    """A block's bytes as the cache keys them: its JSON as sent, ``cache_control`` left out."""
    return json.dumps(
        {k: v for k, v in block.items() if k != "cache_control"},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode()


@dataclass(frozen=True)
class PromptBlock:
    """One block of a prompt, in cache order."""

    data: bytes
    """What the cache keys (see :func:`prompt_blocks`)."""
    ttl: str | None
    """``5m`` / ``1h`` when it carries a breakpoint, else ``None``."""


def prompt_blocks(body: Mapping[str, Any]) -> list[PromptBlock]:
    """A (valid) request's prompt as blocks: tools, system, then each message's blocks.

    The first message block also carries the message-level settings a change
    of which misses the message part of the cache (``tool_choice``,
    ``thinking``), and every message block its role and position, so the same
    text as a different turn is a different prefix.
    """
    blocks: list[PromptBlock] = []

    def ttl(block: Any) -> str | None:
        marker = block.get("cache_control") if isinstance(block, Mapping) else None
        return str(marker.get("ttl", "5m")) if isinstance(marker, Mapping) else None

    for tool in body.get("tools") or ():
        blocks.append(PromptBlock(b"tool:" + _canonical(tool), ttl(tool)))
    system = body.get("system")
    for block in _blocks(system) or () if system is not None else ():
        blocks.append(PromptBlock(b"system:" + _canonical(block), ttl(block)))
    settings = json.dumps(
        {"tool_choice": body.get("tool_choice"), "thinking": body.get("thinking")},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    first = True
    for i, message in enumerate(body.get("messages") or ()):
        role = str(message.get("role"))
        for j, block in enumerate(_blocks(message.get("content")) or ()):
            head = f"{role}[{i}.{j}]:".encode()
            if first:
                head = b"settings:" + settings + b"\n" + head
                first = False
            blocks.append(PromptBlock(head + _canonical(block), ttl(block)))
    return blocks


def tokens_of(size: int) -> int:
    """Tokens of ``size`` bytes of prompt (4 bytes a token, as the OpenAI endpoint counts)."""
    return (size + 3) // 4


@dataclass(frozen=True)
class CacheUsage:
    """How one request's prompt was billed."""

    input_tokens: int
    """Neither read from nor written to the cache (the API's ``input_tokens``)."""
    cache_read_input_tokens: int
    cache_creation_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


class PromptCache:
    """The API's prompt cache, as far as billing can tell (thread-safe, bounded).

    Keys are digests of a prefix's bytes (per model); values the time they
    expire. Entries are written only at breakpoints and refreshed when read.
    Past ``max_entries`` the least recently used entry goes.
    """

    def __init__(self, *, min_tokens: int = MIN_CACHE_TOKENS, max_entries: int = 200_000) -> None:
        self.min_tokens = min_tokens
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, float] = OrderedDict()
        self._lock = threading.Lock()
        self.reads = 0
        self.writes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.reads = self.writes = 0

    def account(
        self, model: str, blocks: Sequence[PromptBlock], *, now: float | None = None
    ) -> CacheUsage:
        """Bill one request's prompt, reading and writing the cache as the API would."""
        now = time.monotonic() if now is None else now
        digest = hashlib.sha256(model.encode() + b"\0")
        keys: list[bytes] = []
        ends: list[int] = []  # tokens up to and including each block
        size = 0
        for block in blocks:
            digest.update(len(block.data).to_bytes(8, "big"))
            digest.update(block.data)
            keys.append(digest.copy().digest())
            size += len(block.data)
            ends.append(tokens_of(size))
        total = ends[-1] if ends else 0
        marks = [i for i, block in enumerate(blocks) if block.ttl is not None]
        with self._lock:
            hit = -1
            for mark in marks:
                for i in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                    if i <= hit:
                        break
                    expires = self._entries.get(keys[i])
                    if expires is not None and expires > now:
                        hit = i
                        break
            read = ends[hit] if hit >= 0 else 0
            if hit >= 0:
                self._refresh(keys[hit], now, self._ttl_at(blocks, marks, hit))
                self.reads += 1
            written_to = hit
            for mark in marks:
                if mark > hit and ends[mark] >= self.min_tokens:
                    self._refresh(keys[mark], now, _TTL_S[str(blocks[mark].ttl)])
                    written_to = mark
                    self.writes += 1
        write = ends[written_to] - read if written_to > hit else 0
        return CacheUsage(total - read - write, read, write)

    @staticmethod
    def _ttl_at(blocks: Sequence[PromptBlock], marks: list[int], index: int) -> float:
        """The TTL a read at ``index`` is refreshed with: that of the breakpoint it serves."""
        for mark in marks:
            if mark >= index:
                return _TTL_S[str(blocks[mark].ttl)]
        return _TTL_S["5m"]

    def _refresh(self, key: bytes, now: float, ttl_s: float) -> None:
        self._entries[key] = max(self._entries.get(key, 0.0), now + ttl_s)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


# -- the endpoint --------------------------------------------------------------------------------

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
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
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
        app = self._app
        app._enter()
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
            record = app._new_record(request.headers, body if isinstance(body, dict) else None)
            if request.client is not None:
                record.peer = f"{request.client.host}:{request.client.port}"
            response = await self._respond(record, request.headers, body, receive)
            if record.outcome != "in_progress":
                app._finish(record)
            elif record.stream:
                app._count_stream_start()
            await response(scope, receive, send)
        finally:
            if record is None:
                app._abandon()
            else:
                app._finish(record)

    async def _respond(
        self, record: _Record, headers: Mapping[str, str], body: Any, receive: Any
    ) -> Response:
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
            ttft_ms = _header_float(headers, "x-mock-ttft-ms", settings.ttft_ms, minimum=0.0)
            tokens_per_s = _header_optional_float(
                headers, "x-mock-tokens-per-s", settings.tokens_per_s
            )
            args_chunk = int(
                _header_float(
                    headers, "x-mock-args-chunk-chars", settings.tool_args_chunk_chars, minimum=1.0
                )
            )
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
        cursor = app._cursor(record.session)
        if cursor is None:
            reply = ScriptReply(
                text=generated_text(settings.generated_words, f"{record.purpose}\0{last_text}")
            )
        elif fault is None:
            reply = cursor.next_reply(record.purpose, last_text)
        else:
            reply = cursor.peek_reply(record.purpose, last_text)
        reply = _with_tool_ids(_obey(reply, body))
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
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        headers = {"content-type": "application/json", **extra}
        if kind == "malformed":
            data = data[: len(data) // 2] + b"<<not json>>"
        elif kind == "truncated":
            data = data[: len(data) // 2]
        elif kind == "cut":
            full_length = len(data)
            ex.record.outcome = "cut"
            from fore.actors.llm.mock_server.faults import _CutConnection

            async def partial() -> AsyncIterator[bytes]:
                yield data[: full_length // 2]
                raise _CutConnection("cut fault")

            return StreamingResponse(
                partial(), headers={**headers, "content-length": str(full_length)}
            )
        ex.record.outcome = "completed"
        return Response(data, 200, headers=headers)


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
