"""The LLM layer: gateway actor, event loop, providers, scripted models, mock server."""

from fore.actors.llm.anthropic import AnthropicModel
from fore.actors.llm.body import BodyLimits
from fore.actors.llm.chat_model import ChatModel, RetryPolicy, StreamResult, Timeouts
from fore.actors.llm.errors import LlmException, llm_error
from fore.actors.llm.gateway import LlmGateway
from fore.actors.llm.loop import LlmLoop, RetryBudget, retry_delay
from fore.actors.llm.models import OpenAICompatible
from fore.actors.llm.offline import FunctionModel, ScriptedModel
from fore.actors.llm.script import ScriptError, ScriptFile, ScriptReply, ScriptToolCall, ScriptWhen
from fore.actors.llm.wire import StreamAssembler

__all__ = [
    "AnthropicModel",
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
