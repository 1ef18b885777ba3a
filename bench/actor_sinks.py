"""The actors ``fore bench actors`` measures: a pooled one and a pykka thread one, alike.

Both count what they receive, answer every message with itself, and may
report their start and each message to a callback (the many-actor probes of
:mod:`bench.actors_many` count with them); the raw baselines need no actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka

from fore.actors.core import PooledActor

MESSAGE = ("ping", 1)
"""What every measurement sends."""


class _Counting:
    """The sinks' one body: mixed in before the actor class each one is built on."""

    def __init__(
        self, started: Callable[[], None] | None = None, done: Callable[[], None] | None = None
    ) -> None:
        super().__init__()
        self.count = 0
        self.started = started
        self.done = done

    def on_start(self) -> None:
        if self.started is not None:
            self.started()

    def on_receive(self, message: Any) -> Any:
        self.count += 1
        if self.done is not None:
            self.done()
        return message


class PooledSink(_Counting, PooledActor):
    default_ask_timeout = 300.0


class ThreadSink(_Counting, pykka.ThreadingActor):
    use_daemon_thread = True
