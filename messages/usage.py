"""Usage, cost and usage limits: what a session spent, what it may spend.

Three kinds of data, all frozen messages (they cross actor boundaries and
round-trip through JSON):

* :class:`ModelPrice` -- what a model's tokens cost, in USD per million
  tokens, the way providers publish it: input, cached input (a prompt-cache
  read), cache write, output;
* :class:`TokenUsage` / :class:`UsageSummary` -- what was spent, by purpose
  (``main``, ``suggestion``, ``speculation``, ``pipelined``): requests,
  tokens and their cost;
* :class:`UsageLimits` / :class:`UsageLimitHit` -- limits on a session's (or
  one turn's) main requests, and which one stopped a turn.

**Token semantics.** ``input_tokens`` counts every token of the prompt,
cached reads and cache writes included -- as OpenAI's ``prompt_tokens``
does; ``cached_input_tokens`` and ``cache_write_tokens`` say how many of
them were read from or written to the provider's prompt cache. A provider
that reports them apart (Anthropic's ``input_tokens`` excludes both) is
mapped to this form by its adapter, so one price formula fits all
(:func:`~actors.telemetry.usage.cost_of`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fore.messages.base import Message
from fore.messages.llm import Purpose

PURPOSES: tuple[Purpose, ...] = ("main", "suggestion", "speculation", "pipelined")
"""Every purpose, in report order."""


class ModelPrice(Message):
    """What one model's tokens cost, in USD per million tokens.

    ``cached_input`` (a prompt-cache read) and ``cache_write`` default to the
    input price: a provider without a cache discount charges cached tokens
    like any other.
    """

    input: float = Field(ge=0, allow_inf_nan=False)
    output: float = Field(ge=0, allow_inf_nan=False)
    cached_input: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    cache_write: float | None = Field(default=None, ge=0, allow_inf_nan=False)


class TokenUsage(Message):
    """Requests and tokens of one purpose (or of all), and what they cost.

    ``cost_usd`` sums the requests whose model has a price;
    ``unpriced_requests`` counts those whose model had none (their tokens are
    counted, their cost is not known).
    """

    requests: int = Field(default=0, ge=0)
    input_tokens: int = Field(default=0, ge=0)
    """Every prompt token, cached reads and cache writes included."""
    cached_input_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0)
    unpriced_requests: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            unpriced_requests=self.unpriced_requests + other.unpriced_requests,
        )


class UsageSummary(Message):
    """A session's (or a runtime's) usage by purpose, and in total.

    Counts what providers reported for completed requests. A request
    cancelled or failed before its usage arrived reports none (the bench
    report's waste estimates those).
    """

    by_purpose: dict[Purpose, TokenUsage] = Field(default_factory=dict)

    @property
    def total(self) -> TokenUsage:
        total = TokenUsage()
        for usage in self.by_purpose.values():
            total = total + usage
        return total

    def of(self, purpose: Purpose) -> TokenUsage:
        """The usage of one purpose (zero when it made no request)."""
        return self.by_purpose.get(purpose, TokenUsage())


class UsageLimits(Message):
    """Limits on main requests, as pydantic-ai's ``UsageLimits``.

    ``open_session(usage_limits=...)`` bounds the whole session (every main
    turn so far counts); ``submit(..., usage_limits=...)`` bounds one turn.
    Each limit is enforced the moment it is crossed: a request that would
    pass ``request_limit`` is not sent; a streamed answer that passes an
    output or total limit is cancelled mid-way (its output is counted live,
    at about 4 characters per token, until the provider's own count
    arrives); input tokens are known when an answer's usage arrives, so
    ``input_tokens_limit`` stops the turn after the request that crossed it.
    The turn then ends with status ``usage_limit`` and
    :attr:`~messages.session.TurnResult.usage_limit` says which limit.
    Suggestions and speculation are not main turns: they have budgets of
    their own (:class:`~messages.speculation.SpeculationConfig`).
    """

    request_limit: int | None = Field(default=None, ge=1)
    """Model requests (every LLM call, retries by an interceptor included)."""
    input_tokens_limit: int | None = Field(default=None, ge=1)
    output_tokens_limit: int | None = Field(default=None, ge=1)
    total_tokens_limit: int | None = Field(default=None, ge=1)
    """Input plus output tokens."""

    @model_validator(mode="after")
    def _some_limit(self) -> UsageLimits:
        if (
            self.request_limit is None
            and self.input_tokens_limit is None
            and self.output_tokens_limit is None
            and self.total_tokens_limit is None
        ):
            raise ValueError("UsageLimits needs at least one limit")
        return self


LimitKind = Literal["requests", "input_tokens", "output_tokens", "total_tokens"]
LimitScope = Literal["turn", "session"]


class UsageLimitHit(Message):
    """Which usage limit ended a turn (``TurnResult.usage_limit``)."""

    scope: LimitScope
    kind: LimitKind
    limit: int
    used: int
    """What had been used when the limit was crossed (or, for ``requests``,
    the request that would have crossed it); see ``estimated``."""
    estimated: bool = False
    """``used`` includes the live estimate of an answer still streaming."""

    def describe(self) -> str:
        """One line for people: which limit, of what, and how much was used."""
        what = {
            "requests": "request",
            "input_tokens": "input-token",
            "output_tokens": "output-token",
            "total_tokens": "total-token",
        }[self.kind]
        if self.kind == "requests":
            return (
                f"the {self.scope}'s {what} limit of {self.limit} is reached: "
                f"request {self.used} was not sent"
            )
        about = "about " if self.estimated else ""
        return (
            f"the {self.scope}'s {what} limit of {self.limit:,} was crossed "
            f"({about}{self.used:,} used)"
        )
