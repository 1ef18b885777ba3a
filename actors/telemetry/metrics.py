"""The runtime's OpenTelemetry metrics: one instrument per question an operator asks.

Names follow the GenAI semantic conventions where they define one
(``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage``,
``gen_ai.client.operation.time_to_first_chunk``, ``gen_ai.execute_tool.duration``),
with the conventions' bucket boundaries; Fore's own are under ``fore.``:

* ``fore.turn.duration`` (histogram, s): a turn, submit to end; by
  ``fore.purpose`` and ``fore.turn.status``;
* ``gen_ai.client.operation.duration`` (histogram, s): a model request; by
  ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
  ``fore.purpose`` (and ``error.type`` when it failed or was cancelled);
* ``gen_ai.client.operation.time_to_first_chunk`` (histogram, s): the same
  attributes, streamed requests only (time to first token);
* ``gen_ai.client.token.usage`` (histogram, {token}): the same attributes and
  ``gen_ai.token.type`` input / output;
* ``fore.tokens`` (counter, {token}): by ``fore.purpose`` and ``fore.token.type``
  input / cached_input / cache_write / output -- tokens by purpose;
* ``fore.cost`` (counter, USD): by ``fore.purpose`` and model, at the runtime's prices;
* ``gen_ai.execute_tool.duration`` (histogram, s): a tool call; by
  ``gen_ai.tool.name`` and ``fore.tool.outcome``;
* ``fore.speculation.outcomes`` (counter): by ``fore.speculation.outcome``;
* ``fore.speculation.accept.duration`` (histogram, s): Tab to files applied
  and history inserted; by ``fore.accept.outcome``;
* ``fore.speculation.abort.duration`` (histogram, s): keystroke to the
  speculation's stream closed and tools cancelled (running ones only);
* ``fore.speculation.skipped`` (counter): suggestions the load governor did
  not speculate on; by ``fore.skip.reason`` busy / cap.

Attributes are low-cardinality by construction: no session or request ids
(those are on the spans).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics

DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96)
"""Seconds (the GenAI conventions' boundaries for operation durations)."""
FAST_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
"""Seconds, for what should take milliseconds (accept, abort)."""
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
"""Tokens (the conventions' boundaries)."""


class Metrics:
    """The instruments, created once per runtime on its meter."""

    def __init__(self, meter_provider: Any = None, version: str = "") -> None:
        meter = metrics.get_meter("fore", version, meter_provider=meter_provider)
        self.turn_duration = meter.create_histogram(
            "fore.turn.duration",
            unit="s",
            description="A session turn, from submit to its end",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.llm_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.llm_ttfc = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            unit="s",
            description="Time from the request to the first chunk of a streamed answer",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.tokens = meter.create_counter(
            "fore.tokens", unit="{token}", description="Tokens by purpose and kind"
        )
        self.cost = meter.create_counter(
            "fore.cost", unit="USD", description="What the tokens cost, at the runtime's prices"
        )
        self.tool_duration = meter.create_histogram(
            "gen_ai.execute_tool.duration",
            unit="s",
            description="Tool execution duration",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.speculation_outcomes = meter.create_counter(
            "fore.speculation.outcomes",
            unit="{speculation}",
            description="Speculations by how they ended",
        )
        self.accept_duration = meter.create_histogram(
            "fore.speculation.accept.duration",
            unit="s",
            description="Tab (or the speculation's end) to files applied and history inserted",
            explicit_bucket_boundaries_advisory=FAST_BUCKETS,
        )
        self.abort_duration = meter.create_histogram(
            "fore.speculation.abort.duration",
            unit="s",
            description="Keystroke to the speculation's stream closed and tools cancelled",
            explicit_bucket_boundaries_advisory=FAST_BUCKETS,
        )
        self.skipped = meter.create_counter(
            "fore.speculation.skipped",
            unit="{suggestion}",
            description="Suggestions the load governor did not speculate on",
        )
