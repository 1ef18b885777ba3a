"""Phase: how a run ends -- cancel, abort, failure, finish, the report.

Every early ending goes through :meth:`EndingPhase._finish` (on_abort once,
then :meth:`EndingPhase._complete`); the ending that began first decides the
run's status. With a session store the end is written ahead of its report
(``_save_then``/``_saved``). Also the detached on_abort a stopping or failed
worker leaves behind, and the fork snapshot a completed main run emits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from fore.actors.core.handlers import handles
from fore.actors.worker.base import WorkerBase
from fore.actors.worker.hookrun import DetachedChain
from fore.actors.worker.hooks import AbortContext, ChainState, HookError, HookEvent
from fore.actors.worker.run import Call, Run, fits, ignore_problem
from fore.actors.worker.run_state import Ending
from fore.actors.worker.snapshot import snapshot_version
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import SystemMessage, ToolResult
from fore.messages.session import (
    CancelRun,
    ErrorKind,
    HookFailure,
    RunStatus,
    Submit,
    TurnFinished,
    TurnResult,
)
from fore.messages.speculation import ForkSnapshot, SnapshotTaken


class EndingPhase(WorkerBase):
    """Cancels, aborts, failures and the run's final report."""

    def _interrupt(self, run: Run, successor: tuple[Run, Submit]) -> None:
        """A new submit supersedes a paused run: close its open calls, end it, then start.

        The paused run ends like any interrupted run -- its on_abort hooks run
        once, and its TurnFinished comes after them -- and only then does the
        new submit start, so the two runs' hooks and items never interleave.
        """
        run.successor = successor
        self._close_open_calls(run, "Interrupted by user")
        self._finish(run, "interrupted", "superseded by a new submit", abort=True)

    @handles(CancelRun)
    def _on_cancel(self, message: CancelRun) -> bool:
        """Cancel what the worker has; whether it cancelled anything (see :class:`CancelRun`).

        Nothing is remembered for a ``submit_id`` the worker does not have: a
        cancel that may come before its submit goes through the submit's scope.
        """
        run = self._run
        if run is None or run.ended:
            return False
        queued = run.successor[0] if run.successor is not None else None
        sid = message.submit_id
        if sid is not None and run.submit_id != sid:
            # Not the current run's: the submit queued behind it, or none the worker has.
            if queued is not None and queued.submit_id == sid:
                return queued.call_off(message.reason)  # it never starts
            return False
        if run.closing:
            # Already ending (its on_abort hooks are running, each with a deadline):
            # nothing left to cancel but a submit queued behind it.
            if sid is None and queued is not None:
                return queued.call_off(message.reason)  # it never starts
            return False
        self._cancel_run(run, message.reason)
        return True

    def _cancel_run(self, run: Run, reason: str) -> None:
        """End the live ``run`` as cancelled: its work stopped, its open calls closed, on_abort."""
        self._cancel_inflight(run, reason)
        self._close_open_calls(run, f"Cancelled: {reason}")
        self._finish(run, "cancelled", reason, abort=True)

    def _cancel_inflight(self, run: Run, reason: str) -> None:
        """Stop what is under way: the hook in flight (never started ones never
        run), the LLM request, the tool batch."""
        self._chain_token = None
        chain, self._chain_run = self._chain_run, None
        if chain is not None:
            if chain.job is not None:
                chain.job.cancel()
            if chain.wait_timer is not None:
                chain.wait_timer.cancel()
        # The LLM request and the tool batch carry the run's scope: cancelling it
        # reaches them wherever they are -- running, or not arrived yet (then they
        # never start).
        run.call_off(reason)
        run.llm_request_id = None
        run.batch_id = None

    def _close_call(self, item: Call, text: str) -> None:
        item.status = "done"
        item.outcome = "cancelled"
        item.post_done = True  # synthetic: nothing for post hooks to check
        item.result = ToolResult(
            call_id=item.call.id, name=item.call.name, output=text, is_error=True
        )

    def _close_open_calls(self, run: Run, text: str, withheld: str | None = None) -> None:
        """Give every call of the current answer a result and commit them.

        Calls that never ran (or are still running) get ``text``. A call that
        ran but whose result has not passed its post_tool_call hooks gets
        ``withheld`` instead -- those hooks are where results are masked and
        checked, so a raw result must never reach history around them.
        """
        if withheld is None:
            withheld = (
                f"{text} (the call ran, but its result was withheld: the run ended before "
                "its post_tool_call hooks had passed it)"
            )
        for item in run.calls:
            if item.status == "removed":
                continue
            if item.result is None or item.status == "running":
                self._close_call(item, text)
            elif not item.post_done and not item.committed:
                self._close_call(item, withheld)
            if not item.committed:
                item.committed = True
                assert item.result is not None
                result = item.result
                if self.config.blob_store is not None and not fits(
                    result.output, self.config.blob_limits.inline_threshold
                ):
                    result = result.model_copy(
                        update={"output": self._truncated(result.output, "the run ended early")}
                    )
                self._append(run, result, pinned=item.pinned)
        run.calls = []
        self._flush_pending_messages(run)

    def _abort_calls(self, run: Run, status: RunStatus, reason: str) -> None:
        self._cancel_inflight(run, reason)
        self._close_open_calls(run, f"Aborted: {reason}")
        self._finish(run, status, reason, abort=True)

    def _hook_failed(self, run: Run, error: HookError) -> None:
        self._fail(run, str(error), kind="hook", failure=error.failure())

    def _fail(
        self,
        run: Run,
        error: str,
        *,
        kind: ErrorKind = "worker",
        failure: HookFailure | None = None,
    ) -> None:
        # Only for a live run: its failures come from hook chains (the chain driver
        # drops the outcome of a chain whose run is no longer live) and from the
        # @path preparer (under the run's scope, which every ending cancels first).
        run.error_kind = kind
        run.hook_failure = failure
        self._cancel_inflight(run, error)
        self._close_open_calls(run, f"Not run: {error}", withheld=f"Aborted: {error}")
        self.alert(AlertLevel.ERROR, error, "hooks" if kind == "hook" else "worker")
        self._finish(run, "error", error, abort=True)

    def _finish(self, run: Run, status: RunStatus, error: str | None, *, abort: bool) -> None:
        if run.ended:
            return
        if not abort or run.closing:
            self._complete(run, status, error)
            return
        if not run.started:
            # Nothing of it entered history: it never started, so no on_abort
            # (see messages.session.RunStatus); drop what was staged for it.
            self._cancel_inflight(run, error or status)
            self._submit_cancelled()
            self._complete(run, status, error)
            return
        run.begin_ending(status, error)
        run.call_off(error or status)  # whatever of it is still out is called off
        ctx = AbortContext(
            session_id=self.config.session_id,
            purpose=self.config.purpose,
            reason=error or status,
            status=status,
        )
        try:
            self.config.interceptor.on_abort(ctx)
        except Exception:
            self.log.exception("interceptor_on_abort_failed")

        def done(state: ChainState) -> None:
            self._complete(run, status, error)

        self._chain(run, HookEvent.ON_ABORT, ctx, done, abort_chain=True)

    def _snapshot(self, run: Run) -> ForkSnapshot:
        """What the last main request actually sent, plus the answer it got.

        Forks (suggestion, speculation, pipelined) replay this prefix byte for
        byte so the provider's prefix cache hits. It is taken from the request
        as sent -- after the interceptors and ``pre_llm_request`` hooks edited
        their copy -- not rebuilt from history, which may differ from it.
        """
        ctx = run.llm_ctx
        assert ctx is not None
        sent = list(ctx.messages)
        system: str | None = None
        first = sent[0] if sent else None
        if self.config.system_prompt and isinstance(first, SystemMessage):
            system = first.text
            sent.pop(0)
        tools = tuple(self.config.interceptor.fork_tools(ctx.tools))
        return ForkSnapshot(
            session_id=self.config.session_id,
            version=snapshot_version(system, tools),
            system_prompt=system,
            tools=tools,
            model_name=ctx.model_name,
            history=(*sent, *self.state.history[run.sent_history_len :]),
        )

    def _result(self, run: Run, status: RunStatus, error: str | None) -> TurnResult:
        output, output_error = (
            (None, None) if run.output is None else run.output.outcome(status, error)
        )
        return TurnResult(
            run_id=run.run_id,
            session_id=self.config.session_id,
            status=status,
            items=tuple(self.state.history[run.start_len :]),
            error=error,
            error_kind=run.error_kind if status == "error" else None,
            hook_failure=run.hook_failure if status == "error" else None,
            turns=run.turns,
            usage=run.usage,
            boundary=run.boundary,
            usage_limit=run.usage_limit if status == "usage_limit" else None,
            output=output,
            output_error=output_error,
        )

    def _complete(self, run: Run, status: RunStatus, error: str | None) -> None:
        if run.ended:
            return
        if run.end_save is None and self._save_then(run, functools.partial(self._saved, run)):
            # Write-ahead: reported once its items are in the session store. Until
            # then the run is ending, and this status is the one it ends with.
            run.save_end(run.ending or Ending(status, error))
            return
        final = run.final  # the ending that began first decides how the run ended
        if final is not None:
            status, error = final.status, final.error
        run.phase = "ended"
        run.scope.close()  # nothing of it is out any more: its callbacks are dropped
        self.state.output = None  # a structured run's contract never outlives its run
        try:
            self.config.interceptor.on_run_end(status)
        except Exception:
            self.log.exception("interceptor_on_run_end_failed")
        result = self._result(run, status, error)
        if run.span is not None:
            run.span.end(result)
        if status == "completed" and self.config.purpose == "main" and run.llm_ctx is not None:
            self._emit(
                SnapshotTaken(session_id=self.config.session_id, snapshot=self._snapshot(run))
            )
        self._emit(TurnFinished(session_id=self.config.session_id, result=result))
        reply, run.reply = run.reply, None
        if reply is not None:
            reply.try_set(result)
        if self._run is run:
            self._run = None
        successor, run.successor = run.successor, None
        if successor is not None:
            self._begin(*successor)

    def _abort_detached(self, run: Run, status: RunStatus, reason: str) -> None:
        """Run what is left of ``run``'s on_abort when no message will reach this actor again.

        If on_abort has not started, it starts now (the interceptor inline,
        the hooks detached). If its chain is under way, a hook in flight that
        has started finishes on its own and the hooks after it run detached; a
        hook that had not started yet is withdrawn and runs detached instead:
        each hook runs exactly once either way. A run that never started
        (nothing of it in history) gets no on_abort.
        """
        hooks = self.config.hooks
        chain = self._chain_run
        if run.end_save is not None:
            return  # it ended; only its report waits for the store
        if run.aborted:
            if chain is None or chain.run is not run or chain.state.event is not HookEvent.ON_ABORT:
                return
            job = chain.job
            first = chain.state.index
            if job is not None and not job.withdraw():
                first += 1  # it started (or finished): it is not run again
            specs = chain.state.specs[first:]
            ctx = chain.state.ctx
        elif not run.started:
            self._submit_cancelled()
            return
        else:
            run.begin_ending(status, reason)
            ctx = AbortContext(
                session_id=self.config.session_id,
                purpose=self.config.purpose,
                reason=reason,
                status=status,
            )
            try:
                self.config.interceptor.on_abort(ctx)
            except Exception:
                self.log.exception("interceptor_on_abort_failed")
            specs = hooks.chain(HookEvent.ON_ABORT)
        if specs:
            default_timeout, start_timeout, cap = self._hooks_config()
            DetachedChain(
                HookEvent.ON_ABORT,
                specs,
                ctx,
                lane=self.system.hooks,
                timer=self.system.timer,
                gate=self.state.hook_gate,
                cap=cap,
                default_timeout=default_timeout,
                start_timeout=start_timeout,
                log=self.log,
            ).start()

    def _save_then(self, run: Run | None, then: Callable[[str | None], None]) -> bool:
        """Write history so far to the store, then ``then(problem)``; False: nothing to write."""
        writer = self._writer
        if writer is None:
            return False
        # A run's end is saved once (_complete: then it is closing, or it ended),
        # so its usage is handed to the store once.
        usage = None if run is None else run.usage
        if self._stopping:
            # The session is closing under the run: its end is reported now, and
            # its items still go to the store (closing the session waits for it).
            writer.save(ignore_problem, usage=usage)
            return False
        return writer.save(then, usage=usage)

    def _store_failed(self, problem: str, what: str) -> str:
        text = (
            f"the session store could not save {what} ({problem}); its items stay in this "
            "process's memory and are written with the next save that succeeds"
        )
        self.alert(AlertLevel.ERROR, text, "store")
        return text

    def _saved(self, run: Run, problem: str | None) -> None:
        """The run's end is in the store (or could not be written): report it now."""
        if run.ended:
            return
        end = run.final or Ending("completed", None)
        if problem is not None:
            end = Ending("error", self._store_failed(problem, "this turn"))
            run.save_end(end)
            run.error_kind = "store"
        self._complete(run, end.status, end.error)
