"""The alert sink: every user-facing warning and error of the runtime, in one place.

File references that do not resolve, a blob store that fails, a speculation
that crashes, a supervisor restarting a session's worker: each is an
:class:`~messages.alerts.Alert` told to this actor. It logs it (structlog, with
session and source), keeps a bounded history per session, and delivers it to
subscribers -- a session's event stream is one.

Why the subscribers and the history live in an :class:`AlertSinkState` rather
than in the actor: the sink is supervised, and a restarted incarnation starts
with empty fields. Kept there, every session's subscription and every kept
alert vanished on a crash -- sessions never re-subscribe, so their event
streams went silent for good and ``session.alerts`` forgot everything. The
state object is owned by whoever starts the sink and is handed to each
incarnation (the pattern of the worker's ``SessionState`` and the blob store's
``PinTable``): pass ``state=`` explicitly, or let the sink use the default
state of its actor system (one per system and ``registry_name``), which lives
exactly as long as the system -- i.e. the runtime -- does.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from typing import Any

from fore.actors.core.continuations import tell_quietly
from fore.actors.core.handlers import handles
from fore.actors.core.pooled import ForeActor
from fore.actors.core.system import ActorSystem
from fore.messages.alerts import (
    Alert,
    AlertLevel,
    ForgetSession,
    GetAlerts,
    SubscribeAlerts,
    UnsubscribeAlerts,
)

__all__ = ["DEFAULT_PER_SESSION", "AlertSink", "AlertSinkState", "send_alert"]

_LOG_LEVEL = {AlertLevel.INFO: "info", AlertLevel.WARN: "warning", AlertLevel.ERROR: "error"}

DEFAULT_PER_SESSION = 200
"""Alerts kept per session (and for the runtime-wide ``None`` session)."""


def send_alert(
    sink: Any, level: AlertLevel, text: str, *, session: str | None, source: str
) -> None:
    """Tell the runtime's alert ``sink`` an :class:`Alert`; nothing if there is none
    (a bare actor system) or it is gone (the runtime is closing)."""
    if sink is not None:
        tell_quietly(sink, Alert(level=level, text=text, session=session, source=source))


class AlertSinkState:
    """Subscribers and the bounded per-session history of an alert sink.

    Outlives any one incarnation of the :class:`AlertSink` actor. Thread-safe
    (a lock around plain dict/list updates): a killed incarnation's handler
    may still be finishing on its thread while the next one starts.
    """

    def __init__(self, per_session: int = DEFAULT_PER_SESSION) -> None:
        if per_session <= 0:
            raise ValueError("per_session must be positive")
        self.per_session = per_session
        self._lock = threading.Lock()
        self._kept: dict[str | None, deque[Alert]] = {}
        self._subscribers: list[tuple[Any, str | None]] = []

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"AlertSinkState({len(self._subscribers)} subscribers, {len(self._kept)} sessions)"
            )

    def keep(self, alert: Alert) -> list[Any]:
        """Record ``alert``; returns the addresses it must be delivered to, in order."""
        with self._lock:
            kept = self._kept.get(alert.session)
            if kept is None:
                kept = self._kept[alert.session] = deque(maxlen=self.per_session)
            kept.append(alert)
            return [
                address
                for address, session in self._subscribers
                if session is None or session == alert.session
            ]

    def subscribe(self, address: Any, session: str | None) -> None:
        with self._lock:
            self._subscribers.append((address, session))

    def unsubscribe(self, address: Any) -> None:
        """Drop every subscription of ``address`` (compared by identity)."""
        with self._lock:
            self._subscribers = [(a, s) for a, s in self._subscribers if a is not address]

    def history(self, session: str | None) -> tuple[Alert, ...]:
        with self._lock:
            return tuple(self._kept.get(session, ()))

    def forget(self, session: str) -> None:
        with self._lock:
            self._kept.pop(session, None)

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscribers)


_DEFAULTS_LOCK = threading.Lock()
_DEFAULTS: weakref.WeakKeyDictionary[ActorSystem, dict[str | None, AlertSinkState]] = (
    weakref.WeakKeyDictionary()
)


def default_state(
    system: ActorSystem, registry_name: str | None, per_session: int = DEFAULT_PER_SESSION
) -> AlertSinkState:
    """The state shared by every incarnation of the sink ``registry_name`` in ``system``.

    Created on first use and dropped with the system, so a sink started
    without an explicit ``state`` (as a supervisor restarts it) finds the
    subscribers and history of the incarnation before it.
    """
    with _DEFAULTS_LOCK:
        per_system = _DEFAULTS.setdefault(system, {})
        state = per_system.get(registry_name)
        if state is None:
            state = per_system[registry_name] = AlertSinkState(per_session)
        return state


class AlertSink(ForeActor):
    """Logs, keeps (bounded, per session) and fans out alerts.

    ``state`` holds the subscribers and history; without it the sink uses
    :func:`default_state` of its actor system, so a restart keeps both.
    ``per_session`` applies only when a new state is created.
    """

    def __init__(
        self,
        *,
        per_session: int = DEFAULT_PER_SESSION,
        registry_name: str | None = None,
        state: AlertSinkState | None = None,
    ) -> None:
        super().__init__()
        self.registry_name = registry_name
        self.state = (
            state if state is not None else default_state(self.system, registry_name, per_session)
        )
        self.per_session = self.state.per_session

    @handles(Alert)
    def _on_alert(self, alert: Alert) -> None:
        # The sink itself belongs to no session; the alert's session is the one to log.
        getattr(self.log.bind(session=alert.session), _LOG_LEVEL[alert.level])(
            "alert", text=alert.text, source=alert.source
        )
        for address in self.state.keep(alert):
            if not tell_quietly(address, alert):
                self.state.unsubscribe(address)

    @handles(SubscribeAlerts)
    def _on_subscribe(self, message: SubscribeAlerts) -> None:
        self.state.subscribe(message.address, message.session)

    @handles(UnsubscribeAlerts)
    def _on_unsubscribe(self, message: UnsubscribeAlerts) -> None:
        self.state.unsubscribe(message.address)

    @handles(GetAlerts)
    def _on_get(self, message: GetAlerts) -> tuple[Alert, ...]:
        return self.state.history(message.session)

    @handles(ForgetSession)
    def _on_forget(self, message: ForgetSession) -> None:
        self.state.forget(message.session)
