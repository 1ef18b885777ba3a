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

Hooks are user code: the worker runs each one on the blocking lane with a
timeout, never on a dispatcher thread. A hook that raises, times out or
returns a result its event does not allow is a :class:`HookError` naming the
event and the hook (its :meth:`HookError.failure` is the typed
:class:`~messages.session.HookFailure` a ``TurnResult`` carries).

Inputs are mutable only where the seed says so: a pre_tool_call hook may
rewrite ``arguments`` but not the call's id or tool name (a renamed id would
leave the model's call without a result and a result without a call), and a
post_tool_call hook may rewrite ``result`` only. The identity fields raise
``AttributeError`` when assigned.

``on_abort`` runs exactly once for every run that started and ended early
(see :data:`~messages.session.RunStatus`); a submit cancelled at
``on_prompt_submit`` never started, so it gets none.

:func:`advance` is the chain's pure step function; the worker drives it.
"""

from __future__ import annotations

import fnmatch
import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from messages.conversation import Item, Segment, ToolCall
from messages.llm import ToolChoice
from messages.session import HookFailure, HookFailureKind
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


class HookError(Exception):
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


class ConditionError(Exception):
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
        """Pattern and ``when`` condition; the condition is user code (blocking lane only)."""
        return self.matches(ctx) and (self.when is None or bool(self.when(ctx)))


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


class _NotApplicable:
    """What :func:`run_hook` answers when the hook's condition says it does not apply."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_APPLICABLE"


NOT_APPLICABLE: Any = _NotApplicable()


def run_hook(spec: HookSpec, ctx: Any) -> Any:
    """Call one hook on the blocking lane: its ``when`` condition first, then the hook.

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


# -- chains without an actor -------------------------------------------------------------


class DetachedChain:
    """Runs one event's remaining hooks when no actor is left to drive them.

    A worker that is stopping (its session closed) or has crashed still owes
    its run's ``on_abort`` hooks, but it will receive no more messages. This
    runs them the same way the worker would -- in order, each on the blocking
    lane with its own deadline on the runtime's timer -- chaining from one
    hook's completion to the next; nothing waits on any thread. Failures and
    timeouts are logged; results are ignored (``on_abort`` has none).
    """

    def __init__(
        self,
        event: HookEvent,
        specs: Sequence[HookSpec],
        ctx: Any,
        *,
        lane: Any,
        timer: Any,
        default_timeout: float,
        log: Any,
    ) -> None:
        self.event = event
        self.specs = tuple(specs)
        self.ctx = ctx
        self.lane = lane
        self.timer = timer
        self.default_timeout = default_timeout
        self.log = log
        self.ran: list[str] = []
        self._index = 0
        self._token: object | None = None
        self._timer_handle: Any = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._next()

    def _next(self) -> None:
        with self._lock:
            while self._index < len(self.specs) and not self.specs[self._index].matches(self.ctx):
                self._index += 1
            if self._index >= len(self.specs):
                return
            spec = self.specs[self._index]
            token = self._token = object()
        timeout = spec.timeout or self.default_timeout
        try:
            handle = self.timer.call_later(timeout, self._timed_out, token, spec, timeout)
            with self._lock:
                if self._token is token:  # else it timed out already
                    self._timer_handle = handle
            future = self.lane.submit(run_hook, spec, self.ctx)
        except RuntimeError as exc:  # the runtime is shutting down: nothing can run them
            self.log.warning(
                "detached_hooks_not_run", event=self.event.value, hook=spec.name, error=repr(exc)
            )
            return
        future.add_done_callback(lambda f: self._answered(token, spec, f))

    def _settle(self, token: object) -> bool:
        with self._lock:
            if token is not self._token:
                return False
            self._token = None
            self._index += 1
            handle, self._timer_handle = self._timer_handle, None
        if handle is not None:
            handle.cancel()
        return True

    def _answered(self, token: object, spec: HookSpec, future: Future[Any]) -> None:
        if not self._settle(token):
            return
        error: BaseException | None
        if future.cancelled():
            error = RuntimeError("the blocking lane dropped it")
        else:
            error = future.exception()
        if error is not None:
            failure = raised_error(self.event, spec.name, error)
            self.log.warning("detached_hook_failed", error=str(failure))
        elif future.result() is not NOT_APPLICABLE:
            self.ran.append(spec.name)
        self._next()

    def _timed_out(self, token: object, spec: HookSpec, timeout: float) -> None:
        if not self._settle(token):
            return
        failure = HookTimeout(self.event, spec.name, f"did not answer within {timeout:g}s")
        self.log.warning("detached_hook_failed", error=str(failure))
        self._next()
