"""The load benchmark's prompt-cache figures (``fore bench --provider anthropic``).

Every fork -- suggestion, speculation, pipelined -- repeats its session's main
prompt byte for byte; with Anthropic's explicit caching that prefix is billed
as a cache read only if the breakpoints are right. The provider's
:class:`~actors.llm.meter.UsageMeter` has what the server billed each
request (the mock accounts as the API does); this module turns it into the
report's rows and its target: the share of fork input tokens read from the
cache, at least :data:`FORK_CACHE_SHARE` once a session's prefix is warm.
"""

from __future__ import annotations

import math
from typing import Any

from fore.actors.llm.meter import FORK_PURPOSES, CacheShare, UsageMeter
from fore.bench._common import Target

FORK_CACHE_SHARE = 0.90
"""Fork input tokens read from the cache, at least (issue 27)."""


def _group(share: CacheShare) -> dict[str, Any]:
    return {
        "requests": share.requests,
        "input_tokens": share.input_tokens,
        "cache_read_tokens": share.cache_read_tokens,
        "cache_write_tokens": share.cache_write_tokens,
        "uncached_tokens": share.uncached_tokens,
        "read_share": share.read_share,
        "cost_ratio": share.cost_ratio,
    }


def cache_summary(provider: str, meter: UsageMeter | None) -> dict[str, Any]:
    """The JSON report's ``cache`` object (empty when the model keeps no meter)."""
    if meter is None:
        return {}
    return {
        "provider": provider,
        "main": _group(meter.share(("main",))),
        "forks": _group(meter.forks()),
        "by_purpose": {
            purpose: _group(meter.share((purpose,)))
            for purpose in ("main", *FORK_PURPOSES)
            if purpose in meter.by_purpose()
        },
    }


def _percent(value: Any) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, float) else "—"


def cache_rows(cache: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows of the report's "prompt cache" section (input tokens, by how they were billed)."""
    rows = []
    for label, key in (("main requests", "main"), ("fork requests", "forks")):
        group = cache.get(key) or {}
        if not group.get("requests"):
            continue
        rows.append(
            (
                f"{label} ({group['requests']:,}): input tokens full price / cache write /"
                " cache read",
                f"{group['uncached_tokens']:,} / {group['cache_write_tokens']:,} / "
                f"{group['cache_read_tokens']:,}",
            )
        )
        rows.append((f"  {label}: share of input read from cache", _percent(group["read_share"])))
        ratio = group.get("cost_ratio")
        rows.append(
            (
                f"  {label}: input price with the cache / without (read 0.1×, write 1.25×)",
                f"{ratio:.3f}×" if isinstance(ratio, float) else "—",
            )
        )
    return rows


WARM_TURNS = 4
"""Turns a session plays before the target applies. A fork's own last message (the
suggestion prompt, ~400 tokens) is never cached, and against the short histories of a
session's first turns it is a large share of the fork's input: a run of fewer turns
measures mostly cold prefixes."""


def cache_target(cache: dict[str, Any], turns: int = WARM_TURNS) -> Target | None:
    """The fork cache-share target, for a run whose provider caches explicitly."""
    if not cache:
        return None
    forks = cache.get("forks") or {}
    share = forks.get("read_share")
    warm = turns >= WARM_TURNS
    return Target(
        "fork input tokens read from the prompt cache",
        share * 100 if isinstance(share, float) else math.nan,
        "%",
        ">=",
        FORK_CACHE_SHARE * 100,
        applies=warm,
        note=f"{forks.get('requests', 0):,} fork requests",
        missing="no fork request completed"
        if warm
        else f"fewer than {WARM_TURNS} turns a session: prefixes mostly cold",
        short="fork cache share",
    )


__all__ = ["FORK_CACHE_SHARE", "WARM_TURNS", "cache_rows", "cache_summary", "cache_target"]
