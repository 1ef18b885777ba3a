"""Usage limits of main turns: pure checks, and the worker's running count.

The worker asks three questions, each at the moment a limit can be crossed
(:class:`~messages.usage.UsageLimits` says what that means per limit):

* before it sends a request -- :meth:`LimitGuard.before_request`: would this
  request pass a request limit (then it is not sent), or has a token limit
  already been reached;
* while an answer streams -- :meth:`LimitGuard.while_streaming`: the answer's
  output so far (estimated from its characters, as the speculation's token
  budget is) plus what was used before: does it pass an output or total
  limit (then the request is cancelled);
* when an answer's usage arrives -- :meth:`LimitGuard.after_answer`: the
  provider's own counts, which decide.

Turn limits and session limits are checked alike; a turn's figures are its
own requests, a session's are every main request of the session so far (a
:class:`SessionUsage` the runtime keeps per session, so a restarted worker
goes on counting). The checks are pure functions of the figures, so the
property tests can drive them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from fore.actors.telemetry.usage import estimate_tokens
from fore.messages.llm import Usage
from fore.messages.usage import LimitScope, UsageLimitHit, UsageLimits


@dataclass(slots=True)
class Spent:
    """Requests and tokens spent in one scope (a turn, or a session's main turns)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, usage: Usage) -> None:
        self.input_tokens += max(0, usage.prompt_tokens)
        self.output_tokens += max(0, usage.completion_tokens)


@dataclass(slots=True)
class SessionUsage:
    """A session's main requests so far, and its limits (owned by the session, used by its
    worker on the worker's thread only)."""

    limits: UsageLimits | None = None
    spent: Spent | None = None

    def __post_init__(self) -> None:
        if self.spent is None:
            self.spent = Spent()


def request_hit(limits: UsageLimits, spent: Spent, scope: LimitScope) -> UsageLimitHit | None:
    """Before a request: the limit it would cross, if any (pure).

    A request that would be past ``request_limit`` is not sent; a token
    limit already reached (by earlier answers) stops the turn as well, since
    any request spends tokens.
    """
    if limits.request_limit is not None and spent.requests + 1 > limits.request_limit:
        return UsageLimitHit(
            scope=scope, kind="requests", limit=limits.request_limit, used=spent.requests + 1
        )
    return token_hit(limits, spent, scope, reached=True)


def token_hit(
    limits: UsageLimits,
    spent: Spent,
    scope: LimitScope,
    *,
    streaming: int = 0,
    reached: bool = False,
) -> UsageLimitHit | None:
    """The token limit ``spent`` (plus ``streaming`` estimated output) crosses, if any (pure).

    Crossed means past the limit; with ``reached`` (before a request) at it
    is enough. Output is checked first: it is what a stream cancel stops.
    """
    output = spent.output_tokens + streaming
    total = spent.input_tokens + output
    estimated = streaming > 0
    for kind, limit, used, est in (
        ("output_tokens", limits.output_tokens_limit, output, estimated),
        ("total_tokens", limits.total_tokens_limit, total, estimated),
        ("input_tokens", limits.input_tokens_limit, spent.input_tokens, False),
    ):
        if limit is None:
            continue
        if used > limit or (reached and used >= limit):
            return UsageLimitHit(
                scope=scope,
                kind=kind,
                limit=limit,
                used=used,
                estimated=est,
            )
    return None


class LimitGuard:
    """One main run's limits: its own, and its session's (see module docs).

    Lives in the worker's run state; every method runs on the worker's thread.
    """

    __slots__ = ("_streamed_chars", "session", "turn", "turn_limits")

    def __init__(self, turn_limits: UsageLimits | None, session: SessionUsage | None) -> None:
        self.turn_limits = turn_limits
        self.session = session if session is not None and session.limits is not None else None
        self.turn = Spent()
        self._streamed_chars = 0

    @property
    def active(self) -> bool:
        return self.turn_limits is not None or self.session is not None

    @property
    def watches_output(self) -> bool:
        """Whether a streamed answer must be counted as it arrives."""
        for limits in self._limits():
            if limits.output_tokens_limit is not None or limits.total_tokens_limit is not None:
                return True
        return False

    def _limits(self) -> list[UsageLimits]:
        out = []
        if self.turn_limits is not None:
            out.append(self.turn_limits)
        if self.session is not None and self.session.limits is not None:
            out.append(self.session.limits)
        return out

    def _scopes(self) -> list[tuple[UsageLimits, Spent, LimitScope]]:
        scopes: list[tuple[UsageLimits, Spent, LimitScope]] = []
        if self.turn_limits is not None:
            scopes.append((self.turn_limits, self.turn, "turn"))
        session = self.session
        if session is not None and session.limits is not None and session.spent is not None:
            scopes.append((session.limits, session.spent, "session"))
        return scopes

    def before_request(self) -> UsageLimitHit | None:
        """The limit the next request would cross (it is then not sent), if any."""
        for limits, spent, scope in self._scopes():
            hit = request_hit(limits, spent, scope)
            if hit is not None:
                return hit
        return None

    def sent(self) -> None:
        """A request was sent: count it (turn and session)."""
        self._streamed_chars = 0
        self.turn.requests += 1
        if self.session is not None and self.session.spent is not None:
            self.session.spent.requests += 1

    def streamed(self, chars: int) -> UsageLimitHit | None:
        """``chars`` more characters of the answer arrived: the limit they cross, if any."""
        self._streamed_chars += chars
        streaming = estimate_tokens(self._streamed_chars)
        for limits, spent, scope in self._scopes():
            hit = token_hit(limits, spent, scope, streaming=streaming)
            if hit is not None:
                return hit
        return None

    def retried(self) -> None:
        """The request is retried from the start: what its failed attempt streamed is void."""
        self._streamed_chars = 0

    def answered(self, usage: Usage) -> UsageLimitHit | None:
        """The answer's usage arrived (the provider's counts): the limit it crossed, if any."""
        self._streamed_chars = 0
        self.turn.add(usage)
        if self.session is not None and self.session.spent is not None:
            self.session.spent.add(usage)
        for limits, spent, scope in self._scopes():
            hit = token_hit(limits, spent, scope)
            if hit is not None:
                return hit
        return None


def session_usage(limits: UsageLimits | None) -> SessionUsage:
    """A fresh session's running count (with its limits, if any)."""
    return SessionUsage(limits=limits)
