"""Phase: the batch's results -- post_tool_call hooks, blob conversion, commit.

The post hooks see each full result first; large outputs then go to the blob
store (history keeps their summaries); the results enter history in call
order, and the turn goes on with the next LLM request.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from fore.actors.blobs.summary import truncated_fallback
from fore.actors.worker.base import WorkerBase
from fore.actors.worker.hooks import (
    Abort,
    ChainState,
    HookEvent,
    PostToolCallContext,
    ToolOutcome,
    final_outcome,
)
from fore.actors.worker.run import Call, Run, needs_store
from fore.messages.alerts import AlertLevel
from fore.messages.blob_store import StoredOutput, StoreToolOutput
from fore.messages.blobs import Text


class OutputsPhase(WorkerBase):
    """Post hooks, blob conversion and commit of a batch's results."""

    def _post_tools(self, run: Run) -> None:
        run.index = 0
        self._post_step(run)

    def _post_step(self, run: Run) -> None:
        while run.index < len(run.calls):
            item = run.calls[run.index]
            if item.status != "done" or item.result is None or item.post_done:
                run.index += 1
                continue
            ctx = PostToolCallContext(
                session_id=self.config.session_id,
                purpose=self.config.purpose,
                call_id=item.call.id,
                name=item.call.name,
                arguments=item.ctx.arguments,
                result=ToolOutcome(output=item.result.output, is_error=item.result.is_error),
                outcome=item.outcome,
                meta=item.ctx.meta,
                tool=item.ctx.tool,
            )
            verdict = self.config.interceptor.post_tool_call(ctx)
            if isinstance(verdict, Abort):
                self._apply_post(item, ctx)  # the aborting party saw (and may mask) it
                self._abort_calls(run, "aborted", verdict.reason or "aborted by policy")
                return
            run.phase = "post_tool_call"
            index = run.index

            def done(
                state: ChainState,
                item: Call = item,
                ctx: PostToolCallContext = ctx,
                index: int = index,
            ) -> None:
                # Continue, or Abort: the aborting hook saw this result and may have
                # masked it; the results after it never passed their hooks (withheld).
                self._apply_post(item, ctx)
                outcome = final_outcome(state)
                if isinstance(outcome, Abort):
                    self._abort_calls(
                        run, "aborted", outcome.reason or "aborted by a post_tool_call hook"
                    )
                    return
                run.index = index + 1
                self._post_step(run)

            self._chain(run, HookEvent.POST_TOOL_CALL, ctx, done)
            return
        self._convert(run)

    def _apply_post(self, item: Call, ctx: PostToolCallContext) -> None:
        assert item.result is not None
        item.post_done = True
        if ctx.result.output != item.result.output or ctx.result.is_error != item.result.is_error:
            item.result = item.result.model_copy(
                update={"output": ctx.result.output, "is_error": ctx.result.is_error}
            )
            # The tool's own summary and inline/stored choice no longer describe it.
            item.stored_summary = None
            item.explicit = None

    def _convert(self, run: Run) -> None:
        """Store large outputs in the blob store; history keeps their summaries.

        Runs after the post_tool_call hooks (they saw the full output). One ask
        per large output, answered by message -- nothing here blocks.
        """
        store = self.config.blob_store
        threshold = self.config.blob_limits.inline_threshold
        pending = [
            c
            for c in run.calls
            if c.result is not None
            and not c.committed
            and c.status != "removed"
            and store is not None
            and needs_store(c, threshold)
        ]
        if not pending:
            self._commit(run)
            return
        assert store is not None  # pending only with a store
        run.phase = "storing outputs"
        remaining = [len(pending)]

        def one_done() -> None:
            remaining[0] -= 1
            if remaining[0] == 0:
                self._commit(run)

        for item in pending:
            assert item.result is not None
            message = StoreToolOutput(
                session_id=self.config.session_id,
                call_id=item.call.id,
                output=item.result.output,
                stored_summary=item.stored_summary,
                tool_output=item.explicit,
                scope=run.scope,
            )
            # Under the run's scope: an answer that arrives once the run's ending
            # began (its calls closed and committed already) is dropped, and a
            # request that reaches the blob actor after that stores nothing.
            self.ask_typed(
                store,
                message,
                then=functools.partial(self._output_stored, item, one_done),
                on_error=functools.partial(self._output_not_stored, item, one_done),
                timeout=120.0,
                scope=run.scope,
            )

    def _output_stored(
        self, item: Call, one_done: Callable[[], None], stored: StoredOutput
    ) -> None:
        assert item.result is not None
        item.result = item.result.model_copy(update={"output": stored.history_text})
        item.pinned = True  # the store pinned every blob this text references
        one_done()

    def _output_not_stored(
        self, item: Call, one_done: Callable[[], None], error: BaseException
    ) -> None:
        assert item.result is not None
        self.alert(
            AlertLevel.WARN,
            f"the blob store failed ({error}); the output of {item.call.name} went into "
            "history truncated",
            "blob_store",
        )
        item.result = item.result.model_copy(
            update={"output": self._truncated(item.result.output, "the blob store failed")}
        )
        one_done()

    def _truncated(self, output: str, reason: str) -> str:
        return truncated_fallback(Text(text=output), self.config.blob_limits, reason=reason)

    def _commit(self, run: Run) -> None:
        for item in run.calls:
            if item.result is not None and not item.committed and item.status != "removed":
                item.committed = True
                self._append(run, item.result, pinned=item.pinned)
        run.calls = []
        self._flush_pending_messages(run)
        if run.boundary is not None:
            self._complete(run, "boundary", run.boundary.get("reason"))
            return
        self._llm_turn(run)
