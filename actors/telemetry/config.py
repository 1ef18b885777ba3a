"""``Telemetry``: whether a runtime traces and measures, and where to.

OpenTelemetry is optional (the ``otel`` extra installs its API) and off by
default: a runtime built without ``telemetry=`` never imports it, creates no
span and records no metric -- each hook in the actors is one ``is None``
test. ``Runtime(telemetry=Telemetry())`` turns it on, on the process's global
tracer and meter providers (what an application or the OpenTelemetry
auto-instrumentation configured), or on the providers given.

Sensitive content -- prompts, answers, tool arguments and outputs -- is never
recorded unless ``capture_content=True`` asks for it, and then each text is
cut at ``max_content_chars`` (a span attribute is not the place for a 10 MB
tool output).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fore.errors import TelemetryUnavailable

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["TelemetryUnavailable"]

if TYPE_CHECKING:
    from fore.actors.telemetry.tracing import Instrumentation


@dataclass(frozen=True)
class Telemetry:
    """OpenTelemetry traces and metrics for a runtime (``Runtime(telemetry=...)``).

    ``tracer_provider`` / ``meter_provider``: the providers to use (default:
    the global ones, ``opentelemetry.trace.get_tracer_provider()`` ...).
    ``traces`` / ``metrics`` turn either signal off on its own.
    ``capture_content``: record prompts, answers, tool arguments and outputs
    on the spans (off by default: they may hold secrets or personal data),
    each cut at ``max_content_chars``.
    """

    tracer_provider: Any = None
    meter_provider: Any = None
    traces: bool = True
    metrics: bool = True
    capture_content: bool = False
    max_content_chars: int = 8192

    def __post_init__(self) -> None:
        if self.max_content_chars < 0:
            raise ValueError("max_content_chars must not be negative")


def otel_installed() -> bool:
    """Whether the OpenTelemetry API can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def instrumentation(config: Telemetry | None) -> Instrumentation | None:
    """What the runtime hands its actors: ``None`` when telemetry is off.

    Raises :class:`TelemetryUnavailable` (one line, with the fix) when it is
    asked for and the API is missing -- silently tracing nothing would be a
    worse surprise.
    """
    if config is None or not (config.traces or config.metrics):
        return None
    if not otel_installed():
        raise TelemetryUnavailable(
            "Telemetry needs the OpenTelemetry API: pip install 'fore-runtime[otel]'"
        )
    from fore.actors.telemetry.tracing import Instrumentation

    return Instrumentation(config)
