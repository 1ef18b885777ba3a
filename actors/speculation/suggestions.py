"""Suggestions: predicting the user's next input, showing it, and the pipelined one.

After each completed main turn the worker's
:class:`~messages.speculation.SnapshotTaken` becomes the session's fork
snapshot, and (from the second answer on, not in plan mode) one model call
predicts the next input -- unless the last answer says "type X to ...". The
suggestion is shown (a :class:`SuggestionReady` event, and only then
``s.suggestion``) after the display delay, and its speculation starts at
once. After a completed speculation one more request predicts the input
after *that* (Tab-Tab-Tab): the pipelined suggestion, delivered whenever it
comes, never delaying the accept. A request whose epoch moved on is
cancelled, and a late reply to it is never shown (see the controller's
module docs on versions).
"""

from __future__ import annotations

import itertools
from typing import Any

from fore.actors.core.handlers import handles
from fore.actors.speculation.base import ControllerBase, SuggestionRequest
from fore.actors.speculation.fork import extend, last_answer
from fore.actors.speculation.states import SpecPhase, Speculation
from fore.actors.speculation.suggest import suggestion_from_reply, suggestion_request
from fore.actors.speculation.suggestion_filter import filter_suggestion
from fore.actors.speculation.suggestion_prompt import extract_type_hint
from fore.messages.conversation import UserMessage
from fore.messages.llm import (
    LlmCancelled,
    LlmCompleted,
    LlmFailed,
    LlmRequest,
    LlmRetrying,
    Purpose,
)
from fore.messages.speculation import (
    ForkSnapshot,
    Suggestion,
    SuggestionReady,
    SuggestionSource,
)

__all__ = ["Suggestions"]

_seq = itertools.count(1)


class Suggestions(ControllerBase):
    """Suggestion requests, the suggestion on offer, and pipelined suggestions."""

    def _fork_model(self) -> tuple[Any, str]:
        """The provider object and wire name of suggestion, speculation and pipelined requests.

        The fast model when configured -- its object and its name (a provider
        sends ``request.model_name`` when set, so the name matters as much as
        the object); otherwise the main model, under the main request's name.
        """
        fast = self.fast_model
        name = self.spec_config.fast_model_name
        if not name and fast is not None:
            name = str(getattr(fast, "name", "") or "")
        return (fast if fast is not None else self.worker_config.model), name

    # -- the suggestion on offer -------------------------------------------------------------

    def _clear_suggestion(self) -> None:
        self._suggestion = None
        self._shown = False
        if self._show_timer is not None:
            self._show_timer.cancel()
            self._show_timer = None

    def _set_suggestion(
        self,
        text: str,
        source: SuggestionSource,
        snapshot: ForkSnapshot,
        *,
        show_now: bool = False,
    ) -> None:
        self._clear_suggestion()
        suggestion = Suggestion(
            id=f"sug-{next(_seq)}", text=text, source=source, snapshot_version=snapshot.version
        )
        self._suggestion = suggestion
        delay = self.spec_config.suggestion_delay_ms / 1000.0
        if show_now or delay <= 0:
            self._show(suggestion)
        else:
            self._show_timer = self.call_after(delay, self._show, suggestion)
        if self.spec_config.speculate:
            self._start_speculation(suggestion, snapshot)

    def _show(self, suggestion: Suggestion) -> None:
        if self._suggestion is suggestion and not self._shown:
            self._shown = True
            self._show_timer = None
            self._emit(SuggestionReady(session_id=self.session_id or "", suggestion=suggestion))

    # -- suggestion requests -----------------------------------------------------------------

    def _suggest(self, snapshot: ForkSnapshot) -> None:
        hint = extract_type_hint(last_answer(snapshot.history))
        if hint:
            verdict = filter_suggestion(hint)
            if verdict.accepted:
                self._set_suggestion(verdict.text, "hint", snapshot)
                return
        request_id = f"{self.session_id}-suggest-{next(_seq)}"
        request = self._ask_for_suggestion(snapshot, request_id, "suggestion")
        self._suggestion_request = SuggestionRequest(request, self._epoch, snapshot)

    def _ask_for_suggestion(
        self, snapshot: ForkSnapshot, request_id: str, purpose: Purpose
    ) -> LlmRequest:
        """One suggestion request on the fork's prefix (the fast model when configured).

        Returned as sent: its own scope (``request.scope``) is what cancels it.
        """
        model, model_name = self._fork_model()
        request = suggestion_request(
            snapshot,
            max_history=self.spec_config.max_history,
            trim_step=self.spec_config.history_trim_step,
            request_id=request_id,
            purpose=purpose,
            model=model,
            model_name=model_name,
            reply_to=self.actor_ref,
            stream=self.spec_config.stream_forks,
            max_tokens=self.spec_config.suggestion_max_tokens,
        )
        self.worker_config.gateway.tell(request)
        return request

    @handles(LlmCompleted)
    def _on_llm_completed(self, message: LlmCompleted) -> None:
        request = self._suggestion_request
        if request is not None and message.request_id == request.request_id:
            self._suggestion_request = None
            if request.epoch != self._epoch:
                return
            verdict = suggestion_from_reply(message.message.text)
            if not verdict.accepted:
                self.log.debug("suggestion_rejected", reason=str(verdict.reason), text=verdict.text)
                return
            self._set_suggestion(verdict.text, "model", request.snapshot)
            return
        spec = self._pipelined_owner(message.request_id)
        if spec is not None:
            self._on_pipelined(spec, message)
        # Anything else is a late reply to a request we cancelled: ignored.

    @handles(LlmFailed)
    def _on_llm_failed(self, message: LlmFailed) -> None:
        self._request_ended(message.request_id, message.error.message)

    @handles(LlmCancelled)
    def _on_llm_cancelled(self, message: LlmCancelled) -> None:
        self._request_ended(message.request_id, message.reason)

    @handles(LlmRetrying)
    def _on_llm_retrying(self, message: LlmRetrying) -> None:
        """A suggestion request is retried by the gateway; nothing to do until it ends."""

    def _request_ended(self, request_id: str, why: str) -> None:
        request = self._suggestion_request
        if request is not None and request.request_id == request_id:
            self._suggestion_request = None
            self.log.info("suggestion_failed", error=why)
            return
        spec = self._pipelined_owner(request_id)
        if spec is not None:
            spec.pipelined_request = None
            self.log.info("pipelined_suggestion_failed", speculation=spec.id, error=why)
            self._forget(spec)

    # -- the pipelined suggestion ---------------------------------------------------------------

    def _ask_pipelined(self, spec: Speculation) -> None:
        """After a completed speculation: predict the input after that (Tab-Tab-Tab).

        Asked at once, so that the speculation is complete -- and Tab applies
        it -- without waiting for this reply; it is delivered whenever it
        comes (see :meth:`_on_pipelined`).
        """
        result = spec.result
        if result is None or spec.pipelined_request is not None:
            return
        user = UserMessage(text=spec.suggestion.text)
        snapshot = extend(
            spec.snapshot, [user, *[i for i in result.items if not isinstance(i, UserMessage)]]
        )
        spec.pipelined_request = self._ask_for_suggestion(
            snapshot, f"{spec.id}-pipelined", "pipelined"
        )

    def _pipelined_owner(self, request_id: str) -> Speculation | None:
        for spec in self._specs.values():
            if (
                spec.pipelined_request is not None
                and spec.pipelined_request.request_id == request_id
            ):
                return spec
        return None

    def _cancel_pipelined(self, spec: Speculation, reason: str) -> None:
        if spec.pipelined_request is not None:
            spec.pipelined_request.scope.cancel(reason)
            spec.pipelined_request = None
            self._forget(spec)

    def _on_pipelined(self, spec: Speculation, message: LlmCompleted) -> None:
        spec.pipelined_request = None
        self._forget(spec)
        verdict = suggestion_from_reply(message.message.text)
        if not verdict.accepted:
            self.log.debug("pipelined_rejected", reason=str(verdict.reason), text=verdict.text)
            return
        spec.next_suggestion = verdict.text
        # Tab came first: the pipelined suggestion becomes current now -- unless
        # the user has done anything since (typed, submitted, a turn ended).
        if (
            spec.phase is SpecPhase.ACCEPTED
            and spec.accepted_snapshot is not None
            and spec.accept_epoch == self._epoch
            and self._suggestion is None
        ):
            self._set_suggestion(verdict.text, "pipelined", spec.accepted_snapshot)
