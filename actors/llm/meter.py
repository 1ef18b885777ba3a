"""What a provider's answers cost, per purpose: the figures behind ``/cost`` and the bench.

A provider that knows its prompt cache (:class:`~actors.llm.anthropic.AnthropicModel`)
records every completed answer's :class:`~messages.llm.Usage` here, by the
request's purpose (``main``, ``suggestion``, ``speculation``, ``pipelined``).
The point is the forks: each repeats the main request's prompt byte for byte,
so the share of their input read from the cache says whether caching works.
Thread-safe (the gateway's two loops record into one meter).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from fore.messages.llm import Usage

FORK_PURPOSES = ("suggestion", "speculation", "pipelined")

CACHE_READ_PRICE = 0.1
"""What a token read from Anthropic's prompt cache costs, in input-token prices."""
CACHE_WRITE_PRICE = 1.25
"""What a token written to it costs (the 5-minute TTL; a 1-hour entry costs 2×)."""


@dataclass(frozen=True)
class CacheShare:
    """Input tokens of a group of requests, by how they were billed."""

    requests: int
    input_tokens: int
    """Every input token (cached or not)."""
    cache_read_tokens: int
    cache_write_tokens: int

    @property
    def uncached_tokens(self) -> int:
        """Billed at the full input price."""
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def cost_ratio(self) -> float | None:
        """The input's price with caching over its price without (``None``: no input).

        Reads at :data:`CACHE_READ_PRICE`, writes at :data:`CACHE_WRITE_PRICE`, the
        rest at the full price: the same requests, billed with and without the cache.
        """
        if not self.input_tokens:
            return None
        billed = (
            self.uncached_tokens
            + CACHE_WRITE_PRICE * self.cache_write_tokens
            + CACHE_READ_PRICE * self.cache_read_tokens
        )
        return billed / self.input_tokens

    @property
    def read_share(self) -> float | None:
        """The share of input read from the cache (``None``: no input at all)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else None


class UsageMeter:
    """Completed answers' usage summed per purpose."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[str, Usage] = {}
        self._requests: dict[str, int] = {}

    def record(self, purpose: str, usage: Usage) -> None:
        with self._lock:
            self._usage[purpose] = self._usage.get(purpose, Usage()) + usage
            self._requests[purpose] = self._requests.get(purpose, 0) + 1

    def reset(self) -> None:
        with self._lock:
            self._usage.clear()
            self._requests.clear()

    def by_purpose(self) -> dict[str, tuple[int, Usage]]:
        """``{purpose: (requests, summed usage)}``."""
        with self._lock:
            return {p: (self._requests[p], u) for p, u in self._usage.items()}

    def share(self, purposes: tuple[str, ...] | None = None) -> CacheShare:
        """The cache figures of ``purposes`` together (``None``: all of them)."""
        requests = prompt = read = write = 0
        for purpose, (count, usage) in self.by_purpose().items():
            if purposes is not None and purpose not in purposes:
                continue
            requests += count
            prompt += usage.prompt_tokens
            read += usage.cached_tokens
            write += usage.cache_write_tokens
        return CacheShare(requests, prompt, read, write)

    def forks(self) -> CacheShare:
        """Suggestion, speculation and pipelined requests together."""
        return self.share(FORK_PURPOSES)


__all__ = ["CACHE_READ_PRICE", "CACHE_WRITE_PRICE", "FORK_PURPOSES", "CacheShare", "UsageMeter"]
