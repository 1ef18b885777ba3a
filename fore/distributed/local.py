"""A local Ray instance for one machine: bounded, quiet, and on 127.0.0.1 only.

``RayRuntime(address=None)`` and the tests start Ray here. Left to itself,
``ray.init()`` on Linux binds its servers (GCS, raylets, workers) to the
machine's network address, where other hosts could reach them, and starts a
dashboard. A local instance is for this machine only: every server is bound to
the loopback address, there is no dashboard, the CPUs Ray hands out are
bounded, usage statistics are not collected, and the workers' output stays in
Ray's log files instead of being copied to the caller's terminal.

How: Ray binds to the loopback address only when it believes it runs outside
a cluster, which it decides from a constant read at import time
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``). :func:`start_local_ray` lowers that
constant around its own ``ray.init`` call and restores it, so nothing else in
the host process sees a change; ``tests/distributed/test_distributed_ray.py`` checks that
every listening socket of the instance is on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["LOOPBACK", "start_local_ray"]

LOOPBACK = "127.0.0.1"
_USAGE_STATS = "RAY_USAGE_STATS_ENABLED"


@contextlib.contextmanager
def _single_node(ray_constants: Any) -> Iterator[None]:
    """Loopback servers and no usage reporting, for the duration of ``ray.init`` only.

    The environment variable is what Ray's own processes (started by
    ``ray.init`` from this environment) read; it is restored afterwards.
    """
    previous = ray_constants.ENABLE_RAY_CLUSTER
    stats = os.environ.get(_USAGE_STATS)
    ray_constants.ENABLE_RAY_CLUSTER = False
    if stats is None:
        os.environ[_USAGE_STATS] = "0"
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = previous
        if stats is None:
            os.environ.pop(_USAGE_STATS, None)


def start_local_ray(
    num_cpus: int,
    *,
    namespace: str | None = None,
    temp_dir: str | None = None,
    object_store_memory: int = 256 * 1024 * 1024,
) -> None:
    """Start a local Ray instance for this process (see the module docs).

    ``num_cpus`` bounds what Ray schedules (a shard takes one by default).
    ``object_store_memory`` is small: sessions send messages, not arrays.
    """
    if num_cpus < 1:
        raise ValueError("num_cpus must be at least 1")
    import ray
    from ray._private import ray_constants

    kwargs: dict[str, Any] = {}
    if temp_dir is not None:
        kwargs["_temp_dir"] = temp_dir
    with _single_node(ray_constants):
        ray.init(
            num_cpus=num_cpus,
            num_gpus=0,
            include_dashboard=False,
            log_to_driver=False,
            namespace=namespace,
            object_store_memory=object_store_memory,
            _node_ip_address=LOOPBACK,
            **kwargs,
        )
