"""Usage and cost: every completed model request, priced and added up by session and purpose.

The LLM loop is the one place every request of every purpose passes
(``main``, ``suggestion``, ``speculation``, ``pipelined``), so it records each
completed request here (:meth:`UsageLedger.record`), from its own thread; the
ledger is a small lock-guarded table, always on (it costs one lock per
request, not per token) and independent of OpenTelemetry. ``session.usage``,
``Runtime.usage``, ``fore run --json``'s last line, ``/cost`` in ``fore chat``
and the bench report read it.

Prices (:class:`~messages.usage.ModelPrice`) are looked up by the request's
model name: an exact name first, then shell-style patterns
(``"gpt-4o*"``) in the order given, then ``"*"``. A model without a price
still has its tokens counted; its requests are ``unpriced_requests``.
"""

from __future__ import annotations

import fnmatch
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fore.messages.llm import Purpose, Usage
from fore.messages.usage import PURPOSES, ModelPrice, TokenUsage, UsageSummary

PER = 1_000_000.0
"""Prices are per million tokens."""

CHARS_PER_TOKEN = 4
"""Characters per token of the estimate of what a provider has not reported yet
(a stream cancelled before its usage, output while it streams): speculation
budgets, usage limits and the bench's waste use the same rule."""


def estimate_tokens(chars: int) -> int:
    """Tokens for ``chars`` characters at :data:`CHARS_PER_TOKEN` (rounded up)."""
    return -(-max(0, chars) // CHARS_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """One request's tokens in the ledger's terms (see :mod:`messages.usage`)."""

    input: int = 0
    cached_input: int = 0
    cache_write: int = 0
    output: int = 0


def counts_of(usage: Usage) -> TokenCounts:
    """``usage`` as :class:`TokenCounts`.

    ``prompt_tokens`` is every input token, cache reads (``cached_tokens``)
    and cache writes (``cache_write_tokens``, Anthropic's
    ``cache_creation_input_tokens``) included. Negative or inconsistent
    figures from a provider are clamped: cached and written tokens are part of
    the input, never more.
    """
    prompt = max(0, usage.prompt_tokens)
    cached = min(prompt, max(0, usage.cached_tokens))
    written = min(prompt - cached, max(0, usage.cache_write_tokens))
    return TokenCounts(
        input=prompt,
        cached_input=cached,
        cache_write=written,
        output=max(0, usage.completion_tokens),
    )


def cost_of(counts: TokenCounts, price: ModelPrice) -> float:
    """USD for ``counts`` at ``price`` (pure): each kind of token at its own rate."""
    cached_rate = price.input if price.cached_input is None else price.cached_input
    write_rate = price.input if price.cache_write is None else price.cache_write
    plain = max(0, counts.input - counts.cached_input - counts.cache_write)
    return (
        plain * price.input
        + counts.cached_input * cached_rate
        + counts.cache_write * write_rate
        + counts.output * price.output
    ) / PER


class PriceTable:
    """Prices by model name: exact names, then patterns in order, then ``"*"`` (see module docs)."""

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        self._exact: dict[str, ModelPrice] = {}
        self._patterns: list[tuple[str, ModelPrice]] = []
        for name, given in (prices or {}).items():
            price = given if isinstance(given, ModelPrice) else ModelPrice.model_validate(given)
            if any(ch in name for ch in "*?["):
                self._patterns.append((name, price))
            else:
                self._exact[name] = price
        self._cache: dict[str, ModelPrice | None] = {}

    def __bool__(self) -> bool:
        return bool(self._exact or self._patterns)

    def price(self, model: str) -> ModelPrice | None:
        """The price of ``model``, or ``None`` when the table has none for it."""
        if model in self._exact:
            return self._exact[model]
        try:
            return self._cache[model]
        except KeyError:
            pass
        found = next((p for pat, p in self._patterns if fnmatch.fnmatchcase(model, pat)), None)
        if len(self._cache) < 4096:  # model names are few; the bound is for hostile ones
            self._cache[model] = found
        return found


@dataclass
class _Account:
    """Running totals of one session (or of the runtime), by purpose."""

    by_purpose: dict[str, list[float]] = field(default_factory=dict)

    def add(self, purpose: str, counts: TokenCounts, cost: float | None) -> None:
        row = self.by_purpose.get(purpose)
        if row is None:
            row = self.by_purpose[purpose] = [0, 0, 0, 0, 0, 0.0, 0]
        row[0] += 1
        row[1] += counts.input
        row[2] += counts.cached_input
        row[3] += counts.cache_write
        row[4] += counts.output
        if cost is None:
            row[6] += 1
        else:
            row[5] += cost

    def summary(self) -> UsageSummary:
        by: dict[Purpose, TokenUsage] = {}
        for purpose in PURPOSES:
            row = self.by_purpose.get(purpose)
            if row is not None:
                by[purpose] = TokenUsage(
                    requests=int(row[0]),
                    input_tokens=int(row[1]),
                    cached_input_tokens=int(row[2]),
                    cache_write_tokens=int(row[3]),
                    output_tokens=int(row[4]),
                    cost_usd=float(row[5]),
                    unpriced_requests=int(row[6]),
                )
        return UsageSummary(by_purpose=by)


class UsageLedger:
    """Usage per session and per runtime, by purpose (thread-safe; see module docs).

    A session's account is kept until :meth:`forget` (its session closed:
    ``Session.usage`` keeps the last summary), so a long-running runtime
    holds only its open sessions; the runtime's total keeps everything.
    """

    def __init__(self, prices: PriceTable | Mapping[str, ModelPrice] | None = None) -> None:
        self.prices = prices if isinstance(prices, PriceTable) else PriceTable(prices)
        self._lock = threading.Lock()
        self._sessions: dict[str, _Account] = {}
        self._total = _Account()
        self._forgotten: OrderedDict[str, None] = OrderedDict()
        """Recently closed sessions: a late answer counts in the total only (bounded)."""

    def record(
        self, session_id: str, purpose: str, model: str, usage: Usage, price: Any = None
    ) -> float | None:
        """Add one completed request; returns its cost (``None``: no price for ``model``).

        ``price`` (a :class:`ModelPrice`, e.g. the model object's own) wins over the table.
        """
        counts = counts_of(usage)
        if not isinstance(price, ModelPrice):
            price = self.prices.price(model)
        cost = None if price is None else cost_of(counts, price)
        with self._lock:
            account = self._sessions.get(session_id)
            if account is None and session_id not in self._forgotten:
                account = self._sessions[session_id] = _Account()
            if account is not None:
                account.add(purpose, counts, cost)
            self._total.add(purpose, counts, cost)
        return cost

    def session(self, session_id: str) -> UsageSummary:
        with self._lock:
            account = self._sessions.get(session_id)
            return account.summary() if account is not None else UsageSummary()

    def total(self) -> UsageSummary:
        with self._lock:
            return self._total.summary()

    def forget(self, session_id: str) -> UsageSummary:
        """Drop a closed session's account; returns its last summary."""
        with self._lock:
            account = self._sessions.pop(session_id, None)
            self._forgotten[session_id] = None
            while len(self._forgotten) > 4096:
                self._forgotten.popitem(last=False)
            return account.summary() if account is not None else UsageSummary()


def parse_price(text: str) -> ModelPrice:
    """``"IN,OUT[,CACHED[,WRITE]]"`` (USD per million tokens) as a :class:`ModelPrice`.

    The command line's form (``fore run --price 2.5,10,1.25``); a malformed
    one is a ``ValueError`` with one line saying what was expected.
    """
    parts = [p.strip() for p in text.split(",")]
    expected = "expected INPUT,OUTPUT[,CACHED_INPUT[,CACHE_WRITE]] in USD per million tokens"
    if not 2 <= len(parts) <= 4:
        raise ValueError(f"{expected}, got {text!r}")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"{expected}, got {text!r}") from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError(f"prices must be finite and not negative, got {text!r}")
    return ModelPrice(
        input=values[0],
        output=values[1],
        cached_input=values[2] if len(values) > 2 else None,
        cache_write=values[3] if len(values) > 3 else None,
    )


def usage_json(summary: UsageSummary) -> dict[str, Any]:
    """``summary`` as plain JSON data, with the totals (``fore run --json``'s last line)."""

    def one(usage: TokenUsage) -> dict[str, Any]:
        return {**usage.model_dump(mode="json"), "total_tokens": usage.total_tokens}

    return {
        "by_purpose": {purpose: one(u) for purpose, u in summary.by_purpose.items()},
        "total": one(summary.total),
    }
