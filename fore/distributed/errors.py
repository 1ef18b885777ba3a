"""The errors of the distributed runtime: every one a :class:`~fore.ForeError`, one line each.

A shard is a process of its own, so things can go wrong between the caller and
its session that cannot happen in one process: the shard dies under a call,
no shard can take a session, a workspace is not on the machine a shard runs
on. Each has its own type, so an application can answer it without parsing
Ray's messages (they are chained as ``__cause__`` for the curious).
"""

from __future__ import annotations

from fore.errors import ForeError

__all__ = ["NoShardAvailable", "ShardLost", "ShardUnavailable", "WorkspaceUnreachable"]


class ShardLost(ForeError):
    """The shard hosting the session died while a call was in flight.

    The call's outcome is unknown to the caller: a turn that had completed is in
    the store (it was written before it was reported), one that had not is
    gone. The session itself is not lost: it is resumed from the store on a live
    shard, and the next call on it goes there.
    """

    def __init__(self, session_id: str, shard: int, detail: str = "") -> None:
        text = f"the shard (#{shard}) hosting session {session_id!r} died during the call"
        if detail:
            text += f" ({detail})"
        super().__init__(text + "; the session is resumed on a live shard: call again")
        self.session_id = session_id
        self.shard = shard


class NoShardAvailable(ForeError):
    """No live shard can take the session (none on the workspace's machine, or all down)."""


class ShardUnavailable(ForeError):
    """A shard did not answer before its deadline (not known to be dead: it may be busy)."""


class WorkspaceUnreachable(ForeError, FileNotFoundError):
    """The workspace is not a directory on the machine of the shard asked to serve it.

    A shard serves only workspaces on its own machine's filesystem; open the
    session with ``node=`` naming the machine that has it (or ``node="any"``
    for a filesystem every machine mounts at the same path).
    """
