"""Fore's own interceptors of the worker: machinery, not the session's policy.

:class:`ResolveInterceptor` is the worker's own code, not a session's choice:
it belongs beside the worker, and it is kept apart from the interceptor a
session brings (``open_session(interceptor=...)``), which is policy.

The resolve interceptor forces ``resolve`` while a preview waits -- but never in a loop.

Before each LLM request (on the worker's thread, inline):

* while something is pending or a standing handler is installed, the hidden
  ``resolve`` tool is offered and, while an action is pending, a reminder
  system message is added to the request (never to history);
* a one-shot directive forces ``tool_choice = resolve`` on the next request,
  newest preview first.

After the answer: if a forced turn did not call ``resolve``, that is a miss
for the forced action and its directive is requeued. If it did call
``resolve``, the turn is settled once its tools ran (at the next request or
at the end of the run): the forced action is fine if a ``resolve`` consumed
it (a failed apply is counted by the tool); if a ``resolve`` consumed another
(newer) action instead, the forced action's directive goes back uncounted;
if no ``resolve`` consumed anything (invalid arguments, skipped by a hook),
it is a miss -- unless the run ended early (cancelled, aborted, ...) before
the tools could run, which puts the directive back uncounted. Each action
has its own budget of :data:`~fore.actors.resolve.pending.MAX_FORCED_ATTEMPTS`
misses (ignored forced turns and failed applies together, see
:mod:`fore.actors.resolve.pending`); then forcing stops for it, the action stays
pending with its reminder, and one Warn alert tells the user. If the
provider rejects a forced tool choice, the request is sent once more with
``auto`` plus the reminder, and forcing is off for the session: the failing
request is never replayed.

A forced request that gets no answer at all -- a hook or the interceptor
cancels it, the user cancels the run, the run ends otherwise, or the LLM
fails for another reason than refusing the tool choice -- puts its directive
back uncounted: the model never saw it, so the preview must still be forced
on the next request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fore.actors.resolve.forcing import (
    RESOLVE,
    exhausted_text,
    rejects_forced_choice,
    reminder_text,
)
from fore.actors.resolve.pending import PendingAction, PendingActions
from fore.actors.worker.hooks import Continue, LlmRequestContext
from fore.actors.worker.interceptor import Interceptor, RetryRequest
from fore.messages.alerts import AlertLevel
from fore.messages.conversation import AssistantMessage, SystemMessage
from fore.messages.llm import LlmError, NamedToolChoice
from fore.messages.tools import ToolDefinition

__all__ = ["ResolveInterceptor"]


class ResolveInterceptor(Interceptor):
    """Offers and forces ``resolve`` for one session (see module docs)."""

    def __init__(self, store: PendingActions, definition: ToolDefinition) -> None:
        self.store = store
        self.definition = definition
        self._alert: Callable[[AlertLevel, str, str], Any] | None = None
        self._forced: tuple[LlmRequestContext, PendingAction] | None = None
        """The forced request in flight and the action it forces."""
        self._awaiting: tuple[PendingAction, int] | None = None
        """A forced turn answered with ``resolve``: its action and the take mark before it."""

    def attach(self, alert: Callable[[AlertLevel, str, str], Any]) -> None:
        self._alert = alert

    def _raise(self, level: AlertLevel, text: str) -> None:
        if self._alert is not None:
            self._alert(level, text, "resolve")

    def _restore_forced(self) -> None:
        forced, self._forced = self._forced, None
        if forced is not None:
            self.store.restore(forced[1])

    def _settle(self, *, tools_ran: bool = True) -> None:
        """Settle an answered forced turn once its tools ran; alert on spent budgets.

        ``tools_ran=False`` (a run that ended early: cancelled, aborted...):
        a ``resolve`` that consumed nothing may simply never have run, so
        that is not held against the action.
        """
        awaiting, self._awaiting = self._awaiting, None
        if awaiting is not None:
            action, mark = awaiting
            taken = self.store.taken_since(mark)
            if action.id in taken:
                pass  # resolved (a failed apply was counted by the tool)
            elif taken or not tools_ran:
                self.store.restore(action)  # a newer action used the directive
            else:
                self.store.ignored(action)  # resolve was called but consumed nothing
        for action in self.store.drain_exhausted():
            self._raise(AlertLevel.WARN, exhausted_text(action))

    def pre_llm_request(self, ctx: LlmRequestContext) -> Continue:
        self._restore_forced()  # a forced request that was never answered
        self._settle()
        if not self.store.offered():
            return Continue()
        if all(tool.name != RESOLVE for tool in ctx.tools):
            ctx.tools.append(self.definition)
        pending = self.store.pending()
        if pending:
            ctx.messages.append(SystemMessage(text=reminder_text(pending)))
        directive = self.store.next_directive()
        if directive is not None:
            ctx.tool_choice = NamedToolChoice(name=RESOLVE)
            self._forced = (ctx, directive)
        return Continue()

    def on_llm_response(self, ctx: LlmRequestContext, message: AssistantMessage) -> None:
        forced, self._forced = self._forced, None
        if forced is None or forced[0] is not ctx:
            return
        action = forced[1]
        if any(call.name == RESOLVE for call in message.tool_calls):
            # Which action the call consumes is known only after the tools ran.
            self._awaiting = (action, self.store.takes)
            return
        self.store.ignored(action)
        self._settle()

    def on_llm_error(self, ctx: LlmRequestContext, error: LlmError) -> RetryRequest | None:
        forced = self._forced
        if forced is None or forced[0] is not ctx or not rejects_forced_choice(error):
            self._restore_forced()  # the model never saw the forced request
            return None
        self._forced = None
        self.store.forcing_supported = False
        self._raise(
            AlertLevel.INFO,
            "The model provider refused a forced tool choice; pending previews are offered "
            "with a reminder instead.",
        )
        return RetryRequest(dataclasses.replace(ctx, tool_choice="auto"))

    def on_run_end(self, status: str) -> None:
        """The run ended: restore an unanswered forced request, settle an answered one."""
        self._restore_forced()
        self._settle(tools_ran=status in ("completed", "max_turns"))
