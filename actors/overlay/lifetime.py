"""Closing and removing an overlay while tool threads may still write into it.

Many tool threads share one overlay. Mutations are counted while in flight
(:meth:`OverlayLifetime._operation`); :meth:`~OverlayLifetime.close` stops new
ones and waits for the count to reach zero, and
:meth:`~OverlayLifetime.remove` deletes the upper layer only then (or lets the
last writer do it when a deadline passes first). Writes to one path are
serialised by a per-path lock (:meth:`OverlayLifetime._path_lock`).

A mixin of :class:`~fore.actors.overlay.fs.OverlayFs` (not used alone); its
state is declared below and set up by :meth:`OverlayFs.__init__`.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fore.actors.core.logs import get_logger
from fore.errors import OverlayClosed

# The overlay's one logger: its events keep the name they had before the split.
log = get_logger("fore.actors.overlay.fs")


class OverlayLifetime:
    """In-flight mutations, close and remove (a mixin of ``OverlayFs``)."""

    # The overlay's state these methods use (set up by OverlayFs).
    directory: Path
    overlay_id: str
    closing: threading.Event
    gone: threading.Event
    _lock: threading.RLock
    _path_locks: dict[str, threading.Lock]
    _life: threading.Condition
    _inflight: int
    _closed: bool
    _removed: bool
    _remove_pending: bool

    @contextmanager
    def _path_lock(self, rel: str) -> Iterator[None]:
        with self._lock:
            lock = self._path_locks.get(rel)
            if lock is None:
                lock = self._path_locks[rel] = threading.Lock()
        with lock:
            yield

    @contextmanager
    def _operation(self) -> Iterator[None]:
        with self._life:
            if self._closed:
                raise OverlayClosed("the speculation overlay is closed; it accepts no more changes")
            self._inflight += 1
        try:
            yield
        finally:
            remove_now = False
            with self._life:
                self._inflight -= 1
                if self._inflight == 0:
                    self._life.notify_all()
                    if self._remove_pending and not self._removed:
                        self._removed = True
                        remove_now = True
            if remove_now:
                self._delete_storage()

    def close(self, timeout: float | None = None) -> bool:
        """Accept no new changes; wait for in-flight ones. True when none is left."""
        self.closing.set()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._life:
            self._closed = True
            while self._inflight:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._life.wait(remaining)
            return self._inflight == 0

    def remove(self, timeout: float = 10.0) -> bool:
        """Delete the upper layer once no write is in flight (idempotent).

        Waits up to ``timeout`` seconds; if writes are still running then, the
        last of them removes the layer when it finishes and this returns False.
        """
        self.closing.set()
        deadline = time.monotonic() + timeout
        with self._life:
            if self._removed:
                return True
            self._closed = True
            while self._inflight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._remove_pending = True
                    log.warning("overlay_removal_deferred", overlay=self.overlay_id)
                    return False
                self._life.wait(remaining)
            self._removed = True
        self._delete_storage()
        return True

    def _delete_storage(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self.gone.set()
        log.debug("overlay_removed", overlay=self.overlay_id)
