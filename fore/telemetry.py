"""Observability: OpenTelemetry traces and metrics, usage and cost, usage limits.

::

    from fore import Runtime
    from fore.telemetry import ModelPrice, Telemetry, UsageLimits

    with Runtime(
        telemetry=Telemetry(),  # spans and metrics on the global OpenTelemetry providers
        prices={"gpt-4o": ModelPrice(input=2.5, cached_input=1.25, output=10)},
    ) as rt:
        s = rt.open_session(workspace=".", model=model, usage_limits=UsageLimits(request_limit=20))
        turn = s.submit("fix the tests", usage_limits=UsageLimits(output_tokens_limit=4000))
        print(turn.status, turn.usage_limit, s.usage.total.cost_usd)

Tracing needs the ``otel`` extra (``pip install 'fore-runtime[otel]'``) and
is off unless ``telemetry=`` is given; usage, cost and limits need nothing.
See ``docs/architecture.md`` section 6.
"""

from __future__ import annotations

from fore.actors.telemetry.config import Telemetry, TelemetryUnavailable
from fore.messages.usage import (
    ModelPrice,
    TokenUsage,
    UsageLimitHit,
    UsageLimits,
    UsageSummary,
)

__all__ = [
    "ModelPrice",
    "Telemetry",
    "TelemetryUnavailable",
    "TokenUsage",
    "UsageLimitHit",
    "UsageLimits",
    "UsageSummary",
]
