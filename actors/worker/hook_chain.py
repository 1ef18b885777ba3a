"""The hook chain's pure step function and the checks of what a hook left.

The worker drives a chain (one hook at a time on the hook lane); these
functions decide, without an actor, which hook runs next, what its answer
means for the chain, and whether the input it edited or the result it
returned can be used. Re-exported by :mod:`actors.worker.hooks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from fore.actors.worker.hook_contexts import ToolOutcome
from fore.actors.worker.hook_registry import HookSpec
from fore.actors.worker.hook_results import (
    ALLOWED,
    NEUTRAL,
    ConditionError,
    Continue,
    ContinueWithMessages,
    Finish,
    HookError,
    HookEvent,
)
from fore.messages.conversation import (
    AssistantMessage,
    FileRef,
    Paste,
    SystemMessage,
    TextSegment,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import NamedToolChoice, ToolChoice
from fore.messages.tools import ToolDefinition


@dataclass
class ChainState:
    """Progress of one chain run over a snapshot of specs."""

    event: HookEvent
    specs: tuple[HookSpec, ...]
    ctx: Any
    index: int = 0
    outcome: Any = None
    error: HookError | None = None
    stopped_at: int | None = None
    ran: list[str] = field(default_factory=list)


class _NotApplicable:
    """What :func:`run_hook` answers when the hook's condition says it does not apply."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_APPLICABLE"


NOT_APPLICABLE: Any = _NotApplicable()


def run_hook(spec: HookSpec, ctx: Any) -> Any:
    """Call one hook on the hook lane: its ``when`` condition first, then the hook.

    The condition is user code, so it belongs here -- under the hook's
    deadline, off the dispatcher -- not in the worker's chain step. Returns
    :data:`NOT_APPLICABLE` when the condition is false; a condition that
    raises becomes :class:`ConditionError`.
    """
    if spec.when is not None:
        try:
            applies = bool(spec.when(ctx))
        except Exception as exc:
            raise ConditionError(f"condition raised {exc!r}") from exc
        if not applies:
            return NOT_APPLICABLE
    return spec.fn(ctx)


def raised_error(event: HookEvent, hook: str, exc: BaseException) -> HookError:
    """The typed error for a hook (or its condition) that raised ``exc``."""
    if isinstance(exc, ConditionError):
        return HookError(event, hook, str(exc), kind="condition")
    return HookError(event, hook, f"raised {type(exc).__name__}: {exc}")


def next_hook(state: ChainState) -> HookSpec | None:
    """The next hook whose ``tools`` pattern matches (its condition runs with it)."""
    while state.index < len(state.specs):
        spec = state.specs[state.index]
        if spec.matches(state.ctx):
            return spec
        state.index += 1
    return None


def advance(state: ChainState, spec: HookSpec, result: Any) -> bool:
    """Record ``spec``'s result; return True when the chain should go on.

    ``None`` counts as the event's neutral result. A result the event does not
    allow is a :class:`HookError`. On a stopping result, ``state.outcome`` is
    it and ``state.stopped_at`` the hook's index (resume continues after it).
    :data:`NOT_APPLICABLE` (the hook's condition was false) just moves on.
    """
    if result is NOT_APPLICABLE:
        state.index += 1
        return True
    state.ran.append(spec.name)
    if state.event is HookEvent.ON_ABORT:
        state.index += 1
        return True
    if result is None:
        result = NEUTRAL[state.event]
    if not isinstance(result, ALLOWED[state.event]):
        allowed = ", ".join(t.__name__ for t in ALLOWED[state.event])
        state.error = HookError(
            state.event,
            spec.name,
            f"returned {result!r}; {state.event.value} allows {allowed}",
            kind="invalid_result",
        )
        return False
    state.index += 1
    if isinstance(result, Continue | Finish):  # the neutral results let the chain go on
        return True
    state.outcome = result
    state.stopped_at = state.index - 1
    return False


def final_outcome(state: ChainState) -> Any:
    """The chain's result once it has stopped or run out of hooks."""
    return state.outcome if state.outcome is not None else NEUTRAL[state.event]


# -- checking what a hook left --------------------------------------------------------

_ITEM_TYPES = (UserMessage, AssistantMessage, SystemMessage, ToolResult)
_SEGMENT_TYPES = (TextSegment, FileRef, Paste)
_TOOL_CHOICE: TypeAdapter[ToolChoice] = TypeAdapter(ToolChoice)


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def _arguments_problem(ctx: Any) -> str | None:
    arguments = getattr(ctx, "arguments", None)
    if not isinstance(arguments, dict):
        return f"left invalid arguments (a {type(arguments).__name__}, not a JSON object)"
    try:
        ToolCall(id=ctx.call_id, name=ctx.name, arguments=arguments)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][1:]) or "arguments"
        return f"left invalid arguments ({where}: {first['msg']})"
    return None


def _items_problem(field_name: str, items: Any) -> str | None:
    if not isinstance(items, list | tuple):
        return f"left ctx.{field_name} invalid (a {type(items).__name__}, not a list of items)"
    for index, item in enumerate(items):
        if not isinstance(item, _ITEM_TYPES):
            return (
                f"left ctx.{field_name}[{index}] invalid (a {type(item).__name__}, not a "
                "UserMessage, AssistantMessage, SystemMessage or ToolResult)"
            )
    return None


def _request_problem(ctx: Any) -> str | None:
    problem = _items_problem("messages", getattr(ctx, "messages", None))
    if problem is not None:
        return problem
    tools = getattr(ctx, "tools", None)
    if not isinstance(tools, list | tuple):
        return f"left ctx.tools invalid (a {type(tools).__name__}, not a list)"
    for index, tool in enumerate(tools):
        if not isinstance(tool, ToolDefinition):
            kind = type(tool).__name__
            return f"left ctx.tools[{index}] invalid (a {kind}, not a ToolDefinition)"
    choice = getattr(ctx, "tool_choice", None)
    if not isinstance(choice, NamedToolChoice):
        try:
            _TOOL_CHOICE.validate_python(choice)
        except ValidationError:
            return (
                f"left ctx.tool_choice invalid ({choice!r}; allowed: 'auto', 'none', "
                "'required' or a NamedToolChoice)"
            )
    if not isinstance(getattr(ctx, "model_name", None), str):
        return "left ctx.model_name invalid (not a str)"
    return None


def _prompt_problem(ctx: Any) -> str | None:
    text = getattr(ctx, "text", None)
    if not isinstance(text, str):
        return f"left ctx.text invalid (a {type(text).__name__}, not a str)"
    segments = getattr(ctx, "segments", None)
    if not isinstance(segments, list | tuple):
        return f"left ctx.segments invalid (a {type(segments).__name__}, not a tuple of segments)"
    for index, segment in enumerate(segments):
        if not isinstance(segment, _SEGMENT_TYPES):
            return (
                f"left ctx.segments[{index}] invalid (a {type(segment).__name__}, not a "
                "TextSegment, FileRef or Paste)"
            )
    return None


def _result_problem(ctx: Any) -> str | None:
    result = getattr(ctx, "result", None)
    if not isinstance(result, ToolOutcome):
        return f"left ctx.result invalid (a {type(result).__name__}, not a ToolOutcome)"
    if not isinstance(result.output, str):
        return f"left ctx.result.output invalid (a {type(result.output).__name__}, not a str)"
    if not isinstance(result.is_error, bool):
        return f"left ctx.result.is_error invalid (a {type(result.is_error).__name__}, not a bool)"
    return None


def messages_problem(items: Sequence[Any]) -> str | None:
    """Why items to append to history would break it (not items, or badly paired)."""
    problem = _items_problem("messages", list(items))
    if problem is not None:
        return problem.replace("ctx.", "")
    calls: set[str] = set()
    for item in items:
        if isinstance(item, AssistantMessage):
            calls.update(call.id for call in item.tool_calls)
        elif isinstance(item, ToolResult) and item.call_id not in calls:
            return f"a ToolResult for call {item.call_id!r} without its call among the messages"
    answered = {item.call_id for item in items if isinstance(item, ToolResult)}
    missing = sorted(calls - answered)
    if missing:
        return f"tool calls without results among the messages: {', '.join(missing)}"
    return None


def edit_problem(event: HookEvent, ctx: Any) -> str | None:
    """Why the input a hook of ``event`` left cannot be used, naming the field (pure).

    Checked after every hook answers, so the error names the hook that broke
    it, and a bad value is a typed hook error instead of a crash of the worker
    or an item history keeps (and a provider rejects on every later request).
    """
    if event is HookEvent.PRE_TOOL_CALL:
        return _arguments_problem(ctx)
    if event is HookEvent.PRE_LLM_REQUEST:
        return _request_problem(ctx)
    if event is HookEvent.ON_PROMPT_SUBMIT:
        return _prompt_problem(ctx)
    if event is HookEvent.POST_TOOL_CALL:
        return _result_problem(ctx)
    return None


def outcome_problem(event: HookEvent, outcome: Any) -> str | None:
    """Why a stopping result cannot be used as it is (``ContinueWithMessages`` items)."""
    if event is HookEvent.ON_TURN_END and isinstance(outcome, ContinueWithMessages):
        problem = messages_problem(outcome.messages)
        if problem is not None:
            return f"returned ContinueWithMessages with {problem}"
    return None
