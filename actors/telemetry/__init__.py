"""Observability: OpenTelemetry traces and metrics, usage and cost, usage limits.

One concept per module: :mod:`.config` (``Telemetry``: on or off, which
providers, content capture), :mod:`.tracing` (the spans and how their context
crosses actors), :mod:`.metrics` (the instruments), :mod:`.usage` (the usage
ledger and prices), :mod:`.limits` (usage limits of main turns). Only
:mod:`.tracing` and :mod:`.metrics` import OpenTelemetry, and only when a
runtime turns telemetry on.
"""
