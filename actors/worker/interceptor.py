"""The interceptor: the worker's trusted, internal policy point.

One interceptor per worker, called *before* the public hooks at each decision
point, inline on the worker's thread -- so it must be quick and must not block
(it is Fore's own code -- the ``resolve`` tool-choice queue of
:mod:`fore.actors.worker.machinery`, structured output, the speculation gate --
followed by the session's own interceptor, if it brought one). It can do what public hooks cannot:

* ``on_prompt_submit`` may return :class:`ContinueWith` items, which go into
  history right after the user message (public hooks stay read-only);
* ``pre_tool_call`` may return :class:`Boundary` (speculation: stop here);
* ``on_llm_error`` may ask for the request to be sent again, changed;
* ``pre_tool_call`` may answer a call itself (:class:`AnswerCall`: it never
  reaches the pool nor the public hooks), and ``turn_answered`` may end the
  turn before the next request (structured output's ``final_answer``).

Subclass :class:`Interceptor` and override what you need; :class:`Interceptors`
chains several (the first non-neutral answer wins).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fore.actors.worker.hooks import (
    Abort,
    AbortContext,
    Cancel,
    Continue,
    ContinueWithMessages,
    Finish,
    LlmRequestContext,
    Pause,
    Paused,
    PostToolCallContext,
    Skip,
    ToolCallContext,
    TurnEndContext,
)
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import AssistantMessage, Item, UserMessage
from fore.messages.llm import LlmError
from fore.messages.tools import ToolDefinition


@dataclass(frozen=True, slots=True)
class ContinueWith:
    """Continue, and put these items into history right after the user message."""

    items: tuple[Item, ...] = ()

    def __init__(self, items: Sequence[Item] = ()) -> None:
        object.__setattr__(self, "items", tuple(items))


@dataclass(frozen=True, slots=True)
class Boundary:
    """Stop before this tool call: the run ends as ``boundary`` (speculation)."""

    reason: str
    tool: str = ""


@dataclass(frozen=True, slots=True)
class RetryRequest:
    """Send the failed LLM request again with this context (e.g. tool_choice auto).

    The retry is an LLM call like any other: it counts against the run's
    ``max_turns`` (a spent budget ends the run as ``max_turns`` instead) and
    passes the public ``pre_llm_request`` hooks, which edit a copy of it (so
    their edits to the failed request are not applied twice). The
    interceptor's own ``pre_llm_request`` does not see it again: it built it.
    At most one retry per failed request.
    """

    ctx: LlmRequestContext


@dataclass(frozen=True, slots=True)
class AnswerCall:
    """The interceptor answers this call itself: ``output`` is its result (it is not run).

    For calls that are Fore's own machinery rather than tools (structured
    output's ``final_answer``): the pool never sees them, nor do the public
    ``pre_tool_call`` / ``post_tool_call`` hooks.
    """

    output: str
    is_error: bool = False


InterceptorSubmitResult = Continue | Cancel | ContinueWith
InterceptorToolResult = Continue | Skip | Abort | Pause | Boundary | AnswerCall


class Interceptor:
    """Neutral at every decision point; subclass and override."""

    def attach(self, alert: Callable[[AlertLevel, str, str], Any]) -> None:
        """The worker hands over its alert function when it starts."""

    def on_prompt_submit(self, message: UserMessage) -> InterceptorSubmitResult:
        return Continue()

    def on_submit_cancelled(self) -> None:
        """A public hook cancelled the submit: drop anything staged for it."""

    def pre_llm_request(self, ctx: LlmRequestContext) -> Continue | Cancel:
        return Continue()

    def turn_answered(self) -> AssistantMessage | None:
        """Before the next LLM request: the turn's answer is complete already.

        Return the answer that completed it (e.g. the message whose
        ``final_answer`` call was accepted) and the turn ends there -- its
        turn-end hooks run -- without another request.
        """
        return None

    def fork_tools(self, tools: Sequence[ToolDefinition]) -> Sequence[ToolDefinition]:
        """The tools a fork of the last request (suggestion, speculation) may describe."""
        return tools

    def on_llm_response(self, ctx: LlmRequestContext, message: AssistantMessage) -> None:
        """The answer to a request this interceptor saw (e.g. was a forced tool called?).

        ``ctx`` (here and in :meth:`on_llm_error`) is the very object this
        interceptor's :meth:`pre_llm_request` was given, as it left it; the
        public hooks edited a copy of it.
        """

    def on_llm_error(self, ctx: LlmRequestContext, error: LlmError) -> RetryRequest | None:
        return None

    def pre_tool_call(self, ctx: ToolCallContext) -> InterceptorToolResult:
        """Decide a call before the public hooks.

        With ``WorkerConfig.strict_tool_hooks`` (speculation), a public hook
        that changes the arguments after this approved them makes the worker
        ask this again on the final arguments: anything but ``Continue`` is
        then a boundary, so a hook can never make the call run unapproved.
        """
        return Continue()

    def post_tool_call(self, ctx: PostToolCallContext) -> Continue | Abort:
        return Continue()

    def on_turn_end(self, ctx: TurnEndContext) -> Finish | ContinueWithMessages | Paused:
        return Finish()

    def on_abort(self, ctx: AbortContext) -> None:
        """The run ended early (called once per aborted run)."""

    def on_run_end(self, status: str) -> None:
        """The run ended with ``status`` (any status; for cleanup)."""


def _neutral(result: Any) -> bool:
    return isinstance(result, Continue | Finish) or result is None


class Interceptors(Interceptor):
    """Several interceptors in order; the first non-neutral answer wins."""

    def __init__(self, parts: Sequence[Interceptor]) -> None:
        self.parts = list(parts)

    def on_prompt_submit(self, message: UserMessage) -> InterceptorSubmitResult:
        extras: list[Item] = []
        for part in self.parts:
            result = part.on_prompt_submit(message)
            if isinstance(result, Cancel):
                for other in self.parts:
                    other.on_submit_cancelled()
                return result
            if isinstance(result, ContinueWith):
                extras.extend(result.items)
        return ContinueWith(extras) if extras else Continue()

    def attach(self, alert: Callable[[AlertLevel, str, str], Any]) -> None:
        for part in self.parts:
            part.attach(alert)

    def on_submit_cancelled(self) -> None:
        for part in self.parts:
            part.on_submit_cancelled()

    def pre_llm_request(self, ctx: LlmRequestContext) -> Continue | Cancel:
        for part in self.parts:
            result = part.pre_llm_request(ctx)
            if not _neutral(result):
                return result
        return Continue()

    def turn_answered(self) -> AssistantMessage | None:
        for part in self.parts:
            answer = part.turn_answered()
            if answer is not None:
                return answer
        return None

    def fork_tools(self, tools: Sequence[ToolDefinition]) -> Sequence[ToolDefinition]:
        for part in self.parts:
            tools = part.fork_tools(tools)
        return tools

    def on_llm_response(self, ctx: LlmRequestContext, message: AssistantMessage) -> None:
        for part in self.parts:
            part.on_llm_response(ctx, message)

    def on_llm_error(self, ctx: LlmRequestContext, error: LlmError) -> RetryRequest | None:
        for part in self.parts:
            retry = part.on_llm_error(ctx, error)
            if retry is not None:
                return retry
        return None

    def pre_tool_call(self, ctx: ToolCallContext) -> InterceptorToolResult:
        for part in self.parts:
            result = part.pre_tool_call(ctx)
            if not _neutral(result):
                return result
        return Continue()

    def post_tool_call(self, ctx: PostToolCallContext) -> Continue | Abort:
        for part in self.parts:
            result = part.post_tool_call(ctx)
            if not _neutral(result):
                return result
        return Continue()

    def on_turn_end(self, ctx: TurnEndContext) -> Finish | ContinueWithMessages | Paused:
        for part in self.parts:
            result = part.on_turn_end(ctx)
            if not _neutral(result):
                return result
        return Finish()

    def on_abort(self, ctx: AbortContext) -> None:
        for part in self.parts:
            part.on_abort(ctx)

    def on_run_end(self, status: str) -> None:
        for part in self.parts:
            part.on_run_end(status)
