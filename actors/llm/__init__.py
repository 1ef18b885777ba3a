"""The LLM layer: gateway actor, event loop, providers, scripted models, mock server."""

from actors.llm.body import BodyLimits
from actors.llm.errors import LlmException, llm_error
from actors.llm.gateway import LlmGateway
from actors.llm.loop import LlmLoop, RetryBudget, retry_delay
from actors.llm.models import (
    ChatModel,
    FunctionModel,
    OpenAICompatible,
    RetryPolicy,
    ScriptedModel,
    StreamResult,
    Timeouts,
)
from actors.llm.script import ScriptError, ScriptFile, ScriptReply, ScriptToolCall, ScriptWhen
from actors.llm.wire import StreamAssembler

__all__ = [
    "BodyLimits",
    "ChatModel",
    "FunctionModel",
    "LlmException",
    "LlmGateway",
    "LlmLoop",
    "OpenAICompatible",
    "RetryBudget",
    "RetryPolicy",
    "ScriptError",
    "ScriptFile",
    "ScriptReply",
    "ScriptToolCall",
    "ScriptWhen",
    "ScriptedModel",
    "StreamAssembler",
    "StreamResult",
    "Timeouts",
    "llm_error",
    "retry_delay",
]
