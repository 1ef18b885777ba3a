"""The output interceptor: a structured turn asks for a value and gets a validated one.

Trusted and inline on the worker's thread, like the resolve interceptor. It
acts only in a run whose submit asked for an output type (the worker puts
that run's :class:`~actors.output.contract.OutputRun` in the session state's
``output``); every other run passes through untouched. Two strategies, by
what the model supports (``structured_output`` on the model object:
``"json_schema"``, ``"tool"`` or ``"auto"``):

* **json_schema** -- each request carries the provider's JSON-schema response
  format (strict where the type allows, :mod:`actors.output.schema`); the
  tool list is left as it is, so the provider's prefix cache and the fork
  snapshot still match the session's other requests. At turn end the
  answer's text is validated; an invalid one is answered with a user message
  quoting pydantic's errors, and the model is asked again.
* **tool** -- a ``final_answer`` tool is offered whose arguments are the
  value, with ``tool_choice: required`` (or, where a provider refuses that,
  ``auto`` plus a reminder). The pool never runs it: the interceptor
  validates its arguments when the answer arrives and gives the call its
  result itself -- an acknowledgement (the run then ends with the value,
  without another request; the answer's other calls are not run), or the
  errors, after which the model may call it again. A plain-text answer is
  accepted if it validates, else the model is reminded to call the tool.

Every re-ask is an LLM call like any other: it counts against ``max_turns``
and passes the ``pre_llm_request`` hooks. After ``max_retries`` re-asks the
run ends with ``output_error`` naming the last errors. ``"auto"`` is
json_schema first; a provider that refuses the response format (HTTP 400
naming it) gets the request once more with the tool instead, and the
session uses the tool from then on.

The validators of the output type run here, on the worker's thread: they
must be quick and must not wait on I/O (pydantic validators normally are).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from fore.actors.output.contract import OutputRun, Strategy
from fore.actors.resolve.interceptor import rejects_forced_choice
from fore.actors.worker.hooks import (
    Continue,
    ContinueWithMessages,
    Finish,
    LlmRequestContext,
    Paused,
    Skip,
    ToolCallContext,
    TurnEndContext,
)
from fore.actors.worker.interceptor import (
    AnswerCall,
    Interceptor,
    Interceptors,
    InterceptorToolResult,
    RetryRequest,
)
from fore.errors import StructuredOutputUnavailable
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import AssistantMessage, SystemMessage, UserMessage
from fore.messages.llm import LlmError
from fore.messages.session import OutputRequest
from fore.messages.tools import ToolDefinition

__all__ = [
    "OutputInterceptor",
    "StructuredOutputUnavailable",
    "model_strategy",
    "rejects_response_format",
    "start_output",
]


def model_strategy(model: Any) -> str:
    """The model's declared capability (``structured_output``; ``"auto"`` when it has none)."""
    value = getattr(model, "structured_output", "auto")
    return value if value in ("json_schema", "tool", "auto") else "auto"


def rejects_response_format(error: LlmError) -> bool:
    """Whether a provider error says it will not accept the JSON-schema response format."""
    if error.kind != "bad_request":
        return False
    text = f"{error.message} {error.provider_message or ''}".lower()
    return (error.param or "").startswith("response_format") or any(
        word in text for word in ("response_format", "json_schema", "response format")
    )


def _has_output_interceptor(interceptor: Interceptor) -> bool:
    if isinstance(interceptor, OutputInterceptor):
        return True
    if isinstance(interceptor, Interceptors):
        return any(_has_output_interceptor(part) for part in interceptor.parts)
    return False


def start_output(request: OutputRequest | None, interceptor: Interceptor) -> OutputRun | None:
    """The contract of a submit's run; refuses one the worker could not honour.

    Without an :class:`OutputInterceptor` in the worker's chain nobody would
    ask for, or check, the value: the submit fails at once instead of
    completing silently without one.
    """
    if request is None:
        return None
    if request.output_type is None:
        raise StructuredOutputUnavailable(
            "a structured submit needs its output_type (an in-process field, not sent as JSON)"
        )
    if not _has_output_interceptor(interceptor):
        raise StructuredOutputUnavailable(
            "this session's worker has no OutputInterceptor, so it cannot give structured "
            "output (Runtime.open_session installs one)"
        )
    return OutputRun(request)


class OutputInterceptor(Interceptor):
    """Asks for and checks one session's structured outputs (see module docs)."""

    def __init__(self, state: Any, model: Any = None) -> None:
        self.state = state
        """The session state: ``state.output`` is the current run's contract, or ``None``."""
        self.capability = model_strategy(model)
        self.fallback: Strategy | None = None
        """Set when the provider refused the response format ("auto" then uses the tool)."""
        self.required_supported = True
        """``tool_choice: required`` is accepted (else ``auto`` plus a reminder)."""
        self._alert: Callable[[AlertLevel, str, str], Any] | None = None
        self._added: list[ToolDefinition] = []
        """Final-answer tools added to this run's requests (left out of fork snapshots)."""
        self._verdicts: dict[str, InterceptorToolResult] = {}
        """How the calls of the last answer are to be answered (by call id)."""
        self._forced: LlmRequestContext | None = None
        """The request this interceptor set to ``tool_choice: required``."""

    def attach(self, alert: Callable[[AlertLevel, str, str], Any]) -> None:
        self._alert = alert

    def _raise(self, level: AlertLevel, text: str) -> None:
        if self._alert is not None:
            self._alert(level, text, "output")

    def _run(self) -> OutputRun | None:
        run = getattr(self.state, "output", None)
        return run if isinstance(run, OutputRun) else None

    def strategy(self) -> Strategy:
        if self.fallback is not None:
            return self.fallback
        return "tool" if self.capability == "tool" else "json_schema"

    # -- a run begins ------------------------------------------------------------------------

    def on_prompt_submit(self, message: UserMessage) -> Continue:
        self._added = []
        self._verdicts = {}
        self._forced = None
        run = self._run()
        if run is not None:
            run.strategy = self.strategy()
        return Continue()

    # -- requests ------------------------------------------------------------------------------

    def turn_answered(self) -> AssistantMessage | None:
        run = self._run()
        if run is None or run.strategy != "tool" or not (run.done or run.gave_up):
            return None
        answer, run.answer = run.answer, None  # ends the turn once
        return answer if isinstance(answer, AssistantMessage) else None

    def _offer_tool(self, run: OutputRun, ctx: LlmRequestContext) -> None:
        taken = [tool.name for tool in ctx.tools]
        definition = next((d for d in self._added if d.name == run.tool_name), None)
        if definition is None or definition.name in taken:
            definition = run.tool_definition(taken)
            self._added.append(definition)
        ctx.tools.append(definition)
        if ctx.tool_choice == "auto" and self.required_supported:
            ctx.tool_choice = "required"
            self._forced = ctx
        elif ctx.tool_choice == "auto":
            ctx.messages.append(SystemMessage(text=run.tool_reminder()))

    def pre_llm_request(self, ctx: LlmRequestContext) -> Continue:
        self._forced = None
        run = self._run()
        if run is None or run.done or run.gave_up:
            return Continue()
        if run.strategy == "json_schema":
            ctx.response_schema = run.response_schema()
        else:
            self._offer_tool(run, ctx)
        return Continue()

    def on_llm_error(self, ctx: LlmRequestContext, error: LlmError) -> RetryRequest | None:
        run = self._run()
        forced, self._forced = self._forced, None
        if run is None or run.done or run.gave_up:
            return None
        if (
            ctx.response_schema is not None
            and self.capability == "auto"
            and rejects_response_format(error)
        ):
            self.fallback = run.strategy = "tool"
            self._raise(
                AlertLevel.INFO,
                "The model provider refused the JSON-schema response format; structured "
                f"output uses a {run.tool_name} tool instead.",
            )
            retry = dataclasses.replace(
                ctx, response_schema=None, tools=list(ctx.tools), messages=list(ctx.messages)
            )
            # The retry cannot be retried again: "auto" plus the reminder, which
            # every tool-calling server accepts; later requests try "required".
            supported, self.required_supported = self.required_supported, False
            self._offer_tool(run, retry)
            self.required_supported = supported
            self._forced = None
            return RetryRequest(retry)
        if forced is ctx and rejects_forced_choice(error):
            self.required_supported = False
            self._raise(
                AlertLevel.INFO,
                "The model provider refused tool_choice 'required'; structured output is "
                "asked for with a reminder instead.",
            )
            messages = [*ctx.messages, SystemMessage(text=run.tool_reminder())]
            return RetryRequest(dataclasses.replace(ctx, tool_choice="auto", messages=messages))
        return None

    # -- answers -------------------------------------------------------------------------------

    def on_llm_response(self, ctx: LlmRequestContext, message: AssistantMessage) -> None:
        self._forced = None
        self._verdicts = {}
        run = self._run()
        if run is None or run.done or run.gave_up or run.strategy != "tool":
            return
        finals = [
            c for c in message.tool_calls if c.name == run.tool_name and c.arguments_error is None
        ]
        if not finals:
            return  # other tools first, or a malformed call (the worker answers that)
        taken = "Ignored: an earlier final answer of this message was taken."
        problems: dict[str, str] = {}
        for call in finals:
            if run.done:
                self._verdicts[call.id] = AnswerCall(taken, is_error=True)
                continue
            problem = run.check_arguments(dict(call.arguments))
            if problem is None:
                run.answer = message
                self._verdicts[call.id] = AnswerCall("Final answer accepted.")
            else:
                problems[call.id] = problem
        if run.done:
            for call in message.tool_calls:
                if call.id in self._verdicts:
                    continue
                self._verdicts[call.id] = (
                    AnswerCall(taken, is_error=True)
                    if call.name == run.tool_name
                    else Skip("the final answer was given in the same message; it was not run")
                )
            return
        run.failed(next(iter(problems.values())))
        if run.gave_up:
            run.answer = message
        for call_id, problem in problems.items():
            self._verdicts[call_id] = AnswerCall(run.tool_error_text(problem), is_error=True)

    def pre_tool_call(self, ctx: ToolCallContext) -> InterceptorToolResult:
        verdict = self._verdicts.pop(ctx.call_id, None)
        return Continue() if verdict is None else verdict

    def on_turn_end(self, ctx: TurnEndContext) -> Finish | ContinueWithMessages | Paused:
        run = self._run()
        if run is None or run.done or run.gave_up:
            return Finish()
        errors = run.check_text(ctx.final_text)
        if errors is None:
            return Finish()
        if not run.failed(errors):
            return Finish()
        text = run.tool_reminder() if run.strategy == "tool" else run.reask_text(errors)
        return ContinueWithMessages([UserMessage(text=text)])

    # -- the run ends --------------------------------------------------------------------------

    def on_run_end(self, status: str) -> None:
        self._verdicts = {}
        self._forced = None

    def fork_tools(self, tools: Sequence[ToolDefinition]) -> Sequence[ToolDefinition]:
        """Forks never see the final-answer tool: it has no implementation outside this run."""
        if not self._added:
            return tools
        return [tool for tool in tools if not any(tool is added for added in self._added)]
