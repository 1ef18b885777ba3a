"""The mock server's Anthropic Messages endpoint, by its old name.

The endpoint is part of the mock server and lives in its package,
:mod:`fore.actors.llm.mock_server.anthropic` (wire protocol, strictness and
prompt-cache accounting are documented there). This module keeps
``fore.actors.llm.mock_anthropic`` importable for code written against it.
"""

from __future__ import annotations

from fore.actors.llm.mock_server.anthropic import (
    MIN_CACHE_TOKENS,
    AnthropicMessages,
    CacheUsage,
    PromptCache,
    prompt_blocks,
    validate_request,
)

__all__ = [
    "MIN_CACHE_TOKENS",
    "AnthropicMessages",
    "CacheUsage",
    "PromptCache",
    "prompt_blocks",
    "validate_request",
]
