"""Phase: the LLM turn -- the budget, the request, its stream, its answer.

The interceptor and the pre_llm_request hooks shape the request; the gateway
streams the answer back as messages (text, tool-call deltas, retries); the
answer leads to the tool phase or the turn's end. Usage limits are checked at
each step (logic in :mod:`actors.telemetry.limits`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ValidationError

from fore.actors.core.handlers import handles
from fore.actors.telemetry.limits import LimitGuard
from fore.actors.worker.base import WorkerBase
from fore.actors.worker.hooks import (
    Cancel,
    ChainState,
    HookError,
    HookEvent,
    LlmRequestContext,
    final_outcome,
)
from fore.actors.worker.interceptor import RetryRequest
from fore.actors.worker.run import Run, serials, wrap_up_choice
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import AssistantMessage, Item, SystemMessage
from fore.messages.llm import (
    LlmCancelled,
    LlmCompleted,
    LlmError,
    LlmFailed,
    LlmRequest,
    LlmRetrying,
    LlmTextDelta,
    LlmToolCallDelta,
)
from fore.messages.session import LlmRetried, Submit, TextDelta
from fore.messages.usage import UsageLimitHit


class LlmTurnPhase(WorkerBase):
    """Asks the model and handles its stream and answer."""

    def _llm_turn(self, run: Run, retry: LlmRequestContext | None = None) -> None:
        """Ask the model: budget check, the interceptor, the pre_llm_request hooks, send.

        ``retry`` is the request an interceptor asked to send again
        (:class:`RetryRequest`): it is an LLM call like any other -- it counts
        against ``max_turns`` and passes the pre_llm_request hooks -- but the
        interceptor, which built it, does not see it again.
        """
        answered = self.config.interceptor.turn_answered() if retry is None else None
        if answered is not None:  # e.g. structured output's final_answer was accepted
            self._turn_end(run, answered)
            return
        if run.pause_requested is not None:
            reason, run.pause_requested = run.pause_requested, None
            point: tuple[Any, ...] = ("llm",) if retry is None else ("llm", retry)
            self._pause(run, reason, "before the next LLM request", point)
            return
        if run.turns >= run.max_turns:
            self._finish(
                run,
                "max_turns",
                f"the run's budget of {run.max_turns} LLM calls is spent",
                abort=True,
            )
            return
        if run.limits is not None and self._usage_limited(run, run.limits.before_request()):
            return
        config = self.config
        if retry is None:
            messages: list[Item] = []
            if config.system_prompt:
                messages.append(SystemMessage(text=config.system_prompt))
            messages.extend(self.state.history)
            base = LlmRequestContext(
                session_id=self.config.session_id,
                purpose=config.purpose,
                turn=run.turns + 1,
                messages=messages,
                tools=list(config.tools.definitions(exclude=config.hidden_tools)),
                tool_choice=wrap_up_choice(config.wrap_up, run.turns + 1, run.max_turns),
                model_name=config.model_name,
            )
            verdict = config.interceptor.pre_llm_request(base)
            if isinstance(verdict, Cancel):
                # The user message is in history: the run started, so on_abort runs.
                self._finish(run, "rejected", verdict.reason or "request cancelled", abort=True)
                return
        else:
            base = retry
            base.turn = run.turns + 1
        # The hooks edit a copy: the interceptor's own request object stays as it
        # left it (its callbacks are given that one), and a retry built from it
        # is not edited twice.
        if config.hooks.chain(HookEvent.PRE_LLM_REQUEST):
            ctx = dataclasses.replace(base, messages=list(base.messages), tools=list(base.tools))
        else:
            ctx = base
        run.phase = "pre_llm_request"

        def done(state: ChainState) -> None:
            outcome = final_outcome(state)
            if isinstance(outcome, Cancel):
                self._finish(
                    run, "rejected", outcome.reason or "request cancelled by a hook", abort=True
                )
                return
            self._send(run, ctx, base, edited_by=state.ran[-1] if state.ran else None)

        self._chain(run, HookEvent.PRE_LLM_REQUEST, ctx, done)

    def _send(
        self,
        run: Run,
        ctx: LlmRequestContext,
        base: LlmRequestContext,
        *,
        edited_by: str | None = None,
    ) -> None:
        rid = f"{run.run_id}-{run.turns + 1}-{next(serials)}"
        fields: dict[str, Any] = {
            "request_id": rid,
            "session_id": self.config.session_id,
            "purpose": self.config.purpose,
            "model_name": ctx.model_name,
            "messages": tuple(ctx.messages),
            "tools": tuple(ctx.tools),
            "tool_choice": ctx.tool_choice,
            "response_schema": ctx.response_schema,
            # LlmCompleted carries the assembled calls; only an output limit counts them live.
            "stream_tool_deltas": run.limits is not None and run.limits.watches_output,
            "stream": self.config.stream,
            "model": self.config.model,
            "reply_to": self.actor_ref,
            "scope": run.scope,
            "trace": None if run.span is None else run.span.context,
        }
        if edited_by is None:
            # Without hooks every part is already a validated, frozen message, and
            # re-validating the whole history on every turn would cost O(history).
            request = LlmRequest.model_construct(**fields)
        else:
            # A request a hook edited is validated (a hook may leave anything; each
            # hook's edit was checked as it answered, this is the last word).
            try:
                request = LlmRequest(**fields)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "request"
                error = HookError(
                    HookEvent.PRE_LLM_REQUEST,
                    edited_by,
                    f"left the request invalid ({where}: {first['msg']})",
                    kind="invalid_edit",
                )
                self._hook_failed(run, error)
                return
        run.turns += 1
        run.llm_request_id = rid
        run.llm_ctx = ctx
        run.llm_base = base
        run.streamed_chars = 0
        run.sent_history_len = len(self.state.history)
        run.phase = "streaming"
        if run.limits is not None:
            run.limits.sent()
        self.config.gateway.tell(request)

    def _current_request(self, request_id: str) -> Run | None:
        run = self._run
        if run is None or run.ended or run.llm_request_id != request_id:
            return None
        return run

    @handles(LlmTextDelta)
    def _on_text(self, message: LlmTextDelta) -> None:
        run = self._current_request(message.request_id)
        if run is not None:
            run.streamed_chars += len(message.text)
            self._emit(
                TextDelta(session_id=self.config.session_id, run_id=run.run_id, text=message.text)
            )
            if run.limits is not None:
                self._usage_limited(run, run.limits.streamed(len(message.text)))

    @handles(LlmToolCallDelta)
    def _on_tool_delta(self, message: LlmToolCallDelta) -> None:
        """Tool-call fragments are assembled by the LLM layer; only an output limit counts them."""
        run = self._current_request(message.request_id)
        if run is not None and run.limits is not None:
            chars = len(message.arguments_delta) + len(message.name or "")
            self._usage_limited(run, run.limits.streamed(chars))

    @handles(LlmRetrying)
    def _on_retrying(self, message: LlmRetrying) -> None:
        run = self._current_request(message.request_id)
        if run is not None:
            # The retry streams its answer from the start: what this attempt
            # streamed is void (see LlmRetried).
            void, run.streamed_chars = run.streamed_chars, 0
            if run.limits is not None:
                run.limits.retried()
            self._emit(
                LlmRetried(
                    session_id=self.config.session_id,
                    run_id=run.run_id,
                    attempt=message.attempt,
                    reason=message.reason,
                    discard_streamed_text=void > 0,
                    discard_chars=void,
                )
            )

    @handles(LlmCancelled)
    def _on_llm_cancelled(self, message: LlmCancelled) -> None:
        """We only cancel requests we have already let go of."""

    @handles(LlmFailed)
    def _on_llm_failed(self, message: LlmFailed) -> None:
        run = self._current_request(message.request_id)
        if run is None:
            return
        run.llm_request_id = None
        self._llm_failed(run, message.error)

    def _llm_failed(self, run: Run, error: LlmError) -> None:
        """The request failed (or its answer was unusable): the interceptor may retry once."""
        assert run.llm_base is not None
        retry = self.config.interceptor.on_llm_error(run.llm_base, error)
        if isinstance(retry, RetryRequest) and not run.llm_retried:
            run.llm_retried = True
            self._llm_turn(run, retry=retry.ctx)
            return
        self.alert(AlertLevel.ERROR, f"LLM request failed ({error.kind}): {error.message}", "llm")
        run.error_kind = "llm"
        self._finish(run, "error", f"LLM {error.kind} error: {error.message}", abort=True)

    @handles(LlmCompleted)
    def _on_llm_completed(self, message: LlmCompleted) -> None:
        run = self._current_request(message.request_id)
        if run is None:
            return
        run.llm_request_id = None
        run.llm_retried = False
        run.usage = run.usage + message.usage  # every field, cache writes included (#27)
        assistant = message.message
        assert run.llm_base is not None
        if run.limits is not None and self._usage_limited(
            run, run.limits.answered(message.usage), answer=assistant
        ):
            return
        bad = next((c for c in assistant.tool_calls if c.arguments_error is not None), None)
        if bad is not None:
            if run.argument_retries >= self.config.max_argument_retries:
                # The bound is spent: the answer is unusable, as a protocol error.
                retries = run.argument_retries
                after = (
                    f" (after {retries} earlier answer{'' if retries == 1 else 's'} with "
                    "invalid arguments in this run)"
                    if retries
                    else ""
                )
                error = LlmError(
                    kind="protocol", message=f"tool call {bad.name!r}: {bad.arguments_error}{after}"
                )
                self._llm_failed(run, error)
                return
            run.argument_retries += 1
        self.config.interceptor.on_llm_response(run.llm_base, assistant)
        if message.finish_reason == "length":
            self._cut_off(run, assistant)
            return
        # An empty answer is kept too: dropping it would leave two user turns in
        # a row in the next request, which real servers and templates reject.
        run.assistant_index = len(self.state.history)
        self._append(run, assistant)
        if assistant.tool_calls:
            self._start_tools(run, assistant)
        else:
            self._turn_end(run, assistant)

    def _cut_off(self, run: Run, assistant: AssistantMessage) -> None:
        """The provider cut the answer off (``finish_reason`` length): keep its text, run nothing.

        Ends the run ``cut_off`` (see :data:`~messages.session.RunStatus`): a cut
        answer is not what the model meant to say, so reporting it ``completed``
        would hide the loss.
        """
        dropped = len(assistant.tool_calls)
        kept = assistant.model_copy(update={"tool_calls": ()}) if dropped else assistant
        # Kept even when empty, like any answer: no two user turns in a row.
        run.assistant_index = len(self.state.history)
        self._append(run, kept)
        reason = "the model's answer was cut off at its output limit (finish_reason length)"
        if dropped:
            reason += f"; its {dropped} tool call(s) were not run"
        self.alert(AlertLevel.WARN, reason, "llm")
        self._finish(run, "cut_off", reason, abort=True)

    def _observe(self, run: Run, message: Submit | None) -> None:
        """A run begins: its span (telemetry on) and its usage limits (main runs with limits)."""
        config = self.config
        if config.telemetry is not None:
            run.span = config.telemetry.turn(
                session_id=config.session_id,
                run_id=run.run_id,
                purpose=config.purpose,
                prompt=None if message is None else message.text,
                parent=None if message is None else message.trace,
            )
        if config.purpose == "main":
            guard = LimitGuard(
                None if message is None else message.usage_limits, config.session_usage
            )
            if guard.active:
                run.limits = guard

    def _usage_limited(
        self, run: Run, hit: UsageLimitHit | None, *, answer: AssistantMessage | None = None
    ) -> bool:
        """End ``run`` at the usage limit it crossed (``hit``), if any; True if it ended.

        A stream in flight is cancelled. An ``answer`` whose reported usage
        crossed the limit is kept like a cut-off one: its text enters history,
        its tool calls are not run.
        """
        if hit is None:
            return False
        run.usage_limit = hit
        reason = hit.describe()
        if answer is not None:
            dropped = len(answer.tool_calls)
            run.assistant_index = len(self.state.history)
            self._append(run, answer.model_copy(update={"tool_calls": ()}) if dropped else answer)
            if dropped:
                reason += f"; the answer's {dropped} tool call(s) were not run"
        else:
            self._cancel_inflight(run, reason)
        self.alert(AlertLevel.WARN, reason, "usage")
        self._finish(run, "usage_limit", reason, abort=True)
        return True
