"""Which built-in tools a session gets (``open_session(builtin=...)``), as a pure rule."""

from __future__ import annotations

from collections.abc import Iterable

BUILTIN_TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit",
    "multi_edit",
    "list_directory",
    "glob",
    "grep",
    "shell",
)
"""The built-in tools ``builtin=`` chooses among; each needs a workspace."""


def builtin_argument(builtin: bool | Iterable[str] | None) -> bool | tuple[str, ...] | None:
    """``builtin=`` as given, its names frozen into a tuple (kept, and stored, as such).

    One string is refused here, before anything iterates it into letters:
    ``builtin="grep"`` is a ``TypeError`` that shows the tuple meant.
    """
    if builtin is None or isinstance(builtin, bool):
        return builtin
    if isinstance(builtin, str):
        raise TypeError(f"builtin takes tool names, e.g. builtin=({builtin!r},), not one string")
    return tuple(builtin)


def choose_builtins(builtin: bool | Iterable[str] | None, *, has_workspace: bool) -> frozenset[str]:
    """The names of the built-in tools a session gets.

    ``None`` (the default): all of them with a workspace, none without.
    ``True``: all (a workspace is required). ``False``: none -- except
    ``multi_edit``, which ``builtin=False`` has always kept (the ``resolve``
    flow's preview editor). Names: exactly those; an unknown name is a
    ``ValueError`` listing the built-ins.
    """
    if builtin is None:
        return frozenset(BUILTIN_TOOL_NAMES) if has_workspace else frozenset()
    if builtin is True:
        if not has_workspace:
            raise ValueError(
                "the built-in tools need a workspace (pass workspace=..., or builtin=False)"
            )
        return frozenset(BUILTIN_TOOL_NAMES)
    if builtin is False:
        return frozenset({"multi_edit"}) if has_workspace else frozenset()
    if isinstance(builtin, str):
        raise TypeError(f"builtin takes tool names, e.g. builtin=({builtin!r},), not one string")
    names = frozenset(builtin)
    unknown = sorted(names - set(BUILTIN_TOOL_NAMES))
    if unknown:
        raise ValueError(
            f"unknown built-in tool(s) {', '.join(map(repr, unknown))}; "
            f"the built-ins are {', '.join(BUILTIN_TOOL_NAMES)}"
        )
    if names and not has_workspace:
        raise ValueError("the built-in tools need a workspace (pass workspace=...)")
    return names


__all__ = ["BUILTIN_TOOL_NAMES", "choose_builtins"]
