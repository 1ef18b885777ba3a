"""The hooks of one session: :class:`Hooks` (register, remove, snapshot a chain) and its views.

Thread-safe, because the user registers hooks from any thread while the
worker snapshots a chain per event on its dispatcher. Re-exported by
:mod:`actors.worker.hooks`.
"""

from __future__ import annotations

import fnmatch
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fore.actors.worker.hook_contexts import (
    AbortContext,
    LlmRequestContext,
    PostToolCallContext,
    PromptContext,
    ToolCallContext,
    TurnEndContext,
)
from fore.actors.worker.hook_results import (
    HookEvent,
    OnPromptSubmitResult,
    OnTurnEndResult,
    PostToolCallResult,
    PreLlmRequestResult,
    PreToolCallResult,
)

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
