"""OpenTelemetry spans of a session: turns, model calls, tool calls, speculations, accepts.

Imported only when a runtime has :class:`~actors.telemetry.config.Telemetry`
on; the actors hold an :class:`Instrumentation` (or ``None``) and call it at
a few points, each a small span handle:

```
invoke_agent fore          the turn (Worker: submit -> TurnFinished)
├── chat <model>           each model request (LLM loop: sent -> completed / failed / cancelled)
├── execute_tool <name>    each tool call (tool pool: started -> reported)
└── chat <model> ...
fore.speculation           a speculation (session supervisor: started -> its one outcome)
└── invoke_agent fore      its worker's run (purpose speculation), with its own chat / tools
fore.accept                Tab (session supervisor: pressed -> answered)
```

**Context across actors.** A turn's LLM and tool spans are made on other
threads (the LLM loop's, the tool pool's dispatcher) long after the worker's
handler returned, so OpenTelemetry's implicit context (a contextvar) cannot
carry the parent. The parent travels *in the message* instead: the worker
puts its turn span's context in ``LlmRequest.trace`` and ``RunToolBatch.trace``
-- in-process fields, excluded from JSON like ``reply_to`` -- and the loop and
the pool start their spans with that explicit parent. That is OpenTelemetry's
own propagation model (a context handed along with the work), it needs no
table of runs to look up, and it cannot leak: the context dies with the
message. A speculation's span reaches its worker the same way, through the
``Submit`` that starts its run; ``Session.submit`` passes the caller's current
context, so an application's own span becomes the turn's parent.

Attributes follow the GenAI semantic conventions (``gen_ai.operation.name``
``chat`` / ``execute_tool`` / ``invoke_agent``, ``gen_ai.provider.name`` and
the older ``gen_ai.system``, request and response model, input, output and
cached token counts, finish reasons, tool name and call id); Fore's own are
under ``fore.`` (purpose, session and run ids, speculation outcome, time
saved). Content attributes (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.tool.call.arguments`` /
``gen_ai.tool.call.result``) are set only with ``capture_content``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from fore.actors.telemetry.config import Telemetry
from fore.actors.telemetry.metrics import Metrics
from fore.actors.telemetry.usage import counts_of
from fore.messages.llm import LlmError, LlmRequest, Usage

try:
    _VERSION = version("fore-runtime")
except PackageNotFoundError:  # a source checkout that was never installed
    _VERSION = ""

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"
"""The pre-1.37 name of ``gen_ai.provider.name``, still what many backends read."""


def provider_of(model: Any) -> str:
    """The ``gen_ai.provider.name`` of a model object (its ``provider`` attribute, if any)."""
    named = getattr(model, "provider", None)
    if isinstance(named, str) and named:
        return named
    kind = type(model).__name__
    if kind == "OpenAICompatible":
        return "openai"
    if "anthropic" in kind.lower():
        return "anthropic"
    return f"fore.{kind.removesuffix('Model').lower() or 'model'}"


def _server(model: Any) -> tuple[str, int] | None:
    base = getattr(model, "base_url", None)
    if not isinstance(base, str) or not base:
        return None
    try:
        parts = urlsplit(base)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname or "", port) if parts.hostname else None


def clip(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"…[{len(text) - limit} more characters]"


def _parts(item: Any) -> dict[str, Any]:
    kind = getattr(item, "kind", "")
    if kind == "tool_result":
        return {
            "role": "tool",
            "parts": [
                {
                    "type": "tool_call_response",
                    "id": item.call_id,
                    "result": item.output,
                }
            ],
        }
    parts: list[dict[str, Any]] = []
    text = getattr(item, "text", "")
    if text:
        parts.append({"type": "text", "content": text})
    for call in getattr(item, "tool_calls", ()):
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": kind or "user", "parts": parts}


def messages_json(items: Sequence[Any], limit: int) -> str:
    """The last ``items`` that fit in ``limit`` characters, as the conventions' message JSON.

    Built from the end backwards, so the work is bounded by ``limit``, not
    by the length of the history.
    """
    out: list[str] = []
    size = 2
    for item in reversed(items):
        encoded = json.dumps(_parts(item), ensure_ascii=False, default=str)
        if out and size + len(encoded) + 1 > limit:
            break
        out.append(clip(encoded, limit))
        size += len(encoded) + 1
    return "[" + ",".join(reversed(out)) + "]"


class Instrumentation:
    """The runtime's tracer and instruments (see module docs); thread-safe."""

    def __init__(self, config: Telemetry) -> None:
        self.config = config
        self.capture = config.capture_content
        self.limit = config.max_content_chars
        self.tracer: trace.Tracer | None = (
            trace.get_tracer("fore", _VERSION, tracer_provider=config.tracer_provider)
            if config.traces
            else None
        )
        self.metrics: Metrics | None = (
            Metrics(config.meter_provider, _VERSION) if config.metrics else None
        )

    # -- context -------------------------------------------------------------------

    @staticmethod
    def current() -> Any:
        """The caller's current context (its active span becomes the parent)."""
        return otel_context.get_current()

    def _start(
        self,
        name: str,
        parent: Any,
        attributes: dict[str, Any],
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        start_time: int | None = None,
    ) -> trace.Span:
        if self.tracer is None:
            return trace.INVALID_SPAN
        return self.tracer.start_span(
            name, context=parent, kind=kind, attributes=attributes, start_time=start_time
        )

    # -- turns ---------------------------------------------------------------------

    def turn(
        self, *, session_id: str, run_id: str, purpose: str, prompt: str | None, parent: Any
    ) -> TurnSpan:
        attributes: dict[str, Any] = {
            OPERATION: "invoke_agent",
            "gen_ai.agent.name": "fore",
            "gen_ai.conversation.id": session_id,
            "fore.session.id": session_id,
            "fore.run.id": run_id,
            "fore.purpose": purpose,
        }
        if self.capture and prompt:
            attributes["fore.prompt"] = clip(prompt, self.limit)
        span = self._start("invoke_agent fore", parent, attributes)
        return TurnSpan(self, span, purpose)

    # -- model calls -----------------------------------------------------------------

    def llm(self, request: LlmRequest) -> LlmSpan:
        model = request.model
        name = request.model_name or str(getattr(model, "name", "") or "")
        provider = provider_of(model)
        attributes: dict[str, Any] = {
            OPERATION: "chat",
            PROVIDER: provider,
            SYSTEM: provider,
            "gen_ai.request.model": name,
            "gen_ai.conversation.id": request.session_id,
            "fore.purpose": request.purpose,
            "fore.request.id": request.request_id,
            "gen_ai.output.type": "json" if request.json_response else "text",
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        server = _server(model)
        if server is not None:
            attributes["server.address"], attributes["server.port"] = server
        if self.capture:
            attributes["gen_ai.input.messages"] = messages_json(request.messages, self.limit)
        span = self._start(f"chat {name}".strip(), request.trace, attributes, kind=SpanKind.CLIENT)
        metric_attrs = {
            OPERATION: "chat",
            PROVIDER: provider,
            "gen_ai.request.model": name,
            "fore.purpose": request.purpose,
        }
        return LlmSpan(self, span, metric_attrs, request.stream)

    # -- tool calls ------------------------------------------------------------------

    def tool(
        self,
        parent: Any,
        *,
        session_id: str,
        call_id: str,
        name: str,
        arguments: Any,
        outcome: str,
        is_error: bool,
        output: str,
        duration_s: float,
    ) -> None:
        """One finished tool call: its span (ended now, started ``duration_s`` ago) and metric."""
        end = time.time_ns()
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.conversation.id": session_id,
            "fore.tool.outcome": outcome,
        }
        if is_error:
            attributes["error.type"] = outcome if outcome not in ("", "ok") else "tool_error"
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = clip(
                json.dumps(arguments, ensure_ascii=False, default=str), self.limit
            )
            attributes["gen_ai.tool.call.result"] = clip(output, self.limit)
        if self.tracer is not None:
            span = self._start(
                f"execute_tool {name}",
                parent,
                attributes,
                start_time=end - int(max(0.0, duration_s) * 1e9),
            )
            if is_error:
                span.set_status(Status(StatusCode.ERROR, outcome))
            span.end(end_time=end)
        if self.metrics is not None:
            self.metrics.tool_duration.record(
                duration_s,
                {"gen_ai.tool.name": name, "fore.tool.outcome": outcome, OPERATION: "execute_tool"},
            )

    # -- speculation -------------------------------------------------------------------

    def speculation(
        self, *, session_id: str, speculation_id: str, suggestion: str
    ) -> SpeculationSpan:
        attributes: dict[str, Any] = {
            "fore.session.id": session_id,
            "gen_ai.conversation.id": session_id,
            "fore.speculation.id": speculation_id,
        }
        if self.capture:
            attributes["fore.suggestion"] = clip(suggestion, self.limit)
        return SpeculationSpan(self, self._start("fore.speculation", None, attributes))

    def skipped(self, reason: str) -> None:
        """The load governor did not speculate on a suggestion."""
        if self.metrics is not None:
            kind = "cap" if "(the cap)" in reason else "busy"
            self.metrics.skipped.add(1, {"fore.skip.reason": kind})

    def accept(self, *, session_id: str, suggestion: str) -> AcceptSpan:
        attributes: dict[str, Any] = {
            "fore.session.id": session_id,
            "gen_ai.conversation.id": session_id,
        }
        if self.capture:
            attributes["fore.suggestion"] = clip(suggestion, self.limit)
        return AcceptSpan(self, self._start("fore.accept", None, attributes))


class TurnSpan:
    """A running turn's span (see :meth:`Instrumentation.turn`)."""

    __slots__ = ("_i", "context", "purpose", "span", "started")

    def __init__(self, instrumentation: Instrumentation, span: trace.Span, purpose: str) -> None:
        self._i = instrumentation
        self.span = span
        self.purpose = purpose
        self.context = trace.set_span_in_context(span)
        """The parent of the turn's LLM and tool spans (carried in their messages)."""
        self.started = time.monotonic()

    def end(self, result: Any) -> None:
        """The turn ended with ``result`` (a :class:`~messages.session.TurnResult`)."""
        span = self.span
        status = result.status
        usage: Usage = result.usage
        span.set_attribute("fore.turn.status", status)
        span.set_attribute("fore.turn.llm_calls", result.turns)
        span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
        limit = getattr(result, "usage_limit", None)
        if limit is not None:
            span.set_attribute("fore.usage_limit.kind", limit.kind)
            span.set_attribute("fore.usage_limit.scope", limit.scope)
        if status == "error":
            span.set_status(Status(StatusCode.ERROR, result.error or "error"))
            span.set_attribute("error.type", result.error_kind or "error")
        elif status != "completed" and result.error:
            span.set_attribute("fore.turn.reason", result.error)
        span.end()
        self._measure(status)

    def fail(self, reason: str) -> None:
        """The worker itself failed under the turn (no result is built)."""
        self.span.set_status(Status(StatusCode.ERROR, reason[:500]))
        self.span.set_attribute("error.type", "worker")
        self.span.end()
        self._measure("error")

    def _measure(self, status: str) -> None:
        metrics = self._i.metrics
        if metrics is not None:
            metrics.turn_duration.record(
                time.monotonic() - self.started,
                {"fore.purpose": self.purpose, "fore.turn.status": status},
            )


class LlmSpan:
    """A model request's span and metrics (made and ended on the LLM loop's thread)."""

    __slots__ = ("_first", "_i", "_started", "_stream", "attrs", "span")

    def __init__(
        self,
        instrumentation: Instrumentation,
        span: trace.Span,
        attrs: dict[str, Any],
        stream: bool,
    ) -> None:
        self._i = instrumentation
        self.span = span
        self.attrs = attrs
        self._stream = stream
        self._started = time.monotonic()
        self._first: float | None = None

    def first_chunk(self, emit: Callable[[Any], None]) -> Callable[[Any], None]:
        """``emit`` that notes when the answer's first chunk arrived (then just ``emit``)."""

        def timed(event: Any) -> None:
            if self._first is None:
                self._first = time.monotonic()
                self.span.add_event("gen_ai.first_chunk")
            emit(event)

        return timed

    def retrying(self, attempt: int, reason: str, delay_s: float) -> None:
        self._first = None  # the retry's own first chunk is what the user waits for
        self.span.add_event(
            "fore.llm.retry",
            {"fore.attempt": attempt, "fore.reason": reason, "fore.delay_s": delay_s},
        )

    def completed(
        self,
        *,
        message: Any,
        usage: Usage,
        finish_reason: str,
        attempts: int,
        response_model: str | None,
        cost: float | None,
    ) -> None:
        span = self.span
        counts = counts_of(usage)
        span.set_attribute("gen_ai.response.finish_reasons", (finish_reason,))
        span.set_attribute("gen_ai.usage.input_tokens", counts.input)
        span.set_attribute("gen_ai.usage.output_tokens", counts.output)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", counts.cached_input)
        if counts.cache_write:
            span.set_attribute("gen_ai.usage.cache_creation.input_tokens", counts.cache_write)
        if response_model:
            span.set_attribute("gen_ai.response.model", response_model)
        if attempts > 1:
            span.set_attribute("fore.llm.attempts", attempts)
        if cost is not None:
            span.set_attribute("fore.cost_usd", cost)
        instrumentation = self._i
        if instrumentation.capture:
            span.set_attribute(
                "gen_ai.output.messages",
                clip(
                    json.dumps(
                        [{**_parts(message), "finish_reason": finish_reason}],
                        ensure_ascii=False,
                        default=str,
                    ),
                    instrumentation.limit,
                ),
            )
        span.end()
        metrics = instrumentation.metrics
        if metrics is None:
            return
        attrs = dict(self.attrs)
        if response_model:
            attrs["gen_ai.response.model"] = response_model
        metrics.llm_duration.record(time.monotonic() - self._started, attrs)
        if self._stream and self._first is not None:
            metrics.llm_ttfc.record(self._first - self._started, attrs)
        metrics.token_usage.record(counts.input, {**attrs, "gen_ai.token.type": "input"})
        metrics.token_usage.record(counts.output, {**attrs, "gen_ai.token.type": "output"})
        purpose = attrs["fore.purpose"]
        for kind, value in (
            ("input", counts.input),
            ("cached_input", counts.cached_input),
            ("cache_write", counts.cache_write),
            ("output", counts.output),
        ):
            if value:
                metrics.tokens.add(value, {"fore.purpose": purpose, "fore.token.type": kind})
        if cost:
            metrics.cost.add(
                cost,
                {"fore.purpose": purpose, "gen_ai.request.model": attrs["gen_ai.request.model"]},
            )

    def failed(self, error: LlmError) -> None:
        self.span.set_attribute("error.type", error.kind)
        self.span.set_status(Status(StatusCode.ERROR, error.message[:500]))
        self.span.end()
        self._record_failure(error.kind)

    def cancelled(self, reason: str) -> None:
        self.span.set_attribute("fore.llm.cancelled", reason)
        self.span.set_attribute("error.type", "cancelled")
        self.span.end()
        self._record_failure("cancelled")

    def _record_failure(self, kind: str) -> None:
        metrics = self._i.metrics
        if metrics is not None:
            metrics.llm_duration.record(
                time.monotonic() - self._started, {**self.attrs, "error.type": kind}
            )


class SpeculationSpan:
    """A speculation's span: started with it, ended with its one outcome."""

    __slots__ = ("_i", "context", "span")

    def __init__(self, instrumentation: Instrumentation, span: trace.Span) -> None:
        self._i = instrumentation
        self.span = span
        self.context = trace.set_span_in_context(span)
        """The parent of the speculation's worker run (carried in its Submit)."""

    def saved(self, seconds: float) -> None:
        """Tab applied it: the time the user did not wait for."""
        self.span.set_attribute("fore.speculation.time_saved_s", seconds)

    def closed(self, reason: str) -> None:
        """Its session closed before it reported an outcome (outcome ``closed``)."""
        self.span.set_attribute("fore.speculation.outcome", "closed")
        self.span.set_attribute("fore.speculation.reason", reason)
        self.span.end()

    def end(self, event: Any) -> None:
        """Its :class:`~messages.speculation.SpeculationFinished`: the outcome, tokens, timings."""
        span = self.span
        for key, value in (
            ("fore.speculation.outcome", event.outcome),
            ("fore.speculation.state", event.state),
            ("fore.speculation.turns", event.turns),
            ("fore.speculation.tool_calls", event.tool_calls),
            ("fore.speculation.files_written", event.files_written),
            ("fore.speculation.tokens", event.tokens),
            ("fore.speculation.estimated_tokens", event.estimated_tokens),
            ("fore.speculation.duration_s", event.duration_s),
            ("fore.speculation.boundary_tool", event.boundary_tool),
            ("fore.speculation.reason", event.reason),
            ("fore.speculation.was_running", event.was_running),
            ("fore.speculation.cancel_latency_s", event.cancel_latency_s),
            ("fore.speculation.cleanup_latency_s", event.cleanup_latency_s),
        ):
            if value is not None:
                span.set_attribute(key, value)
        if event.outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, event.reason or "failed"))
        span.end()
        metrics = self._i.metrics
        if metrics is not None:
            metrics.speculation_outcomes.add(1, {"fore.speculation.outcome": event.outcome})
            if event.cancel_latency_s is not None:
                metrics.abort_duration.record(event.cancel_latency_s)


class AcceptSpan:
    """A Tab's span: pressed to answered (see :meth:`wrap`)."""

    __slots__ = ("_i", "context", "span")

    def __init__(self, instrumentation: Instrumentation, span: trace.Span) -> None:
        self._i = instrumentation
        self.span = span
        self.context = trace.set_span_in_context(span)
        """The parent of the normal run Tab starts when nothing was speculated."""

    def wrap(self, answer: Callable[[Any], None]) -> Callable[[Any], None]:
        """``answer`` that ends this span with the :class:`AcceptResult` it is given."""

        def answered(result: Any) -> None:
            self.end(result)
            answer(result)

        answered.trace_context = self.context  # type: ignore[attr-defined]
        return answered

    def end(self, result: Any) -> None:
        span = self.span
        span.set_attribute("fore.accept.outcome", result.outcome)
        span.set_attribute("fore.accept.files_applied", len(result.files_applied))
        span.set_attribute("fore.accept.items_inserted", result.items_inserted)
        if result.outcome in ("accepted", "boundary"):
            span.set_attribute("fore.accept.latency_s", result.accept_latency_s)
            span.set_attribute("fore.accept.waited_s", result.waited_s)
            span.set_attribute("fore.speculation.time_saved_s", result.time_saved_s)
        if result.outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, "the accept failed"))
        span.end()
        metrics = self._i.metrics
        if metrics is not None and result.outcome in ("accepted", "boundary"):
            metrics.accept_duration.record(
                result.accept_latency_s, {"fore.accept.outcome": result.outcome}
            )
