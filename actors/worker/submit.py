"""Phase: a submit becomes a run -- queueing, ``@path`` preparation, on_prompt_submit.

Also an accepted speculation's ``InsertItems``: its items enter history and
its turn goes on from where the speculation stopped, under the accept's scope
(``InsertItems.scope``) like a submit under its own.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable

from pydantic import ValidationError

from fore.actors.core.cancel import CancelScope
from fore.actors.core.handlers import handles
from fore.actors.filerefs.prepare import PreparedInput, prepare_plain, submit_segments
from fore.actors.output.interceptor import start_output
from fore.actors.worker.base import WorkerBase
from fore.actors.worker.hooks import (
    Cancel,
    ChainState,
    HookError,
    HookEvent,
    PromptContext,
    final_outcome,
)
from fore.actors.worker.interceptor import ContinueWith
from fore.actors.worker.run import Run
from fore.errors import WorkerBusy
from fore.messages.conversation import AssistantMessage, FileRef, UserMessage
from fore.messages.session import RunStarted, RunStatus, Submit, TurnFinished
from fore.messages.speculation import InsertItems


class SubmitPhase(WorkerBase):
    """Submits and accepted insertions start runs."""

    @handles(InsertItems)
    def _on_insert(self, message: InsertItems) -> str | None:
        """Accepted speculation: append its items; after a boundary, continue the turn."""
        current = self._run
        if current is not None and not current.ended:
            raise WorkerBusy(f"session {self.config.session_id} is busy with run {current.run_id}")
        if not message.continue_calls and not message.continue_turn:
            for item in message.items:
                self._append(None, item)
            reply = self.defer_reply() if self._writer is not None else None

            def inserted(problem: str | None) -> None:
                if problem is not None:
                    self._store_failed(problem, "the accepted speculation's items")
                if reply is not None:
                    reply.try_set(None)

            if not self._save_then(None, inserted):
                inserted(None)
            return None
        # Answered at once (the items are in history); the continuation's end
        # is its TurnFinished event.
        run = Run(
            run_id=f"run-{uuid.uuid4().hex[:12]}",
            start_len=len(self.state.history),
            max_turns=self.config.max_turns,
            started=True,
            scope=message.scope if message.scope is not None else CancelScope(),
        )
        if message.scope is not None:
            # The accept's caller may call it off at any time (Ctrl-C): as for a submit,
            # the worker hears of it on its control lane (_scope_cancelled).
            run.cancel_registration = message.scope.on_cancel(
                functools.partial(self.post_urgent, self._scope_cancelled, run)
            )
        self._run = run
        self._observe(run, None)
        if not message.continue_calls:
            # A speculation stopped by a budget, ending in tool results: the turn
            # goes on with an LLM request on the history as it now is.
            for item in message.items:
                self._append(run, item)
            return self._inserted(run, lambda: self._llm_turn(run))
        items = list(message.items)
        extra = tuple(message.continue_calls)
        last = max(
            (i for i, it in enumerate(items) if isinstance(it, AssistantMessage)), default=None
        )
        # The speculation removed the calls it did not run; give them back to the
        # answer that made them, after the calls that did run.
        if last is not None and not any(isinstance(it, UserMessage) for it in items[last:]):
            old = items[last]
            assert isinstance(old, AssistantMessage)
            items[last] = old.model_copy(update={"tool_calls": (*old.tool_calls, *extra)})
        else:
            last = len(items)
            items.append(AssistantMessage(text="", tool_calls=extra))
        for item in items:
            self._append(run, item)
        assistant = items[last]
        assert isinstance(assistant, AssistantMessage)
        run.assistant_index = run.start_len + last
        # Planned now: however the run ends from here (a cancel while its items are
        # saved included), each handed-over call gets a result.
        self._plan_calls(run, assistant, only=extra)
        return self._inserted(run, lambda: self._pre_tools(run, None))

    def _inserted(self, run: Run, go_on: Callable[[], None]) -> str | None:
        """The accepted items are in history: save them (a store), answer, continue the turn."""
        reply = self.defer_reply() if self._writer is not None else None

        def saved(problem: str | None) -> None:
            if problem is not None:
                self._store_failed(problem, "the accepted speculation's items")
            if reply is not None:
                reply.try_set(run.run_id)
            # Kept: the insert is answered whatever happened meanwhile, but its turn goes
            # on only if no cancel came while its items were saved (from saving, or
            # starting, it goes on as from starting).
            if run.live:
                self._emit(
                    RunStarted(session_id=self.config.session_id, run_id=run.run_id, text="")
                )
                if run.scope.cancel_called:
                    # The accept was called off before its turn could go on (Ctrl-C
                    # while its overlay was applied): the items stay, the turn does
                    # not go on. Its cancel, posted on the control lane, ends it --
                    # after this insert is answered, so the accept hears of the run
                    # before its end.
                    return
                go_on()

        if self._writer is not None:
            run.phase = "saving"
            if self._writer.save(saved):
                return None
        saved(None)
        return run.run_id

    @handles(Submit)
    def _on_submit(self, message: Submit) -> None:
        scope = message.scope if message.scope is not None else CancelScope()
        current = self._run
        busy = current is not None and not current.ended
        ending = current is not None and (current.closing)
        queue_behind = busy and ending
        interrupt = busy and not ending
        if busy and not scope.cancel_called:
            assert current is not None
            if queue_behind and current.successor is not None:
                raise WorkerBusy(
                    f"session {self.session_id} is ending run {current.run_id} and already "
                    "has a submit queued behind it"
                )
            if interrupt and current.phase != "paused":
                raise WorkerBusy(f"session {self.session_id} is busy with run {current.run_id}")
        output = start_output(message.output, self.config.interceptor)  # refuses, or None
        run = Run(
            run_id=f"run-{uuid.uuid4().hex[:12]}",
            start_len=len(self.state.history),
            max_turns=message.max_turns or self.config.max_turns,
            reply=self.defer_reply(),
            submit_id=message.submit_id,
            output=output,
            scope=scope,
        )
        if scope.cancel_called:
            # Cancelled on its way here (the scope is the record): it never starts.
            self._answer_unstarted(run, "cancelled", scope.reason or "cancelled")
            return
        if message.scope is not None:
            # Its sender may cancel it at any time: the worker hears of it on its
            # control lane (_scope_cancelled), ahead of the run's other mail.
            run.cancel_registration = scope.on_cancel(
                functools.partial(self.post_urgent, self._scope_cancelled, run)
            )
        if current is not None and busy:
            if queue_behind:
                # The current run is ending (its on_abort hooks are running, each
                # under a deadline): this submit starts as soon as it has ended.
                current.successor = (run, message)
                return
            # The paused run ends first (its on_abort included); this one starts after.
            self._interrupt(current, (run, message))
            return
        self._begin(run, message)

    def _begin(self, run: Run, message: Submit) -> None:
        run.start_len = len(self.state.history)
        if run.scope.cancel_called:
            # Cancelled while it waited for the run before it to end: it never started.
            self._answer_unstarted(run, "cancelled", run.scope.reason or "cancelled")
            return
        self._run = run
        self._observe(run, message)
        self.state.output = run.output  # structured output: read by the OutputInterceptor
        run.phase = "preparing"
        preparer = self.config.preparer
        segments = submit_segments(message)
        if preparer is None or not any(isinstance(seg, FileRef) for seg in segments):
            # Nothing to resolve: no file access, so no hop to the blocking lane.
            self._prepared(run, prepare_plain(message))
        else:
            # Under the run's scope: a run cancelled while its input waits for
            # the lane never reads its files, and one cancelled while they are
            # read never hears back (its ending began; nothing may follow it).
            self.run_blocking(
                preparer,
                message,
                then=lambda prepared: self._prepared(run, prepared),
                on_error=lambda exc: self._fail(
                    run, f"preparing the input failed: {exc!r}", kind="input"
                ),
                scope=run.scope,
            )

    def _answer_unstarted(self, run: Run, status: RunStatus, reason: str) -> None:
        """End a submit that never started (nothing of it in history, no hooks, no on_abort).

        It is not the worker's current run, so nothing of the current run --
        the interceptor's state -- is touched. Its scope is cancelled (and so
        lets go of the worker's callback).
        """
        run.call_off(reason)
        run.phase = "ended"
        result = self._result(run, status, reason)
        self._emit(TurnFinished(session_id=self.config.session_id, result=result))
        reply, run.reply = run.reply, None
        if reply is not None:
            reply.try_set(result)

    def _scope_cancelled(self, run: Run, reason: str) -> None:
        """The run's scope was cancelled by its sender (``Session.cancel``, a timed-out submit).

        Posted on the control lane by the scope's callback. The current run
        ends as :class:`~messages.session.CancelRun` ends it; a submit queued
        behind an ending run never starts (``_begin`` finds its scope
        cancelled); a run whose ending began, or that ended, keeps its end.
        """
        run.cancel_registration = None  # it ran
        # The run queued behind the current one never starts (_begin checks its scope);
        # one whose ending began, or that ended, keeps its end.
        if run is self._run and run.live:
            self._cancel_run(run, reason)

    def _submit_cancelled(self) -> None:
        try:
            self.config.interceptor.on_submit_cancelled()
        except Exception:
            self.log.exception("interceptor_on_submit_cancelled_failed")

    def _prepared(self, run: Run, prepared: PreparedInput) -> None:
        # Live: straight from _begin, or from the preparer under the run's scope,
        # which any ending of a run that has not started cancels first.
        for level, text, source in prepared.alerts:
            self.alert(level, text, source)
        self._emit(
            RunStarted(session_id=self.config.session_id, run_id=run.run_id, text=prepared.text)
        )
        user = UserMessage(text=prepared.text, segments=prepared.segments)
        interceptor = self.config.interceptor
        verdict = interceptor.on_prompt_submit(user)
        if isinstance(verdict, Cancel):
            self._complete(run, "rejected", verdict.reason or "submit cancelled")
            return
        extras = verdict.items if isinstance(verdict, ContinueWith) else ()
        ctx = PromptContext(
            session_id=self.config.session_id,
            purpose=self.config.purpose,
            text=user.text,
            segments=user.segments,
        )
        run.phase = "on_prompt_submit"

        def done(state: ChainState) -> None:
            outcome = final_outcome(state)
            if isinstance(outcome, Cancel):
                # The run never started (nothing entered history): no on_abort.
                self._submit_cancelled()
                self._complete(run, "rejected", outcome.reason or "submit cancelled by a hook")
                return
            final = user
            if ctx.text != user.text or tuple(ctx.segments) != user.segments:
                # Checked as each hook answered (edit_problem); built validated.
                try:
                    final = UserMessage(text=ctx.text, segments=tuple(ctx.segments))
                except ValidationError as exc:
                    hook = state.ran[-1] if state.ran else "on_prompt_submit"
                    error = HookError(
                        HookEvent.ON_PROMPT_SUBMIT,
                        hook,
                        f"left the prompt invalid ({exc.errors()[0]['msg']})",
                        kind="invalid_edit",
                    )
                    self._hook_failed(run, error)
                    return
            run.started = True
            self._append(run, final)
            # Right after the user message: the resolved ``@path`` files, then
            # what the interceptor added. Held by this closure only, so a
            # submit that is cancelled or rejected leaves nothing behind.
            for item in (*prepared.items, *extras):
                self._append(run, item)
            self._llm_turn(run)

        self._chain(run, HookEvent.ON_PROMPT_SUBMIT, ctx, done)
