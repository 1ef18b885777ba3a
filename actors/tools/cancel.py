"""Cancellation tokens for running tool calls.

A token is cancelled by the pool (user cancel, batch cancel, timeout). Python
tools poll ``token.cancelled`` or call ``raise_if_cancelled()``; tools that
own external resources register a callback (the shell tool kills its process
group from the callback, so cancellation does not wait for a poll).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from fore.actors.core.logs import get_logger
from fore.errors import ToolCancelled

# Defined in fore.errors (the one exception tree); re-exported for the importers of this module.
__all__ = ["ToolCancelled"]

log = get_logger(__name__)


class CancelToken:
    """Thread-safe, one-way cancellation flag with callbacks."""

    __slots__ = ("_callbacks", "_event", "_lock", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[str], None]] = []
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> bool:
        """Cancel; runs the callbacks once. Returns False if already cancelled."""
        with self._lock:
            if self._event.is_set():
                return False
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:
                log.exception("cancel_callback_failed")
        return True

    def on_cancel(self, callback: Callable[[str], None]) -> None:
        """Run ``callback(reason)`` on cancel (at once if already cancelled)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback(self.reason)

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise ToolCancelled(self.reason)

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to ``timeout`` seconds; True when cancelled."""
        return self._event.wait(timeout)
