"""The Anthropic endpoint's prompt cache: :class:`PromptCache`, accounted as the API does it.

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

Kept apart from the endpoint: the accounting is a model of the API's (tested on its own
with :func:`prompt_blocks`), and the endpoint only asks it for a request's
:class:`CacheUsage`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fore.actors.llm.mock_server.anthropic_strict import _TTL_S, _blocks

__all__ = [
    "LOOKBACK_BLOCKS",
    "MIN_CACHE_TOKENS",
    "CacheUsage",
    "PromptBlock",
    "PromptCache",
    "prompt_blocks",
    "tokens_of",
]


MIN_CACHE_TOKENS: Final = 1024
"""The shortest prefix the API caches (Claude Sonnet and Opus; shorter ones are
processed but never cached, marker or not)."""


LOOKBACK_BLOCKS: Final = 20
"""How many blocks before a breakpoint the API looks for an earlier cache entry."""


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

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

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
            written_to = hit
            for mark in marks:
                if mark > hit and ends[mark] >= self.min_tokens:
                    self._refresh(keys[mark], now, _TTL_S[str(blocks[mark].ttl)])
                    written_to = mark
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
