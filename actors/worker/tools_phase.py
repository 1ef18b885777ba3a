"""Phase: the answer's tool calls -- pre_tool_call checks, approval, the batch.

Each call passes the interceptor, the session's approval policy
(:mod:`~actors.worker.approval`) and the pre_tool_call hooks, one after the
other; the approved calls run as one batch in the shared tool pool, whose
results come back as messages. A speculation stops at its boundary here.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence

from fore.actors.core.handlers import handles
from fore.actors.worker.approval import refusal
from fore.actors.worker.base import WorkerBase
from fore.actors.worker.hooks import (
    Abort,
    ChainState,
    Continue,
    HookEvent,
    Pause,
    Skip,
    ToolCallContext,
    ToolMeta,
    final_outcome,
)
from fore.actors.worker.interceptor import AnswerCall, Boundary
from fore.actors.worker.run import (
    Call,
    Run,
    bad_arguments_text,
    match_results,
    over_cap_text,
    serials,
)
from fore.messages.alerts import AlertLevel
from fore.messages.blobs import Inline
from fore.messages.conversation import AssistantMessage, ToolCall, ToolResult
from fore.messages.session import ToolFinished, ToolStarted
from fore.messages.tools import RunToolBatch, ToolBatchFinished, ToolCallFinished, ToolCallStarted


class ToolsPhase(WorkerBase):
    """Checks, approves and runs an answer's tool calls."""

    def _start_tools(self, run: Run, assistant: AssistantMessage) -> None:
        self._plan_calls(run, assistant)
        self._pre_tools(run, None)

    def _plan_calls(
        self, run: Run, assistant: AssistantMessage, only: Sequence[ToolCall] | None = None
    ) -> None:
        """``run.calls``: the answer's calls (``only`` these), each pending its checks.

        From here on an ending of the run gives each a result, so history stays
        well paired whenever the run ends.
        """
        registry = self.config.tools
        calls = assistant.tool_calls
        wanted = None if only is None else {c.id for c in only}
        cap = self.config.max_batch_calls
        run.calls = []
        for index, call in enumerate(calls):
            if wanted is not None and call.id not in wanted:
                continue
            # A call past the cap, or whose arguments are unusable, is never run nor
            # shown to the hooks: its error result tells the model why.
            refusal: tuple[str, str] | None = None
            if index >= cap:  # by position in the answer, also when continuing after a boundary
                refusal = over_cap_text(len(calls), cap), "refused"
            elif call.arguments_error is not None:
                refusal = bad_arguments_text(call), "invalid"
            tool = registry.get(call.name)
            meta = ToolMeta(
                description=getattr(tool, "description", ""),
                exclusive=bool(getattr(tool, "exclusive", False)),
                index=index,
                batch_size=len(calls),
                turn=run.turns,
            )
            ctx = ToolCallContext(
                session_id=self.config.session_id,
                purpose=self.config.purpose,
                call_id=call.id,
                name=call.name,
                arguments={} if refusal is not None else copy.deepcopy(dict(call.arguments)),
                meta=meta,
                tool=tool,
            )
            item = Call(call=call, ctx=ctx)
            if refusal is not None:
                self._synthetic(item, *refusal)
            run.calls.append(item)
        run.index = 0

    def _pre_tools(self, run: Run, resume_from: int | None) -> None:
        """Evaluate pre_tool_call (interceptor, then hooks) per call, in order."""
        while run.index < len(run.calls):
            item = run.calls[run.index]
            if item.status != "pending":
                run.index += 1
                continue
            start = 0
            if resume_from is not None:
                start, resume_from = resume_from, None
            else:
                verdict = self.config.interceptor.pre_tool_call(item.ctx)
                if isinstance(verdict, Boundary):
                    self._boundary(run, run.index, verdict.reason, verdict.tool or item.call.name)
                    return
                if isinstance(verdict, Skip):
                    self._skip(item, verdict.reason)
                    run.index += 1
                    continue
                if isinstance(verdict, AnswerCall):  # Fore's own call (final_answer)
                    self._synthetic(item, verdict.output, "answered", is_error=verdict.is_error)
                    item.explicit = Inline(text=verdict.output)  # the model must read it all
                    run.index += 1
                    continue
                if isinstance(verdict, Abort):
                    self._abort_calls(run, "aborted", verdict.reason or "aborted by policy")
                    return
                if isinstance(verdict, Pause):
                    self._pause(
                        run, verdict.reason, f"pre_tool_call {item.call.name}", ("pre_tool", 0)
                    )
                    return
                if self.config.strict_tool_hooks:
                    # What the gate approved: a hook that changes it is gated again.
                    item.gate_args = copy.deepcopy(item.ctx.arguments)
                if self._approval_started(run, item):
                    return  # the session's approval policy first (below)
            self._pre_tool_hooks(run, item, start)
            return
        self._run_tools(run)

    def _pre_tool_hooks(self, run: Run, item: Call, start: int) -> None:
        """The public ``pre_tool_call`` hooks of the current call, from hook ``start``."""
        run.phase = "pre_tool_call"
        done = functools.partial(self._after_pre_tool, run, item, run.index)
        self._chain(run, HookEvent.PRE_TOOL_CALL, item.ctx, done, start=start)

    def _after_pre_tool(self, run: Run, item: Call, index: int, state: ChainState) -> None:
        outcome = final_outcome(state)
        if self.config.strict_tool_hooks:
            hook = state.ran[-1] if state.ran else "pre_tool_call"
            if not isinstance(outcome, Continue):
                # Speculation: a hook that would not simply allow the call is a boundary.
                self._boundary(
                    run, index, f"hook {hook} returned {type(outcome).__name__}", item.call.name
                )
                return
            approved = item.gate_args if item.gate_args is not None else item.call.arguments
            if item.ctx.arguments != approved:
                # A hook rewrote what the gate approved: the gate decides again on
                # the arguments that would run. A hook must never make a
                # speculation run a call the gate did not approve.
                verdict = self.config.interceptor.pre_tool_call(item.ctx)
                if not isinstance(verdict, Continue):
                    why = getattr(verdict, "reason", "")
                    self._boundary(
                        run,
                        index,
                        f"hook {hook} changed the arguments and the gate answered "
                        f"{type(verdict).__name__}" + (f": {why}" if why else ""),
                        item.call.name,
                    )
                    return
        if isinstance(outcome, Skip):
            self._skip(item, outcome.reason)
        elif isinstance(outcome, Abort):
            self._abort_calls(run, "aborted", outcome.reason or "aborted by a pre_tool_call hook")
            return
        elif isinstance(outcome, Pause):
            assert state.stopped_at is not None
            self._pause(
                run,
                outcome.reason,
                f"pre_tool_call {item.call.name}",
                ("pre_tool", state.stopped_at + 1),
            )
            return
        else:
            if self._approval_started(run, item, again=True):
                return  # a hook rewrote the arguments the person approved: judged again
            item.status = "approved"
            item.executed = self._executed_call(item)
        run.index = index + 1
        self._pre_tools(run, None)

    def _approval_started(self, run: Run, item: Call, *, again: bool = False) -> bool:
        """Start judging ``item`` under the session's approval policy; False: nothing to judge.

        Before the public hooks (``again=False``), and after them when a hook
        rewrote the arguments that were judged (``again=True``). Calls that
        cannot need asking pass inline; the rest are judged on the hook lane
        (:class:`~actors.worker.approval.LiveApproval.decide`), where a
        refusal -- or any failure to get an answer -- skips the call.
        """
        approval = self.state.approval
        if approval is None or self.config.purpose == "speculation":
            return False
        if again and (item.approval_args is None or item.approval_args == item.ctx.arguments):
            return False
        item.approval_args = copy.deepcopy(item.ctx.arguments)
        if approval.allows_at_once(item.ctx):
            return False
        run.phase = "approval"
        index = run.index

        def done(state: ChainState) -> None:
            outcome = final_outcome(state)
            if state.error is not None:
                why = refusal(state.error, approval.timeout_s)
                self.alert(AlertLevel.WARN, f"{item.call.name} was not run: {why}", "approval")
                outcome = Skip(why)
            if isinstance(outcome, Skip):
                self._skip(item, outcome.reason)
            elif not again:
                self._pre_tool_hooks(run, item, 0)
                return
            else:
                item.status = "approved"
                item.executed = self._executed_call(item)
            run.index = index + 1
            self._pre_tools(run, None)

        self._chain(
            run, HookEvent.PRE_TOOL_CALL, item.ctx, done, specs=(approval.spec,), give_errors=True
        )
        return True

    @staticmethod
    def _executed_call(item: Call) -> ToolCall:
        """The call to run: never the hooks' id or name (read-only), only their arguments.

        The hooks' arguments were validated as each hook answered; unchanged
        arguments need no new message.
        """
        if item.ctx.arguments == item.call.arguments:
            return item.call
        return ToolCall(id=item.call.id, name=item.call.name, arguments=item.ctx.arguments)

    def _skip(self, item: Call, reason: str) -> None:
        self._synthetic(
            item, f"Skipped: {reason or 'a pre_tool_call hook skipped this call'}", "skipped"
        )

    @staticmethod
    def _synthetic(item: Call, output: str, outcome: str, *, is_error: bool = True) -> None:
        """The call does not run: ``output`` is its (error) result."""
        item.status = "skipped"
        item.outcome = outcome
        item.post_done = True  # synthetic: nothing for post hooks to check
        item.result = ToolResult(
            call_id=item.call.id, name=item.call.name, output=output, is_error=is_error
        )

    def _run_tools(self, run: Run) -> None:
        approved = [c for c in run.calls if c.status == "approved"]
        if not approved:
            self._post_tools(run)
            return
        config = self.config
        batch_id = f"{run.run_id}-b{run.turns}-{next(serials)}"
        run.batch_id = batch_id
        run.phase = "tools"
        for item in approved:
            item.status = "running"
        config.tool_pool.tell(
            RunToolBatch(
                batch_id=batch_id,
                session_id=self.config.session_id,
                calls=tuple(item.executed or item.call for item in approved),
                call_timeout=config.call_timeout,
                max_concurrency=config.tool_concurrency,
                tools=config.tools,
                fs=config.fs,
                services=config.services,
                reply_to=self.actor_ref,
                trace=None if run.span is None else run.span.context,
                scope=run.scope,
            )
        )

    def _batch_run(self, batch_id: str) -> Run | None:
        run = self._run
        if run is None or run.ended or run.batch_id != batch_id:
            return None
        return run

    @handles(ToolCallStarted)
    def _on_tool_started(self, message: ToolCallStarted) -> None:
        run = self._batch_run(message.batch_id)
        if run is not None:
            self._emit(
                ToolStarted(
                    session_id=self.config.session_id,
                    run_id=run.run_id,
                    call_id=message.call_id,
                    name=message.name,
                )
            )

    @handles(ToolCallFinished)
    def _on_tool_finished(self, message: ToolCallFinished) -> None:
        run = self._batch_run(message.batch_id)
        if run is not None:
            self._emit(
                ToolFinished(
                    session_id=self.config.session_id,
                    run_id=run.run_id,
                    call_id=message.result.call_id,
                    name=message.result.name,
                    outcome=message.outcome,
                    is_error=message.result.is_error,
                    duration_s=message.duration_s,
                )
            )

    @handles(ToolBatchFinished)
    def _on_batch_finished(self, message: ToolBatchFinished) -> None:
        run = self._batch_run(message.batch_id)
        if run is None:
            return
        run.batch_id = None
        running = [c for c in run.calls if c.status == "running"]
        matched = match_results([item.call for item in running], message.results)
        for item, finished in zip(running, matched, strict=True):
            if finished is None:  # never happens; be total anyway
                self._close_call(item, "Cancelled: no result was reported")
                continue
            item.status = "done"
            item.result = finished.result
            item.outcome = finished.outcome
            item.stored_summary = finished.stored_summary
            item.explicit = finished.explicit
        self._post_tools(run)

    def _boundary(self, run: Run, index: int, reason: str, tool: str) -> None:
        """Speculation: stop at call ``index``; run what was approved before it."""
        removed = run.calls[index:]
        run.boundary = {
            "tool": tool,
            "reason": reason,
            "calls": [c.call.model_dump(mode="json") for c in removed],
        }
        for item in removed:
            item.status = "removed"
        kept = [c.call for c in run.calls[:index]]
        if run.assistant_index is not None:
            old = self.state.history[run.assistant_index]
            assert isinstance(old, AssistantMessage)
            if kept or old.text:
                self.state.history[run.assistant_index] = old.model_copy(
                    update={"tool_calls": tuple(kept)}
                )
            else:
                del self.state.history[run.assistant_index]
                run.assistant_index = None
        run.index = index
        self._run_tools(run)
