"""Running hooks on the shared hook lane: start-based deadlines, cancellation, a cap.

Hooks are user code, so they run on the runtime's hook lane (a blocking lane
of its own, so hooks waiting on people never take the threads the runtime's
disk work needs), which every session shares. Three rules keep one session's
hooks from hurting the others (and a hook from hurting its own run):

* **A hook's timeout starts when the hook starts running**, not when it is
  queued: time spent waiting for a lane thread is the lane's fault, not the
  hook's. :class:`HookJob` calls its ``on_start`` callback on the lane thread
  right before the hook (the owner arms the deadline there). The wait for a
  thread has its own, longer deadline (``Hooks.start_timeout``), owned by the
  caller, so no wait is unbounded.
* **A hook that has not started can be cancelled, and then never runs**
  (:meth:`HookJob.cancel`): a timed-out or cancelled run must not have its
  hooks' side effects show up later. A hook that *is* running cannot be
  stopped -- Python cannot kill a thread -- so it is *abandoned*: it finishes
  on its lane thread whenever it returns, and its answer is ignored.
* **A session has at most ``cap`` hooks on the lane at once**
  (:class:`HookGate`, one per session): an abandoned hook that hangs keeps
  its thread, so without a cap one session with a hanging hook would, run
  after run, take every lane thread and stall every other session's hooks.
  Over the cap, the session's next hook waits in the gate (not on the lane)
  until one of its own finishes, or its start deadline passes.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

import structlog

from fore.actors.worker.hooks import (
    NOT_APPLICABLE,
    HookEvent,
    HookSpec,
    HookTimeout,
    raised_error,
    run_hook,
)

log = structlog.get_logger(__name__)

JobState = Literal["new", "waiting", "queued", "running", "done", "cancelled", "abandoned"]

DEFAULT_HOOK_CAP = 2
"""Lane threads one session's hooks may hold at once (see :class:`HookGate`)."""


class HookJob:
    """One hook call: ``run_hook(spec, ctx)`` on a lane thread, at most once.

    ``on_start(job)`` runs on the lane thread just before the hook (arm the
    deadline there, with :meth:`arm`); ``on_done(job, result, error)`` runs on
    the lane thread after it, whether or not the job was abandoned meanwhile
    (the owner ignores answers it no longer waits for).
    """

    __slots__ = ("_lock", "_timer", "ctx", "on_done", "on_start", "spec", "state")

    def __init__(
        self,
        spec: HookSpec,
        ctx: Any,
        *,
        on_start: Callable[[HookJob], None],
        on_done: Callable[[HookJob, Any, BaseException | None], None],
    ) -> None:
        self.spec = spec
        self.ctx = ctx
        self.on_start = on_start
        self.on_done = on_done
        self.state: JobState = "new"
        self._lock = threading.Lock()
        self._timer: Any = None

    def __repr__(self) -> str:
        return f"<HookJob {self.spec.event.value}:{self.spec.name} {self.state}>"

    @property
    def started(self) -> bool:
        with self._lock:
            return self.state in ("running", "done", "abandoned")

    def arm(self, timer: Any) -> None:
        """Keep the deadline's timer handle (cancelled with the job)."""
        with self._lock:
            if self.state == "running":
                self._timer = timer
                return
        timer.cancel()  # cancelled or abandoned meanwhile

    def settle(self) -> None:
        """The owner got its answer (or gave up): drop the deadline timer."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def withdraw(self) -> bool:
        """Cancel the job only if it has not started; True when it never will run.

        Unlike :meth:`cancel`, a running job is left alone (not abandoned).
        """
        with self._lock:
            if self.state in ("new", "waiting", "queued"):
                self.state = "cancelled"
            return self.state == "cancelled"

    def cancel(self) -> bool:
        """Never run this hook if it has not started; True when it never will.

        A running hook cannot be stopped (a thread cannot be killed): it is
        marked abandoned, finishes on its own and its answer is ignored.
        """
        with self._lock:
            if self.state in ("new", "waiting", "queued"):
                self.state = "cancelled"
                never = True
            else:
                if self.state == "running":
                    self.state = "abandoned"
                never = self.state == "cancelled"
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        return never

    def _claim(self, state: JobState, new: JobState) -> bool:
        with self._lock:
            if self.state != state:
                return False
            self.state = new
            return True

    def _execute(self) -> None:
        """On a lane thread: start unless cancelled, run the hook, report."""
        if not self._claim("queued", "running"):
            return  # cancelled while it waited: it never runs
        result: Any = None
        error: BaseException | None = None
        try:
            self.on_start(self)
            result = run_hook(self.spec, self.ctx)
        except BaseException as exc:  # user code: any failure is the hook's error
            error = exc
        self._claim("running", "done")
        try:
            self.on_done(self, result, error)
        except Exception:
            log.exception("hook_answer_not_delivered", hook=self.spec.name)


class HookGate:
    """One session's admission to the shared hook lane for its hooks.

    Thread-safe: the worker submits from its dispatcher thread, a detached
    on_abort chain from lane and timer threads, and jobs leave from lane
    threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._waiting: deque[tuple[HookJob, Any]] = deque()

    @property
    def active(self) -> int:
        """Lane threads this session's hooks hold (or are queued for) right now."""
        with self._lock:
            return self._active

    def submit(self, job: HookJob, lane: Any, cap: int = DEFAULT_HOOK_CAP) -> None:
        """Run ``job`` on ``lane`` now, or once fewer than ``cap`` of this session's run."""
        with self._lock:
            if job.state != "new":
                raise RuntimeError(f"{job!r} was submitted twice")
            if self._active >= max(1, cap):
                # Drop jobs withdrawn while they waited (a session whose hooks hang
                # could otherwise pile them up, one per run).
                if any(waiting.state != "waiting" for waiting, _ in self._waiting):
                    self._waiting = deque(e for e in self._waiting if e[0].state == "waiting")
                job.state = "waiting"
                self._waiting.append((job, lane))
                return
            self._active += 1
            job.state = "queued"
        if not self._launch(job, lane):
            self._release()

    def _launch(self, job: HookJob, lane: Any) -> bool:
        """Hand ``job`` to the lane; False (and the job answered) when the lane refuses it.

        The caller then frees the slot. Answering here never launches the next
        waiting job itself, so a shut-down lane drains the waiting jobs in a
        loop (:meth:`_release`), not in a recursion one level per job.
        """
        try:
            lane.submit(self._run, job)
        except RuntimeError as exc:  # the lane is shut down: the hook cannot run
            if job._claim("queued", "done"):
                try:
                    job.on_done(job, None, exc)
                except Exception:
                    log.exception("hook_answer_not_delivered", hook=job.spec.name)
            return False
        return True

    def _run(self, job: HookJob) -> None:
        try:
            job._execute()
        finally:
            self._release()

    def _release(self) -> None:
        """A slot is free: give it to the next waiting job that was not cancelled."""
        while True:
            with self._lock:
                if not self._waiting:
                    self._active -= 1
                    return
                job, lane = self._waiting.popleft()
                if not job._claim("waiting", "queued"):
                    continue  # cancelled while waiting
            if self._launch(job, lane):
                return
            # Refused (the lane is shut down): the slot is free again, for the next one.


class DetachedChain:
    """Runs one event's remaining hooks when no actor is left to drive them.

    A worker that is stopping (its session closed) or has crashed still owes
    its run's ``on_abort`` hooks, but it will receive no more messages. This
    runs them the same way the worker would -- in order, each through the
    session's :class:`HookGate` with its deadline armed when it starts, on the
    runtime's timer -- chaining from one hook's completion to the next;
    nothing waits on any thread. A hook that fails or times out is logged and
    the next one still runs; results are ignored (``on_abort`` has none).
    """

    def __init__(
        self,
        event: HookEvent,
        specs: Sequence[HookSpec],
        ctx: Any,
        *,
        lane: Any,
        timer: Any,
        gate: HookGate,
        cap: int = DEFAULT_HOOK_CAP,
        default_timeout: float,
        start_timeout: float,
        log: Any,
    ) -> None:
        self.event = event
        self.specs = tuple(specs)
        self.ctx = ctx
        self.lane = lane
        self.timer = timer
        self.gate = gate
        self.cap = cap
        self.default_timeout = default_timeout
        self.start_timeout = start_timeout
        self.log = log
        self.ran: list[str] = []
        self._index = 0
        self._token: object | None = None
        self._job: HookJob | None = None
        self._wait: Any = None
        self._lock = threading.Lock()
        self._driving = False
        self._again = False

    def start(self) -> None:
        self._next()

    def _next(self) -> None:
        """Start the next hook -- iteratively.

        A hook can be answered before :meth:`_start_next` returns (the lane
        refuses it at shutdown and it is answered at once, on this thread), and
        the answer asks for the next hook: that request is noted and served by
        the loop here, so the stack does not grow one level per hook. The lock
        makes one thread the driver at a time; an answer on a lane thread that
        comes while another thread drives is served by that driver.
        """
        with self._lock:
            if self._driving:
                self._again = True
                return
            self._driving = True
        while True:
            try:
                self._start_next()
            except BaseException:
                with self._lock:
                    self._driving = self._again = False
                raise
            with self._lock:
                if not self._again:
                    self._driving = False
                    return
                self._again = False

    def _start_next(self) -> None:
        with self._lock:
            while self._index < len(self.specs) and not self.specs[self._index].matches(self.ctx):
                self._index += 1
            if self._index >= len(self.specs):
                return
            spec = self.specs[self._index]
            token = self._token = object()
            timeout = spec.timeout or self.default_timeout
            job = self._job = HookJob(
                spec,
                self.ctx,
                on_start=functools.partial(self._started, token, spec, timeout),
                on_done=functools.partial(self._answered, token, spec),
            )
        try:
            wait = self.timer.call_later(self.start_timeout, self._not_started, token, spec)
            with self._lock:
                self._wait = wait
            self.gate.submit(job, self.lane, self.cap)
        except RuntimeError as exc:  # the runtime is shutting down: nothing can run them
            self.log.warning(
                "detached_hooks_not_run", event=self.event.value, hook=spec.name, error=repr(exc)
            )

    def _started(self, token: object, spec: HookSpec, timeout: float, job: HookJob) -> None:
        with self._lock:
            wait, self._wait = self._wait, None
        if wait is not None:
            wait.cancel()
        job.arm(self.timer.call_later(timeout, self._timed_out, token, spec, timeout))

    def _settle(self, token: object) -> HookJob | None:
        with self._lock:
            if token is not self._token:
                return None
            self._token = None
            self._index += 1
            job, self._job = self._job, None
            wait, self._wait = self._wait, None
        if wait is not None:
            wait.cancel()
        if job is not None:
            job.settle()
        return job

    def _answered(
        self, token: object, spec: HookSpec, job: HookJob, result: Any, error: BaseException | None
    ) -> None:
        if self._settle(token) is None:
            return
        if error is not None:
            failure = raised_error(self.event, spec.name, error)
            self.log.warning("detached_hook_failed", error=str(failure))
        elif result is not NOT_APPLICABLE:
            self.ran.append(spec.name)
        self._next()

    def _timed_out(self, token: object, spec: HookSpec, timeout: float) -> None:
        job = self._settle(token)
        if job is None:
            return
        job.cancel()  # running: abandoned
        failure = HookTimeout(self.event, spec.name, f"did not answer within {timeout:g}s")
        self.log.warning("detached_hook_failed", error=str(failure))
        self._next()

    def _not_started(self, token: object, spec: HookSpec) -> None:
        with self._lock:
            job = self._job if token is self._token else None
        if job is None or not job.withdraw():
            return  # answered, or started: its own deadline governs it
        if self._settle(token) is None:
            return
        failure = HookTimeout(
            self.event, spec.name, f"did not start within {self.start_timeout:g}s"
        )
        self.log.warning("detached_hook_failed", error=str(failure))
        self._next()
