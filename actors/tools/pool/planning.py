"""Planning a batch: validate each call and work out what it writes.

Runs on a runner thread, never on the pool's: it runs tool code
(``write_paths``) and filesystem syscalls (each path is resolved through the
session's view to its canonical workspace path, so ``a.py``, ``./a.py`` and
a symlink to it are one file). What it returns, one :data:`Plan` per call,
is what the pool schedules by (:mod:`actors.tools.scheduling`).
"""

from __future__ import annotations

from typing import Any

from fore.actors.tools.base import Invocation, ToolRegistry, parse_args, unknown_tool
from fore.actors.tools.paths import write_key
from fore.actors.tools.scheduling import CallShape
from fore.messages.conversation import ToolCall

Plan = Invocation | CallShape
"""What planning says about one call: its early result, or how it must be scheduled."""


def plan_calls(registry: ToolRegistry, calls: tuple[ToolCall, ...], fs: Any) -> list[Plan]:
    """Validate each call and work out what it writes (runs on a runner thread).

    Never raises: a tool whose ``write_paths`` fails gets an error result
    naming the exception, and only that call does.
    """
    plans: list[Plan] = []
    for call in calls:
        tool = registry.get(call.name)
        if tool is None:
            plans.append(unknown_tool(registry, call))
            continue
        args = parse_args(tool, call)
        if isinstance(args, Invocation):
            plans.append(args)
            continue
        try:
            writes = frozenset(ordering_key(fs, path) for path in tool.write_paths(args))
            exclusive = bool(getattr(tool, "exclusive", False))
            shape = CallShape(writes, exclusive, bool(getattr(tool, "writes_all", False)))
        except Exception as exc:
            plans.append(
                Invocation(
                    "error",
                    f"{tool.name} was not run: working out which paths it writes failed "
                    f"({type(exc).__name__}: {exc})",
                    True,
                )
            )
            continue
        plans.append(shape)
    return plans


def ordering_key(fs: Any, path: str) -> str:
    """The key under which writes to ``path`` are ordered: its canonical workspace path.

    Resolving through the view (symlinks inside the workspace followed) makes
    two spellings of one file -- ``a.py``, ``./a.py``, ``<root>/a.py``, a
    symlink to it, a path through a symlinked directory -- one key. A path the
    view refuses keys lexically; its call will fail on its own.
    """
    resolve = getattr(fs, "resolve", None)
    if callable(resolve):
        try:
            return str(resolve(path))
        except Exception:  # any refusal: fall back to the lexical key
            pass
    root = getattr(fs, "root", None)
    return str(write_key(path, None if root is None else str(root)))
