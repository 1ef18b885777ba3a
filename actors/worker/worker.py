"""The worker: one session's agent loop as an event-driven actor.

A run is prompt -> LLM -> (tool calls -> results -> LLM)* -> done. Every step
is a message the worker reacts to -- a submit, an LLM stream event, a tool
result, a hook's answer, a pause/resume, a cancel -- so the worker never
blocks a dispatcher thread and is abortable at any point:

* LLM requests go to the gateway; their events come back here;
* tool batches go to the shared pool; their results come back here;
* hooks (user code) run on the hook lane, one at a time, each with a
  timeout that starts when it starts running, through the session's
  :class:`~actors.worker.hookrun.HookGate`; their answers come back here.
  The trusted interceptor runs inline.

History integrity is the worker's first promise: every tool call in history
gets exactly one result -- a real one, or a synthetic ``Skipped`` /
``Cancelled`` / ``Aborted`` / ``Interrupted`` one -- so history is never in a
state an LLM provider rejects.

The model is not trusted to be reasonable. An empty answer is kept in
history (dropping it would put two user turns in a row). Of one answer's tool
calls at most ``WorkerConfig.max_batch_calls`` run; each call past them gets
an error result. A call whose arguments are not a JSON object
(``ToolCall.arguments_error``) is not run: its error result says why, so the
model can correct itself, up to ``max_argument_retries`` answers per run; the
next such answer ends the run as an LLM protocol error. However many calls,
hooks and steps follow each other, continuations run one after another
(:meth:`~actors.worker.chain_driver.ChainDriver._then`), never nested: the stack stays flat.

A run that is ending stays ended: once a cancel, an abort or a failure has
begun a run's ending (its on_abort chain), no continuation of work that was
already under way -- a file-reference preparer, a blob-store answer, a hook
answer, a save -- may take the run further. Each run has a
:class:`~actors.core.cancel.CancelScope` -- the submit's own when its sender
made one (``Submit.scope``; its cancel ends the run as ``CancelRun`` does) --
that its LLM requests, tool batches, blob-store asks, ``@path`` preparer
(``run_blocking(scope=...)``) and pause save carry: every early ending cancels
it first, which stops that work wherever it is (also before it arrived or
started) and drops its late answers. So liveness
(:attr:`~actors.worker.run_state.RunProgress.live`) is checked in a few places,
not at the entry of every phase: the chain driver drops the outcome of a hook
chain whose run is no longer live and starts no chain for an ending run but
its on_abort; LLM and tool-batch events are matched by request and batch id,
which the ending clears as it cancels the scope; the rest is scoped. Every
phase method is entered for a live run only. Three other checks remain, each
for something the scope cannot decide: ``PauseRun`` is answered with whether
the run will pause, the scope's own cancel leaves a run whose ending began with
the end it has, and an accepted insert is answered after its save whatever
happened meanwhile but goes on only if no cancel came.

The code is one module per phase, each a mixin over
:class:`~actors.worker.base.WorkerBase` (why mixins: see that module):

* :mod:`~actors.worker.submit` -- submit queueing, ``@path`` preparation,
  on_prompt_submit, an accepted speculation's ``InsertItems``;
* :mod:`~actors.worker.llm_turn` -- the request, its stream, its answer,
  usage limits;
* :mod:`~actors.worker.tools_phase` -- pre_tool_call checks, approval, the
  batch in the tool pool, a speculation's boundary;
* :mod:`~actors.worker.outputs` -- post_tool_call hooks, blob conversion,
  commit;
* :mod:`~actors.worker.turn_end` -- on_turn_end, pause and resume;
* :mod:`~actors.worker.ending` -- cancel, abort, failure, the run's report and
  its write-ahead to the session store;
* :mod:`~actors.worker.chain_driver` -- the hook-chain driver and the
  continuation trampoline.

The run's records are plain data in :mod:`~actors.worker.run` (phases in
:mod:`~actors.worker.run_state`), the config in :mod:`~actors.worker.config`.
This module is the actor itself: its lifecycle, reload after a restart,
subscriptions and queries.
"""

from __future__ import annotations

from typing import Any

from pykka._envelope import Envelope

from fore.actors.core.handlers import handles
from fore.actors.worker.chain_driver import ChainDriver
from fore.actors.worker.config import (
    DEFAULT_MAX_ARGUMENT_RETRIES,
    DEFAULT_MAX_BATCH_CALLS,
    WorkerConfig,
)
from fore.actors.worker.ending import EndingPhase
from fore.actors.worker.llm_turn import LlmTurnPhase
from fore.actors.worker.outputs import OutputsPhase
from fore.actors.worker.run import (
    bad_arguments_text,
    match_results,
    over_cap_text,
    wrap_up_choice,
)
from fore.actors.worker.submit import SubmitPhase
from fore.actors.worker.tools_phase import ToolsPhase
from fore.actors.worker.turn_end import TurnEndPhase
from fore.errors import WorkerBusy
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import Item
from fore.messages.session import (
    AddTool,
    GetHistory,
    GetRunState,
    ItemAdded,
    RunState,
    SetModel,
    Subscribe,
    TurnFinished,
    Unsubscribe,
)

__all__ = [
    "DEFAULT_MAX_ARGUMENT_RETRIES",
    "DEFAULT_MAX_BATCH_CALLS",
    "Worker",
    "WorkerBusy",
    "WorkerConfig",
    "bad_arguments_text",
    "match_results",
    "over_cap_text",
    "wrap_up_choice",
]


class Worker(
    SubmitPhase,
    LlmTurnPhase,
    ToolsPhase,
    OutputsPhase,
    TurnEndPhase,
    EndingPhase,
    ChainDriver,
):
    """One session's agent loop (see module docs)."""

    def on_start(self) -> None:
        self.config.interceptor.attach(self.alert)
        self.state.output = None  # a crashed incarnation's structured run is over
        if self._writer is not None and self._writer.started():
            # A restart: history comes back from the session store first.
            self._held = []
            self._writer.reload(self._reloaded)
            return
        self._repair()

    def _repair(self) -> None:
        repaired = self.state.repair("Interrupted: the session's worker restarted")
        for item in repaired:
            self._emit(ItemAdded(session_id=self.config.session_id, run_id=None, item=item))

    def on_stop(self) -> None:
        """The session closed under a run: cancel it; its on_abort hooks still run once."""
        self._stopping = True  # no more waiting on the store: the end is reported now
        run = self._run
        if run is None or run.ended:
            return
        successor, run.successor = run.successor, None
        end = run.final
        if end is not None:
            # Already ending: keep the status it is ending with.
            status, error = end.status, end.error
        else:
            status, error = "cancelled", "session closed"
            self._close_open_calls(run, "Cancelled: the session closed")
        self._abort_detached(run, status, error or status)
        self._cancel_inflight(run, "session closed")
        self._complete(run, status, error)
        if successor is not None:  # queued behind the run; it never started
            self._answer_unstarted(successor[0], "cancelled", "session closed")

    def on_failure(self, *exc_info: Any) -> None:
        """The worker crashed under a run: end it visibly, as every run ends.

        Its on_abort runs detached, its work is called off, and its
        ``TurnFinished`` (status ``error``) goes out before its submit is
        answered with the failure: a waiter that only reads events -- the
        controller's Tab waiting for a boundary's continuation, ``fore chat``
        -- learns of the end now, not at its deadline. Nothing else reports
        the run: the restarted worker only repairs history.
        """
        run = self._run
        if run is not None and not run.ended:
            reason = f"the session's worker failed: {exc_info[1]!r}"
            if run.span is not None:
                run.span.fail(reason)
            self._abort_detached(run, "error", reason)
            self._cancel_inflight(run, "worker failed")
            run.error_kind = "worker"
            self._emit(
                TurnFinished(
                    session_id=self.config.session_id, result=self._result(run, "error", reason)
                )
            )
            if run.reply is not None:
                run.reply.try_set_exception(RuntimeError(reason))
            if run.successor is not None:
                queued = run.successor[0]
                queued.call_off("worker failed")  # it never starts
                if queued.reply is not None:
                    queued.reply.try_set_exception(RuntimeError(reason))

    def on_receive(self, message: Any) -> Any:
        held = self._held
        if held is not None:  # reloading after a restart: handled once history is back
            held.append((message, self.defer_reply()))
            return None
        return super().on_receive(message)

    def _reloaded(self, kept: int, lost: int, problem: str | None) -> None:
        """History is back from the store: repair it, say what was lost, handle what waited."""
        if problem is not None:
            self.alert(
                AlertLevel.ERROR,
                f"the session's worker restarted and could not reload history from the session "
                f"store ({problem}); it goes on with the history in memory",
                "store",
            )
        elif lost:
            self.alert(
                AlertLevel.WARN,
                f"the session's worker restarted: the turn in flight was lost ({lost} "
                f"item{'' if lost == 1 else 's'} not saved); history was reloaded from the "
                "session store"
                + (f", with {kept} unsaved item(s) of earlier turns kept" if kept else ""),
                "store",
            )
        self._repair()
        held, self._held = self._held or [], None
        for message, reply in held:
            # In arrival order, each as if it had just arrived (its reply kept).
            self._fore_process(Envelope(message, reply_to=reply))

    @handles(Subscribe)
    def _on_subscribe(self, message: Subscribe) -> None:
        self.state.subscribers.add(message.address, message.kinds)

    @handles(Unsubscribe)
    def _on_unsubscribe(self, message: Unsubscribe) -> None:
        self.state.subscribers.remove(message.address)

    @handles(AddTool)
    def _on_add_tool(self, message: AddTool) -> None:
        self.config.tools = self.config.tools.with_tool(message.tool)

    @handles(SetModel)
    def _on_set_model(self, message: SetModel) -> None:
        """Switch models between runs (issue 24): a run keeps the model it began with."""
        run = self._run
        if run is not None and not run.ended:
            raise WorkerBusy("a run is in progress: switch models between turns")
        self.config.model = message.model
        self.config.model_name = message.model_name or str(getattr(message.model, "name", ""))

    @handles(GetHistory)
    def _on_history(self, _message: GetHistory) -> tuple[Item, ...]:
        return tuple(self.state.history)

    @handles(GetRunState)
    def _on_run_state(self, _message: GetRunState) -> RunState:
        run = self._run
        status = "idle" if run is None else "paused" if run.phase == "paused" else "running"
        return RunState(
            session_id=self.config.session_id,
            status=status,
            phase="idle" if run is None else run.phase,
            run_id=None if run is None else run.run_id,
            turns_used=0 if run is None else run.turns,
            history_length=len(self.state.history),
        )
