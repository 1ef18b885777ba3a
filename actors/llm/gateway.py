"""The LLM gateway actor: the message front of the :class:`~actors.llm.loop.LlmLoop`.

Requests and cancellations arrive as typed messages (cancellation on the
control lane, so it overtakes queued requests -- even its own request, which
the loop then answers with ``LlmCancelled`` without sending it); the actor
hands them to the loop thread and returns at once -- it never waits on HTTP.
Stream events go from the loop straight to each request's ``reply_to``.
"""

from __future__ import annotations

from actors.core.pooled import PooledActor, handles
from actors.llm.loop import LlmLoop
from messages.llm import CancelLlmRequest, GatewayStats, GetGatewayStats, LlmRequest


class LlmGateway(PooledActor):
    """Fronts one :class:`LlmLoop` (shared by every session of a runtime)."""

    def __init__(self, loop: LlmLoop, *, registry_name: str | None = None) -> None:
        super().__init__()
        self.registry_name = registry_name
        self._loop = loop

    @handles(LlmRequest)
    def _on_request(self, request: LlmRequest) -> None:
        if request.model is None:
            raise ValueError(
                "LlmRequest.model is required (a ScriptedModel, FunctionModel or OpenAICompatible)"
            )
        if request.reply_to is None:
            raise ValueError("LlmRequest.reply_to is required")
        self._loop.submit(request)

    @handles(CancelLlmRequest)
    def _on_cancel(self, message: CancelLlmRequest) -> None:
        self._loop.cancel(message.request_id, message.reason)

    @handles(GetGatewayStats)
    def _on_stats(self, _message: GetGatewayStats) -> GatewayStats:
        return self._loop.stats()
