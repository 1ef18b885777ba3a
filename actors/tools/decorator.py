"""``@tool``: a plain (or ``async``) typed function becomes a :class:`~actors.tools.base.Tool`.

::

    @tool
    def get_weather(city: str, days: int = 1) -> str:
        \"\"\"Forecast for a city.

        Args:
            city: The city's name, e.g. "Paris".
            days: How many days ahead.
        \"\"\"

    @tool(name="search", read_only=True, timeout=10)
    async def search_db(query: str, ctx: ToolContext) -> list[Row]: ...

The arguments' JSON schema is pydantic's, built from the type hints (any type
pydantic can validate and describe: models, ``Literal``, ``Annotated[int,
Field(ge=0)]``, ...); the description and the per-parameter descriptions come
from the docstring (Google, NumPy or Sphinx style, parsed by
``docstring_parser``). A parameter annotated :class:`ToolContext` receives the
call's context and is not part of the schema.

What ``@tool`` returns *is* a ``Tool`` (so ``open_session(tools=[get_weather])``
needs nothing else) and is still callable as the function
(``get_weather("Paris")``): a test of the function's logic needs no runtime,
and the decorator does not change what the name means in the user's own code.

Mistakes surface at decoration, with the parameter named: a missing or
unsupported annotation, ``*args`` / ``**kwargs``, a name a provider would
refuse. A call with invalid arguments is an ``invalid`` result the model sees
(:func:`~actors.tools.base.parse_args` renders pydantic's errors compactly).
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from fore.actors.tools.base import Tool, ToolContext, ToolReturn
from fore.errors import ToolDefinitionError
from fore.messages.blobs import Inline, Stored

F = TypeVar("F", bound=Callable[..., Any])

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What providers accept as a tool name (OpenAI's rule, the strictest common one)."""


class _Args(BaseModel):
    """Base of the generated argument models: unknown arguments are an error."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False)


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of the function: its argument field (None: it takes the context)."""

    name: str
    field: str | None
    positional_only: bool


class DecoratedTool(Tool[BaseModel]):
    """A tool made by :func:`tool` from a function (see module docs).

    Calling it calls the function. ``execute`` maps the validated arguments
    back to the function's parameters (and the context to the parameter
    annotated ``ToolContext``).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        description: str,
        args_model: type[BaseModel],
        params: tuple[Param, ...],
        read_only: bool,
        timeout: float | None,
        exclusive: bool,
        writes: Callable[..., Iterable[str]] | None,
    ) -> None:
        self.name = name
        self.description = description
        self.args_model = args_model
        self.read_only = read_only
        self.timeout = timeout
        self.exclusive = exclusive
        self.fn = fn
        self._params = params
        self._writes = writes
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name!r} from {getattr(self.fn, '__qualname__', self.fn)!r}>"

    def _arguments(
        self, args: BaseModel, ctx: ToolContext | None, *, with_context: bool = True
    ) -> tuple[list[Any], dict[str, Any]]:
        """The function's arguments for a validated call, in signature order."""
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for param in self._params:
            if param.field is None:
                if not with_context:
                    continue
                value: Any = ctx
            else:
                value = getattr(args, param.field)
            if param.positional_only:
                positional.append(value)
            else:
                keywords[param.name] = value
        return positional, keywords

    def write_paths(self, args: BaseModel) -> frozenset[str]:
        if self._writes is None:
            return frozenset()
        positional, keywords = self._arguments(args, None, with_context=False)
        return frozenset(self._writes(*positional, **keywords))

    def execute(self, args: BaseModel, ctx: ToolContext) -> ToolReturn:
        positional, keywords = self._arguments(args, ctx)
        return _result(self.fn(*positional, **keywords))


class AsyncDecoratedTool(DecoratedTool):
    """A tool made from an ``async def`` function: the pool awaits it on its event loop."""

    async def execute(self, args: BaseModel, ctx: ToolContext) -> ToolReturn:
        positional, keywords = self._arguments(args, ctx)
        awaitable: Awaitable[Any] = self.fn(*positional, **keywords)
        return _result(await awaitable)


def _result(value: Any) -> ToolReturn:
    """What the function returned, as something :func:`~actors.tools.base.render_value` shows.

    Strings, models and ToolOutputs pass through; anything else pydantic can
    serialise (dataclasses, datetimes, sets, ...) becomes its JSON value.
    """
    kind = type(value)
    if kind is str or value is None or isinstance(value, BaseModel | Inline | Stored):
        return value
    if inspect.iscoroutine(value) or hasattr(kind, "__await__"):
        return value  # invoke_tool reports it (a sync function returned a coroutine)
    try:
        return to_jsonable_python(value)
    except Exception:
        return value


@overload
def tool(fn: F, /) -> DecoratedTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    exclusive: bool = False,
    writes: Callable[..., Iterable[str]] | None = None,
) -> Callable[[F], DecoratedTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    exclusive: bool = False,
    writes: Callable[..., Iterable[str]] | None = None,
) -> DecoratedTool | Callable[[F], DecoratedTool]:
    """Make a tool from a function; ``@tool`` and ``@tool(...)`` both work.

    ``name`` defaults to the function's name, ``description`` to its
    docstring's text. ``read_only=True`` declares that the tool changes
    nothing (a speculation may run it); ``timeout`` (seconds) replaces the
    session's ``call_timeout`` for its calls; ``exclusive`` runs each call
    alone in its batch; ``writes`` receives the call's arguments (as the
    function does, without the context) and returns the workspace paths the
    call writes, so calls writing the same file run in order.
    """

    def decorate(function: F) -> DecoratedTool:
        return make_tool(
            function,
            name=name,
            description=description,
            read_only=read_only,
            timeout=timeout,
            exclusive=exclusive,
            writes=writes,
        )

    if fn is None:
        return decorate
    if not callable(fn):
        raise ToolDefinitionError(f"@tool decorates a function, not {fn!r}")
    return decorate(fn)


def make_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    exclusive: bool = False,
    writes: Callable[..., Iterable[str]] | None = None,
) -> DecoratedTool:
    """The tool :func:`tool` makes (callable directly, e.g. on someone else's function)."""
    if isinstance(fn, DecoratedTool):
        fn = fn.fn
    if not callable(fn):
        raise ToolDefinitionError(f"@tool decorates a function, not {fn!r}")
    label = getattr(fn, "__qualname__", None) or repr(fn)
    tool_name = name if name is not None else getattr(fn, "__name__", "")
    if not isinstance(tool_name, str) or not TOOL_NAME.match(tool_name):
        raise ToolDefinitionError(
            f"@tool: {tool_name!r} (from {label}) is not a valid tool name: use 1 to 64 letters, "
            "digits, '_' or '-' (pass name=...)"
        )
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < 1e9
    ):
        raise ToolDefinitionError(
            f"@tool {tool_name}: timeout must be a positive number of seconds"
        )
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise ToolDefinitionError(
            f"@tool {tool_name} ({label}): a generator cannot be a tool; return the whole result"
        )
    docs = docstring_parser.parse(inspect.getdoc(fn) or "")
    param_docs = {p.arg_name: (p.description or "").strip() for p in docs.params}
    fields, params = _fields(fn, tool_name, label, param_docs)
    model = create_model(f"{tool_name}_arguments", __base__=_Args, **fields)
    try:
        model.model_json_schema()
    except Exception as exc:  # pragma: no cover - each parameter was checked on its own
        raise ToolDefinitionError(f"@tool {tool_name} ({label}): {_first_line(exc)}") from None
    text = description if description is not None else _description(docs)
    cls = AsyncDecoratedTool if inspect.iscoroutinefunction(fn) else DecoratedTool
    return cls(
        fn,
        name=tool_name,
        description=text,
        args_model=model,
        params=params,
        read_only=bool(read_only),
        timeout=None if timeout is None else float(timeout),
        exclusive=bool(exclusive),
        writes=writes,
    )


def _fields(
    fn: Callable[..., Any], tool_name: str, label: str, param_docs: Mapping[str, str]
) -> tuple[dict[str, Any], tuple[Param, ...]]:
    """The argument model's fields and the function's parameters they map to."""
    where = f"@tool {tool_name}" + ("" if label == tool_name else f" ({label})")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"{where}: its signature cannot be read ({exc})") from None
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: its type hints cannot be resolved ({type(exc).__name__}: {exc}); "
            "import every type the annotations name at module level"
        ) from None
    fields: dict[str, Any] = {}
    params: list[Param] = []
    for index, (param_name, param) in enumerate(signature.parameters.items()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            star = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise ToolDefinitionError(
                f"{where}: parameter {star}{param_name} is not supported; a tool's arguments "
                "are named, so list each one"
            )
        if param_name not in hints:
            raise ToolDefinitionError(
                f"{where}: parameter {param_name!r} has no type annotation; the model needs "
                f"one to know what to pass (e.g. '{param_name}: str')"
            )
        annotation = hints[param_name]
        positional_only = param.kind is param.POSITIONAL_ONLY
        if _is_context(annotation):
            if any(p.field is None for p in params):
                raise ToolDefinitionError(f"{where}: only one parameter may take the ToolContext")
            params.append(Param(param_name, None, positional_only))
            continue
        _check_annotation(where, param_name, annotation)
        # Fields get neutral names (the alias is the parameter's): a parameter
        # called "json", "schema" or "_private" would otherwise clash with
        # BaseModel's own attributes or be taken for a private attribute.
        field_name = f"p{index}"
        options: dict[str, Any] = {"alias": param_name}
        doc = param_docs.get(param_name)
        if doc and not _has_description(annotation):
            options["description"] = doc
        info: FieldInfo = Field(
            default=... if param.default is param.empty else param.default, **options
        )
        fields[field_name] = (annotation, info)
        params.append(Param(param_name, field_name, positional_only))
    return fields, tuple(params)


def _is_context(annotation: Any) -> bool:
    base = typing.get_origin(annotation)
    if base is Annotated:
        annotation = typing.get_args(annotation)[0]
    return isinstance(annotation, type) and issubclass(annotation, ToolContext)


def _has_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not Annotated:
        return False
    return any(
        isinstance(extra, FieldInfo) and extra.description for extra in typing.get_args(annotation)
    )


def _check_annotation(where: str, param_name: str, annotation: Any) -> None:
    """Refuse a type pydantic cannot validate *and* describe as a JSON schema (names it)."""
    shown = getattr(annotation, "__name__", None) or repr(annotation)
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        adapter.json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: parameter {param_name!r} has an unsupported type annotation {shown} "
            f"(the model's arguments arrive as JSON; use a type pydantic can validate from "
            f"JSON and describe as a JSON schema): {_first_line(exc)}"
        ) from None


def _description(docs: docstring_parser.Docstring) -> str:
    parts = [part.strip() for part in (docs.short_description, docs.long_description) if part]
    return "\n\n".join(parts)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def as_tool(item: Tool[Any] | Callable[..., Any]) -> Tool[Any]:
    """A session's tool from what ``open_session(tools=...)`` received.

    A :class:`Tool` is used as it is; a plain function is decorated as by
    ``@tool``; anything else is a :class:`TypeError` naming it.
    """
    if isinstance(item, Tool):
        return item
    if isinstance(item, type):
        raise TypeError(f"not a tool: the class {item.__qualname__} (pass an instance)")
    if callable(item):
        return make_tool(item)
    raise TypeError(f"not a tool: {item!r} (pass Tool instances or functions)")


__all__ = [
    "AsyncDecoratedTool",
    "DecoratedTool",
    "Param",
    "ToolDefinitionError",
    "as_tool",
    "make_tool",
    "tool",
]
