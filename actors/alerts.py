"""The alert sink: every user-facing warning and error of the runtime, in one place.

File references that do not resolve, a blob store that fails, a speculation
that crashes, a supervisor restarting a session's worker: each is an
:class:`~messages.alerts.Alert` told to this actor. It logs it (structlog, with
session and source), keeps a bounded history per session, and delivers it to
subscribers -- a session's event stream is one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pykka import ActorDeadError

from actors.core.pooled import PooledActor, handles
from messages.alerts import (
    Alert,
    AlertLevel,
    ForgetSession,
    GetAlerts,
    SubscribeAlerts,
    UnsubscribeAlerts,
)

_LOG_LEVEL = {AlertLevel.INFO: "info", AlertLevel.WARN: "warning", AlertLevel.ERROR: "error"}


class AlertSink(PooledActor):
    """Logs, keeps (bounded, per session) and fans out alerts."""

    def __init__(self, *, per_session: int = 200, registry_name: str | None = None) -> None:
        super().__init__()
        self.registry_name = registry_name
        self.per_session = per_session
        self._kept: dict[str | None, deque[Alert]] = {}
        self._subscribers: list[tuple[Any, str | None]] = []

    @handles(Alert)
    def _on_alert(self, alert: Alert) -> None:
        # The sink itself belongs to no session; the alert's session is the one to log.
        getattr(self.log.bind(session=alert.session), _LOG_LEVEL[alert.level])(
            "alert", text=alert.text, source=alert.source
        )
        kept = self._kept.get(alert.session)
        if kept is None:
            kept = self._kept[alert.session] = deque(maxlen=self.per_session)
        kept.append(alert)
        for address, session in list(self._subscribers):
            if session is not None and session != alert.session:
                continue
            try:
                address.tell(alert)
            except ActorDeadError:
                self._subscribers.remove((address, session))

    @handles(SubscribeAlerts)
    def _on_subscribe(self, message: SubscribeAlerts) -> None:
        self._subscribers.append((message.address, message.session))

    @handles(UnsubscribeAlerts)
    def _on_unsubscribe(self, message: UnsubscribeAlerts) -> None:
        self._subscribers = [(a, s) for a, s in self._subscribers if a is not message.address]

    @handles(GetAlerts)
    def _on_get(self, message: GetAlerts) -> tuple[Alert, ...]:
        return tuple(self._kept.get(message.session, ()))

    @handles(ForgetSession)
    def _on_forget(self, message: ForgetSession) -> None:
        self._kept.pop(message.session, None)
