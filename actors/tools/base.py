"""Tool definitions, the per-session registry, and one call's invocation.

A tool is a name, a description, a pydantic arguments model (whose JSON schema
is what the model sees) and an ``execute(args, ctx)`` that runs on a pool
worker thread -- or, when ``execute`` is ``async def``, as a task on the tool
layer's event loop (:mod:`actors.tools.aio`). :func:`invoke_tool` and
:func:`ainvoke_tool` turn *any* outcome -- unknown tool, invalid arguments, a
raised exception, cancellation, a sync tool that returned a coroutine -- into
exactly one :class:`Invocation`; nothing escapes to the pool.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from fore.actors.tools.cancel import CancelToken, ToolCancelled
from fore.actors.tools.paths import FsError
from fore.errors import ToolError
from fore.messages.blobs import Inline, Stored
from fore.messages.conversation import ToolCall
from fore.messages.tools import Outcome, ToolDefinition

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["ToolError"]

if TYPE_CHECKING:
    from fore.actors.tools.fs import FsView

ArgsT = TypeVar("ArgsT", bound=BaseModel)

PENDING_STORE_UNAVAILABLE = "Pending action store unavailable for custom tools in this runtime."


class ToolArgs(BaseModel):
    """Base for tool argument models: unknown arguments are an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class ToolServices:
    """Runtime services a tool may use, bound to the calling session.

    ``pending_actions`` is the session's pending-action store (for previews
    resolved by the ``resolve`` tool); ``blobs`` reads the blob store;
    ``extra`` carries application-specific services.
    """

    pending_actions: Any = None
    blobs: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class ToolContext:
    """What a running tool may use: its session's view of the world."""

    fs: FsView
    cancel: CancelToken
    deadline: float
    session_id: str
    call_id: str
    tool_name: str = ""
    services: ToolServices = field(default_factory=ToolServices)

    def time_left(self) -> float:
        """Seconds until this call's deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())

    def push_pending_action(
        self,
        label: str,
        apply: Callable[[str, Mapping[str, Any] | None], Any],
        reject: Callable[[str, Mapping[str, Any] | None], Any] | None = None,
        details: Any = None,
        source_tool_name: str = "custom_tool",
    ) -> str:
        """Stage an action the model must ``resolve`` (apply or discard).

        Bound to this call's session; returns the pending action's id.
        """
        store = self.services.pending_actions
        if store is None:
            raise ToolError(PENDING_STORE_UNAVAILABLE)
        action_id: str = store.push(
            label=label,
            apply=apply,
            reject=reject,
            details=details,
            source_tool_name=source_tool_name,
        )
        return action_id


ToolReturn = Any
"""What ``execute`` may return: a str, a JSON value, or a ``messages.blobs`` ToolOutput."""


class Tool(ABC, Generic[ArgsT]):
    """A tool the model can call.

    Subclasses set ``name``, ``description`` and ``args_model`` and implement
    :meth:`execute`. ``exclusive`` tools run alone within their batch;
    :meth:`write_paths` names the paths a call writes, so the pool runs calls
    that write the same path in call order. A tool that may write anything
    (``shell``) sets ``writes_all``: its calls are ordered against every call
    of the batch that writes, in call order, while reads still run beside it.
    """

    name: str
    description: str
    args_model: type[ArgsT]
    exclusive: bool = False
    writes_all: bool = False
    read_only: bool = False
    """The tool changes nothing: a speculation may run it before the user approves.

    Declared by whoever adds the tool (``@tool(read_only=True)``, a trusted
    MCP server's annotations); the speculation gate takes it at its word for
    tools it does not know by name, while the speculation's overlay holds no
    writes (the tool may read the real tree, which no longer matches what the
    speculation sees once it has written)."""
    timeout: float | None = None
    """Seconds one call may run; None: the session's ``call_timeout``."""

    @abstractmethod
    def execute(self, args: ArgsT, ctx: ToolContext) -> ToolReturn:
        """Run the call; raise :class:`ToolError` for an expected failure."""

    def write_paths(self, args: ArgsT) -> frozenset[str]:
        """Paths this call writes, as the model spelled them.

        The pool asks before the call runs (on a runner thread) and resolves
        each path through the session's view, so two spellings of one file are
        ordered; an exception here fails this call only.
        """
        return frozenset()

    def definition(self) -> ToolDefinition:
        return _definition(self.name, self.description, self.args_model)


def is_async_tool(tool: Tool[Any]) -> bool:
    """Whether ``tool.execute`` is a coroutine function (the pool runs it on the event loop)."""
    return inspect.iscoroutinefunction(tool.execute)


def call_timeout(tool: Tool[Any] | None, session_timeout: float) -> float:
    """The deadline of one call: the tool's own ``timeout`` when it declares one."""
    own = getattr(tool, "timeout", None) if tool is not None else None
    if isinstance(own, int | float) and not isinstance(own, bool) and 0 < own < float("inf"):
        return float(own)
    return session_timeout


class FunctionTool(Tool[ArgsT]):
    """A tool made from a function ``fn(args, ctx)`` (custom and test tools)."""

    def __init__(
        self,
        name: str,
        description: str,
        args_model: type[ArgsT],
        fn: Callable[[ArgsT, ToolContext], ToolReturn],
        *,
        exclusive: bool = False,
        writes: Callable[[ArgsT], Iterable[str]] | None = None,
        writes_all: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.args_model = args_model
        self.exclusive = exclusive
        self.writes_all = writes_all
        self._fn = fn
        self._writes = writes

    def execute(self, args: ArgsT, ctx: ToolContext) -> ToolReturn:
        return self._fn(args, ctx)

    def write_paths(self, args: ArgsT) -> frozenset[str]:
        return frozenset(self._writes(args)) if self._writes is not None else frozenset()


class ToolRegistry:
    """An immutable set of tools with unique names (one per session).

    Adding a tool returns a new registry, so a batch in flight keeps the
    registry it started with and sessions never share mutable state.
    """

    __slots__ = ("_definitions", "_tools")

    def __init__(self, tools: Iterable[Tool[Any]] = ()) -> None:
        table: dict[str, Tool[Any]] = {}
        for tool in tools:
            if tool.name in table:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            table[tool.name] = tool
        self._tools = table
        # Building a JSON schema costs ~1 ms per tool; a registry never changes,
        # so each tool's definition is built once, not on every LLM request.
        self._definitions: dict[str, ToolDefinition] | None = None

    def with_tool(self, tool: Tool[Any]) -> ToolRegistry:
        return ToolRegistry([*self._tools.values(), tool])

    def without(self, name: str) -> ToolRegistry:
        return ToolRegistry(t for t in self._tools.values() if t.name != name)

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool[Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def definitions(self, *, exclude: Iterable[str] = ()) -> tuple[ToolDefinition, ...]:
        if self._definitions is None:
            self._definitions = {name: t.definition() for name, t in self._tools.items()}
        skip = set(exclude)
        return tuple(d for name, d in self._definitions.items() if name not in skip)


@functools.lru_cache(maxsize=1024)
def _definition(name: str, description: str, args_model: type[BaseModel]) -> ToolDefinition:
    """A tool's wire definition, built once per process.

    Generating a JSON schema costs about a millisecond; every session and
    every speculation builds its own registry, so without this cache a load
    of sessions spends a noticeable share of its CPU regenerating schemas.
    The definition is a frozen model, safe to share.
    """
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    return ToolDefinition(name=name, description=description, parameters=schema)


@dataclass(frozen=True, slots=True)
class Invocation:
    """The outcome of one call, ready to become a ``ToolResult``."""

    outcome: Outcome
    output: str
    is_error: bool
    stored_summary: str | None = None
    explicit: Inline | Stored | None = None
    """The ToolOutput the tool returned itself (see ``ToolCallFinished.explicit``)."""


def parse_args(tool: Tool[Any], call: ToolCall) -> BaseModel | Invocation:
    """Validate a call's arguments; an :class:`Invocation` error names each bad field."""
    try:
        parsed: BaseModel = tool.args_model.model_validate(call.arguments)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
            problems.append(f"{where}: {error['msg']}")
        return Invocation(
            "invalid",
            f"Invalid arguments for {tool.name}: " + "; ".join(problems),
            True,
        )
    return parsed


def unknown_tool(registry: ToolRegistry, call: ToolCall) -> Invocation:
    """The result of calling a tool the session does not have (naming those it has)."""
    available = ", ".join(sorted(registry.names())) or "none"
    return Invocation(
        "unknown_tool", f"Unknown tool {call.name!r}. Available tools: {available}.", True
    )


def invoke_tool(registry: ToolRegistry, call: ToolCall, ctx: ToolContext) -> Invocation:
    """Run one call to completion and describe how it ended. Never raises.

    A tool whose ``execute`` hands back an awaitable instead of a result is an
    error naming the cause (the coroutine is closed, never awaited): an
    ``async def`` tool runs through :func:`ainvoke_tool` on the event loop.
    """
    tool = registry.get(call.name)
    if tool is None:
        return unknown_tool(registry, call)
    args = parse_args(tool, call)
    if isinstance(args, Invocation):
        return args
    try:
        ctx.cancel.raise_if_cancelled()
        value = tool.execute(args, ctx)
        if _awaitable(value):
            return awaitable_returned(tool, value)
    except Exception as exc:
        return failure(tool, exc)
    return render_value(value)


async def ainvoke_tool(registry: ToolRegistry, call: ToolCall, ctx: ToolContext) -> Invocation:
    """:func:`invoke_tool` for the event loop: awaits an ``async def`` tool. Never raises.

    Cancelling the task running it (the pool's timeout or cancel) cancels the
    tool's coroutine; the call then ends ``cancelled``.
    """
    tool = registry.get(call.name)
    if tool is None:
        return unknown_tool(registry, call)
    args = parse_args(tool, call)
    if isinstance(args, Invocation):
        return args
    try:
        ctx.cancel.raise_if_cancelled()
        value = tool.execute(args, ctx)
        if _awaitable(value):
            if not is_async_tool(tool):
                return awaitable_returned(tool, value)
            value = await value
    except asyncio.CancelledError:
        return Invocation("cancelled", f"Cancelled: {ctx.cancel.reason or 'cancelled'}", True)
    except Exception as exc:
        return failure(tool, exc)
    return render_value(value)


_PLAIN = frozenset({str, dict, list, tuple, int, float, bool, type(None), Inline, Stored})
"""Result types that are never awaitable: checked first, so the test costs nothing for them."""


def _awaitable(value: Any) -> bool:
    """``inspect.isawaitable``, minus its ABC check's cost (~2 µs) on every ordinary result."""
    kind = type(value)
    if kind in _PLAIN:
        return False
    return inspect.iscoroutine(value) or hasattr(kind, "__await__")


def failure(tool: Tool[Any], exc: Exception) -> Invocation:
    """The result of a tool that raised."""
    if isinstance(exc, ToolCancelled):
        return Invocation("cancelled", f"Cancelled: {exc}", True)
    if isinstance(exc, ToolError | FsError):
        return Invocation("error", str(exc) or type(exc).__name__, True)
    return Invocation("error", f"{tool.name} failed: {type(exc).__name__}: {exc}", True)


def awaitable_returned(tool: Tool[Any], value: Any) -> Invocation:
    """A sync ``execute`` returned an awaitable: an error, and the coroutine is closed.

    Closing it means no "coroutine was never awaited" warning, and the
    model never sees the text of a coroutine object as a result.
    """
    close = getattr(value, "close", None)
    if inspect.iscoroutine(value) and callable(close):
        close()
    kind = type(value).__name__
    return Invocation(
        "error",
        f"{tool.name} failed: its execute() returned an awaitable ({kind}) instead of a "
        "result; declare the tool's function or execute() with 'async def' so the tool "
        "pool awaits it on its event loop",
        True,
    )


def render_value(value: ToolReturn) -> Invocation:
    """Turn what a tool returned into result text, keeping an explicit ToolOutput.

    An ``Inline`` or ``Stored`` the tool built itself says how the output must
    enter history (inline whatever its size; stored with this summary and this
    -- possibly structured -- content), which the text alone cannot carry: it
    travels on as ``explicit``.
    """
    if isinstance(value, str):
        return Invocation("ok", value, False)
    if isinstance(value, Inline):
        return Invocation("ok", value.text, False, explicit=value)
    if isinstance(value, Stored):
        text = _content_text(value)
        return Invocation("ok", text, False, stored_summary=value.summary, explicit=value)
    kind = getattr(value, "kind", None)
    if kind == "inline" and isinstance(getattr(value, "text", None), str):
        return Invocation("ok", value.text, False)
    if kind == "stored" and hasattr(value, "content"):
        content = value.content
        if getattr(content, "kind", None) == "text":
            text = content.text
        else:
            text = json.dumps(content.value, ensure_ascii=False)
        return Invocation("ok", text, False, stored_summary=value.summary)
    if isinstance(value, BaseModel):
        return Invocation("ok", value.model_dump_json(), False)
    try:
        return Invocation("ok", json.dumps(value, ensure_ascii=False), False)
    except (TypeError, ValueError):
        return Invocation("ok", str(value), False)


def _content_text(value: Stored) -> str:
    content = value.content
    if content.kind == "text":
        return content.text
    return json.dumps(content.value, ensure_ascii=False)
