"""What the mock answers: generated text, the reply shaped by the request, the planned answer.

:func:`generated_text` (deterministic pseudo-words when no script is loaded),
:func:`_obey` (a reply as the request's ``tool_choice`` and ``response_format`` shape it),
and :class:`_Answer` / :func:`_make_answer` (the reply with ids assigned, pacing resolved
and the ``max_tokens`` cut applied), with :class:`_Exchange`, the request while it is
answered. Content only -- no I/O -- so both wire formats frame the same answer.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from fore.actors.llm.codec import dumps
from fore.actors.llm.mock_schema import conform
from fore.actors.llm.mock_server.faults import _Fault
from fore.actors.llm.mock_server.settings import _Record
from fore.actors.llm.mock_server.strict import _first_tool_name, _forced_function
from fore.actors.llm.script import (
    ScriptReply,
    ScriptToolCall,
    arguments_json,
    new_tool_call_id,
    split_fragments,
    stream_plan,
)

_VOCABULARY: Final = (
    "actor", "buffer", "cache", "delta", "event", "future", "gateway", "handle",
    "index", "journal", "kernel", "ledger", "mailbox", "node", "offset", "pool",
    "queue", "router", "stream", "token", "update", "vector", "worker", "yield",
    "the", "a", "of", "to", "and", "in", "is", "for", "with", "on", "then", "as",
)  # fmt: skip


def generated_text(words: int, seed: str) -> str:
    """Deterministic pseudo-words: the same ``seed`` always gives the same text.

    The mock seeds with the request's purpose and last user/tool text, so a
    retried request gets the same answer as the original.
    """
    if words <= 0:
        return ""
    rng = random.Random(hashlib.sha256(seed.encode("utf-8")).digest())
    picked = [rng.choice(_VOCABULARY) for _ in range(words)]
    picked[0] = picked[0].capitalize()
    return " ".join(picked) + "."


def _obey(reply: ScriptReply, body: Mapping[str, Any]) -> ScriptReply:
    """The reply as a real server's answer would be shaped by the request.

    A named ``tool_choice`` forces exactly that call (the scripted call of that
    name, else one with no arguments) and no text; ``none`` allows no calls;
    ``required`` at least one (the first tool's, if the script has none). JSON
    mode (``response_format: json_object``) answers a JSON object: scripted
    text that is not one is wrapped as ``{"text": ...}``. A JSON-schema format
    (``json_schema``) answers text matching the schema: the scripted text if it
    does, else a minimal instance (:func:`actors.llm.mock_schema.conform`).
    """
    choice = body.get("tool_choice")
    forced = _forced_function(body) if body.get("tools") else None
    if forced is not None:
        calls = [c for c in reply.tool_calls if c.name == forced][:1] or [
            ScriptToolCall(name=forced)
        ]
        reply = reply.model_copy(update={"text": "", "tool_calls": tuple(calls)})
    elif choice == "none" and reply.tool_calls:
        reply = reply.model_copy(update={"tool_calls": ()})
    elif choice == "required" and not reply.tool_calls and body.get("tools"):
        reply = reply.model_copy(
            update={"tool_calls": (ScriptToolCall(name=_first_tool_name(body)),)}
        )
    fmt = body.get("response_format")
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema" and not reply.tool_calls:
        # A schema-enforcing server can only answer matching JSON (actors.llm.mock_schema).
        schema = fmt["json_schema"].get("schema", {})
        conformed = conform(reply.text, schema)
        if conformed != reply.text:
            reply = reply.model_copy(update={"text": conformed})
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        try:
            is_object = isinstance(json.loads(reply.text), dict)
        except ValueError:
            is_object = False
        if not is_object:
            reply = reply.model_copy(update={"text": dumps({"text": reply.text})})
    return reply


def _broken_arguments(args_json: str) -> str:
    """Argument text that no amount of further fragments can make valid JSON."""
    return args_json[:-1] + ', "' if args_json.endswith("}") else args_json + '{"'


@dataclass(slots=True)
class _Exchange:
    """One chat-completion request while it is being answered."""

    record: _Record
    session: str
    purpose: str
    request_id: str | None
    model: str
    stream: bool
    include_usage: bool
    fault: _Fault | None
    completion_id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))


@dataclass(frozen=True, slots=True)
class _Answer:
    """The content of a reply, with ids assigned and pacing resolved."""

    text_chunks: tuple[str, ...]
    tool_calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments text)
    first_delay_s: float
    interval_s: float
    prompt_tokens: int
    args_chunk_chars: int
    cut_at_max_tokens: bool = False
    """The reply was longer than the request's ``max_tokens``: cut, ``finish_reason`` length."""

    @property
    def finish_reason(self) -> str:
        if self.cut_at_max_tokens:
            return "length"
        return "tool_calls" if self.tool_calls else "stop"

    @property
    def text(self) -> str:
        return "".join(self.text_chunks)

    def fragments(self, arguments: str) -> tuple[str, ...]:
        return split_fragments(arguments, self.args_chunk_chars)

    @property
    def completion_tokens(self) -> int:
        return len(self.text_chunks) + sum(
            1 + len(self.fragments(args)) for _, _, args in self.tool_calls
        )

    @property
    def total_s(self) -> float:
        deltas = self.completion_tokens
        return self.first_delay_s + self.interval_s * max(0, deltas - 1)

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def _make_answer(
    reply: ScriptReply,
    *,
    ttft_ms: float,
    tokens_per_s: float | None,
    args_chunk_chars: int,
    prompt_tokens: int,
    bad_args_tool: str | None,
    max_tokens: int | None = None,
) -> _Answer:
    """The reply as sent. Past ``max_tokens`` it is cut as a provider cuts it: the text
    stops at the cap, tool calls that did not fit are dropped, ``finish_reason`` is
    ``length``."""
    plan = stream_plan(reply, default_ttft_ms=ttft_ms, default_tokens_per_s=tokens_per_s)
    calls: list[ScriptToolCall] = list(reply.tool_calls)
    if bad_args_tool is not None and not calls:
        calls.append(ScriptToolCall(name=bad_args_tool))
    tool_calls = tuple(
        (
            call.id or new_tool_call_id(),
            call.name,
            _broken_arguments(arguments_json(call.arguments))
            if bad_args_tool is not None
            else arguments_json(call.arguments),
        )
        for call in calls
    )
    answer = _Answer(
        text_chunks=plan.chunks,
        tool_calls=tool_calls,
        first_delay_s=plan.first_token_delay_s,
        interval_s=plan.token_interval_s,
        prompt_tokens=prompt_tokens,
        args_chunk_chars=args_chunk_chars,
    )
    if max_tokens is None or answer.completion_tokens <= max_tokens:
        return answer
    return replace(
        answer, text_chunks=plan.chunks[:max_tokens], tool_calls=(), cut_at_max_tokens=True
    )
