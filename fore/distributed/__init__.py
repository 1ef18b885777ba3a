"""Fore past one process: sessions sharded over a Ray cluster.

::

    from fore.distributed import RayRuntime

    with RayRuntime(shards=2, store="sqlite:///var/lib/fore/sessions.db") as rt:
        session = rt.open_session(workspace=".", model=model)
        turn = session.submit("run the tests and fix what fails", timeout=600)

Each shard is a Ray actor -- a process of its own -- hosting a whole Fore
``Runtime``; a session is placed on the least-loaded shard of the machine
that has its workspace, stays there, and is called directly through the
shard's actor handle. A shard that dies is restarted by Ray and its sessions
are resumed from the shared store on a live shard; a call in flight raises
:class:`ShardLost`, the next one works. See :mod:`fore.distributed.runtime`.

Needs the ``ray`` extra: ``pip install 'fore-runtime[ray]'``. Importing this
package does not import Ray; creating a :class:`RayRuntime` does (and says
what to install when it is missing).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fore.distributed.errors import (
    NoShardAvailable,
    ShardLost,
    ShardUnavailable,
    WorkspaceUnreachable,
)

if TYPE_CHECKING:
    from fore.distributed.local import start_local_ray
    from fore.distributed.placement import ShardInfo, ShardLoad
    from fore.distributed.runtime import ANY_NODE, RayRuntime
    from fore.distributed.session import RemoteHandle, RemoteSession
    from fore.distributed.shipping import NotShippable

_WHERE = {
    "ANY_NODE": "fore.distributed.runtime",
    "NotShippable": "fore.distributed.shipping",
    "RayRuntime": "fore.distributed.runtime",
    "RemoteHandle": "fore.distributed.session",
    "RemoteSession": "fore.distributed.session",
    "ShardInfo": "fore.distributed.placement",
    "ShardLoad": "fore.distributed.placement",
    "start_local_ray": "fore.distributed.local",
}

__all__ = [
    "ANY_NODE",
    "NoShardAvailable",
    "NotShippable",
    "RayRuntime",
    "RemoteHandle",
    "RemoteSession",
    "ShardInfo",
    "ShardLoad",
    "ShardLost",
    "ShardUnavailable",
    "WorkspaceUnreachable",
    "start_local_ray",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fore.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
