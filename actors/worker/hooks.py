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
pattern) that decides whether it applies. Propagation: ``Continue`` (and
``Finish``, the neutral turn-end result) runs the next hook; any other result
stops the chain for that call or event (``Skip``
skips the call, ``Abort`` ends the run, ``Pause`` / ``Paused`` pause it).
Returning ``None`` means the event's neutral result (``Continue`` / ``Finish``).

Hooks are user code: the worker runs each one on the blocking lane with a
timeout, never on a dispatcher thread. A hook that raises, times out or
returns a result its event does not allow is a :class:`HookError` naming the
event and the hook.

:func:`advance` is the chain's pure step function; the worker drives it.
"""

from __future__ import annotations

import fnmatch
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from messages.conversation import Item, Segment, ToolCall
from messages.llm import ToolChoice
from messages.tools import ToolDefinition

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


@dataclass(frozen=True)
class ToolMeta:
    """Read-only facts about a call."""

    description: str
    exclusive: bool
    index: int
    batch_size: int
    turn: int


@dataclass
class ToolCallContext:
    """pre_tool_call: ``arguments`` is a private copy the hook may rewrite."""

    session_id: str
    purpose: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    meta: ToolMeta
    tool: Any = None
    """The tool object (for state access), ``None`` for an unknown tool."""

    def to_call(self) -> ToolCall:
        return ToolCall(id=self.call_id, name=self.name, arguments=self.arguments)


@dataclass
class ToolOutcome:
    """The result a post_tool_call hook may rewrite."""

    output: str
    is_error: bool


@dataclass
class PostToolCallContext:
    """post_tool_call: the call and its (rewritable) result."""

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


class HookError(Exception):
    """A hook failed; names the event and the hook."""

    def __init__(self, event: HookEvent, hook: str, message: str) -> None:
        super().__init__(f"{event.value} hook {hook!r}: {message}")
        self.event = event
        self.hook = hook


class HookTimeout(HookError):
    """A hook ran longer than its timeout."""


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

    def applies(self, ctx: Any) -> bool:
        if self.tools is not None:
            name = getattr(ctx, "name", None)
            if name is None or not fnmatch.fnmatchcase(name, self.tools):
                return False
        return self.when is None or bool(self.when(ctx))


_seq = itertools.count()


class Hooks:
    """The hooks of one session (thread-safe; the worker takes a snapshot per chain)."""

    def __init__(self, *, default_timeout: float = 30.0) -> None:
        self.default_timeout = default_timeout
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


def next_hook(state: ChainState) -> HookSpec | None:
    """The next hook to run, skipping those whose condition does not apply.

    A condition that raises is a :class:`HookError` (recorded in the state).
    """
    while state.index < len(state.specs):
        spec = state.specs[state.index]
        try:
            if spec.applies(state.ctx):
                return spec
        except Exception as exc:
            state.error = HookError(state.event, spec.name, f"condition raised {exc!r}")
            return None
        state.index += 1
    return None


def advance(state: ChainState, spec: HookSpec, result: Any) -> bool:
    """Record ``spec``'s result; return True when the chain should go on.

    ``None`` counts as the event's neutral result. A result the event does not
    allow is a :class:`HookError`. On a stopping result, ``state.outcome`` is
    it and ``state.stopped_at`` the hook's index (resume continues after it).
    """
    state.ran.append(spec.name)
    if state.event is HookEvent.ON_ABORT:
        state.index += 1
        return True
    if result is None:
        result = NEUTRAL[state.event]
    if not isinstance(result, ALLOWED[state.event]):
        allowed = ", ".join(t.__name__ for t in ALLOWED[state.event])
        state.error = HookError(
            state.event, spec.name, f"returned {result!r}; {state.event.value} allows {allowed}"
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
