"""The dispatcher: a small pool of threads that run actors' mailboxes.

Instead of one OS thread per actor (pykka's ``ThreadingActor``), every pooled
actor is run by whichever dispatcher thread takes its mailbox off the shared
run queue. A mailbox processes at most ``throughput`` messages per slice and
then goes to the back of the queue, so a busy actor cannot starve the others
(Akka's fairness rule).
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING, Any

from fore.actors.core.logs import get_logger

if TYPE_CHECKING:
    from fore.actors.core.mailbox import Mailbox

log = get_logger(__name__)

_SHUTDOWN: Any = object()

_tls = threading.local()
"""``_tls.dispatching`` is True on every dispatcher thread of every system."""


def on_a_dispatcher_thread() -> bool:
    """Whether the calling thread is a dispatcher thread (of any actor system).

    Futures use this to refuse a blocking ``get()`` where it would stall the
    runtime (see :class:`~actors.core.errors.BlockingOnDispatcherError`).
    """
    return getattr(_tls, "dispatching", False)


class Dispatcher:
    """Runs scheduled mailboxes on ``threads`` daemon threads."""

    def __init__(
        self,
        *,
        threads: int,
        throughput: int,
        name: str = "fore-dispatch",
        on_thread_start: Any = None,
    ) -> None:
        if threads < 1:
            raise ValueError("a dispatcher needs at least one thread")
        if throughput < 1:
            raise ValueError("throughput must be at least 1")
        self.throughput = throughput
        self._runq: queue.SimpleQueue[Mailbox] = queue.SimpleQueue()
        self._on_thread_start = on_thread_start
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def thread_count(self) -> int:
        return len(self._threads)

    def schedule(self, mailbox: Mailbox) -> None:
        self._runq.put(mailbox)

    def _loop(self) -> None:
        _tls.dispatching = True
        if self._on_thread_start is not None:
            self._on_thread_start()
        runq = self._runq
        throughput = self.throughput
        while True:
            mailbox = runq.get()
            if mailbox is _SHUTDOWN:
                return
            try:
                mailbox.run(throughput)
            except BaseException:  # the loop must survive anything an actor does
                log.exception("dispatcher_slice_failed")

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Stop the threads after the mail already queued; return whether all exited."""
        for _ in self._threads:
            self._runq.put(_SHUTDOWN)
        alive = False
        for thread in self._threads:
            if thread is threading.current_thread():
                continue
            thread.join(timeout)
            alive = alive or thread.is_alive()
        return not alive
