"""The reaper: ends a speculation's work in order, then removes its overlay.

Every ended speculation -- aborted, failed, accepted, or whose speculator
crashed or was stopped -- hands its worker and overlay to one reaper, so
there is exactly one cleanup path and it is the same after a crash as after
a keystroke. The order is the point (the seed's abort sequence):

1. the worker is stopped on its control lane (``StopNow``): its ``on_stop``
   cancels the LLM request and the running tool calls -- never ``kill()``,
   which would skip exactly that (a ``tail -f`` would outlive the session);
2. the tool pool confirms it has processed the cancellation (its process
   groups are killed) -- a ``GetPoolStats`` answered after the worker's
   ``CancelToolCalls``, which travels on the control lane, is that proof;
3. the speculation's LLM streams have ended (:class:`MeteredModel` reports
   when none is in flight; a cancelled stream ends once its connection closed);
4. only then is the overlay removed (waiting for writes still in flight), its
   actor stopped, and the session supervisor told, with each step's time.

Every wait has a deadline: a worker that does not stop in time is killed as a
last resort, and steps 2-3 give up after ``settle_timeout`` (logged) so an
overlay is never kept forever.

The overlay actor is the overlay's only remover: its removal waits for an
apply still running (a removal racing an apply would delete the upper layer
under it, and the apply would then write ``displaced/`` into a directory that
is gone). When that actor cannot be asked (it stopped, or its answer is
late), the reaper stops it -- its ``on_stop`` removes the overlay once no apply
runs -- and waits, within its deadline, for the overlay to be gone. Only an
overlay without an actor (its start failed) is removed by the reaper itself.

The reaper lives outside the supervision tree on purpose: it outlives the
speculator it cleans up after. So closing a session or the runtime does not
wait for it by stopping actors: it waits for what the reaper is for -- the
session's overlays gone from disk (:meth:`OverlayStore.wait_removed`) --
before anything the reaper needs (tool pool, LLM loops, blocking lane) is
shut down. A runtime shutdown that must stop a reaper early stops it with
every other actor (its ``on_stop`` then stops the worker and the overlay
actor without waiting), and the runtime removes whatever is left itself once
nothing can write into it (:meth:`OverlayStore.remove_outstanding`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pykka import ActorDeadError

from fore.actors.core.pooled import ActorExit, ForeActor, PooledActor, handles, tell_quietly
from fore.actors.core.timer import TimerHandle
from fore.actors.overlay.fs import OverlayFs
from fore.actors.speculation.metered import MeteredModel
from fore.messages.overlay import DiscardOverlay, OverlayDiscarded
from fore.messages.runtime import StopNow
from fore.messages.speculation import OverlayRemoved, StreamsIdle, WorkerExited
from fore.messages.tools import GetPoolStats

Steps = list[tuple[str, float]]


@dataclass
class ReapOrder:
    """What one speculation leaves behind."""

    speculation_id: str
    session_id: str
    worker: Any
    overlay_actor: Any
    overlay: OverlayFs | None
    tool_pool: Any
    model: MeteredModel | None
    supervisor: Any
    steps: Steps = field(default_factory=list)
    """Steps already taken (e.g. ``abort_requested``), with ``time.monotonic()``."""
    stop_timeout: float = 10.0
    settle_timeout: float = 10.0
    remove_timeout: float = 30.0


class SpeculationReaper(ForeActor):
    """Stops a speculation's worker, confirms the cancellations, removes the overlay."""

    def __init__(self, order: ReapOrder) -> None:
        super().__init__()
        self.order = order
        self.session_id = order.session_id
        self.steps: Steps = list(order.steps)
        self._waiting = {"tools_cancelled", "llm_cancelled"}
        self._discarding = False
        self._done = False
        self._deadline: TimerHandle | None = None
        self._stop_timer: TimerHandle | None = None
        self._worker_done = False

    def on_start(self) -> None:
        order = self.order
        if order.model is not None:
            order.model.close()
        self._deadline = self.call_after(
            order.stop_timeout + order.settle_timeout, self._gave_up_waiting
        )
        # "Stopped" must mean "its on_stop has run" (that is where the LLM request
        # and the tool calls are cancelled). An ask would report a stopping actor
        # as dead before its on_stop finished; an exit watcher fires after it.
        actor = order.worker._actor_weakref() if order.worker is not None else None
        me = self.actor_ref

        def exited(record: ActorExit) -> None:
            tell_quietly(me, WorkerExited(killed=record.killed))

        if not isinstance(actor, PooledActor) or not actor.add_exit_watcher(exited):
            self._worker_gone("worker_stopped")
            return
        self._stop_timer = self.call_after(order.stop_timeout, self._stop_timed_out, actor)
        tell_quietly(order.worker, StopNow())  # control lane: overtakes its queued mail

    def on_stop(self) -> None:
        self._last_resort()

    def on_failure(self, *_exc_info: Any) -> None:
        self._last_resort()

    # -- 1. the worker ----------------------------------------------------------------

    @handles(WorkerExited)
    def _on_worker_exited(self, message: WorkerExited) -> None:
        if self._stop_timer is not None:
            self._stop_timer.cancel()
        self._worker_gone("worker_killed" if message.killed else "worker_stopped")

    def _stop_timed_out(self, actor: PooledActor) -> None:
        # Its thread is stuck in a handler: nothing orderly is possible any more.
        # The kill makes its exit watcher fire, which continues the sequence.
        self.log.warning("speculation_worker_kill", speculation=self.order.speculation_id)
        actor.kill()

    def _worker_gone(self, step: str) -> None:
        if self._worker_done:
            return
        self._worker_done = True
        self._step(step)
        pool = self.order.tool_pool
        if pool is None:
            self._settled("tools_cancelled")
        else:
            try:
                self.ask_then(
                    pool,
                    GetPoolStats(),
                    then=lambda _stats: self._settled("tools_cancelled"),
                    on_error=lambda _error: self._settled("tools_cancelled"),
                    timeout=self.order.settle_timeout,
                )
            except ActorDeadError:
                self._settled("tools_cancelled")
        model = self.order.model
        if model is None:
            self._settled("llm_cancelled")
        else:
            model.when_idle(self.actor_ref, StreamsIdle())

    # -- 2. and 3. the tools and the LLM stream -------------------------------------------

    @handles(StreamsIdle)
    def _on_idle(self, _message: StreamsIdle) -> None:
        self._settled("llm_cancelled")

    def _settled(self, step: str) -> None:
        if step not in self._waiting:
            return
        self._waiting.discard(step)
        self._step(step)
        if not self._waiting:
            self._discard()

    def _gave_up_waiting(self) -> None:
        if self._discarding:
            return
        self.log.warning(
            "speculation_cleanup_deadline",
            speculation=self.order.speculation_id,
            waiting=sorted(self._waiting),
        )
        self._discard()

    # -- 4. the overlay ------------------------------------------------------------------

    def _discard(self) -> None:
        if self._discarding:
            return
        self._discarding = True
        if self._deadline is not None:
            self._deadline.cancel()
        order = self.order
        if order.overlay_actor is None:
            # No actor ever owned it (its start failed): nothing can apply it,
            # so the reaper removes it itself.
            overlay = order.overlay
            if overlay is None or overlay.removed:
                self._removed(None)
                return
            self.run_blocking(
                overlay.remove, order.remove_timeout, then=self._removed, on_error=self._removed
            )
            return
        try:
            self.ask_then(
                order.overlay_actor,
                DiscardOverlay(timeout=order.remove_timeout),
                then=self._removed,
                on_error=self._discard_failed,
                timeout=order.remove_timeout + 30.0,
            )
        except ActorDeadError as exc:
            self._discard_failed(exc)

    def _discard_failed(self, error: BaseException) -> None:
        """The overlay actor could not be asked: stop it (it removes), and wait for that.

        Never removed from here: the actor may still be applying (see module docs).
        """
        order = self.order
        overlay = order.overlay
        self.log.warning(
            "speculation_discard_failed", speculation=order.speculation_id, error=repr(error)
        )
        if order.overlay_actor is not None:
            tell_quietly(order.overlay_actor, StopNow())
        if overlay is None or overlay.gone.is_set():
            self._removed(None)
            return
        self.run_blocking(
            overlay.gone.wait, order.remove_timeout, then=self._removed, on_error=self._removed
        )

    def _removed(self, answer: Any) -> None:
        if self._done:
            return
        self._done = True
        overlay = self.order.overlay
        if isinstance(answer, OverlayDiscarded):
            gone = answer.removed
        elif isinstance(answer, bool):
            gone = answer
        else:
            gone = overlay is None or overlay.removed
        if not gone:
            self.log.warning(
                "speculation_overlay_left",
                speculation=self.order.speculation_id,
                reason="writes still in flight after the removal deadline",
            )
        self._step("overlay_removed" if gone else "overlay_removal_deferred")
        order = self.order
        for address, message in (
            (order.overlay_actor, StopNow()),
            (
                order.supervisor,
                OverlayRemoved(speculation_id=order.speculation_id, steps=tuple(self.steps)),
            ),
        ):
            if address is None:
                continue
            tell_quietly(address, message)
        self.stop()

    # -- helpers ---------------------------------------------------------------------------

    def _step(self, name: str) -> None:
        self.steps.append((name, time.monotonic()))

    def _last_resort(self) -> None:
        """Stopped before the end (runtime shutdown): never wait.

        The worker and the overlay actor are stopped (their ``on_stop`` cancels
        the run, and removes the overlay once no apply runs); an overlay without
        an actor is handed to the blocking lane. Whatever that leaves (the lane
        drops work still queued when it shuts down), the runtime removes once
        nothing runs any more (see module docs).
        """
        if self._deadline is not None:
            self._deadline.cancel()
        if self._done:
            return
        order = self.order
        if self._stop_timer is not None:
            self._stop_timer.cancel()
        for address in (order.worker, order.overlay_actor):
            if address is not None:
                tell_quietly(address, StopNow())
        overlay = order.overlay
        if order.overlay_actor is None and overlay is not None and not overlay.removed:
            try:
                self.system.blocking.submit(overlay.remove, order.remove_timeout)
            except RuntimeError:  # the blocking lane is shut down
                overlay.remove(0.0)


__all__ = ["ReapOrder", "SpeculationReaper"]
