"""Which wire protocol an endpoint speaks: ``--provider anthropic|openai`` (pure).

``fore run`` / ``chat`` / ``bench`` take the provider from the flag, or infer it
when that is unambiguous -- a base URL on ``anthropic.com``, or an
``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_BASE_URL``) with no OpenAI configuration
-- and otherwise speak OpenAI's Chat Completions, as before there was a choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args
from urllib.parse import urlsplit

Provider = Literal["openai", "anthropic"]
PROVIDERS: tuple[str, ...] = get_args(Provider)

_OPENAI_ENV = ("FORE_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY")


def is_anthropic_url(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return host == "anthropic.com" or host.endswith(".anthropic.com")


def infer_provider(explicit: str | None, base_url: str | None, env: Mapping[str, str]) -> Provider:
    """The provider to speak: ``explicit`` when given, else inferred (module docs)."""
    if explicit is not None:
        if explicit not in PROVIDERS:
            raise ValueError(f"provider must be one of {', '.join(PROVIDERS)}, got {explicit!r}")
        return "anthropic" if explicit == "anthropic" else "openai"
    if base_url:
        return "anthropic" if is_anthropic_url(base_url) else "openai"
    openai_configured = any(env.get(name) for name in _OPENAI_ENV)
    if not openai_configured and (env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_BASE_URL")):
        return "anthropic"
    return "openai"


__all__ = ["PROVIDERS", "Provider", "infer_provider", "is_anthropic_url"]
