"""The version of a fork snapshot: a digest of what makes a fork's prefix.

The worker takes a :class:`~fore.messages.speculation.ForkSnapshot` after each
completed main turn (``EndingPhase._snapshot``) and stamps it with this
version; suggestions, speculations and pipelined requests carry it so a fork
built on an older prefix is recognised. It lives with the worker, which makes
the snapshot; ``fore.actors.speculation.fork`` re-exports it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from fore.messages.tools import ToolDefinition


def snapshot_version(system_prompt: str | None, tools: Sequence[ToolDefinition]) -> str:
    """A digest of what makes a fork's prefix: the system prompt and the tools."""
    canonical = json.dumps(
        {"system": system_prompt, "tools": [t.model_dump(mode="json") for t in tools]},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
