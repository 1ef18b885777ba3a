"""Tools: definitions, filesystem views, the built-in coding tools and the executor pool."""

from fore.actors.tools.base import (
    PENDING_STORE_UNAVAILABLE,
    FunctionTool,
    Invocation,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolServices,
    invoke_tool,
)
from fore.actors.tools.builtin import (
    Edit,
    Glob,
    Grep,
    ListDirectory,
    ReadFile,
    Shell,
    WriteFile,
    builtin_tools,
    default_registry,
)
from fore.actors.tools.cancel import CancelToken, ToolCancelled
from fore.actors.tools.decorator import ToolDefinitionError, tool
from fore.actors.tools.fs import (
    DirEntry,
    FileStat,
    FsError,
    FsView,
    IsADirectory,
    NotADirectory,
    NotFound,
    PathOutOfScope,
    WorkspaceFs,
)
from fore.actors.tools.pool import ToolPool
from fore.actors.tools.runner import RunnerSaturated, ThreadRunner
from fore.actors.tools.text import valid_unicode

__all__ = [
    "PENDING_STORE_UNAVAILABLE",
    "CancelToken",
    "DirEntry",
    "Edit",
    "FileStat",
    "FsError",
    "FsView",
    "FunctionTool",
    "Glob",
    "Grep",
    "Invocation",
    "IsADirectory",
    "ListDirectory",
    "NotADirectory",
    "NotFound",
    "PathOutOfScope",
    "ReadFile",
    "RunnerSaturated",
    "Shell",
    "ThreadRunner",
    "Tool",
    "ToolArgs",
    "ToolCancelled",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolPool",
    "ToolRegistry",
    "ToolServices",
    "WorkspaceFs",
    "WriteFile",
    "builtin_tools",
    "default_registry",
    "invoke_tool",
    "tool",
    "valid_unicode",
]
