"""Hooks: user policy at each decision point of the agent loop.

Six events, each with its own input and result type (the seed's design):

=================  ============================  =====================================
event              input (mutable where noted)   result
=================  ============================  =====================================
on_prompt_submit   :class:`PromptContext`        ``Continue`` | ``Cancel``
pre_llm_request    :class:`LlmRequestContext`    ``Continue`` | ``Cancel``
pre_tool_call      :class:`ToolCallContext`      ``Continue`` | ``Skip`` | ``Abort`` | ``Pause``
post_tool_call     :class:`PostToolCallContext`  ``Continue`` | ``Abort``
on_turn_end        :class:`TurnEndContext`       ``Finish`` | ``ContinueWithMessages`` | ``Paused``
on_abort           :class:`AbortContext`         (ignored)
=================  ============================  =====================================

Hooks of one event run in order: higher ``priority`` first, then registration
order. A hook may have a ``when`` condition (and tool hooks a ``tools``
pattern) that decides whether it applies. The condition is user code too: it
is evaluated by :func:`run_hook` inside the hook's blocking-lane call, under
the hook's deadline, and a condition that raises or hangs is a hook error like
any other. (The ``tools`` pattern is Fore's own ``fnmatch`` and is checked
inline.) Propagation: ``Continue`` (and
``Finish``, the neutral turn-end result) runs the next hook; any other result
stops the chain for that call or event (``Skip``
skips the call, ``Abort`` ends the run, ``Pause`` / ``Paused`` pause it).
Returning ``None`` means the event's neutral result (``Continue`` / ``Finish``).

Hooks are user code: the worker runs each one on the hook lane with a
timeout, never on a dispatcher thread (see :mod:`actors.worker.hookrun`). The
timeout starts when the hook starts running, not while it waits for a lane
thread; that wait has its own deadline (``Hooks(start_timeout=...)``), and a
hook that has not started when its run no longer needs it is cancelled and
never runs. A hook that is already running cannot be stopped (Python cannot
kill a thread): after its timeout it is abandoned -- it finishes whenever it
returns and its answer is ignored -- so a session may hold at most
``Hooks(max_in_flight=...)`` lane threads with its hooks; past that its next
hook waits for one of its own to finish. A hook that raises, times out,
returns a result its event does not allow, or leaves its input invalid is a
:class:`HookError` naming the event and the hook (its :meth:`HookError.failure`
is the typed :class:`~messages.session.HookFailure` a ``TurnResult``
carries), never a crash of the worker and never an invalid history.

Inputs are mutable only where the seed says so, and every edit is checked
when the hook answers (:func:`edit_problem`): ``on_prompt_submit`` may
rewrite ``text`` (a ``str``) and ``segments``; ``pre_llm_request`` may edit
its copy's ``messages`` (items), ``tools`` (tool definitions) and
``tool_choice``; a pre_tool_call hook may rewrite ``arguments`` (a JSON
object) but not the call's id or tool name (a renamed id would leave the
model's call without a result and a result without a call); a
post_tool_call hook may rewrite ``result`` (a :class:`ToolOutcome`) only.
The identity fields raise ``AttributeError`` when assigned.
``ContinueWithMessages`` items must be items that keep history well paired.

``on_abort`` runs exactly once for every run that *started* -- whose user
message entered history -- and ended early (see
:data:`~messages.session.RunStatus`). A submit that ends before that (cancelled
while its ``@file`` references were read or its on_prompt_submit hooks ran,
rejected or failed at on_prompt_submit, cancelled before it was even
received) never started: nothing of it is in history, so there is nothing to
clean up and no on_abort runs. A failing or timed-out on_abort hook is
reported (a log line and an alert) and the next on_abort hook still runs.

:func:`advance` is the chain's pure step function; the worker drives it.
"""

from __future__ import annotations

import fnmatch
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import TypeAdapter, ValidationError

from fore.errors import ForeError
from fore.messages.conversation import (
    AssistantMessage,
    FileRef,
    Item,
    Paste,
    Segment,
    SystemMessage,
    TextSegment,
    ToolCall,
    ToolResult,
    UserMessage,
)
from fore.messages.llm import NamedToolChoice, ResponseSchema, ToolChoice
from fore.messages.session import HookFailure, HookFailureKind
from fore.messages.tools import ToolDefinition

# -- results ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Continue:
    """Go on (run the next hook, then the step itself)."""


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel the submit or the LLM request; the run ends as ``rejected``."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Skip:
    """Do not run this tool call; it gets a synthetic "skipped" result."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Abort:
    """End the run now (status ``aborted``)."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Pause:
    """Pause the run before this tool call; ``resume`` continues after this hook."""

    reason: str = ""


@dataclass(frozen=True, slots=True)
class Finish:
    """The turn is over."""


@dataclass(frozen=True, slots=True)
class ContinueWithMessages:
    """Append these items and ask the model again (counts against ``max_turns``)."""

    messages: tuple[Item, ...] = ()

    def __init__(self, messages: Sequence[Item] = ()) -> None:
        object.__setattr__(self, "messages", tuple(messages))


@dataclass(frozen=True, slots=True)
class Paused:
    """Pause at turn end; ``resume`` finishes the run or continues with messages."""

    reason: str = ""


OnPromptSubmitResult = Continue | Cancel
PreLlmRequestResult = Continue | Cancel
PreToolCallResult = Continue | Skip | Abort | Pause
PostToolCallResult = Continue | Abort
OnTurnEndResult = Finish | ContinueWithMessages | Paused
OnAbortResult = None


class HookEvent(StrEnum):
    ON_PROMPT_SUBMIT = "on_prompt_submit"
    PRE_LLM_REQUEST = "pre_llm_request"
    PRE_TOOL_CALL = "pre_tool_call"
    POST_TOOL_CALL = "post_tool_call"
    ON_TURN_END = "on_turn_end"
    ON_ABORT = "on_abort"


ALLOWED: dict[HookEvent, tuple[type, ...]] = {
    HookEvent.ON_PROMPT_SUBMIT: (Continue, Cancel),
    HookEvent.PRE_LLM_REQUEST: (Continue, Cancel),
    HookEvent.PRE_TOOL_CALL: (Continue, Skip, Abort, Pause),
    HookEvent.POST_TOOL_CALL: (Continue, Abort),
    HookEvent.ON_TURN_END: (Finish, ContinueWithMessages, Paused),
    HookEvent.ON_ABORT: (),
}

NEUTRAL: dict[HookEvent, Any] = {
    HookEvent.ON_PROMPT_SUBMIT: Continue(),
    HookEvent.PRE_LLM_REQUEST: Continue(),
    HookEvent.PRE_TOOL_CALL: Continue(),
    HookEvent.POST_TOOL_CALL: Continue(),
    HookEvent.ON_TURN_END: Finish(),
    HookEvent.ON_ABORT: None,
}


# -- inputs ------------------------------------------------------------------------


@dataclass
class PromptContext:
    """on_prompt_submit: the user's input (``text`` may be rewritten)."""

    session_id: str
    purpose: str
    text: str
    segments: tuple[Segment, ...] = ()


@dataclass
class LlmRequestContext:
    """pre_llm_request: a *copy* of what is about to be sent (edit it freely).

    Edits change this request only, never the session's history.
    """

    session_id: str
    purpose: str
    turn: int
    messages: list[Item]
    tools: list[ToolDefinition]
    tool_choice: ToolChoice = "auto"
    model_name: str = ""
    response_schema: ResponseSchema | None = None
    """Structured output's JSON-schema response format (set by Fore; hooks may read it)."""


@dataclass(frozen=True)
class ToolMeta:
    """Read-only facts about a call."""

    description: str
    exclusive: bool
    index: int
    batch_size: int
    turn: int


class _ReadOnlyFields:
    """Fields named in ``_read_only`` can be set once (by ``__init__``), never again.

    The worker pairs every call with its result by id; a hook that could
    rename the id or the tool would break that pairing, so only the fields a
    hook is meant to edit stay assignable.
    """

    _read_only: ClassVar[frozenset[str]] = frozenset()

    def __setattr__(self, key: str, value: Any) -> None:
        if key in self._read_only and key in self.__dict__:
            raise AttributeError(
                f"{type(self).__name__}.{key} is read-only: hooks may not change it"
            )
        object.__setattr__(self, key, value)

    def __delattr__(self, key: str) -> None:
        if key in self._read_only:
            raise AttributeError(
                f"{type(self).__name__}.{key} is read-only: hooks may not delete it"
            )
        object.__delattr__(self, key)


@dataclass
class ToolCallContext(_ReadOnlyFields):
    """pre_tool_call: ``arguments`` is a private copy the hook may rewrite.

    Everything else is read-only: the call that runs is built from the
    model's own id and tool name plus these arguments.
    """

    _read_only: ClassVar[frozenset[str]] = frozenset(
        {"session_id", "purpose", "call_id", "name", "meta", "tool"}
    )

    session_id: str
    purpose: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    meta: ToolMeta
    tool: Any = None
    """The tool object (for state access), ``None`` for an unknown tool."""

    def to_call(self) -> ToolCall:
        """The call to run: the original id and name with the (possibly rewritten) arguments."""
        return ToolCall(id=self.call_id, name=self.name, arguments=self.arguments)


@dataclass
class ToolOutcome:
    """The result a post_tool_call hook may rewrite."""

    output: str
    is_error: bool


@dataclass
class PostToolCallContext(_ReadOnlyFields):
    """post_tool_call: the call and its (rewritable) result; the rest is read-only.

    ``arguments`` are the ones the call ran with (a copy: editing them
    changes nothing).
    """

    _read_only: ClassVar[frozenset[str]] = frozenset(
        {"session_id", "purpose", "call_id", "name", "outcome", "meta", "tool"}
    )

    session_id: str
    purpose: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: ToolOutcome
    outcome: str
    meta: ToolMeta
    tool: Any = None


@dataclass
class TurnEndContext:
    """on_turn_end: the history including the final answer (a copy)."""

    session_id: str
    purpose: str
    turn: int
    messages: list[Item]
    final_text: str


@dataclass
class AbortContext:
    """on_abort: why the run ended early."""

    session_id: str
    purpose: str
    reason: str
    status: str


# -- errors ------------------------------------------------------------------------


class HookError(ForeError):
    """A hook failed; names the event, the hook and how (``kind``)."""

    kind: HookFailureKind = "raised"

    def __init__(
        self, event: HookEvent, hook: str, message: str, *, kind: HookFailureKind | None = None
    ) -> None:
        super().__init__(f"{event.value} hook {hook!r}: {message}")
        self.event = event
        self.hook = hook
        self.message = message
        if kind is not None:
            self.kind = kind

    def failure(self) -> HookFailure:
        """The typed form a ``TurnResult`` carries (callers branch on it, not on text)."""
        return HookFailure(
            event=self.event.value, hook=self.hook, kind=self.kind, message=self.message
        )


class HookTimeout(HookError):
    """A hook (or its ``when`` condition) ran longer than its timeout."""

    kind: HookFailureKind = "timeout"


class ConditionError(ForeError):
    """A hook's ``when`` condition raised (raised by :func:`run_hook`)."""


# -- registry ------------------------------------------------------------------------


HookFn = Callable[[Any], Any]
Condition = Callable[[Any], bool]


@dataclass(frozen=True)
class HookSpec:
    event: HookEvent
    fn: HookFn
    name: str
    priority: int = 0
    when: Condition | None = None
    tools: str | None = None
    timeout: float | None = None
    seq: int = 0

    def matches(self, ctx: Any) -> bool:
        """The ``tools`` pattern only (Fore's own code: cheap, safe on any thread)."""
        if self.tools is not None:
            name = getattr(ctx, "name", None)
            if name is None or not fnmatch.fnmatchcase(name, self.tools):
                return False
        return True

    def applies(self, ctx: Any) -> bool:
        """Pattern and ``when`` condition; the condition is user code (hook lane only)."""
        return self.matches(ctx) and (self.when is None or bool(self.when(ctx)))


_seq = itertools.count()


DEFAULT_START_TIMEOUT = 120.0
"""How long a hook may wait for a blocking-lane thread before it counts as timed out."""

DEFAULT_MAX_IN_FLIGHT = 2
"""Lane threads one session's hooks may hold at once (abandoned, still-running ones count)."""


class Hooks:
    """The hooks of one session (thread-safe; the worker takes a snapshot per chain).

    ``default_timeout`` bounds each hook's run (from when it starts running);
    ``start_timeout`` bounds its wait for a blocking-lane thread;
    ``max_in_flight`` caps the lane threads this session's hooks hold at once
    (see :mod:`actors.worker.hookrun`).
    """

    def __init__(
        self,
        *,
        default_timeout: float = 30.0,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        if default_timeout <= 0 or start_timeout <= 0:
            raise ValueError("hook timeouts must be positive")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.default_timeout = default_timeout
        self.start_timeout = start_timeout
        self.max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._specs: dict[HookEvent, list[HookSpec]] = {event: [] for event in HookEvent}

    def add(
        self,
        event: HookEvent | str,
        fn: HookFn,
        *,
        priority: int = 0,
        when: Condition | None = None,
        tools: str | None = None,
        timeout: float | None = None,
        name: str | None = None,
    ) -> HookSpec:
        """Register ``fn`` for ``event``; returns the spec (for :meth:`remove`)."""
        event = HookEvent(event)
        if tools is not None and event not in (HookEvent.PRE_TOOL_CALL, HookEvent.POST_TOOL_CALL):
            raise ValueError("a tools pattern only applies to pre_tool_call / post_tool_call hooks")
        if timeout is not None and timeout <= 0:
            raise ValueError("a hook timeout must be positive")
        spec = HookSpec(
            event=event,
            fn=fn,
            name=name or getattr(fn, "__name__", None) or type(fn).__name__,
            priority=priority,
            when=when,
            tools=tools,
            timeout=timeout,
            seq=next(_seq),
        )
        with self._lock:
            specs = self._specs[event]
            specs.append(spec)
            specs.sort(key=lambda s: (-s.priority, s.seq))
        return spec

    def remove(self, spec: HookSpec) -> bool:
        with self._lock:
            specs = self._specs[spec.event]
            if spec in specs:
                specs.remove(spec)
                return True
        return False

    def chain(self, event: HookEvent) -> tuple[HookSpec, ...]:
        with self._lock:
            return tuple(self._specs[event])

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._specs.values())

    # typed conveniences, one per event
    def on_prompt_submit(
        self, fn: Callable[[PromptContext], OnPromptSubmitResult | None], **kw: Any
    ) -> HookSpec:
        return self.add(HookEvent.ON_PROMPT_SUBMIT, fn, **kw)

    def pre_llm_request(
        self, fn: Callable[[LlmRequestContext], PreLlmRequestResult | None], **kw: Any
    ) -> HookSpec:
        return self.add(HookEvent.PRE_LLM_REQUEST, fn, **kw)

    def pre_tool_call(
        self, fn: Callable[[ToolCallContext], PreToolCallResult | None], **kw: Any
    ) -> HookSpec:
        return self.add(HookEvent.PRE_TOOL_CALL, fn, **kw)

    def post_tool_call(
        self, fn: Callable[[PostToolCallContext], PostToolCallResult | None], **kw: Any
    ) -> HookSpec:
        return self.add(HookEvent.POST_TOOL_CALL, fn, **kw)

    def on_turn_end(
        self, fn: Callable[[TurnEndContext], OnTurnEndResult | None], **kw: Any
    ) -> HookSpec:
        return self.add(HookEvent.ON_TURN_END, fn, **kw)

    def on_abort(self, fn: Callable[[AbortContext], None], **kw: Any) -> HookSpec:
        return self.add(HookEvent.ON_ABORT, fn, **kw)


class HooksView:
    """A read-only view of some events of a :class:`Hooks` (e.g. speculation's tool hooks).

    A speculation must pass the session's permission policy (``pre_tool_call``)
    and its result processing (``post_tool_call``), but must not run the
    prompt, request, turn-end or abort hooks of a run the user never started.
    """

    def __init__(self, hooks: Hooks, events: frozenset[HookEvent]) -> None:
        self._hooks = hooks
        self._events = events

    @property
    def default_timeout(self) -> float:
        return self._hooks.default_timeout

    @property
    def start_timeout(self) -> float:
        return self._hooks.start_timeout

    @property
    def max_in_flight(self) -> int:
        return self._hooks.max_in_flight

    def chain(self, event: HookEvent) -> tuple[HookSpec, ...]:
        return self._hooks.chain(event) if event in self._events else ()


# -- the chain's step function ---------------------------------------------------------


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
