"""The built-in coding tools."""

from __future__ import annotations

from typing import Any

from fore.actors.tools.base import Tool, ToolRegistry
from fore.actors.tools.builtin.files import Edit, ReadFile, WriteFile
from fore.actors.tools.builtin.search import Glob, Grep, ListDirectory
from fore.actors.tools.builtin.shell import Shell

__all__ = [
    "Edit",
    "Glob",
    "Grep",
    "ListDirectory",
    "ReadFile",
    "Shell",
    "WriteFile",
    "builtin_tools",
    "default_registry",
]


def builtin_tools() -> list[Tool[Any]]:
    """Fresh instances of every built-in tool."""
    return [ReadFile(), WriteFile(), Edit(), ListDirectory(), Glob(), Grep(), Shell()]


def default_registry() -> ToolRegistry:
    """A registry with the built-in tools."""
    return ToolRegistry(builtin_tools())
