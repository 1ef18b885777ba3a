"""The hook-chain driver: runs one event's hooks on the hook lane, one at a time.

It owns the opening every continuation used to copy: :meth:`ChainDriver._on_outcome`
runs a phase's continuation only if the run is still live and no hook failed
(a failure ends the run as a hook error). Each hook runs under its own
deadline, armed when it starts; continuations run through
:meth:`ChainDriver._then`, never nested, so the stack stays flat however many
calls and hooks follow each other.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fore.actors.worker.base import WorkerBase
from fore.actors.worker.hookrun import HookJob
from fore.actors.worker.hooks import (
    NOT_APPLICABLE,
    Abort,
    Cancel,
    ChainState,
    HookError,
    HookEvent,
    HookSpec,
    HookTimeout,
    Skip,
    advance,
    edit_problem,
    next_hook,
    outcome_problem,
    raised_error,
)
from fore.actors.worker.run import ChainRun, Run
from fore.messages.alerts import AlertLevel


class ChainDriver(WorkerBase):
    """Runs hook chains and their continuations."""

    def _chain(
        self,
        run: Run,
        event: HookEvent,
        ctx: Any,
        done: Callable[[ChainState], None],
        *,
        start: int = 0,
        abort_chain: bool = False,
        specs: tuple[HookSpec, ...] | None = None,
        give_errors: bool = False,
    ) -> None:
        """Run ``event``'s hooks from index ``start``; ``done(state)`` gets the outcome.

        ``done`` runs only if the run is still live when the chain ends, and a
        hook that failed ends the run as a hook error instead (see
        :meth:`_on_outcome`) -- the opening every continuation shares, kept
        here once. ``give_errors``: ``done`` gets a failed chain's state too
        (the approval job: a failure skips the call). ``abort_chain`` (on_abort,
        which runs on an ending run): ``done`` always runs.

        ``specs``: run these instead of the session's hooks (the approval job).

        Each hook runs on the hook lane (through the session's
        :class:`~actors.worker.hookrun.HookGate`) with its own timeout, armed
        when it starts running; only the newest chain step is current, so
        answers that arrive after a timeout or a cancel are ignored. An ending
        run starts no chain but its on_abort.
        """
        if not abort_chain and not run.live:
            return  # kept: no user hook runs for a run whose ending began (but on_abort)
        if not abort_chain:
            done = self._on_outcome(run, done, give_errors=give_errors)
        chain = self.config.hooks.chain(event) if specs is None else specs
        state = ChainState(event, chain, ctx, index=start)
        self._chain_step(ChainRun(run, state, done, abort_chain))

    def _on_outcome(
        self, run: Run, then: Callable[[ChainState], None], *, give_errors: bool = False
    ) -> Callable[[ChainState], None]:
        """``then`` as a chain's continuation: it runs only if the run is live and no hook failed.

        Every step after a chain of the run's own hooks opens the same way: a
        run that ended, or began its ending, while the hooks ran drops their
        outcome; a hook that failed ends the run as a hook error (a post hook's
        result is withheld then, never committed raw) -- unless ``give_errors``
        (the approval chain: a failure skips the call). on_abort (runs on an
        ending run) takes its ``done`` as it is.
        """

        def done(state: ChainState) -> None:
            if not run.live:
                return  # kept: hook answers come from the hook lane, outside the scope
            if state.error is not None and not give_errors:
                self._hook_failed(run, state.error)
                return
            then(state)

        return done

    def _chain_step(self, chain: ChainRun) -> None:
        if chain.run.ended or (not chain.abort_chain and chain.run.aborted):
            return
        state = chain.state
        spec = next_hook(state)
        if spec is None:
            self._chain_done(chain)
            return
        default_timeout, start_timeout, cap = self._hooks_config()
        timeout = spec.timeout or default_timeout
        chain.spec = spec
        chain.token = token = object()
        self._chain_run = chain
        self._chain_token = token
        job = HookJob(
            spec,  # the hook's condition, then the hook: user code, under the deadline
            state.ctx,
            on_start=functools.partial(self._hook_started, chain, token, timeout),
            on_done=functools.partial(self._hook_finished, chain, token),
        )
        chain.job = job
        chain.wait_timer = self.call_after(
            start_timeout, self._hook_not_started, chain, token, start_timeout
        )
        self.state.hook_gate.submit(job, self.system.hooks, cap)

    def _hook_started(self, chain: ChainRun, token: object, timeout: float, job: HookJob) -> None:
        """On the lane thread, right before the hook runs: its deadline starts now."""
        wait = chain.wait_timer
        if wait is not None:
            wait.cancel()
        job.arm(
            self.system.timer.call_later(
                timeout, self.post, self._hook_timed_out, chain, token, timeout
            )
        )

    def _hook_finished(
        self,
        chain: ChainRun,
        token: object,
        job: HookJob,
        result: Any,
        error: BaseException | None,
    ) -> None:
        """On the lane thread: hand the hook's answer to the actor."""
        if not self.post(self._hook_settled, chain, token, result, error) and error is not None:
            self.log.warning("hook_error_after_exit", hook=job.spec.name, error=repr(error))

    def _hook_settled(
        self, chain: ChainRun, token: object, result: Any, error: BaseException | None
    ) -> None:
        if error is None:
            self._hook_answered(chain, token, result)
        else:
            self._hook_raised(chain, token, error)

    def _chain_done(self, chain: ChainRun) -> None:
        if self._chain_run is chain:
            self._chain_run = None  # only a chain in flight is kept (see _abort_detached)
        self._then(chain.done, chain.state)

    def _then(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run the continuation ``fn(*args)`` -- iteratively, never nested in another.

        A chain with no hook to run (none registered, or none whose ``tools``
        pattern matches) ends at once, and its continuation starts the next
        step: the next call's chain, the next post hook. Called directly, an
        answer with N tool calls would nest N chains on the stack (a
        ``RecursionError`` at about 165 calls, and a crashed worker). A
        continuation that arrives while another one runs is queued instead and
        run by the outermost call when the current one returns, so the stack
        stays flat however many calls, hooks or steps follow. Every caller of
        a chain returns right after starting it, so the order is unchanged.
        """
        self._continuations.append((fn, args))
        if self._draining:
            return
        self._draining = True
        try:
            while self._continuations:
                step, step_args = self._continuations.popleft()
                step(*step_args)
        finally:
            self._draining = False
            self._continuations.clear()  # non-empty only if a step raised (the actor fails)

    def _hook_current(self, chain: ChainRun, token: object) -> bool:
        if token is not self._chain_token:
            return False  # timed out already, or the run was cancelled meanwhile
        self._chain_token = None
        if chain.job is not None:
            chain.job.settle()
        if chain.wait_timer is not None:
            chain.wait_timer.cancel()
            chain.wait_timer = None
        return True

    def _hook_answered(self, chain: ChainRun, token: object, result: Any) -> None:
        if not self._hook_current(chain, token):
            return
        spec = chain.spec
        assert spec is not None
        state = chain.state
        go_on = advance(state, spec, result)
        if result is not NOT_APPLICABLE and state.error is None:
            problem = None
            # A call that will not run, or a submit / request that is cancelled,
            # uses nothing the hook left.
            if not isinstance(state.outcome, Skip | Cancel) and not (
                state.event is HookEvent.PRE_TOOL_CALL and isinstance(state.outcome, Abort)
            ):
                problem = edit_problem(state.event, state.ctx)
            kind: Any = (
                "invalid_arguments" if state.event is HookEvent.PRE_TOOL_CALL else "invalid_edit"
            )
            if problem is None and not go_on:
                problem = outcome_problem(state.event, state.outcome)
                kind = "invalid_result"
            if problem is not None:
                state.error = HookError(state.event, spec.name, problem, kind=kind)
                go_on = False
        if go_on:
            self._chain_step(chain)
        else:
            self._chain_done(chain)

    def _hook_raised(self, chain: ChainRun, token: object, exc: BaseException) -> None:
        if not self._hook_current(chain, token):
            return
        assert chain.spec is not None
        self._chain_failed(chain, raised_error(chain.state.event, chain.spec.name, exc))

    def _hook_timed_out(self, chain: ChainRun, token: object, timeout: float) -> None:
        if not self._hook_current(chain, token):
            return
        assert chain.spec is not None
        if chain.job is not None:
            chain.job.cancel()  # it is running: abandoned (its answer is ignored)
        self._chain_failed(
            chain,
            HookTimeout(chain.state.event, chain.spec.name, f"did not answer within {timeout:g}s"),
        )

    def _hook_not_started(self, chain: ChainRun, token: object, start_timeout: float) -> None:
        """The hook is still waiting for a lane thread after ``start_timeout``."""
        if token is not self._chain_token:
            return
        if chain.job is not None and not chain.job.withdraw():
            return  # it has started: its own deadline governs it now
        self._hook_current(chain, token)
        assert chain.spec is not None
        self._chain_failed(
            chain,
            HookTimeout(
                chain.state.event,
                chain.spec.name,
                f"did not start within {start_timeout:g}s (the blocking lane is busy; "
                "it was withdrawn and never runs)",
            ),
        )

    def _chain_failed(self, chain: ChainRun, error: HookError) -> None:
        """A hook failed: the chain stops with ``error`` -- except on_abort, which goes on.

        on_abort hooks are cleanup: one failing must not keep the next from
        running (the detached chain behaves the same), so the failure is
        logged and raised as an alert, and the chain moves on.
        """
        if chain.abort_chain:
            self.log.warning("on_abort_hook_failed", error=str(error))
            self.alert(AlertLevel.WARN, str(error), "hooks")
            chain.state.index += 1
            self._chain_step(chain)
            return
        chain.state.error = error
        self._chain_done(chain)
