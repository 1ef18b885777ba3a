"""The errors of the distributed runtime: every one a :class:`~fore.ForeError`, one line each.

A shard is a process of its own, so things can go wrong between the caller and
its session that cannot happen in one process: the shard dies under a call,
no shard can take a session, a workspace is not on the machine a shard runs
on. Each has its own type, so an application can answer it without parsing
Ray's messages (they are chained as ``__cause__`` for the curious).
"""

from __future__ import annotations

from fore.errors import (
    NoShardAvailable,
    ShardLost,
    ShardUnavailable,
    WorkspaceUnreachable,
)

__all__ = ["NoShardAvailable", "ShardLost", "ShardUnavailable", "WorkspaceUnreachable"]
