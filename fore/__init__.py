"""Fore: a runtime for LLM coding-agent sessions.

The public API, for applications::

    from fore import Runtime, SpeculationConfig, OpenAICompatible

    with Runtime() as rt:
        session = rt.open_session(workspace=".", model=OpenAICompatible(...))
        turn = session.submit("run the tests and fix what fails", timeout=600)

Three tiers, in the manner of pykka and trio: this module is what an
application needs (sessions, models, tools, hooks, the items and events it
reads, the errors); :mod:`fore.testing` has the scripted models, the mock LLM
server and the pytest plugin; :mod:`fore.lowlevel` the actor runtime under it
(``PooledActor``, ``ActorSystem``, supervisors, handles). Everything else --
``fore.actors``, ``fore.messages``, ``fore.supervision``, ``fore.bench`` -- is
internal and may change without notice.

Names are imported on first use (PEP 562), so ``import fore`` and
``fore --help`` stay fast.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from fore.errors import ForeError

if TYPE_CHECKING:
    from fore.actors.core.logs import configure_logging
    from fore.actors.gate.shell import classify_shell_command
    from fore.actors.gate.tool_gate import evaluate_tool_call
    from fore.actors.llm.anthropic import AnthropicModel
    from fore.actors.llm.errors import LlmException
    from fore.actors.llm.models import ChatModel, OpenAICompatible, RetryPolicy, Timeouts
    from fore.actors.output.contract import OutputValidationError
    from fore.actors.speculation.governor import LoadGovernor
    from fore.actors.tools.base import FunctionTool, Tool, ToolContext, ToolError
    from fore.actors.tools.decorator import tool
    from fore.actors.worker.approval import ApprovalDecision, ApprovalRequest
    from fore.actors.worker.hooks import (
        Abort,
        Cancel,
        Continue,
        ContinueWithMessages,
        Finish,
        Hooks,
        Pause,
        Paused,
        Skip,
    )
    from fore.messages.alerts import Alert, AlertLevel
    from fore.messages.conversation import (
        AssistantMessage,
        Item,
        SystemMessage,
        ToolCall,
        ToolResult,
        UserMessage,
    )
    from fore.messages.gate import ApprovalMode
    from fore.messages.llm import Usage
    from fore.messages.session import (
        AlertRaised,
        EventBase,
        ItemAdded,
        LlmRetried,
        RunPaused,
        RunStarted,
        SessionEvent,
        TextDelta,
        ToolFinished,
        ToolStarted,
        TurnFinished,
        TurnResult,
    )
    from fore.messages.speculation import (
        AcceptResult,
        SpeculationConfig,
        SpeculationFinished,
        SpeculationSkipped,
        SpeculationStatusChanged,
        Suggestion,
        SuggestionReady,
    )
    from fore.supervision.runtime import Runtime
    from fore.supervision.session import Session

try:
    __version__ = version("fore-runtime")
except PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

_WHERE: dict[str, str] = {
    # runtime and sessions
    "Runtime": "fore.supervision.runtime",
    "Session": "fore.supervision.session",
    "SpeculationConfig": "fore.messages.speculation",
    "ApprovalMode": "fore.messages.gate",
    "ApprovalRequest": "fore.actors.worker.approval",
    "ApprovalDecision": "fore.actors.worker.approval",
    "LoadGovernor": "fore.actors.speculation.governor",
    # models
    "ChatModel": "fore.actors.llm.models",
    "OpenAICompatible": "fore.actors.llm.models",
    "AnthropicModel": "fore.actors.llm.anthropic",
    "RetryPolicy": "fore.actors.llm.models",
    "Timeouts": "fore.actors.llm.models",
    # tools
    "Tool": "fore.actors.tools.base",
    "FunctionTool": "fore.actors.tools.base",
    "ToolContext": "fore.actors.tools.base",
    "ToolError": "fore.actors.tools.base",
    "tool": "fore.actors.tools.decorator",
    # hooks and their results
    "Hooks": "fore.actors.worker.hooks",
    "Continue": "fore.actors.worker.hooks",
    "Cancel": "fore.actors.worker.hooks",
    "Skip": "fore.actors.worker.hooks",
    "Abort": "fore.actors.worker.hooks",
    "Pause": "fore.actors.worker.hooks",
    "Finish": "fore.actors.worker.hooks",
    "ContinueWithMessages": "fore.actors.worker.hooks",
    "Paused": "fore.actors.worker.hooks",
    # conversation items
    "Item": "fore.messages.conversation",
    "UserMessage": "fore.messages.conversation",
    "AssistantMessage": "fore.messages.conversation",
    "SystemMessage": "fore.messages.conversation",
    "ToolCall": "fore.messages.conversation",
    "ToolResult": "fore.messages.conversation",
    # what a turn, a Tab and the event stream give back
    "TurnResult": "fore.messages.session",
    "AcceptResult": "fore.messages.speculation",
    "Suggestion": "fore.messages.speculation",
    "Usage": "fore.messages.llm",
    "Alert": "fore.messages.alerts",
    "AlertLevel": "fore.messages.alerts",
    "SessionEvent": "fore.messages.session",
    "EventBase": "fore.messages.session",
    "RunStarted": "fore.messages.session",
    "ItemAdded": "fore.messages.session",
    "TextDelta": "fore.messages.session",
    "ToolStarted": "fore.messages.session",
    "ToolFinished": "fore.messages.session",
    "RunPaused": "fore.messages.session",
    "TurnFinished": "fore.messages.session",
    "AlertRaised": "fore.messages.session",
    "LlmRetried": "fore.messages.session",
    "SuggestionReady": "fore.messages.speculation",
    "SpeculationFinished": "fore.messages.speculation",
    "SpeculationStatusChanged": "fore.messages.speculation",
    "SpeculationSkipped": "fore.messages.speculation",
    # errors
    "LlmException": "fore.actors.llm.errors",
    "OutputValidationError": "fore.actors.output.contract",
    # utilities
    "classify_shell_command": "fore.actors.gate.shell",
    "evaluate_tool_call": "fore.actors.gate.tool_gate",
    "configure_logging": "fore.actors.core.logs",
}

__all__ = [
    "Abort",
    "AcceptResult",
    "Alert",
    "AlertLevel",
    "AlertRaised",
    "AnthropicModel",
    "ApprovalDecision",
    "ApprovalMode",
    "ApprovalRequest",
    "AssistantMessage",
    "Cancel",
    "ChatModel",
    "Continue",
    "ContinueWithMessages",
    "EventBase",
    "Finish",
    "ForeError",
    "FunctionTool",
    "Hooks",
    "Item",
    "ItemAdded",
    "LlmException",
    "LlmRetried",
    "LoadGovernor",
    "OpenAICompatible",
    "OutputValidationError",
    "Pause",
    "Paused",
    "RetryPolicy",
    "RunPaused",
    "RunStarted",
    "Runtime",
    "Session",
    "SessionEvent",
    "Skip",
    "SpeculationConfig",
    "SpeculationFinished",
    "SpeculationSkipped",
    "SpeculationStatusChanged",
    "Suggestion",
    "SuggestionReady",
    "SystemMessage",
    "TextDelta",
    "Timeouts",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolFinished",
    "ToolResult",
    "ToolStarted",
    "TurnFinished",
    "TurnResult",
    "Usage",
    "UserMessage",
    "__version__",
    "classify_shell_command",
    "configure_logging",
    "evaluate_tool_call",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
