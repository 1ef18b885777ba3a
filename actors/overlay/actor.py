"""``OverlayActor``: one per speculation, owning its :class:`OverlayFs`.

The speculation's tool calls use the overlay directly as their ``fs`` (the
pool runs them on its own threads; the overlay is thread-safe), while the
lifecycle -- apply on accept, discard on abort, removal when the speculation
stops -- goes through this actor, so it is serialised with itself and never
runs disk work on a dispatcher thread: apply and removal run on the blocking
lane and their outcome is delivered back as a message (deferred replies).

States: ``open`` -> ``applying`` -> ``applied`` | ``conflicted`` | ``failed``;
any non-applying state -> ``discarding`` -> ``discarded``. A discard that
arrives while an apply runs waits for the apply to finish. A conflicted or
failed apply may be retried (it only reads the overlay); an applied overlay
answers a second apply with the same result.
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any

from pykka import ActorRef

from fore.actors.core.future import PooledFuture
from fore.actors.core.pooled import PooledActor, handles
from fore.actors.overlay.apply import apply_overlay
from fore.actors.overlay.fs import OverlayClosed, OverlayFs
from fore.actors.overlay.store import OverlayStore
from fore.actors.tools.fs import WorkspaceFs
from fore.actors.tools.fsclock import Instant
from fore.messages.overlay import (
    ApplyOverlay,
    ApplyResult,
    ConflictReport,
    DiscardOverlay,
    GetOverlayStatus,
    OverlayDiscarded,
    OverlayState,
    OverlayStatus,
)

__all__ = ["OverlayActor"]


class OverlayActor(PooledActor):
    """Applies, discards and reports on one speculation's overlay."""

    strict_messages = True  # typed: an unknown ask is an error, not None

    def __init__(
        self,
        overlay: OverlayFs,
        *,
        journal_dir: str | os.PathLike[str],
        session_id: str | None = None,
        close_timeout: float = 10.0,
        remove_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self.session_id = session_id
        self.fs = overlay
        """The view the speculation's tools use (pass it as ``RunToolBatch.fs``)."""
        self.journal_dir = Path(journal_dir)
        self.close_timeout = close_timeout
        self.remove_timeout = remove_timeout
        self._state: OverlayState = "open"
        self._result: ApplyResult | None = None
        self._apply_waiters: list[PooledFuture[Any] | None] = []
        self._pending_discards: list[tuple[PooledFuture[Any] | None, float]] = []
        self._apply_future: Future[Any] | None = None

    @classmethod
    def for_store(
        cls,
        store: OverlayStore,
        workspace: WorkspaceFs | str | os.PathLike[str],
        *,
        session_id: str | None = None,
        overlay_id: str | None = None,
        max_bytes: int | None = None,
        started: Instant | None = None,
    ) -> tuple[ActorRef[OverlayActor], OverlayFs]:
        """Create an overlay in ``store`` and start its actor: ``(actor_ref, overlay)``.

        ``started``: when the speculation started (see :meth:`OverlayStore.create`).
        """
        overlay = store.create(
            workspace, overlay_id=overlay_id, max_bytes=max_bytes, started=started
        )
        ref = cls.start(overlay, journal_dir=store.journal_dir, session_id=session_id)
        return ref, overlay

    @property
    def state(self) -> OverlayState:
        return self._state

    # -- apply -------------------------------------------------------------------

    @handles(ApplyOverlay)
    def _on_apply(self, message: ApplyOverlay) -> None:
        reply = self.defer_reply()
        if self._state == "applied":
            _answer(reply, self._result)
            return
        if self._state in ("discarding", "discarded"):
            _fail(reply, OverlayClosed("the speculation overlay was discarded"))
            return
        self._apply_waiters.append(reply)
        if self._state == "applying":
            return
        self._state = "applying"
        self._apply_future = self.run_blocking(
            partial(
                apply_overlay,
                self.fs,
                self.journal_dir,
                durable=message.durable,
                close_timeout=self.close_timeout,
            ),
            then=self._applied,
            on_error=self._apply_failed,
        )

    def _applied(self, result: ApplyResult | ConflictReport) -> None:
        # The finished future's callbacks refer back to this actor: let go of it
        # (a cycle would leave the whole overlay to the cyclic collector).
        self._apply_future = None
        if isinstance(result, ApplyResult):
            self._state = "applied"
            self._result = result
        else:
            self._state = "conflicted"
        waiters, self._apply_waiters = self._apply_waiters, []
        for reply in waiters:
            _answer(reply, result)
        self._run_pending_discards()

    def _apply_failed(self, error: BaseException) -> None:
        self._apply_future = None
        self._state = "failed"
        self.log.error("overlay_apply_failed", overlay=self.fs.overlay_id, error=repr(error))
        waiters, self._apply_waiters = self._apply_waiters, []
        for reply in waiters:
            _fail(reply, error)
        self._run_pending_discards()

    # -- discard -----------------------------------------------------------------

    @handles(DiscardOverlay)
    def _on_discard(self, message: DiscardOverlay) -> None:
        reply = self.defer_reply()
        if self._state == "applying":
            self._pending_discards.append((reply, message.timeout))
            return
        self._discard(reply, message.timeout)

    def _run_pending_discards(self) -> None:
        pending, self._pending_discards = self._pending_discards, []
        for reply, timeout in pending:
            self._discard(reply, timeout)

    def _discard(self, reply: PooledFuture[Any] | None, timeout: float) -> None:
        if self._state == "discarded":
            _answer(reply, OverlayDiscarded(overlay_id=self.fs.overlay_id, removed=True))
            return
        self._state = "discarding"

        def removed(done: bool) -> None:
            self._state = "discarded"
            _answer(reply, OverlayDiscarded(overlay_id=self.fs.overlay_id, removed=done))

        def failed(error: BaseException) -> None:
            self.log.warning("overlay_discard_failed", error=repr(error))
            self._state = "discarded"
            _fail(reply, error)

        self.run_blocking(self.fs.remove, timeout, then=removed, on_error=failed)

    # -- status and lifetime ------------------------------------------------------

    @handles(GetOverlayStatus)
    def _on_status(self, _message: GetOverlayStatus) -> OverlayStatus:
        files, whiteouts, dirs = self.fs.counts()
        return OverlayStatus(
            overlay_id=self.fs.overlay_id,
            state=self._state,
            has_writes=self.fs.has_writes,
            files_written=files,
            whiteouts=whiteouts,
            dirs_created=dirs,
            bytes_used=self.fs.bytes_used,
            max_bytes=self.fs.max_bytes,
            touched=len(self.fs.touched()),
        )

    def on_stop(self) -> None:
        self._release()

    def on_failure(self, *_exc_info: Any) -> None:
        self._release()

    def _release(self) -> None:
        """Remove the overlay off the dispatcher thread (after in-flight writes)."""
        for reply in self._apply_waiters:
            _fail(reply, OverlayClosed("the overlay actor stopped"))
        self._apply_waiters = []
        for reply, _ in self._pending_discards:
            _answer(reply, OverlayDiscarded(overlay_id=self.fs.overlay_id, removed=False))
        self._pending_discards = []
        if self.fs.removed:
            return
        applying = self._apply_future
        if applying is not None and not applying.done():
            # Never pull the upper layer from under a running apply.
            applying.add_done_callback(lambda _f: self._remove_later())
            return
        self._remove_later()

    def _remove_later(self) -> None:
        try:
            self.system.blocking.submit(self.fs.remove, self.remove_timeout)
        except RuntimeError:  # the blocking lane is shut down: do not wait at all
            self.fs.remove(0.0)


def _answer(reply: PooledFuture[Any] | None, value: Any) -> None:
    if reply is not None:
        reply.try_set(value)


def _fail(reply: PooledFuture[Any] | None, error: BaseException) -> None:
    if reply is not None:
        reply.try_set_exception(error)
