"""The scripted model's reply format and the rules for consuming it.

The JSON file format is a public contract (issue 4, point 4)::

    {"replies": [
      {"when": {"purpose": "main", "contains": "run the tests"},
       "text": "Running them.",
       "tool_calls": [{"name": "shell", "arguments": {"command": "pytest -q"}}],
       "delay_ms": 0}
    ]}

Two consumers share this module and must behave identically: the in-process
``ScriptedModel`` (the integrator's, no HTTP at all) and the mock
OpenAI-compatible server (:mod:`actors.llm.mock_server`) that tests and
benchmarks talk to over real loopback HTTP. Everything that decides *which*
reply a request gets (:class:`ScriptCursor`) and *how* it streams
(:func:`stream_plan`, :func:`tokenize_text`, :func:`split_fragments`,
:func:`arguments_json`) therefore lives here, so a test that passes against one
also passes against the other.

Matching rule: each request takes the **first reply not yet used** whose
``when`` matches -- ``purpose`` equals the request's purpose and ``contains`` is
a substring of the last user or tool-result text; both are optional and a
reply without ``when`` matches everything. When nothing matches the answer is
:data:`NO_REPLY` (the text ``(no scripted reply)``), never an exception: a
missing reply is a test-authoring mistake that should show up in the transcript,
not crash the session under test.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, JsonValue, ValidationError

from fore.actors.llm.codec import dumps
from fore.errors import ScriptError
from fore.messages.base import Message

__all__ = [
    "MAX_TOKEN_CHARS",
    "NO_REPLY",
    "NO_REPLY_TEXT",
    "Purpose",
    "ScriptCursor",
    "ScriptError",
    "ScriptFile",
    "ScriptReply",
    "ScriptToolCall",
    "ScriptWhen",
    "StreamPlan",
    "arguments_json",
    "last_user_or_tool_text",
    "new_tool_call_id",
    "split_fragments",
    "stream_plan",
    "tokenize_text",
]

Purpose = Literal["main", "suggestion", "speculation", "pipelined"]
"""Why a request is made; the LLM layer's request purposes."""

NO_REPLY_TEXT = "(no scripted reply)"
"""The text answered when no scripted reply matches a request."""

MAX_TOKEN_CHARS = 12
"""Longest non-whitespace run in one streamed token.

Without a cap a long word (a path, a URL, minified JSON) would arrive in one
chunk, which hides client bugs that only show when a token is split.
"""


class ScriptWhen(Message):
    """When a reply applies; every given condition must hold."""

    purpose: Purpose | None = None
    """The request's purpose must equal this (any purpose when absent)."""

    contains: str | None = None
    """Must be a substring of the last user or tool-result text (any when absent)."""

    def matches(self, purpose: str, last_text: str) -> bool:
        """Whether a request with this purpose and last text satisfies the condition."""
        if self.purpose is not None and self.purpose != purpose:
            return False
        return self.contains is None or self.contains in last_text


class ScriptToolCall(Message):
    """One tool call of a scripted reply.

    ``id`` is generated (:func:`new_tool_call_id`) each time the reply is
    served when absent, so two requests never see the same generated id.
    """

    name: str = Field(min_length=1)
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    id: str | None = Field(default=None, min_length=1)


class ScriptReply(Message):
    """One scripted model answer: text and/or tool calls, plus its pacing.

    Pacing (see :func:`stream_plan`): ``delay_ms`` is extra latency added
    before the first token; ``ttft_ms`` and ``tokens_per_s`` override the
    server's (or the in-process model's) defaults for this reply only.
    """

    when: ScriptWhen | None = None
    text: str = ""
    tool_calls: tuple[ScriptToolCall, ...] = ()
    delay_ms: int = Field(default=0, ge=0)
    ttft_ms: int | None = Field(default=None, ge=0)
    tokens_per_s: float | None = Field(default=None, gt=0)

    def matches(self, purpose: str, last_text: str) -> bool:
        """Whether this reply may answer a request (ignoring whether it was used)."""
        return self.when is None or self.when.matches(purpose, last_text)


NO_REPLY = ScriptReply(text=NO_REPLY_TEXT)
"""The reply served when no scripted reply matches."""


def _format_loc(loc: Iterable[int | str]) -> str:
    """``('replies', 0, 'when', 'purpose')`` -> ``replies[0].when.purpose``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


class ScriptFile(Message):
    """A whole script: the ordered replies of the scripted model."""

    replies: tuple[ScriptReply, ...]

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "<script>") -> ScriptFile:
        """Parse and validate a script; errors name ``source``, position and field."""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScriptError(
                f"{source}: invalid JSON at line {exc.lineno} column {exc.colno}"
                f" (char {exc.pos}): {exc.msg}"
            ) from None
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{_format_loc(err['loc'])}: {err['msg']}"
                + (f" (got {err['input']!r})" if err["type"] != "missing" else "")
                for err in exc.errors(include_url=False)
            )
            raise ScriptError(f"{source}: invalid script: {problems}") from None

    @classmethod
    def from_path(cls, path: str | Path) -> ScriptFile:
        """Read a script file; raises :class:`ScriptError` with a one-line reason."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ScriptError(f"{p}: cannot read script: {reason}") from None
        return cls.from_json(text, source=str(p))

    def to_json(self, *, indent: int | None = 2) -> str:
        """The script as JSON in the public format (defaults omitted)."""
        return self.model_dump_json(indent=indent, exclude_defaults=True)


class ScriptCursor:
    """Per-conversation consumption state of a script; thread-safe.

    Each conversation (a session, in the mock server the ``X-Fore-Session``
    header) owns one cursor, so two conversations replaying the same script
    each get their own first reply. Consumption is under a lock because the
    in-process model may be called from several actor threads at once and
    the mock server's Python API is called from test threads.
    """

    def __init__(self, replies: ScriptFile | Sequence[ScriptReply]) -> None:
        self._replies: tuple[ScriptReply, ...] = (
            replies.replies if isinstance(replies, ScriptFile) else tuple(replies)
        )
        self._used = [False] * len(self._replies)
        self._first_unused = 0
        self._lock = threading.Lock()

    @property
    def replies(self) -> tuple[ScriptReply, ...]:
        """All replies of the script, used or not, in order."""
        return self._replies

    @property
    def remaining(self) -> int:
        """How many replies are not used yet."""
        with self._lock:
            return self._used.count(False)

    def _find(self, purpose: str, last_text: str) -> int | None:
        for i in range(self._first_unused, len(self._replies)):
            if not self._used[i] and self._replies[i].matches(purpose, last_text):
                return i
        return None

    def next_reply(self, purpose: str, last_text: str) -> ScriptReply:
        """Take the first unused matching reply (and mark it used), else :data:`NO_REPLY`."""
        with self._lock:
            i = self._find(purpose, last_text)
            if i is None:
                return NO_REPLY
            self._used[i] = True
            while self._first_unused < len(self._used) and self._used[self._first_unused]:
                self._first_unused += 1
            return self._replies[i]

    def peek_reply(self, purpose: str, last_text: str) -> ScriptReply:
        """The reply :meth:`next_reply` would return, without using it.

        The mock server serves injected faults from a peeked reply, so a
        client that retries after a fault still gets the scripted answer.
        """
        with self._lock:
            i = self._find(purpose, last_text)
            return NO_REPLY if i is None else self._replies[i]

    def reset(self) -> None:
        """Mark every reply unused again."""
        with self._lock:
            self._used = [False] * len(self._replies)
            self._first_unused = 0


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return ""


def last_user_or_tool_text(openai_messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last ``user`` or ``tool`` message of an OpenAI chat request.

    ``content`` may be a string or a list of ``{"type": "text", "text": ...}``
    parts (other part types, e.g. images, contribute nothing). Returns ``""``
    when there is no such message, so ``contains`` conditions simply fail.
    """
    for message in reversed(openai_messages):
        if isinstance(message, Mapping) and message.get("role") in ("user", "tool"):
            return _content_text(message.get("content"))
    return ""


_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def new_tool_call_id() -> str:
    """A fresh OpenAI-style tool-call id: ``call_`` + 24 random alphanumerics."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """The wire form of tool-call arguments (what ``function.arguments`` carries).

    Compact (no spaces after ``,`` / ``:``, as OpenAI sends it) and not
    ASCII-escaped. One serialisation for both the server and the in-process
    model -- and the client's request history -- so the fragments of a tool call
    are the same whichever produced them.
    """
    return dumps(arguments)


def split_fragments(text: str, size: int) -> tuple[str, ...]:
    """``text`` cut into pieces of ``size`` characters (the last may be shorter).

    Used for tool-call argument fragments: the cut points ignore JSON
    structure on purpose, so a client must reassemble before parsing. An
    empty ``text`` yields no fragments.
    """
    if size < 1:
        raise ValueError(f"fragment size must be >= 1, got {size}")
    return tuple(text[i : i + size] for i in range(0, len(text), size))


_TOKEN_RE = re.compile(rf"\s*\S{{1,{MAX_TOKEN_CHARS}}}|\s+")


def tokenize_text(text: str) -> tuple[str, ...]:
    """Split ``text`` into word-ish streaming tokens; ``"".join`` gives ``text`` back.

    A token is a run of whitespace followed by up to :data:`MAX_TOKEN_CHARS`
    non-whitespace characters (``"Running them."`` -> ``"Running"``,
    ``" them."``); trailing whitespace is its own token. Every character of
    ``text`` is in exactly one token, in order.
    """
    return tuple(_TOKEN_RE.findall(text))


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """How one reply streams: its text tokens and when each is sent.

    ``delays_s[i]`` is the pause *before* ``chunks[i]``: the first is
    ``first_token_delay_s`` (``delay_ms`` + time to first token), every later
    one is ``token_interval_s`` (``1 / tokens_per_s``; 0 = unpaced). Tool
    calls, which follow the text, are paced at ``token_interval_s`` per
    streamed delta; if the text is empty the first tool-call delta waits
    ``first_token_delay_s`` instead.
    """

    chunks: tuple[str, ...]
    delays_s: tuple[float, ...]
    first_token_delay_s: float
    token_interval_s: float

    @property
    def text(self) -> str:
        """The reassembled text (always equal to the reply's text)."""
        return "".join(self.chunks)


def stream_plan(
    reply: ScriptReply,
    *,
    default_ttft_ms: float = 0.0,
    default_tokens_per_s: float | None = None,
) -> StreamPlan:
    """The streaming schedule of ``reply`` (shared by the mock server and ScriptedModel).

    Precedence: the reply's own ``ttft_ms`` / ``tokens_per_s`` win over the
    defaults passed here (the mock server passes its per-request header
    overrides or server-wide settings as the defaults). ``delay_ms`` is always
    added on top of the time to first token. ``tokens_per_s`` of ``None`` or
    ``<= 0`` means unpaced: tokens follow each other without waiting.
    """
    ttft_ms = reply.ttft_ms if reply.ttft_ms is not None else default_ttft_ms
    rate = reply.tokens_per_s if reply.tokens_per_s is not None else default_tokens_per_s
    first = max(0.0, (reply.delay_ms + max(0.0, ttft_ms)) / 1000.0)
    interval = 1.0 / rate if rate is not None and rate > 0 else 0.0
    chunks = tokenize_text(reply.text)
    delays = tuple(first if i == 0 else interval for i in range(len(chunks)))
    return StreamPlan(
        chunks=chunks, delays_s=delays, first_token_delay_s=first, token_interval_s=interval
    )
