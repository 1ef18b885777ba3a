"""The session's front door: subscriptions, the worker's own commands, the status query.

``Session`` sends the controller every command, speculation on or off; the
ones for the worker alone (``Resume``, ``PauseRun``, ``GetHistory``,
``GetRunState``, ``CancelRun``) are forwarded with the asker's own reply
future (``Handle.forward``), so the worker answers the caller directly: the
front door costs one request hop and no reply hop. Event subscriptions of
the controller's own events (``Subscribe(kinds=...)``) are kept in the
session's :class:`~actors.speculation.base.SpeculationBook`, and what
``s.speculation`` answers is built here.
"""

from __future__ import annotations

from typing import Any

from pykka import ActorDeadError, ActorRef

from fore.actors.core.future import PooledFuture
from fore.actors.core.handlers import handles
from fore.actors.speculation.base import ControllerBase
from fore.actors.speculation.states import Teardown
from fore.actors.speculation.status import status_of
from fore.messages.runtime import GetChild
from fore.messages.session import (
    CancelRun,
    GetHistory,
    GetRunState,
    PauseRun,
    Resume,
    Subscribe,
    Unsubscribe,
)
from fore.messages.speculation import GetSpeculation, SpeculationStatus

__all__ = ["FrontDoor"]


class FrontDoor(ControllerBase):
    """Subscriptions, forwarding to the worker, and the status query (see the module docs)."""

    # -- subscribers (the session's event stream) -------------------------------------

    @handles(Subscribe)
    def _on_subscribe(self, message: Subscribe) -> None:
        self._subscribers.add(message.address, message.kinds)

    @handles(Unsubscribe)
    def _on_unsubscribe(self, message: Unsubscribe) -> None:
        self._subscribers.remove(message.address)

    @handles(GetChild)
    def _on_get_child(self, message: GetChild) -> ActorRef[Any] | None:
        """A speculation's live worker by its id (``speculation:<speculation id>``), for tests."""
        for spec in self._specs.values():
            if spec.child_id == message.child_id and spec.teardown in (
                Teardown.RUNNING,
                Teardown.STOPPING,
            ):
                return spec.worker
        return None

    # -- commands for the worker alone ---------------------------------------------------

    @handles(Resume, PauseRun, GetHistory, GetRunState, CancelRun)
    def _on_worker_command(self, message: Any) -> None:
        """Forwarded with the asker's own reply: the worker answers it directly.

        ``CancelRun`` arrives and leaves on the control lane (it cancels what the
        worker has; a cancel that must reach a submit still on its way goes through
        the submit's scope, ``SubmitPrompt.scope``).
        """
        self._forward(message, self._take_reply())

    def _take_reply(self) -> PooledFuture[Any] | None:
        """The current ask's reply, to hand on: unlike ``defer_reply`` it is not this actor's
        to answer when it exits (held submits are failed by ``on_stop`` explicitly)."""
        envelope = self._fore_current
        if envelope is None or not isinstance(envelope.reply_to, PooledFuture):
            return None
        reply = envelope.reply_to
        envelope.reply_to = None  # answered by the worker, not by this handler
        return reply

    def _forward(self, message: Any, reply: PooledFuture[Any] | None) -> None:
        """Hand ``message`` to the worker with the original asker's reply (no hop back)."""
        try:
            self._worker.forward(message, reply)
        except ActorDeadError:  # a tell to a worker gone for good: nobody waits for it
            self.log.debug("worker_gone", message=type(message).__name__)

    def _relay_to_worker(
        self, message: Any, reply: PooledFuture[Any] | None, *, timeout: float
    ) -> None:
        """Ask the worker; its answer or its failure settles ``reply`` (when someone asked)."""

        def done(answer: Any) -> None:
            if reply is not None:
                reply.try_set(answer)

        def failed(error: BaseException) -> None:
            if reply is not None:
                reply.try_set_exception(error)

        self.ask_then(self._worker, message, then=done, on_error=failed, timeout=timeout)

    # -- the status ----------------------------------------------------------------------

    @handles(GetSpeculation)
    def _on_get(self, _message: GetSpeculation) -> tuple[SpeculationStatus, str | None]:
        return self._status_now()

    def _status_now(self) -> tuple[SpeculationStatus, str | None]:
        """The current speculation's status and the suggestion on offer."""
        spec = self._status_spec
        status = status_of(spec) if spec is not None else self._last_status
        shown = self._suggestion if self._shown else None
        return status, (shown.text if shown is not None else None)
