"""Phase: the turn's end, and the places a run stops without ending (pause, resume).

on_turn_end may continue the turn with new messages, pause it, or complete
it; a pause (from a hook, the interceptor or ``PauseRun``) is saved first
when there is a session store, and ``Resume`` picks the run up where it
stopped.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from fore.actors.core.handlers import handles
from fore.actors.worker.base import WorkerBase
from fore.actors.worker.hooks import (
    ChainState,
    ContinueWithMessages,
    HookEvent,
    Paused,
    TurnEndContext,
    final_outcome,
    messages_problem,
)
from fore.actors.worker.run import Run
from fore.messages.conversation import AssistantMessage, Item
from fore.messages.session import PauseRun, Resume, RunPaused


class TurnEndPhase(WorkerBase):
    """The turn's end hooks; pause and resume."""

    def _flush_pending_messages(self, run: Run) -> None:
        """Resume messages given at a tool-call pause: after the batch's results."""
        pending, run.pending_messages = run.pending_messages, []
        for item in pending:
            self._append(run, item)

    def _turn_end(self, run: Run, assistant: AssistantMessage) -> None:
        ctx = TurnEndContext(
            session_id=self.config.session_id,
            purpose=self.config.purpose,
            turn=run.turns,
            messages=list(self.state.history),
            final_text=assistant.text,
        )
        verdict = self.config.interceptor.on_turn_end(ctx)
        if isinstance(verdict, ContinueWithMessages):
            self._continue_with(run, verdict.messages)
            return
        if isinstance(verdict, Paused):
            self._pause(run, verdict.reason, "on_turn_end", ("turn_end", 0, ctx))
            return
        self._turn_end_hooks(run, ctx, 0)

    def _turn_end_hooks(self, run: Run, ctx: TurnEndContext, start: int) -> None:
        run.phase = "on_turn_end"

        def done(state: ChainState) -> None:
            outcome = final_outcome(state)
            if isinstance(outcome, ContinueWithMessages):
                self._continue_with(run, outcome.messages)
            elif isinstance(outcome, Paused):
                assert state.stopped_at is not None
                self._pause(
                    run, outcome.reason, "on_turn_end", ("turn_end", state.stopped_at + 1, ctx)
                )
            else:
                self._complete(run, "completed", None)

        self._chain(run, HookEvent.ON_TURN_END, ctx, done, start=start)

    def _continue_with(self, run: Run, items: Sequence[Item]) -> None:
        for item in items:
            self._append(run, item)
        self._llm_turn(run)

    @handles(PauseRun)
    def _on_pause(self, message: PauseRun) -> bool:
        run = self._run
        # Kept: a request from outside, answered with whether it will pause -- a run
        # that is ending (or ended, or paused already) will not.
        if run is None or not run.live or run.phase == "paused":
            return False
        run.pause_requested = message.reason
        return True

    def _pause(
        self, run: Run, reason: str, where: str, point: tuple[Any, ...], *, saved: bool = False
    ) -> None:
        if not saved and self._writer is not None:
            # A pause may wait hours for a person: what the run did so far is saved first.
            # Under the run's scope: a run cancelled while it is saved never pauses (its
            # end reports instead).
            run.phase = "saving"
            saved_then = functools.partial(self._pause_saved, run, reason, where, point)
            if self._writer.save(saved_then, scope=run.scope):
                return
        run.phase = "paused"
        run.resume_point = point
        self._emit(
            RunPaused(
                session_id=self.config.session_id, run_id=run.run_id, reason=reason, where=where
            )
        )
        result = self._result(run, "paused", reason or None)
        reply, run.reply = run.reply, None
        if reply is not None:
            reply.try_set(result)

    @handles(Resume)
    def _on_resume(self, message: Resume) -> None:
        run = self._run
        if run is None or run.ended or run.phase != "paused":
            raise RuntimeError(f"session {self.session_id} has no paused run to resume")
        problem = messages_problem(message.messages)
        if problem is not None:
            raise ValueError(f"cannot resume with these messages: {problem}")
        run.reply = self.defer_reply()
        point = run.resume_point or ("llm",)
        run.resume_point = None
        kind = point[0]
        if kind == "llm":
            for item in message.messages:
                self._append(run, item)
            # A retry built before the pause no longer holds the new messages.
            retry = point[1] if len(point) > 1 and not message.messages else None
            self._llm_turn(run, retry=retry)
        elif kind == "pre_tool":
            # Not here: between an answer's calls and their results. They go in
            # right after the batch's results, before the next LLM request.
            run.pending_messages.extend(message.messages)
            run.phase = "pre_tool_call"
            self._pre_tools(run, point[1])
        elif message.messages:
            self._continue_with(run, message.messages)
        else:
            self._turn_end_hooks(run, point[2], point[1])

    def _pause_saved(
        self, run: Run, reason: str, where: str, point: tuple[Any, ...], problem: str | None
    ) -> None:
        if problem is not None:
            self._store_failed(problem, "the paused turn")
        self._pause(run, reason, where, point, saved=True)
