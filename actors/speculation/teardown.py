"""A speculation's teardown: its worker stopped, its work confirmed gone, only then its overlay.

Every speculation that ends -- aborted, failed, accepted, crashed, stopped by
its session -- goes the same way, as phases of its record
(:class:`~actors.speculation.states.Teardown`), in the one order that is safe:

1. **STOPPING**: its worker is stopped on its control lane (``StopNow``, the
   moment the run is over or the abort is asked for); its ``on_stop``
   cancels the run's scope -- the LLM request and the tool calls -- never
   ``kill()``, which would skip exactly that (a ``tail -f`` would outlive the
   session). The worker's exit watcher reports the exit; at the deadline
   (:attr:`~ControllerBase.stop_timeout`) a stuck worker is killed, and its
   watcher reports that;
2. **SETTLING**: the run's :class:`~actors.core.cancel.CancelScope` (the one its
   ``Submit`` carried, with every LLM request and tool batch of the run)
   settles once every ``llm`` / ``tools`` lease is released: the stream's
   task has ended and its connection closed, the pool has reported every call
   (its process groups killed). Work that had not reached the loop or the
   pool yet never starts (it finds the scope cancelled). At the deadline
   (:attr:`~ControllerBase.settle_timeout`) the wait is given up, logged;
3. **KEPT**: nothing can write through the overlay any more; it is kept while
   Tab may still apply it;
4. **REMOVING** / **REMOVED**: once the speculation is over (never while its
   apply runs: the record refuses the move), the overlay is removed on the
   blocking lane (waiting up to :attr:`~ControllerBase.remove_timeout` for
   writes in flight); an abort is reported then, timed by the steps.

Each step is recorded with its time for the abort's ``abort_steps``:
``abort_requested`` (``already_finished``), ``worker_stopped`` (or
``worker_killed``), ``llm_cancelled`` and ``tools_cancelled`` -- when each kind
of the run's work was done, no earlier than the worker's exit, since that is
when the controller asks -- and ``overlay_removed`` (or
``overlay_removal_deferred``).

The callbacks that end a wait (the exit watcher, the scope's ``on_settled``)
come from other threads: they post to this actor on its control lane, so a
teardown never waits behind queued mail. When the controller itself stops --
the session closes -- nothing may wait on it any more: :meth:`_let_go` stops
each worker, cancels each scope and leaves the overlay's removal to the scope's
settlement and a deadline on the runtime's timer (after an apply still
running, if one is: its completion first hands the accepted items to the
worker, or to the session's store if the worker is gone too, and answers the
Tab once they are in -- :mod:`.handover`).
Closing a session or the runtime waits for what this is for -- the session's
overlays gone from disk (``OverlayStore.wait_removed``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from fore.actors.core.blocking import BlockingLane
from fore.actors.core.continuations import tell_quietly
from fore.actors.core.pooled import ActorExit, PooledActor, stop_now
from fore.actors.overlay.fs import OverlayFs
from fore.actors.speculation.base import ControllerBase
from fore.actors.speculation.states import OVER, SpecPhase, Speculation, Teardown
from fore.actors.speculation.status import abort_timings
from fore.messages.runtime import StopNow

__all__ = ["TeardownSteps"]

_CONFIRMED = (("llm", "llm_cancelled"), ("tools", "tools_cancelled"))
"""The run scope's lease kinds, and the step each one's end is recorded as."""


class TeardownSteps(ControllerBase):
    """The teardown phases of a speculation's record (see the module docs)."""

    # -- 1. the worker ----------------------------------------------------------------------

    def _watch_exit(self, speculation_id: str, record: ActorExit) -> None:
        """The speculation worker's exit watcher (on the exiting worker's thread)."""
        at = time.monotonic()
        error = record.error
        self.post_urgent(
            self._worker_exited,
            speculation_id,
            record.failed,
            record.killed,
            None if error is None else f"{type(error).__name__}: {error}",
            at,
        )

    def _stop_worker(self, spec: Speculation) -> None:
        """The run is over (or aborted): stop its worker on the control lane, once."""
        if spec.teardown is not Teardown.RUNNING:
            return
        spec.tear(Teardown.STOPPING)
        if spec.budget_timer is not None:
            spec.budget_timer.cancel()
            spec.budget_timer = None
        if spec.model is not None:
            spec.model.close()  # a request still on its way never reaches the network
        if spec.worker is not None and tell_quietly(spec.worker, StopNow()):
            spec.teardown_timer = self.call_after(self.stop_timeout, self._stop_timed_out, spec)
        # Otherwise it has exited already: its watcher's report is on its way.

    def _stop_timed_out(self, spec: Speculation) -> None:
        if spec.teardown is not Teardown.STOPPING or spec.worker is None:
            return
        # Its thread is stuck in a handler: nothing orderly is possible any more.
        # The kill makes its exit watcher fire, which continues the teardown.
        self.log.warning("speculation_worker_kill", speculation=spec.id)
        actor = spec.worker._actor_weakref()
        if isinstance(actor, PooledActor):
            actor.kill()

    def _worker_exited(
        self, speculation_id: str, failed: bool, killed: bool, error: str | None, at: float
    ) -> None:
        spec = self._specs.get(speculation_id)
        if spec is None:
            return
        if failed:
            # The run's own answer (failed) says so to the user; this is the log.
            self.log.warning("speculation_worker_failed", speculation=spec.id, error=error)
        if spec.teardown is Teardown.RUNNING:  # it exited on its own (a crash)
            self._stop_worker(spec)
        if spec.teardown is not Teardown.STOPPING:
            return
        self._cancel_timer(spec)
        spec.tear(Teardown.SETTLING)
        spec.stopped_at = spec.step("worker_killed" if killed else "worker_stopped", at)
        # Over, so that it can settle: a run that never started was neither
        # cancelled nor closed by its worker (a no-op when it was).
        spec.scope.cancel("the speculation ended")
        if not spec.scope.settled:
            spec.teardown_timer = self.call_after(self.settle_timeout, self._settle_timed_out, spec)
            spec.scope.on_settled(partial(self._post_settled, spec.id))
            return
        spec.scope.on_settled(partial(self._settled, spec))  # runs here, now

    # -- 2. the LLM stream and the tool calls -------------------------------------------------

    def _post_settled(self, speculation_id: str, times: Mapping[str, float]) -> None:
        """The scope's ``on_settled`` (on the thread that released the last lease)."""
        self.post_urgent(self._on_settled, speculation_id, times)

    def _on_settled(self, speculation_id: str, times: Mapping[str, float]) -> None:
        spec = self._specs.get(speculation_id)
        if spec is not None:
            self._settled(spec, times)

    def _settle_timed_out(self, spec: Speculation) -> None:
        if spec.teardown is not Teardown.SETTLING:
            return
        _log_gave_up(self.log, spec)
        self._settled(spec, None)

    def _settled(self, spec: Speculation, times: Mapping[str, float] | None) -> None:
        """No stream or call of the run is left (``times``), or the wait was given up (None)."""
        if spec.teardown is not Teardown.SETTLING:
            return
        self._cancel_timer(spec)
        if times is not None:
            floor = spec.stopped_at or 0.0
            done = sorted((max(times[kind], floor), step) for kind, step in _CONFIRMED)
            for when, step in done:
                spec.step(step, when)
        if spec.phase in OVER:
            self._remove_overlay(spec)
        else:
            spec.tear(Teardown.KEPT)  # for Tab; removed once the speculation is over

    # -- 3. the overlay ----------------------------------------------------------------------

    def _advance_teardowns(self) -> None:
        """After every message: a kept overlay whose speculation is over goes now, and a
        record with nothing left to do is dropped.

        Checked here, once, rather than at every place that ends a speculation
        (abort, failure, a conflict, an accept's end ...), so none is forgotten.
        """
        for spec in list(self._specs.values()):
            if spec.teardown is Teardown.KEPT and spec.phase in OVER:
                self._remove_overlay(spec)
            elif spec.teardown is Teardown.REMOVED:
                self._forget(spec)

    def _remove_overlay(self, spec: Speculation) -> None:
        spec.tear(Teardown.REMOVING)  # refused while Tab may still come or an apply runs
        overlay = spec.overlay
        if overlay is None:
            self._overlay_removed(spec, True)
            return
        self.run_blocking(
            overlay.remove,
            self.remove_timeout,
            then=partial(self._overlay_removed, spec),
            on_error=partial(self._overlay_remove_failed, spec),
        )

    def _overlay_remove_failed(self, spec: Speculation, error: BaseException) -> None:
        self.log.warning(
            "speculation_overlay_remove_failed", speculation=spec.id, error=repr(error)
        )
        self._overlay_removed(spec, False)

    def _overlay_removed(self, spec: Speculation, gone: bool) -> None:
        if not gone:
            self.log.warning(
                "speculation_overlay_left",
                speculation=spec.id,
                reason="writes still in flight after the removal deadline",
            )
        spec.step("overlay_removed" if gone else "overlay_removal_deferred")
        spec.tear(Teardown.REMOVED)
        if spec.phase is SpecPhase.ABORTING:
            self._report_abort(spec)
        # Nothing of its run is needed any more: the record (kept for the status,
        # or a pipelined suggestion) no longer holds the overlay or the worker.
        spec.worker = spec.overlay = spec.gate = spec.model = None
        self._forget(spec)

    def _report_abort(self, spec: Speculation) -> None:
        """An aborted speculation's telemetry, timed from the user's keystroke.

        ``cancel_latency``: keystroke -> LLM stream closed *and* tool calls
        cancelled, only for a speculation that was still running when the
        abort reached it; ``cleanup_latency``: keystroke -> overlay removed,
        for every abort. Its tokens are counted now, once every stream has
        ended (a cancelled one's estimate included).
        """
        spec.move(SpecPhase.ENDED)
        self._report(
            spec,
            "stale" if spec.state == "stale" else "aborted",
            reason=spec.abort_reason,
            abort=abort_timings(spec),
            tokens=None if spec.model is None else spec.model.spent(),
        )

    def _cancel_timer(self, spec: Speculation) -> None:
        if spec.teardown_timer is not None:
            spec.teardown_timer.cancel()
            spec.teardown_timer = None

    # -- when the controller stops -----------------------------------------------------------

    def _let_go(self, spec: Speculation, reason: str) -> None:
        """The controller is stopping: end the speculation's work without waiting here.

        Its worker is stopped (killed at :attr:`close_stop_timeout` if stuck),
        its scope cancelled, and its overlay removed by :class:`_LastRemoval`
        once the scope has settled -- after an apply still running -- or at the
        settle deadline, on the blocking lane.
        """
        for pending in (spec.budget_timer, spec.teardown_timer, spec.give_up_timer):
            if pending is not None:
                pending.cancel()
        self._release_slot(spec)  # its run is over: the governor admits another
        job, handover = spec.apply_job, spec.handover
        main = self.worker_config
        if job is not None and handover is not None:
            # The apply's outcome will never reach this actor: its completion hands the
            # items to the worker itself (before the overlay's removal is asked for).
            deliver = partial(
                handover.deliver_orphaned,
                worker=self._worker,
                state=main.state,
                persist=main.persist,
                lane=self.system.blocking,
            )
            job.add_done_callback(deliver)
        elif handover is not None and spec.phase is SpecPhase.INSERTING:
            # The worker's answer to the items will never reach this actor either.
            handover.orphaned_insert(main.state, main.persist, self.system.blocking)
        if spec.teardown in (Teardown.REMOVING, Teardown.REMOVED):
            return  # its removal is under way on the lane (or done)
        timer = self.system.timer
        if spec.worker is not None and stop_now(spec.worker, block=False):
            try:
                timer.call_later(self.close_stop_timeout, _kill_if_alive, spec.worker)
            except RuntimeError:  # the timer is shut down: the runtime is closing anyway
                pass
        if spec.model is not None:
            spec.model.close()
        spec.scope.cancel(reason)
        if spec.overlay is None:
            return
        removal = _LastRemoval(spec.overlay, self.system.blocking, self.remove_timeout)
        settle_timeout, log = self.settle_timeout, self.log

        def at_the_deadline() -> None:
            if not spec.scope.settled:
                _log_gave_up(log, spec)
            removal()

        def once_nothing_applies() -> None:
            spec.scope.on_settled(lambda _times: removal())
            try:
                timer.call_later(settle_timeout, at_the_deadline)
            except RuntimeError:  # the timer is shut down: the runtime is closing anyway
                pass

        if job is not None and not job.done():
            # Never pull the upper layer from under a running apply.
            job.add_done_callback(lambda _done: once_nothing_applies())
        else:
            once_nothing_applies()


def _log_gave_up(log: Any, spec: Speculation) -> None:
    """The wait for ``spec``'s run to settle is given up at its deadline: say for what."""
    log.warning(
        "speculation_cleanup_deadline", speculation=spec.id, waiting=sorted(spec.scope.leases())
    )


class _LastRemoval:
    """Removes one overlay once, from whichever thread asks first (see ``_let_go``)."""

    __slots__ = ("_lane", "_lock", "_overlay", "_started", "_timeout")

    def __init__(self, overlay: OverlayFs, lane: BlockingLane, timeout: float) -> None:
        self._overlay = overlay
        self._lane = lane
        self._timeout = timeout
        self._lock = threading.Lock()
        self._started = False

    def __call__(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        if self._overlay.removed:
            return
        try:
            self._lane.submit(self._overlay.remove, self._timeout)
        except RuntimeError:  # the lane is shut down: the runtime removes what is left
            pass


def _kill_if_alive(ref: Any) -> None:
    actor = ref._actor_weakref()
    if isinstance(actor, PooledActor) and not actor.has_exited:
        actor.kill()
