"""The mock server's Anthropic Messages endpoint, by its old name.

The endpoint is part of the mock server and lives in its package:
:mod:`fore.actors.llm.mock_server.anthropic` (the endpoint, its wire protocol and
strictness), with its request checks in ``anthropic_strict`` and its prompt-cache
accounting in ``anthropic_cache``. This module keeps
``fore.actors.llm.mock_anthropic`` importable for code written against it.
"""

from __future__ import annotations

from fore.actors.llm.mock_server.anthropic import AnthropicMessages
from fore.actors.llm.mock_server.anthropic_cache import (
    MIN_CACHE_TOKENS,
    CacheUsage,
    PromptCache,
    prompt_blocks,
)
from fore.actors.llm.mock_server.anthropic_strict import validate_request

__all__ = [
    "MIN_CACHE_TOKENS",
    "AnthropicMessages",
    "CacheUsage",
    "PromptCache",
    "prompt_blocks",
    "validate_request",
]
